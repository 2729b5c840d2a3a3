"""Create and load simulated GPU nodes: DIR/root laid out like a GPU host's filesystem and
DIR/node.json describing it. See docs/sim.md for the layout."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import stat
import subprocess
import tempfile
from pathlib import Path

from nct.driver import catalogue
from nct.limits import IMEX_CHANNEL_COUNT
from nct.sim import layout
from nct.sim.build import TOOLS, build_artifacts, gcc_supports_m32, library_builds
from nct.sim.model import DEFAULT_CUDA_VERSION, DEFAULT_DRIVER_VERSION, SimError, SimNode

LIB64_DIR = "/usr/lib/x86_64-linux-gnu"
LIB32_DIR = "/usr/lib/i386-linux-gnu"
BIN_DIR = "/usr/bin"
FIRMWARE = ("gsp_ga10x.bin", "gsp_tu10x.bin")
PERSISTENCED_SOCKET = "/run/nvidia-persistenced/socket"
TRAILER_LIBS = ("libnvidia-ml.so", "libcuda.so")


def cuda_code(version: str) -> int:
    """"12.4" -> 12040, the form cuDriverGetVersion returns."""
    m = re.fullmatch(r"(\d+)\.(\d+)", version)
    if not m or int(m.group(2)) > 99:
        raise SimError(f"invalid --cuda-version {version!r}: expected MAJOR.MINOR, e.g. 12.4")
    return int(m.group(1)) * 1000 + int(m.group(2)) * 10


def create_node(
    directory: str | os.PathLike,
    gpus: int = 1,
    driver_version: str = DEFAULT_DRIVER_VERSION,
    mig: str | int | dict[int, int] | None = None,
    *,
    cuda_version: str = DEFAULT_CUDA_VERSION,
    arch: str = "x86_64",
    seed: str | None = None,
    imex_channels: int = 0,
    lib32: bool | None = None,
    minor_order: str = "index",
) -> SimNode:
    """Build a simulated node in `directory` (absent or empty) and return its description.
    The tree is built next to it and renamed into place, so a failure leaves nothing.
    `mig` is a --mig SPEC string, a count for every GPU, or {gpu index: count}."""
    if isinstance(mig, dict):
        mig = ",".join(f"{g}:{n}" for g, n in mig.items()) or None
    elif isinstance(mig, int):  # (a bool is an int: str(True) is refused by parse_mig_spec)
        mig = str(mig)
    directory = os.path.abspath(os.fspath(directory))
    if not isinstance(gpus, int) or isinstance(gpus, bool):
        raise SimError(f"invalid --gpus {gpus!r}: must be an integer 0..64")
    if not re.fullmatch(r"\d+\.\d+(\.\d+)?", driver_version):
        raise SimError(f"invalid --driver-version {driver_version!r}: expected e.g. 550.54.15")
    code = cuda_code(cuda_version)
    if arch != "x86_64":
        raise SimError(f"unsupported --arch {arch!r}: only x86_64 is simulated")
    if not 0 <= imex_channels <= IMEX_CHANNEL_COUNT:
        raise SimError(f"invalid --imex-channels {imex_channels}: must be 0..{IMEX_CHANNEL_COUNT}")
    mig_counts = layout.parse_mig_spec(mig, gpus) if gpus >= 0 else {}
    seed = seed if seed is not None else os.path.basename(directory)
    planned = layout.plan_gpus(gpus, mig_counts, seed, minor_order)
    if os.path.lexists(directory):
        if not os.path.isdir(directory) or os.path.islink(directory):
            raise SimError(f"{directory}: exists and is not a directory")
        if os.listdir(directory):
            raise SimError(f"{directory}: directory exists and is not empty")
    if os.geteuid() != 0:
        raise SimError("creating a simulated node needs root (device nodes are made with mknod)")
    if lib32 is None:
        lib32 = gcc_supports_m32()
    artifacts = build_artifacts(driver_version, code, lib32)
    try:
        host_devices = Path("/proc/devices").read_text()
    except OSError:
        host_devices = ""
    majors = layout.choose_majors(layout.parse_proc_devices(host_devices))

    parent = os.path.dirname(directory)
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=f".{os.path.basename(directory)}.", dir=parent)
    try:
        node = SimNode(
            dir=directory, driver_version=driver_version, cuda_version=cuda_version, arch=arch,
            seed=seed, gpus=planned, majors=majors, imex_channels=imex_channels, lib32=lib32,
        )
        files = _populate(Path(tmp, "root"), node, artifacts)
        node = SimNode(**{**node.__dict__, "files": files})
        Path(tmp, "node.json").write_text(json.dumps(node.to_json(), indent=2) + "\n")
        os.chmod(tmp, 0o755)
        if os.path.isdir(directory):
            os.rmdir(directory)
        os.rename(tmp, directory)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return node


def load_node(directory: str | os.PathLike) -> SimNode:
    """Read DIR/node.json written by create_node."""
    directory = os.path.abspath(os.fspath(directory))
    path = os.path.join(directory, "node.json")
    try:
        with open(path) as f:
            data = json.load(f)
        return SimNode.from_json(directory, data)
    except FileNotFoundError:
        raise SimError(f"{path}: not found (is {directory} a node made by `nct sim create`?)") from None
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise SimError(f"{path}: invalid simulated node description: {e}") from None


# --- the tree ---------------------------------------------------------------------------

def _write(root: Path, path: str, text: str | bytes, mode: int = 0o644) -> None:
    p = root / path.lstrip("/")
    p.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, str):
        text = text.encode()
    p.write_bytes(text)
    os.chmod(p, mode)


def _symlink(root: Path, path: str, target: str) -> None:
    p = root / path.lstrip("/")
    p.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(target, p)


def _mknod(root: Path, path: str, major: int, minor: int, mode: int = 0o666, gid: int = 0) -> None:
    p = root / path.lstrip("/")
    p.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.mknod(p, stat.S_IFCHR | mode, os.makedev(major, minor))
    except PermissionError:
        raise SimError(f"cannot create device node {path}: mknod not permitted (run as root)") from None
    os.chmod(p, mode)
    if gid:
        os.chown(p, 0, gid)


def _group_id(name: str, default: int) -> int:
    try:
        import grp

        return grp.getgrnam(name).gr_gid
    except (KeyError, ImportError):
        return default


def _populate(root: Path, node: SimNode, artifacts: Path) -> dict[str, list[str]]:
    files: dict[str, list[str]] = {k: [] for k in ("libs", "libs32", "bins", "firmware", "configs", "ipcs", "xorg")}
    root.mkdir()
    os.chmod(root, 0o755)
    for d in ("etc", "run", "tmp", "usr/bin", "usr/lib", "var"):
        (root / d).mkdir(parents=True, exist_ok=True)
    os.symlink("usr/lib", root / "lib")  # merged /usr, as on Debian 12
    os.symlink("usr/bin", root / "bin")
    os.symlink("../run", root / "var" / "run")
    _procfs(root, node)
    _devices(root, node)
    _libraries(root, node, artifacts, files)
    for name in ("nvidia-smi", *TOOLS):
        dest = root / BIN_DIR.lstrip("/") / name
        shutil.copyfile(artifacts / "bin" / name, dest)
        os.chmod(dest, 0o755)
        files["bins"].append(f"{BIN_DIR}/{name}")
    for fw in FIRMWARE:
        path = f"/usr/lib/firmware/nvidia/{node.driver_version}/{fw}"
        _write(root, path, b"NCT-SIM GSP FIRMWARE " + fw.encode() + b"\n" + bytes(256))
        files["firmware"].append(f"/lib/firmware/nvidia/{node.driver_version}/{fw}")
    for cfg in catalogue.GRAPHICS_CONFIGS:
        _write(root, cfg, _config_text(cfg, node.driver_version))
        files["configs"].append(cfg)
    _persistenced_socket(root)
    files["ipcs"].append(PERSISTENCED_SOCKET)
    _ldcache(root, node.lib32)
    return files


def _procfs(root: Path, node: SimNode) -> None:
    drv = "/proc/driver/nvidia"
    _write(root, f"{drv}/version", layout.version_text(node.driver_version, node.arch), 0o444)
    _write(root, f"{drv}/params", layout.params_text(), 0o444)
    _write(root, f"{drv}/registry", layout.REGISTRY_TEXT, 0o444)
    (root / f"{drv}/gpus".lstrip("/")).mkdir(parents=True)
    for g in node.gpus:
        d = f"{drv}/gpus/{g.proc_bus}"
        _write(root, f"{d}/information", layout.information_text(g), 0o444)
        _write(root, f"{d}/registry", layout.REGISTRY_TEXT, 0o444)
        _write(root, f"{d}/nct-sim", layout.nct_sim_text(g), 0o444)
    caps = f"{drv}/capabilities"
    _write(root, f"{caps}/mig/config", layout.caps_text(layout.CAPS_CONFIG_MINOR, 0o400), 0o444)
    _write(root, f"{caps}/mig/monitor", layout.caps_text(layout.CAPS_MONITOR_MINOR), 0o444)
    for g in node.gpus:
        if not g.mig_enabled:
            continue
        (root / f"{caps}/gpu{g.minor}/mig".lstrip("/")).mkdir(parents=True, exist_ok=True)
        for m in g.migs:
            _write(root, f"{caps}/gpu{g.minor}/mig/gi{m.gi}/access", layout.caps_text(m.gi_minor), 0o444)
            _write(root, f"{caps}/gpu{g.minor}/mig/gi{m.gi}/ci{m.ci}/access", layout.caps_text(m.ci_minor), 0o444)
    _write(root, "/proc/driver/nvidia-caps/mig-minors",
           layout.mig_minors_text([g.minor for g in node.gpus]), 0o444)
    _write(root, "/proc/devices", layout.devices_text(node.majors), 0o444)
    _write(root, "/proc/modules", layout.MODULES_TEXT, 0o444)


def _devices(root: Path, node: SimNode) -> None:
    (root / "dev").mkdir(exist_ok=True)
    fe = node.majors["nvidia-frontend"]
    _mknod(root, "/dev/nvidiactl", fe, 255)
    _mknod(root, "/dev/nvidia-modeset", fe, 254)
    _mknod(root, "/dev/nvidia-uvm", node.majors["nvidia-uvm"], 0)
    _mknod(root, "/dev/nvidia-uvm-tools", node.majors["nvidia-uvm"], 1)
    video, render = _group_id("video", 44), _group_id("render", 44)
    for g in node.gpus:
        _mknod(root, g.device_path, fe, g.minor)
        _mknod(root, f"/dev/dri/card{g.card_minor}", node.majors["drm"], g.card_minor, 0o660, video)
        _mknod(root, f"/dev/dri/renderD{g.render_minor}", node.majors["drm"], g.render_minor, 0o660, render)
        _symlink(root, f"/dev/dri/by-path/pci-{g.proc_bus}-card", f"../card{g.card_minor}")
        _symlink(root, f"/dev/dri/by-path/pci-{g.proc_bus}-render", f"../renderD{g.render_minor}")
    caps = node.majors["nvidia-caps"]
    _mknod(root, f"/dev/nvidia-caps/nvidia-cap{layout.CAPS_CONFIG_MINOR}", caps, layout.CAPS_CONFIG_MINOR, 0o400)
    _mknod(root, f"/dev/nvidia-caps/nvidia-cap{layout.CAPS_MONITOR_MINOR}", caps, layout.CAPS_MONITOR_MINOR, 0o444)
    for m in node.migs:
        _mknod(root, f"/dev/nvidia-caps/nvidia-cap{m.gi_minor}", caps, m.gi_minor, 0o444)
        _mknod(root, f"/dev/nvidia-caps/nvidia-cap{m.ci_minor}", caps, m.ci_minor, 0o444)
    for ch in range(node.imex_channels):
        _mknod(root, f"/dev/nvidia-caps-imex-channels/channel{ch}", node.majors["nvidia-caps-imex-channels"], ch)


def _libraries(root: Path, node: SimNode, artifacts: Path, files: dict[str, list[str]]) -> None:
    trailer = layout.trailer(node.gpus)
    for lib in library_builds(node.driver_version, node.lib32):
        libdir = LIB64_DIR if lib.bits == 64 else LIB32_DIR
        dest = root / libdir.lstrip("/") / lib.filename
        dest.parent.mkdir(parents=True, exist_ok=True)
        src = artifacts / ("lib64" if lib.bits == 64 else "lib32") / lib.filename
        shutil.copyfile(src, dest)
        if lib.name in TRAILER_LIBS:
            with open(dest, "ab") as f:
                f.write(trailer)
        os.chmod(dest, 0o755)
        if lib.soname != lib.filename:
            os.symlink(lib.filename, dest.parent / lib.soname)
        os.symlink(lib.soname, dest.parent / lib.name)
        files["libs" if lib.bits == 64 else "libs32"].append(f"{libdir}/{lib.filename}")
    xorg = {"nvidia_drv.so": "/usr/lib/xorg/modules/drivers",
            f"libglxserver_nvidia.so.{node.driver_version}": "/usr/lib/xorg/modules/extensions"}
    for filename, d in xorg.items():
        dest = root / d.lstrip("/") / filename
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(artifacts / "xorg" / filename, dest)
        os.chmod(dest, 0o755)
        files["xorg"].append(f"{d}/{filename}")
    os.symlink(f"libglxserver_nvidia.so.{node.driver_version}",
               root / "usr/lib/xorg/modules/extensions/libglxserver_nvidia.so")


def _config_text(path: str, version: str) -> str:
    name = os.path.basename(path)
    if path.endswith("nvidia.icd"):
        return "libnvidia-opencl.so.1\n"
    if name == "10_nvidia.json":
        return '{\n    "file_format_version" : "1.0.0",\n    "ICD" : {\n        "library_path" : "libEGL_nvidia.so.0"\n    }\n}\n'
    if name == "nvidia_icd.json":
        return ('{\n    "file_format_version" : "1.0.1",\n    "ICD": {\n        "library_path": "libGLX_nvidia.so.0",\n'
                f'        "api_version" : "1.3.277"\n    }}\n}}\n')
    if name == "nvidia_layers.json":
        return ('{\n    "file_format_version" : "1.0.0",\n    "layer": {\n        "name": "VK_LAYER_NV_optimus",\n'
                '        "type": "INSTANCE",\n        "library_path": "libGLX_nvidia.so.0",\n'
                f'        "api_version" : "1.3.277",\n        "implementation_version" : "1",\n'
                '        "description" : "NVIDIA Optimus layer"\n    }\n}\n')
    if path.endswith(".json"):
        lib = {"15_nvidia_gbm.json": "libnvidia-egl-gbm.so.1", "10_nvidia_wayland.json": "libnvidia-egl-wayland.so.1",
               "09_nvidia_wayland2.json": "libnvidia-egl-wayland2.so.1", "20_nvidia_xcb.json": "libnvidia-egl-xcb.so.1",
               "20_nvidia_xlib.json": "libnvidia-egl-xlib.so.1"}.get(name, "libnvidia-egl-gbm.so.1")
        return f'{{\n    "file_format_version" : "1.0.0",\n    "ICD" : {{\n        "library_path" : "{lib}"\n    }}\n}}\n'
    if name == "nvoptix.bin":
        return f"NCT-SIM nvoptix data {version}\n"
    if name == "10-nvidia.conf":
        return ('Section "OutputClass"\n    Identifier "nvidia"\n    MatchDriver "nvidia-drm"\n'
                '    Driver "nvidia"\n    ModulePath "/usr/lib/x86_64-linux-gnu/nvidia/xorg"\nEndSection\n')
    if name == "nvidia-drm-outputclass.conf":
        return 'Section "OutputClass"\n    Identifier "nvidia"\n    MatchDriver "nvidia-drm"\n    Driver "nvidia"\nEndSection\n'
    return f"# nct simulated driver {version}: {path}\n"


def _persistenced_socket(root: Path) -> None:
    d = root / PERSISTENCED_SOCKET.lstrip("/")
    d.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(d.parent, os.O_RDONLY | os.O_DIRECTORY)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.bind(f"/proc/self/fd/{fd}/{d.name}")  # short path whatever the node's location
    finally:
        s.close()
        os.close(fd)
    os.chmod(d, 0o666)


def _ldcache(root: Path, lib32: bool) -> None:
    dirs = [LIB64_DIR] + ([LIB32_DIR] if lib32 else [])
    _write(root, "/etc/ld.so.conf", "".join(f"{d}\n" for d in dirs))
    ldconfig = shutil.which("ldconfig") or "/sbin/ldconfig"
    r = subprocess.run([ldconfig, "-X", "-r", str(root), "-f", "/etc/ld.so.conf", "-C", "/etc/ld.so.cache"],
                       capture_output=True, text=True)
    if r.returncode != 0 or not (root / "etc/ld.so.cache").exists():
        first = (r.stderr.strip().splitlines() or ["no cache written"])[0]
        raise SimError(f"ldconfig failed for {root}/etc/ld.so.cache: {first}")
