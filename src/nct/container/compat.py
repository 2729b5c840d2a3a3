"""CUDA forward compatibility: decide whether the image's compat libcuda should win over the
host driver, and if so record its directory in an ld.so.conf.d file (never bind image files
onto image paths). The image's libcuda is hostile input: read with bounds, in-root only."""

from __future__ import annotations

import os
import stat
import struct

from nct import jsonio
from nct.container.rootfs import Root, open_regular
from nct.errors import ContainerError

DEFAULT_COMPAT_DIR = "/usr/local/cuda/compat"
NOTE_SECTION = b".note.cuda.fwd_compatibility"
_MAX_ELF = 512 << 20


def _int(s: str) -> int | None:
    """int(s) for a plain decimal number, else None ("²" is a digit to str.isdigit, not to int;
    int() also refuses more than 4300 digits)."""
    if not s.isdecimal() or not s.isascii():
        return None
    try:
        return int(s)
    except ValueError:
        return None


def parse_version(v: str | None) -> tuple[int, int, int] | None:
    """MAJOR[.MINOR[.PATCH]] as numbers (leading zeros allowed, "v" prefix and a -pre/+build
    suffix ignored), as upstream's lenient semver parse; None when it is not a version."""
    if not v:
        return None
    v = v.strip()
    v = v[1:] if v[:1] in ("v", "V") else v
    for sep in ("+", "-"):
        v = v.split(sep, 1)[0]
    parts = v.split(".")
    if not 1 <= len(parts) <= 3:
        return None
    nums = [_int(p) for p in parts]
    if any(n is None for n in nums):
        return None
    nums += [0] * (3 - len(nums))
    return (nums[0], nums[1], nums[2])  # type: ignore[return-value]


class BadNote(ValueError):
    """The note is there but its JSON is not what upstream can decode."""


def _json_fields(obj: dict, name: str) -> list:
    """Values of every key that Go's decoder maps onto field `name` (equal ignoring case), in
    document order: each one is decoded (a wrong type anywhere is an error), the last wins."""
    return [v for k, v in obj.items() if k.lower() == name.lower()]


def decode_note(desc: bytes) -> dict:
    """{"cuda": str, "driver": [branch...], "device": [...]} from the note's JSON. Raises
    BadNote where upstream's decoder fails (not JSON, not an object, wrong field types)."""
    try:
        obj = jsonio.loads(desc.decode())
    except (UnicodeDecodeError, ValueError):
        raise BadNote("not JSON") from None
    if not isinstance(obj, dict):
        raise BadNote("not a JSON object")
    out: dict = {"cuda": "", "driver": [], "device": []}
    for cuda in _json_fields(obj, "CUDA Version"):
        if cuda is not None and not isinstance(cuda, str):
            raise BadNote("CUDA Version is not a string")
        out["cuda"] = cuda or ""
    for key in ("driver", "device"):
        for vals in _json_fields(obj, key):
            # Go decodes into []int: JSON integers within int64 only ("570.0" or 2**63 fail);
            # null leaves the field empty
            if vals is not None and (not isinstance(vals, list) or not all(
                    type(x) is int and -(1 << 63) <= x < 1 << 63 for x in vals)):
                raise BadNote(f"{key} is not a list of integers")
            out[key] = vals or []
    return out


_ELF_CLASSES = {1: (52, 0x20, 0x2E, 40, "IIIIIIIIII"), 2: (64, 0x28, 0x3A, 64, "IIQQQQIIQQ")}
SHT_NOTE = 7
NOTE_NAME = b"NVIDIA Corporation"


def read_fwd_note(fd: int) -> dict | None:
    """The decoded `.note.cuda.fwd_compatibility` note of an ELF file of any class, byte order
    or machine (an aarch64 or 32-bit compat lib is read the same way, as upstream's ELF reader
    does). None when the file is not ELF, has no such SHT_NOTE section or the note is not
    NVIDIA's; raises BadNote when the note's JSON cannot be decoded."""
    size = os.fstat(fd).st_size
    if size < 52 or size > _MAX_ELF:
        return None
    hdr = os.pread(fd, 64, 0)  # shorter than fstat said when the file shrank meanwhile
    if len(hdr) < 52 or hdr[:4] != b"\x7fELF" or hdr[4] not in _ELF_CLASSES or hdr[5] not in (1, 2):
        return None
    ehsize, shoff_at, shnum_at, shsize, shfmt = _ELF_CLASSES[hdr[4]]
    end = "<" if hdr[5] == 1 else ">"
    if len(hdr) < ehsize:
        return None
    shoff, = struct.unpack_from(end + ("I" if hdr[4] == 1 else "Q"), hdr, shoff_at)
    shentsize, shnum, shstrndx = struct.unpack_from(end + "HHH", hdr, shnum_at)
    if shentsize != shsize or shnum == 0 or shnum > 4096 or shoff + shnum * shsize > size or shstrndx >= shnum:
        return None
    table = os.pread(fd, shnum * shsize, shoff)
    sections = [struct.unpack_from(end + shfmt, table, i * shsize) for i in range(shnum)]
    strtab = sections[shstrndx]
    if strtab[5] > 1 << 20 or strtab[4] + strtab[5] > size:
        return None
    names = os.pread(fd, strtab[5], strtab[4])
    for sec in sections:
        stop = names.find(b"\0", sec[0])
        if sec[1] != SHT_NOTE or names[sec[0]:stop if stop >= 0 else len(names)] != NOTE_SECTION:
            continue
        off, length, align = sec[4], sec[5], sec[8]
        if length > 1 << 16 or off + length > size:
            return None
        data = os.pread(fd, length, off)
        if len(data) < 12:
            return None
        namesz, descsz, _ = struct.unpack_from(end + "III", data, 0)
        if namesz == 0 or descsz == 0:
            return None
        # Name and description are padded to the section's alignment (upstream's reading);
        # slices are clamped to the section, and NULs trimmed from both ends.
        name_pad = (namesz + align - 1) & ~(align - 1) if align else 0
        name = data[12:12 + name_pad].strip(b"\0")
        if name != NOTE_NAME:
            return None
        desc = data[12 + name_pad:12 + name_pad + descsz].strip(b"\0")
        return decode_note(desc)
    return None


def use_compat(note: dict | None, compat_version: str, host_driver: str | None,
               host_cuda: str | None) -> bool:
    """enable-cuda-compat's rule (upstream nvidia-cdi-hook). With a note: when the compat lib's
    and the host driver's versions are known, the host's branch (major) must be one of the
    note's `Driver` branches and the compat lib strictly newer than the host driver (so a
    newer build of the host's own branch is used, an older one not); without driver versions,
    the note's CUDA version must be newer than the host's. Without a (decodable) note: the
    compat lib's major must be greater than the host driver's."""
    compat_v = parse_version(compat_version)
    host_v = parse_version(host_driver)
    if note is not None:
        if compat_v is None or host_v is None:
            cuda_v, host_cuda_v = parse_version(note.get("cuda")), parse_version(host_cuda)
            return cuda_v is not None and host_cuda_v is not None and cuda_v > host_cuda_v
        return host_v[0] in note["driver"] and compat_v > host_v
    if compat_v is None or host_v is None:
        return False
    return compat_v[0] > host_v[0]


def legacy_use_compat(compat_version: str, host_driver: str | None) -> bool:
    """libnvidia-container's rule (the legacy hook, `nvidia-container-cli configure`): no note
    is read; the compat lib is used when its major is greater than the host driver's. (Its
    mount mode also mounts lower majors next to the host's libcuda, where ldconfig still
    prefers the host's newer file, so nct treats mount as ldconfig.)"""
    compat_v, host_v = parse_version(compat_version), parse_version(host_driver)
    return compat_v is not None and host_v is not None and compat_v[0] > host_v[0]


# Entries of the image's compat dir looked at (a real one has about ten): past it, no compat.
MAX_COMPAT_NAMES = 1 << 16


def compat_libcuda(root: Root, compat_dir: str) -> tuple[str, str] | None:
    """(container path, version) of the single regular libcuda.so.X.Y in the compat dir. The
    image's directory is read up to MAX_COMPAT_NAMES entries (more: None), and a second
    candidate ends the search (None): the cost never grows with what the image holds."""
    names = root.listdir(compat_dir, limit=MAX_COMPAT_NAMES + 1)
    if len(names) > MAX_COMPAT_NAMES:
        return None
    found = []
    for name in names:
        parts = name[len("libcuda.so."):].split(".") if name.startswith("libcuda.so.") else []
        if not 2 <= len(parts) <= 3 or not all(p.isascii() and p.isdigit() for p in parts):
            continue
        st = root.lstat(f"{compat_dir}/{name}")
        if st is not None and stat.S_ISREG(st.st_mode):
            found.append((f"{compat_dir.rstrip('/')}/{name}", name[len("libcuda.so."):]))
            if len(found) > 1:
                return None
    return found[0] if len(found) == 1 else None


def _compat_note(root: Root, path: str) -> dict | None:
    """The compat lib's note, read through the in-root resolution (regular file only, no
    blocking open); None when absent, unreadable or not decodable (upstream then falls back
    to comparing majors)."""
    fd = open_regular(root, path)
    if fd is None:
        return None
    try:
        return read_fwd_note(fd)
    except (OSError, struct.error, BadNote):
        return None
    finally:
        os.close(fd)


def wants_compat(root: Root, compat_dir: str, host_driver: str | None, host_cuda: str | None = None,
                 *, legacy: bool = False) -> bool:
    """Whether the image's compat libcuda should win over the host driver: upstream's CDI hook
    rule (`use_compat`), or with `legacy` libnvidia-container's (`legacy_use_compat`)."""
    if not host_driver and not host_cuda:
        return False
    lib = compat_libcuda(root, compat_dir)
    if lib is None:
        return False
    path, version = lib
    if legacy:
        return legacy_use_compat(version, host_driver)
    return use_compat(_compat_note(root, path), version, host_driver, host_cuda)


def enable_compat(root: Root, compat_dir: str, host_driver: str | None, host_cuda: str | None = None,
                  *, legacy: bool = False) -> str | None:
    """Write /etc/ld.so.conf.d/00-compat-<id>.conf when the compat libs should be used, naming
    the compat dir as it resolves in the root (upstream writes the resolved directory: a
    /usr/local/cuda -> /etc/alternatives/cuda link gives /etc/alternatives/cuda/compat).
    Returns the container path written, or None."""
    if not wants_compat(root, compat_dir, host_driver, host_cuda, legacy=legacy):
        return None
    try:
        resolved = root.resolve(compat_dir)
    except (OSError, ContainerError):
        return None
    path = f"/etc/ld.so.conf.d/00-compat-{os.urandom(16).hex()[:12]}.conf"
    root.write_file(path, (resolved.rstrip("/") + "\n").encode(), 0o644)
    return path
