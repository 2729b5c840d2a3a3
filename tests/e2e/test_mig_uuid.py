"""NVIDIA_VISIBLE_DEVICES=MIG-<uuid> (the Kubernetes device plugin's default id form) on a
simulated MIG node, through launchers for which nvidia-ml-py cannot be imported, as on
every install: the legacy prestart hook under runc, the runtime shim's jit-cdi mode under
runc, `nvidia-container-cli configure` and `info`. Without the driver's libnvidia-ml.so.1
a MIG UUID is an unknown device, with one line saying why."""

from __future__ import annotations

import json
import sys
import sysconfig
from pathlib import Path

import pytest

import nct
from e2e import rootfs as R
from e2e.harness import HOOK, bundle_with_hook, needs_e2e, runc_run, venv_bin
from e2e.test_runc_hook import SCRIPT, assert_driver, gpu_nodes, sections, smi_line

pytestmark = needs_e2e

LAUNCHER = """#!{python} -IS
import sys
sys.modules["pynvml"] = None  # nvidia-ml-py is not installed
sys.path.insert(0, {lib!r})
sys.path.append({purelib!r})
from {module} import {func}
sys.exit({func}())
"""


@pytest.fixture(scope="module")
def bindir(tmp_path_factory) -> Path:
    """nct's commands, each unable to import pynvml."""
    from importlib import metadata

    d = tmp_path_factory.mktemp("no-pynvml")
    for ep in metadata.distribution("nct").entry_points:
        if ep.group != "console_scripts":
            continue
        name, (module, _, func) = ep.name, ep.value.partition(":")
        (d / name).write_text(LAUNCHER.format(python=sys.executable, lib=str(Path(nct.__file__).parents[1]),
                                              purelib=sysconfig.get_paths()["purelib"], module=module, func=func))
        (d / name).chmod(0o755)
    return d


def env_with(bindir: Path, **extra: str) -> dict:
    return {"PATH": f"{bindir}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", **extra}


def assert_only_mig(out: dict, sim_node, gpu: dict, mig: dict) -> None:
    """The container has the MIG device's parent and its two caps nodes; nvidia-smi lists
    the parent and that MIG device only."""
    out = dict(out, nodes=[n for n in out["nodes"] if n != "nvidia-modeset"])  # CDI specs add it
    assert gpu_nodes(out) == {f"nvidia{gpu['minor']}"}
    caps = {n for n in out["nodes"] if n.startswith("caps/")}
    assert caps == {f"caps/nvidia-cap{mig['gi_minor']}", f"caps/nvidia-cap{mig['ci_minor']}"}
    assert_driver(out)
    assert out["smi"][0] == smi_line(gpu, 0)
    mig_lines = [line for line in out["smi"] if "MIG" in line]
    assert len(mig_lines) == 1 and mig["uuid"] in mig_lines[0], out["smi"]


def hook_bundle(rootfs, bindir: Path, visible: str):
    hooks = {"prestart": [{"path": str(bindir / HOOK), "args": [HOOK, "prestart"]}]}
    return bundle_with_hook(rootfs, SCRIPT, [f"NVIDIA_VISIBLE_DEVICES={visible}"], hooks=hooks)


def test_legacy_hook(sim_node, rootfs, bindir):
    gpu = sim_node.gpu(2)
    mig = gpu["migs"][1]
    res = runc_run(sim_node, hook_bundle(rootfs, bindir, mig["uuid"].lower()), env=env_with(bindir))
    assert res.returncode == 0, res.stderr.decode()
    assert_only_mig(sections(res.stdout.decode()), sim_node, gpu, mig)


def test_legacy_hook_without_libnvidia_ml(sim_node, rootfs, bindir):
    """The driver's NVML is gone (removed inside the namespace only): the container is not
    started, and the error says why the MIG UUID is unknown."""
    mig = sim_node.gpu(2)["migs"][0]
    bundle = hook_bundle(rootfs, bindir, mig["uuid"])
    script = (f"rm /usr/lib/x86_64-linux-gnu/libnvidia-ml.so* && ldconfig && "
              f"exec runc run --bundle {bundle} {R.container_id()}")
    res = sim_node.run(["sh", "-c", script], env=env_with(bindir))
    err = res.stderr.decode()
    assert res.returncode != 0 and "== end" not in res.stdout.decode()
    assert (f"unknown device: {mig['uuid']} (MIG UUIDs come from NVML, which is unavailable: "
            "the driver's libnvidia-ml.so.1 was not found)") in err, err


JIT_SCRIPT = """set -e
shim="$1" bundle="$2" id="$3"
"$shim" --root "$RUNC_ROOT" create --bundle "$bundle" "$id"
"$shim" --root "$RUNC_ROOT" start "$id"
while ! runc --root "$RUNC_ROOT" state "$id" | grep -q '"status": "stopped"'; do sleep 0.05; done
runc --root "$RUNC_ROOT" delete "$id"
"""


def test_jit_cdi(sim_node, rootfs, bindir, tmp_path):
    """The runtime shim in jit-cdi mode (its default on an NVML node) injects the MIG device
    named by UUID into the OCI spec; runc starts the container from that spec."""
    gpu = sim_node.gpu(2)
    mig = gpu["migs"][0]
    config = tmp_path / "config.toml"
    config.write_text('[nvidia-container-runtime]\nmode = "jit-cdi"\nruntimes = ["runc"]\n')
    bundle = R.make_bundle(rootfs.parent, rootfs, ["sh", "-c", SCRIPT], [f"NVIDIA_VISIBLE_DEVICES={mig['uuid']}"])
    script = tmp_path / "jit.sh"
    script.write_text(JIT_SCRIPT)
    env = env_with(bindir, NVIDIA_CTK_CONFIG_FILE_PATH=str(config), RUNC_ROOT=str(tmp_path / "runc-root"),
                   XDG_RUNTIME_DIR=str(tmp_path))
    res = sim_node.run(["sh", str(script), str(bindir / "nvidia-container-runtime"), str(bundle), R.container_id()],
                       env=env)
    assert res.returncode == 0, res.stderr.decode()
    spec = json.loads((bundle / "config.json").read_text())
    paths = {d["path"] for d in spec["linux"]["devices"]}
    assert {f"/dev/nvidia{gpu['minor']}", f"/dev/nvidia-caps/nvidia-cap{mig['gi_minor']}",
            f"/dev/nvidia-caps/nvidia-cap{mig['ci_minor']}"} <= paths
    assert not {f"/dev/nvidia{g['minor']}" for g in sim_node.info["gpus"] if g is not gpu} & paths
    out = sections(res.stdout.decode())
    assert "end" in out, res.stdout.decode()
    assert_only_mig(out, sim_node, gpu, mig)


def test_configure_and_info(sim_node, rootfs, bindir):
    """`nvidia-container-cli configure --device=MIG-...` on a rootfs, then `info` shows the
    brand and compute capability NVML reports."""
    gpu = sim_node.gpu(2)
    mig = gpu["migs"][1]
    cli = bindir / "nvidia-container-cli"
    r = str(rootfs)
    script = (f"{cli} configure --device={mig['uuid']} --compute --utility --ldconfig=@/sbin/ldconfig {r}"
              f" && ls {r}/dev {r}/dev/nvidia-caps && chroot {r} nvidia-smi -L && {cli} info --csv")
    res = sim_node.run(["sh", "-c", script], env=env_with(bindir))
    assert res.returncode == 0, res.stderr.decode()
    out = res.stdout.decode()
    words = out.split()
    assert f"nvidia{gpu['minor']}" in words and "nvidia0" not in words
    assert f"nvidia-cap{mig['gi_minor']}" in words and f"nvidia-cap{mig['ci_minor']}" in words
    assert mig["uuid"] in out and gpu["migs"][0]["uuid"] not in out
    rows = out[out.index("Device Index,"):].splitlines()[1:]
    assert rows == [f"{g['index']},{g['minor']},{g['model']},Nvidia,{g['uuid']},{g['bus_id']},8.0"
                    for g in sim_node.info["gpus"]]


@pytest.mark.parametrize("strategies, names", [
    ((), lambda g, m: ["0", g[0], "1", g[1], "2:0", m[0], "2:1", m[1], "all"]),  # default: index and uuid
    (("uuid",), lambda g, m: [g[0], g[1], m[0], m[1], "all"]),
    (("type-index",), lambda g, m: ["gpu0", "gpu1", "mig2:0", "mig2:1", "all"]),
])
def test_cdi_generate_names_mig_devices_by_uuid(sim_node, bindir, strategies, names):
    """As upstream's nvidia-ctk: a MIG-enabled GPU gets no entry of its own, each MIG device
    one per name strategy (index `i:j`, uuid `MIG-...`, type-index `migi:j`)."""
    args = [f"--device-name-strategy={s}" for s in strategies]
    res = sim_node.run([str(bindir / "nvidia-ctk"), "cdi", "generate", "--format=json", *args], env=env_with(bindir))
    assert res.returncode == 0, res.stderr.decode()
    assert "no UUID" not in res.stderr.decode()
    spec = json.loads(res.stdout)
    gpus = [g["uuid"] for g in sim_node.info["gpus"]]
    migs = [m["uuid"] for m in sim_node.gpu(2)["migs"]]
    assert [d["name"] for d in spec["devices"]] == names(gpus, migs)


def test_cli_without_libnvidia_ml(sim_node, bindir):
    """`list -d MIG-...` without the driver's NVML: upstream's error line plus the reason;
    `info` falls back to Unknown / N/A."""
    cli = bindir / "nvidia-container-cli"
    uuid = sim_node.gpu(2)["migs"][0]["uuid"]
    script = (f"rm /usr/lib/x86_64-linux-gnu/libnvidia-ml.so* && ldconfig && {cli} info --csv && "
              f"{cli} list -d {uuid}")
    res = sim_node.run(["sh", "-c", script], env=env_with(bindir))
    assert res.returncode == 1
    assert res.stderr.decode() == (f"nvidia-container-cli: device error: {uuid}: unknown device (MIG UUIDs come "
                                   "from NVML, which is unavailable: the driver's libnvidia-ml.so.1 was not found)\n")
    g = sim_node.gpu(0)
    assert f"\n0,{g['minor']},{g['model']},Unknown,{g['uuid']},{g['bus_id']},N/A\n" in res.stdout.decode()
