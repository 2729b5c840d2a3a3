"""The shim as a drop-in runc replacement for real busybox containers:
create/start/state/delete through `nvidia-container-runtime`, with and without GPUs."""

import json
import os
import shutil
import subprocess
import tempfile
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
        # files, not pipes: a created container holds create's stdio open until it exits
        with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
            r = subprocess.run([self.shim, "--root", str(self.root), *args], env=self.env,
                               stdin=subprocess.DEVNULL, stdout=out, stderr=err, timeout=120)
            out.seek(0)
            err.seek(0)
            r.stdout, r.stderr = out.read(), err.read()
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
    if shutil.which("gcc"):  # the dlopen probe is built with gcc
        assert "cuDriverGetVersion=" in (out / "probe").read_text(), (out / "probe").read_text()
    uuids = {g["index"]: g["uuid"] for g in json.loads((sim_node / "node.json").read_text())["gpus"]}
    smi = (out / "smi").read_text()
    assert uuids[1] in smi and uuids[3] in smi, smi
    assert uuids[0] not in smi and uuids[2] not in smi


def test_cdi_mode_hand_written_spec(runc, tmp_path):
    """cdi mode through real runc: env, a device node and a mount from a spec dir."""
    cdi = tmp_path / "cdi"
    cdi.mkdir()
    (tmp_path / "shared.txt").write_text("from the host\n")
    (cdi / "test.json").write_text(json.dumps({
        "cdiVersion": "0.5.0", "kind": "vendor.example/thing",
        "devices": [{"name": "one", "containerEdits": {
            "env": ["THING=one"],
            "deviceNodes": [{"path": "/dev/thing0", "hostPath": "/dev/null"}]}}],
        "containerEdits": {"mounts": [{"hostPath": str(tmp_path / "shared.txt"),
                                       "containerPath": "/etc/thing.txt", "options": ["ro", "bind"]}]},
    }))
    runc.config.write_text(f'[nvidia-container-runtime.modes.cdi]\nspec-dirs = ["{cdi}"]\n')
    script = 'echo "$THING" > /out/env; cat /etc/thing.txt > /out/file; echo x > /dev/thing0 && echo ok > /out/dev'
    bundle, out = runc_bundle(tmp_path, script, ["NVIDIA_VISIBLE_DEVICES=vendor.example/thing=one"])
    runc.run_to_exit(bundle)
    assert (out / "env").read_text() == "one\n"
    assert (out / "file").read_text() == "from the host\n"
    assert (out / "dev").read_text() == "ok\n"


def use_generated_spec(runc, tmp_path, sim_node) -> None:
    """`nvidia-ctk cdi generate` for the simulated node into tmp_path/cdi, and the shim's
    config pointed at that spec dir."""
    cdi = tmp_path / "cdi"
    env = dict(runc.env, NCT_PROC_ROOT=str(sim_node / "root" / "proc"))
    r = subprocess.run([entry_point("nvidia-ctk"), "cdi", "generate", "--driver-root", str(sim_node / "root"),
                        "--nvidia-cdi-hook-path", entry_point("nvidia-cdi-hook"),
                        "--output", str(cdi / "nvidia.json")], env=env, capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cdi generate unavailable: {r.stderr.strip()[:200]}")
    runc.config.write_text(f'[nvidia-container-runtime.modes.cdi]\nspec-dirs = ["{cdi}"]\n')


def test_cdi_mode_generated_spec_on_simulated_node(runc, tmp_path, sim_node):
    """`nvidia-ctk cdi generate` for the simulated node, then `nvidia.com/gpu=2` via cdi mode."""
    use_generated_spec(runc, tmp_path, sim_node)
    bundle, out = runc_bundle(tmp_path, CHECKS.replace("nvidia1", "nvidia2"), ["NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=2"])
    runc.run_to_exit(bundle)
    devs = (out / "dev").read_text().split()
    assert "nvidia2" in devs and "nvidia1" not in devs and "nvidiactl" in devs
    assert "No such device or address" in (out / "nvidia2.err").read_text()
    if shutil.which("gcc"):  # the dlopen probe is built with gcc
        assert "cuDriverGetVersion=" in (out / "probe").read_text(), (out / "probe").read_text()
    uuids = [g["uuid"] for g in json.loads((sim_node / "node.json").read_text())["gpus"]]
    smi = (out / "smi").read_text()
    assert uuids[2] in smi and not any(u in smi for i, u in enumerate(uuids) if i != 2), smi


@pytest.mark.parametrize("mode", ["auto", "cdi", "jit-cdi"])
def test_stale_nvidia_hook_removed_without_gpus(runc, tmp_path, mode):
    """issue 12 #9: a spec that still carries a prestart hook to a removed
    nvidia-container-runtime-hook (docker --gpus, an old config) and asks for no GPU: upstream
    removes the hook in these modes, so the container runs. Real runc runs the spec."""
    runc.config.write_text(f'[nvidia-container-runtime]\nmode = "{mode}"\n')
    bundle, out = runc_bundle(tmp_path, "echo ran > /out/result")
    spec = json.loads((bundle / "config.json").read_text())
    spec["hooks"] = {"prestart": [{"path": str(tmp_path / "removed/nvidia-container-runtime-hook"),
                                   "args": ["nvidia-container-runtime-hook", "prestart"]}]}
    (bundle / "config.json").write_text(json.dumps(spec))
    runc.run_to_exit(bundle)
    assert (out / "result").read_text() == "ran\n"
    assert "hooks" not in json.loads((bundle / "config.json").read_text()) or \
        not json.loads((bundle / "config.json").read_text())["hooks"].get("prestart")


@pytest.mark.parametrize("caps, i386", [("", False), ("compute,utility", False), ("all", True),
                                        ("compute,utility,compat32", True)])
def test_jit_cdi_i386_libraries_only_with_compat32(runc, tmp_path, sim_node, caps, i386):
    """issue 12 #11: upstream's jit-cdi spec has no 32-bit driver library; nct adds them only
    for the compat32 capability (which `all` grants, as in the legacy hook)."""
    if not any(n.startswith("libcuda.so") for n in os.listdir(sim_node / "root/usr/lib/i386-linux-gnu")):
        pytest.skip("the simulated node has no i386 libraries (gcc -m32 missing)")
    runc.config.write_text(f'[nvidia-container-cli]\nroot = "{sim_node}/root"\n')
    runc.env["NCT_PROC_ROOT"] = str(sim_node / "root" / "proc")
    env = ["NVIDIA_VISIBLE_DEVICES=0"] + ([f"NVIDIA_DRIVER_CAPABILITIES={caps}"] if caps else [])
    bundle, out = runc_bundle(tmp_path, "ls /usr/lib/i386-linux-gnu > /out/i386 2>&1; ls /usr/lib/x86_64-linux-gnu > /out/lib",
                              env)
    runc.run_to_exit(bundle)
    assert any(n.startswith("libcuda.so.") for n in (out / "lib").read_text().split())
    assert any(n.startswith("libcuda.so.") for n in (out / "i386").read_text().split()) == i386


@pytest.fixture(scope="module")
def mig_node(tmp_path_factory):
    """A simulated 2-GPU node, GPU 1 in MIG mode with 2 devices."""
    d = tmp_path_factory.mktemp("mig") / "node"
    r = subprocess.run([entry_point("nct"), "sim", "create", str(d), "--gpus", "2", "--mig", "1:2", "--no-lib32"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"nct sim create failed: {r.stderr.strip()}")
    return d


@pytest.mark.parametrize("mode", ["jit-cdi", "legacy"])
@pytest.mark.parametrize("which", ["index", "uuid"])
def test_mig_slice_gets_no_parent_drm_nodes(runc, tmp_path, mig_node, mode, which):
    """issue 12 #14: a container given one MIG device gets the parent's /dev/nvidiaN and the
    MIG caps, never the whole GPU's /dev/dri card/render nodes (graphics asked for)."""
    node = json.loads((mig_node / "node.json").read_text())
    mig = node["gpus"][1]["migs"][0]
    dev = "1:0" if which == "index" else mig["uuid"]
    runc.config.write_text(f'[nvidia-container-runtime]\nmode = "{mode}"\n'
                           f'[nvidia-container-cli]\nroot = "{mig_node}/root"\n')
    runc.env["NCT_PROC_ROOT"] = str(mig_node / "root" / "proc")
    bundle, out = runc_bundle(tmp_path, "ls -R /dev > /out/dev 2>&1",
                              [f"NVIDIA_VISIBLE_DEVICES={dev}", "NVIDIA_DRIVER_CAPABILITIES=utility,graphics,display"])
    runc.run_to_exit(bundle)
    devs = (out / "dev").read_text().split()
    assert "nvidia1" in devs and "nvidia0" not in devs
    assert not [d for d in devs if d.startswith(("card", "renderD"))], devs
