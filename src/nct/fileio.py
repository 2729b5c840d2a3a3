"""Atomic file replacement, shared by the bundle writer and the CDI spec writer.

A reader (runc, containerd, a CDI cache) must see either the old file or the new one,
never a truncated mix, and a failure must leave the original untouched."""

from __future__ import annotations

import os


def _temp_file(directory: str, prefix: str, dir_fd: int | None = None) -> tuple[int, str]:
    """A new file (0600, exclusive, not through a symlink) with a random name in `directory`
    (or, with `dir_fd`, in that directory, `directory` then only names it in errors)
    (tempfile.mkstemp's contract without importing tempfile on the runtime's create path)."""
    for _ in range(100):
        name = f"{prefix}{os.urandom(6).hex()}.tmp"
        path = name if dir_fd is not None else os.path.join(directory, name)
        try:
            return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                           dir_fd=dir_fd), path
        except FileExistsError:
            continue
    raise FileExistsError(f"{directory}: no free temporary file name")


def atomic_write_at(dir_fd: int, name: str, data: bytes, mode: int = 0o600) -> None:
    """Replace `name` in the directory open as `dir_fd` with `data` (temp file, fsync,
    rename, all relative to the fd): for a directory checked on that fd (nct.hostcache),
    so that a path swapped after the check cannot send the write elsewhere."""
    fd, tmp = _temp_file(name, "." + name + ".", dir_fd)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fchmod(f.fileno(), mode)
            os.fsync(f.fileno())
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        try:
            os.unlink(tmp, dir_fd=dir_fd)
        except FileNotFoundError:
            pass
        raise
    try:
        os.fsync(dir_fd)
    except OSError:
        pass


def atomic_write(path: str, data: bytes, *, mode: int | None = None, keep_owner: bool = True,
                 durable: bool = True) -> None:
    """Replace `path` with `data`: temp file in the same dir, fsync, rename.

    `mode` None keeps the existing file's permission bits (0644 for a new file); the
    owner is kept too when we can (running as root over a file someone else owns).
    `durable=False` skips the fsyncs (still atomic for every reader): for files that do not
    outlive the machine's uptime, as a bundle's config.json rewritten on every create."""
    directory = os.path.dirname(os.path.abspath(path))
    try:
        st = os.stat(path)
    except FileNotFoundError:
        st = None
    if mode is None:
        mode = (st.st_mode & 0o7777) if st is not None else 0o644
    fd, tmp = _temp_file(directory, "." + os.path.basename(path) + ".")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fchmod(f.fileno(), mode)
            if keep_owner and st is not None and (st.st_uid, st.st_gid) != (os.geteuid(), os.getegid()):
                try:
                    os.fchown(f.fileno(), st.st_uid, st.st_gid)
                except PermissionError:
                    pass
            if durable:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    if not durable:
        return
    try:  # make the rename durable; best effort (some filesystems refuse O_DIRECTORY fsync)
        dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError:
        pass
