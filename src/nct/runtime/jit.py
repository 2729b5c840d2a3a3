"""The runtime's device injection: just-in-time edits from our own discovery (upstream's
in-memory `runtime.nvidia.com` CDI spec), CDI spec dirs, feature-gated device classes
and the legacy graphics extras. Imported only on `create`.
"""

from __future__ import annotations

import glob
import os
import stat

from nct.edits.model import RO_MOUNT, ContainerEdits, DeviceNodeEdit, MountEdit
from nct.errors import SpecError

# Feature-gated classes (NVIDIA_GDS=enabled, ...): device node globs under the dev root,
# and files mounted only when such a device exists.
GATED_DEVICES = {
    "gds": (("/dev/nvidia-fs*",), ("/run/udev", "/etc/cufile.json")),
    "mofed": (("/dev/infiniband/uverbs*", "/dev/infiniband/rdma_cm"), ()),
    "gdrcopy": (("/dev/gdrdrv",), ()),
    "nvswitch": (("/dev/nvidia-nvswitchctl", "/dev/nvidia-nvswitch*"), ()),
}


def _plan_options(cfg):
    from nct.edits.planner import PlanOptions

    flags = set(cfg.nvidia_container_runtime.modes.jit_cdi.nvcdi_feature_flags)
    return PlanOptions(
        target="spec",
        no_additional_gids=(cfg.features.no_additional_gids_for_device_nodes
                            or "no-additional-gids-for-device-nodes" in flags),
        # upstream's runtime evaluates NVIDIA_REQUIRE_* only in csv mode
        check_requirements=False,
    )


def _apply(spec: dict, edits: ContainerEdits, cfg, hook_path: str, driver_version: str | None) -> dict:
    from nct.oci.inject import apply_edits_to_spec

    return apply_edits_to_spec(
        spec, edits, hook_path=hook_path, driver_version=driver_version,
        disabled_hooks=tuple(cfg.nvidia_container_runtime.modes.jit_cdi.nvcdi_disable_hooks),
    )


def jit_edits(node, request, cfg) -> ContainerEdits:
    """Common edits + the requested GPUs/MIG devices (+ IMEX channels, gated classes)."""
    from nct.edits.planner import plan

    edits = plan(node, request, _plan_options(cfg))
    for mode in request.gated_modes:
        edits = edits.merge(gated_edits(node.roots.dev, mode))
    return edits


def jit_inject(spec: dict, node, request, cfg, hook_path: str) -> dict:
    return _apply(spec, jit_edits(node, request, cfg), cfg, hook_path, node.driver_version)


def gated_edits(dev_root: str, mode: str) -> ContainerEdits:
    """Device nodes of one feature-gated class that exist under `dev_root`."""
    patterns, files = GATED_DEVICES[mode]
    root = dev_root or "/"
    edits = ContainerEdits()
    for pattern in patterns:
        for host in sorted(glob.glob(os.path.join(root, pattern.lstrip("/")))):
            try:
                st = os.stat(host)
            except OSError:
                continue
            if not (stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode)):
                continue
            path = "/" + os.path.relpath(host, root)
            edits.device_nodes.append(DeviceNodeEdit(
                path=path, host_path=host, major=os.major(st.st_rdev), minor=os.minor(st.st_rdev),
                type="b" if stat.S_ISBLK(st.st_mode) else "c", file_mode=st.st_mode, permissions="rwm",
            ))
    if edits.device_nodes:
        for f in files:
            host = os.path.join(root, f.lstrip("/"))
            if os.path.exists(host):
                edits.mounts.append(MountEdit(host_path=host, container_path=f, options=RO_MOUNT))
    return edits


def gated_inject(spec: dict, request, cfg, hook_path: str) -> dict:
    """legacy/csv: only the gated classes' nodes (the legacy hook brings the driver)."""
    edits = ContainerEdits()
    dev_root = cfg.nvidia_container_cli.root or "/"
    for mode in request.gated_modes:
        edits = edits.merge(gated_edits(dev_root, mode))
    if edits.is_empty():
        return spec
    return _apply(spec, edits, cfg, hook_path, None)


def graphics_edits(node, request) -> ContainerEdits:
    """legacy graphics modifier: the selected GPUs' DRM nodes and /dev/dri/by-path links,
    plus the graphics config files (EGL/Vulkan/OpenCL ICDs, X configs)."""
    from nct.edits.planner import PlanOptions, gpu_edits, select_devices

    opts = PlanOptions(target="spec", check_requirements=False)
    edits = ContainerEdits()
    selection = select_devices(node, request.devices)
    # upstream matches DRM nodes to the requested GPUs by minor, UUID or bus id: a MIG
    # device (i:j, MIG-...) matches none, so a slice never gets its parent's render node
    gpus = [g for g in selection.gpus if g.index not in selection.mig_parents]
    for gpu in gpus:
        g = gpu_edits(node, gpu, opts)
        edits.device_nodes += [d for d in g.device_nodes if d.path.startswith("/dev/dri/")]
        edits.symlinks += [s for s in g.symlinks if s.link.startswith("/dev/dri/")]
    caps = set(request.capabilities)
    for f in node.files:
        if (f.kind == "config" and caps & {"graphics", "display"}) or (f.kind == "xorg" and "display" in caps):
            m = MountEdit(host_path=f.host_path, container_path=f.container_path, options=RO_MOUNT)
            if m not in edits.mounts:
                edits.mounts.append(m)
    return edits


def graphics_inject(spec: dict, node, request, cfg, hook_path: str) -> dict:
    edits = graphics_edits(node, request)
    if edits.is_empty():
        return spec
    return _apply(spec, edits, cfg, hook_path, None)


def inject_from_registry(spec: dict, names: list[str], spec_dirs, log) -> dict:
    """Inject qualified CDI devices from the spec dirs (no auto-refresh: read once)."""
    from nct.cdi.registry import Registry

    registry = Registry(tuple(spec_dirs))
    for err in registry.errors:
        log.warning(f"CDI registry: {err}")
    _, missing = registry.resolve(names)
    if missing:
        raise SpecError(
            f"unresolvable CDI devices {', '.join(missing)} (spec dirs: {', '.join(spec_dirs)})"
        )
    return registry.inject(spec, names)


__all__ = ["jit_edits", "jit_inject", "gated_edits", "gated_inject", "graphics_edits",
           "graphics_inject", "inject_from_registry"]
