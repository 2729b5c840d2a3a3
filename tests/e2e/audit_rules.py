"""Judging a trace of tests/e2e/audit_tracer.py: which recorded events touched a host path
outside the container root. Shared by the hook, nvidia-container-cli and nvidia-cdi-hook audits."""

from __future__ import annotations

import os

# devices.allow of the container's cgroup; the sealed memfd copy of the host ldconfig;
# our own host-side ELF check cache (nct.hostcache: root-only dir, host files only).
ALLOWED_PREFIXES = ("/sys/fs/cgroup/", "/memfd:", "/run/nct/")
MS_PROPAGATION = (1 << 17) | (1 << 18) | (1 << 19) | (1 << 20)  # unbindable, private, slave, shared


def inside(path: str | None, rootfs: str) -> bool:
    return path is not None and (path == rootfs or path.startswith(rootfs + "/"))


def target_of(ev: dict, which: str = "") -> str | None:
    """Host path an event acts on, from the path argument and what its dir fd points at
    (which="2": a rename's destination)."""
    path, dirfd = ev.get("path" + which), ev.get("dirfd" + which)
    if ev["syscall"] in ("fchmod", "fchown"):
        return ev.get("fd")
    if path is None:
        return None
    if path.startswith("/"):
        return os.path.normpath(path)
    if not path:  # fd-relative with AT_EMPTY_PATH (move_mount onto an O_PATH fd)
        return dirfd
    return os.path.normpath(os.path.join(dirfd or "?", path))


def targets(ev: dict) -> list[str | None]:
    """Every path an event acts on (both sides of a rename)."""
    return [target_of(ev, w) for w in (("", "2") if "path2" in ev else ("",))]


def violations(events: list[dict], rootfs: str) -> list[dict]:
    """Events that acted on a path outside `rootfs` (and ALLOWED_PREFIXES), one entry per
    offending path; an event the tracer could not decode is a violation too."""
    bad = []
    for ev in events:
        if "error" in ev:
            bad.append(ev)
            continue
        if ev["confined"]:  # root is the container root: it cannot name a host path
            continue
        if ev.get("detached") and not (ev.get("path") or "").startswith("/"):
            continue  # inside a mount attached nowhere yet (the /proc/driver/nvidia tmpfs)
        if ev["syscall"] == "mount" and ev.get("own_ns") and ev["flags"] & MS_PROPAGATION \
                and ev.get("source") is None:
            continue  # propagation change in the process's own new namespace: no fs change
        for t in targets(ev):
            if not (inside(t, rootfs) or (t or "").startswith(ALLOWED_PREFIXES)):
                bad.append(ev)
    return bad
