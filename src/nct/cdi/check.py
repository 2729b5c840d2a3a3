"""`nct cdi check`: which NVIDIA CDI specs no longer match the node.

A generated spec carries no record of its own (annotations would raise its cdiVersion to
0.6.0, past what podman 4.3 reads), so staleness is read from what the spec says about the
node it was made for, compared with the node as discovered now (NVML only when a MIG UUID
needs it):

- driver version: the suffix of the versioned driver libraries it mounts
  (`libcuda.so.<ver>`, `libnvidia-ml.so.<ver>`), else `enable-cuda-compat`'s
  `--host-driver-version`;
- GPU set: devices named as upstream names them (index `0`, `gpu0`, `GPU-` UUID, MIG `1:0`,
  `mig1:0`, `MIG-` UUID) that hold a `/dev/nvidia<minor>` node, and the `all` device;
- host paths: every mount source, device node and hook binary must still exist.

Specs written by older nct versions carry `nct.nvidia.com/driver-version` and
`nct.nvidia.com/fingerprint`; those are still read (the annotation wins for the driver
version; the fingerprint backs the content checks). A spec is an NVIDIA one when its vendor
is nvidia.com or a subdomain, when it carries that old record, or when it holds a GPU node
or a versioned driver library (e.g. one generated with `--vendor example.com`)."""

from __future__ import annotations

import os
import re
import sys
from nct.record import Record, field

from nct.errors import NctError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from nct.driver.model import Gpu, MigDevice, Node

MAX_MISSING_SHOWN = 3
MAX_CHANGES_SHOWN = 4

# The record older nct versions wrote into every spec made from discovery.
ANNOTATION_PREFIX = "nct.nvidia.com/"
DRIVER_VERSION_ANNOTATION = ANNOTATION_PREFIX + "driver-version"
FINGERPRINT_ANNOTATION = ANNOTATION_PREFIX + "fingerprint"
FINGERPRINT_FILE_KINDS = ("lib", "lib32", "bin", "firmware", "config", "xorg")

_GPU_NODE = re.compile(r"/dev/nvidia(\d+)")
_CAP_NODE = re.compile(r"/dev/nvidia-caps/nvidia-cap(\d+)")
# Libraries whose suffix is always the driver version (graphics helpers such as
# libnvidia-egl-wayland.so.1.1.13 carry versions of their own).
_VERSIONED_LIB = re.compile(r"(?:libcuda|libnvidia-ml)\.so\.(\d+\.\d+(?:\.\d+)?)")
_HOST_DRIVER_VERSION = "--host-driver-version="
_GPU_INDEX = re.compile(r"(?:gpu)?(\d+)")
_MIG_INDEX = re.compile(r"(?:mig)?(\d+):(\d+)")


class CheckOptions(Record):
    spec_dirs: tuple[str, ...] = ("/etc/cdi", "/var/run/cdi")
    driver_root: str | None = None
    dev_root: str | None = None
    config_path: str | None = None
    files: tuple[str, ...] = ()  # explicit spec files (checked whatever their vendor)
    quiet: bool = False
    prog: str = "nct"


class CheckResult(Record, frozen=False):
    """Outcome for one spec file: `reasons` is empty when it matches the node."""

    path: str
    kind: str
    reasons: list[str] = field(default_factory=list)

    @property
    def stale(self) -> bool:
        return bool(self.reasons)

    def line(self) -> str:
        return f"{self.path}: stale: {'; '.join(self.reasons)}"


class SpecDevice(Record):
    """A spec device that stands for one GPU or MIG device, as its name and nodes say.
    kind: "gpu-index", "gpu-uuid", "mig-index", "mig-uuid" or "all"; `key` the index, the
    lower-case UUID or (i, j); `gpu_nodes` / `cap_nodes` the container paths of its
    /dev/nvidia<minor> and /dev/nvidia-caps/nvidia-cap<minor> nodes."""

    name: str
    kind: str
    key: object
    gpu_nodes: frozenset[str] = frozenset()
    cap_nodes: frozenset[str] = frozenset()


class _NodeCache:
    """Discovers the node once, on first need (NVML only when asked, once); a discovery
    error is kept as the answer."""

    def __init__(self, roots) -> None:
        self.roots = roots
        self._done = False
        self.node = None
        self.error: str | None = None
        self._nvml_done = False
        self._nvml_node = None

    def get(self):
        if not self._done:
            self._done = True
            from nct.driver.discover import discover_node

            try:
                self.node = discover_node(self.roots, use_nvml=False)
            except NctError as e:
                self.error = str(e)
        return self.node

    def with_nvml(self):
        """The node with NVML's facts (MIG UUIDs); None when it cannot be discovered."""
        if not self._nvml_done:
            self._nvml_done = True
            from nct.driver.discover import discover_node

            try:
                self._nvml_node = discover_node(self.roots, use_nvml=True)
            except NctError:
                self._nvml_node = None
        return self._nvml_node


# --- what a spec says ---------------------------------------------------------------------

def _edits(raw: dict) -> list[dict]:
    out = [raw.get("containerEdits") or {}]
    out += [d.get("containerEdits") or {} for d in raw.get("devices") or [] if isinstance(d, dict)]
    return [e for e in out if isinstance(e, dict)]


def _node_paths(edits: dict) -> list[str]:
    return [n["path"] for n in edits.get("deviceNodes") or [] if isinstance(n, dict) and isinstance(n.get("path"), str)]


def spec_driver_versions(raw: dict) -> list[str]:
    """Driver versions the spec was made for, in spec order: the suffixes of the versioned
    driver libraries it mounts, else enable-cuda-compat's --host-driver-version."""
    found: list[str] = []
    hinted: list[str] = []
    for e in _edits(raw):
        for m in e.get("mounts") or []:
            if not isinstance(m, dict):
                continue
            for p in (m.get("hostPath"), m.get("containerPath")):
                hit = _VERSIONED_LIB.fullmatch(os.path.basename(p)) if isinstance(p, str) else None
                if hit:
                    found.append(hit.group(1))
        for h in e.get("hooks") or []:
            args = h.get("args") if isinstance(h, dict) else None
            for a in args if isinstance(args, list) else []:
                if isinstance(a, str) and a.startswith(_HOST_DRIVER_VERSION):
                    hinted.append(a[len(_HOST_DRIVER_VERSION):])
    return list(dict.fromkeys(found or [v for v in hinted if v]))


def spec_gpu_devices(raw: dict) -> list[SpecDevice]:
    """The devices that stand for a GPU, a MIG device or all of them: a name as upstream's
    strategies write it and at least one /dev/nvidia<minor> node (so imex channels named
    `0` or class specs never count)."""
    out: list[SpecDevice] = []
    for d in raw.get("devices") or []:
        if not isinstance(d, dict) or not isinstance(d.get("name"), str):
            continue
        name = d["name"]
        paths = _node_paths(d.get("containerEdits") or {})
        gpu_nodes = frozenset(p for p in paths if _GPU_NODE.fullmatch(p))
        if not gpu_nodes:
            continue
        caps = frozenset(p for p in paths if _CAP_NODE.fullmatch(p))
        low = name.lower()
        kind: str | None = None
        key: object = None
        if low == "all":
            kind, key = "all", None
        elif low.startswith("gpu-"):
            kind, key = "gpu-uuid", low
        elif low.startswith("mig-"):
            kind, key = "mig-uuid", low
        elif hit := _GPU_INDEX.fullmatch(low):
            kind, key = "gpu-index", int(hit.group(1))
        elif hit := _MIG_INDEX.fullmatch(low):
            kind, key = "mig-index", (int(hit.group(1)), int(hit.group(2)))
        if kind is not None:
            out.append(SpecDevice(name, kind, key, gpu_nodes, caps))
    return out


def is_nvidia_spec(raw: dict) -> bool:
    vendor = str(raw.get("kind", "")).split("/", 1)[0]
    if vendor == "nvidia.com" or vendor.endswith(".nvidia.com"):
        return True
    if DRIVER_VERSION_ANNOTATION in (raw.get("annotations") or {}):
        return True
    return bool(spec_driver_versions(raw)) or any(
        _GPU_NODE.fullmatch(p) for e in _edits(raw) for p in _node_paths(e))


def referenced_host_paths(raw: dict) -> list[str]:
    """Every host path a spec needs: mount sources, device nodes (hostPath, else path),
    hook binaries; in spec order, without repeats."""
    out: list[str] = []
    for e in _edits(raw):
        for n in e.get("deviceNodes") or []:
            out.append(n.get("hostPath") or n.get("path"))
        for m in e.get("mounts") or []:
            out.append(m.get("hostPath"))
        for h in e.get("hooks") or []:
            out.append(h.get("path"))
    return [p for p in dict.fromkeys(out) if p]


# --- compared with the node ----------------------------------------------------------------

def _mig_nodes(node: Node, mig: MigDevice) -> tuple[frozenset[str], frozenset[str]]:
    parent = next((g for g in node.gpus if g.index == mig.parent_index), None)
    gpu = frozenset([parent.device.path]) if parent is not None else frozenset()
    return gpu, frozenset([mig.gi_access.path, mig.ci_access.path])


def _in_mig_mode(gpu: Gpu) -> bool:
    return gpu.mig_enabled or bool(gpu.migs)


def gpu_set_changes(raw: dict, node: Node, mig_uuids: dict[str, MigDevice] | None = None) -> list[str]:
    """What differs between the GPU devices of a spec and the node, one phrase each ([]
    when nothing does). `mig_uuids` (lower-case MIG UUID -> device, from NVML) lets MIG-UUID
    devices be looked up by UUID; without it they are matched by their access nodes."""
    devices = spec_gpu_devices(raw)
    gpus = [g for g in node.gpus if not g.excluded]
    migs = [m for g in gpus for m in g.migs]
    by_index = {g.index: g for g in gpus}
    by_uuid = {g.uuid.lower(): g for g in gpus}
    by_ij = {(m.parent_index, m.ordinal): m for m in migs}
    changes: list[str] = []
    per_device = [d for d in devices if d.kind != "all"]
    for d in per_device:
        if d.kind in ("gpu-index", "gpu-uuid"):
            label = f"GPU {d.key}" if d.kind == "gpu-index" else d.name
            # the type of `key` follows `kind` (a tagged union the checker cannot follow)
            g = by_index.get(d.key) if d.kind == "gpu-index" else by_uuid.get(d.key)  # type: ignore[call-overload]
            if g is None:
                changes.append(f"{label} gone")
            elif _in_mig_mode(g):
                changes.append(f"{label} now in MIG mode")
            elif g.device.path not in d.gpu_nodes:
                changes.append(f"{label} now {g.device.path}, was {', '.join(sorted(d.gpu_nodes))}")
            continue
        if d.kind == "mig-index":
            i, j = d.key if isinstance(d.key, tuple) else (None, None)  # mig-index: (GPU index, MIG ordinal)
            label = f"MIG {i}:{j}"
            m = by_ij.get((i, j))
        else:
            label = d.name
            if mig_uuids is not None:
                m = mig_uuids.get(d.key)  # type: ignore[call-overload]  # kind mig-uuid: key is a str
                m = by_ij.get((m.parent_index, m.ordinal)) if m is not None else None
            else:
                m = next((x for x in migs if _mig_nodes(node, x) == (d.gpu_nodes, d.cap_nodes)), None)
        if m is None:
            changes.append(f"{label} gone")
        elif _mig_nodes(node, m) != (d.gpu_nodes, d.cap_nodes):
            changes.append(f"{label} now GI {m.gi} CI {m.ci} on other device nodes")
    if per_device:
        # a GPU or MIG device of the node that no entry of the spec stands for
        indices = {d.key for d in per_device if d.kind == "gpu-index"}
        uuids = {d.key for d in per_device if d.kind == "gpu-uuid"}
        ijs = {d.key for d in per_device if d.kind == "mig-index"}
        mig_entries = {(d.gpu_nodes, d.cap_nodes) for d in per_device if d.kind == "mig-uuid"}
        if mig_uuids is not None:
            ijs |= {(m.parent_index, m.ordinal) for d in per_device if d.kind == "mig-uuid"
                    for m in [mig_uuids.get(d.key)] if m is not None}  # type: ignore[call-overload]
        for g in gpus:
            if not _in_mig_mode(g) and g.index not in indices and g.uuid.lower() not in uuids:
                changes.append(f"no device for GPU {g.index} / {g.uuid}")
        for m in migs:
            if (m.parent_index, m.ordinal) not in ijs and _mig_nodes(node, m) not in mig_entries:
                changes.append(f"no device for MIG {m.index_name}")
    every = next((d for d in devices if d.kind == "all"), None)
    if every is not None and not changes:
        if str(raw.get("kind", "")).startswith("management."):
            want_gpus = {g.device.path for g in node.gpus}  # every GPU node under /dev
            have, want = every.gpu_nodes, want_gpus
        else:
            want_gpus = {g.device.path for g in gpus if not _in_mig_mode(g)}
            want_caps: set[str] = set()
            for m in migs:
                gpu, caps = _mig_nodes(node, m)
                want_gpus |= gpu
                want_caps |= caps
            have, want = every.gpu_nodes | every.cap_nodes, want_gpus | want_caps
        if have != want:
            if want - have:
                changes.append(f"device all lacks {', '.join(sorted(want - have))}")
            if have - want:
                changes.append(f"device all has {', '.join(sorted(have - want))}, no longer on the node")
    return list(dict.fromkeys(changes))


def _shown(items: list[str], limit: int) -> str:
    more = f" (and {len(items) - limit} more)" if len(items) > limit else ""
    return ", ".join(items[:limit]) + more


def check_spec(raw: dict, nodes: _NodeCache) -> list[str]:
    """Why the spec `raw` no longer matches the node ([] when it does)."""
    reasons: list[str] = []
    ann = raw.get("annotations") or {}
    recorded = ann.get(DRIVER_VERSION_ANNOTATION)
    fingerprint = ann.get(FINGERPRINT_ANNOTATION)
    versions = [recorded] if recorded else spec_driver_versions(raw)
    devices = spec_gpu_devices(raw)
    if versions or fingerprint or devices:
        node = nodes.get()
        if node is None:
            reasons.append(f"node not discoverable: {nodes.error}")
        else:
            then = next((v for v in versions if v != node.driver_version), None)
            if then:
                reasons.append(f"driver version changed ({then} -> {node.driver_version})")
            mig_uuids = None
            if any(d.kind == "mig-uuid" for d in devices):
                full = nodes.with_nvml()
                found = {m.uuid.lower(): m for g in (full.gpus if full is not None else ()) for m in g.migs if m.uuid}
                mig_uuids = found or None
            changes = gpu_set_changes(raw, node, mig_uuids)
            files_changed = False
            if fingerprint:
                old, now = parse_fingerprint(fingerprint), node_fingerprint(node)
                if not changes and old.get("gpus") != now["gpus"]:
                    changes = ["UUIDs, minors or MIG devices"]
                files_changed = old.get("files") != now["files"] and not then
            if changes:
                more = f"; and {len(changes) - MAX_CHANGES_SHOWN} more" if len(changes) > MAX_CHANGES_SHOWN else ""
                reasons.append(f"GPU set changed ({'; '.join(changes[:MAX_CHANGES_SHOWN])}{more})")
            if files_changed:
                reasons.append("driver files changed")
    missing = [p for p in referenced_host_paths(raw) if not os.path.exists(p)]
    if missing:
        reasons.append(f"missing host path{'s' if len(missing) > 1 else ''}: {_shown(missing, MAX_MISSING_SHOWN)}")
    return reasons


# --- the record older nct versions wrote ---------------------------------------------------------

def node_fingerprint(node: Node) -> dict[str, str]:
    """Short hashes of the GPU set (minor, UUID, MIG GI/CI) and the driver files (their
    paths), as older nct versions recorded them in `nct.nvidia.com/fingerprint`."""
    import hashlib
    import json

    gpus = sorted([g.minor, g.uuid.lower(), sorted([m.gi, m.ci] for m in g.migs)]
                  for g in node.gpus if not g.excluded)
    files = sorted(f.container_path for f in node.files if f.kind in FINGERPRINT_FILE_KINDS)

    def h(obj) -> str:
        return hashlib.sha256(json.dumps(obj, separators=(",", ":")).encode()).hexdigest()[:16]

    return {"gpus": h(gpus), "files": h(files)}


def parse_fingerprint(value: str) -> dict[str, str]:
    out = {}
    for item in str(value).split(","):
        k, sep, v = item.partition(":")
        if sep:
            out[k.strip()] = v.strip()
    return out


# --- the command -----------------------------------------------------------------------------------

def find_stale(opts: CheckOptions, warnings: list[str] | None = None) -> list[CheckResult]:
    """Check the explicit files (an unreadable or invalid one is an error) and the NVIDIA
    specs in the spec dirs (invalid ones are warnings). Returns one result per spec checked."""
    from nct.cdi.generate import roots_for
    from nct.cdi.registry import spec_files
    from nct.cdi.spec import load_spec
    from nct.config.load import load_config

    cfg = load_config(opts.config_path)
    nodes = _NodeCache(roots_for(opts.driver_root, opts.dev_root, cfg))
    results: list[CheckResult] = []
    for path in opts.files:
        spec = load_spec(path)
        results.append(CheckResult(path, spec.kind, check_spec(spec.raw, nodes)))
    for directory in opts.spec_dirs:
        for path in spec_files(directory):
            try:
                spec = load_spec(path)
            except NctError as e:
                if warnings is not None:
                    warnings.append(str(e))
                continue
            if is_nvidia_spec(spec.raw):
                results.append(CheckResult(path, spec.kind, check_spec(spec.raw, nodes)))
    return results


def check(opts: CheckOptions) -> int:
    """Print one line per stale spec on stdout; 1 if any is stale, else 0."""
    warnings: list[str] = []
    results = find_stale(opts, warnings)
    if not opts.quiet:
        for w in warnings:
            print(f"{opts.prog}: warning: {w}", file=sys.stderr)
    stale = [r for r in results if r.stale]
    for r in stale:
        print(r.line())
    if not opts.quiet:
        print(f"{opts.prog}: checked {len(results)} NVIDIA CDI spec(s), {len(stale)} stale", file=sys.stderr)
    return 1 if stale else 0
