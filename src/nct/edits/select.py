"""Device selection: which GPUs and MIG devices a list of requested ids names.

Follows libnvidia-container's rules: `all` (any case) selects every GPU and MIG device;
otherwise each id is tried as a GPU (GPU- UUID any case, PCI bus id, index) and then as a
MIG device (MIG- UUID, `i:j`), which also selects its parent GPU. Anything else is an
"unknown device" error naming the id. Excluded GPUs are invisible, as they are to NVML.
"""

from __future__ import annotations


from nct.driver.model import Gpu, MigDevice, Node
from nct.driver.procfs import split_pci_address
from nct.errors import RequestError
from nct.record import Record

TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Iterable

# Compiled (and cached by re) on first use: `all` and plain indices need neither.


class Selection(Record):
    """Selected devices in node order; `all` records that `all` was asked for.
    `mig_parents`: indices of GPUs in `gpus` only because one of their MIG devices was
    asked for (they get their /dev/nvidiaN, never the whole GPU's DRM nodes)."""

    gpus: tuple[Gpu, ...] = ()
    migs: tuple[MigDevice, ...] = ()
    all: bool = False
    mig_parents: tuple[int, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.gpus or self.migs)


def normalise_bus_id(value: str) -> str | None:
    """"0:1:0.0" / "0000:01:00.0" -> "00000000:01:00.0" (function forced to 0, as upstream);
    None when `value` is not a PCI address with a domain."""
    pci = split_pci_address(value.strip())
    if pci is None:
        return None
    return f"{pci[0]:08x}:{pci[1]:02x}:{pci[2]:02x}.0"


def visible_gpus(node: Node) -> tuple[Gpu, ...]:
    return tuple(g for g in node.gpus if not g.excluded)


def select_devices(node: Node, ids: Iterable[str] | str) -> Selection:
    """Resolve requested ids (a comma string or a sequence) against the node, in request
    order as libnvidia-container does."""
    if isinstance(ids, str):
        ids = ids.split(",")
    gpus = visible_gpus(node)
    picked_gpus: list[Gpu] = []
    picked_migs: list[MigDevice] = []
    full: set[int] = set()
    for raw in ids:
        dev = raw.strip()
        if not dev:
            continue
        if dev.lower() == "all":
            return Selection(gpus=gpus, migs=tuple(m for g in gpus for m in g.migs), all=True)
        gpu = _find_gpu(gpus, dev)
        if gpu is not None:
            full.add(gpu.index)
            if gpu not in picked_gpus:
                picked_gpus.append(gpu)
            continue
        mig = _find_mig(gpus, dev)
        if mig is not None:
            if mig not in picked_migs:
                picked_migs.append(mig)
            parent = next(g for g in gpus if g.index == mig.parent_index)
            if parent not in picked_gpus:
                picked_gpus.append(parent)
            continue
        raise RequestError(f"unknown device: {dev}")
    return Selection(gpus=tuple(picked_gpus), migs=tuple(picked_migs),
                     mig_parents=tuple(g.index for g in picked_gpus if g.index not in full))


def _find_gpu(gpus: tuple[Gpu, ...], dev: str) -> Gpu | None:
    if dev[:4].upper() == "GPU-" and len(dev) > 4:
        for g in gpus:
            if g.uuid.lower() == dev.lower():
                return g
    bus = normalise_bus_id(dev)
    if bus is not None:
        for g in gpus:
            if normalise_bus_id(g.bus_id) == bus:
                return g
    if dev.isascii() and dev.isdigit():
        n = int(dev)
        for g in gpus:
            if g.index == n:
                return g
    return None


def _find_mig(gpus: tuple[Gpu, ...], dev: str) -> MigDevice | None:
    if dev[:4].upper() == "MIG-" and len(dev) > 4:
        for g in gpus:
            for m in g.migs:
                if m.uuid and m.uuid.lower() == dev.lower():
                    return m
    gi, colon, mi = dev.partition(":")
    if colon and gi.isascii() and gi.isdigit() and mi.isascii() and mi.isdigit():
        i, j = int(gi), int(mi)
        for g in gpus:
            if g.index == i:
                for mig in g.migs:
                    if mig.ordinal == j:
                        return mig
    return None
