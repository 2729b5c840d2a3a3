"""Resolve a node path inside a driver root the way a chroot would see it.

A driver container's tree (e.g. /run/nvidia/driver) holds absolute symlinks such as
libcuda.so.1 -> /usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15; followed on the host they
would leave the root. Every component is resolved here with the root as "/" ("..", absolute
link targets and loops all stay inside).
"""

from __future__ import annotations

import os
import stat

MAX_LINKS = 40


def resolve_in_root(root: str, path: str) -> str | None:
    """The node path (absolute, no symlinks) that `path` names inside `root`, or None when it
    does not exist or loops. With root "/" this is the host's own view."""
    root = os.path.abspath(root or "/")
    parts = [p for p in path.split("/") if p not in ("", ".")]
    resolved: list[str] = []
    links = 0
    while parts:
        part = parts.pop(0)
        if part == "..":
            if resolved:
                resolved.pop()
            continue
        candidate = resolved + [part]
        host = _host(root, candidate)
        try:
            st = os.lstat(host)
        except OSError:
            return None
        if stat.S_ISLNK(st.st_mode):
            links += 1
            if links > MAX_LINKS:
                return None
            try:
                target = os.readlink(host)
            except OSError:
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
    """Join a node path (absolute) onto a root; root "/" leaves it unchanged."""
    if not root or root == "/":
        return node_path
    return root.rstrip("/") + "/" + node_path.lstrip("/")
