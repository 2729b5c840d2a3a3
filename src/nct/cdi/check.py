"""`nct cdi check`: placeholder until it is assigned.

Meant to report specs in the spec dirs that no longer match the node (driver version
recorded at generation differs, device nodes or files gone). The click wiring lives in
nct.cdi.cli; the implementer replaces the body of `check()`."""

from __future__ import annotations

from dataclasses import dataclass

from nct.errors import NctError


@dataclass(frozen=True)
class CheckOptions:
    spec_dirs: tuple[str, ...] = ("/etc/cdi", "/var/run/cdi")
    driver_root: str | None = None
    dev_root: str | None = None
    config_path: str | None = None


def check(opts: CheckOptions) -> int:
    """Check the specs against the node; returns the exit status (not implemented yet)."""
    raise NctError("cdi check is not implemented yet in this build of nct")
