"""Device nodes of the node: control devices, GPU nodes, DRM nodes, nvidia-caps, IMEX channels.

Nodes are looked up under the dev root (paths inside it resolved as a chroot would), and
their majors cross-checked with /proc/devices where the kernel names them.
"""

from __future__ import annotations

import os
import stat

from nct.driver.model import DeviceNode
from nct.driver.procfs import numbered
from nct.driver.rootpath import host_path, resolve_in_root

NVIDIA_MAJOR_DEFAULT = 195
CONTROL_DEVICES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset")
CAPS_DIR = "/dev/nvidia-caps"
IMEX_DIR = "/dev/nvidia-caps-imex-channels"
DRI_DIR = "/dev/dri"


def nvidia_major(majors: dict[str, int]) -> int:
    """Major of /dev/nvidia*: 'nvidia-frontend' (multi-module) or 'nvidia', else 195."""
    return majors.get("nvidia-frontend", majors.get("nvidia", NVIDIA_MAJOR_DEFAULT))


def stat_node(dev_root: str, path: str) -> DeviceNode | None:
    """The character device at container path `path` (/dev/...) under dev_root, or None."""
    real = resolve_in_root(dev_root, path)
    if real is None:
        return None
    host = host_path(dev_root, real)
    try:
        st = os.stat(host)
    except OSError:
        return None
    if not stat.S_ISCHR(st.st_mode):
        return None
    return DeviceNode(path=path, host_path=host, major=os.major(st.st_rdev), minor=os.minor(st.st_rdev),
                      mode=stat.S_IMODE(st.st_mode), uid=st.st_uid, gid=st.st_gid)


def control_devices(dev_root: str) -> list[DeviceNode]:
    """nvidiactl, nvidia-uvm, nvidia-uvm-tools, nvidia-modeset: those that exist, in that order."""
    return [n for n in (stat_node(dev_root, p) for p in CONTROL_DEVICES) if n is not None]


def gpu_node(dev_root: str, minor: int, majors: dict[str, int]) -> DeviceNode:
    """/dev/nvidia<minor>; when the node is missing (modules loaded, nodes not made yet) a
    record with the kernel's major is returned so it can still be created and allowed."""
    path = f"/dev/nvidia{minor}"
    node = stat_node(dev_root, path)
    if node is not None:
        return node
    return DeviceNode(path=path, host_path=host_path(dev_root, path), major=nvidia_major(majors), minor=minor)


def caps_node(dev_root: str, minor: int, majors: dict[str, int], mode: int = 0o444) -> DeviceNode:
    """/dev/nvidia-caps/nvidia-cap<minor>, stat'ed when present, else from the caps major."""
    path = f"{CAPS_DIR}/nvidia-cap{minor}"
    node = stat_node(dev_root, path)
    if node is not None:
        return node
    return DeviceNode(path=path, host_path=host_path(dev_root, path),
                      major=majors.get("nvidia-caps", 0), minor=minor, mode=mode)


def _numbered_nodes(dev_root: str, directory: str, prefix: str) -> list[DeviceNode]:
    real = resolve_in_root(dev_root, directory)
    if real is None:
        return []
    try:
        names = os.listdir(host_path(dev_root, real))
    except OSError:
        return []
    found = numbered(names, prefix)
    return [node for _, n in found if (node := stat_node(dev_root, f"{directory}/{n}")) is not None]


def caps_devices(dev_root: str) -> list[DeviceNode]:
    """Every /dev/nvidia-caps/nvidia-cap<N> that exists, by minor."""
    return _numbered_nodes(dev_root, CAPS_DIR, "nvidia-cap")


def imex_channels(dev_root: str) -> list[DeviceNode]:
    """Every /dev/nvidia-caps-imex-channels/channel<N> that exists, by channel number."""
    return _numbered_nodes(dev_root, IMEX_DIR, "channel")


def drm_nodes(dev_root: str, bus_id: str, sys_root: str | None = None) -> list[DeviceNode]:
    """/dev/dri/cardN and renderDN of the GPU at PCI `bus_id` (short or long form).

    Matched through /dev/dri/by-path/pci-<bus>-{card,render} links under the dev root, else
    through <sys_root>/bus/pci/devices/<bus>/drm/."""
    short = _short(bus_id)
    names: list[str] = []
    by_path = resolve_in_root(dev_root, f"{DRI_DIR}/by-path")
    if by_path is not None:
        for kind in ("card", "render"):
            link = f"{DRI_DIR}/by-path/pci-{short}-{kind}"
            real = resolve_in_root(dev_root, link)
            if real is not None and real.startswith(DRI_DIR + "/"):
                names.append(real[len(DRI_DIR) + 1:])
    if not names and sys_root:
        drm = os.path.join(sys_root, "bus/pci/devices", short, "drm")
        try:
            entries = os.listdir(drm)
            names = sorted(n for _, n in numbered(entries, "card") + numbered(entries, "renderD"))
        except OSError:
            names = []
    nodes = [stat_node(dev_root, f"{DRI_DIR}/{n}") for n in names]
    return sorted((n for n in nodes if n is not None), key=lambda n: (not n.path.startswith(f"{DRI_DIR}/card"), n.path))


def glob_nodes(dev_root: str, pattern: str) -> list[DeviceNode]:
    """Character/block nodes matching `pattern` (a container path whose last part may hold
    wildcards), in natural order (nvidia2 before nvidia10). The directory is resolved inside
    the dev root as a chroot would, and a matching name is lstat'ed, never followed: a
    symlink (to a node outside the root, say) is not a node of the dev root."""
    import fnmatch  # not on the hook's path: fnmatch imports re

    directory, pat = os.path.split(pattern)
    real = resolve_in_root(dev_root, directory)
    if real is None:
        return []
    base = host_path(dev_root, real)
    try:
        names = sorted(os.listdir(base))
    except OSError:
        return []
    out = []
    for name in names:
        if not fnmatch.fnmatchcase(name, pat):
            continue
        try:
            st = os.lstat(os.path.join(base, name))
        except OSError:
            continue
        if not (stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode)):
            continue
        out.append(DeviceNode(path=os.path.join(directory, name), host_path=os.path.join(base, name),
                              major=os.major(st.st_rdev), minor=os.minor(st.st_rdev), mode=stat.S_IMODE(st.st_mode),
                              uid=st.st_uid, gid=st.st_gid, type="b" if stat.S_ISBLK(st.st_mode) else "c"))
    out.sort(key=lambda n: _natural(n.path))
    return out


def _natural(s: str) -> list:
    """`s` as alternating text and numbers (text first, as re.split(r"(\\d+)") gives; no
    `re` here, the hook imports this module): a natural sort key."""
    parts: list = []
    run = ""
    for ch in s:
        if ch.isdecimal() != (len(parts) % 2 == 1):  # the run ends: text at even, numbers at odd places
            parts.append(int(run) if len(parts) % 2 else run)
            run = ""
        run += ch
    parts.append(int(run) if len(parts) % 2 else run)
    if len(parts) % 2 == 0:
        parts.append("")
    return parts


def _short(bus_id: str) -> str:
    dom, _, rest = bus_id.partition(":")
    try:
        return f"{int(dom, 16):04x}:{rest.lower()}"
    except ValueError:
        return bus_id.lower()
