"""The hook's struct-only ELF reader answers exactly as the pyelftools one (nct.driver.elf)
on real files (host libraries and binaries, 32- and 64-bit, gcc-built objects) and turns
broken files into NotElf."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess

import pytest

from nct.driver import elf
from nct.hook import fastelf

pyelftools_read = elf.read_elf  # the reference (fastelf.install() is never called in tests)


def real_files() -> list[str]:
    pats = ["/lib/x86_64-linux-gnu/lib*.so*", "/usr/lib/x86_64-linux-gnu/lib*.so*", "/usr/lib32/lib*.so*",
            "/lib32/lib*.so*", "/usr/bin/*", "/sbin/ldconfig*"]
    files = []
    for p in pats:
        files += [f for f in sorted(glob.glob(p)) if os.path.isfile(f) and not os.path.islink(f)][:40]
    return files


def same(path: str):
    try:
        want = pyelftools_read(path)
    except elf.NotElf:
        want = None
    try:
        got = fastelf.read_elf(path)
    except elf.NotElf:
        got = None
    return got, want


def test_host_files_agree():
    files = real_files()
    assert len(files) > 20
    checked = 0
    for f in files:
        got, want = same(f)
        if want is None:
            continue  # scripts and friends; fastelf may accept some pyelftools chokes on, see below
        assert got == want, f
        checked += 1
    assert checked > 20


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
@pytest.mark.parametrize("flags", [["-shared", "-fPIC", "-Wl,-soname,libx.so.1"], ["-shared", "-fPIC"], []])
@pytest.mark.parametrize("m32", [False, True])
def test_gcc_objects_agree(tmp_path, flags, m32):
    src = tmp_path / "x.c"
    src.write_text("int f(void){return 1;}\nint main(void){return 0;}\n")
    out = tmp_path / "x.so"
    args = ["gcc", *flags, *(["-m32"] if m32 else []), "-o", str(out), str(src), "-lm"]
    if subprocess.run(args, capture_output=True).returncode != 0:
        pytest.skip("gcc cannot build this variant here")
    got, want = same(str(out))
    assert got == want and got is not None
    if "-Wl,-soname,libx.so.1" in flags:
        assert got.soname == "libx.so.1"


def test_broken_files(tmp_path):
    lib = sorted(glob.glob("/lib/x86_64-linux-gnu/libc.so.6"))[0]
    data = open(lib, "rb").read()
    cases = {"empty": b"", "text": b"#!/bin/sh\n", "magic-only": b"\x7fELF", "header": data[:64],
             "half": data[: len(data) // 50], "badclass": b"\x7fELF\x07" + data[5:4096]}
    for name, blob in cases.items():
        p = tmp_path / name
        p.write_bytes(blob)
        with pytest.raises(elf.NotElf):
            fastelf.read_elf(str(p))
    with pytest.raises(elf.NotElf, match="unreadable"):
        fastelf.read_elf(str(tmp_path / "missing"))


def test_install_switches_discovery_reader():
    saved = elf.read_elf
    try:
        fastelf.install()
        assert elf.read_elf is fastelf.read_elf
    finally:
        elf.read_elf = saved
