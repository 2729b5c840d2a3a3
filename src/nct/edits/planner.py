"""The planner: (Node, ContainerRequest) -> ContainerEdits, as a pure function.

The one place that decides what a container or a CDI device gets, for every front end
(the hook and `nvidia-container-cli` live, the runtime's jit-cdi and legacy modifiers,
`cdi generate`), as upstream's pkg/nvcdi serves both static and just-in-time CDI. Device
classes, management and IMEX-channel specs are in nct.edits.classes, selection in
nct.edits.select; front ends only orchestrate and render.

Two targets share the same building blocks:
- "live": what `nvidia-container-cli configure` puts in a running container (libraries
  bind-mounted into the image's library dir, binaries into /usr/bin, only what the
  requested capabilities select, the /proc/driver/nvidia view of the selected GPUs);
- "spec": what a CDI spec (static or just-in-time) holds: every driver file at its host
  path with the driver root stripped, whatever the capabilities, and DRM nodes per GPU.

CDI generation calls `common_edits` once and `gpu_edits` / `mig_edits` per device. The
planner never emits our own hooks: symlinks, ldconfig folders and the /proc view are data
that renderers turn into nvidia-cdi-hook calls or do directly.
"""

from __future__ import annotations

import posixpath
import stat

from nct.driver.catalogue import CAPABILITY_LIBRARY_SETS
from nct.driver.devices import IMEX_DIR
from nct.driver.model import DeviceNode, DriverFile, Gpu, MigDevice, Node
from nct.edits.model import IPC_MOUNT, RO_MOUNT, ContainerEdits, DeviceNodeEdit, MountEdit, SymlinkEdit
from nct.edits.select import Selection, normalise_bus_id, select_devices
from nct.errors import RequestError
from nct.record import Record
from nct.request.model import ContainerRequest
from nct.request.requirements import check_requirements
from nct.limits import IMEX_CHANNEL_COUNT, is_number, shown

__all__ = [
    "PlanOptions", "Selection", "select_devices", "plan", "common_edits", "gpu_edits", "mig_edits",
    "mig_admin_edits", "imex_edits", "imex_channels_by_id", "imex_channel_id", "graphics_edits", "nodes_edits",
    "container_lib_dirs", "PROC_MOUNT",
]

# /proc files bound into a live container (upstream: ro, nosuid, nodev, noexec).
PROC_MOUNT = ("ro", "nosuid", "nodev", "noexec", "rbind", "rprivate")
DEFAULT_COMPAT_DIR = "/usr/local/cuda/compat"
IMEX_MAJOR_NAME = "nvidia-caps-imex-channels"
# Debian multiarch triplets: machine -> (native, 32-bit).
_TRIPLETS = {
    "x86_64": ("x86_64-linux-gnu", "i386-linux-gnu"),
    "aarch64": ("aarch64-linux-gnu", "arm-linux-gnueabihf"),
    "ppc64le": ("powerpc64le-linux-gnu", None),
}


class PlanOptions(Record):
    """How to plan. `target` is "live" or "spec". lib_dir/lib32_dir are the container's
    library dirs for the live target (see container_lib_dirs). `capabilities` is filled in
    by plan() so that gpu_edits can decide on DRM nodes for a live container. `no_devbind`
    is carried to ApplyOptions (nodes are still planned: cgroup rules); `no_additional_gids`
    is features.no-additional-gids-for-device-nodes (spec). `compat32`: a spec gets the
    i386 driver libraries too (upstream's specs never have them; plan() sets it when the
    container's capabilities include compat32). `open_dri` (spec): a GPU with DRM nodes gets
    /dev/dri made 755 in the container (ContainerEdits.chmod_dirs; `cdi generate` sets it
    when its chmod hook is enabled)."""

    target: str = "live"
    lib_dir: str = "/usr/lib/x86_64-linux-gnu"
    lib32_dir: str = "/usr/lib/i386-linux-gnu"
    bin_dir: str = "/usr/bin"
    no_devbind: bool = False
    no_persistenced: bool = False
    no_fabricmanager: bool = False
    no_gsp_firmware: bool = False
    mig_config: str | None = None
    mig_monitor: str | None = None
    imex_channels: tuple[str, ...] = ()
    capabilities: frozenset[str] | None = None
    no_additional_gids: bool = False
    check_requirements: bool = True
    cuda_compat_dir: str = DEFAULT_COMPAT_DIR
    compat32: bool = False
    open_dri: bool = False

    def __post_init__(self) -> None:
        if self.target not in ("live", "spec"):
            raise ValueError(f"PlanOptions.target must be 'live' or 'spec', not {self.target!r}")

    @property
    def live(self) -> bool:
        return self.target == "live"


def container_lib_dirs(debian: bool, machine: str = "x86_64", *, lib32_exists: bool = True) -> tuple[str, str]:
    """The container's (library dir, 32-bit library dir), as libnvidia-container picks them:
    Debian-style images (/etc/debian_version) use multiarch dirs, others /usr/lib64 and
    /usr/lib32 (or /usr/lib when /usr/lib32 does not exist)."""
    native, lib32 = _TRIPLETS.get(machine, (f"{machine}-linux-gnu", None))
    if debian:
        return f"/usr/lib/{native}", f"/usr/lib/{lib32}" if lib32 else "/usr/lib32"
    return "/usr/lib64", "/usr/lib32" if lib32_exists else "/usr/lib"


# --- the whole plan ------------------------------------------------------------------------

def plan(node: Node, request: ContainerRequest, options: PlanOptions | None = None) -> ContainerEdits:
    """Select the requested devices, check NVIDIA_REQUIRE_* against them, and merge the
    common edits with each selected GPU's and MIG device's edits."""
    options = options or PlanOptions()
    caps = frozenset(request.capabilities)
    opts = options.replace(
        capabilities=caps,
        mig_config=options.mig_config if options.mig_config is not None else request.mig_config,
        mig_monitor=options.mig_monitor if options.mig_monitor is not None else request.mig_monitor,
        imex_channels=options.imex_channels or tuple(request.imex_channels),
        compat32=options.compat32 or "compat32" in caps,
    )
    selection = select_devices(node, request.devices)
    if opts.check_requirements and request.requirements:
        check_requirements(node, selection, request.requirements)
    edits = common_edits(node, caps, opts)
    for gpu in selection.gpus:
        # a MIG slice never gets its parent's DRM nodes (upstream), nor does `all` in a spec
        # give them for a MIG-enabled GPU (upstream's spec has no full entry for one)
        drm = gpu.index not in selection.mig_parents and (opts.live or not (selection.all and gpu.mig_enabled))
        edits = edits.merge(gpu_edits(node, gpu, opts, drm=drm))
    for mig in selection.migs:
        edits = edits.merge(mig_edits(node, mig, opts))
    if opts.live:
        for flag, value, key in (("mig-config", opts.mig_config, "config"),
                                 ("mig-monitor", opts.mig_monitor, "monitor")):
            if value:
                edits = edits.merge(mig_admin_edits(node, selection, key, value, opts, flag=flag))
    if opts.imex_channels:
        edits = edits.merge(imex_edits(node, opts.imex_channels, opts))
    if opts.live and _compute_libs(caps) and request.cuda_compat_mode in ("ldconfig", "mount"):
        edits.cuda_compat_dir = opts.cuda_compat_dir
    if request.gated_modes:  # the runtime's NVIDIA_GDS=enabled, ...
        from nct.edits.classes import gated_edits

        edits = edits.merge(gated_edits(node.roots, request.gated_modes, opts))
    return edits


# --- building blocks -----------------------------------------------------------------------

def common_edits(node: Node, capabilities, options: PlanOptions | None = None) -> ContainerEdits:
    """Edits every GPU container gets whatever its devices: control nodes, driver files,
    their symlinks and ldconfig folders, the /proc/driver/nvidia view (a hook in a spec),
    and for a spec NVIDIA_VISIBLE_DEVICES=void."""
    options = options or PlanOptions()
    caps = frozenset(capabilities or ())
    b = _Builder(node, options)
    if options.live:
        _live_driver(b, node, caps, options)
    else:
        _spec_driver(b, node, options)
    # Live: the empty /proc/driver/nvidia view; spec: rendered as the
    # disable-device-node-modification hook, as upstream's generated specs carry.
    b.edits.proc_driver_gpus = []
    return b.edits


def gpu_edits(node: Node, gpu: Gpu, options: PlanOptions | None = None, *, drm: bool = True) -> ContainerEdits:
    """One full GPU: its /dev/nvidiaN node; live: its /proc/driver/nvidia/gpus dir (and DRM
    nodes with graphics/display); spec: its DRM nodes and their by-path links. `drm=False`
    for a GPU selected only as a MIG device's parent."""
    options = options or PlanOptions()
    b = _Builder(node, options)
    b.device(gpu.device)
    caps = options.capabilities or frozenset()
    if drm and (not options.live or caps & {"graphics", "display"}):
        _drm(b, gpu)
        if options.open_dri and not options.live and any(d.path.startswith("/dev/dri/") for d in b.edits.device_nodes):
            b.edits.chmod_dirs.append("/dev/dri")
    if options.live:
        b.edits.proc_driver_gpus = [posixpath.basename(gpu.proc_dir.rstrip("/")) or gpu.bus_id]
    return b.edits


def mig_edits(node: Node, mig: MigDevice, options: PlanOptions | None = None) -> ContainerEdits:
    """One MIG device: its parent's /dev/nvidiaN and the GI/CI access nodes; live: the
    matching /proc capability access files; spec: DRM nodes for +gfx profiles."""
    options = options or PlanOptions()
    b = _Builder(node, options)
    parent = next((g for g in node.gpus if g.index == mig.parent_index), None)
    if parent is None:
        raise RequestError(f"unknown device: {mig.index_name} (no GPU {mig.parent_index})")
    b.device(parent.device)
    b.device(mig.gi_access)
    b.device(mig.ci_access)
    if options.live:
        for path in (mig.gi_access_proc, mig.ci_access_proc):
            b.mount(path, _proc_container_path(node, path), PROC_MOUNT)
    elif mig.profile and "gfx" in mig.profile:
        _drm(b, parent)
    return b.edits


def spec_device_edits(node: Node, device_ids, options: PlanOptions | None = None
                      ) -> tuple[ContainerEdits, list[tuple[Gpu | MigDevice, ContainerEdits]], ContainerEdits | None]:
    """A GPU CDI spec's plan (`cdi generate`): the common edits (with the application
    profile update when there are devices), then each device --device-id selects (the
    selector's spec flavour: full GPUs without MIG, then MIG devices) with its own edits,
    and the edits of the `none` device when asked (None otherwise). Names are the renderer's."""
    common = common_edits(node, None, options)
    selection = select_devices(node, device_ids, spec=True)
    devices: list[tuple[Gpu | MigDevice, ContainerEdits]] = [(g, gpu_edits(node, g, options)) for g in selection.gpus]
    devices += [(m, mig_edits(node, m, options)) for m in selection.migs]
    common.app_profile = bool(devices)
    return common, devices, none_device_edits() if selection.none else None


def none_device_edits() -> ContainerEdits:
    """The `none` device: no GPU, only a placeholder variable (a CDI device needs at least
    one edit)."""
    return ContainerEdits(env=["NVCT_EMPTY_DEVICE="])


def mig_admin_edits(node: Node, selection: Selection, which: str, value: str,
                    options: PlanOptions | None = None, *, flag: str | None = None) -> ContainerEdits:
    """NVIDIA_MIG_CONFIG_DEVICES / _MONITOR_DEVICES (`which` = "config" | "monitor"): only
    `all` is supported, and not with specific MIG devices selected. Gives the capabilities
    tree of /proc, the mig/<which> access node, and the access nodes of the MIG devices of
    the selected MIG-capable GPUs."""
    options = options or PlanOptions()
    flag = flag or f"mig-{which}"
    items = [v.strip() for v in value.split(",") if v.strip()]
    for item in items:
        if item.lower() != "all":
            raise RequestError(f"{flag} error: {item}: only 'all' devices are currently supported")
    b = _Builder(node, options)
    if not items:
        return b.edits
    if not selection.all and selection.migs:
        raise RequestError(f"{flag} error: cannot enable {flag} with specific MIG devices selected")
    paths = node.mig_config if which == "config" else node.mig_monitor
    cap_nodes = [d for d in node.caps_devices if d.host_path in paths or d.path in paths]
    if not paths or not cap_nodes:
        raise RequestError(f"{flag} error: the node has no MIG {which} capability")
    caps_dir = node.roots.proc.rstrip("/") + "/driver/nvidia/capabilities"
    b.mount(caps_dir, "/proc/driver/nvidia/capabilities", PROC_MOUNT)
    for dn in cap_nodes:
        b.device(dn)
    gpus = list(selection.gpus)
    for mig in selection.migs:
        parent = next((g for g in node.gpus if g.index == mig.parent_index), None)
        if parent is not None and parent not in gpus:
            gpus.append(parent)
    for gpu in gpus:
        if not (gpu.mig_enabled or gpu.migs):
            continue
        for mig in gpu.migs:
            b.device(mig.gi_access)
            b.device(mig.ci_access)
    return b.edits


def imex_edits(node: Node, channels, options: PlanOptions | None = None) -> ContainerEdits:
    """IMEX channel nodes (/dev/nvidia-caps-imex-channels/channelN); `all` = every one the
    node has. A channel the node lacks is an error naming it, except for a live container
    when the driver's IMEX major is known: then the node is planned from the major (as
    libnvidia-container creates missing channel nodes with --load-kmods; creating the host
    node is the caller's business)."""
    options = options or PlanOptions()
    b = _Builder(node, options)
    by_id = imex_channels_by_id(node.imex_channels)
    major = node.majors.get(IMEX_MAJOR_NAME)
    for ch in channels:
        if str(ch).lower() == "all":
            for each in node.imex_channels:
                b.device(each)
            continue
        n = imex_channel_id(str(ch))
        dn = by_id.get(n) if n is not None else None
        # a live container may get a channel that --load-kmods makes (ids below the driver's count)
        if dn is None and n is not None and options.live and major is not None and n < IMEX_CHANNEL_COUNT:
            path = f"{IMEX_DIR}/channel{n}"
            dn = DeviceNode(path=path, host_path=node.roots.host(path, node.roots.dev), major=major, minor=n)
        if dn is None:
            raise RequestError(f"unknown IMEX channel: {shown(str(ch))}")
        b.device(dn)
    return b.edits


def graphics_edits(node: Node, request: ContainerRequest, options: PlanOptions | None = None) -> ContainerEdits:
    """The runtime's legacy graphics modifier: the selected GPUs' DRM nodes and
    /dev/dri/by-path links, plus the graphics config files (EGL/Vulkan/OpenCL ICDs) with
    graphics or display, and the Xorg files with display."""
    options = options or PlanOptions(target="spec", check_requirements=False)
    edits = ContainerEdits()
    selection = select_devices(node, request.devices)
    # upstream matches DRM nodes to the requested GPUs by minor, UUID or bus id: a MIG
    # device (i:j, MIG-...) matches none, so a slice never gets its parent's render node
    for gpu in selection.gpus:
        if gpu.index in selection.mig_parents:
            continue
        g = gpu_edits(node, gpu, options)
        edits.device_nodes += [d for d in g.device_nodes if d.path.startswith("/dev/dri/")]
        edits.symlinks += [s for s in g.symlinks if s.link.startswith("/dev/dri/")]
    caps = set(request.capabilities)
    for f in node.files:
        if (f.kind == "config" and caps & {"graphics", "display"}) or (f.kind == "xorg" and "display" in caps):
            m = MountEdit(host_path=f.host_path, container_path=f.container_path, options=RO_MOUNT)
            if m not in edits.mounts:
                edits.mounts.append(m)
    return edits


def nodes_edits(nodes, options: PlanOptions | None = None) -> ContainerEdits:
    """Device nodes as a container or spec gets them (one entry per container path; for a
    spec: full st_mode, rwm, the node's gid and an additional GID when not world rw)."""
    b = _Builder(None, options or PlanOptions(target="spec"))
    for dn in nodes:
        b.device(dn)
    return b.edits


# --- internals -------------------------------------------------------------------------------

class _Builder:
    """Accumulates edits without duplicates (by container path for mounts and nodes)."""

    def __init__(self, node: Node | None, options: PlanOptions) -> None:
        self.node = node
        self.options = options
        self.edits = ContainerEdits()
        self._targets: set[str] = set()
        self._links: set[str] = set()

    def device(self, dn: DeviceNode) -> None:
        if dn.path in self._targets:
            return
        self._targets.add(dn.path)
        spec = not self.options.live
        kind = stat.S_IFBLK if dn.type == "b" else stat.S_IFCHR
        self.edits.device_nodes.append(DeviceNodeEdit(
            path=dn.path, host_path=dn.host_path, major=dn.major, minor=dn.minor, type=dn.type,
            file_mode=kind | (dn.mode & 0o7777), permissions="rwm" if spec else "rw",
            uid=None, gid=(dn.gid or None) if spec else None,
        ))
        if spec and not self.options.no_additional_gids and dn.gid and (dn.mode & 0o006) != 0o006:
            if dn.gid not in self.edits.additional_gids:
                self.edits.additional_gids.append(dn.gid)

    def mount(self, host: str, container: str, options: tuple[str, ...] = RO_MOUNT) -> bool:
        if container in self._targets:
            return False
        self._targets.add(container)
        self.edits.mounts.append(MountEdit(host_path=host, container_path=container, options=options))
        return True

    def symlink(self, target: str, link: str) -> None:
        if link in self._links or link in self._targets:
            return
        self._links.add(link)
        self.edits.symlinks.append(SymlinkEdit(target=target, link=link))

    def folder(self, path: str) -> None:
        if path not in self.edits.ldconfig_folders:
            self.edits.ldconfig_folders.append(path)


def _compute_libs(caps: frozenset[str]) -> bool:
    """libnvidia-container's "compute libs" flag: set by compute, and by video (which
    brings the compute libraries); it gates UVM nodes, the MPS pipe and CUDA compat."""
    return bool(caps & {"compute", "video"})


def _control_nodes(node: Node, caps: frozenset[str] | None) -> list[DeviceNode]:
    """nvidiactl always; uvm(+tools) with compute libs; modeset with display (None = all)."""
    out = []
    for dn in node.control_devices:
        name = posixpath.basename(dn.path)
        if caps is not None:
            if name.startswith("nvidia-uvm") and not _compute_libs(caps):
                continue
            if name == "nvidia-modeset" and "display" not in caps:
                continue
        out.append(dn)
    return out


def _lib_name(f: DriverFile) -> str:
    return posixpath.basename(f.host_path) or posixpath.basename(f.container_path)


def _live_driver(b: _Builder, node: Node, caps: frozenset[str], o: PlanOptions) -> None:
    for dn in _control_nodes(node, caps):
        b.device(dn)
    groups = {g for c in caps for g in CAPABILITY_LIBRARY_SETS.get(c, ())}
    for kind, libdir in (("lib", o.lib_dir), ("lib32", o.lib32_dir)):
        if kind == "lib32" and "compat32" not in caps:
            continue
        libs = [f for f in node.files if f.kind == kind and f.capability in groups]
        _libraries(b, libs, lambda f, d=libdir: d, graphics=bool(caps & {"graphics", "display"}))
        if libs or kind == "lib":
            b.folder(libdir)
    for f in node.files:
        if f.kind == "bin" and f.capability in caps:
            b.mount(f.host_path, posixpath.join(o.bin_dir, f.name or posixpath.basename(f.container_path)))
    _ipcs(b, node, o, caps)
    _firmware(b, node, o)
    for f in node.files:
        if f.kind == "config" and caps & {"graphics", "display"}:
            b.mount(f.host_path, f.container_path)
        elif f.kind == "xorg" and "display" in caps:
            _xorg(b, f)


def _spec_driver(b: _Builder, node: Node, o: PlanOptions) -> None:
    b.edits.env.append("NVIDIA_VISIBLE_DEVICES=void")
    libcuda = next((f for f in node.files if f.kind == "lib" and
                    (f.name == "libcuda.so" or _lib_name(f).startswith("libcuda.so."))), None)
    if libcuda is not None:
        b.edits.env.append(f"NVIDIA_CTK_LIBCUDA_DIR={posixpath.dirname(libcuda.container_path)}")
    order = ("nvidia-modeset", "nvidia-uvm-tools", "nvidia-uvm", "nvidiactl")
    for dn in sorted(_control_nodes(node, None),
                     key=lambda d: order.index(posixpath.basename(d.path))
                     if posixpath.basename(d.path) in order else len(order)):
        b.device(dn)
    for kind in ("lib", "lib32") if o.compat32 else ("lib",):
        libs = [f for f in node.files if f.kind == kind]
        _libraries(b, libs, lambda f: posixpath.dirname(f.container_path), graphics=True)
        for f in libs:
            b.folder(posixpath.dirname(f.container_path))
    for f in node.files:
        if f.kind in ("bin", "config"):
            b.mount(f.host_path, f.container_path)
        elif f.kind == "xorg":
            _xorg(b, f)
    _ipcs(b, node, o, None)
    _firmware(b, node, o)


def _libraries(b: _Builder, libs: list[DriverFile], dir_of, *, graphics: bool) -> None:
    """Mount each library into its dir and add its SONAME link plus upstream's extra links."""
    mounted: dict[str, tuple[str, str]] = {}  # catalogue name -> (dir, file name)
    for f in libs:
        d = dir_of(f)
        name = _lib_name(f)
        if not b.mount(f.host_path, posixpath.join(d, name)):
            continue
        if f.soname and f.soname != name:
            b.symlink(name, posixpath.join(d, f.soname))
        key = f.name or name.split(".so", 1)[0] + ".so"
        mounted.setdefault(key, (d, name))
    if "libcuda.so" in mounted:
        d, _ = mounted["libcuda.so"]
        b.symlink("libcuda.so.1", posixpath.join(d, "libcuda.so"))
    if "libnvidia-opticalflow.so" in mounted:
        d, _ = mounted["libnvidia-opticalflow.so"]
        b.symlink("libnvidia-opticalflow.so.1", posixpath.join(d, "libnvidia-opticalflow.so"))
    if "libGLX_nvidia.so" in mounted:
        d, name = mounted["libGLX_nvidia.so"]
        b.symlink(name, posixpath.join(d, "libGLX_indirect.so.0"))
    if graphics and "libnvidia-allocator.so" in mounted:
        d, _ = mounted["libnvidia-allocator.so"]
        b.symlink("../libnvidia-allocator.so.1", posixpath.join(d, "gbm", "nvidia-drm_gbm.so"))


def _xorg(b: _Builder, f: DriverFile) -> None:
    """An Xorg module at its own path, plus its unversioned name (libglxserver_nvidia.so)."""
    if b.mount(f.host_path, f.container_path):
        base = posixpath.basename(f.container_path)
        if f.name and f.name != base and f.name.endswith(".so") and base.startswith(f.name + "."):
            b.symlink(base, posixpath.join(posixpath.dirname(f.container_path), f.name))


def _ipcs(b: _Builder, node: Node, o: PlanOptions, caps: frozenset[str] | None) -> None:
    """persistenced/fabricmanager sockets with utility, the MPS pipe dir with compute libs."""
    for f in node.files:
        if f.kind != "ipc":
            continue
        path = f.container_path
        if "persistenced" in path:
            need, off = "utility", o.no_persistenced
        elif "fabricmanager" in path:
            need, off = "utility", o.no_fabricmanager
        else:
            need, off = "compute", False
        if need == "compute" and caps is not None:
            need_ok = _compute_libs(caps)
        else:
            need_ok = caps is None or need in caps
        if off or not need_ok:
            continue
        b.mount(f.host_path, path, IPC_MOUNT)


def _firmware(b: _Builder, node: Node, o: PlanOptions) -> None:
    if o.no_gsp_firmware:
        return
    for f in node.files:
        if f.kind == "firmware":
            b.mount(f.host_path, f.container_path)


def _drm(b: _Builder, gpu: Gpu) -> None:
    """The GPU's /dev/dri card and render nodes, with /dev/dri/by-path/pci-<bus>-* links."""
    bus = normalise_bus_id(gpu.bus_id)
    short = bus[4:] if bus else gpu.bus_id  # by-path names use a 4-digit PCI domain
    for dn in gpu.drm:
        b.device(dn)
        name = posixpath.basename(dn.path)
        kind = "card" if name.startswith("card") else "render" if name.startswith("renderD") else None
        if kind:
            b.symlink(f"../{name}", f"/dev/dri/by-path/pci-{short}-{kind}")


def _proc_container_path(node: Node, host_path: str) -> str:
    """A host path under the node's proc root, as seen at /proc in the container."""
    root = node.roots.proc.rstrip("/") or "/proc"
    if host_path == root or host_path.startswith(root + "/"):
        return "/proc" + host_path[len(root):]
    return host_path


def imex_channels_by_id(nodes) -> dict[int, DeviceNode]:
    """IMEX channel nodes by channel number (from the name channelN, else the minor)."""
    out = {}
    for dn in nodes:
        name = posixpath.basename(dn.path)
        digits = name[len("channel"):] if name.startswith("channel") else ""
        out[int(digits) if digits.isdigit() else dn.minor] = dn
    return out


def imex_channel_id(text: str) -> int | None:
    """A requested channel, N or channelN, as a number; None when it is neither."""
    key = text[len("channel"):] if text.startswith("channel") else text
    return int(key) if is_number(key) else None
