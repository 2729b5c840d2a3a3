"""On a simulated node: the planner's per-device edits rendered as a CDI spec are valid
(official schema + strict loader), survive a save/load round trip, and inject into a
runc-generated OCI spec that still validates, with device nodes filled from the sim's
real (mknod) nodes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

from nct.cdi.hooks import HookOptions
from nct.cdi.registry import Registry
from nct.cdi.render import build_spec
from nct.cdi.spec import load_spec, save_spec
from schema_check import check_schema, schema_errors
from nct.cdi.inject import apply_edits_to_spec
from schema_check import oci_schema_errors

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the simulated node's device nodes need root")


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    node_mod = pytest.importorskip("nct.sim.node")
    discover = pytest.importorskip("nct.driver.discover")
    from nct.driver.model import Roots

    d = tmp_path_factory.mktemp("sim") / "node"
    node_mod.create_node(str(d), gpus=2, mig="1:2")
    root = str(d / "root")
    node = discover.discover_node(Roots(driver=root, dev=root, proc=root + "/proc"), use_nvml=False)
    return node


def runc_spec(tmp_path) -> dict:
    if not shutil.which("runc"):
        pytest.skip("runc not installed")
    subprocess.run(["runc", "spec", "--bundle", str(tmp_path)], check=True)
    return json.loads((tmp_path / "config.json").read_text())


def test_sim_node_spec_valid_and_injectable(sim, tmp_path):
    planner = pytest.importorskip("nct.edits.planner")
    opts = planner.PlanOptions(target="spec")
    devices = [(str(g.index), planner.gpu_edits(sim, g, opts)) for g in sim.gpus if not g.mig_enabled]
    devices += [(m.index_name, planner.mig_edits(sim, m, opts)) for g in sim.gpus for m in g.migs]
    assert len(devices) >= 3
    common = planner.common_edits(sim, None, opts)
    spec = build_spec("nvidia.com", "gpu", devices, common,
                      hook_options=HookOptions(driver_version=sim.driver_version), all_device=True)
    assert schema_errors(spec) == []
    path = save_spec(spec, str(tmp_path / "cdi" / "nvidia.yaml"))
    loaded = load_spec(path, check=check_schema)
    assert loaded.raw == spec

    reg = Registry([str(tmp_path / "cdi")])
    assert reg.errors == []
    names = [f"nvidia.com/gpu={devices[0][0]}", f"nvidia.com/gpu={devices[-1][0]}"]
    out = reg.inject(runc_spec(tmp_path), names)
    assert oci_schema_errors(out) == []
    assert "NVIDIA_VISIBLE_DEVICES=void" in out["process"]["env"]
    injected = {d["path"]: d for d in out["linux"]["devices"]}
    assert "/dev/nvidiactl" in injected and injected["/dev/nvidiactl"]["major"] == 195
    hooks = [h["args"][1] for h in out["hooks"]["createContainer"]]
    assert "update-ldcache" in hooks and "create-symlinks" in hooks


def test_sim_node_plan_into_oci_spec(sim, tmp_path):
    planner = pytest.importorskip("nct.edits.planner")
    from nct.request.model import ContainerRequest

    edits = planner.plan(sim, ContainerRequest(devices=("all",)), planner.PlanOptions(target="spec"))
    out = apply_edits_to_spec(runc_spec(tmp_path), edits, driver_version=sim.driver_version)
    assert oci_schema_errors(out) == []
    paths = [d["path"] for d in out["linux"]["devices"]]
    assert len(paths) == len(set(paths))
    dests = [m["destination"] for m in out["mounts"]]
    assert len(dests) == len(set(dests))
