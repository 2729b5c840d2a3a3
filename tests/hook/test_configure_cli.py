"""`nvidia-container-cli configure`: flag validation and `--dry-run` plans on a simulated
node (read through a driver root and NCT_PROC_ROOT, no namespace needed)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

CLI = str(Path(sys.executable).parent / "nvidia-container-cli")


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    if shutil.which("gcc") is None or os.geteuid() != 0:
        pytest.skip("needs gcc and root (mknod) to build a simulated node")
    from nct.sim.node import create_node

    d = tmp_path_factory.mktemp("cfgnode") / "node"
    create_node(d, gpus=2, mig="1:2")
    return d


@pytest.fixture
def rootfs(tmp_path):
    r = tmp_path / "rootfs"
    (r / "etc").mkdir(parents=True)
    (r / "etc/debian_version").write_text("12\n")
    return r


def cli(node: Path | None, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    pre: list[str] = []
    if node is not None:
        env["NCT_PROC_ROOT"] = str(node / "root/proc")
        pre = ["--root", str(node / "root")]
    return subprocess.run([CLI, *pre, "configure", *args], capture_output=True, text=True, env=env)


def plan(node, rootfs, *args) -> dict:
    res = cli(node, "--dry-run", *args, str(rootfs))
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


@pytest.mark.parametrize("args, message", [
    (["relative/rootfs"], "must be an absolute path other than /"),
    (["/"], "must be an absolute path other than /"),
    (["--cuda-compat-mode=sometimes", "/tmp/x"], "invalid --cuda-compat-mode"),
    ([*[f"--require=cuda>=1.{i}" for i in range(33)], "/tmp/x"], "too many requirements"),
    (["--pid=0", "/tmp/x"], "invalid pid"),
])
def test_input_errors(args, message):
    res = cli(None, *args)
    assert res.returncode == 1
    assert res.stderr.startswith("nvidia-container-cli: ") and message in res.stderr
    assert res.stderr.count("\n") == 1


def test_dry_run_one_gpu(node, rootfs):
    p = plan(node, rootfs, "--device=1", "--compute", "--utility", "--ldconfig=@/sbin/ldconfig")
    paths = [d["path"] for d in p["device_nodes"]]
    assert paths == ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia1"]
    targets = {m["container_path"] for m in p["mounts"]}
    assert "/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15" in targets
    assert "/usr/bin/nvidia-smi" in targets
    assert p["proc_driver_gpus"] == ["0000:0f:00.0"] or len(p["proc_driver_gpus"]) == 1
    assert {"target": "libcuda.so.1", "link": "/usr/lib/x86_64-linux-gnu/libcuda.so"} in p["symlinks"]
    assert p["ldconfig_folders"] == ["/usr/lib/x86_64-linux-gnu"]
    assert os.listdir(rootfs) == ["etc"]  # dry run: nothing touched


def test_dry_run_capabilities_and_options(node, rootfs):
    none = plan(node, rootfs)
    assert [d["path"] for d in none["device_nodes"]] == ["/dev/nvidiactl"]
    assert none["mounts"] == [] or all("/usr/lib" not in m["container_path"] for m in none["mounts"])
    util = plan(node, rootfs, "--utility", "--device=none")
    assert "/dev/nvidia-uvm" not in [d["path"] for d in util["device_nodes"]]
    assert not any("libcuda" in m["container_path"] for m in util["mounts"])
    c32 = plan(node, rootfs, "--compute", "--compat32", "--device=0")
    assert any(m["container_path"].startswith("/usr/lib/i386-linux-gnu/libcuda.so") for m in c32["mounts"])
    sock = "/nvidia-persistenced/socket"
    ops = plan(node, rootfs, "--utility", "--device=0")
    assert any(m["container_path"].endswith(sock) for m in ops["mounts"])
    nops = plan(node, rootfs, "--utility", "--no-persistenced", "--device=0")
    assert not any(m["container_path"].endswith(sock) for m in nops["mounts"])
    compat = plan(node, rootfs, "--compute", "--device=0")
    assert compat["cuda_compat_dir"] == "/usr/local/cuda/compat"
    nocnt = plan(node, rootfs, "--compute", "--device=0", "--no-cntlibs")
    assert nocnt["cuda_compat_dir"] is None
    disabled = plan(node, rootfs, "--compute", "--device=0", "--cuda-compat-mode=disabled")
    assert disabled["cuda_compat_dir"] is None


def test_dry_run_lib64_image(node, tmp_path):
    r = tmp_path / "fedora"
    (r / "usr/lib32").mkdir(parents=True)
    p = plan(node, r, "--compute", "--compat32", "--device=0")
    targets = {m["container_path"] for m in p["mounts"]}
    assert "/usr/lib64/libcuda.so.550.54.15" in targets
    assert "/usr/lib32/libcuda.so.550.54.15" in targets


def test_dry_run_mig(node, rootfs):
    p = plan(node, rootfs, "--device=1:1", "--utility")
    assert [d["path"] for d in p["device_nodes"]][-3:][0] == "/dev/nvidia1"
    assert sum(d["path"].startswith("/dev/nvidia-caps/") for d in p["device_nodes"]) == 2
    res = cli(node, "--dry-run", "--device=1:1", "--mig-config=all", str(rootfs))
    assert res.returncode == 1 and "cannot enable mig-config with specific MIG devices" in res.stderr


@pytest.mark.parametrize("args, message", [
    (["--device=5"], "device error: unknown device: 5"),
    (["--device=0,GPU-nope"], "unknown device: GPU-nope"),
    (["--device=0", "--require=cuda>=99"], "requirement error: unsatisfied condition: cuda>=99"),
    (["--device=0", "--require=driver>=999 cuda>=1", "--require=arch<1.0"], "unsatisfied condition: arch<1.0"),
    (["--device=0", "--require=cuda>>1"], "invalid expression"),
    (["--imex-channel=abc"], "invalid channel ID: abc"),
])
def test_plan_errors(node, rootfs, args, message):
    res = cli(node, "--dry-run", *args, str(rootfs))
    assert res.returncode == 1
    assert message in res.stderr and res.stderr.count("\n") == 1 and "Traceback" not in res.stderr


def test_requirements_pass(node, rootfs):
    plan(node, rootfs, "--device=all", "--require=cuda>=12.4,driver>=550", "--require=brand=nvidia arch=9.0")


def test_no_driver(tmp_path, rootfs):
    env = dict(os.environ, NCT_PROC_ROOT=str(tmp_path))
    res = subprocess.run([CLI, "configure", "--dry-run", str(rootfs)], capture_output=True, text=True, env=env)
    assert res.returncode == 1 and "initialization error: NVIDIA driver not loaded" in res.stderr


def test_dry_run_mig_config_and_monitor(node, rootfs):
    p = plan(node, rootfs, "--device=1", "--mig-config=all", "--mig-monitor=all", "--utility")
    targets = {m["container_path"] for m in p["mounts"]}
    assert "/proc/driver/nvidia/capabilities" in targets
    caps = [d["path"] for d in p["device_nodes"] if d["path"].startswith("/dev/nvidia-caps/")]
    assert len(caps) >= 2 + 4  # config + monitor nodes, and GI/CI access nodes of both MIG devices
    res = cli(node, "--dry-run", "--device=1", "--mig-config=1", str(rootfs))
    assert res.returncode == 1 and "only 'all' devices are currently supported" in res.stderr
