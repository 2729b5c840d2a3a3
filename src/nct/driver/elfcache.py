"""A host-side cache of ELF check results, so the hook does not re-parse every driver
library with pyelftools on every container start.

Entries are keyed by the file's path and identity (device, inode, size, mtime, ctime): a
driver upgrade or a replaced file changes the key, so a stale answer cannot be served. The
cache lives in a root-owned 0700 directory on the host (/run/nct, or NCT_CACHE_DIR); it is
used only when that directory is ours and not writable by anyone else, and never holds
anything a container can influence (driver files are host files). Any problem reading or
writing it just means no cache.
"""

from __future__ import annotations

import json
import os
import stat

CACHE_NAME = "elf-cache-v1.json"
# A node has a few hundred driver files at most; the whole file is parsed by every hook, so
# it stays small (entries of files that are gone are dropped whenever it is rewritten).
MAX_ENTRIES = 512
MAX_BYTES = 4 << 20  # a full cache is ~100 KiB


class ElfCache:
    """Load lazily, `get`/`put` by path + stat, `save` once at the end if anything changed."""

    def __init__(self, directory: str | None = None) -> None:
        self.directory = directory or os.environ.get("NCT_CACHE_DIR") or "/run/nct"
        self._entries: dict[str, list] | None = None
        self._dirty = False

    @staticmethod
    def key(path: str, st: os.stat_result) -> str:
        return f"{path}|{st.st_dev}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}"

    def _open_dir(self) -> int | None:
        """An fd of the cache directory when it is ours and writable by nobody else (opened
        without following a symlink, checked on the fd itself); None otherwise."""
        try:
            dfd = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            return None
        try:
            st = os.fstat(dfd)
        except OSError:
            st = None
        if (st is None or not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid()
                or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)):
            os.close(dfd)
            return None
        return dfd

    def _trusted_dir(self) -> bool:
        dfd = self._open_dir()
        if dfd is None:
            return False
        os.close(dfd)
        return True

    def _read(self) -> bytes | None:
        """The cache file's bytes when it is a regular file we own that nobody else can write."""
        dfd = self._open_dir()
        if dfd is None:
            return None
        try:
            # O_NONBLOCK: a FIFO planted here must not hang the hook (it is refused below).
            fd = os.open(CACHE_NAME, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dfd)
        except OSError:
            return None
        finally:
            os.close(dfd)
        try:
            st = os.fstat(fd)
            if (not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022
                    or st.st_size > MAX_BYTES):
                return None
            chunks, size = [], 0
            while size <= MAX_BYTES:
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
            return b"".join(chunks)
        except OSError:
            return None
        finally:
            os.close(fd)

    def _load(self) -> dict[str, list]:
        if self._entries is None:
            self._entries = {}
            raw = self._read()
            if raw is not None and len(raw) <= MAX_BYTES:
                try:
                    data = json.loads(raw)
                except (ValueError, RecursionError):
                    data = None
                if isinstance(data, dict):
                    self._entries = {k: v for k, v in data.items() if isinstance(v, list)}
        return self._entries

    def get(self, key: str) -> list | None:
        value = self._load().get(key)
        return value if isinstance(value, list) else None

    def put(self, key: str, value: list) -> None:
        self._load()[key] = value
        self._dirty = True

    def save(self) -> None:
        if not self._dirty:
            return
        self._dirty = False
        try:
            if not os.path.lexists(self.directory):
                os.makedirs(self.directory, mode=0o700, exist_ok=True)
            if not self._trusted_dir():
                return
            entries = {k: v for k, v in self._load().items() if os.path.lexists(k.rpartition("|")[0])}
            if len(entries) > MAX_ENTRIES:
                entries = dict(list(entries.items())[-MAX_ENTRIES:])
            from nct.fileio import atomic_write

            atomic_write(os.path.join(self.directory, CACHE_NAME),
                         json.dumps(entries, separators=(",", ":")).encode(), mode=0o600, keep_owner=False)
        except OSError:
            pass
