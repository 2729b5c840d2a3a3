"""Real parts for the device-node tests (issue 9 §1): a loop device over a scratch file stands
in for the host's disk, image nodes of it are planted where ldconfig (or nct) would open them,
and inotify on each planted node tells whether any process opened it."""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import stat
import struct
import subprocess
from pathlib import Path

import pytest

_libc = ctypes.CDLL(None, use_errno=True)
IN_ACCESS, IN_MODIFY, IN_OPEN = 0x1, 0x2, 0x20
IN_NONBLOCK_CLOEXEC = os.O_NONBLOCK | os.O_CLOEXEC
LIBDIR = "usr/lib/x86_64-linux-gnu"
EVIL_LIB = "libnct-evil.so.1"


class ScratchDisk:
    """/dev/loopN over a 1 MiB file of random bytes; `digest()` hashes what the device holds."""

    def __init__(self, path: Path):
        self.file = path
        path.write_bytes(os.urandom(1 << 20))
        res = subprocess.run(["losetup", "-f", "--show", str(path)], capture_output=True, text=True)
        if res.returncode != 0:
            pytest.skip(f"no loop device: {res.stderr.strip()}")
        self.dev = res.stdout.strip()
        self.rdev = os.stat(self.dev).st_rdev
        self.initial = self.digest()

    def digest(self) -> str:
        fd = os.open(self.dev, os.O_RDONLY)
        try:
            h = hashlib.sha256()
            while True:
                b = os.read(fd, 1 << 16)
                if not b:
                    break
                h.update(b)
            return h.hexdigest()
        finally:
            os.close(fd)

    def unchanged(self) -> bool:
        subprocess.run(["blockdev", "--flushbufs", self.dev], check=False)
        return self.digest() == self.initial and hashlib.sha256(self.file.read_bytes()).hexdigest() == self.initial

    def close(self) -> None:
        subprocess.run(["losetup", "-d", self.dev], check=False)


@pytest.fixture
def scratch_disk(tmp_path):
    if os.geteuid() != 0 or shutil.which("losetup") is None:
        pytest.skip("needs root and losetup (util-linux)")
    disk = ScratchDisk(tmp_path / "host-disk.img")
    try:
        yield disk
    finally:
        disk.close()


class OpenWatch:
    """inotify IN_OPEN/IN_ACCESS/IN_MODIFY on planted nodes: an open of the node by anyone
    (any namespace: the watch is on the inode) is seen; a refused open (nodev: EACCES,
    device cgroup: EPERM) and an O_PATH open are not."""

    def __init__(self) -> None:
        self.fd = _libc.inotify_init1(IN_NONBLOCK_CLOEXEC)
        if self.fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1")
        self.names: dict[int, str] = {}

    def add(self, path: Path) -> None:
        wd = _libc.inotify_add_watch(self.fd, os.fsencode(str(path)), IN_OPEN | IN_ACCESS | IN_MODIFY)
        if wd < 0:
            raise OSError(ctypes.get_errno(), f"inotify_add_watch {path}")
        self.names[wd] = str(path)

    def opened(self) -> list[str]:
        """Names of watched nodes opened (read, written) since the watch began."""
        out = []
        try:
            data = os.read(self.fd, 65536)
        except BlockingIOError:
            return out
        off = 0
        while off + 16 <= len(data):
            wd, mask, _cookie, ln = struct.unpack_from("iIII", data, off)
            off += 16 + ln
            if mask & (IN_OPEN | IN_ACCESS | IN_MODIFY) and self.names.get(wd) not in out:
                out.append(self.names.get(wd, "?"))
        return out

    def close(self) -> None:
        os.close(self.fd)


def plant(rootfs: Path, rdev: int, where: str, *, kind: int = stat.S_IFBLK) -> Path:
    """Put a node of `rdev` in the image where a host-side opener would meet it:
    "cache~" (ldconfig's temp cache file), "lib" (a lib*.so link in a scanned lib dir to a
    node elsewhere in the image), "conf" (an ld.so.conf.d entry). Returns the node's path."""
    mode = kind | 0o666
    if where == "cache~":
        node = rootfs / "etc/ld.so.cache~"
    elif where == "lib":
        node = rootfs / "opt-disk-node"
        (rootfs / LIBDIR).mkdir(parents=True, exist_ok=True)
        link = rootfs / LIBDIR / EVIL_LIB
        if link.is_symlink() or link.exists():
            link.unlink()
        os.symlink("/opt-disk-node", link)
    elif where == "conf":
        (rootfs / "etc/ld.so.conf.d").mkdir(parents=True, exist_ok=True)
        node = rootfs / "etc/ld.so.conf.d/zz-disk.conf"
    else:
        raise ValueError(where)
    if node.is_symlink() or node.exists():
        node.unlink()
    os.mknod(node, mode, rdev)
    return node


WHERE = ("cache~", "lib", "conf")
