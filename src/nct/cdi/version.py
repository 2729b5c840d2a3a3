"""cdiVersion: the versions a spec may declare and the minimum its content requires.

A consumer that only knows an older CDI version would silently drop fields it does not
know, so a spec must declare at least the version that introduced every feature it uses;
we compute that minimum when writing and enforce it when reading."""

from __future__ import annotations

VALID_VERSIONS: tuple[str, ...] = (
    "0.1.0", "0.2.0", "0.3.0", "0.4.0", "0.5.0", "0.6.0", "0.7.0", "0.8.0", "1.0.0", "1.1.0",
)
LOWEST_VERSION = "0.3.0"  # the oldest version the reference library still writes


def normalize(version: str) -> str | None:
    """'v0.5.0' / '0.5.0' -> '0.5.0'; None when not a known CDI version."""
    if not isinstance(version, str):
        return None
    v = version[1:] if version.startswith("v") else version
    return v if v in VALID_VERSIONS else None


def key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split("."))


ADDITIONAL_GIDS_SINCE = "0.7.0"


def reads_additional_gids(version: str | None) -> bool:
    """Whether a consumer reading specs up to `version` (None: any) knows additionalGids."""
    return version is None or key(version) >= key(ADDITIONAL_GIDS_SINCE)


def _edits_list(spec: dict) -> list[dict]:
    out = [spec.get("containerEdits") or {}]
    out += [(d.get("containerEdits") or {}) for d in spec.get("devices") or [] if isinstance(d, dict)]
    return [e for e in out if isinstance(e, dict)]


def minimum_version(spec: dict) -> str:
    """The lowest cdiVersion able to express `spec` (a CDI spec dict)."""
    edits = _edits_list(spec)
    devices = [d for d in spec.get("devices") or [] if isinstance(d, dict)]

    def any_edit(pred) -> bool:
        return any(pred(e) for e in edits)

    # 1.1.0: netDevices; intelRdt schemata / enableMonitoring
    if any_edit(lambda e: e.get("netDevices")) or any_edit(
            lambda e: isinstance(e.get("intelRdt"), dict)
            and ("schemata" in e["intelRdt"] or "enableMonitoring" in e["intelRdt"])):
        return "1.1.0"
    # 0.7.0: intelRdt, additionalGids
    if any_edit(lambda e: e.get("intelRdt") is not None or e.get("additionalGids")):
        return ADDITIONAL_GIDS_SINCE
    # 0.6.0: annotations anywhere; '.' in the class name
    kind = spec.get("kind")
    cls = kind.split("/", 1)[1] if isinstance(kind, str) and "/" in kind else ""
    if spec.get("annotations") or any(d.get("annotations") for d in devices) or "." in cls:
        return "0.6.0"
    # 0.5.0: deviceNode hostPath; device names starting with a digit
    if any_edit(lambda e: any(isinstance(n, dict) and n.get("hostPath") for n in e.get("deviceNodes") or [])):
        return "0.5.0"
    if any(isinstance(d.get("name"), str) and d["name"][:1].isdigit() for d in devices):
        return "0.5.0"
    # 0.4.0: mount type
    if any_edit(lambda e: any(isinstance(m, dict) and m.get("type") for m in e.get("mounts") or [])):
        return "0.4.0"
    return LOWEST_VERSION
