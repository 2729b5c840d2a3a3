"""Host-side caches of results computed from host files, so short-lived processes (the
prestart hook, the runtime shim) do not redo slow work on every container start: ELF checks
of driver libraries (pyelftools) and parsed, validated CDI spec files (PyYAML).

Entries are keyed by the file's path and identity (device, inode, size, mtime, ctime): a
driver upgrade or a replaced file changes the key, so a stale answer cannot be served. A
cache is one JSON file in a root-owned 0700 directory on the host (/run/nct, or
NCT_CACHE_DIR); it is used only when that directory is ours and not writable by anyone
else (checked on an fd, and written through that fd), and never holds anything a container
can influence (the files are host files). Any problem reading or writing it just means no
cache.
"""

from __future__ import annotations

import os
import stat
import time

from nct import jsonio

CACHE_NAME = "elf-cache-v1.json"  # the ELF cache (ElfCache)
RACY_SECONDS = 2.0


class HostCache:
    """Load lazily, `get`/`put` by path + stat, `save` once at the end if anything changed.
    `name`: the file in the cache directory; the whole file is parsed by every user, so it is
    bounded: at most `max_entries` (the newest) and `max_bytes`, and entries of files that
    are gone are dropped whenever it is rewritten."""

    name: str
    max_entries: int
    max_bytes: int

    def __init__(self, directory: str | None = None) -> None:
        self.directory = directory or os.environ.get("NCT_CACHE_DIR") or "/run/nct"
        self._entries: dict[str, object] | None = None
        self._dirty = False
        self._used: list[str] = []  # keys this process read or wrote: kept as the newest on save

    @staticmethod
    def key(path: str, st: os.stat_result) -> str | None:
        """The entry key of a file; None (do not cache) while it was changed very recently
        (by its ctime, which every change moves to now: an mtime can be old, `cp -p`, or in
        the future, a package built by a clock ahead of ours, which would mean never cached):
        file timestamps tick at the kernel's clock granularity, so a same-size rewrite in
        place moments after a read could otherwise keep its key ("racily clean", as git
        calls it)."""
        if is_racy(st.st_ctime_ns):
            return None
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

    def _read(self) -> bytes | None:
        """The cache file's bytes when it is a regular file we own that nobody else can write."""
        dfd = self._open_dir()
        if dfd is None:
            return None
        try:
            # O_NONBLOCK: a FIFO planted here must not hang the hook (it is refused below).
            fd = os.open(self.name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dfd)
        except OSError:
            return None
        finally:
            os.close(dfd)
        try:
            st = os.fstat(fd)
            if (not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022
                    or st.st_size > self.max_bytes):
                return None
            chunks, size = [], 0
            while size <= self.max_bytes:
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

    def _load(self) -> dict[str, object]:
        if self._entries is None:
            self._entries = {}
            raw = self._read()
            if raw is not None and len(raw) <= self.max_bytes:
                try:
                    data = jsonio.loads(raw)
                except (ValueError, RecursionError):
                    data = None
                if isinstance(data, dict):
                    self._entries = data
        return self._entries

    def get(self, key: str | None) -> object:
        """The value stored for `key` (any JSON value; callers check its shape), or None."""
        if key is None:
            return None
        value = self._load().get(key)
        if value is not None:
            self._used.append(key)
        return value

    def put(self, key: str | None, value: object) -> None:
        if key is None:
            return
        self._load()[key] = value
        self._used.append(key)
        self._dirty = True

    def save(self) -> None:
        if not self._dirty:
            return
        self._dirty = False
        try:
            if not os.path.lexists(self.directory):
                os.makedirs(self.directory, mode=0o700, exist_ok=True)
            dfd = self._open_dir()
            if dfd is None:
                return
            try:
                self._save_at(dfd)
            finally:
                os.close(dfd)
        except OSError:
            pass

    def _save_at(self, dfd: int) -> None:
        """Write the entries into the (checked) cache directory open as `dfd`."""
        entries = {k: v for k, v in self._load().items() if self._live(k)}
        for k in self._used:  # what this run used is the newest: a full cache evicts others first
            if k in entries:
                entries[k] = entries.pop(k)
        if len(entries) > self.max_entries:
            entries = dict(list(entries.items())[-self.max_entries:])
        from nct.fileio import atomic_write_at
        from nct.jsonio import dumps_compact

        items = list(entries.items())
        data = dumps_compact(dict(items), ensure_ascii=True).encode()
        while len(data) > self.max_bytes and items:  # over the byte bound: the oldest go first
            items = items[len(items) // 4 + 1:]
            data = dumps_compact(dict(items), ensure_ascii=True).encode()
        atomic_write_at(dfd, self.name, data, mode=0o600)

    def _live(self, key: str) -> bool:
        """Whether an entry is worth keeping on save: the file its key names still exists."""
        return os.path.lexists(key.rpartition("|")[0])


def now() -> float:
    """The clock the racy checks use (tests move it)."""
    return time.time()


def is_racy(newest_ns: int, since: float | None = None) -> bool:
    """Whether a file whose ctime is `newest_ns` changed less than
    RACY_SECONDS before `since` (default: now), too recently to be cached."""
    return (now() if since is None else since) - newest_ns / 1e9 < RACY_SECONDS


class ElfCache(HostCache):
    """ELF check results of driver libraries (nct.driver.elf.read_elf_cached)."""

    name = CACHE_NAME
    max_entries = 512  # a node has a few hundred driver files at most
    max_bytes = 4 << 20  # a full cache is ~100 KiB


class SpecCache(HostCache):
    """Parsed and strictly validated CDI spec files (nct.cdi.spec.load_spec). The name
    carries a format version: a change in what the loader accepts must change it."""

    name = "cdi-spec-cache-v1.json"
    # spec dirs usually hold a handful of files, but a node may carry hundreds (one per
    # device vendor or per MIG layout): fewer entries than files would re-validate the rest
    # and rewrite the cache on every read (issue 14: 200 files cost 4x per file what 50 did)
    max_entries = 1024
    max_bytes = 64 << 20  # an 8-GPU spec is ~40 KiB here as cached JSON, a 64-GPU one ~300 KiB
