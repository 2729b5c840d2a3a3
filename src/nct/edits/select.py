"""Device selection: which GPUs and MIG devices a list of requested ids names.

The one selector of nct, for containers (hook, runtime) and for CDI specs (`cdi generate
--device-id`). For a container it follows libnvidia-container's rules: `all` (any case)
selects every GPU and MIG device; otherwise each id is tried as a GPU (GPU- UUID any case,
PCI bus id, index) and then as a MIG device (MIG- UUID, `i:j`), which also selects its
parent GPU. For a spec (`spec=True`) it follows upstream's nvcdi: `all` is every GPU
without MIG and every MIG device, `none` is allowed, PCI bus ids are not, and devices come
in node order. Anything else is an "unknown device" error naming the id. Excluded GPUs are
invisible, as they are to NVML.
"""

from __future__ import annotations


from nct.driver.model import Gpu, MigDevice, Node
from nct.driver.procfs import normalise_bus_id
from nct.errors import RequestError
from nct.record import Record
from nct.limits import is_number, shown

TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Iterable

# Compiled (and cached by re) on first use: `all` and plain indices need neither.


class Selection(Record):
    """Selected devices in node order; `all` records that `all` was asked for.
    `mig_parents`: indices of GPUs in `gpus` only because one of their MIG devices was
    asked for (they get their /dev/nvidiaN, never the whole GPU's DRM nodes). `none`: a
    spec selection named `none` (the spec gets a `none` device)."""

    gpus: tuple[Gpu, ...] = ()
    migs: tuple[MigDevice, ...] = ()
    all: bool = False
    mig_parents: tuple[int, ...] = ()
    none: bool = False

    def __bool__(self) -> bool:
        return bool(self.gpus or self.migs)


def visible_gpus(node: Node) -> tuple[Gpu, ...]:
    return tuple(g for g in node.gpus if not g.excluded)


def select_devices(node: Node, ids: Iterable[str] | str, *, spec: bool = False) -> Selection:
    """Resolve requested ids (a comma string or a sequence) against the node, in request
    order as libnvidia-container does (node order for a spec). Each id is one dict look-up
    (an index of the node is built once): linear in the number of ids whatever the node's
    size."""
    if isinstance(ids, str):
        ids = ids.split(",")
    gpus = visible_gpus(node)
    if spec:
        return _select_for_spec(node, gpus, ids)
    index: _Index | None = None
    picked_gpus: dict[int, Gpu] = {}  # by id(): ordered sets
    picked_migs: dict[int, MigDevice] = {}
    full: set[int] = set()  # GPUs asked for as a whole, not only as a MIG device's parent
    for raw in ids:
        dev = raw.strip()
        if not dev:
            continue
        if dev.lower() == "all":
            return Selection(gpus=gpus, migs=tuple(m for g in gpus for m in g.migs), all=True)
        if index is None:
            index = _Index(gpus)
        gpu = index.gpu(dev)
        if gpu is not None:
            full.add(gpu.index)
            picked_gpus.setdefault(id(gpu), gpu)
            continue
        found = index.mig(dev)
        if found is not None:
            mig, parent = found
            picked_migs.setdefault(id(mig), mig)
            picked_gpus.setdefault(id(parent), parent)
            continue
        raise UnknownDevice(dev, _why_unknown(node, dev))
    return Selection(gpus=tuple(picked_gpus.values()), migs=tuple(picked_migs.values()),
                     mig_parents=tuple(g.index for g in picked_gpus.values() if g.index not in full))


def _select_for_spec(node: Node, gpus: tuple[Gpu, ...], ids: Iterable[str]) -> Selection:
    index = _Index(gpus)
    picked_gpus: dict[int, Gpu] = {}
    picked_migs: dict[int, MigDevice] = {}
    none = False
    for raw in ids:
        dev = raw.strip()
        low = dev.lower()
        if not dev:
            continue
        if low == "all":
            for g in gpus:
                if not (g.mig_enabled or g.migs):
                    picked_gpus.setdefault(id(g), g)
            for g in gpus:
                for m in g.migs:
                    picked_migs.setdefault(id(m), m)
            continue
        if low == "none":
            none = True
            continue
        gpu = index.gpu(dev, bus=False)
        if gpu is not None:
            picked_gpus.setdefault(id(gpu), gpu)
            continue
        found = index.mig(dev)
        if found is None:
            raise UnknownDevice(dev, _why_unknown(node, dev))
        picked_migs.setdefault(id(found[0]), found[0])
    order = {g.index: i for i, g in enumerate(gpus)}
    return Selection(gpus=tuple(sorted(picked_gpus.values(), key=lambda g: order.get(g.index, 0))),
                     migs=tuple(sorted(picked_migs.values(), key=lambda m: (order.get(m.parent_index, 0), m.ordinal))),
                     none=none)


class UnknownDevice(RequestError):
    """`unknown device: ID`, with the reason when NVML, which alone knows MIG UUIDs, did not
    answer; `device` and `why` let front ends word it their way."""

    def __init__(self, device: str, why: str | None = None):
        super().__init__(f"unknown device: {shown(device)}" + (f" ({why})" if why else ""))
        self.device = device
        self.why = why


def _why_unknown(node: Node, dev: str) -> str | None:
    if dev[:4].upper() != "MIG-" or node.nvml or node.nvml_error is None:
        return None
    return f"MIG UUIDs come from NVML, which is unavailable: {node.nvml_error}"


def nvml_needed(node: Node, ids: Iterable[str] | str, *, mig_profiles: bool = False) -> bool:
    """Whether resolving `ids` needs a fact only NVML has, so that NVML is asked only then:
    a MIG- UUID (procfs has none) or a GPU- UUID no procfs GPU has; with `mig_profiles`
    (spec edits, where a +gfx MIG profile brings DRM nodes) also any selected MIG device.
    Never when NVML was asked already (answered, or `nvml_error` says why not)."""
    if node.nvml or node.nvml_error is not None:
        return False
    if isinstance(ids, str):
        ids = ids.split(",")
    ids = [d.strip() for d in ids]
    index = _Index(visible_gpus(node))
    for dev in ids:
        kind = dev[:4].upper()
        if kind == "MIG-" or (kind == "GPU-" and index.gpu(dev) is None):
            return True
    if mig_profiles:
        try:
            return bool(select_devices(node, ids).migs)
        except RequestError:
            return False
    return False


class _Index:
    """The visible GPUs and MIG devices by every spelling an id may use (first one wins,
    in node order, as a scan would find it)."""

    def __init__(self, gpus: tuple[Gpu, ...]) -> None:
        self.by_uuid: dict[str, Gpu] = {}
        self.by_bus: dict[str, Gpu] = {}
        self.by_index: dict[int, Gpu] = {}
        self.mig_by_uuid: dict[str, tuple[MigDevice, Gpu]] = {}
        self.mig_by_ij: dict[tuple[int, int], tuple[MigDevice, Gpu]] = {}
        for g in gpus:
            self.by_uuid.setdefault(g.uuid.lower(), g)
            bus = normalise_bus_id(g.bus_id)
            if bus is not None:
                self.by_bus.setdefault(bus, g)
            self.by_index.setdefault(g.index, g)
        for g in gpus:
            for m in g.migs:
                entry = (m, self._parent(gpus, m))
                if m.uuid:
                    self.mig_by_uuid.setdefault(m.uuid.lower(), entry)
                self.mig_by_ij.setdefault((g.index, m.ordinal), entry)

    def _parent(self, gpus: tuple[Gpu, ...], mig: MigDevice) -> Gpu:
        return self.by_index.get(mig.parent_index) or next(g for g in gpus if g.index == mig.parent_index)

    def gpu(self, dev: str, *, bus: bool = True) -> Gpu | None:
        """By GPU- UUID, PCI bus id (unless `bus` is False) or index."""
        if dev[:4].upper() == "GPU-" and len(dev) > 4:
            hit = self.by_uuid.get(dev.lower())
            if hit is not None:
                return hit
        pci = normalise_bus_id(dev) if bus else None
        if pci is not None and pci in self.by_bus:
            return self.by_bus[pci]
        if is_number(dev):
            return self.by_index.get(int(dev))
        return None

    def mig(self, dev: str) -> tuple[MigDevice, Gpu] | None:
        if dev[:4].upper() == "MIG-" and len(dev) > 4:
            hit = self.mig_by_uuid.get(dev.lower())
            if hit is not None:
                return hit
        gi, colon, mi = dev.partition(":")
        if colon and is_number(gi) and is_number(mi):
            return self.mig_by_ij.get((int(gi), int(mi)))
        return None
