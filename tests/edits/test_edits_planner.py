"""Planner output on constructed nodes: live (nvidia-container-cli configure) vs spec (CDI)."""

from __future__ import annotations

import stat

import pytest

from nct.edits.model import IPC_MOUNT, RO_MOUNT, ContainerEdits, SymlinkEdit
from nct.edits.planner import (
    PROC_MOUNT, PlanOptions, common_edits, container_lib_dirs, gpu_edits, imex_edits, mig_admin_edits,
    mig_edits, plan,
)
from nct.edits.select import select_devices
from nct.errors import RequestError, RequirementError
from nct.request.model import ContainerRequest

from .conftest import LIB32DIR, LIBDIR, VERSION, VIDEO_GID

LIVE = PlanOptions()
SPEC = PlanOptions(target="spec")


def req(devices=("all",), caps=("compute", "utility"), **kw) -> ContainerRequest:
    return ContainerRequest(devices=tuple(devices), capabilities=frozenset(caps), **kw)


def mounts(edits: ContainerEdits) -> dict[str, object]:
    return {m.container_path: m for m in edits.mounts}


def nodes(edits: ContainerEdits) -> list[str]:
    return [d.path for d in edits.device_nodes]


def libnames(edits: ContainerEdits, d: str = LIBDIR) -> set[str]:
    return {p.rsplit("/", 1)[1].split(".so")[0] for p in mounts(edits) if p.rsplit("/", 1)[0] == d}


# --- live target ---------------------------------------------------------------------------

def test_live_default_request_for_one_gpu(node_factory):
    edits = plan(node_factory(2), req(["1"]))
    assert nodes(edits) == ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia1"]
    assert edits.proc_driver_gpus == ["0000:02:00.0"]
    m = mounts(edits)
    lib = m[f"{LIBDIR}/libcuda.so.{VERSION}"]
    assert lib.host_path == f"{LIBDIR}/libcuda.so.{VERSION}" and lib.options == RO_MOUNT
    assert {"ro", "nosuid", "nodev"} <= set(lib.options)
    assert libnames(edits) == {"libnvidia-ml", "libnvidia-cfg", "libcuda", "libnvidia-ptxjitcompiler",
                               "libnvidia-allocator"}
    assert m["/usr/bin/nvidia-smi"].options == RO_MOUNT
    assert "/usr/bin/nvidia-cuda-mps-control" in m
    for ipc in ("/run/nvidia-persistenced/socket", "/run/nvidia-fabricmanager/socket", "/tmp/nvidia-mps"):
        assert m[ipc].options == IPC_MOUNT and "noexec" in m[ipc].options and "ro" not in m[ipc].options
    fw = f"/lib/firmware/nvidia/{VERSION}/gsp_ga10x.bin"
    assert m[fw].host_path == fw
    assert not any(p.startswith(("/etc", "/usr/share")) for p in m)  # no graphics configs
    assert SymlinkEdit("libcuda.so.1", f"{LIBDIR}/libcuda.so") in edits.symlinks
    assert SymlinkEdit(f"libcuda.so.{VERSION}", f"{LIBDIR}/libcuda.so.1") in edits.symlinks
    assert SymlinkEdit(f"libnvidia-ml.so.{VERSION}", f"{LIBDIR}/libnvidia-ml.so.1") in edits.symlinks
    assert edits.ldconfig_folders == [LIBDIR]
    assert edits.env == [] and edits.hooks == [] and edits.additional_gids == []
    assert all(d.permissions == "rw" for d in edits.device_nodes)
    assert edits.cuda_compat_dir == "/usr/local/cuda/compat"


# capability set -> (library groups mounted, control nodes, binaries, ipc sockets, graphics extras)
CAP_TABLE = [
    ({"utility"}, {"libnvidia-ml", "libnvidia-cfg"}, ["/dev/nvidiactl"],
     {"nvidia-smi", "nvidia-persistenced"}, {"persistenced", "fabricmanager"}, False),
    ({"compute"}, {"libcuda", "libnvidia-ptxjitcompiler", "libnvidia-allocator"},
     ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"], {"nvidia-cuda-mps-control"}, {"mps"}, False),
    # video brings the compute libraries (and with them UVM and the MPS pipe), not the compute binaries
    ({"video"}, {"libnvcuvid", "libnvidia-opticalflow", "libcuda", "libnvidia-ptxjitcompiler", "libnvidia-allocator"},
     ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"], set(), {"mps"}, False),
    ({"graphics"}, {"libnvidia-glcore", "libGLX_nvidia", "libEGL_nvidia"}, ["/dev/nvidiactl"], set(), set(), True),
    # display brings the graphics libraries and the modeset node
    ({"display"}, {"libnvidia-glcore", "libGLX_nvidia", "libEGL_nvidia"}, ["/dev/nvidiactl", "/dev/nvidia-modeset"],
     set(), set(), True),
    ({"ngx"}, {"libnvidia-ngx"}, ["/dev/nvidiactl"], set(), set(), False),
    ({"compat32"}, set(), ["/dev/nvidiactl"], set(), set(), False),
    (set(), set(), ["/dev/nvidiactl"], set(), set(), False),
]


@pytest.mark.parametrize("caps, libs, ctl, bins, ipcs, graphics", CAP_TABLE)
def test_live_per_capability(node_factory, caps, libs, ctl, bins, ipcs, graphics):
    edits = plan(node_factory(1), req(["0"], caps))
    assert libnames(edits) == libs
    assert nodes(edits)[:-1 - (2 if graphics else 0)] == ctl
    assert "/dev/nvidia0" in nodes(edits)
    assert ("/dev/dri/card1" in nodes(edits)) is graphics
    got_bins = {p.rsplit("/", 1)[1] for p in mounts(edits) if p.startswith("/usr/bin/")}
    assert got_bins == bins
    got_ipcs = {k for k in ("persistenced", "fabricmanager", "mps") for p in mounts(edits) if k in p}
    assert got_ipcs == ipcs
    assert ("/etc/vulkan/icd.d/nvidia_icd.json" in mounts(edits)) is graphics
    assert (f"{LIBDIR}/nvidia/xorg/nvidia_drv.so" in mounts(edits)) is ("display" in caps)
    assert not any(p.startswith(LIB32DIR) for p in mounts(edits))  # no compat32 libs without compat32 + lib caps
    assert (edits.cuda_compat_dir is not None) is bool(caps & {"compute", "video"})


def test_live_graphics_links_and_drm(node_factory):
    edits = plan(node_factory(2), req(["1"], {"graphics", "compute"}))
    assert "/dev/dri/card2" in nodes(edits) and "/dev/dri/renderD129" in nodes(edits)
    assert "/dev/dri/card1" not in nodes(edits)  # GPU 0 is not selected
    assert SymlinkEdit("../card2", "/dev/dri/by-path/pci-0000:02:00.0-card") in edits.symlinks
    assert SymlinkEdit("../renderD129", "/dev/dri/by-path/pci-0000:02:00.0-render") in edits.symlinks
    assert SymlinkEdit(f"libGLX_nvidia.so.{VERSION}", f"{LIBDIR}/libGLX_indirect.so.0") in edits.symlinks
    assert SymlinkEdit("../libnvidia-allocator.so.1", f"{LIBDIR}/gbm/nvidia-drm_gbm.so") in edits.symlinks
    assert SymlinkEdit(f"libGLX_nvidia.so.{VERSION}", f"{LIBDIR}/libGLX_nvidia.so.0") in edits.symlinks


def test_live_video_opticalflow_link(node_factory):
    edits = plan(node_factory(1), req(["0"], {"video"}))
    assert SymlinkEdit("libnvidia-opticalflow.so.1", f"{LIBDIR}/libnvidia-opticalflow.so") in edits.symlinks


def test_live_compat32(node_factory):
    edits = plan(node_factory(1), req(["0"], {"compute", "compat32"}))
    assert libnames(edits, LIB32DIR) == {"libcuda"}  # GLX 32-bit needs graphics
    assert SymlinkEdit("libcuda.so.1", f"{LIB32DIR}/libcuda.so") in edits.symlinks
    assert edits.ldconfig_folders == [LIBDIR, LIB32DIR]
    opts = PlanOptions(lib_dir="/usr/lib64", lib32_dir="/usr/lib32")
    edits = plan(node_factory(1), req(["0"], {"compute", "graphics", "compat32"}), opts)
    assert libnames(edits, "/usr/lib32") == {"libcuda", "libGLX_nvidia"}
    assert f"/usr/lib64/libcuda.so.{VERSION}" in mounts(edits)
    assert edits.ldconfig_folders == ["/usr/lib64", "/usr/lib32"]


def test_live_none_gets_driver_but_no_gpu(node_factory):
    edits = plan(node_factory(2), req([]))
    assert nodes(edits) == ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"]
    assert edits.proc_driver_gpus == []
    assert f"{LIBDIR}/libcuda.so.{VERSION}" in mounts(edits)


def test_live_all_gpus(node_factory):
    edits = plan(node_factory(3), req(["all"]))
    assert [n for n in nodes(edits) if n[-1].isdigit()] == ["/dev/nvidia0", "/dev/nvidia1", "/dev/nvidia2"]
    assert edits.proc_driver_gpus == ["0000:01:00.0", "0000:02:00.0", "0000:03:00.0"]


def test_live_mig_device(node_factory):
    node = node_factory(2, migs={1: 2})
    edits = plan(node, req(["1:1"]))
    assert nodes(edits)[3:] == ["/dev/nvidia1", "/dev/nvidia-caps/nvidia-cap32", "/dev/nvidia-caps/nvidia-cap33"]
    assert edits.proc_driver_gpus == ["0000:02:00.0"]
    m = mounts(edits)
    gi = m["/proc/driver/nvidia/capabilities/gpu1/mig/gi2/access"]
    assert gi.host_path == "/proc/driver/nvidia/capabilities/gpu1/mig/gi2/access" and gi.options == PROC_MOUNT
    assert "/proc/driver/nvidia/capabilities/gpu1/mig/gi2/ci0/access" in m
    assert "/proc/driver/nvidia/capabilities/gpu1/mig/gi1/access" not in m


def test_live_all_with_migs_has_no_duplicates(node_factory):
    edits = plan(node_factory(2, migs={0: 2, 1: 1}), req(["all"]))
    assert len(nodes(edits)) == len(set(nodes(edits)))
    assert len(edits.mounts) == len({m.container_path for m in edits.mounts})
    assert sum(1 for n in nodes(edits) if "nvidia-caps" in n) == 6


def test_live_driver_root(node_factory):
    root = "/run/nvidia/driver"
    edits = plan(node_factory(1, root=root), req(["0"]))
    lib = mounts(edits)[f"{LIBDIR}/libcuda.so.{VERSION}"]
    assert lib.host_path == f"{root}{LIBDIR}/libcuda.so.{VERSION}"
    smi = mounts(edits)["/usr/bin/nvidia-smi"]
    assert smi.host_path == f"{root}/usr/bin/nvidia-smi"
    dev = next(d for d in edits.device_nodes if d.path == "/dev/nvidia0")
    assert dev.host_path == f"{root}/dev/nvidia0" and (dev.major, dev.minor) == (195, 0)
    assert stat.S_ISCHR(dev.file_mode) and dev.file_mode & 0o777 == 0o666


def test_live_driver_options(node_factory):
    opts = PlanOptions(no_persistenced=True, no_fabricmanager=True, no_gsp_firmware=True)
    m = mounts(plan(node_factory(1), req(["0"]), opts))
    assert not any("persistenced/socket" in p or "fabricmanager" in p or "firmware" in p for p in m)
    assert "/tmp/nvidia-mps" in m
    assert "/usr/bin/nvidia-persistenced" in m  # the flag is about the socket only


def test_live_cuda_compat_modes(node_factory):
    node = node_factory(1)
    for mode, want in (("ldconfig", "/usr/local/cuda/compat"), ("mount", "/usr/local/cuda/compat"),
                       ("disabled", None), ("hook", None)):
        assert plan(node, req(["0"], cuda_compat_mode=mode)).cuda_compat_dir == want
    assert plan(node, req(["0"], {"utility"})).cuda_compat_dir is None


# --- requirements and selection inside plan ------------------------------------------------

def test_plan_unknown_device(node_factory):
    with pytest.raises(RequestError, match="^unknown device: 7$"):
        plan(node_factory(2), req(["0", "7"]))


def test_plan_checks_requirements(node_factory):
    node = node_factory(2, cuda="12.4", brand="Tesla")
    plan(node, req(["0"], requirements=("cuda>=12.4", "brand=tesla")))
    with pytest.raises(RequirementError, match="unsatisfied condition: cuda>=12.5, please update"):
        plan(node, req(["0"], requirements=("cuda>=12.5",)))
    with pytest.raises(RequirementError, match="^unsatisfied condition: brand=geforce$"):
        plan(node, req(["0"], requirements=("brand=geforce",)))
    # no device: brand and arch are not checked
    plan(node, req([], requirements=("brand=geforce", "arch>=9.0")))
    # the runtime may switch the check off
    plan(node, req(["0"], requirements=("cuda>=99",)), PlanOptions(check_requirements=False))


# --- MIG config / monitor and IMEX ---------------------------------------------------------

def test_mig_config_all(node_factory):
    node = node_factory(2, migs={1: 2}, mig_admin=True)
    edits = plan(node, req(["all"], mig_config="all"))
    m = mounts(edits)
    assert m["/proc/driver/nvidia/capabilities"].host_path == "/proc/driver/nvidia/capabilities"
    assert "/dev/nvidia-caps/nvidia-cap1" in nodes(edits)  # the mig/config access node
    assert "/dev/nvidia-caps/nvidia-cap2" not in nodes(edits)  # monitor not asked for
    edits = plan(node, req(["1"], mig_monitor="all"))
    assert "/dev/nvidia-caps/nvidia-cap2" in nodes(edits)
    assert {"/dev/nvidia-caps/nvidia-cap30", "/dev/nvidia-caps/nvidia-cap33"} <= set(nodes(edits))


def test_mig_config_rules(node_factory):
    node = node_factory(2, migs={1: 2}, mig_admin=True)
    with pytest.raises(RequestError, match="only 'all' devices are currently supported"):
        plan(node, req(["all"], mig_config="0"))
    with pytest.raises(RequestError, match="cannot enable mig-monitor with specific MIG devices selected"):
        plan(node, req(["1:0"], mig_monitor="all"))
    with pytest.raises(RequestError, match="no MIG config capability"):
        plan(node_factory(2), req(["all"], mig_config="all"))
    sel = select_devices(node, ["all"])
    assert mig_admin_edits(node, sel, "config", ",", LIVE).is_empty()
    # a CDI spec has no MIG admin edits
    assert "/proc/driver/nvidia/capabilities" not in mounts(plan(node, req(["all"], mig_config="all"), SPEC))


def test_imex_channels(node_factory):
    node = node_factory(1, imex=3)
    edits = plan(node, req(["0"], imex_channels=("0", "2")))
    assert [n for n in nodes(edits) if "imex" in n] == ["/dev/nvidia-caps-imex-channels/channel0",
                                                         "/dev/nvidia-caps-imex-channels/channel2"]
    assert len(imex_edits(node, ["all"], LIVE).device_nodes) == 3
    with pytest.raises(RequestError, match="unknown IMEX channel: 5"):
        plan(node, req(["0"], imex_channels=("5",)))
    # with the driver's IMEX major known, a live container gets the node planned from it
    node = node.replace(majors={**node.majors, "nvidia-caps-imex-channels": 235},
                        roots=node.roots.replace(dev="/run/nvidia/driver"))
    dn = plan(node, req(["0"], imex_channels=("5",))).device_nodes[-1]
    assert (dn.path, dn.host_path, dn.major, dn.minor) == (
        "/dev/nvidia-caps-imex-channels/channel5", "/run/nvidia/driver/dev/nvidia-caps-imex-channels/channel5", 235, 5)
    with pytest.raises(RequestError, match="unknown IMEX channel: 5"):  # a CDI spec needs the node
        plan(node, req(["0"], imex_channels=("5",)), SPEC)


# --- spec target -------------------------------------------------------------------------------

def test_spec_common_edits_hold_every_driver_file(node_factory):
    node = node_factory(2, root="/run/nvidia/driver")
    edits = common_edits(node, frozenset({"utility"}), SPEC)  # capabilities do not filter a spec
    assert edits.env == ["NVIDIA_VISIBLE_DEVICES=void", f"NVIDIA_CTK_LIBCUDA_DIR={LIBDIR}"]
    assert nodes(edits) == ["/dev/nvidia-modeset", "/dev/nvidia-uvm-tools", "/dev/nvidia-uvm", "/dev/nvidiactl"]
    assert all(d.permissions == "rwm" for d in edits.device_nodes)
    assert all(d.host_path == "/run/nvidia/driver" + d.path for d in edits.device_nodes)
    m = mounts(edits)
    for f in node.files:
        if f.kind == "lib32":  # upstream's specs have no i386 library (issue 12 #11)
            assert f.container_path not in m
            continue
        assert m[f.container_path].host_path == f.host_path
        assert m[f.container_path].options == (IPC_MOUNT if f.kind == "ipc" else RO_MOUNT)
    assert edits.ldconfig_folders == [LIBDIR]
    assert edits.proc_driver_gpus == [] and edits.cuda_compat_dir is None  # -> disable-device-node-modification hook
    assert SymlinkEdit("libcuda.so.1", f"{LIBDIR}/libcuda.so") in edits.symlinks
    assert not any(LIB32DIR in s.link for s in edits.symlinks)
    assert edits.hooks == []
    with32 = common_edits(node, frozenset({"utility"}), SPEC.replace(compat32=True))
    assert with32.ldconfig_folders == [LIBDIR, LIB32DIR]
    assert SymlinkEdit(f"libcuda.so.{VERSION}", f"{LIB32DIR}/libcuda.so.1") in with32.symlinks
    # plan() sets it from the container's capabilities
    assert LIB32DIR in plan(node, req(["0"], caps=("compute", "compat32")), SPEC).ldconfig_folders
    assert LIB32DIR not in plan(node, req(["0"]), SPEC).ldconfig_folders


def test_spec_gpu_edits(node_factory):
    node = node_factory(2)
    edits = gpu_edits(node, node.gpus[1], SPEC)
    assert nodes(edits) == ["/dev/nvidia1", "/dev/dri/card2", "/dev/dri/renderD129"]
    card = edits.device_nodes[1]
    assert (card.major, card.minor, card.gid, card.file_mode) == (226, 2, VIDEO_GID, stat.S_IFCHR | 0o660)
    assert edits.additional_gids == [VIDEO_GID]  # card is not world-rw; renderD is
    assert SymlinkEdit("../card2", "/dev/dri/by-path/pci-0000:02:00.0-card") in edits.symlinks
    assert edits.proc_driver_gpus is None and not edits.mounts
    assert gpu_edits(node, node.gpus[1], PlanOptions(target="spec", no_additional_gids=True)).additional_gids == []


def test_spec_mig_edits(node_factory):
    node = node_factory(1, migs={0: 2})
    gfx, plain = node.gpus[0].migs
    assert nodes(mig_edits(node, plain, SPEC)) == ["/dev/nvidia0", "/dev/nvidia-caps/nvidia-cap12",
                                                   "/dev/nvidia-caps/nvidia-cap13"]
    assert "/dev/dri/card1" in nodes(mig_edits(node, gfx, SPEC))  # a +gfx profile gets DRM nodes
    assert not mig_edits(node, plain, SPEC).mounts


def test_spec_plan_merges_common_and_selected(node_factory):
    node = node_factory(3)
    edits = plan(node, req(["0", "2"], {"utility"}), SPEC)
    gpu_nodes = [n for n in nodes(edits) if n.startswith("/dev/nvidia") and n[-1].isdigit()]
    assert gpu_nodes == ["/dev/nvidia0", "/dev/nvidia2"]
    assert "/dev/dri/card2" not in nodes(edits)
    assert edits.env[0] == "NVIDIA_VISIBLE_DEVICES=void"
    assert f"{LIBDIR}/libnvidia-glcore.so.{VERSION}" in mounts(edits)


def test_container_lib_dirs():
    assert container_lib_dirs(True) == ("/usr/lib/x86_64-linux-gnu", "/usr/lib/i386-linux-gnu")
    assert container_lib_dirs(False) == ("/usr/lib64", "/usr/lib32")
    assert container_lib_dirs(False, lib32_exists=False) == ("/usr/lib64", "/usr/lib")
    assert container_lib_dirs(True, "aarch64")[0] == "/usr/lib/aarch64-linux-gnu"


def test_plan_options_target_checked():
    with pytest.raises(ValueError):
        PlanOptions(target="cdi")


def test_requirements_per_selected_gpu(node_factory):
    from nct.request.requirements import check_requirements

    node = node_factory(3, migs={2: 1})
    gpus = (node.gpus[0], node.gpus[1].replace(brand="GeForce", architecture="7.5"),
            node.gpus[2].replace(brand="GeForce", architecture=None))
    node = node.replace(gpus=gpus)
    check_requirements(node, select_devices(node, ["0"]), ["brand=tesla", "arch>=8.0"])
    with pytest.raises(RequirementError, match="^unsatisfied condition: brand=tesla$"):
        check_requirements(node, select_devices(node, ["0", "1"]), ["brand=tesla"])
    with pytest.raises(RequirementError, match="^unsatisfied condition: arch>=8.0$"):
        check_requirements(node, select_devices(node, ["1"]), ["arch>=8.0"])
    # a MIG device is checked through its parent (GeForce, arch unknown -> passes)
    check_requirements(node, select_devices(node, ["2:0"]), ["arch>=9.0"])
    with pytest.raises(RequirementError, match="brand=tesla"):
        check_requirements(node, select_devices(node, ["2:0"]), ["brand=tesla"])
    # every expression must hold (AND across variables)
    with pytest.raises(RequirementError, match="driver>=999"):
        check_requirements(node, select_devices(node, ["0"]), ["cuda>=12", "driver>=999"])


# --- issue 12 #14: a MIG slice never gets its parent GPU's DRM nodes ---------------------------

def _dri(edits) -> list[str]:
    return [n for n in nodes(edits) if n.startswith("/dev/dri/")]


@pytest.mark.parametrize("target", ["live", "spec"])
@pytest.mark.parametrize("ids, dri", [
    (["1:1"], []),                                      # a plain slice: parent node + caps only
    (["MIG-00010001-aaaa-bbbb-cccc-dddddddddddd"], []),  # the same by UUID
    (["1:1", "1"], ["/dev/dri/card2", "/dev/dri/renderD129"]),  # the full GPU asked for as well
    (["1", "1:1"], ["/dev/dri/card2", "/dev/dri/renderD129"]),
    (["0", "1:1"], ["/dev/dri/card1", "/dev/dri/renderD128"]),  # GPU 0's own, none of GPU 1's
])
def test_mig_slice_has_no_parent_drm(node_factory, target, ids, dri):
    node = node_factory(2, migs={1: 2})
    caps = ("compute", "utility", "graphics", "display")
    edits = plan(node, req(ids, caps=caps), PlanOptions(target=target, check_requirements=False))
    assert _dri(edits) == dri
    assert "/dev/nvidia1" in nodes(edits)
    assert {"/dev/nvidia-caps/nvidia-cap32", "/dev/nvidia-caps/nvidia-cap33"} <= set(nodes(edits))
    assert not any(s.link.startswith("/dev/dri/by-path/pci-0000:02") for s in edits.symlinks) or dri


def test_legacy_graphics_modifier_mig_slice(node_factory):
    """The legacy runtime's graphics modifier matches DRM nodes by GPU minor, UUID or bus id:
    `i:j` and MIG- UUIDs match none."""
    from nct.edits.planner import graphics_edits

    node = node_factory(2, migs={1: 2})
    caps = frozenset({"graphics", "compute"})
    for ids in (("1:1",), ("MIG-00010001-aaaa-bbbb-cccc-dddddddddddd",)):
        g = graphics_edits(node, ContainerRequest(devices=ids, capabilities=caps))
        assert _dri(g) == [] and not g.symlinks
    g = graphics_edits(node, ContainerRequest(devices=("1:1", "0"), capabilities=caps))
    assert _dri(g) == ["/dev/dri/card1", "/dev/dri/renderD128"]


def test_spec_all_gives_no_drm_of_mig_enabled_gpu(node_factory):
    """`all` in a spec is upstream's union of the device entries: a MIG-enabled GPU has no full
    entry, so its DRM nodes come only with a +gfx MIG profile (none here)."""
    node = node_factory(2, migs={1: 2})
    node = node.replace(gpus=(node.gpus[0], node.gpus[1].replace(
        migs=tuple(m.replace(profile="1g.10gb") for m in node.gpus[1].migs))))
    edits = plan(node, req(["all"]), SPEC)
    assert _dri(edits) == ["/dev/dri/card1", "/dev/dri/renderD128"]
    live = plan(node, req(["all"], caps=("graphics", "compute")), PlanOptions(check_requirements=False))
    assert "/dev/dri/card2" in _dri(live)  # the legacy hook: every GPU, as libnvidia-container


def test_spec_device_edits_is_the_cdi_generate_plan(node_factory):
    """issue 13: `cdi generate` plans in nct.edits (spec_device_edits) and only names and
    renders: full GPUs without MIG first, then MIG devices, each with its own edits."""
    from nct.edits.planner import PlanOptions, common_edits, gpu_edits, mig_edits, spec_device_edits

    node = node_factory(3, migs={1: 2})
    opts = PlanOptions(target="spec", check_requirements=False)
    common, devices, none = spec_device_edits(node, ("all",), opts)
    assert common == common_edits(node, None, opts).replace(app_profile=True) and none is None
    gpu0, gpu1, gpu2 = node.gpus
    assert [d for d, _ in devices] == [gpu0, gpu2, *gpu1.migs]
    assert devices[0][1] == gpu_edits(node, gpu0, opts) and devices[2][1] == mig_edits(node, gpu1.migs[0], opts)
    common, devices, none = spec_device_edits(node, ("none",), opts)
    assert devices == [] and none == ContainerEdits(env=["NVCT_EMPTY_DEVICE="]) and not common.app_profile
    with pytest.raises(RequestError):
        spec_device_edits(node, ("7",), opts)


def test_spec_flavour_decisions_are_the_planners(node_factory):
    """issue 13: what a spec's container gets beyond nodes and files is planned in nct.edits,
    as data the renderer turns into hooks: /dev/dri made 755 for a GPU with DRM nodes (only
    with open_dri: `cdi generate` with its chmod hook enabled; never live, never a MIG
    device), and the application profile update when the spec has devices."""
    from nct.cdi.hooks import HookOptions, hook_edits
    from nct.edits.planner import gpu_edits, mig_edits, spec_device_edits

    node = node_factory(2, migs={1: 1})
    opened = PlanOptions(target="spec", check_requirements=False, open_dri=True)
    assert gpu_edits(node, node.gpus[0], opened).chmod_dirs == ["/dev/dri"]
    assert gpu_edits(node, node.gpus[0], SPEC).chmod_dirs == []
    assert gpu_edits(node, node.gpus[0], PlanOptions(open_dri=True, capabilities=frozenset({"graphics"}))
                     ).chmod_dirs == []
    assert mig_edits(node, node.gpus[1].migs[0].replace(profile="1g.10gb+gfx"), opened).chmod_dirs == []
    no_drm = node.replace(gpus=(node.gpus[0].replace(drm=()),))
    assert gpu_edits(no_drm, no_drm.gpus[0], opened).chmod_dirs == []

    common, devices, _ = spec_device_edits(node, ("0",), opened)
    names = [h.args[1] for h in hook_edits(devices[0][1], HookOptions())]
    assert names[0] == "chmod" and hook_edits(devices[0][1], HookOptions())[0].args[2:] == (
        "--mode", "755", "--path", "/dev/dri")
    assert "chmod" not in [h.args[1] for h in hook_edits(devices[0][1], HookOptions(disabled=frozenset({"chmod"})))]
    assert [h.args[1] for h in hook_edits(common, HookOptions())][-1] == "update-application-profile"
