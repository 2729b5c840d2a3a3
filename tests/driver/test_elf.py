"""ELF filtering with real gcc output: 64-bit, 32-bit, foreign arch (patched e_machine),
missing/mismatching SONAME, executables, truncated and non-ELF files."""

from __future__ import annotations

import struct

import pytest

import treebuilder
from nct.driver.elf import check_library, read_elf

pytestmark = pytest.mark.skipif(not treebuilder.have_gcc(), reason="needs gcc to build ELF files")
EM_AARCH64 = 183


@pytest.fixture(scope="module")
def objs(tmp_path_factory):
    d = tmp_path_factory.mktemp("elf")
    o = {
        "good": treebuilder.link_lib(d / "libcuda.so.550.54.15", "libcuda.so.1"),
        "nosoname": treebuilder.link_lib(d / "nosoname.so", None),
        "wrongsoname": treebuilder.link_lib(d / "wrong.so", "libfoo.so.1"),
    }
    exe_src = d / "main.c"
    exe_src.write_text("int main(void) { return 0; }\n")
    import subprocess

    subprocess.run(["gcc", "-no-pie", "-o", str(d / "exe"), str(exe_src)], check=True, capture_output=True)
    o["exec"] = d / "exe"
    foreign = bytearray(o["good"].read_bytes())
    struct.pack_into("<H", foreign, 18, EM_AARCH64)  # e_machine
    (d / "aarch64.so").write_bytes(bytes(foreign))
    o["aarch64"] = d / "aarch64.so"
    (d / "trunc.so").write_bytes(o["good"].read_bytes()[:40])
    o["trunc"] = d / "trunc.so"
    (d / "trunc2.so").write_bytes(o["good"].read_bytes()[:2000])
    o["trunc2"] = d / "trunc2.so"
    (d / "text.so").write_text("INPUT(libcuda.so.1)\n")  # a linker script, as some distros ship
    o["text"] = d / "text.so"
    if treebuilder.gcc_m32():
        o["m32"] = treebuilder.link_lib(d / "m32" / "libcuda.so.550.54.15", "libcuda.so.1", m32=True)
    return o


def test_read_elf_facts(objs):
    info = read_elf(str(objs["good"]))
    assert (info.elf_class, info.machine, info.soname, info.elf_type) == (64, "EM_X86_64", "libcuda.so.1", "ET_DYN")
    assert "libc.so.6" in info.needed


def test_native_accepts_64bit(objs):
    info, reason = check_library(str(objs["good"]), "libcuda.so", compat32=False, machine="x86_64")
    assert info is not None and reason == ""


def test_32bit_only_in_compat32_set(objs):
    if "m32" not in objs:
        pytest.skip("gcc -m32 unavailable")
    info, reason = check_library(str(objs["m32"]), "libcuda.so", compat32=False, machine="x86_64")
    assert info is None and "wrong architecture (ELF32 EM_386" in reason
    info, _ = check_library(str(objs["m32"]), "libcuda.so", compat32=True, machine="x86_64")
    assert info is not None and info.elf_class == 32
    # and a 64-bit library never passes as 32-bit
    assert check_library(str(objs["good"]), "libcuda.so", compat32=True, machine="x86_64")[0] is None


def test_foreign_arch_rejected(objs):
    info, reason = check_library(str(objs["aarch64"]), "libcuda.so", compat32=False, machine="x86_64")
    assert info is None and "EM_AARCH64" in reason
    # ... but it is what an aarch64 node wants
    assert check_library(str(objs["aarch64"]), "libcuda.so", compat32=False, machine="aarch64")[0] is not None
    assert check_library(str(objs["good"]), "libcuda.so", compat32=True, machine="aarch64")[1] == \
        "no 32-bit ABI on this architecture"


@pytest.mark.parametrize("key,reason", [
    ("nosoname", "no SONAME"),
    ("wrongsoname", "SONAME libfoo.so.1 does not belong to libcuda.so"),
    ("exec", "not a shared object (ET_EXEC)"),
    ("trunc", "truncated or corrupt ELF"),
    ("trunc2", "corrupt ELF"),
    ("text", "not an ELF file"),
])
def test_rejections(objs, key, reason):
    info, why = check_library(str(objs[key]), "libcuda.so", compat32=False, machine="x86_64")
    assert info is None and reason in why


def test_missing_file(tmp_path):
    info, why = check_library(str(tmp_path / "none.so"), "libcuda.so", compat32=False)
    assert info is None and why.startswith("unreadable")
