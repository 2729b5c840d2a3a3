"""CDI spec directories: load, resolve qualified device names, inject into OCI specs.

Directories are read in the order given; a later directory has higher priority (the
default /etc/cdi then /var/run/cdi). Within a directory, files are read in name order
(*.json, *.yaml; subdirectories ignored). A bad file is reported and skipped, never fatal
to the rest. A device defined in two files of the same priority is a conflict: it is
dropped and reported; otherwise the higher priority wins."""

from __future__ import annotations

import os
from nct.record import Record, field
TYPE_CHECKING = False  # not `typing` at run time: ~10 ms of the runtime's create
if TYPE_CHECKING:
    from typing import Iterable, Sequence

    from nct.cdi.spec import DocCheck

from nct.cdi.spec import SPEC_EXTENSIONS, Spec, load_spec
from nct.errors import SpecError

DEFAULT_SPEC_DIRS = ("/etc/cdi", "/var/run/cdi")


class Registry(Record, frozen=False):
    """All specs in `spec_dirs`, after `refresh()` (done on construction)."""

    spec_dirs: Sequence[str] = DEFAULT_SPEC_DIRS
    check: DocCheck | None = None  # an extra check of each file (the tests' CDI schema); no cache
    specs: list[Spec] = field(default_factory=list, init=False)
    devices: dict[str, tuple[Spec, dict]] = field(default_factory=dict, init=False)
    errors: list[str] = field(default_factory=list, init=False)

    def __post_init__(self) -> None:
        self.refresh()

    def refresh(self) -> None:
        from nct.hostcache import SpecCache

        self.specs, self.devices, self.errors = [], {}, []
        conflicts: dict[str, int] = {}  # device -> priority at which two files define it
        cache = SpecCache()
        for prio, directory in enumerate(self.spec_dirs):
            for path in spec_files(directory):
                try:
                    spec = load_spec(path, priority=prio, check=self.check, cache=cache)
                except SpecError as e:
                    self.errors.append(str(e))
                    continue
                self.specs.append(spec)
                for qn, dev in zip(spec.qualified_names(), spec.raw["devices"]):
                    old = self.devices.get(qn)
                    if old is not None and old[0].priority > prio:
                        continue
                    if old is not None and old[0].priority == prio:
                        self.errors.append(f"conflicting device {qn} (specs {old[0].path}, {path})")
                        conflicts[qn] = prio
                    self.devices[qn] = (spec, dev)
        for qn, prio in conflicts.items():  # a higher-priority definition still wins
            if self.devices[qn][0].priority == prio:
                del self.devices[qn]
        cache.save()

    def device_names(self) -> list[str]:
        return sorted(self.devices)

    def resolve(self, requested: Iterable[str]) -> tuple[list[tuple[Spec, dict]], list[str]]:
        """(found (spec, device) pairs in request order, unresolved names)."""
        found, missing = [], []
        for name in requested:
            hit = self.devices.get(name)
            if hit is None:
                missing.append(name)
            else:
                found.append(hit)
        return found, missing

    def edits_for(self, requested: Iterable[str]) -> list[dict]:
        """CDI containerEdits to apply, in order: each spec's own edits once (before its
        first device), then each device's. SpecError naming unresolvable devices."""
        requested = list(dict.fromkeys(requested))
        found, missing = self.resolve(requested)
        if missing:
            raise SpecError("unresolvable CDI devices " + ", ".join(missing))
        out: list[dict] = []
        seen: set[int] = set()  # ids of the specs whose own edits are in: linear
        for spec, dev in found:
            if id(spec) not in seen:
                seen.add(id(spec))
                if spec.edits:
                    out.append(spec.edits)
            out.append(dev["containerEdits"])
        return out

    def inject(self, oci_spec: dict, requested: Iterable[str]) -> dict:
        """Apply the requested devices to `oci_spec` (in place; returned)."""
        from nct.cdi.inject import apply_cdi_edits

        combined = _append_edits(self.edits_for(requested))
        try:
            return apply_cdi_edits(oci_spec, combined)
        except SpecError as e:
            raise SpecError(f"failed to inject CDI devices: {e}") from None


def _append_edits(parts: list[dict]) -> dict:
    """Concatenate containerEdits as the reference library does (no dedup: applying
    handles repeats by replacing same-key env, same-path nodes and mounts)."""
    out: dict = {}
    for e in parts:
        for k in ("env", "deviceNodes", "mounts", "hooks", "additionalGids", "netDevices"):
            if e.get(k):
                out.setdefault(k, []).extend(e[k])
        if e.get("intelRdt") is not None:
            out["intelRdt"] = e["intelRdt"]
    return out


def spec_files(directory: str) -> list[str]:
    """Spec files directly in `directory`, by name; [] when it does not exist."""
    try:
        entries = sorted(os.scandir(directory), key=lambda e: e.name)
    except (FileNotFoundError, NotADirectoryError):
        return []
    except OSError:
        return []
    out = []
    for e in entries:
        if os.path.splitext(e.name)[1] not in SPEC_EXTENSIONS:
            continue
        try:
            if e.is_dir():
                continue
        except OSError:
            continue
        out.append(e.path)
    return out


def inject(oci_spec: dict, requested: Iterable[str], spec_dirs: Sequence[str] = DEFAULT_SPEC_DIRS) -> dict:
    """One-shot: load `spec_dirs` and inject `requested` qualified names into `oci_spec`."""
    return Registry(spec_dirs).inject(oci_spec, requested)
