"""NVML facts through nct's own ctypes binding (nct.driver.nvml.NvmlLib), against the
simulated driver's gcc-built libnvidia-ml.so.1, with nvidia-ml-py made unimportable as on
every real install: MIG UUIDs and profiles, brand, compute capability, CUDA version; and,
without a usable NVML, the node as procfs gives it plus one line saying why."""

from __future__ import annotations

import glob
import os
import shutil
import sys

import pytest

from nct.driver.discover import add_nvml_facts, discover_node
from nct.edits.select import nvml_needed, select_devices
from nct.errors import RequestError

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("gcc") is None,
                                reason="a simulated node needs root (mknod) and gcc")


@pytest.fixture(autouse=True)
def no_pynvml(monkeypatch):
    """`import pynvml` fails here and in the forked NVML child, as where it is not installed."""
    monkeypatch.setitem(sys.modules, "pynvml", None)


@pytest.fixture(scope="module")
def make(tmp_path_factory):
    from nct.sim.node import create_node

    base = tmp_path_factory.mktemp("nvml")

    def make(name: str, **kw):
        return create_node(str(base / name), **kw)
    return make


@pytest.fixture(scope="module")
def sim(make):
    return make("node", gpus=3, mig="1:2,2:3")


def test_facts_from_the_drivers_nvml(sim):
    node = discover_node(sim.roots())
    assert node.nvml and node.nvml_error is None
    assert node.cuda_version == sim.cuda_version
    for gpu, want in zip(node.gpus, sim.gpus, strict=True):
        assert (gpu.brand, gpu.architecture) == (want.brand, want.compute_capability) == ("Nvidia", "8.0")
        assert gpu.mig_enabled is want.mig_enabled
        assert [(m.gi, m.ci, m.uuid, m.profile, m.ordinal) for m in gpu.migs] == \
            [(m.gi, m.ci, m.uuid, m.profile, m.index) for m in want.migs]


def test_mig_uuid_selects_the_mig_device_and_its_parent(sim):
    bare = discover_node(sim.roots(), use_nvml=False)
    mig = sim.gpus[2].migs[1]
    assert nvml_needed(bare, [mig.uuid.lower()])
    with pytest.raises(RequestError, match=f"^unknown device: {mig.uuid}$"):  # not asked: no reason
        select_devices(bare, [mig.uuid])
    sel = select_devices(add_nvml_facts(bare), [mig.uuid.lower()])
    assert [g.index for g in sel.gpus] == [2] and [(m.parent_index, m.gi) for m in sel.migs] == [(2, mig.gi)]


def test_only_uuids_procfs_cannot_answer_need_nvml(sim):
    bare = discover_node(sim.roots(), use_nvml=False)
    assert not nvml_needed(bare, ["0", sim.gpus[1].uuid.lower(), "2:1", sim.gpus[0].bus_id, "all"])
    assert nvml_needed(bare, ["GPU-00000000-0000-0000-0000-000000000000"])
    # spec edits also need a selected MIG device's profile (+gfx profiles bring DRM nodes)
    assert nvml_needed(bare, ["2:1"], mig_profiles=True) and nvml_needed(bare, "all", mig_profiles=True)
    assert not nvml_needed(bare, ["0", sim.gpus[1].uuid], mig_profiles=True)
    assert not nvml_needed(add_nvml_facts(bare), [sim.migs[0].uuid])  # answered already


def test_without_libnvidia_ml_a_mig_uuid_says_why(make):
    node_dir = make("no-nvml", gpus=2, mig="1:1")
    for lib in glob.glob(node_dir.path("/usr/lib/*/libnvidia-ml.so*")):
        os.unlink(lib)
    node = discover_node(node_dir.roots())
    assert not node.nvml and node.cuda_version == node_dir.cuda_version  # from libcuda
    assert node.nvml_error == "the driver's libnvidia-ml.so.1 was not found"
    assert node.gpus[1].brand is None and node.gpus[1].architecture is None
    assert select_devices(node, ["1:0"]).migs  # what procfs knows still works
    uuid = node_dir.gpus[1].migs[0].uuid
    with pytest.raises(RequestError) as exc:
        select_devices(node, [uuid])
    assert str(exc.value) == (f"unknown device: {uuid} (MIG UUIDs come from NVML, which is unavailable: "
                              "the driver's libnvidia-ml.so.1 was not found)")
    assert not nvml_needed(node, [uuid])  # asked once, not again


def test_nvml_init_failure_is_reported_with_nvmls_own_words(make):
    """The simulated NVML, like the real one, fails nvmlInit_v2 with NVML_ERROR_DRIVER_NOT_LOADED
    when it cannot reach the driver (here: /dev/nvidiactl is gone)."""
    node_dir = make("no-ctl", gpus=1)
    os.unlink(node_dir.path("/dev/nvidiactl"))
    node = discover_node(node_dir.roots())
    assert not node.nvml
    assert node.nvml_error == "nvmlInit_v2: Driver Not Loaded (9)"


def test_runtime_create_asks_nvml_only_when_the_request_needs_it(sim, monkeypatch):
    """The shim's create path (jit-cdi) loads NVML for MIG UUIDs and for MIG devices (their
    profiles), never for GPUs named by index or by the UUID procfs gives."""
    from nct.config.model import CliConfig, Config
    from nct.request.model import ContainerRequest
    from nct.runtime.create import Backend

    monkeypatch.setenv("NCT_PROC_ROOT", os.path.join(sim.root, "proc"))
    cfg = Config(nvidia_container_cli=CliConfig(root=sim.root))
    for ids, asked in ((("0",), False), ((sim.gpus[0].uuid,), False), (("2:1",), True), ((sim.migs[0].uuid,), True)):
        node = Backend().node(cfg, ContainerRequest(devices=ids))
        assert (node.nvml, node.nvml_error) == ((True, None) if asked else (False, None)), ids
