"""Syscall audit (python-ptrace) of the real hook binary, invoked with the real OCI state of a
runc-created container whose image is hostile (library dir, ld.so.cache and mount targets
are symlinks to a host victim dir; LD_PRELOAD in its env): no open-for-write, creat, mkdir,
mknod, symlink, rename, unlink, chmod or mount may touch a path outside the container root,
the device cgroup files aside. Then runc start runs the configured container."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from e2e.audit_rules import inside, target_of, targets, violations
from e2e.harness import HOOK, bundle_with_hook, mounts_under, needs_e2e, snapshot, venv_bin

pytestmark = [needs_e2e]
ptrace = pytest.importorskip("ptrace", reason="needs python-ptrace")

HERE = Path(__file__).resolve().parent
LIBDIR = "usr/lib/x86_64-linux-gnu"


@pytest.fixture
def hostile(rootfs, tmp_path):
    victim = tmp_path / "victim"
    for d in ("lib", "etc", "bin"):
        (victim / d).mkdir(parents=True)
    (victim / "etc/ld.so.cache").write_bytes(b"HOST CACHE")
    (victim / "bin/nvidia-smi").write_text("host\n")
    shutil.rmtree(rootfs / LIBDIR)
    os.symlink(str(victim / "lib"), rootfs / LIBDIR)
    os.symlink(str(victim / "etc/ld.so.cache"), rootfs / "etc/ld.so.cache")
    os.symlink(str(victim / "bin/nvidia-smi"), rootfs / "usr/bin/nvidia-smi")
    return victim


def audit(sim_node, rootfs: Path, out: Path, env: list[str], script: str):
    bundle = bundle_with_hook(rootfs, script, env, hooks={})
    out.mkdir()
    res = sim_node.run([sys.executable, str(HERE / "audit_run.py"), str(bundle), str(rootfs), str(out),
                        venv_bin(HOOK)], timeout=300)
    assert res.returncode == 0, res.stderr.decode() + (out / "result.json").read_text()
    result = json.loads((out / "result.json").read_text())
    trace = json.loads((out / "trace.json").read_text())
    return result, trace


def test_hostile_image_hook_audit(sim_node, rootfs, hostile, tmp_path):
    before = snapshot(hostile)
    env = ["NVIDIA_VISIBLE_DEVICES=1", f"LD_PRELOAD={hostile}/lib/libevil.so", f"LD_LIBRARY_PATH={hostile}/lib"]
    result, trace = audit(sim_node, rootfs, tmp_path / "out", env, "cuda-probe; nvidia-smi -L")
    assert result["hook_rc"] == 0, (tmp_path / "out/hook.err").read_text()
    events = trace["events"]
    assert trace["processes"] >= 2  # the hook (it applies in-process, without a worker) and ldconfig
    kinds = {e["syscall"] for e in events}
    assert {"move_mount", "mkdirat"} <= kinds or "move_mount" in kinds, kinds
    assert any(e["exe"] and "ldconfig" in e["exe"] or (e.get("path") or "").endswith("ld.so.cache~")
               for e in events), "ldconfig was not seen writing the cache"
    bad = violations(events, str(rootfs))
    assert bad == [], json.dumps(bad[:5], indent=1)
    assert snapshot(hostile) == before
    assert mounts_under(rootfs) == [] and mounts_under(hostile) == []
    out = (tmp_path / "out/container.out").read_text()
    assert "cuDriverGetVersion=12040" in out
    assert sim_node.gpu(1)["uuid"] in out


def test_refused_container_is_never_started(sim_node, rootfs, tmp_path):
    result, trace = audit(sim_node, rootfs, tmp_path / "out", ["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_REQUIRE_CUDA=cuda>=50"],
                          "echo STARTED")
    assert result["hook_rc"] == 1
    assert result["status_after_hook"] == "created" and "start_rc" not in result
    assert "unsatisfied condition: cuda>=50" in (tmp_path / "out/hook.err").read_text()
    # planning failed before anything was mounted or written into the container
    assert [e for e in trace["events"] if inside(target_of(e), str(rootfs))] == []
    assert (tmp_path / "out/container.out").read_text() == ""


def test_standalone_configure_audit(sim_node, rootfs, hostile, tmp_path):
    """`nvidia-container-cli configure` without --pid works in the current mount namespace
    with the host's root: here every path check is a real one (no confinement shortcut)."""
    before = snapshot(hostile)
    out = tmp_path / "trace.json"
    r = str(rootfs)
    res = sim_node.run([sys.executable, str(HERE / "audit_tracer.py"), str(out), r, "--",
                        venv_bin("nvidia-container-cli"), "configure", "--device=1", "--compute", "--utility",
                        "--ldconfig=@/sbin/ldconfig", r], timeout=300)
    assert res.returncode == 0, res.stderr.decode()
    trace = json.loads(out.read_text())
    assert trace["rc"] == 0, res.stderr.decode()
    events = trace["events"]
    unconfined = [e for e in events if not e["confined"]]
    kinds = sorted({e["syscall"] for e in events})
    assert len([e for e in unconfined if e["syscall"] == "move_mount"]) >= 10, (kinds, res.stderr.decode()[-2000:])
    assert violations(events, r) == [], json.dumps(violations(events, r)[:5], indent=1)
    # the hostile links were followed inside the root only
    assert any(inside(target_of(e), r) and str(hostile).lstrip("/") in (target_of(e) or "") for e in unconfined), \
        json.dumps([target_of(e) for e in unconfined][:40], indent=1)
    assert snapshot(hostile) == before
    assert mounts_under(rootfs) == [], mounts_under(rootfs)


def test_tracer_sees_host_writes(tmp_path, rootfs):
    """Negative control: the same tracer and rules flag a process that writes outside the
    root (children, relative paths and both sides of a rename included), so an empty
    violation list above means something."""
    victim = tmp_path / "v"
    (victim / "in").mkdir(parents=True)
    out = tmp_path / "trace.json"
    script = (f"cd {victim}; touch a; mkdir d; ln -s x l; chmod 600 a; echo hi > {rootfs}/ok; "
              f"(cd in && mv ../a ../b && echo hi > ../../parent-file); rm b; mkdir {rootfs}/ok-dir; "
              f"exec 8<{rootfs}; touch /proc/self/fd/8/ok-via-fd; exec 9<{victim}/d; touch /proc/self/fd/9/via-fd")
    res = subprocess.run([sys.executable, str(HERE / "audit_tracer.py"), str(out), str(rootfs), "--",
                          "sh", "-c", script], capture_output=True, timeout=120)
    assert res.returncode == 0, res.stderr.decode()
    bad = violations(json.loads(out.read_text())["events"], str(rootfs))
    flagged = {(e["syscall"].removesuffix("at").removesuffix("at2").removesuffix("2"), os.path.basename(t))
               for e in bad for t in targets(e) if not inside(t, str(rootfs))}
    assert {("open", "a"), ("mkdir", "d"), ("symlink", "l"), ("rename", "a"), ("rename", "b"),
            ("open", "parent-file"), ("unlink", "b")} <= flagged, flagged
    # a path through a /proc/self/fd magic link is judged by what the fd is
    assert f"{victim}/d/via-fd" in {t for e in bad for t in targets(e)}, flagged
    assert not any(base == "ok-via-fd" for _, base in flagged), flagged
    assert any(name in ("chmod", "fchmod") for name, base in flagged if base == "a"), flagged
    assert not any(base in ("ok", "ok-dir") for _, base in flagged), flagged
