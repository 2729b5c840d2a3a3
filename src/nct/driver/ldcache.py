"""A reader for glibc's ld.so.cache, both layouts.

- old "ld.so-1.7.0": 11-byte magic, uint32 nlibs at offset 12, then nlibs entries of
  (int32 flags, uint32 key, uint32 value); string offsets count from the end of the entries.
  Older glibc ("compat" format) hides a complete new-format cache right after those entries.
- new "glibc-ld.so.cache1.1": 48-byte header (magic, version, nlibs, len_strings, endian flags,
  extension_offset), then 24-byte entries (flags, key, value, osversion, hwcap); string offsets
  count from the start of the new header. An optional extension block names glibc-hwcaps subdirs.

We read the file ourselves (no ldconfig -p) so a driver root's cache can be parsed without
running anything from it.
"""

from __future__ import annotations

import struct

from nct.driver import fsview
from nct.errors import DiscoveryError
from nct.record import Record

OLD_MAGIC = b"ld.so-1.7.0"
NEW_MAGIC = b"glibc-ld.so.cache1.1"
EXTENSION_MAGIC = 0xEAA42174
HWCAP_EXTENSION = 1 << 62

FLAG_TYPE_MASK = 0x00FF
FLAG_ELF_LIBC6 = 0x0003
FLAG_REQUIRED_MASK = 0xFF00

# Required-ABI part of the flags -> what `ldconfig -p` prints after "libc6,".
ARCH_FLAGS: dict[int, str] = {
    0x0000: "",  # 32-bit / native default (i386, arm soft-float default...)
    0x0100: "SPARC 64-bit", 0x0200: "IA-64", 0x0300: "x86-64", 0x0400: "64bit",
    0x0500: "64bit", 0x0600: "N32", 0x0700: "64bit", 0x0800: "x32", 0x0900: "hard-float",
    0x0A00: "AArch64", 0x0B00: "soft-float", 0x0C00: "nan2008", 0x0D00: "N32,nan2008",
    0x0E00: "64bit,nan2008", 0x0F00: "soft-float", 0x1000: "double-float",
    0x1100: "soft-float", 0x1200: "double-float",
}

# Machine (uname -m) -> (flags of its native 64-bit libraries, flags of its 32-bit libraries or None).
NATIVE_FLAGS: dict[str, tuple[int, int | None]] = {
    "x86_64": (FLAG_ELF_LIBC6 | 0x0300, FLAG_ELF_LIBC6),
    "aarch64": (FLAG_ELF_LIBC6 | 0x0A00, None),
    "ppc64le": (FLAG_ELF_LIBC6 | 0x0500, None),
}


class CacheEntry(Record):
    """One cache line: `key` is the name looked up (usually a SONAME), `path` the file;
    `hwcaps_subdir` names glibc-hwcaps/<name> entries (glibc >= 2.33)."""

    key: str
    path: str
    flags: int
    hwcap: int = 0
    hwcaps_subdir: str | None = None

    @property
    def arch(self) -> str:
        """`ldconfig -p` style description, e.g. 'libc6,x86-64'."""
        kind = "libc6" if self.flags & FLAG_TYPE_MASK == FLAG_ELF_LIBC6 else f"type{self.flags & FLAG_TYPE_MASK}"
        extra = ARCH_FLAGS.get(self.flags & FLAG_REQUIRED_MASK, f"0x{self.flags & FLAG_REQUIRED_MASK:x}")
        return f"{kind},{extra}" if extra else kind


class LdCache(Record):
    """A parsed cache: `format` is "old", "new" or "compat" (old followed by new);
    `generator` e.g. "ldconfig (GNU libc) stable release version 2.36"."""

    path: str
    format: str
    entries: tuple[CacheEntry, ...]
    generator: str | None = None


def _cstr(data: bytes, offset: int, path: str) -> str:
    if not 0 <= offset < len(data):
        raise DiscoveryError(f"{path}: corrupt ld.so.cache (string offset {offset} outside the file)")
    end = data.find(b"\0", offset)
    if end < 0:
        raise DiscoveryError(f"{path}: corrupt ld.so.cache (unterminated string at {offset})")
    return data[offset:end].decode("utf-8", "surrogateescape")


def _parse_new(data: bytes, base: int, path: str) -> tuple[list[CacheEntry], str | None]:
    if len(data) < base + 48:
        raise DiscoveryError(f"{path}: corrupt ld.so.cache (truncated header)")
    endian_flag = data[base + 28] & 3
    if endian_flag == 1:
        raise DiscoveryError(f"{path}: corrupt ld.so.cache (invalid endianness flag)")
    bo = ">" if endian_flag == 3 else "<"
    nlibs, _len_strings = struct.unpack_from(bo + "II", data, base + 20)
    (ext_offset,) = struct.unpack_from(bo + "I", data, base + 32)
    first = base + 48
    if first + nlibs * 24 > len(data):
        raise DiscoveryError(f"{path}: corrupt ld.so.cache ({nlibs} entries do not fit in {len(data)} bytes)")
    hwcaps: list[str] = []
    generator = None
    if ext_offset:
        # glibc: extension offsets count from the start of the file, not of this header.
        hwcaps, generator = _parse_extension(data, base, ext_offset, bo, path)
    entries = []
    find = data.find
    for flags, key, value, _osv, hwcap in struct.iter_unpack(bo + "iIIIQ", data[first:first + nlibs * 24]):
        subdir = None
        if hwcap & HWCAP_EXTENSION:
            idx = hwcap & 0xFFFFFFFF
            subdir = hwcaps[idx] if idx < len(hwcaps) else None
        ks, vs = base + key, base + value
        ke, ve = find(b"\0", ks), find(b"\0", vs)  # -1 also when the offset is past the end
        if ke < 0 or ve < 0:  # _cstr raises the error naming the bad string
            k, v = _cstr(data, ks, path), _cstr(data, vs, path)
        else:
            k, v = data[ks:ke].decode("utf-8", "surrogateescape"), data[vs:ve].decode("utf-8", "surrogateescape")
        entries.append(CacheEntry(k, v, flags & 0xFFFFFFFF, hwcap, subdir))
    return entries, generator


def _parse_extension(data: bytes, base: int, at: int, bo: str, path: str) -> tuple[list[str], str | None]:
    if at + 8 > len(data):
        raise DiscoveryError(f"{path}: corrupt ld.so.cache (extension outside the file)")
    magic, count = struct.unpack_from(bo + "II", data, at)
    if magic != EXTENSION_MAGIC:
        return [], None  # not an extension block: ignore as glibc does
    if at + 8 + count * 16 > len(data):
        raise DiscoveryError(f"{path}: corrupt ld.so.cache (truncated extension)")
    hwcaps: list[str] = []
    generator = None
    for i in range(count):
        tag, _flags, offset, size = struct.unpack_from(bo + "IIII", data, at + 8 + i * 16)
        if offset + size > len(data):
            raise DiscoveryError(f"{path}: corrupt ld.so.cache (extension section outside the file)")
        if tag == 0:  # generator string (not NUL-terminated)
            generator = data[offset:offset + size].decode("utf-8", "replace")
        elif tag == 1:  # glibc-hwcaps subdirectory names: uint32 string offsets
            for j in range(size // 4):
                (off,) = struct.unpack_from(bo + "I", data, offset + 4 * j)
                hwcaps.append(_cstr(data, base + off, path))
    return hwcaps, generator


def parse_ldcache(data: bytes, path: str = "ld.so.cache") -> LdCache:
    """Parse cache bytes. Corrupt or truncated data raises DiscoveryError naming `path`."""
    if data.startswith(NEW_MAGIC):
        entries, gen = _parse_new(data, 0, path)
        return LdCache(path, "new", tuple(entries), gen)
    if not data.startswith(OLD_MAGIC):
        raise DiscoveryError(f"{path}: not an ld.so.cache (bad magic)")
    if len(data) < 16:
        raise DiscoveryError(f"{path}: corrupt ld.so.cache (truncated header)")
    (nlibs,) = struct.unpack_from("<I", data, 12)
    end = 16 + nlibs * 12
    if end > len(data):
        raise DiscoveryError(f"{path}: corrupt ld.so.cache ({nlibs} entries do not fit in {len(data)} bytes)")
    # A new-format cache may follow, aligned to 8 bytes (glibc's compat format): prefer it,
    # as glibc does, since it carries the hwcap information.
    new_at = (end + 7) & ~7
    if data[new_at:new_at + len(NEW_MAGIC)] == NEW_MAGIC:
        entries, gen = _parse_new(data, new_at, path)
        return LdCache(path, "compat", tuple(entries), gen)
    old = []
    for i in range(nlibs):
        flags, key, value = struct.unpack_from("<iII", data, 16 + i * 12)
        old.append(CacheEntry(_cstr(data, end + key, path), _cstr(data, end + value, path), flags & 0xFFFFFFFF))
    return LdCache(path, "old", tuple(old))


def read_ldcache(path: str, display: str | None = None) -> LdCache:
    """Read and parse a cache file; `display` is the name used in errors (default: path)."""
    name = display or path
    try:
        f = fsview.open_binary(path)[0]
        with f:
            data = f.read(64 << 20)
    except FileNotFoundError:
        raise DiscoveryError(f"{name}: ld.so.cache not found") from None
    except OSError as e:
        raise DiscoveryError(f"cannot read {name}: {e.strerror or e}") from None
    return parse_ldcache(data, name)
