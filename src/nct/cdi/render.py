"""ContainerEdits -> CDI containerEdits / whole CDI specs.

Pure functions (no file system access, light imports: the JIT path uses them). The
output follows upstream's generated specs: hostPath omitted when equal to path, device
permissions "rwm", options as lists, our hooks with an explicit env, duplicates removed
and entries already in the spec-level edits dropped from each device."""

from __future__ import annotations

TYPE_CHECKING = False  # not `typing` at run time: ~10 ms of the runtime's create
if TYPE_CHECKING:
    from typing import Iterable, Sequence

from nct.cdi.hooks import HookOptions, hook_edits
from nct.jsonio import dumps_compact
from nct.cdi.version import minimum_version
from nct.edits.model import ContainerEdits, DeviceNodeEdit, HookEdit, MountEdit
from nct.errors import SpecError

_LIST_KEYS = ("env", "deviceNodes", "mounts", "hooks", "additionalGids")


def node_to_cdi(n: DeviceNodeEdit, *, with_type: bool = False) -> dict:
    """A device node entry. `with_type` adds `type` so a consumer need not stat the host
    node (used when injecting straight into an OCI spec)."""
    d: dict = {"path": n.path}
    if n.host_path and n.host_path != n.path:
        d["hostPath"] = n.host_path
    if with_type and n.type:
        d["type"] = n.type
    d["major"] = n.major
    d["minor"] = n.minor
    if n.file_mode is not None:
        d["fileMode"] = n.file_mode & 0o7777
    perms = n.permissions or "rwm"
    d["permissions"] = "rwm" if ("r" in perms and "w" in perms) else perms
    if n.uid:
        d["uid"] = n.uid
    if n.gid:
        d["gid"] = n.gid
    return d


def mount_to_cdi(m: MountEdit) -> dict:
    d: dict = {"hostPath": m.host_path, "containerPath": m.container_path}
    if m.options:
        d["options"] = list(m.options)
    if m.type:
        d["type"] = m.type
    return d


def hook_to_cdi(h: HookEdit) -> dict:
    d: dict = {"hookName": h.hook_name, "path": h.path}
    if h.args:
        d["args"] = list(h.args)
    if h.env:
        d["env"] = list(h.env)
    if h.timeout is not None:
        d["timeout"] = h.timeout
    return d


def _dedup(items: Iterable) -> list:
    seen: set[str] = set()
    out = []
    for it in items:
        k = dumps_compact(it, sort_keys=True)  # not `json`: the runtime's create renders with this
        if k not in seen:
            seen.add(k)
            out.append(it)
    return out


def edits_to_cdi(edits: ContainerEdits, opts: HookOptions | None = None, *,
                 with_type: bool = False) -> dict:
    """CDI containerEdits for `edits`: symlinks, ldconfig folders, the /proc view and CUDA
    compat become nvidia-cdi-hook hooks (see nct.cdi.hooks). Empty lists are omitted."""
    out: dict = {}
    if edits.env:
        out["env"] = _dedup(edits.env)
    if edits.device_nodes:
        out["deviceNodes"] = _dedup(node_to_cdi(n, with_type=with_type) for n in edits.device_nodes)
    if edits.mounts:
        out["mounts"] = _dedup(mount_to_cdi(m) for m in edits.mounts)
    hooks = hook_edits(edits, opts)
    if hooks:
        out["hooks"] = _dedup(hook_to_cdi(h) for h in hooks)
    if edits.additional_gids:
        out["additionalGids"] = _dedup(g for g in edits.additional_gids)
    return out


def merge_cdi_edits(parts: Iterable[dict]) -> dict:
    """Concatenate CDI containerEdits (as the reference library appends them), deduped."""
    out: dict = {}
    for e in parts:
        for k in _LIST_KEYS + ("netDevices",):
            if e.get(k):
                out.setdefault(k, []).extend(e[k])
        if e.get("intelRdt") is not None:
            out["intelRdt"] = e["intelRdt"]
    for k in list(out):
        if isinstance(out[k], list):
            out[k] = _dedup(out[k])
    return out


def _without_common(dev: dict, common: dict) -> dict:
    """Device edits minus entries the spec-level edits already carry; unchanged when that
    would leave the device with no edits (CDI requires some)."""
    out = {}
    for k, v in dev.items():
        if k in _LIST_KEYS and common.get(k):
            have = {dumps_compact(x, sort_keys=True) for x in common[k]}
            v = [x for x in v if dumps_compact(x, sort_keys=True) not in have]
            if not v:
                continue
        out[k] = v
    return out if out else dev


def build_spec(vendor: str, cls: str,
               devices: Sequence[tuple],
               common: ContainerEdits | None = None,
               annotations: dict[str, str] | None = None,
               *, hook_options: HookOptions | None = None,
               all_device: bool = False) -> dict:
    """A whole CDI spec dict with its minimum cdiVersion.

    `devices` holds (name, ContainerEdits) or (name, ContainerEdits, annotations) in output
    order. `all_device` appends `all`, the union of every device's edits, unless a device
    already has that name. SpecError when a device ends up with no edits."""
    common_cdi = edits_to_cdi(common, hook_options) if common is not None else {}
    rendered: list[tuple[str, dict, dict | None]] = []
    for device in devices:
        name, edits = device[0], device[1]
        ann = device[2] if len(device) > 2 else None
        rendered.append((name, edits_to_cdi(edits, hook_options), ann))
    if all_device and rendered and "all" not in {r[0] for r in rendered}:
        rendered.append(("all", merge_cdi_edits(r[1] for r in rendered), None))
    spec: dict = {"cdiVersion": "", "kind": f"{vendor}/{cls}"}
    if annotations:
        spec["annotations"] = dict(annotations)
    spec["devices"] = []
    for name, dev, ann in rendered:
        if not dev:
            raise SpecError(f"CDI device {vendor}/{cls}={name} has no container edits")
        entry: dict = {"name": name}
        if ann:
            entry["annotations"] = dict(ann)
        entry["containerEdits"] = _without_common(dev, common_cdi)
        spec["devices"].append(entry)
    if common_cdi:
        spec["containerEdits"] = common_cdi
    spec["cdiVersion"] = minimum_version(spec)
    return spec
