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


def _edits(e: dict, t, relative_to: str) -> None:
    for n in e.get("deviceNodes") or []:
        if relative_to == "host":
            host = n.get("hostPath") or n["path"]
            new = t(host)
            if new != host:
                n["hostPath"] = new
        else:
            n["path"] = t(n["path"])
    for m in e.get("mounts") or []:
        key = "hostPath" if relative_to == "host" else "containerPath"
        m[key] = t(m[key])
    if relative_to != "host":
        return
    for h in e.get("hooks") or []:
        # startContainer hooks run (and resolve their path) in the container.
        if h.get("hookName") != "startContainer":
            h["path"] = t(h["path"])
        # createContainer/startContainer arguments are container paths: leave them.
        if h.get("hookName") in ("createContainer", "startContainer"):
            continue
        args = []
        for a in h.get("args") or []:
            parts = a.split("::")
            args.append("::".join(t(p) for p in parts) if len(parts) == 2 else t(a))
        if "args" in h:
            h["args"] = args


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
