"""Device classes, management devices and IMEX channels: the planner's edits for the
devices that are not GPUs.

One table (DEVICE_CLASSES) serves both `cdi generate --mode gds|mofed|gdrcopy|nvswitch`
and the runtime's feature-gated devices (NVIDIA_GDS=enabled, ...), as upstream's runtime
generates the same nvcdi spec just in time. A class's nodes are looked up under the dev
root, its files under the driver root (only when a node exists), never through a symlink
that leaves the root (nct.driver.devices.glob_nodes).
"""

from __future__ import annotations

import os
import posixpath

from nct.driver.model import DeviceNode, Node, Roots
from nct.edits.model import RO_MOUNT, ContainerEdits, MountEdit
from nct.edits.planner import PlanOptions, common_edits, imex_channel_id, imex_channels_by_id, nodes_edits
from nct.errors import NctError, RequestError
from nct.limits import MAX_IMEX_CHANNEL
from nct.record import Record


class DeviceClass(Record):
    """`nodes`: device node patterns (container paths, wildcards in the last part);
    `files`: mounted when at least one node exists."""

    nodes: tuple[str, ...]
    files: tuple[str, ...] = ()


DEVICE_CLASSES: dict[str, DeviceClass] = {
    "gds": DeviceClass(("/dev/nvidia-fs*",), ("/run/udev", "/etc/cufile.json")),
    "mofed": DeviceClass(("/dev/infiniband/uverbs*", "/dev/infiniband/rdma_cm")),
    "gdrcopy": DeviceClass(("/dev/gdrdrv",)),
    "nvswitch": DeviceClass(("/dev/nvidia-nvswitchctl", "/dev/nvidia-nvswitch*")),
}
# management.nvidia.com/gpu=all: every NVIDIA node but the other classes' ones.
MANAGEMENT_PATTERNS = ("/dev/nvidia*", "/dev/nvidia-caps/nvidia-cap*", "/dev/nvidia-caps-imex-channels/channel*")
MANAGEMENT_EXCLUDE = ("nvidia-fs*", "nvidia-nvswitch*", "nvidia-nvlink*")

__all__ = ["DeviceClass", "DEVICE_CLASSES", "class_edits", "gated_edits", "management_edits",
           "imex_channel_edits", "show_path"]


def class_edits(roots: Roots, mode: str, options: PlanOptions | None = None) -> ContainerEdits:
    """One device class's nodes that exist under the dev root, and its files under the
    driver root; empty when the node has no such device."""
    from nct.driver.devices import glob_nodes
    from nct.driver.rootpath import host_path, resolve_in_root

    cls = DEVICE_CLASSES[mode]
    nodes = [n for pattern in cls.nodes for n in glob_nodes(roots.dev, pattern)]
    edits = nodes_edits(nodes, options)
    if edits.device_nodes:
        for f in cls.files:
            real = resolve_in_root(roots.driver, f)
            if real is not None and os.path.exists(host_path(roots.driver, real)):
                edits.mounts.append(MountEdit(host_path=host_path(roots.driver, real), container_path=f,
                                              options=RO_MOUNT))
    return edits


def gated_edits(roots: Roots, modes, options: PlanOptions | None = None) -> ContainerEdits:
    """The runtime's feature-gated classes (request.gated_modes), merged in order."""
    edits = ContainerEdits()
    for mode in modes:
        edits = edits.merge(class_edits(roots, mode, options))
    return edits


def management_edits(node: Node, options: PlanOptions | None = None) -> tuple[ContainerEdits, ContainerEdits]:
    """(the `all` device's edits, the spec's common edits) of a management spec: every
    NVIDIA node under the dev root (GPUs, control, caps, IMEX channels); the driver files
    as common edits, without the device-node-modification hook."""
    import fnmatch

    from nct.driver.devices import glob_nodes

    nodes = [n for pattern in MANAGEMENT_PATTERNS for n in glob_nodes(node.roots.dev, pattern)
             if not any(fnmatch.fnmatch(posixpath.basename(n.path), x) for x in MANAGEMENT_EXCLUDE)]
    if not nodes:
        raise NctError(f"management mode: no NVIDIA device nodes found under {show_path(node.roots.dev, '/dev')}")
    common = common_edits(node, None, options)
    common.proc_driver_gpus = None
    return nodes_edits(nodes, options), common


def imex_channel_edits(dev_root: str, ids, options: PlanOptions | None = None) -> list[tuple[str, ContainerEdits]]:
    """One (channel number, edits) per requested IMEX channel (N or channelN, must exist
    under the dev root), by number; `all` = every channel node there, `none` = nothing."""
    from nct.driver import devices as devs

    existing = imex_channels_by_id(devs.imex_channels(dev_root))
    chosen: dict[int, DeviceNode] = {}
    for raw in ids:
        dev = raw.strip()
        if not dev or dev.lower() == "none":
            continue
        if dev.lower() == "all":
            chosen.update(existing)
            continue
        n = imex_channel_id(dev)
        if n is None or n > MAX_IMEX_CHANNEL:
            raise RequestError(f"invalid IMEX channel {dev!r} (N or channelN, N <= {MAX_IMEX_CHANNEL})")
        if n not in existing:
            raise RequestError(f"unknown IMEX channel: {dev} (no {show_path(dev_root, devs.IMEX_DIR)}/channel{n})")
        chosen[n] = existing[n]
    if not chosen:
        raise NctError(f"imex mode: no IMEX channel nodes found under {show_path(dev_root, devs.IMEX_DIR)}")
    return [(str(ch), nodes_edits([chosen[ch]], options)) for ch in sorted(chosen)]


def show_path(root: str, path: str) -> str:
    """`path` under `root` as an error message shows it."""
    return path if root in ("", "/") else root.rstrip("/") + path
