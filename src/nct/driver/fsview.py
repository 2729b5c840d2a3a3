"""The driver tree as discovery reads it: every filesystem call that reads files under the
driver root (lstat, stat, readlink, listdir, open) goes through here, so that a pass can
be recorded (`recording()`) and checked later by making the same observations again
(`unchanged()`, used by nct.driver.snapshot). Recording is complete by construction: the
tree-reading code has no other way to the files.

An observation is a path and what lstat or stat said about it: an identity string (device,
inode, mode, size, mtime, ctime) or "" when the path does not exist. A symlink's target is
covered by its lstat identity: a link cannot be changed in place (`ln -sf` makes a new
one), and a new link, even on a reused inode number, has a ctime later than any recorded
one (the snapshot keeps only identities older than RACY_SECONDS at the start of the pass).
A directory merely walked through (lstat while resolving a path) is recorded by device,
inode and mode only: what matters there is that it is still the same directory, while
entries added to it do not change any lookup that is recorded itself (a host's /etc and
/usr/lib change all the time); a directory that is listed gets its full identity.
"""

from __future__ import annotations

import errno
import os
import stat as _stat

TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Callable
    from typing import BinaryIO

# errno of a path that is simply not there (a stable fact worth recording); any other
# error (EACCES, EIO, ...) makes the pass unfit for a snapshot.
_ABSENT = (errno.ENOENT, errno.ENOTDIR)


class Recording:
    """What one pass observed: `lstats` and `stats` map paths to identities; `newest_ns`
    is the latest ctime among full identities (every change moves a file's ctime to now,
    while its mtime can be anywhere: `touch -d`, a package built by a clock ahead of ours);
    `unfit` says why the pass must not be kept (an error other than "absent", or a path that
    changed while it was read)."""

    def __init__(self) -> None:
        self.lstats: dict[str, str] = {}
        self.stats: dict[str, str] = {}
        self.newest_ns = 0
        self.unfit: str | None = None

    def note(self, table: dict[str, str], path: str, st: os.stat_result | None, weak_dirs: bool = False) -> None:
        ident = identity(st, weak_dirs)
        old = table.setdefault(path, ident)
        if old != ident:
            self.unfit = f"{path} changed during discovery"
        elif st is not None and not ident.startswith("d"):
            self.newest_ns = max(self.newest_ns, st.st_ctime_ns)

    def failed(self, path: str, e: OSError) -> None:
        self.unfit = self.unfit or f"{path}: {e.strerror or e}"


_rec: Recording | None = None


class recording:
    """`with recording() as rec:` records every observation made inside (one pass)."""

    def __enter__(self) -> Recording:
        global _rec
        self._outer = _rec
        _rec = Recording()
        return _rec

    def __exit__(self, *exc: object) -> None:
        global _rec
        _rec = self._outer


def identity(st: os.stat_result | None, weak_dirs: bool = False) -> str:
    """The observation string of a stat result ("" for absent); with `weak_dirs`, a
    directory's is "d" + device, inode and mode."""
    if st is None:
        return ""
    if weak_dirs and _stat.S_ISDIR(st.st_mode):
        return f"d{st.st_dev}:{st.st_ino}:{st.st_mode}"
    return f"{st.st_dev}:{st.st_ino}:{st.st_mode}:{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}"


def _absent(path: str, e: OSError) -> None:
    """An error of a lookup: "absent" is a fact; anything else makes the pass unfit."""
    if _rec is not None and e.errno not in _ABSENT:
        _rec.failed(path, e)


def lstat(path: str) -> os.stat_result | None:
    """os.lstat, None when it fails."""
    return _observe(os.lstat, path, follow=False)


def stat(path: str) -> os.stat_result | None:
    """os.stat (symlinks followed), None when it fails."""
    return _observe(os.stat, path, follow=True)


def _observe(call: Callable[[str], os.stat_result], path: str, *, follow: bool) -> os.stat_result | None:
    """call(path), recorded (in the lstat or the stat table) while a recording is on."""
    try:
        st = call(path)
    except OSError as e:
        _absent(path, e)
        st = None
    if _rec is not None:
        if follow:
            _rec.note(_rec.stats, path, st)
        else:
            _rec.note(_rec.lstats, path, st, weak_dirs=True)
    return st


def is_file(path: str) -> bool:
    st = stat(path)
    return st is not None and _stat.S_ISREG(st.st_mode)


def readlink(path: str) -> str | None:
    """os.readlink, None when it fails. Recorded through the link's lstat identity."""
    if _rec is not None and path not in _rec.lstats:
        lstat(path)
    try:
        return os.readlink(path)
    except OSError as e:
        _absent(path, e)
        return None


def listdir(path: str) -> list[str] | None:
    """os.listdir (unsorted), None when it fails. The directory's identity is taken before
    it is read: an entry added in between changes it, so the recording errs on "changed"."""
    if _rec is not None:
        stat(path)
    try:
        return os.listdir(path)
    except OSError as e:
        _absent(path, e)
        return None


def open_binary(path: str) -> tuple[BinaryIO, os.stat_result]:
    """The file open for reading and its fstat (the identity of exactly what is read).
    Raises OSError."""
    try:
        f = open(path, "rb")
    except OSError as e:
        if _rec is not None:
            _rec.failed(path, e)  # it was there a moment ago (callers check first)
        raise
    try:
        st = os.fstat(f.fileno())
    except OSError as e:
        f.close()
        if _rec is not None:
            _rec.failed(path, e)
        raise
    if _rec is not None:
        _rec.note(_rec.stats, path, st)
    return f, st


def read_failed(path: str, e: OSError) -> None:
    """A read of an open file failed (the caller turns that into an answer): not a fact
    to keep in a snapshot."""
    if _rec is not None:
        _rec.failed(path, e)


def unchanged(lstats: dict[str, str], stats: dict[str, str]) -> bool:
    """Whether every recorded observation, made again now, gives the same identity."""
    for table, call, weak in ((lstats, os.lstat, True), (stats, os.stat, False)):
        for path, ident in table.items():
            try:
                st = call(path)
            except OSError as e:
                if e.errno not in _ABSENT or ident:
                    return False
                continue
            except ValueError:  # a NUL in a path: not something we wrote
                return False
            if identity(st, weak) != ident:
                return False
    return True
