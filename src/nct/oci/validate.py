"""Validate an OCI spec dict against the runtime-spec JSON schema shipped in
nct/oci/schema/ (config-schema.json + its defs files, resolved through a local
`referencing` registry: nothing is fetched). Loaded lazily: tests and debug checks only."""

from __future__ import annotations

import functools
import json
import os

from nct.errors import SpecError

SCHEMA_DIR = os.path.join(os.path.dirname(__file__), "schema")


@functools.lru_cache(maxsize=None)
def _validator():
    import jsonschema
    from referencing import Registry, Resource
    from referencing.jsonschema import DRAFT4

    resources = []
    for name in sorted(os.listdir(SCHEMA_DIR)):
        if name.endswith(".json"):
            with open(os.path.join(SCHEMA_DIR, name), encoding="utf-8") as f:
                resources.append((name, Resource.from_contents(json.load(f), default_specification=DRAFT4)))
    registry = Registry().with_resources(resources)
    root = registry.contents("config-schema.json")
    return jsonschema.Draft4Validator(root, registry=registry)


def oci_schema_errors(spec: object) -> list[str]:
    """Every schema violation as 'json.path: message', best first; [] when valid."""
    errors = sorted(_validator().iter_errors(spec), key=lambda e: (len(e.absolute_path), str(e.absolute_path)))
    return [f"{_where(e.absolute_path)}: {e.message}" for e in errors]


def validate_oci_spec(spec: object, source: str = "config.json") -> None:
    """SpecError naming the first violation when `spec` is not a valid OCI runtime spec."""
    errors = oci_schema_errors(spec)
    if errors:
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise SpecError(f"{source}: not a valid OCI spec: {errors[0]}{more}")


def _where(path) -> str:
    out = "$"
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else f".{p}"
    return out
