"""Plans survive a trip through JSON unchanged (what --dry-run prints is the real plan)."""

from __future__ import annotations

import json

from nct.edits.dump import edits_to_json
from nct.edits.model import ContainerEdits, DeviceNodeEdit, HookEdit, MountEdit, SymlinkEdit
from nct.edits.planner import PlanOptions, plan
from nct.record import fields
from nct.request.model import ContainerRequest

_ITEMS = {"device_nodes": DeviceNodeEdit, "mounts": MountEdit, "hooks": HookEdit, "symlinks": SymlinkEdit}


def edits_from_dict(data: dict) -> ContainerEdits:
    """Read the JSON back into a plan: every field of ContainerEdits must be in it."""
    kw: dict = {}
    for f in fields(ContainerEdits):
        value = data[f.name]
        cls = _ITEMS.get(f.name)
        if cls is not None:
            value = [cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in item.items()}) for item in value]
        kw[f.name] = value
    return ContainerEdits(**kw)


def test_round_trip(node_factory):
    node = node_factory(2, migs={1: 1}, imex=1)
    for target in ("live", "spec"):
        req = ContainerRequest(devices=("all",), capabilities=frozenset({"compute", "graphics", "display"}),
                               imex_channels=("0",))
        edits = plan(node, req, PlanOptions(target=target))
        text = edits_to_json(edits)
        data = json.loads(text)
        assert data["mounts"][0]["options"] and "host_path" in data["device_nodes"][0]
        assert edits_from_dict(data) == edits
