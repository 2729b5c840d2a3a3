"""Syscall audit: a hostile-image run of the prestart hook (apply_edits, real runc) traced with
python-ptrace across every process it starts (worker after setns, ldconfig child after
pivot_root). No open-for-write, creat, mkdir, mknod, symlink, rename, link, unlink, chmod, chown,
truncate, mount or move_mount may touch a path outside the container root (cgroup files aside).
The tracer and its rules are tests/e2e/audit_tracer.py and audit_rules.py (negative control:
tests/e2e/test_audit.py::test_tracer_sees_host_writes)."""

from __future__ import annotations

import json
import os
import platform
import shutil
import sys

import pytest

from e2e.audit_rules import violations
from realparts import (HERE, HOOKHELPER, NV_MAJOR, needs_gcc, needs_root, needs_runc, run_container, snapshot,
                       write_bundle, write_edits)

pytestmark = [needs_root, needs_runc, needs_gcc,
              pytest.mark.skipif(platform.machine() != "x86_64", reason="tracer decodes x86_64 syscalls")]
TRACER = os.path.join(os.path.dirname(HERE), "e2e", "audit_tracer.py")  # the one syscall tracer
LIBDIR = "/usr/lib/x86_64-linux-gnu"


def test_hostile_image_hook_touches_nothing_outside_the_root(tmp_path, rootfs, host_gpu, victim):
    pytest.importorskip("ptrace")
    before = snapshot(victim)
    # hostile image: lib dir, /etc and a mount target all point at host paths
    os.rmdir(os.path.join(rootfs, LIBDIR.lstrip("/")))
    os.symlink(os.path.join(victim, "lib"), os.path.join(rootfs, LIBDIR.lstrip("/")))
    shutil.rmtree(os.path.join(rootfs, "etc"))
    os.symlink(os.path.join(victim, "etc"), os.path.join(rootfs, "etc"))
    os.symlink(os.path.join(victim, "lib", "keep"), os.path.join(rootfs, "usr/bin/nvidia-smi"))
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho smi\n")
    proc = tmp_path / "hostproc" / "driver" / "nvidia"
    (proc / "gpus" / "00000000:01:00.0").mkdir(parents=True)
    (proc / "params").write_text("ModifyDeviceFiles: 1\n")
    edits = write_edits(str(tmp_path / "edits.json"), {
        "device_nodes": [dict(path="/dev/nvidia1", host_path=host_gpu["nodes"]["nvidia1"], major=NV_MAJOR, minor=1)],
        "mounts": [dict(host_path=host_gpu["lib"], container_path=f"{LIBDIR}/libnvfake.so.550.54.15"),
                   dict(host_path=str(smi), container_path="/usr/bin/nvidia-smi")],
        "symlinks": [dict(target="libnvfake.so.1", link=f"{LIBDIR}/libnvfake.so")],
        "ldconfig_folders": [LIBDIR],
        "proc_driver_gpus": ["00000000:01:00.0"],
    }, {"proc_root": str(tmp_path / "hostproc")})
    report = str(tmp_path / "report.json")
    hooks = {"prestart": [{"path": sys.executable,
                           "args": [sys.executable, TRACER, report, rootfs, "--", sys.executable, HOOKHELPER, edits],
                           "env": ["PATH=/usr/sbin:/usr/bin:/sbin:/bin", "PYTHONDONTWRITEBYTECODE=1"]}]}
    bundle = os.path.dirname(rootfs)
    write_bundle(bundle, ["sh", "-c", "cat /dev/nvidia1 2>&1; cat /usr/bin/nvidia-smi; ls /proc/driver/nvidia/gpus"],
                 hooks=hooks)
    res = run_container(bundle, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "No such device or address" in res.stdout and "echo smi" in res.stdout
    with open(report) as f:
        doc = json.load(f)
    assert doc["rc"] == 0
    assert len(doc["events"]) >= 10  # the mounts, mkdirs, writes were seen...
    assert violations(doc["events"], rootfs) == []  # ...and none of them left the container root
    assert doc["processes"] >= 2  # worker (after setns) and the ldconfig children
    assert any(e["confined"] for e in doc["events"])  # ldconfig, pivoted into the root
    assert snapshot(victim) == before


def test_hostile_image_cdi_hooks_touch_nothing_outside_the_root(tmp_path, rootfs, victim):
    """The same audit for nvidia-cdi-hook create-symlinks and update-ldcache (standalone, as
    a createContainer hook would run them)."""
    pytest.importorskip("ptrace")
    import subprocess

    from realparts import build_lib

    before = snapshot(victim)
    build_lib(os.path.join(rootfs, "opt/nv/lib"), "libnvfake.so.550.54.15", "libnvfake.so.1")
    os.rmdir(os.path.join(rootfs, LIBDIR.lstrip("/")))
    os.symlink(os.path.join(victim, "lib"), os.path.join(rootfs, LIBDIR.lstrip("/")))
    shutil.rmtree(os.path.join(rootfs, "etc"))
    os.symlink(os.path.join(victim, "etc"), os.path.join(rootfs, "etc"))
    bundle = os.path.dirname(rootfs)
    with open(os.path.join(bundle, "config.json"), "w") as f:
        json.dump({"root": {"path": "rootfs"}}, f)
    state = json.dumps({"ociVersion": "1.0.2", "id": "x", "pid": os.getpid(), "bundle": bundle})
    hook = os.path.join(os.path.dirname(sys.executable), "nvidia-cdi-hook")
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "PYTHONDONTWRITEBYTECODE": "1"}
    for args in (["create-symlinks", "--link", f"libnvfake.so.1::{LIBDIR}/libnvfake.so",
                  "--link", "/etc/passwd::/etc/../../../../etc/shadow"],
                 ["update-ldcache", "--folder", "/opt/nv/lib", "--folder", LIBDIR]):
        report = str(tmp_path / f"{args[0]}.json")
        res = subprocess.run([sys.executable, TRACER, report, rootfs, "--", hook, *args], input=state,
                             capture_output=True, text=True, env=env, timeout=120)
        assert res.returncode == 0, res.stderr
        with open(report) as f:
            doc = json.load(f)
        assert doc["rc"] == 0 and len(doc["events"]) >= 2, doc
        assert violations(doc["events"], rootfs) == [], violations(doc["events"], rootfs)[:5]
    assert any(e["confined"] for e in doc["events"])  # update-ldcache's ldconfig, pivoted into the rootfs
    assert snapshot(victim) == before
    cache = os.path.join(rootfs, victim.lstrip("/"), "etc", "ld.so.cache")
    out = subprocess.run(["/sbin/ldconfig", "-p", "-C", cache], capture_output=True, text=True).stdout
    assert "libnvfake.so.1" in out
