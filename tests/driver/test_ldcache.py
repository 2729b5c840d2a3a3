"""ld.so.cache reader: caches written by the real ldconfig (new, compat, old formats), a
hand-built old-format file, and corrupt/truncated input."""

from __future__ import annotations

import shutil
import struct
import subprocess
from pathlib import Path

import pytest

import treebuilder
from nct.driver.ldcache import OLD_MAGIC, parse_ldcache, read_ldcache
from nct.errors import DiscoveryError

LDCONFIG = shutil.which("ldconfig") or "/sbin/ldconfig"
needs_tools = pytest.mark.skipif(not treebuilder.have_gcc() or not Path(LDCONFIG).exists(),
                                 reason="needs gcc and ldconfig")


def old_part(data: bytes) -> set[tuple[str, str]]:
    """(key, path) of the old-format table at the start of a compat cache, read by hand
    (parse_ldcache prefers the new-format part that follows it, as glibc does)."""
    assert data.startswith(OLD_MAGIC)
    (nlibs,) = struct.unpack_from("<I", data, 12)
    end = 16 + nlibs * 12

    def cstr(at: int) -> str:
        return data[at:data.index(b"\0", at)].decode()

    return {(cstr(end + k), cstr(end + v))
            for _f, k, v in (struct.unpack_from("<iII", data, 16 + i * 12) for i in range(nlibs))}


def build_old_cache(entries: list[tuple[int, str, str]]) -> bytes:
    """glibc's "ld.so-1.7.0" layout: magic[11], pad to 12, uint32 nlibs, nlibs x
    (int32 flags, uint32 key, uint32 value), then the strings; offsets count from the end
    of the entry table."""
    strings = bytearray()
    table = []
    for flags, key, value in entries:
        k = len(strings)
        strings += key.encode() + b"\0"
        v = len(strings)
        strings += value.encode() + b"\0"
        table.append(struct.pack("<iII", flags, k, v))
    return b"ld.so-1.7.0\0" + struct.pack("<I", len(entries)) + b"".join(table) + bytes(strings)


@pytest.fixture(scope="module")
def libdir(tmp_path_factory):
    if not treebuilder.have_gcc() or not Path(LDCONFIG).exists():
        pytest.skip("needs gcc and ldconfig")
    d = tmp_path_factory.mktemp("ldc")
    lib = d / "lib64"
    treebuilder.link_lib(lib / "libnctfoo.so.550.54.15", "libnctfoo.so.1")
    (lib / "libnctfoo.so.1").symlink_to("libnctfoo.so.550.54.15")
    hw = lib / "glibc-hwcaps" / "x86-64-v2"
    treebuilder.link_lib(hw / "libnctfoo.so.550.54.15", "libnctfoo.so.1")
    if treebuilder.gcc_m32():
        treebuilder.link_lib(d / "lib32" / "libnctfoo.so.550.54.15", "libnctfoo.so.1", m32=True)
        (d / "lib32" / "libnctfoo.so.1").symlink_to("libnctfoo.so.550.54.15")
    conf = d / "ld.so.conf"
    conf.write_text(f"{d / 'lib64'}\n{d / 'lib32'}\n")
    return d


def make_cache(d: Path, fmt: str) -> Path:
    out = d / f"cache.{fmt}"
    subprocess.run([LDCONFIG, "-X", "-c", fmt, "-C", str(out), "-f", str(d / "ld.so.conf")],
                   check=True, capture_output=True)
    return out


def ours(cache, d: Path):
    return sorted((e.key, e.path, e.arch, e.hwcaps_subdir) for e in cache.entries if str(d) in e.path)


@needs_tools
@pytest.mark.parametrize("fmt", ["new", "compat", "old"])
def test_real_ldconfig_formats(libdir, fmt):
    path = make_cache(libdir, fmt)
    cache = read_ldcache(str(path))
    assert cache.format == fmt
    got = ours(cache, libdir)
    assert ("libnctfoo.so.1", f"{libdir}/lib64/libnctfoo.so.1", "libc6,x86-64", None) in got
    if treebuilder.gcc_m32():
        assert ("libnctfoo.so.1", f"{libdir}/lib32/libnctfoo.so.1", "libc6", None) in got
    if fmt != "old":
        assert ("libnctfoo.so.1", f"{libdir}/lib64/glibc-hwcaps/x86-64-v2/libnctfoo.so.550.54.15",
                "libc6,x86-64", "x86-64-v2") in got
        assert cache.generator and "ldconfig" in cache.generator
    # Same entries as `ldconfig -p` prints for this cache.
    p = subprocess.run([LDCONFIG, "-p", "-C", str(path)], capture_output=True, text=True, check=True).stdout
    assert len(cache.entries) == int(p.split()[0])


@needs_tools
def test_compat_old_part_matches_new_part(libdir):
    data = make_cache(libdir, "compat").read_bytes()
    old = old_part(data)
    new = {(e.key, e.path) for e in parse_ldcache(data).entries}
    assert old == new


def test_hand_built_old_format():
    data = build_old_cache([
        (0x0303, "libcuda.so.1", "/usr/lib/x86_64-linux-gnu/libcuda.so.1"),
        (0x0003, "libcuda.so.1", "/usr/lib/i386-linux-gnu/libcuda.so.1"),
        (0x0A03, "libcuda.so.1", "/usr/lib/aarch64-linux-gnu/libcuda.so.1"),
    ])
    cache = parse_ldcache(data, "hand")
    assert cache.format == "old"
    assert [(e.key, e.path, e.arch) for e in cache.entries] == [
        ("libcuda.so.1", "/usr/lib/x86_64-linux-gnu/libcuda.so.1", "libc6,x86-64"),
        ("libcuda.so.1", "/usr/lib/i386-linux-gnu/libcuda.so.1", "libc6"),
        ("libcuda.so.1", "/usr/lib/aarch64-linux-gnu/libcuda.so.1", "libc6,AArch64"),
    ]


@pytest.mark.parametrize("data,what", [
    (b"", "bad magic"),
    (b"ELF\0garbage" * 4, "bad magic"),
    (b"ld.so-1.7.0\0", "truncated header"),
    (b"ld.so-1.7.0\0" + struct.pack("<I", 1000) + b"\0" * 12, "entries do not fit"),
    (b"ld.so-1.7.0\0" + struct.pack("<I", 1) + struct.pack("<iII", 0x303, 500, 0), "outside the file"),
    (b"ld.so-1.7.0\0" + struct.pack("<I", 1) + struct.pack("<iII", 0x303, 0, 0) + b"unterminated", "unterminated"),
    (b"glibc-ld.so.cache1.1" + b"\0" * 10, "truncated header"),
])
def test_corrupt(data, what):
    with pytest.raises(DiscoveryError) as e:
        parse_ldcache(data, "/etc/ld.so.cache")
    assert str(e.value).startswith("/etc/ld.so.cache: ") and what in str(e.value)


@needs_tools
def test_truncated_real_cache(libdir, tmp_path):
    data = make_cache(libdir, "new").read_bytes()
    for cut in (30, 48 + 24 * 3, len(data) // 2):
        f = tmp_path / f"cut{cut}"
        f.write_bytes(data[:cut])
        with pytest.raises(DiscoveryError, match=str(f)):
            read_ldcache(str(f))


def test_missing_and_unreadable(tmp_path):
    with pytest.raises(DiscoveryError, match="not found"):
        read_ldcache(str(tmp_path / "none"))
    with pytest.raises(DiscoveryError, match="cannot read"):
        read_ldcache(str(tmp_path))  # a directory
