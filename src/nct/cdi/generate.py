"""`nvidia-ctk cdi generate`: a CDI spec for the node, from our own discovery.

This module only orchestrates and renders: options -> roots, discovery (nct.driver),
selection and edits (nct.edits: `spec_device_edits` for GPU specs, with the spec-only
decisions (/dev/dri chmod, application profile, the `none` device); nct.edits.classes for
management, imex, gds, mofed, gdrcopy and nvswitch), device names, hooks and the spec
(nct.cdi.render). --max-cdi-version below 0.7.0 (no additionalGids in the format) is a
rendering limit handed to the planner as its no-additional-gids option.

The spec carries nothing of nct's own: no annotations, so its cdiVersion is the minimum
upstream would write for the same content (0.5.0 unless device nodes need additionalGids),
which old consumers such as podman 4.3 (reads <= 0.5.0) accept. `nct cdi check` tells a
stale spec from its content (nct.cdi.check)."""

from __future__ import annotations

import shutil
import sys
from nct.record import Record, field

from nct.cdi import version as cdi_version
from nct.cdi.hooks import CDI_HOOK_NAMES, DEFAULT_HOOK_PATH, HookOptions
from nct.cdi.names import class_error, vendor_error
from nct.driver.model import Gpu, MigDevice, Node, Roots
from nct.edits.classes import DEVICE_CLASSES, show_path
from nct.edits.model import ContainerEdits
from nct.errors import NctError, RequestError, SpecError

GPU_MODES = ("auto", "nvml")
CLASS_MODES = tuple(DEVICE_CLASSES)
SUPPORTED_MODES = GPU_MODES + ("management", "imex") + CLASS_MODES
DEFAULT_DISABLED_HOOKS = frozenset({"chmod"})
KNOWN_FEATURE_FLAGS = frozenset({
    "enable-explicit-driver-libraries", "disable-nvsandboxutils", "disable-nvsandbox-utils",
    "enable-coherent-annotations", "disable-multiple-csv-devices", "no-additional-gids-for-device-nodes",
    "disable-ipc-discoverer",
})


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
    # Below 0.7.0 the format has no additionalGids: a rendering limit of CDI, handed to the
    # planner as the same option as the feature flag.
    no_gids = ("no-additional-gids-for-device-nodes" in flags or cfg.features.no_additional_gids_for_device_nodes
               or not cdi_version.reads_additional_gids(cap))

    if mode in CLASS_MODES:
        plan = class_plan(mode, roots, no_gids)
    elif mode == "imex":
        plan = imex_plan(roots, opts.device_ids, no_gids)
    else:
        if node is None:
            node = discover_for_generate(roots, opts.library_search_paths)
        if "disable-ipc-discoverer" in flags:
            node = node.replace(files=tuple(f for f in node.files if f.kind != "ipc"))
        if mode == "management":
            plan = management_plan(node, no_gids, opts.compat32)
        else:
            plan = gpu_plan(node, opts.device_ids, opts.device_name_strategies, disabled,
                            no_gids=no_gids, compat32=opts.compat32)
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
    from nct.driver.discover import discover_node, with_search_paths

    node = discover_node(roots)
    if library_search_paths:
        node = with_search_paths(node, library_search_paths)
    return node


# --- plans per mode --------------------------------------------------------------------------

def _plan_options(no_gids: bool, compat32: bool = False, open_dri: bool = False):
    from nct.edits.planner import PlanOptions

    return PlanOptions(target="spec", no_additional_gids=no_gids, check_requirements=False, compat32=compat32,
                       open_dri=open_dri)


def gpu_plan(node: Node, device_ids: tuple[str, ...], strategies: tuple[str, ...], disabled: frozenset[str],
             *, no_gids: bool = False, compat32: bool = False) -> Plan:
    """nvml mode: one entry per GPU (MIG disabled) and per MIG device, per name strategy
    (the edits, `none` included, are nct.edits.planner.spec_device_edits')."""
    from nct.edits.planner import spec_device_edits

    for s in strategies:
        if s not in ("index", "uuid", "type-index"):
            raise NctError(f"invalid device name strategy {s!r} (index, uuid, type-index)")
    plan = Plan(vendor="nvidia.com", cls="gpu")
    options = _plan_options(no_gids, compat32, open_dri="chmod" not in disabled)
    plan.common, devices, none = spec_device_edits(node, device_ids, options)
    for dev, edits in devices:
        if isinstance(dev, Gpu):
            names = gpu_names(dev, strategies)
        else:
            names = mig_names(dev, strategies)
            if "uuid" in strategies and not dev.uuid:
                plan.warnings.append(f"MIG device {dev.index_name} has no UUID (NVML unavailable): "
                                     "no uuid-named entry for it")
        for name in names:
            plan.devices.append((name, edits))
    if plan.common.app_profile and all(name == "none" for name, _ in plan.devices):
        plan.common.app_profile = False  # every device went unnamed (no UUID for a uuid-only strategy)
    if none is not None:
        plan.devices.append(("none", none))
    if not plan.devices:
        raise RequestError("no GPUs or MIG devices found on the node to generate CDI devices for")
    return plan


def gpu_names(gpu: Gpu, strategies: tuple[str, ...]) -> list[str]:
    names = {"index": str(gpu.index), "uuid": gpu.uuid, "type-index": f"gpu{gpu.index}"}
    return list(dict.fromkeys(n for s in strategies if (n := names.get(s))))


def mig_names(mig: MigDevice, strategies: tuple[str, ...]) -> list[str]:
    names = {"index": mig.index_name, "uuid": mig.uuid, "type-index": f"mig{mig.index_name}"}
    return list(dict.fromkeys(n for s in strategies if (n := names.get(s))))


def management_plan(node: Node, no_gids: bool = False, compat32: bool = False) -> Plan:
    """management.nvidia.com/gpu=all (nct.edits.classes.management_edits)."""
    from nct.edits.classes import management_edits

    device, common = management_edits(node, _plan_options(no_gids, compat32))
    return Plan(vendor="management.nvidia.com", cls="gpu", devices=[("all", device)], common=common,
                all_device=False)


def imex_plan(roots: Roots, device_ids: tuple[str, ...], no_gids: bool = False) -> Plan:
    """nvidia.com/imex-channel: one device per requested channel (nct.edits.classes)."""
    from nct.edits.classes import imex_channel_edits

    return Plan(vendor="nvidia.com", cls="imex-channel",
                devices=imex_channel_edits(roots.dev, device_ids, _plan_options(no_gids)))


def class_plan(mode: str, roots: Roots, no_gids: bool = False) -> Plan:
    """gds, mofed, gdrcopy, nvswitch: one `all` device with the class's nodes (and files,
    nct.edits.classes). No nodes is an error."""
    from nct.edits.classes import class_edits

    edits = class_edits(roots, mode, _plan_options(no_gids))
    if not edits.device_nodes:
        raise NctError(f"{mode} mode: no devices found under {show_path(roots.dev, '/dev')} "
                       f"(looked for {', '.join(DEVICE_CLASSES[mode].nodes)})")
    return Plan(vendor="nvidia.com", cls=mode, devices=[("all", edits)], all_device=False)


# --- rendering ----------------------------------------------------------------------------------

def render_plan(plan: Plan, hook_opts: HookOptions) -> dict:
    """The CDI spec dict of a plan (nct.cdi.render; the edits' dir modes and application
    profile become nvidia-cdi-hook hooks there, nct.cdi.hooks)."""
    from nct.cdi.render import build_spec

    return build_spec(plan.vendor, plan.cls, plan.devices, plan.common, plan.annotations or None,
                      hook_options=hook_opts, all_device=plan.all_device)


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
    "discover_for_generate", "gpu_plan", "management_plan", "imex_plan", "class_plan",
    "render_plan",
]
