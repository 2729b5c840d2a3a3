"""`cdi transform root`: move a spec's paths from one root to another, e.g. a spec
generated inside a driver container (/run/nvidia/driver/...) for use on the host (/...)."""

from __future__ import annotations

import copy
import os

from nct.errors import SpecError

RELATIVE_TO = ("host", "container")


def transform_path(path: str, from_root: str, to_root: str) -> str:
    """Swap the `from_root` prefix for `to_root`, on whole path components only
    (/run/nvidia/driver2 is not under /run/nvidia/driver)."""
    src = os.path.normpath(from_root) if from_root else ""
    if not src or not path.startswith("/"):
        return path
    if src == "/":
        rest = path
    elif path == src or path.startswith(src + "/"):
        rest = path[len(src):] or "/"
    else:
        return path
    dst = to_root or "/"
    if rest == "/":
        return os.path.normpath(dst)
    return os.path.normpath(dst.rstrip("/") + "/" + rest.lstrip("/"))


def _args(args: list, t) -> list:
    """Hook arguments with their paths moved: a `TARGET::LINK` argument (create-symlinks'
    --link) has both sides moved; flags such as `--link` or `--folder` start with no root and
    stay as they are, the paths after them move."""
    out = []
    for a in args:
        if isinstance(a, str) and "::" in a:
            target, link = a.split("::", 1)
            out.append(f"{t(target)}::{t(link)}")
        else:
            out.append(t(a) if isinstance(a, str) else a)
    return out


def _edits(e: dict, t, relative_to: str) -> None:
    """Upstream's rules. host: device hostPaths (defaulting to the path), mount hostPaths, the
    path of every hook but startContainer (which resolves in the container), and the arguments
    of hooks that run in the host's namespaces (not createContainer/startContainer).
    container: device paths, mount containerPaths, the path of startContainer hooks, and the
    arguments of createContainer and startContainer hooks (container paths such as
    create-symlinks' --link TARGET::LINK and update-ldcache's --folder)."""
    host = relative_to == "host"
    for n in e.get("deviceNodes") or []:
        if host:
            n["hostPath"] = t(n.get("hostPath") or n["path"])
        else:
            n["path"] = t(n["path"])
    for m in e.get("mounts") or []:
        key = "hostPath" if host else "containerPath"
        m[key] = t(m[key])
    for h in e.get("hooks") or []:
        in_container = h.get("hookName") in ("createContainer", "startContainer")
        start = h.get("hookName") == "startContainer"
        if start != host:  # host: all but startContainer; container: startContainer only
            h["path"] = t(h["path"])
        if in_container != host and h.get("args"):
            h["args"] = _args(h["args"], t)


def transform_root(spec: dict, from_root: str, to_root: str, relative_to: str = "host") -> dict:
    """A copy of the CDI spec dict with `from_root` replaced by `to_root` in host paths
    (relative_to='host') or container paths ('container')."""
    if relative_to not in RELATIVE_TO:
        raise SpecError(f"invalid --relative-to {relative_to!r}, should be host or container")
    out = copy.deepcopy(spec)

    def t(p: str) -> str:
        return transform_path(p, from_root, to_root)

    _edits(out.get("containerEdits") or {}, t, relative_to)
    for d in out.get("devices") or []:
        _edits(d.get("containerEdits") or {}, t, relative_to)
    return out
