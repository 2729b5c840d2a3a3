"""ContainerEdits as plain JSON-able data: `nvidia-container-cli configure --dry-run` output
(lossless: tests/edits/test_edits_dump.py reads it back into the same plan)."""

from __future__ import annotations

import json
from nct.record import asdict

from nct.edits.model import ContainerEdits


def edits_to_dict(edits: ContainerEdits) -> dict:
    """Field names as in the model; tuples become lists."""
    return asdict(edits)


def edits_to_json(edits: ContainerEdits, indent: int | None = 2) -> str:
    return json.dumps(edits_to_dict(edits), indent=indent, sort_keys=False)
