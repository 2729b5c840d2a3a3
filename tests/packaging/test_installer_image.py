"""The installer image, built and run for real: a Debian 11 base made with debootstrap and
`podman import`ed (no registry is reachable), `podman build` of packaging/container with
the assembled toolkit, then the image run as the DaemonSet runs it (host toolkit dir and
engine config as volumes at the same paths) against a simulated node.  While it runs, the
toolkit it installed on the "host" runs a GPU container through runc; `podman stop`
(SIGTERM) puts the engine config back and removes the toolkit."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from toolkit_build import CACHE, REPO, toolkit_tree

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("podman") or not shutil.which("runc"),
                                reason="needs root, podman, runc")
SUITE = "bullseye"
MIRROR = os.environ.get("NCT_DEBIAN_MIRROR", "http://deb.debian.org/debian")
BASE = f"localhost/nct-base:{SUITE}"
NCT = str(Path(sys.executable).parent / "nct")
# explicit limits: podman's defaults exceed what this host lets a container raise
LIMITS = ("--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024")


def base_tar() -> Path:
    """A tarball of a minbase Debian 11 root (cached under $NCT_CACHE/debootstrap)."""
    tar = CACHE / "debootstrap" / f"{SUITE}.tar"
    if tar.exists():
        return tar
    root = CACHE / "debootstrap" / SUITE
    if not (root / "bin/sh").exists():
        if not shutil.which("debootstrap"):
            pytest.skip("needs debootstrap")
        tmp = root.with_name(root.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.parent.mkdir(parents=True, exist_ok=True)
        r = subprocess.run(["debootstrap", "--variant=minbase", SUITE, str(tmp), MIRROR], capture_output=True,
                           text=True)
        if r.returncode != 0:
            pytest.skip(f"debootstrap {SUITE} failed (no network?): {r.stdout.strip().splitlines()[-1:]}")
        os.rename(tmp, root)
    subprocess.run(["tar", "--numeric-owner", "--exclude=./dev/*", "--exclude=./proc/*", "--exclude=./sys/*",
                    "-C", str(root), "-cf", f"{tar}.tmp", "."], check=True)
    os.rename(f"{tar}.tmp", tar)
    return tar


class Podman:
    def __init__(self, base: Path):
        self.base = base

    def __call__(self, *args: str, timeout: int = 300) -> subprocess.CompletedProcess:
        cmd = ["podman", "--root", str(self.base / "root"), "--runroot", str(self.base / "runroot"),
               "--storage-driver", "vfs", "--cgroup-manager", "cgroupfs", "--events-backend", "none",
               "--runtime", shutil.which("runc") or "runc", *args]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def podman():
    base = Path(tempfile.mkdtemp(prefix="nct-img-", dir="/tmp"))  # podman wants a short runroot
    p = Podman(base)
    yield p
    p("rm", "-a", "-f", "-t", "0")
    subprocess.run(["sh", "-c", f"grep -o ' {base}[^ ]*' /proc/self/mountinfo | sort -r | xargs -r -n1 umount -l"])
    shutil.rmtree(base, ignore_errors=True)


def test_installer_image_built_and_run_on_simulated_node(podman, tmp_path):
    toolkit = toolkit_tree()
    r = podman("import", str(base_tar()), BASE)
    assert r.returncode == 0, r.stderr
    ctx = tmp_path / "build"
    ctx.mkdir()
    shutil.copytree(toolkit, ctx / "toolkit", symlinks=True)
    r = podman("build", "--network", "none", "-f", str(REPO / "packaging/container/Containerfile"),
               "--build-arg", f"BASE={BASE}", "-t", "nct-installer:test", str(ctx), timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    r = podman("run", "--rm", "--network", "none", *LIMITS, "--entrypoint", "/bin/sh", "nct-installer:test", "-c",
               "command -v python3 python3.9 pip; /opt/nct/nct --version")
    assert r.stdout.strip() == "nct, version 0.1.0", r.stdout + r.stderr  # no Python in the image but ours

    node = tmp_path / "node"
    subprocess.run([NCT, "sim", "create", str(node), "--gpus", "2"], check=True, capture_output=True)
    tk = tmp_path / "usr/local/nvidia/toolkit"  # hostPath volumes, mounted at the same paths
    etc = tmp_path / "etc/docker"
    run_nvidia = tmp_path / "run/nvidia"
    for d in (tk, etc, run_nvidia):
        d.mkdir(parents=True)
    original = '{\n  "log-level": "warn"\n}\n'
    (etc / "daemon.json").write_text(original)
    vols = [f"{d}:{d}" for d in (tk, etc, run_nvidia)]
    r = podman("run", "-d", "--name", "nct-toolkit", "--network", "none", *LIMITS,
               *[a for v in vols for a in ("-v", v)], "nct-installer:test",
               "--toolkit-root", str(tk), "--runtime", "docker", "--config", str(etc / "daemon.json"),
               "--restart-mode", "none", "--toolkit-pid-file", str(run_nvidia / "toolkit.pid"),
               "--driver-root", "/", "--driver-root-ctr-path", "/")
    assert r.returncode == 0, r.stderr
    deadline = time.monotonic() + 120
    while "waiting for SIGTERM" not in (logs := podman("logs", "nct-toolkit").stderr):
        assert time.monotonic() < deadline and podman("inspect", "-f", "{{.State.Running}}", "nct-toolkit") \
            .stdout.strip() == "true", logs
        time.sleep(0.2)
    daemon = json.loads((etc / "daemon.json").read_text())
    assert daemon["runtimes"]["nvidia"]["path"] == str(tk / "nvidia-container-runtime")
    assert (tk / "python/NCT-TOOLKIT").is_file()

    # the installed toolkit runs a GPU container through runc on the simulated node
    rootfs = tmp_path / "bundle/rootfs"
    from e2e import rootfs as R

    R.make_rootfs(rootfs)
    R.make_bundle(rootfs.parent, rootfs, ["sh", "-c", "ls /dev; echo end"], ["NVIDIA_VISIBLE_DEVICES=1"])
    shim, state = str(tk / "nvidia-container-runtime"), str(tmp_path / "runc")
    script = (f'{shim} --root {state} create --bundle {rootfs.parent} gpu1 </dev/null >{tmp_path}/out 2>&1 && '
              f'{shim} --root {state} start gpu1 && i=0 && while [ $i -lt 300 ] && ! {shim} --root {state} '
              f'state gpu1 | grep -q stopped; do sleep 0.1; i=$((i+1)); done; {shim} --root {state} delete gpu1')
    r = subprocess.run([NCT, "sim", "run", str(node), "--", "env", "-i", "PATH=/usr/sbin:/usr/bin:/sbin:/bin",
                        "sh", "-c", script], capture_output=True, text=True, timeout=300)
    out = (tmp_path / "out").read_text() if (tmp_path / "out").exists() else ""
    assert r.returncode == 0 and "end" in out, r.stdout + r.stderr + out
    devs = out.split()
    assert "nvidia1" in devs and "nvidia0" not in devs and "nvidiactl" in devs, out

    r = podman("stop", "-t", "60", "nct-toolkit")
    assert r.returncode == 0, r.stderr
    assert podman("inspect", "-f", "{{.State.ExitCode}}", "nct-toolkit").stdout.strip() == "0", \
        podman("logs", "nct-toolkit").stderr
    assert (etc / "daemon.json").read_text() == original
    assert not any(tk.iterdir()), list(tk.iterdir())
