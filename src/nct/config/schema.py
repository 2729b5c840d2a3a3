"""The config.toml key table, derived from the records in model.py so the two never drift.

Each leaf key is a dotted TOML path ("nvidia-container-runtime.modes.cdi.spec-dirs") with a
kind: "bool", "str", "list" (of strings) or "optstr" (a string that is unset by default and
may be deleted). Sections are the nested records. Kept free of heavy imports: the
runtime shim and the hook load the config on every container start.
"""

from __future__ import annotations

from nct.config import model
from nct.record import MISSING, Record, fields, is_record

# Attributes of Config that are bookkeeping, not TOML keys.
_NOT_KEYS = frozenset({"source_path", "raw"})

_KINDS = {
    "bool": "bool",
    "str": "str",
    "tuple[str, ...]": "list",
    "str | None": "optstr",
}


class Key(Record):
    """One leaf key: its dotted TOML path, its attribute path in the model, kind and default."""

    path: str
    attrs: tuple[str, ...]
    kind: str
    default: object


def toml_name(attr: str) -> str:
    """Model attribute name -> TOML key name (underscores become dashes)."""
    return attr.replace("_", "-")


def _walk(cls: type, prefix: tuple[str, ...], attrs: tuple[str, ...], keys: dict, sections: dict) -> None:
    for f in fields(cls):
        if f.name in _NOT_KEYS:
            continue
        ann = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
        path = prefix + (toml_name(f.name),)
        nested = getattr(model, ann, None)
        if isinstance(nested, type) and is_record(nested):
            sections[".".join(path)] = nested
            _walk(nested, path, attrs + (f.name,), keys, sections)
            continue
        kind = _KINDS.get(ann)
        if kind is None:  # a new field type in model.py: fail loudly at import, in tests
            raise TypeError(f"config schema: unsupported type {ann!r} for {'.'.join(path)}")
        if f.default is not MISSING:
            default = f.default
        else:
            default = f.default_factory()  # type: ignore[misc]
        keys[".".join(path)] = Key(".".join(path), attrs + (f.name,), kind, default)


def _build() -> tuple[dict[str, Key], dict[str, type]]:
    keys: dict[str, Key] = {}
    sections: dict[str, type] = {}
    _walk(model.Config, (), (), keys, sections)
    return keys, sections


KEYS, SECTIONS = _build()

# Keys that upstream writes as commented suggestions ("#key = value") when unset or default.
COMMENTED_SUGGESTIONS: dict[str, object] = {
    "accept-nvidia-visible-devices-as-volume-mounts": False,
    "accept-nvidia-visible-devices-envvar-when-unprivileged": True,
    "swarm-resource": "DOCKER_RESOURCE_GPU",
    "nvidia-container-cli.debug": "/var/log/nvidia-container-toolkit.log",
    "nvidia-container-cli.ldcache": "/etc/ld.so.cache",
    "nvidia-container-cli.no-cgroups": False,
    "nvidia-container-cli.path": "/usr/bin/nvidia-container-cli",
    "nvidia-container-cli.root": "/run/nvidia/driver",
    "nvidia-container-cli.user": "root:video",
    "nvidia-container-runtime.debug": "/var/log/nvidia-container-runtime.log",
}

# Keys absent from the default file whose absence means "unset" (upstream pointer fields):
# `--set key=nil` deletes them.
OPTIONAL_KEYS = frozenset(
    {k for k in KEYS if k.startswith("features.")}
    | {
        "nvidia-container-cli.no-pivot",
        "nvidia-container-runtime.modes.csv.compat-container-root",
        "nvidia-container-runtime.modes.jit-cdi.nvcdi-feature-flags",
        "nvidia-container-runtime.modes.jit-cdi.nvcdi-disable-hooks",
    }
)

RUNTIME_MODES = ("auto", "legacy", "csv", "cdi", "jit-cdi")
CUDA_COMPAT_MODES = ("ldconfig", "mount", "hook", "disabled")
# logrus level names (parsed case-insensitively, as logrus does).
LOG_LEVELS = ("panic", "fatal", "error", "warn", "warning", "info", "debug", "trace")
