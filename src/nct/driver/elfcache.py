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


class ElfCache:
    """Load lazily, `get`/`put` by path + stat, `save` once at the end if anything changed."""

    def __init__(self, directory: str | None = None) -> None:
        self.directory = directory or os.environ.get("NCT_CACHE_DIR") or "/run/nct"
        self._entries: dict[str, list] | None = None
        self._dirty = False

    @staticmethod
    def key(path: str, st: os.stat_result) -> str:
        return f"{path}|{st.st_dev}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}"

    def _trusted_dir(self) -> bool:
        try:
            st = os.lstat(self.directory)
        except OSError:
            return False
        return (stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid()
                and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH))

    def _load(self) -> dict[str, list]:
        if self._entries is None:
            self._entries = {}
            if self._trusted_dir():
                try:
                    fd = os.open(os.path.join(self.directory, CACHE_NAME), os.O_RDONLY | os.O_NOFOLLOW)
                    with os.fdopen(fd, "rb") as f:
                        data = json.loads(f.read())
                    if isinstance(data, dict):
                        self._entries = data
                except (OSError, ValueError):
                    pass
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
                         json.dumps(entries, separators=(",", ":")).encode(), mode=0o600)
        except OSError:
            pass
