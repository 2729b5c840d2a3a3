"""Read a container's GPU request from its OCI spec: upstream's env-variable contract.

`request_from_spec(spec, cfg)` is the single place that interprets NVIDIA_VISIBLE_DEVICES and
friends, for the prestart hook (runtime=False) and the runtime shim (runtime=True). It is
pure: nothing is read but the spec dict and the Config. Warnings (ignored requests) go to the
"nct.request" logger; bad values raise RequestError with a one-line message.
"""

from __future__ import annotations

import posixpath

from nct.log import get_logger
from nct.driver.model import ALL_CAPABILITIES, DEFAULT_CAPABILITIES
from nct.errors import RequestError
from nct.request.model import ContainerRequest, is_qualified_cdi_name
from nct.limits import MAX_ENV_VALUE, MAX_IMEX_CHANNEL, MAX_LIST_ENTRIES, is_number, shown

TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover
    from nct.config.model import Config



log = get_logger("nct.request")

VISIBLE_DEVICES = "NVIDIA_VISIBLE_DEVICES"
DRIVER_CAPABILITIES = "NVIDIA_DRIVER_CAPABILITIES"
REQUIRE_PREFIX = "NVIDIA_REQUIRE_"
REQUIRE_JETPACK = "NVIDIA_REQUIRE_JETPACK"
REQUIRE_CUDA = "NVIDIA_REQUIRE_CUDA"
DISABLE_REQUIRE = "NVIDIA_DISABLE_REQUIRE"
CUDA_VERSION = "CUDA_VERSION"
MIG_CONFIG = "NVIDIA_MIG_CONFIG_DEVICES"
MIG_MONITOR = "NVIDIA_MIG_MONITOR_DEVICES"
IMEX_CHANNELS = "NVIDIA_IMEX_CHANNELS"
MOUNTS_ROOT = "/var/run/nvidia-container-devices"
GATED_MODES = (("NVIDIA_GDS", "gds"), ("NVIDIA_MOFED", "mofed"),
               ("NVIDIA_GDRCOPY", "gdrcopy"), ("NVIDIA_NVSWITCH", "nvswitch"))
CUDA_COMPAT_MODES = ("ldconfig", "mount", "hook", "disabled")

# OCI versions rc1 <= v < rc5 (compared as golang.org/x/mod/semver does, so 1.0.0-rc2-dev is
# one of them) have process.capabilities as a flat list rather than sets.
_FLAT_CAPS_FROM, _FLAT_CAPS_BEFORE = "1.0.0-rc1", "1.0.0-rc5"
# Go strconv.ParseBool spellings.
_GO_TRUE = frozenset(("1", "t", "T", "TRUE", "true", "True"))
# golang.org/x/mod/semver, "v" prefix already stripped: major[.minor[.patch[-pre][+build]]].
_SEMVER = (
    r"^(0|[1-9][0-9]*)(?:\.(0|[1-9][0-9]*)(?:\.(0|[1-9][0-9]*)"
    r"(?:-[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*)?(?:\+[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*)?)?)?$"
)


def go_parse_bool(value: str) -> bool:
    """strconv.ParseBool, with its error case read as false (as upstream does)."""
    return value in _GO_TRUE


def request_from_spec(spec: dict, cfg: Config, *, runtime: bool = False,
                      annotations: bool | None = None) -> ContainerRequest | None:
    """The container's GPU request, or None when it asks for no GPU (void/unset).

    runtime=True reads the runtime shim's extra sources (CDI annotations, feature-gated
    modes) and is lenient where upstream's runtime does not check (capabilities, MIG vars);
    `annotations` overrides whether annotations are read (the shim re-parses without them
    once the mode is not `cdi`).
    """
    if not isinstance(spec, dict):
        raise RequestError("invalid OCI spec: expected a JSON object")
    use_annotations = runtime if annotations is None else annotations
    env = spec_env(spec)
    check_env_sizes(env, [n.strip() for n in (cfg.swarm_resource or "").split(",")])
    privileged = is_privileged(spec)
    legacy = is_legacy_image(env)

    source = "env"
    devices: tuple[str, ...] | None = None
    if use_annotations:
        found = devices_from_annotations(spec, cfg.nvidia_container_runtime.modes.cdi.annotation_prefixes)
        if found:
            devices, source = tuple(found), "annotations"
    mount_requests: list[str] | None = None
    if devices is None and cfg.accept_nvidia_visible_devices_as_volume_mounts:
        mount_requests = requests_from_mounts(spec)
        check_list_length(len(mount_requests), f"device mounts under {MOUNTS_ROOT}")
        found = devices_from_mount_requests(mount_requests)
        if found:
            devices, source = _normalise_list(found), "mounts"
            if devices is None:  # void in a mount list: nothing requested
                return None
    if devices is None:
        names = _visible_env_names(env, cfg.swarm_resource)
        devices = devices_from_env(env, names, legacy)
        if devices is not None and not (privileged or cfg.accept_nvidia_visible_devices_envvar_when_unprivileged):
            log.warning("ignoring devices requested by environment variable(s) in unprivileged container: %s",
                        ", ".join(names))
            devices = None
    if devices is None:
        return None

    caps = capabilities_from_env(env, cfg.supported_driver_capabilities, legacy, strict=not runtime)
    mig_config = _mig_request(env, MIG_CONFIG, privileged, runtime)
    mig_monitor = _mig_request(env, MIG_MONITOR, privileged, runtime)
    imex = imex_channels(env, cfg, privileged, spec, mount_requests)
    requirements = requirements_from_env(env, cfg.disable_require, strict=not runtime)
    gated = tuple(mode for var, mode in GATED_MODES if env.get(var) == "enabled") if runtime else ()
    return ContainerRequest(
        devices=devices, capabilities=caps, requirements=requirements, mig_config=mig_config,
        mig_monitor=mig_monitor, imex_channels=imex, privileged=privileged,
        cuda_compat_mode=cuda_compat_mode(cfg, runtime=runtime), gated_modes=gated,
        source=source, env=env,
    )


# --- spec pieces ---------------------------------------------------------------------------

def spec_env(spec: dict) -> dict[str, str]:
    """process.env as a dict; a duplicate key keeps its last value, as upstream's map does."""
    process = spec.get("process")
    if process is None:
        return {}
    if not isinstance(process, dict):
        raise RequestError("invalid OCI spec: process must be an object")
    raw = process.get("env")
    if raw is None:
        return {}
    if not isinstance(raw, list):
        raise RequestError("invalid OCI spec: process.env must be a list of strings")
    env: dict[str, str] = {}
    for entry in raw:
        if not isinstance(entry, str):
            raise RequestError(f"invalid OCI spec: process.env entry {entry!r} is not a string")
        key, sep, value = entry.partition("=")
        if not sep or not key:
            raise RequestError(f"invalid OCI spec: process.env entry {entry!r} is not KEY=VALUE")
        env[key] = value
    return env


def _semver_ident(s: str, numeric_ok: bool) -> bool:
    return bool(s) and all(c.isascii() and (c.isalnum() or c == "-") for c in s) and \
        not (numeric_ok and s.isdigit() and len(s) > 1 and s[0] == "0")


def _num_key(n: str) -> tuple[int, str]:
    """Sort key of a decimal without leading zeros, as Go's semver compares them (by length,
    then digits): any length, and no int() (which refuses more than 4300 digits)."""
    return len(n), n


def _go_semver(v: str) -> tuple[tuple, list[str]] | None:
    """golang.org/x/mod/semver's reading of "v"+v: MAJOR[.MINOR[.PATCH[-PRE][+BUILD]]] with no
    leading zeros; None when invalid (it then sorts below every valid version)."""
    core, plus, build = v.partition("+")
    if plus and (not core.count(".") == 2 or not all(_semver_ident(b, False) for b in build.split("."))):
        return None
    core, dash, pre = core.partition("-")
    nums = core.split(".")
    if len(nums) > 3 or (dash and len(nums) != 3):
        return None
    if not all(n.isascii() and n.isdigit() and (n == "0" or n[0] != "0") for n in nums):
        return None
    pres = pre.split(".") if dash else []
    if not all(_semver_ident(p, True) for p in pres):
        return None
    vals = [_num_key(n) for n in nums] + [_num_key("0")] * (3 - len(nums))
    return (vals[0], vals[1], vals[2]), pres


def go_semver_compare(a: str, b: str) -> int:
    """semver.Compare("v"+a, "v"+b): -1, 0 or 1; pre-releases sort below their release,
    identifiers compare numerically when both are numbers, else as ASCII strings."""
    pa, pb = _go_semver(a), _go_semver(b)
    if pa is None or pb is None:
        return (pa is not None) - (pb is not None)
    if pa[0] != pb[0]:
        return -1 if pa[0] < pb[0] else 1
    xa, xb = pa[1], pb[1]
    if not xa or not xb:
        return (not xa) - (not xb)
    for ia, ib in zip(xa, xb):
        if ia == ib:
            continue
        na, nb = ia.isdigit(), ib.isdigit()
        if na and nb:
            return -1 if _num_key(ia) < _num_key(ib) else 1
        if na != nb:
            return -1 if na else 1
        return -1 if ia < ib else 1
    return (len(xa) > len(xb)) - (len(xa) < len(xb))


def has_flat_capabilities(oci_version: object) -> bool:
    """Whether this ociVersion (1.0.0-rc1 <= v < 1.0.0-rc5) keeps capabilities as one list."""
    return isinstance(oci_version, str) and go_semver_compare(oci_version, _FLAT_CAPS_FROM) >= 0 \
        and go_semver_compare(oci_version, _FLAT_CAPS_BEFORE) < 0


def is_privileged(spec: dict) -> bool:
    """CAP_SYS_ADMIN in the bounding set (the flat list of pre-release OCI 1.0.0-rc1..rc4 specs,
    e.g. old docker runc's 1.0.0-rc2-dev)."""
    process = spec.get("process")
    if not isinstance(process, dict):
        return False
    caps = process.get("capabilities")
    if caps is None:
        return False
    if isinstance(caps, list):
        if not has_flat_capabilities(spec.get("ociVersion")):
            raise RequestError("invalid OCI spec: process.capabilities must be an object "
                               f"for ociVersion {shown(repr(spec.get('ociVersion')))}")
        bounding = caps
    elif isinstance(caps, dict):
        bounding = caps.get("bounding") or []
    else:
        raise RequestError("invalid OCI spec: process.capabilities must be an object")
    if not isinstance(bounding, list) or not all(isinstance(c, str) for c in bounding):
        raise RequestError("invalid OCI spec: process.capabilities.bounding must be a list of strings")
    return "CAP_SYS_ADMIN" in bounding


def is_legacy_image(env: dict[str, str]) -> bool:
    """A pre-NVIDIA_REQUIRE_CUDA CUDA image: CUDA_VERSION set, NVIDIA_REQUIRE_CUDA empty."""
    return bool(env.get(CUDA_VERSION)) and not env.get(REQUIRE_CUDA)


def devices_from_annotations(spec: dict, prefixes: tuple[str, ...] | list[str]) -> list[str]:
    """CDI device names from annotations whose key has one of `prefixes` (keys sorted)."""
    annotations = spec.get("annotations")
    if not prefixes or not annotations:
        return []
    if not isinstance(annotations, dict):
        raise RequestError("invalid OCI spec: annotations must be an object")
    keys = sorted(k for k in annotations if any(k.startswith(p) for p in prefixes))
    devices: list[str] = []
    for key in keys:
        value = annotations[key]
        if not isinstance(value, str):
            raise RequestError(f"invalid OCI spec: annotation {key!r} must be a string")
        devices.extend(_split_list(value, f"annotation {key}"))
        check_list_length(len(devices), "CDI annotations")
    return devices


def requests_from_mounts(spec: dict) -> list[str]:
    """Names below /var/run/nvidia-container-devices of /dev/null mounts, first seen order."""
    mounts = spec.get("mounts")
    if mounts is None:
        return []
    if not isinstance(mounts, list):
        raise RequestError("invalid OCI spec: mounts must be a list")
    seen: set[str] = set()
    out: list[str] = []
    for m in mounts:
        if not isinstance(m, dict):
            raise RequestError("invalid OCI spec: mounts entries must be objects")
        source, dest = m.get("source"), m.get("destination")
        if not isinstance(source, str) or not isinstance(dest, str):
            if source is None or dest is None:
                continue
            raise RequestError("invalid OCI spec: mount source/destination must be strings")
        if posixpath.normpath(source) != "/dev/null":
            continue
        dest = posixpath.normpath(dest)
        if dest in seen:
            continue
        seen.add(dest)
        if not dest.startswith(MOUNTS_ROOT + "/"):
            continue
        name = dest[len(MOUNTS_ROOT):].strip("/")
        if name:
            out.append(name)
    return out


def cdi_name_from_mount(request: str) -> str | None:
    """cdi/<vendor>/<class>/<dev> or cdi/<vendor>/<class>=<dev> -> vendor/class=dev."""
    rest = request[len("cdi/"):]
    if is_qualified_cdi_name(rest):
        return rest
    parts = rest.split("/", 2)
    if len(parts) != 3 or not all(parts):
        return None
    return f"{parts[0]}/{parts[1]}={parts[2]}"


def devices_from_mount_requests(requests: list[str]) -> list[str]:
    devices: list[str] = []
    for req in requests:
        if req.startswith("imex/"):
            continue
        if req.startswith("cdi/"):
            name = cdi_name_from_mount(req)
            if name is None:
                log.warning("ignoring invalid mount request for CDI device %s", req)
                continue
            devices.append(name)
        else:
            devices.append(req)
    return devices


def _visible_env_names(env: dict[str, str], swarm_resource: str) -> list[str]:
    """The swarm-resource variables present in the image, else NVIDIA_VISIBLE_DEVICES."""
    preferred = [n.strip() for n in (swarm_resource or "").split(",") if n.strip()]
    present = [n for n in preferred if n in env]
    return present or [VISIBLE_DEVICES]


def _split_list(value: str, what: str = "list") -> list[str]:
    """Comma-separated entries; RequestError past MAX_LIST_ENTRIES (empty ones count)."""
    check_list_length(value.count(",") + 1, what)
    return [p.strip() for p in value.split(",") if p.strip()]


def check_list_length(n: int, what: str) -> None:
    if n > MAX_LIST_ENTRIES:
        raise RequestError(f"{what}: {n} entries, more than the limit of {MAX_LIST_ENTRIES}")


def check_env_sizes(env: dict[str, str], extra: list[str] | tuple[str, ...] = ()) -> None:
    """RequestError for a value longer than MAX_ENV_VALUE among the variables nct reads
    (NVIDIA_*, CUDA_VERSION, the swarm-resource ones in `extra`)."""
    for key, value in env.items():
        if len(value) > MAX_ENV_VALUE and (key.startswith("NVIDIA_") or key == CUDA_VERSION or key in extra):
            raise RequestError(f"{key}: value of {len(value)} characters, longer than the limit of {MAX_ENV_VALUE}")


def _normalise_list(items: list[str]) -> tuple[str, ...] | None:
    """Upstream's special values, precedence void > none > all; else the ids, deduplicated."""
    if not items or "void" in items:
        return None
    if "none" in items:
        return ()
    if "all" in items:
        return ("all",)
    return tuple(dict.fromkeys(items))


def devices_from_env(env: dict[str, str], names: list[str], legacy: bool) -> tuple[str, ...] | None:
    """Device ids from the given env vars (concatenated): None = void/unset, () = none."""
    is_set = False
    items: list[str] = []
    for name in names:
        if name in env:
            is_set = True
            items.extend(_split_list(env[name], name))
    check_list_length(len(items), "+".join(names))
    if not is_set and legacy:
        return ("all",)
    return _normalise_list(items)


def capabilities_from_env(env: dict[str, str], supported: str, legacy: bool, *,
                          strict: bool = True) -> frozenset[str]:
    """NVIDIA_DRIVER_CAPABILITIES against config's supported-driver-capabilities.

    Unset/empty -> compute,utility (those supported); `all` -> every supported one; a
    legacy image with the variable unset -> every supported one. A requested capability
    that is not supported is an error (strict) or dropped (runtime).
    """
    supported_set = _caps_set(supported)
    if DRIVER_CAPABILITIES not in env and legacy:
        return frozenset(supported_set)
    value = env.get(DRIVER_CAPABILITIES, "")
    if not value:
        return frozenset(supported_set & set(DEFAULT_CAPABILITIES))
    requested = _caps_set(value, DRIVER_CAPABILITIES)
    if "all" in _split_list(value, DRIVER_CAPABILITIES):
        return frozenset(supported_set)
    granted = supported_set & requested
    missing = sorted(requested - granted)
    if missing and strict:
        raise RequestError(f"unsupported capabilities: {','.join(missing)} "
                           f"(in {DRIVER_CAPABILITIES}={value}; supported: {','.join(sorted(supported_set))})")
    return frozenset(granted)


def _caps_set(value: str, what: str = "supported-driver-capabilities") -> set[str]:
    items = _split_list(value, what)
    if "all" in items:
        return set(ALL_CAPABILITIES)
    return set(items)


def _mig_request(env: dict[str, str], name: str, privileged: bool, runtime: bool) -> str | None:
    value = env.get(name, "")
    if not value:
        return None
    if not privileged:
        if runtime:
            log.warning("ignoring %s in unprivileged container", name)
            return None
        raise RequestError(f"cannot set {name} in non-privileged container")
    return value


def imex_channels(env: dict[str, str], cfg: Config, privileged: bool, spec: dict,
                  mount_requests: list[str] | None = None) -> tuple[str, ...]:
    """IMEX channel ids from imex/<id> volume mounts (when accepted) or NVIDIA_IMEX_CHANNELS.

    `all` in the variable is ignored (upstream); ids must be decimal (or channelN) < 2^20.
    """
    if cfg.features.ignore_imex_channel_requests:
        return ()
    channels: list[str] = []
    if cfg.accept_nvidia_visible_devices_as_volume_mounts:
        if mount_requests is None:
            mount_requests = requests_from_mounts(spec)
        channels = [r[len("imex/"):] for r in mount_requests if r.startswith("imex/")]
    if not channels:
        if IMEX_CHANNELS not in env:
            return ()
        items = _split_list(env[IMEX_CHANNELS], IMEX_CHANNELS)
        normal = _normalise_list(items)
        if not normal or normal == ("all",):
            return ()
        if not (privileged or cfg.accept_nvidia_visible_devices_envvar_when_unprivileged):
            log.warning("ignoring %s in unprivileged container", IMEX_CHANNELS)
            return ()
        channels = list(normal)
    check_list_length(len(channels), IMEX_CHANNELS)
    return tuple(dict.fromkeys(_imex_id(c) for c in channels))


def _imex_id(value: str) -> str:
    digits = value[len("channel"):] if value.startswith("channel") else value
    if not digits.isdigit() or not digits.isascii() or len(digits) > 9 or int(digits) > MAX_IMEX_CHANNEL:
        raise RequestError(f"invalid IMEX channel: {shown(value)!r} (expected a number below {MAX_IMEX_CHANNEL + 1})")
    return str(int(digits))


def legacy_cuda_requirement(cuda_version: str) -> str:
    """CUDA_VERSION (semver, optional v) -> "cuda>=major.minor"."""
    import re

    m = re.match(_SEMVER, cuda_version[1:] if cuda_version.startswith("v") else cuda_version)
    if not m or not all(is_number(g) for g in m.groups("0")[:2]) or int(m.group(1)) >= 1 << 32 or int(m.group(2) or 0) >= 1 << 32:
        raise RequestError(f"invalid CUDA_VERSION: {shown(cuda_version)!r} (expected a version like 12.4.1)")
    return f"cuda>={m.group(1)}.{m.group(2) or 0}"


def requirements_from_env(env: dict[str, str], disable_require: bool = False, *,
                          strict: bool = True) -> tuple[str, ...]:
    """Every NVIDIA_REQUIRE_* value (JETPACK aside, sorted by name) plus the legacy
    image's cuda>= term; nothing when NVIDIA_DISABLE_REQUIRE is true or config disables it."""
    if disable_require or go_parse_bool(env.get(DISABLE_REQUIRE, "")):
        return ()
    reqs = [env[name] for name in sorted(env)
            if name.startswith(REQUIRE_PREFIX) and not name.startswith(REQUIRE_JETPACK) and env[name].strip()]
    if is_legacy_image(env):
        try:
            reqs.append(legacy_cuda_requirement(env[CUDA_VERSION]))
        except RequestError:
            if strict:
                raise
            log.warning("ignoring invalid %s=%s", CUDA_VERSION, env[CUDA_VERSION])
    return tuple(reqs)


def cuda_compat_mode(cfg: Config, *, runtime: bool = False) -> str:
    """The live-container CUDA compat mode from modes.legacy.cuda-compat-mode.

    For the hook: `hook` and `disabled` -> disabled (the runtime adds a hook instead); an
    unknown value -> disabled unless features.allow-cuda-compat-libs-from-container (then
    the CLI default, mount). The runtime keeps `hook` (it decides whether to add the hook).
    """
    mode = cfg.nvidia_container_runtime.modes.legacy.cuda_compat_mode
    if mode in ("ldconfig", "mount"):
        return mode
    if mode == "hook":
        return "hook" if runtime else "disabled"
    if mode == "disabled":
        return "disabled"
    return "mount" if cfg.features.allow_cuda_compat_libs_from_container else "disabled"
