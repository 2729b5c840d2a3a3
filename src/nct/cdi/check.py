"""`nct cdi check`: which NVIDIA CDI specs no longer match the node.

A spec we generated records the driver version and a fingerprint of the node (GPU set,
driver file paths; see nct.cdi.generate.node_record). A spec is stale when the driver
version or the fingerprint differs from the node as discovered now, when the node cannot
be discovered any more, or when a host path it references (mount source, device node,
hook binary) is gone. Specs without our record (e.g. from upstream nvidia-ctk) get the
host path check only. A spec is an NVIDIA one when its vendor is nvidia.com or a
subdomain of it, or when it carries our record."""

from __future__ import annotations

import os
import sys
from nct.record import Record, field

from nct.errors import NctError

MAX_MISSING_SHOWN = 3


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


class _NodeCache:
    """Discovers the node once, on first need; a discovery error is kept as the answer."""

    def __init__(self, roots) -> None:
        self.roots = roots
        self._done = False
        self.node = None
        self.error: str | None = None

    def get(self):
        if not self._done:
            self._done = True
            from nct.driver.discover import discover_node

            try:
                self.node = discover_node(self.roots, use_nvml=False)
            except NctError as e:
                self.error = str(e)
        return self.node


def is_nvidia_spec(raw: dict) -> bool:
    from nct.cdi.generate import DRIVER_VERSION_ANNOTATION

    vendor = str(raw.get("kind", "")).split("/", 1)[0]
    return (vendor == "nvidia.com" or vendor.endswith(".nvidia.com")
            or DRIVER_VERSION_ANNOTATION in (raw.get("annotations") or {}))


def referenced_host_paths(raw: dict) -> list[str]:
    """Every host path a spec needs: mount sources, device nodes (hostPath, else path),
    hook binaries; in spec order, without repeats."""
    out: list[str] = []
    edits = [raw.get("containerEdits") or {}] + [d.get("containerEdits") or {} for d in raw.get("devices") or []]
    for e in edits:
        for n in e.get("deviceNodes") or []:
            out.append(n.get("hostPath") or n.get("path"))
        for m in e.get("mounts") or []:
            out.append(m.get("hostPath"))
        for h in e.get("hooks") or []:
            out.append(h.get("path"))
    return [p for p in dict.fromkeys(out) if p]


def check_spec(raw: dict, nodes: _NodeCache) -> list[str]:
    """Why the spec `raw` no longer matches the node ([] when it does)."""
    from nct.cdi.generate import (DRIVER_VERSION_ANNOTATION, FINGERPRINT_ANNOTATION, node_fingerprint,
                                  parse_fingerprint)

    reasons: list[str] = []
    ann = raw.get("annotations") or {}
    recorded = ann.get(DRIVER_VERSION_ANNOTATION)
    fingerprint = ann.get(FINGERPRINT_ANNOTATION)
    if recorded or fingerprint:
        node = nodes.get()
        if node is None:
            reasons.append(f"node not discoverable: {nodes.error}")
        else:
            if recorded and recorded != node.driver_version:
                reasons.append(f"driver version changed ({recorded} -> {node.driver_version})")
            if fingerprint:
                then, now = parse_fingerprint(fingerprint), node_fingerprint(node)
                if then.get("gpus") != now["gpus"]:
                    reasons.append("GPU set changed (UUIDs, minors or MIG devices)")
                if then.get("files") != now["files"] and not (recorded and recorded != node.driver_version):
                    reasons.append("driver files changed")
    missing = [p for p in referenced_host_paths(raw) if not os.path.exists(p)]
    if missing:
        more = f" (and {len(missing) - MAX_MISSING_SHOWN} more)" if len(missing) > MAX_MISSING_SHOWN else ""
        reasons.append(f"missing host path{'s' if len(missing) > 1 else ''}: "
                       f"{', '.join(missing[:MAX_MISSING_SHOWN])}{more}")
    return reasons


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
