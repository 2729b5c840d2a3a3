"""The shim's view of a bundle's config.json: nct.oci.bundle's reader and atomic writer,
with upstream's strict decode (fields the OCI spec does not define are an error unless
`features.allow-unknown-oci-spec-fields`; when allowed they are kept as they are)."""

from __future__ import annotations

from nct.errors import SpecError
from nct.limits import shown
from nct.oci.bundle import check_spec_types, read_spec_file, unknown_fields, write_spec_file


def read_spec(path: str, *, strict: bool = True) -> dict:
    """Load config.json; SpecError naming the file on any problem."""
    spec = read_spec_file(path)
    check_spec_types(spec, path)
    if strict:
        unknown = unknown_fields(spec)
        if unknown:
            raise SpecError(
                f"{path}: unknown field {shown(repr(unknown[0]))} in OCI specification "
                "(set features.allow-unknown-oci-spec-fields = true to allow it)"
            )
    return spec


def write_spec(path: str, spec: dict) -> None:
    """Replace path with compact JSON atomically; the original survives any failure. Not
    fsync'ed: runc reads it right after from the page cache, and a bundle does not outlive a
    reboot (engines write config.json the same way); fsync cost ~4 ms per create here, and
    far more on a busy disk."""
    write_spec_file(path, spec, durable=False)
