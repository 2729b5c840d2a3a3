"""`--config-mode oci-hook`: podman (the same hooks.d format CRI-O reads) runs the hook our
JSON names; with the real nvidia-container-runtime-hook on a simulated node, a container
asking for GPU 0 gets its device nodes."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from .conftest import _unmount_under, busybox_tar, have

BIN = Path(sys.executable).parent
pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not have("podman", "runc"), reason="needs root, podman, runc")


class Podman:
    def __init__(self, base: Path, hooks: Path, wrap: list[str] | None = None):
        self.base, self.hooks, self.wrap = base, hooks, wrap or []

    def __call__(self, *args: str) -> subprocess.CompletedProcess:
        cmd = [*self.wrap, "podman", "--root", str(self.base / "root"), "--runroot", str(self.base / "runroot"),
               "--storage-driver", "vfs", "--cgroup-manager", "cgroupfs", "--events-backend", "none",
               "--runtime", shutil.which("runc") or "runc",  # crun refuses this v1/v2 hybrid host
               "--hooks-dir", str(self.hooks), *args]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=180)

    def run(self, *args: str) -> subprocess.CompletedProcess:
        # explicit limits: podman's defaults exceed what this host lets a container raise
        return self("run", "--rm", "--network", "none", "--ulimit", "nofile=1024:1024",
                    "--ulimit", "nproc=1024:1024", *args)


@pytest.fixture
def podman(tmp_path):
    base = Path(tempfile.mkdtemp(prefix="nct-pm-", dir="/tmp"))  # podman wants a short runroot
    hooks = base / "hooks.d"
    p = Podman(base, hooks)
    r = p("import", str(busybox_tar(tmp_path / "img")), "nct-busybox:test")
    assert r.returncode == 0, r.stderr
    yield p
    p("rm", "-a", "-f")
    _unmount_under(str(base))
    shutil.rmtree(base, ignore_errors=True)


def write_hook(hook_path: str, target: Path) -> None:
    r = subprocess.run([str(BIN / "nvidia-ctk"), "runtime", "configure", "--runtime=crio", "--config-mode=oci-hook",
                        f"--nvidia-runtime-hook-path={hook_path}", f"--oci-hook-path={target}"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_podman_runs_the_hook_we_describe(podman, tmp_path):
    record = tmp_path / "hook-args"
    hook = tmp_path / "recording-hook"
    hook.write_text(f"#!/bin/sh\necho \"$@\" > {record}\ncat > {record}.state\n")
    hook.chmod(0o755)
    write_hook(str(hook), podman.hooks / "oci-nvidia-hook.json")
    r = podman.run("nct-busybox:test", "/bin/echo", "hooked")
    assert r.returncode == 0 and r.stdout == "hooked\n", r.stderr
    assert record.read_text().split() == ["prestart"]
    assert json.loads((tmp_path / "hook-args.state").read_text())["status"] == "creating"


@pytest.mark.skipif(importlib.util.find_spec("nct.hook.main") is None or importlib.util.find_spec("nct.cli.sim") is None,
                    reason="the hook (nct.hook.main) or the simulator (nct.cli.sim) is not there yet")
def test_podman_gpu_container_on_simulated_node(podman, tmp_path):
    sim = tmp_path / "node"
    r = subprocess.run([str(BIN / "nct"), "sim", "create", str(sim), "--gpus", "2"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    write_hook(str(BIN / "nvidia-container-runtime-hook"), podman.hooks / "oci-nvidia-hook.json")
    podman.wrap = [str(BIN / "nct"), "sim", "run", str(sim), "--"]
    from e2e.harness import _boot_ticks, wait_no_stray_ldconfig

    since = _boot_ticks()
    r = podman.run("-e", "NVIDIA_VISIBLE_DEVICES=0", "nct-busybox:test", "ls", "/dev")
    assert r.returncode == 0, r.stderr
    assert {"nvidia0", "nvidiactl"} <= set(r.stdout.split()) and "nvidia1" not in r.stdout.split()
    # the hook does not wait for ldconfig's child: conmon (a subreaper) reaps it and its
    # jail remover; nothing is left, not even a zombie
    assert wait_no_stray_ldconfig(since) == []
    r = podman.run("nct-busybox:test", "ls", "/dev")
    assert r.returncode == 0 and "nvidia0" not in r.stdout.split(), r.stderr
