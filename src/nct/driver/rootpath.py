"""Resolve a node path inside a driver root the way a chroot would see it.

A driver container's tree (e.g. /run/nvidia/driver) holds absolute symlinks such as
libcuda.so.1 -> /usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15; followed on the host they
would leave the root. Every component is resolved here with the root as "/" ("..", absolute
link targets and loops all stay inside).
"""

from __future__ import annotations

import os
import stat

from nct.driver import fsview

MAX_LINKS = 40

# Host paths seen to be real directories during one discovery pass (see dirs_memo()): a
# driver tree is looked up a few hundred times, mostly under the same few directories.
_known_dirs: set[str] | None = None


class dirs_memo:
    """`with dirs_memo():` remembers, for the calls inside it only, which components are
    real directories, so they are not lstat'ed again (one discovery pass, not across runs).
    A nested one starts empty: what a recorded pass (nct.driver.fsview) skips it must have
    seen itself."""

    def __enter__(self) -> None:
        global _known_dirs
        self._outer = _known_dirs
        _known_dirs = set()

    def __exit__(self, *exc: object) -> None:
        global _known_dirs
        _known_dirs = self._outer


def resolve_in_root(root: str, path: str) -> str | None:
    """The node path (absolute, no symlinks) that `path` names inside `root`, or None when it
    does not exist or loops. With root "/" this is the host's own view."""
    root = os.path.abspath(root or "/")
    parts = [p for p in path.split("/") if p not in ("", ".")]
    resolved: list[str] = []
    links = 0
    known = _known_dirs
    while parts:
        part = parts.pop(0)
        if part == "..":
            if resolved:
                resolved.pop()
            continue
        candidate = resolved + [part]
        host = _host(root, candidate)
        if known is not None and host in known:
            resolved = candidate
            continue
        st = fsview.lstat(host)
        if st is None:
            return None
        if known is not None and stat.S_ISDIR(st.st_mode):
            known.add(host)
        if stat.S_ISLNK(st.st_mode):
            links += 1
            if links > MAX_LINKS:
                return None
            target = fsview.readlink(host)
            if target is None:
                return None
            tparts = [p for p in target.split("/") if p not in ("", ".")]
            if target.startswith("/"):
                resolved = []
            parts = tparts + parts
            continue
        resolved = candidate
    return "/" + "/".join(resolved)


def _host(root: str, parts: list[str]) -> str:
    rel = "/".join(parts)
    return "/" + rel if root == "/" else f"{root}/{rel}"


def host_path(root: str, node_path: str) -> str:
    """Join a node path (absolute) onto a root; root "/" (or "") leaves it unchanged. The
    one "join onto root" (Roots.host, the node utilities and the hook use it)."""
    if not root or root == "/":
        return node_path
    return root.rstrip("/") + "/" + node_path.lstrip("/")


PROC_ROOT_ENV = "NCT_PROC_ROOT"


def proc_root() -> str:
    """The procfs NVIDIA state is read from: $NCT_PROC_ROOT (tests point it at a tree),
    else /proc. The one place that reads the variable."""
    return os.environ.get(PROC_ROOT_ENV) or "/proc"
