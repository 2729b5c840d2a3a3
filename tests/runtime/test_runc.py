"""The shim as a drop-in runc replacement for real busybox containers:
create/start/state/delete through `nvidia-container-runtime`, with and without GPUs."""

import json
import os
import subprocess
import time
import uuid

import pytest

from .conftest import entry_point, needs_root_runc, runc_bundle


class Runc:
    """runc-style calls through the shim, with a private --root; always cleans up."""

    def __init__(self, tmp_path, env):
        self.root = tmp_path / "runc-root"
        self.shim = entry_point("nvidia-container-runtime")
        self.env = env
        self.ids = []

    def __call__(self, *args, check=True):
        r = subprocess.run([self.shim, "--root", str(self.root), *args], env=self.env,
                           stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)
        if check:
            assert r.returncode == 0, f"{args}: {r.stderr}"
        return r

    def run_to_exit(self, bundle):
        cid = "nct-rt-" + uuid.uuid4().hex[:10]
        self.ids.append(cid)
        self("create", "--bundle", str(bundle), cid)
        assert json.loads(self("state", cid).stdout)["status"] == "created"
        self("start", cid)
        for _ in range(600):  # wait for the container to finish (not a timing assert)
            if json.loads(self("state", cid).stdout)["status"] == "stopped":
                break
            time.sleep(0.05)
        self("delete", cid)
        self.ids.remove(cid)

    def cleanup(self):
        for cid in self.ids:
            self("delete", "--force", cid, check=False)


@pytest.fixture
def runc(tmp_path):
    needs_root_runc()
    cfg = tmp_path / "config.toml"
    cfg.write_text("")
    env = {"PATH": f"{os.path.dirname(entry_point('nvidia-container-runtime'))}:/usr/sbin:/usr/bin:/sbin:/bin",
           "NVIDIA_CTK_CONFIG_FILE_PATH": str(cfg), "XDG_RUNTIME_DIR": str(tmp_path)}
    r = Runc(tmp_path, env)
    r.config = cfg
    yield r
    r.cleanup()


def test_plain_container_untouched(runc, tmp_path):
    bundle, out = runc_bundle(tmp_path, "echo hello > /out/result; ls /dev > /out/dev")
    before = (bundle / "config.json").read_bytes()
    runc.run_to_exit(bundle)
    assert (out / "result").read_text() == "hello\n"
    assert not any(n.startswith("nvidia") for n in (out / "dev").read_text().split())
    assert (bundle / "config.json").read_bytes() == before


CHECKS = r"""
ls /dev > /out/dev
cat /dev/nvidia1 2> /out/nvidia1.err
readlink /usr/lib/x86_64-linux-gnu/libcuda.so.1 > /out/libcuda
cuda-probe > /out/probe 2>&1
echo "$NVIDIA_VISIBLE_DEVICES" > /out/nvd
nvidia-smi -L > /out/smi 2>&1
echo done > /out/done
"""


def test_jit_cdi_gpu_container(runc, tmp_path, sim_node):
    """NVIDIA_VISIBLE_DEVICES=1,3 in jit-cdi mode on a simulated node: only those GPUs,
    the driver libraries resolvable through the ld cache the hooks rebuilt."""
    runc.config.write_text(f'[nvidia-container-cli]\nroot = "{sim_node}/root"\n')
    runc.env["NCT_PROC_ROOT"] = str(sim_node / "root" / "proc")
    bundle, out = runc_bundle(tmp_path, CHECKS, ["NVIDIA_VISIBLE_DEVICES=1,3"])
    runc.run_to_exit(bundle)
    assert (out / "done").exists()
    devs = (out / "dev").read_text().split()
    assert {"nvidia1", "nvidia3", "nvidiactl"} <= set(devs)
    assert "nvidia0" not in devs and "nvidia2" not in devs
    # allowed by the device cgroup, but no driver behind the node: ENXIO, not EPERM
    assert "No such device or address" in (out / "nvidia1.err").read_text()
    assert (out / "libcuda").read_text().strip() == "libcuda.so.550.54.15"
    assert (out / "nvd").read_text().strip() == "void"
    assert "cuDriverGetVersion=" in (out / "probe").read_text(), (out / "probe").read_text()
