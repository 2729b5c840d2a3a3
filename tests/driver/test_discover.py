"""discover_node on small trees: GPU counts, MIG, device nodes, bad input, NVML merge."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

import treebuilder
from nct.config.model import CliConfig, Config
from nct.driver import nvml
from nct.driver.discover import _apply_nvml, discover_node, roots_from_config
from nct.driver.model import Roots
from nct.errors import DiscoveryError


@pytest.mark.parametrize("count", [0, 1, 8])
def test_gpu_counts(make_tree, count):
    t = make_tree(gpus=count)
    node = discover_node(t.roots, use_nvml=False)
    assert node.driver_version == "550.54.15"
    assert len(node.gpus) == count
    # index = bus-id order; minors from procfs
    assert [g.bus_id for g in node.gpus] == sorted(g.bus_id for g in node.gpus)
    assert [g.index for g in node.gpus] == list(range(count))
    for g in node.gpus:
        src = next(x for x in t.gpus if x["uuid"] == g.uuid)
        assert g.minor == src["minor"] and g.model == "NVIDIA A100-SXM4-40GB"
        assert g.device.path == f"/dev/nvidia{g.minor}" and (g.device.major, g.device.minor) == (195, g.minor)
        assert g.device.host_path == str(t.path(f"/dev/nvidia{g.minor}"))
        assert [d.path for d in g.drm] == [f"/dev/dri/card{g.minor + 1}", f"/dev/dri/renderD{128 + g.minor}"]
        assert g.proc_dir == str(t.path(f"/proc/driver/nvidia/gpus/{src['bus']}"))
    assert [d.path for d in node.control_devices] == [
        "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset"]
    assert node.majors["nvidia-frontend"] == 195 and node.majors["nvidia-caps"] == 508
    assert [c.path for c in node.imex_channels] == [
        "/dev/nvidia-caps-imex-channels/channel0", "/dev/nvidia-caps-imex-channels/channel1"]


def test_index_is_bus_order_not_minor_order(make_tree):
    t = make_tree(gpus=2)
    # swap the minors: bus 07 gets minor 1, bus 0f minor 0
    for g, m in zip(t.gpus, (1, 0)):
        t.write(f"/proc/driver/nvidia/gpus/{g['bus']}/information",
                treebuilder.information("NVIDIA A100-SXM4-40GB", g["uuid"], g["bus"], m))
    node = discover_node(t.roots, use_nvml=False)
    assert [(g.index, g.bus_id[9:11], g.minor) for g in node.gpus] == [(0, "07", 1), (1, "0f", 0)]


def test_excluded_gpu_numbered_last(make_tree):
    t = make_tree(gpus=3)
    g0 = t.gpus[0]
    t.write(f"/proc/driver/nvidia/gpus/{g0['bus']}/information",
            treebuilder.information("NVIDIA A100-SXM4-40GB", g0["uuid"], g0["bus"], 0, excluded=True))
    node = discover_node(t.roots, use_nvml=False)
    assert [(g.index, g.minor, g.excluded) for g in node.gpus] == [(0, 1, False), (1, 2, False), (2, 0, True)]


def test_mig(make_tree):
    t = make_tree(gpus=2, mig={1: [(7, 0), (8, 0), (8, 1)]})
    node = discover_node(t.roots, use_nvml=False)
    g0, g1 = node.gpus
    assert not g0.mig_enabled and g0.migs == ()
    assert g1.mig_enabled
    assert [(m.gi, m.ci, m.ordinal, m.index_name) for m in g1.migs] == [(7, 0, 0, "1:0"), (8, 0, 1, "1:1"), (8, 1, 2, "1:2")]
    m = g1.migs[0]
    gmin = 3 + 135 + 7 * 9
    assert (m.gi_access.path, m.gi_access.major, m.gi_access.minor) == (f"/dev/nvidia-caps/nvidia-cap{gmin}", 508, gmin)
    assert m.ci_access.minor == gmin + 1
    assert m.gi_access_proc == str(t.path("/proc/driver/nvidia/capabilities/gpu1/mig/gi7/access"))
    assert m.ci_access_proc == str(t.path("/proc/driver/nvidia/capabilities/gpu1/mig/gi7/ci0/access"))
    assert node.mig_config == (str(t.path("/proc/driver/nvidia/capabilities/mig/config")),
                               str(t.path("/dev/nvidia-caps/nvidia-cap1")))
    assert node.mig_monitor[0].endswith("capabilities/mig/monitor")
    assert {c.minor for c in node.caps_devices} >= {1, 2, gmin, gmin + 1}


def test_missing_nodes_still_described(make_tree):
    """Modules loaded but nodes not created yet (--load-kmods territory)."""
    t = make_tree(gpus=1, mig={0: [(1, 0)]})
    os.unlink(t.path("/dev/nvidia0"))
    shutil.rmtree(t.path("/dev/nvidia-caps"))
    os.unlink(t.path("/dev/nvidia-uvm"))
    node = discover_node(t.roots, use_nvml=False)
    g = node.gpus[0]
    assert (g.device.major, g.device.minor) == (195, 0) and not os.path.exists(g.device.host_path)
    assert g.migs[0].gi_access.major == 508
    assert "/dev/nvidia-uvm" not in [d.path for d in node.control_devices]
    assert node.caps_devices == ()


def test_no_driver(tmp_path):
    with pytest.raises(DiscoveryError, match="NVIDIA driver not loaded: .*/proc/driver/nvidia/version not found"):
        discover_node(Roots(driver=str(tmp_path), dev=str(tmp_path), proc=str(tmp_path / "proc")))


GARBAGE = [
    ("/proc/driver/nvidia/version", "garbage\n", "version: no 'NVRM version:' line"),
    ("/proc/devices", "\x00\x7fELF", "devices:1: expected 'Character devices:'"),
    ("/proc/driver/nvidia/gpus/0000:07:00.0/information", "Model: x\nDevice Minor: q\n", "information: missing 'GPU UUID'"),
    ("/proc/driver/nvidia-caps/mig-minors", "config one\n", "mig-minors:1: expected 'NAME MINOR'"),
    ("/proc/driver/nvidia/capabilities/gpu0/mig/gi1/access", "DeviceFileMinor: ?\n", "access:1: DeviceFileMinor"),
    ("/proc/driver/nvidia/capabilities/mig/config", "junk\n", "config:1: expected 'Key: value'"),
]


@pytest.mark.parametrize("path,text,what", GARBAGE)
def test_garbage_in_each_proc_file(make_tree, path, text, what):
    t = make_tree(gpus=1, mig={0: [(1, 0)]})
    t.write(path, text)
    with pytest.raises(DiscoveryError) as e:
        discover_node(t.roots, use_nvml=False)
    msg = str(e.value)
    assert what in msg and str(t.path(path)) in msg and "\n" not in msg


@pytest.mark.parametrize("path", ["/proc/driver/nvidia/version", "/proc/devices",
                                  "/proc/driver/nvidia/gpus/0000:07:00.0/information"])
def test_unreadable_proc_file(make_tree, path):
    t = make_tree(gpus=1)
    f = t.path(path)
    f.unlink()
    f.mkdir()  # reading a directory fails even as root
    with pytest.raises(DiscoveryError, match=f"cannot read {f}"):
        discover_node(t.roots, use_nvml=False)


def test_duplicate_minor(make_tree):
    t = make_tree(gpus=2)
    g = t.gpus[1]
    t.write(f"/proc/driver/nvidia/gpus/{g['bus']}/information",
            treebuilder.information("M", g["uuid"], g["bus"], 0))
    with pytest.raises(DiscoveryError, match="two GPUs share a Device Minor"):
        discover_node(t.roots, use_nvml=False)


def test_roots_from_config(monkeypatch):
    monkeypatch.delenv("NCT_PROC_ROOT", raising=False)
    assert roots_from_config(Config()) == Roots("/", "/", "/proc")
    monkeypatch.setenv("NCT_PROC_ROOT", "/tmp/p")
    cfg = Config(nvidia_container_cli=CliConfig(root="/run/nvidia/driver"))
    assert roots_from_config(cfg) == Roots("/run/nvidia/driver", "/run/nvidia/driver", "/tmp/p")


def test_nvml_facts_merge(make_tree):
    t = make_tree(gpus=2, mig={1: [(7, 0), (8, 0)]})
    node = discover_node(t.roots, use_nvml=False)
    facts = nvml.NvmlFacts(cuda_version="12.4", nvml=True, gpus=(
        nvml.NvmlGpu(bus_id="00000000:07:00.0", uuid=node.gpus[0].uuid, brand="Tesla", architecture="8.0",
                     mig_enabled=False),
        nvml.NvmlGpu(bus_id="00000000:0f:00.0", uuid=node.gpus[1].uuid, brand="Tesla", architecture="8.0",
                     mig_enabled=True, migs=(
                         nvml.NvmlMig(gi=8, ci=0, uuid="MIG-b", name="NVIDIA A100-SXM4-40GB MIG 3g.20gb", index=0),
                         nvml.NvmlMig(gi=7, ci=0, uuid="MIG-a", name="NVIDIA A100-SXM4-40GB MIG 3g.20gb", index=1))),
        nvml.NvmlGpu(bus_id="00000000:99:00.0", uuid="GPU-unknown"),  # not in procfs: ignored
    ))
    g0, g1 = _apply_nvml(list(node.gpus), facts)
    assert (g0.brand, g0.architecture, g0.mig_enabled) == ("Tesla", "8.0", False)
    assert [(m.gi, m.ordinal, m.uuid, m.profile) for m in g1.migs] == [(8, 0, "MIG-b", "3g.20gb"), (7, 1, "MIG-a", "3g.20gb")]
    # a UUID disagreement means NVML talks about another GPU: keep procfs facts
    bad = nvml.NvmlFacts(gpus=(nvml.NvmlGpu(bus_id="00000000:07:00.0", uuid="GPU-other", brand="X"),))
    assert _apply_nvml(list(node.gpus), bad)[0].brand is None


@pytest.fixture(scope="module")
def fake_libs(tmp_path_factory):
    if not treebuilder.have_gcc():
        pytest.skip("needs gcc")
    d = tmp_path_factory.mktemp("fakecuda")
    (d / "cuda.c").write_text("int cuDriverGetVersion(int *v) { *v = 12040; return 0; }\n")
    # answers 12.4 only when it sees /nct-inside-root, i.e. when it runs chrooted in the tree
    (d / "rooted.c").write_text("#include <unistd.h>\nint cuDriverGetVersion(int *v) "
                                "{ *v = access(\"/nct-inside-root\", F_OK) == 0 ? 12040 : 11000; return 0; }\n")
    (d / "crash.c").write_text("#include <stdlib.h>\n__attribute__((constructor)) static void boom(void) { abort(); }\n")
    for n in ("cuda", "crash", "rooted"):
        subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(d / f"lib{n}.so"), str(d / f"{n}.c")], check=True)
    return d


def test_cuda_version_from_libcuda_without_nvml(fake_libs):
    facts = nvml.query(None, str(fake_libs / "libcuda.so"))
    assert facts.cuda_version == "12.4" and not facts.nvml


def test_broken_libraries_give_no_facts(fake_libs, tmp_path):
    # a library that aborts when loaded only kills the forked child
    crashed = nvml.query(str(fake_libs / "libcrash.so"), str(fake_libs / "libcrash.so"))
    assert crashed == nvml.NvmlFacts(error="the NVML query in a child process crashed (signal 6)")
    # a file that is not a library: NVML missing, no facts, no exception
    junk = tmp_path / "libnvidia-ml.so.1"
    junk.write_text("junk")
    facts = nvml.query(str(junk), None)
    assert facts.gpus == () and not facts.nvml
    assert facts.error == f"{junk}: file too short"  # dlopen's reason


def test_drm_nodes_via_sysfs(make_tree):
    """Without /dev/dri/by-path links the GPU's DRM nodes come from sysfs next to procfs."""
    t = make_tree(gpus=2)
    shutil.rmtree(t.path("/dev/dri/by-path"))
    for g in t.gpus:
        for n in (f"card{g['minor'] + 1}", f"renderD{128 + g['minor']}"):
            t.path(f"/sys/bus/pci/devices/{g['bus']}/drm/{n}").mkdir(parents=True)
    node = discover_node(t.roots, use_nvml=False)
    assert [d.path for d in node.gpus[1].drm] == ["/dev/dri/card2", "/dev/dri/renderD129"]
    shutil.rmtree(t.path("/sys"))
    assert discover_node(t.roots, use_nvml=False).gpus[0].drm == ()


@pytest.mark.skipif(os.geteuid() != 0, reason="chroot needs root")
def test_libraries_are_loaded_chrooted_in_the_driver_root(fake_libs, tmp_path):
    root = tmp_path / "driver"
    lib = root / "usr/lib/x86_64-linux-gnu"
    lib.mkdir(parents=True)
    shutil.copy(fake_libs / "librooted.so", lib / "libcuda.so.550.54.15")
    (root / "nct-inside-root").write_text("")
    facts = nvml.query(None, str(lib / "libcuda.so.550.54.15"), root=str(root))
    assert facts.cuda_version == "12.4"
    assert nvml.query(None, str(lib / "libcuda.so.550.54.15")).cuda_version == "11.0"  # host view
