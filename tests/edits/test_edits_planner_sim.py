"""The planner on a real simulated node read by real discovery: every source it plans to
mount or bind exists on the host, and every link points at something the plan provides."""

from __future__ import annotations

import os
import posixpath

import pytest

from nct.request.model import ContainerRequest

sim_node = pytest.importorskip("nct.sim.node", reason="simulated node builder (area SIM) not available")
discover = pytest.importorskip("nct.driver.discover", reason="discovery (area DISCOVERY) not available")

from nct.driver.model import ALL_CAPABILITIES, Roots  # noqa: E402
from nct.edits.planner import PlanOptions, plan  # noqa: E402


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    d = tmp_path_factory.mktemp("sim") / "node"
    try:
        sim_node.create_node(d, gpus=3, mig="1:2", imex_channels=2)
    except Exception as e:  # noqa: BLE001 - a missing compiler or similar: not our subject
        pytest.skip(f"cannot build a simulated node here: {e}")
    root = str(d / "root")
    return discover.discover_node(Roots(driver=root, dev=root, proc=f"{root}/proc"), use_nvml=False)


def _check_sources(edits):
    for m in edits.mounts:
        assert os.path.lexists(m.host_path), m
    for dn in edits.device_nodes:
        assert os.path.lexists(dn.host_path), dn
    for bus in edits.proc_driver_gpus or ():
        assert bus.count(":") == 2


def _check_links(edits):
    provided = {m.container_path for m in edits.mounts} | {d.path for d in edits.device_nodes}
    provided |= {s.link for s in edits.symlinks}
    for s in edits.symlinks:
        target = posixpath.normpath(posixpath.join(posixpath.dirname(s.link), s.target))
        assert target in provided, s


@pytest.mark.parametrize("devices", [("all",), ("0",), ("1:1",), ()])
def test_live_plan_on_sim(node, devices):
    req = ContainerRequest(devices=devices, capabilities=frozenset(ALL_CAPABILITIES), imex_channels=("1",))
    edits = plan(node, req, PlanOptions())
    _check_sources(edits)
    _check_links(edits)
    assert "/usr/lib/x86_64-linux-gnu/libcuda.so.1" in {s.link for s in edits.symlinks}
    assert "/dev/nvidia-caps-imex-channels/channel1" in {d.path for d in edits.device_nodes}
    gpus = {d.path for d in edits.device_nodes if d.path[len("/dev/nvidia"):].isdigit()}
    assert gpus == {"all": {"/dev/nvidia0", "/dev/nvidia1", "/dev/nvidia2"}, "0": {"/dev/nvidia0"},
                    "1:1": {"/dev/nvidia1"}}.get(devices[0] if devices else None, set())
    if devices == ("1:1",):
        for m in edits.mounts:
            if m.container_path.startswith("/proc/"):
                assert m.host_path.endswith(m.container_path)


def test_spec_plan_on_sim(node):
    req = ContainerRequest(devices=("all",), capabilities=frozenset({"utility"}))
    edits = plan(node, req, PlanOptions(target="spec"))
    _check_sources(edits)
    _check_links(edits)
    root = node.roots.driver
    for m in edits.mounts:
        assert m.host_path == root + m.container_path or os.path.realpath(m.host_path).startswith(root)
    native = [f for f in node.files if f.kind != "lib32"]  # i386 libraries only with compat32
    assert len({m.container_path for m in edits.mounts}) == len(edits.mounts) == len(native)
    assert edits.env[0] == "NVIDIA_VISIBLE_DEVICES=void"
