"""A validated snapshot of the driver tree, so that discovery does not re-read it on every
container start (issue 14).

What is kept: the driver files found under the driver root (ld.so.cache entries resolved
and ELF-checked, binaries, firmware, graphics configs, Xorg modules), together with every
filesystem observation the pass that found them made (nct.driver.fsview). A later pass
uses them only after making each observation again (one lstat or stat per recorded path)
and finding the same identity: anything added, removed, replaced, retargeted or rewritten
under the paths discovery looked at shows up there, and a full pass runs and replaces the
snapshot. What changes while a node runs is never kept: procfs (driver version, GPUs, MIG),
/dev nodes and the IPC sockets are read live by every discovery.

The snapshot is only kept when every observed file was last changed (ctime) at least
RACY_SECONDS before the pass started (a rewrite within one timestamp tick could otherwise
keep an identity), and it is keyed by everything else the answer depends on: driver root
(absolute only), --ldcache, machine, driver version, PATH, and nct's own code (its version
and the identity of the discovery modules' files, as they were when this process loaded
them), so an upgraded or edited nct never reads an old one. A stored snapshot may only
list files its own observations show as regular files.
It lives in the host cache directory (nct.hostcache: /run/nct or NCT_CACHE_DIR, trusted
only when root's and writable by nobody else), one file per key, named by a hash of the
whole key (node-snapshot-v1-<slot>.json: two nct installs or driver roots on one node
each keep theirs; a hash collision only evicts), at most SLOTS of them (the least recently
written go when a new one is saved); any problem with it means a full pass, never an
error.
"""

from __future__ import annotations

import os
import stat

from nct import hostcache
from nct.driver import fsview
from nct.driver.model import DriverFile

TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Callable

FORMAT = "node-snapshot-v1"
SLOTS = 8  # snapshot files kept at most (one per key: driver root, --ldcache, machine, PATH, version, code)
SLOT_SPACE = 65521  # file names per format: a prime, so the slot depends on the whole key

TreeFiles = tuple[list[DriverFile], list[DriverFile]]  # the files before and after the live IPC sockets


class SnapshotCache(hostcache.HostCache):
    """One slot: a single entry, the newest snapshot of the keys that map here. Saving one
    removes the least recently written slot files beyond SLOTS."""

    max_entries = 1
    max_bytes = 1 << 20  # a snapshot of a full driver is ~40 KiB

    def __init__(self, slot: int, directory: str | None = None) -> None:
        super().__init__(directory)
        self.name = f"{FORMAT}-{slot}.json"

    def _live(self, key: str) -> bool:
        return True  # the one entry is the newest by construction

    def _save_at(self, dfd: int) -> None:
        super()._save_at(dfd)
        _prune(dfd, self.name)


def _prune(dfd: int, keep: str) -> None:
    """Remove the slot files (in the checked cache directory open as `dfd`) beyond the
    SLOTS most recently written; `keep`, just written, always stays."""
    prefix = FORMAT + "-"
    found = []
    for name in os.listdir(dfd):
        if name.startswith(prefix) and name.endswith(".json") and name != keep:
            try:
                st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
            except OSError:
                continue
            found.append((st.st_mtime_ns, name))
    found.sort(reverse=True)
    for _, name in found[SLOTS - 1:]:
        try:
            os.unlink(name, dir_fd=dfd)
        except OSError:
            pass


def _code_identity() -> str | None:
    """nct's version and the identities of the files whose code decides the answer
    (nct.CODE_FILES); None when one cannot be stat'ed, or differs from what it was when
    nct was first imported (nct.LOADED_CODE: the code running may not be the code on disk
    now): then nothing is cached."""
    import nct

    now = nct._code_stats()
    if now != nct.LOADED_CODE or None in now.values():
        return None
    return "\n".join([nct.__version__] + [f"{p}={':'.join(map(str, ident or ()))}" for p, ident in now.items()])


def _slot(text: str) -> int:
    """A stable number below SLOT_SPACE for `text` (str hashes differ per process)."""
    return int.from_bytes(text.encode("utf-8", "surrogateescape"), "little") % SLOT_SPACE


def tree_files(driver_root: str, version: str, ldcache: str | None, machine: str, path_env: str,
               compute: Callable[[], TreeFiles]) -> TreeFiles:
    """compute() (the full pass reading the driver tree), or the snapshot of an earlier one
    when every observation it made still holds."""
    code = _code_identity()
    if code is None or not os.path.isabs(driver_root or "/"):
        # a relative root names another tree from another working directory, while the
        # lookups inside it are recorded as absolute paths: no snapshot of it
        return compute()
    where = "\n".join((driver_root, ldcache or "", machine, path_env))
    key = "\n".join((FORMAT, where, version, code))
    cache = SnapshotCache(_slot(key))
    hit = _valid(cache.get(key))
    if hit is not None:
        return hit
    start = hostcache.now()
    with fsview.recording() as rec:
        tree = compute()
    if rec.unfit is None and not hostcache.is_racy(rec.newest_ns, start):
        cache.put(key, _encode(rec, tree))
        cache.save()
    return tree


def _encode(rec: fsview.Recording, tree: TreeFiles) -> dict:
    # a stat of a path whose lstat saw no symlink says the same thing: keep one
    stats = {p: i for p, i in rec.stats.items() if rec.lstats.get(p) != i}
    # each part one flat list, six values a file: nested lists cost the reader more
    return {"lstat": rec.lstats, "stat": stats,
            "files": [[v for f in part for v in (f.kind, f.host_path, f.container_path, f.capability, f.name, f.soname)]
                      for part in tree]}


def _valid(entry: object) -> TreeFiles | None:
    """The files of a stored snapshot whose observations all hold now; None otherwise
    (including any entry of the wrong shape: the file is a cache, not trusted input)."""
    if not isinstance(entry, dict):
        return None
    lstats, stats, files = entry.get("lstat"), entry.get("stat"), entry.get("files")
    if not (isinstance(lstats, dict) and isinstance(stats, dict) and isinstance(files, list) and len(files) == 2
            and all(isinstance(v, str) for t in (lstats, stats) for v in t.values())):
        return None
    try:
        tree = (_files(files[0]), _files(files[1]))
    except (TypeError, ValueError):
        return None
    # Every file kept must be one the pass saw as a regular file: a snapshot can only repeat
    # what discovery found, never name a host file it did not look at.
    if not all(_regular(stats.get(f.host_path) or lstats.get(f.host_path)) for part in tree for f in part):
        return None
    return tree if fsview.unchanged(lstats, stats) else None


def _regular(ident: str | None) -> bool:
    """Whether an observation (fsview.identity) is of a regular file."""
    parts = (ident or "").split(":")
    return len(parts) == 6 and parts[2].isdigit() and stat.S_ISREG(int(parts[2]))


_KINDS = frozenset(("lib", "lib32", "bin", "firmware", "config", "xorg"))


def _files(flat: object) -> list[DriverFile]:
    if not isinstance(flat, list) or len(flat) % 6:
        raise ValueError("not a list of driver files")
    out = []
    for i in range(0, len(flat), 6):
        kind, host, container, cap, name, soname = flat[i:i + 6]
        if not (kind in _KINDS and type(host) is str and type(container) is str and type(name) is str
                and (cap is None or type(cap) is str) and (soname is None or type(soname) is str)):
            raise ValueError("not a driver file")
        out.append(DriverFile(kind, host, container, cap, name, soname))
    return out
