"""`nvidia-ctk cdi generate`: a CDI spec for the node, from our own discovery.

The spec is a serialisation of the planner's edits: `common_edits` once (spec level) and
`gpu_edits` / `mig_edits` per device, rendered by nct.cdi.render. Device-class modes
(management, imex, gds, mofed, gdrcopy, nvswitch) list device nodes under the dev root.

The spec carries nothing of nct's own: no annotations, so its cdiVersion is the minimum
upstream would write for the same content (0.5.0 unless device nodes need additionalGids),
which old consumers such as podman 4.3 (reads <= 0.5.0) accept. `nct cdi check` tells a
stale spec from its content (nct.cdi.check)."""

from __future__ import annotations

import fnmatch
import os
import posixpath
import re
import shutil
import stat
import sys
from nct.record import Record, field

from nct.cdi import version as cdi_version
from nct.cdi.hooks import CDI_HOOK_NAMES, DEFAULT_HOOK_PATH, HookOptions, cdi_hook
from nct.cdi.names import class_error, vendor_error
from nct.driver.model import DeviceNode, Gpu, MigDevice, Node, Roots
from nct.edits.model import RO_MOUNT, ContainerEdits, DeviceNodeEdit, MountEdit
from nct.errors import NctError, RequestError, SpecError
from nct.limits import MAX_IMEX_CHANNEL, is_number

GPU_MODES = ("auto", "nvml")
CLASS_MODES = ("gds", "mofed", "gdrcopy", "nvswitch")
SUPPORTED_MODES = GPU_MODES + ("management", "imex") + CLASS_MODES
DEFAULT_DISABLED_HOOKS = frozenset({"chmod"})
KNOWN_FEATURE_FLAGS = frozenset({
    "enable-explicit-driver-libraries", "disable-nvsandboxutils", "disable-nvsandbox-utils",
    "enable-coherent-annotations", "disable-multiple-csv-devices", "no-additional-gids-for-device-nodes",
    "disable-ipc-discoverer",
})
# Device-class modes: node patterns under the dev root, and files mounted when nodes exist.
CLASS_DEVICES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "gds": (("/dev/nvidia-fs*",), ("/run/udev", "/etc/cufile.json")),
    "mofed": (("/dev/infiniband/uverbs*", "/dev/infiniband/rdma_cm"), ()),
    "gdrcopy": (("/dev/gdrdrv",), ()),
    "nvswitch": (("/dev/nvidia-nvswitchctl", "/dev/nvidia-nvswitch*"), ()),
}
MANAGEMENT_PATTERNS = ("/dev/nvidia*", "/dev/nvidia-caps/nvidia-cap*", "/dev/nvidia-caps-imex-channels/channel*")
MANAGEMENT_EXCLUDE = ("nvidia-fs*", "nvidia-nvswitch*", "nvidia-nvlink*")
IMEX_MAX_CHANNEL = MAX_IMEX_CHANNEL  # (nct.limits)


class GenerateOptions(Record):
    """The command line of `cdi generate`, as parsed (None = not given)."""

    output: str | None = None
    format: str | None = None  # json | yaml; None = from the output's extension, else yaml
    mode: str = "auto"
    driver_root: str | None = None  # None = NVIDIA_CTK_DRIVER_ROOT / config / "/"
    dev_root: str | None = None  # None = driver root
    device_name_strategies: tuple[str, ...] = ("index", "uuid")
    hook_path: str | None = None  # --nvidia-cdi-hook-path / --nvidia-ctk-path
    ldconfig_path: str | None = None
    vendor: str | None = None  # None = mode default (nvidia.com, management.nvidia.com)
    cls: str | None = None  # None = mode default (gpu, gds, ...)
    config_search_paths: tuple[str, ...] = ()
    library_search_paths: tuple[str, ...] = ()
    compat32: bool = False  # nct: add the i386 driver libraries (upstream's specs have none)
    csv_files: tuple[str, ...] = ()
    csv_ignore_patterns: tuple[str, ...] = ()
    csv_compat_container_root: str | None = None
    disable_hooks: tuple[str, ...] = ()
    enable_hooks: tuple[str, ...] = ()
    feature_flags: tuple[str, ...] = ()
    no_all_device: bool = False
    device_ids: tuple[str, ...] = ("all",)
    config_path: str | None = None  # nvidia-ctk --config
    quiet: bool = False
    debug: bool = False
    # nct additions
    max_cdi_version: str | None = None  # highest cdiVersion the consumer reads (drops additionalGids below 0.7.0)
    prog: str = "nvidia-ctk"


class Plan(Record, frozen=False):
    """What goes into the spec, before rendering."""

    vendor: str
    cls: str
    devices: list[tuple[str, ContainerEdits]] = field(default_factory=list)
    common: ContainerEdits | None = None
    annotations: dict[str, str] = field(default_factory=dict)
    all_device: bool = True
    app_profile: bool = False  # add the update-application-profile hook (GPU specs)
    warnings: list[str] = field(default_factory=list)


# --- entry points ----------------------------------------------------------------------

def generate(opts: GenerateOptions) -> str | None:
    """Generate the spec and write it to opts.output (atomically, 0644) or stdout.
    Returns the path written (None for stdout)."""
    from nct.cdi.spec import dump_spec, save_spec

    warnings: list[str] = []
    spec = generate_spec(opts, warnings=warnings)
    if not opts.quiet:
        for w in warnings:
            print(f"{opts.prog}: warning: {w}", file=sys.stderr)
    if opts.output and opts.output != "-":
        path = save_spec(spec, opts.output, fmt=opts.format, set_version=False)
        if not opts.quiet:
            print(f"{opts.prog}: generated CDI spec {path} with cdiVersion {spec['cdiVersion']} "
                  f"({len(spec['devices'])} devices)", file=sys.stderr)
        return path
    sys.stdout.write(dump_spec(spec, (opts.format or "yaml").lower()))
    sys.stdout.flush()
    return None


def generate_spec(opts: GenerateOptions, *, node: Node | None = None, cfg=None,
                  warnings: list[str] | None = None) -> dict:
    """The spec dict for `opts` (validated, minimum cdiVersion). `node` skips discovery
    (and so --library-search-path); `cfg` skips loading config.toml. Raises an NctError
    subclass on bad input; `warnings` collects what the CLI prints as warnings."""
    mode = opts.mode
    if mode not in SUPPORTED_MODES:
        raise NctError(f"discovery mode {mode!r} is not supported by nct "
                       f"(supported: {', '.join(SUPPORTED_MODES)})")
    cap = _max_version(opts.max_cdi_version)
    for flag, value, why in (("--vendor", opts.vendor, vendor_error), ("--class", opts.cls, class_error)):
        err = why(value) if value is not None else None
        if err:
            raise NctError(f"invalid {flag} {value!r}: {err}")
    disabled = disabled_hooks(opts.disable_hooks, opts.enable_hooks)
    flags = set(opts.feature_flags)
    unknown = sorted(flags - KNOWN_FEATURE_FLAGS)
    if cfg is None:
        from nct.config.load import load_config

        cfg = load_config(opts.config_path)
    roots = roots_for(opts.driver_root, opts.dev_root, cfg)
    hook_path = resolve_hook_path(opts.hook_path)
    no_gids = ("no-additional-gids-for-device-nodes" in flags or cfg.features.no_additional_gids_for_device_nodes
               or (cap is not None and cdi_version.key(cap) < (0, 7, 0)))

    if mode in CLASS_MODES:
        plan = class_plan(mode, roots)
    elif mode == "imex":
        plan = imex_plan(roots, opts.device_ids)
    else:
        if node is None:
            node = discover_for_generate(roots, opts.library_search_paths)
        if "disable-ipc-discoverer" in flags:
            node = node.replace(files=tuple(f for f in node.files if f.kind != "ipc"))
        if mode == "management":
            plan = management_plan(node, no_gids, opts.compat32)
        else:
            plan = gpu_plan(node, opts.device_ids, opts.device_name_strategies, disabled,
                            hook_path=hook_path, no_gids=no_gids, compat32=opts.compat32)
    if warnings is not None:
        warnings.extend(f"unknown feature flag {f!r} ignored" for f in unknown)
        warnings.extend(plan.warnings)
    if opts.vendor:
        plan.vendor = opts.vendor
    if opts.cls:
        plan.cls = opts.cls
    if opts.no_all_device or any(d.lower() == "none" for d in opts.device_ids):
        plan.all_device = False
    hook_opts = HookOptions(
        hook_path=hook_path, ldconfig_path=opts.ldconfig_path or None,
        driver_version=node.driver_version if node is not None else None, disabled=disabled,
    )
    spec = render_plan(plan, hook_opts)
    return finish_spec(spec, cap)


# --- options -------------------------------------------------------------------------------

def roots_for(driver_root: str | None, dev_root: str | None, cfg=None) -> Roots:
    """Driver root: flag/NVIDIA_CTK_DRIVER_ROOT, else config nvidia-container-cli.root, else
    /; dev root: flag/NVIDIA_CTK_DEV_ROOT, else the driver root; proc root: $NCT_PROC_ROOT
    or /proc (the host's procfs, also for a driver container)."""
    from nct.driver.rootpath import proc_root

    root = driver_root or (cfg.nvidia_container_cli.root if cfg is not None else "") or "/"
    return Roots(driver=root, dev=dev_root or root, proc=proc_root())


def resolve_hook_path(path: str | None) -> str:
    """--nvidia-cdi-hook-path, else nvidia-cdi-hook on PATH, else /usr/bin/nvidia-cdi-hook."""
    if path:
        return path
    return shutil.which("nvidia-cdi-hook") or DEFAULT_HOOK_PATH


def disabled_hooks(disable: tuple[str, ...], enable: tuple[str, ...]) -> frozenset[str]:
    """Hook names left out: chmod by default, plus --disable-hook ('all' = every one),
    minus --enable-hook."""
    for h in tuple(disable) + tuple(enable):
        if h != "all" and h not in CDI_HOOK_NAMES:
            raise NctError(f"unknown hook name {h!r} (known: {', '.join(CDI_HOOK_NAMES)}, all)")
    if "all" in enable:
        raise NctError("--enable-hook does not accept 'all'")
    out = set(DEFAULT_DISABLED_HOOKS)
    out |= set(CDI_HOOK_NAMES) if "all" in disable else set(disable)
    return frozenset(out - set(enable))


def _max_version(value: str | None) -> str | None:
    if not value:
        return None
    v = cdi_version.normalize(value)
    if v is None:
        raise NctError(f"invalid --max-cdi-version {value!r} (valid: {', '.join(cdi_version.VALID_VERSIONS)})")
    return v


# --- discovery ------------------------------------------------------------------------------

def discover_for_generate(roots: Roots, library_search_paths: tuple[str, ...] = ()) -> Node:
    """discover_node on `roots`; with --library-search-path, libraries found in those dirs
    (inside the driver root) are added to, or replace, what the ld cache gave."""
    from nct.driver.discover import discover_node

    node = discover_node(roots)
    if library_search_paths:
        node = with_search_paths(node, library_search_paths)
    return node


def with_search_paths(node: Node, dirs: tuple[str, ...]) -> Node:
    """`node` with the catalogue libraries found in `dirs` (paths inside the driver root,
    looked up as discovery looks up ld cache entries: same version and ELF checks)."""
    from nct.driver import libraries
    from nct.driver.ldcache import CacheEntry, LdCache
    from nct.driver.rootpath import host_path, resolve_in_root

    entries = []
    for d in dirs:
        if not d.startswith("/"):
            raise NctError(f"--library-search-path {d!r}: must be an absolute path")
        real = resolve_in_root(node.roots.driver, d)
        if real is None:
            continue
        try:
            names = sorted(os.listdir(host_path(node.roots.driver, real)))
        except OSError:
            continue
        # FLAG_ELF: no ABI claimed, the ELF check of each candidate decides.
        entries += [CacheEntry(key=n, path=posixpath.join(real, n), flags=0x0001)
                    for n in names if n.startswith("lib") and ".so" in n]
    cache = LdCache(path="<library-search-path>", format="new", entries=tuple(entries))
    found = (libraries.find_libraries(node.roots.driver, cache, node.driver_version)
             + libraries.find_libraries(node.roots.driver, cache, node.driver_version, compat32=True))
    if not found:
        return node
    keys = {(f.kind, f.name) for f in found}
    files = [f for f in node.files if (f.kind, f.name) not in keys]
    at = next((i for i, f in enumerate(files) if f.kind in ("lib", "lib32")), len(files))
    files[at:at] = found
    lib_dirs = list(dict.fromkeys([os.path.dirname(f.host_path) for f in found if f.kind == "lib"]
                                  + list(node.lib_dirs)))
    return node.replace(files=tuple(files), lib_dirs=tuple(lib_dirs))


# --- plans per mode --------------------------------------------------------------------------

def _plan_options(no_gids: bool, compat32: bool = False):
    from nct.edits.planner import PlanOptions

    return PlanOptions(target="spec", no_additional_gids=no_gids, check_requirements=False, compat32=compat32)


def gpu_plan(node: Node, device_ids: tuple[str, ...], strategies: tuple[str, ...], disabled: frozenset[str],
             *, hook_path: str = DEFAULT_HOOK_PATH, no_gids: bool = False, compat32: bool = False) -> Plan:
    """nvml mode: one entry per GPU (MIG disabled) and per MIG device, per name strategy."""
    from nct.edits.planner import common_edits, gpu_edits, mig_edits

    for s in strategies:
        if s not in ("index", "uuid", "type-index"):
            raise NctError(f"invalid device name strategy {s!r} (index, uuid, type-index)")
    popts = _plan_options(no_gids, compat32)
    plan = Plan(vendor="nvidia.com", cls="gpu", app_profile=True)
    common = common_edits(node, None, popts)
    plan.common = common
    gpus, migs, none = select_for_spec(node, device_ids)
    chmod = "chmod" not in disabled
    for gpu in gpus:
        edits = gpu_edits(node, gpu, popts)
        if chmod and any(d.path.startswith("/dev/dri/") for d in edits.device_nodes):
            edits.hooks.append(cdi_hook("chmod", ("--mode", "755", "--path", "/dev/dri"), HookOptions(hook_path)))
        for name in gpu_names(gpu, strategies):
            plan.devices.append((name, edits))
    for mig in migs:
        edits = mig_edits(node, mig, popts)
        names = mig_names(mig, strategies)
        if "uuid" in strategies and not mig.uuid:
            plan.warnings.append(f"MIG device {mig.index_name} has no UUID (NVML unavailable): "
                                 "no uuid-named entry for it")
        for name in names:
            plan.devices.append((name, edits))
    if none:
        plan.devices.append(("none", ContainerEdits(env=["NVCT_EMPTY_DEVICE="])))
    if not plan.devices:
        raise RequestError("no GPUs or MIG devices found on the node to generate CDI devices for")
    return plan


def select_for_spec(node: Node, device_ids: tuple[str, ...]) -> tuple[list[Gpu], list[MigDevice], bool]:
    """--device-id: all (full GPUs without MIG, and every MIG device), none, a GPU index or
    GPU- UUID, a MIG- UUID or i:j (PCI bus ids are not accepted, as upstream). Returns
    (gpus, migs, none); RequestError naming the first unknown id."""
    from nct.edits.select import visible_gpus

    visible = visible_gpus(node)
    gpus: list[Gpu] = []
    migs: list[MigDevice] = []
    none = False
    for raw in device_ids:
        dev = raw.strip()
        if not dev:
            continue
        low = dev.lower()
        if low == "all":
            gpus += [g for g in visible if not (g.mig_enabled or g.migs) and g not in gpus]
            migs += [m for g in visible for m in g.migs if m not in migs]
            continue
        if low == "none":
            none = True
            continue
        found: Gpu | MigDevice | None = None
        if is_number(dev):
            found = next((g for g in visible if g.index == int(dev)), None)
        elif low.startswith("gpu-"):
            found = next((g for g in visible if g.uuid.lower() == low), None)
        elif low.startswith("mig-"):
            found = next((m for g in visible for m in g.migs if m.uuid and m.uuid.lower() == low), None)
        elif dev.count(":") == 1 and all(is_number(p) for p in dev.split(":")):
            i, j = (int(p) for p in dev.split(":"))
            found = next((m for g in visible if g.index == i for m in g.migs if m.ordinal == j), None)
        if isinstance(found, Gpu):
            if found not in gpus:
                gpus.append(found)
        elif isinstance(found, MigDevice):
            if found not in migs:
                migs.append(found)
        else:
            raise RequestError(f"unknown device: {dev}")
    order = {g.index: i for i, g in enumerate(visible)}
    gpus.sort(key=lambda g: order.get(g.index, 0))
    migs.sort(key=lambda m: (order.get(m.parent_index, 0), m.ordinal))
    return gpus, migs, none


def gpu_names(gpu: Gpu, strategies: tuple[str, ...]) -> list[str]:
    names = {"index": str(gpu.index), "uuid": gpu.uuid, "type-index": f"gpu{gpu.index}"}
    return list(dict.fromkeys(n for s in strategies if (n := names.get(s))))


def mig_names(mig: MigDevice, strategies: tuple[str, ...]) -> list[str]:
    names = {"index": mig.index_name, "uuid": mig.uuid, "type-index": f"mig{mig.index_name}"}
    return list(dict.fromkeys(n for s in strategies if (n := names.get(s))))


def management_plan(node: Node, no_gids: bool = False, compat32: bool = False) -> Plan:
    """management.nvidia.com/gpu=all: every NVIDIA node under the dev root (GPUs, control,
    caps, IMEX channels), driver files as common edits; no device-node-modification hook."""
    from nct.edits.planner import common_edits

    nodes = [n for pattern in MANAGEMENT_PATTERNS for n in glob_nodes(node.roots.dev, pattern)
             if not any(fnmatch.fnmatch(posixpath.basename(n.path), x) for x in MANAGEMENT_EXCLUDE)]
    if not nodes:
        raise NctError(f"management mode: no NVIDIA device nodes found under {_show(node.roots.dev, '/dev')}")
    common = common_edits(node, None, _plan_options(no_gids, compat32))
    common.proc_driver_gpus = None
    return Plan(vendor="management.nvidia.com", cls="gpu", devices=[("all", nodes_edits(nodes, no_gids))],
                common=common, all_device=False)


def imex_plan(roots: Roots, device_ids: tuple[str, ...]) -> Plan:
    """nvidia.com/imex-channel: one device per requested channel (N or channelN, must
    exist); `all` = every channel node under the dev root."""
    from nct.driver import devices as devs

    existing = {}
    for n in devs.imex_channels(roots.dev):
        digits = posixpath.basename(n.path)[len("channel"):]
        existing[int(digits) if digits.isdigit() else n.minor] = n
    chosen: dict[int, DeviceNode] = {}
    for raw in device_ids:
        dev = raw.strip()
        if not dev or dev.lower() == "none":
            continue
        if dev.lower() == "all":
            chosen.update(existing)
            continue
        key = dev[len("channel"):] if dev.startswith("channel") else dev
        if not is_number(key) or int(key) > IMEX_MAX_CHANNEL:
            raise RequestError(f"invalid IMEX channel {dev!r} (N or channelN, N <= {IMEX_MAX_CHANNEL})")
        if int(key) not in existing:
            raise RequestError(f"unknown IMEX channel: {dev} (no {_show(roots.dev, devs.IMEX_DIR)}/channel{int(key)})")
        chosen[int(key)] = existing[int(key)]
    if not chosen:
        raise NctError(f"imex mode: no IMEX channel nodes found under {_show(roots.dev, devs.IMEX_DIR)}")
    plan = Plan(vendor="nvidia.com", cls="imex-channel")
    for ch in sorted(chosen):
        plan.devices.append((str(ch), nodes_edits([chosen[ch]])))
    return plan


def class_plan(mode: str, roots: Roots) -> Plan:
    """gds, mofed, gdrcopy, nvswitch: one `all` device with the class's nodes (gds also
    mounts /run/udev and /etc/cufile.json when present). No nodes is an error."""
    patterns, files = CLASS_DEVICES[mode]
    by_path: dict[str, DeviceNode] = {}
    for pattern in patterns:
        for n in glob_nodes(roots.dev, pattern):
            by_path.setdefault(n.path, n)
    nodes = list(by_path.values())
    if not nodes:
        raise NctError(f"{mode} mode: no devices found under {_show(roots.dev, '/dev')} "
                       f"(looked for {', '.join(patterns)})")
    from nct.driver.rootpath import host_path, resolve_in_root

    edits = nodes_edits(nodes, False)
    for f in files:
        real = resolve_in_root(roots.driver, f)
        if real is not None and os.path.exists(host_path(roots.driver, real)):
            edits.mounts.append(MountEdit(host_path=host_path(roots.driver, real), container_path=f, options=RO_MOUNT))
    return Plan(vendor="nvidia.com", cls=mode, devices=[("all", edits)], all_device=False)


# --- device nodes ---------------------------------------------------------------------------

def glob_nodes(dev_root: str, pattern: str) -> list[DeviceNode]:
    """Character/block nodes matching `pattern` (a container path whose last part may hold
    wildcards), looked up inside the dev root without following its symlinks outside."""
    from nct.driver.rootpath import host_path, resolve_in_root

    directory, pat = posixpath.split(pattern)
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
        out.append(DeviceNode(path=posixpath.join(directory, name), host_path=os.path.join(base, name),
                              major=os.major(st.st_rdev), minor=os.minor(st.st_rdev), mode=stat.S_IMODE(st.st_mode),
                              uid=st.st_uid, gid=st.st_gid, type="b" if stat.S_ISBLK(st.st_mode) else "c"))
    # natural order: nvidia2 before nvidia10
    out.sort(key=lambda n: _natural(n.path))
    return out


def _natural(s: str) -> list:
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", s)]


def nodes_edits(nodes: list[DeviceNode], no_gids: bool = False) -> ContainerEdits:
    """Device node entries as the planner writes them for a spec (full st_mode, rwm, gid,
    additional GID for nodes that are not world read-write)."""
    edits = ContainerEdits()
    for n in nodes:
        kind = stat.S_IFBLK if n.type == "b" else stat.S_IFCHR
        edits.device_nodes.append(DeviceNodeEdit(
            path=n.path, host_path=n.host_path, major=n.major, minor=n.minor, type=n.type,
            file_mode=kind | (n.mode & 0o7777), permissions="rwm", gid=n.gid or None))
        if not no_gids and n.gid and (n.mode & 0o006) != 0o006 and n.gid not in edits.additional_gids:
            edits.additional_gids.append(n.gid)
    return edits


def _show(root: str, path: str) -> str:
    from nct.driver.rootpath import host_path

    return host_path(root, path)


# --- rendering ----------------------------------------------------------------------------------

def render_plan(plan: Plan, hook_opts: HookOptions) -> dict:
    """The CDI spec dict of a plan; update-application-profile goes last in the spec-level
    hooks (after the ones derived from the edits)."""
    from nct.cdi.render import build_spec, hook_to_cdi

    spec = build_spec(plan.vendor, plan.cls, plan.devices, plan.common, plan.annotations or None,
                      hook_options=hook_opts, all_device=plan.all_device)
    if plan.app_profile and hook_opts.enabled("update-application-profile") \
            and any(n != "none" for n, _ in plan.devices):
        hook = hook_to_cdi(cdi_hook("update-application-profile", (), hook_opts))
        edits = spec.setdefault("containerEdits", {})
        edits.setdefault("hooks", []).append(hook)
    return spec


def finish_spec(spec: dict, cap: str | None) -> dict:
    """Minimum cdiVersion first; checked against --max-cdi-version and the strict loader
    (a superset of the official schema)."""
    from nct.cdi.spec import validate_spec, with_minimum_version

    spec = with_minimum_version(spec)
    if cap is not None and cdi_version.key(spec["cdiVersion"]) > cdi_version.key(cap):
        raise SpecError(f"the generated spec needs cdiVersion {spec['cdiVersion']}, "
                        f"above --max-cdi-version {cap}")
    validate_spec(spec, "<generated spec>")
    return spec


__all__ = [
    "GenerateOptions", "Plan", "generate", "generate_spec", "roots_for", "resolve_hook_path", "disabled_hooks",
    "discover_for_generate", "gpu_plan", "management_plan", "imex_plan", "class_plan", "select_for_spec",
    "glob_nodes", "nodes_edits", "render_plan",
]
