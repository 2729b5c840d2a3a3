"""CUDA forward compatibility: decide whether the image's compat libcuda should win over the
host driver, and if so record its directory in an ld.so.conf.d file (never bind image files
onto image paths). The image's libcuda is hostile input: read with bounds, in-root only."""

from __future__ import annotations

import os
import stat
import struct

from nct import jsonio
from nct.container.rootfs import Root
from nct.errors import ContainerError

DEFAULT_COMPAT_DIR = "/usr/local/cuda/compat"
NOTE_SECTION = b".note.cuda.fwd_compatibility"
_MAX_ELF = 512 << 20


def _int(s: str) -> int | None:
    """int(s) for a plain decimal number, else None ("²" is a digit to str.isdigit, not to int;
    int() also refuses more than 4300 digits)."""
    if not s.isdecimal():
        return None
    try:
        return int(s)
    except ValueError:
        return None


def _vtuple(v: str) -> tuple[int, ...]:
    parts = []
    for p in v.strip().split("."):
        n = _int(p)
        if n is None:
            break
        parts.append(n)
    while parts and parts[-1] == 0 and len(parts) > 1:
        parts.pop()
    return tuple(parts)


def read_fwd_note(fd: int) -> dict | None:
    """The JSON of libcuda's `.note.cuda.fwd_compatibility` ELF note, or None."""
    size = os.fstat(fd).st_size
    if size < 64 or size > _MAX_ELF:
        return None
    hdr = os.pread(fd, 64, 0)
    if hdr[:4] != b"\x7fELF" or hdr[4] != 2 or hdr[5] != 1:  # ELF64 little endian only
        return None
    shoff, = struct.unpack_from("<Q", hdr, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", hdr, 0x3A)
    if shentsize != 64 or shnum == 0 or shnum > 4096 or shoff + shnum * 64 > size or shstrndx >= shnum:
        return None
    table = os.pread(fd, shnum * 64, shoff)
    sections = [struct.unpack_from("<IIQQQQIIQQ", table, i * 64) for i in range(shnum)]
    strtab = sections[shstrndx]
    if strtab[5] > 1 << 20 or strtab[4] + strtab[5] > size:
        return None
    names = os.pread(fd, strtab[5], strtab[4])
    for sec in sections:
        end = names.find(b"\0", sec[0])
        if names[sec[0]:end] != NOTE_SECTION:
            continue
        off, length = sec[4], sec[5]
        if length > 1 << 16 or off + length > size:
            return None
        data = os.pread(fd, length, off)
        if len(data) < 12:
            return None
        namesz, descsz, _ = struct.unpack_from("<III", data, 0)
        desc_off = 12 + ((namesz + 3) & ~3)
        desc = data[desc_off:desc_off + descsz].rstrip(b"\0")
        try:
            obj = jsonio.loads(desc.decode())
        except (UnicodeDecodeError, ValueError):
            return None
        return obj if isinstance(obj, dict) else None
    return None


def _note_decision(note: dict, host_driver: str | None, host_cuda: str | None, compat_version: str) -> bool:
    majors: list[int] = []
    cuda = None
    for key, value in note.items():
        if isinstance(value, list):
            majors = [n for n in (_int(str(v)) for v in value) if n is not None]
        elif "cuda" in key.lower() and isinstance(value, str):
            cuda = value
    if host_driver:
        hmaj = _vtuple(host_driver)[:1]
        if majors and hmaj and hmaj[0] not in majors:
            return False
        return _vtuple(compat_version) > _vtuple(host_driver)
    if host_cuda and cuda:
        return _vtuple(cuda) > _vtuple(host_cuda)
    return False


def compat_libcuda(root: Root, compat_dir: str) -> tuple[str, str] | None:
    """(container path, version) of the single regular libcuda.so.X.Y in the compat dir."""
    found = []
    for name in root.listdir(compat_dir):
        parts = name[len("libcuda.so."):].split(".") if name.startswith("libcuda.so.") else []
        if not 2 <= len(parts) <= 3 or not all(p.isascii() and p.isdigit() for p in parts):
            continue
        st = root.lstat(f"{compat_dir}/{name}")
        if st is not None and stat.S_ISREG(st.st_mode):
            found.append((f"{compat_dir.rstrip('/')}/{name}", name[len("libcuda.so."):]))
    return found[0] if len(found) == 1 else None


def wants_compat(root: Root, compat_dir: str, host_driver: str | None, host_cuda: str | None = None) -> bool:
    """Whether the image's compat libcuda is newer than what the host driver offers."""
    if not host_driver and not host_cuda:
        return False
    lib = compat_libcuda(root, compat_dir)
    if lib is None:
        return False
    path, version = lib
    try:
        fd = root.open_regular(path, follow=False)  # never a device node swapped in since the lstat
    except (FileNotFoundError, ContainerError):
        return False
    try:
        note = read_fwd_note(fd)
    except OSError:
        note = None
    finally:
        os.close(fd)
    if note is not None:
        return _note_decision(note, host_driver, host_cuda, version)
    if not host_driver:
        return False
    return _vtuple(version)[:1] > _vtuple(host_driver)[:1]


def enable_compat(root: Root, compat_dir: str, host_driver: str | None, host_cuda: str | None = None) -> str | None:
    """Write /etc/ld.so.conf.d/00-compat-<id>.conf when the compat libs should be used.
    Returns the container path written, or None."""
    if not wants_compat(root, compat_dir, host_driver, host_cuda):
        return None
    path = f"/etc/ld.so.conf.d/00-compat-{os.urandom(16).hex()[:12]}.conf"
    root.write_file(path, (compat_dir.rstrip("/") + "\n").encode(), 0o644)
    return path
