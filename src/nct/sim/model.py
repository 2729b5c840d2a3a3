"""The simulated node's description (what `nct sim create` made), as stored in
DIR/node.json. Tests and other areas read it to know what discovery should find."""

from __future__ import annotations

import os
from nct.record import Record, field

from nct.errors import NctError

DEFAULT_DRIVER_VERSION = "550.54.15"
DEFAULT_CUDA_VERSION = "12.4"
MAX_GPUS = 64
MAX_MIGS_PER_GPU = 7


class SimError(NctError):
    """Bad input to `nct sim` (gpu count, MIG spec, target dir) or a failed build step."""


class SimMig(Record):
    """One MIG device: GPU instance `gi` with compute instance `ci`; `index` is its position
    on the parent (the j of upstream's i:j name)."""

    index: int
    gi: int
    ci: int
    gi_minor: int  # /dev/nvidia-caps/nvidia-cap<gi_minor> = gpuN/giG/access
    ci_minor: int  # ... = gpuN/giG/ciC/access
    profile: str
    uuid: str


class SimGpu(Record):
    index: int
    minor: int
    uuid: str
    bus_id: str  # NVML form, 8-digit domain: 00000000:07:00.0
    proc_bus: str  # /proc/driver/nvidia/gpus/<proc_bus>, 4-digit domain: 0000:07:00.0
    model: str
    brand: str  # NVML brand name, e.g. "Nvidia"
    brand_code: int  # nvmlBrandType_t value
    compute_capability: str  # "8.0"
    card_minor: int  # /dev/dri/card<card_minor>
    render_minor: int  # /dev/dri/renderD<render_minor>
    mig_enabled: bool = False
    migs: tuple[SimMig, ...] = ()

    @property
    def device_path(self) -> str:
        return f"/dev/nvidia{self.minor}"


class SimNode(Record):
    """A simulated node on disk: `dir` holds node.json and `root` (laid out like /)."""

    dir: str
    driver_version: str
    cuda_version: str
    arch: str
    seed: str
    gpus: tuple[SimGpu, ...]
    majors: dict[str, int] = field(default_factory=dict)
    imex_channels: int = 0
    lib32: bool = False
    files: dict[str, list[str]] = field(default_factory=dict)

    @property
    def root(self) -> str:
        return os.path.join(self.dir, "root")

    @property
    def migs(self) -> list[SimMig]:
        return [m for g in self.gpus for m in g.migs]

    def path(self, node_path: str) -> str:
        """Host path of a path of the simulated node (e.g. /dev/nvidia0)."""
        return os.path.join(self.root, node_path.lstrip("/"))

    def roots(self):
        """Discovery roots for reading this node without a namespace."""
        from nct.driver.model import Roots

        return Roots(driver=self.root, dev=self.root, proc=os.path.join(self.root, "proc"))

    def to_json(self) -> dict:
        return {
            "format": 1,
            "root": "root",
            "driver_version": self.driver_version,
            "cuda_version": self.cuda_version,
            "arch": self.arch,
            "seed": self.seed,
            "majors": dict(self.majors),
            "imex_channels": self.imex_channels,
            "lib32": self.lib32,
            "gpus": [
                {
                    "index": g.index, "minor": g.minor, "uuid": g.uuid, "bus_id": g.bus_id,
                    "proc_bus": g.proc_bus, "model": g.model, "brand": g.brand,
                    "brand_code": g.brand_code, "compute_capability": g.compute_capability,
                    "card_minor": g.card_minor, "render_minor": g.render_minor,
                    "device": g.device_path, "mig_enabled": g.mig_enabled,
                    "migs": [
                        {"index": m.index, "gi": m.gi, "ci": m.ci, "gi_minor": m.gi_minor,
                         "ci_minor": m.ci_minor, "profile": m.profile, "uuid": m.uuid}
                        for m in g.migs
                    ],
                }
                for g in self.gpus
            ],
            "files": {k: list(v) for k, v in self.files.items()},
        }

    @classmethod
    def from_json(cls, directory: str, data: dict) -> "SimNode":
        gpus = tuple(
            SimGpu(
                index=g["index"], minor=g["minor"], uuid=g["uuid"], bus_id=g["bus_id"],
                proc_bus=g["proc_bus"], model=g["model"], brand=g["brand"],
                brand_code=g["brand_code"], compute_capability=g["compute_capability"],
                card_minor=g["card_minor"], render_minor=g["render_minor"],
                mig_enabled=g["mig_enabled"],
                migs=tuple(SimMig(**m) for m in g["migs"]),
            )
            for g in data["gpus"]
        )
        return cls(
            dir=directory, driver_version=data["driver_version"], cuda_version=data["cuda_version"],
            arch=data["arch"], seed=data["seed"], gpus=gpus, majors=dict(data["majors"]),
            imex_channels=data.get("imex_channels", 0), lib32=data.get("lib32", False),
            files={k: list(v) for k, v in data.get("files", {}).items()},
        )
