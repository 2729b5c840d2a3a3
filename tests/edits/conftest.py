"""A factory of Node objects built straight from the model records (no filesystem), laid
out like a real x86_64 node with driver 550.54.15, optionally under a driver root."""

from __future__ import annotations

import pytest

from nct.driver import catalogue
from nct.driver.model import DeviceNode, DriverFile, Gpu, MigDevice, Node, Roots

VERSION = "550.54.15"
LIBDIR = "/usr/lib/x86_64-linux-gnu"
LIB32DIR = "/usr/lib/i386-linux-gnu"
CAPS_MAJOR = 234
UVM_MAJOR = 509
VIDEO_GID = 44

# One library per catalogue group is enough to see capability filtering; libcuda,
# libnvidia-ml, GLX and allocator are there for the extra symlinks.
LIBS = {
    "utility": ("libnvidia-ml.so", "libnvidia-cfg.so"),
    "compute": ("libcuda.so", "libnvidia-ptxjitcompiler.so", "libnvidia-allocator.so"),
    "video": ("libnvcuvid.so", "libnvidia-opticalflow.so"),
    "graphics": ("libnvidia-glcore.so", "libGLX_nvidia.so", "libEGL_nvidia.so"),
    "ngx": ("libnvidia-ngx.so",),
}


def _h(root: str, path: str) -> str:
    return path if root in ("", "/") else root.rstrip("/") + path


def _dev(roots: Roots, path: str, major: int, minor: int, mode: int = 0o666, gid: int = 0) -> DeviceNode:
    return DeviceNode(path=path, host_path=_h(roots.dev, path), major=major, minor=minor, mode=mode, gid=gid)


def _lib(roots: Roots, kind: str, cap: str, name: str) -> DriverFile:
    d = LIBDIR if kind == "lib" else LIB32DIR
    real = f"{d}/{name}.{VERSION}"
    return DriverFile(kind=kind, host_path=_h(roots.driver, real), container_path=real, capability=cap,
                      name=name, soname=catalogue.soname_for(name, VERSION))


def make_node(gpus: int = 2, *, migs: dict[int, int] | None = None, root: str = "/", proc: str | None = None,
              cuda: str | None = "12.4", driver: str = VERSION, arch: str | None = "8.0",
              brand: str | None = "Tesla", excluded: tuple[int, ...] = (), imex: int = 0,
              with_files: bool = True, mig_admin: bool = False) -> Node:
    """`gpus` GPUs (minor = index, bus 0000:<index+1>:00.0); `migs` maps a GPU index to its
    number of MIG devices (GI g = CI 0 each); `root` is the driver (and dev) root."""
    roots = Roots(driver=root, dev=root, proc=proc or _h(root, "/proc"))
    migs = migs or {}
    gpu_list = []
    caps_devices = []
    for i in range(gpus):
        bus = f"00000000:{i + 1:02x}:00.0"
        mig_devs = []
        for j in range(migs.get(i, 0)):
            gi_minor, ci_minor = 10 + 20 * i + 2 * j, 11 + 20 * i + 2 * j
            gi = _dev(roots, f"/dev/nvidia-caps/nvidia-cap{gi_minor}", CAPS_MAJOR, gi_minor, 0o444)
            ci = _dev(roots, f"/dev/nvidia-caps/nvidia-cap{ci_minor}", CAPS_MAJOR, ci_minor, 0o444)
            caps_devices += [gi, ci]
            base = f"{roots.proc}/driver/nvidia/capabilities/gpu{i}/mig/gi{j + 1}"
            mig_devs.append(MigDevice(
                parent_index=i, gi=j + 1, ci=0, gi_access=gi, ci_access=ci,
                gi_access_proc=f"{base}/access", ci_access_proc=f"{base}/ci0/access",
                uuid=f"MIG-{i:04d}{j:04d}-aaaa-bbbb-cccc-dddddddddddd",
                profile="1g.10gb+gfx" if j == 0 else "1g.10gb", ordinal=j,
            ))
        gpu_list.append(Gpu(
            index=i, minor=i, uuid=f"GPU-{i:08x}-1111-2222-3333-444444444444", model="NVIDIA A100",
            bus_id=bus, proc_dir=f"{roots.proc}/driver/nvidia/gpus/0000:{i + 1:02x}:00.0",
            device=_dev(roots, f"/dev/nvidia{i}", 195, i), excluded=i in excluded, brand=brand,
            architecture=arch,
            drm=(_dev(roots, f"/dev/dri/card{i + 1}", 226, i + 1, 0o660, VIDEO_GID),
                 _dev(roots, f"/dev/dri/renderD{128 + i}", 226, 128 + i, 0o666, 0)),
            mig_enabled=bool(migs.get(i)), migs=tuple(mig_devs),
        ))
    control = (
        _dev(roots, "/dev/nvidiactl", 195, 255), _dev(roots, "/dev/nvidia-uvm", UVM_MAJOR, 0),
        _dev(roots, "/dev/nvidia-uvm-tools", UVM_MAJOR, 1), _dev(roots, "/dev/nvidia-modeset", 195, 254),
    )
    mig_config: tuple[str, ...] = ()
    mig_monitor: tuple[str, ...] = ()
    if mig_admin:
        cfg_node = _dev(roots, "/dev/nvidia-caps/nvidia-cap1", CAPS_MAJOR, 1, 0o400)
        mon_node = _dev(roots, "/dev/nvidia-caps/nvidia-cap2", CAPS_MAJOR, 2, 0o444)
        caps_devices += [cfg_node, mon_node]
        mig_config = (f"{roots.proc}/driver/nvidia/capabilities/mig/config", cfg_node.host_path)
        mig_monitor = (f"{roots.proc}/driver/nvidia/capabilities/mig/monitor", mon_node.host_path)
    files: list[DriverFile] = []
    if with_files:
        for cap, names in LIBS.items():
            files += [_lib(roots, "lib", cap, n) for n in names]
        files += [_lib(roots, "lib32", "compute", "libcuda.so"), _lib(roots, "lib32", "graphics", "libGLX_nvidia.so")]
        for cap, names in (("utility", ("nvidia-smi", "nvidia-persistenced")), ("compute", ("nvidia-cuda-mps-control",))):
            files += [DriverFile(kind="bin", host_path=_h(root, f"/usr/bin/{n}"), container_path=f"/usr/bin/{n}",
                                 capability=cap, name=n) for n in names]
        for path, cap in (("/run/nvidia-persistenced/socket", "utility"),
                          ("/run/nvidia-fabricmanager/socket", "utility"), ("/tmp/nvidia-mps", "compute")):
            files.append(DriverFile(kind="ipc", host_path=_h(root, path), container_path=path, capability=cap))
        fw = f"/lib/firmware/nvidia/{VERSION}/gsp_ga10x.bin"
        files.append(DriverFile(kind="firmware", host_path=_h(root, fw), container_path=fw, name="gsp_ga10x.bin"))
        for cfgpath in ("/etc/vulkan/icd.d/nvidia_icd.json", "/usr/share/glvnd/egl_vendor.d/10_nvidia.json"):
            files.append(DriverFile(kind="config", host_path=_h(root, cfgpath), container_path=cfgpath,
                                    capability="graphics"))
        xorg = f"{LIBDIR}/nvidia/xorg/nvidia_drv.so"
        files.append(DriverFile(kind="xorg", host_path=_h(root, xorg), container_path=xorg, capability="graphics",
                                name="nvidia_drv.so"))
    imex_nodes = tuple(_dev(roots, f"/dev/nvidia-caps-imex-channels/channel{c}", 235, c) for c in range(imex))
    return Node(
        roots=roots, driver_version=driver, cuda_version=cuda, gpus=tuple(gpu_list), control_devices=control,
        majors={"nvidia-frontend": 195, "nvidia-uvm": UVM_MAJOR, "nvidia-caps": CAPS_MAJOR}, files=tuple(files),
        imex_channels=imex_nodes, mig_config=mig_config, mig_monitor=mig_monitor,
        caps_devices=tuple(caps_devices), lib_dirs=(_h(root, LIBDIR),),
    )


@pytest.fixture
def node_factory():
    return make_node
