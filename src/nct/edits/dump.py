"""ContainerEdits as plain JSON-able data: `nvidia-container-cli configure --dry-run` output,
and a lossless way to hand a plan to another process (or compare plans in tests)."""

from __future__ import annotations

import json
from nct.record import asdict, fields

from nct.edits.model import ContainerEdits, DeviceNodeEdit, HookEdit, MountEdit, SymlinkEdit

_ITEMS = {"device_nodes": DeviceNodeEdit, "mounts": MountEdit, "hooks": HookEdit, "symlinks": SymlinkEdit}


def edits_to_dict(edits: ContainerEdits) -> dict:
    """Field names as in the model; tuples become lists."""
    return asdict(edits)


def edits_from_dict(data: dict) -> ContainerEdits:
    """Inverse of edits_to_dict (unknown keys are ignored)."""
    known = {f.name for f in fields(ContainerEdits)}
    kw: dict = {}
    for key, value in data.items():
        if key not in known:
            continue
        cls = _ITEMS.get(key)
        if cls is not None:
            value = [cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in item.items()}) for item in value]
        elif isinstance(value, list):
            value = list(value)
        kw[key] = value
    return ContainerEdits(**kw)


def edits_to_json(edits: ContainerEdits, indent: int | None = 2) -> str:
    return json.dumps(edits_to_dict(edits), indent=indent, sort_keys=False)
