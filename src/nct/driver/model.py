"""The node model: one immutable description of "what this node has".

Produced once by `nct.driver.discover.discover_node`; read by the planner (hook, runtime
JIT-CDI), the CDI generator and `nvidia-container-cli info|list`. Paths in the model are
host paths (already prefixed with the driver/dev root); `container_path` fields say where a
file appears inside a container.
"""

from __future__ import annotations

import os

from nct.driver.rootpath import host_path
from nct.record import Record, field

# Capabilities of NVIDIA_DRIVER_CAPABILITIES, in upstream's sorted order.
ALL_CAPABILITIES: tuple[str, ...] = (
    "compat32", "compute", "display", "graphics", "ngx", "utility", "video",
)
DEFAULT_CAPABILITIES: tuple[str, ...] = ("compute", "utility")


def native_machine() -> str:
    """The host's machine name (uname), which picks the ABI of the driver files looked for."""
    return os.uname().machine or "x86_64"


class Roots(Record):
    """Where the node's files are looked up. A driver container mounts its files at
    `driver` (e.g. /run/nvidia/driver); `dev` is where /dev nodes live (defaults to driver);
    `proc` is the procfs to read NVIDIA state from (env NCT_PROC_ROOT, default /proc)."""

    driver: str = "/"
    dev: str = "/"
    proc: str = "/proc"

    def host(self, path: str, root: str | None = None) -> str:
        """Join an absolute node path onto a root ("/" leaves it unchanged)."""
        return host_path(self.driver if root is None else root, path)


class DeviceNode(Record):
    """A character device node on the host. `path` is the path inside a container
    (/dev/nvidia0); `host_path` is where it is on the host (may be under a dev root)."""

    path: str
    host_path: str
    major: int
    minor: int
    mode: int = 0o666  # permission bits of the host node
    uid: int = 0
    gid: int = 0
    type: str = "c"


class MigDevice(Record):
    """A MIG compute instance: GPU instance `gi`, compute instance `ci` on GPU `parent_index`.
    Access to it is granted through two nvidia-caps nodes (GI access, CI access)."""

    parent_index: int
    gi: int
    ci: int
    gi_access: DeviceNode  # /dev/nvidia-caps/nvidia-cap<minor> for gpuN/giG/access
    ci_access: DeviceNode  # ... for gpuN/giG/ciC/access
    gi_access_proc: str  # /proc/driver/nvidia/capabilities/gpuN/mig/giG/access (host path)
    ci_access_proc: str  # .../giG/ciC/access
    uuid: str | None = None  # MIG-... from NVML when available
    profile: str | None = None  # e.g. "1g.10gb" (NVML), "+gfx" profiles get DRM nodes

    @property
    def index_name(self) -> str:
        """Upstream's `i:j` name: parent GPU index and MIG index on that GPU."""
        return f"{self.parent_index}:{self.ordinal}"

    ordinal: int = 0  # position among the parent's MIG devices (the j of i:j)


class Gpu(Record):
    """One full GPU from /proc/driver/nvidia/gpus/<bus>/information (+ NVML extras)."""

    index: int  # position in bus-id order, as nvidia-smi and NVML number them
    minor: int  # Device Minor -> /dev/nvidia<minor>
    uuid: str  # GPU-xxxxxxxx-...
    model: str
    bus_id: str  # normalised "00000000:01:00.0"
    proc_dir: str  # host path of /proc/driver/nvidia/gpus/<bus>
    device: DeviceNode  # /dev/nvidia<minor>
    excluded: bool = False
    brand: str | None = None  # GeForce, Tesla, ... (NVML), None when unknown
    architecture: str | None = None  # compute capability "8.0" (NVML), None when unknown
    drm: tuple[DeviceNode, ...] = ()  # /dev/dri/cardN, /dev/dri/renderDN of this GPU
    mig_enabled: bool = False
    migs: tuple[MigDevice, ...] = ()


class DriverFile(Record):
    """A driver file to expose in containers: library, binary, IPC socket, firmware, config.

    kind: "lib" (native arch), "lib32", "bin", "ipc", "firmware", "config", "xorg".
    capability: the NVIDIA_DRIVER_CAPABILITIES value that selects it ("utility", "compute",
    ...); None for files every GPU container gets (firmware) or gated by other options.
    """

    kind: str
    host_path: str  # real file on the host (driver root applied), symlinks resolved
    container_path: str  # where it appears in the container (driver root stripped)
    capability: str | None = None
    name: str = ""  # catalogue name, e.g. "libcuda.so" or "nvidia-smi"
    soname: str | None = None  # ELF SONAME of a library, e.g. "libcuda.so.1"


class Node(Record):
    """Everything discovery found. Built by discover_node(); never mutated."""

    roots: Roots
    driver_version: str  # NVRM version, e.g. "550.54.15"
    cuda_version: str | None  # "12.4" (from libcuda/NVML) or None when unknown
    gpus: tuple[Gpu, ...]
    control_devices: tuple[DeviceNode, ...]  # nvidiactl, nvidia-uvm, -uvm-tools, -modeset (existing)
    majors: dict[str, int] = field(default_factory=dict)  # /proc/devices names -> major
    files: tuple[DriverFile, ...] = ()  # libs, libs32, bins, ipcs, firmware, configs
    imex_channels: tuple[DeviceNode, ...] = ()
    mig_config: tuple[str, ...] = ()  # host paths of capabilities/mig/config (+ node)
    mig_monitor: tuple[str, ...] = ()
    caps_devices: tuple[DeviceNode, ...] = ()  # every /dev/nvidia-caps/nvidia-cap* node
    nvml: bool = False  # whether NVML added facts
    nvml_error: str | None = None  # why it did not, when it was asked
    lib_dirs: tuple[str, ...] = ()  # host dirs holding the native driver libraries
