"""The official JSON schemas, for tests only: the OCI runtime spec (tests/schemas/oci:
config-schema.json and its defs files) and CDI (tests/schemas/cdi). Resolved through a
local `referencing` registry: nothing is fetched.

nct itself does not ship them nor jsonschema (the test extra installs it): its strict CDI
loader (nct.cdi.spec.validate_spec) checks a superset of the CDI schema, as upstream
validates with its own Go code, and the OCI documents nct writes are checked here against
the schema by the tests that make them. Pass `check_schema` as `check=` to
nct.cdi.spec.load_spec / spec_from_data / nct.cdi.registry.Registry to apply the CDI schema
to what they read.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

from nct.errors import SpecError

SCHEMAS = Path(__file__).resolve().parent / "schemas"


def _registry(directory: Path, draft):
    from referencing import Registry, Resource

    resources = []
    for path in sorted(directory.glob("*.json")):
        resources.append((path.name, Resource.from_contents(json.loads(path.read_text()), default_specification=draft)))
    return Registry().with_resources(resources)


@functools.lru_cache(maxsize=None)
def _oci_validator():
    import jsonschema
    from referencing.jsonschema import DRAFT4

    registry = _registry(SCHEMAS / "oci", DRAFT4)
    return jsonschema.Draft4Validator(registry.contents("config-schema.json"), registry=registry)


@functools.lru_cache(maxsize=None)
def _cdi_validator():
    import jsonschema
    from referencing.jsonschema import DRAFT7

    registry = _registry(SCHEMAS / "cdi", DRAFT7)
    return jsonschema.Draft7Validator(registry.contents("schema.json"), registry=registry)


def _where(path) -> str:
    return "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path)


def oci_schema_errors(spec: object) -> list[str]:
    """Every OCI schema violation as 'json.path: message', best first; [] when valid."""
    errors = sorted(_oci_validator().iter_errors(spec), key=lambda e: (len(e.absolute_path), str(e.absolute_path)))
    return [f"{_where(e.absolute_path)}: {e.message}" for e in errors]


def validate_oci_spec(spec: object, source: str = "config.json") -> None:
    """SpecError naming the first violation when `spec` is not a valid OCI runtime spec."""
    errors = oci_schema_errors(spec)
    if errors:
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise SpecError(f"{source}: not a valid OCI spec: {errors[0]}{more}")


def schema_errors(doc: object) -> list[str]:
    """Violations of the official CDI JSON schema, as 'path: message'; [] when valid."""
    errs = sorted(_cdi_validator().iter_errors(doc), key=lambda e: list(map(str, e.absolute_path)))
    return [f"{_where(e.absolute_path)}: {e.message}" for e in errs]


def check_schema(doc: object, source: str = "<spec>") -> None:
    """SpecError naming the first violation of the CDI schema."""
    errs = schema_errors(doc)
    if errs:
        raise SpecError(f"{source}: does not match the CDI schema: {errs[0]}")
