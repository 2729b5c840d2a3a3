"""Helpers for end-to-end tests: a simulated node (3 GPUs, GPU 2 with 2 MIG devices), a
busybox+glibc rootfs with the cuda probe, runc bundles carrying our prestart hook, and a
runner that starts runc INSIDE `nct sim run` so the hook sees the node at the real paths."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from e2e import rootfs as R

from nct.record import Record

HERE = Path(__file__).resolve().parent


def venv_bin(name: str) -> str:
    """Absolute path of a console script of the venv running pytest (hooks need absolute
    paths); the same rule as tests/conftest.py, which cannot be imported by name."""
    return str(Path(sys.executable).parent / name)

HOOK = "nvidia-container-runtime-hook"


def _missing() -> str | None:
    if os.geteuid() != 0:
        return "needs root (mount namespaces, runc, cgroups)"
    for tool in ("runc", "gcc"):
        if shutil.which(tool) is None:
            return f"needs {tool}"
    if not os.path.exists(R.BUSYBOX):
        return "needs busybox-static"
    return None


_WHY = _missing()
needs_e2e = pytest.mark.skipif(_WHY is not None, reason=_WHY or "")


class Node(Record, frozen=False):
    dir: Path
    info: dict

    def gpu(self, i: int) -> dict:
        return self.info["gpus"][i]

    def run(self, argv: list[str], *, input: bytes | None = None, timeout: int = 120,
            env: dict | None = None) -> subprocess.CompletedProcess:
        """argv inside `nct sim run NODE --` (private mount namespace with the node at /)."""
        return subprocess.run([venv_bin("nct"), "sim", "run", str(self.dir), "--", *argv], input=input,
                              capture_output=True, timeout=timeout, env=env)


def hook_entry(*extra: str) -> dict:
    return {"prestart": [{"path": venv_bin(HOOK), "args": [HOOK, *extra, "prestart"]}]}


def bundle_with_hook(rootfs: Path, script: str, env: list[str], *, hooks: dict | None = None,
                     mknod_major: int | None = 195, **kw) -> Path:
    """A bundle running `sh -c script` with our prestart hook. `mknod_major`: the device
    cgroup lets the container mknod (only: no read/write) char nodes of that major, so a
    test can make /dev/nvidia0 itself and see the cgroup refuse to open it."""
    if mknod_major is not None and "caps" not in kw:
        kw["caps"] = ["CAP_AUDIT_WRITE", "CAP_KILL", "CAP_NET_BIND_SERVICE", "CAP_MKNOD"]
    bundle = R.make_bundle(rootfs.parent, rootfs, ["sh", "-c", script], env,
                           hooks=hook_entry() if hooks is None else hooks, **kw)
    if mknod_major is not None:
        cfg = json.loads((bundle / "config.json").read_text())
        devs = cfg.setdefault("linux", {}).setdefault("resources", {}).setdefault("devices", [])
        devs.append({"allow": True, "type": "c", "major": mknod_major, "access": "m"})
        (bundle / "config.json").write_text(json.dumps(cfg, indent=2))
    return bundle


def runc_run(node: Node, bundle: Path, **kw) -> subprocess.CompletedProcess:
    return node.run(["runc", "run", "--bundle", str(bundle), R.container_id()], **kw)


def runc_run_after(node: Node, warm: Path, bundle: Path, *, settle: float = 0.0, **kw) -> subprocess.CompletedProcess:
    """Start a container from bundle `warm`, then run `bundle`, both in ONE `nct sim run`
    namespace: the second start is a node's steady state. Each namespace mounts the node's
    overlays afresh, and overlayfs gives their files a pseudo st_dev per mount, which the
    host caches key on (nct.hostcache): across two `nct sim run`s a driver file may look
    like another file, as it never does on a real node. The result is the second run's; a
    failed first run gives its exit status and stderr. `settle`: seconds to wait inside the
    namespace before the first run (setting the namespace up touches the node's files, which
    the host caches then treat as too new for `settle` = their racy window)."""
    script = 'sleep "$5"; runc run --bundle "$1" "$2" >/dev/null || exit; exec runc run --bundle "$3" "$4"'
    return node.run(["sh", "-c", script, "sh", str(warm), R.container_id(), str(bundle), R.container_id(),
                     f"{settle:.2f}"], **kw)


def snapshot(path: Path) -> dict[str, tuple]:
    """Names, types, modes, owners and contents of everything under a host dir (lstat: a
    symlink is recorded as a link), to assert that a run left it untouched."""
    out: dict[str, tuple] = {}
    for dirpath, dirnames, filenames in os.walk(path):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            data = None
            if os.path.isfile(p) and not os.path.islink(p):
                with open(p, "rb") as f:
                    data = f.read()
            out[os.path.relpath(p, path)] = (st.st_mode, st.st_uid, st.st_gid, st.st_size, st.st_mtime_ns, data)
    return out


def mounts_under(path: Path) -> list[str]:
    """Mount points at or below `path` in this (the host's) mount namespace."""
    prefix = str(path).rstrip("/")
    with open("/proc/self/mountinfo") as f:
        points = [line.split()[4] for line in f]
    return [p for p in points if p == prefix or p.startswith(prefix + "/")]


def _boot_ticks() -> int:
    """Clock ticks since boot now (the unit of /proc/PID/stat's start time)."""
    return int(float(Path("/proc/uptime").read_text().split()[0]) * os.sysconf("SC_CLK_TCK"))


def stray_ldconfig_processes(since: int) -> list[str]:
    """ldconfig's children (`nvc:[ldconfig]`, its remover `nvc:[ldconf-rm]`) started after
    `since` (_boot_ticks()) that are still there, zombies included (an orphan nobody reaps):
    "PID PPID STATE NAME" each. Only those started since: other tests run beside this one."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        rest = stat[stat.rindex(")") + 2:].split()
        if name.startswith("nvc:[ldconf") and int(rest[19]) >= since:
            found.append(f"{pid} {rest[1]} {rest[0]} {name}")
    return found


def wait_no_stray_ldconfig(since: int, limit: float = 10.0) -> list[str]:
    """stray_ldconfig_processes(since) once they are gone, or after `limit` seconds (a child
    may still be exiting right after a start)."""
    import time

    deadline = time.monotonic() + limit
    while True:
        left = stray_ldconfig_processes(since)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.1)
