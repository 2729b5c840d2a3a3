"""Pure planning of a simulated node: GPU facts (bus ids, minors, UUIDs, MIG layout) and
the text of every procfs file, in the formats the real driver uses. No I/O here."""

from __future__ import annotations

import hashlib
import re

from nct.sim.model import MAX_GPUS, MAX_MIGS_PER_GPU, SimError, SimGpu, SimMig

# The one GPU model simulated: an A100 40GB (MIG-capable, compute capability 8.0).
MODEL = "NVIDIA A100-SXM4-40GB"
BRAND, BRAND_CODE = "Nvidia", 14
COMPUTE_CAPABILITY = "8.0"
VIDEO_BIOS = "92.00.45.00.03"

# Bus numbers of a DGX A100; GPUs past eight go to further PCI domains.
DGX_BUSES = (0x07, 0x0F, 0x47, 0x4E, 0x87, 0x90, 0xB7, 0xBD)

# A100-40GB MIG layouts by instance count: (profile, GPU instance ids). Real GI ids are
# not 0..n-1, which keeps consumers honest about gi vs. index.
MIG_LAYOUTS: dict[int, tuple[str, tuple[int, ...]]] = {
    0: ("", ()),
    1: ("7g.40gb", (0,)),
    2: ("3g.20gb", (1, 2)),
    3: ("2g.10gb", (3, 4, 5)),
    4: ("1g.5gb", (7, 8, 9, 10)),
    5: ("1g.5gb", (7, 8, 9, 10, 11)),
    6: ("1g.5gb", (7, 8, 9, 10, 11, 12)),
    7: ("1g.5gb", (7, 8, 9, 10, 11, 12, 13)),
}

# nvidia-caps minors (as in /proc/driver/nvidia-caps/mig-minors): config=1, monitor=2, then
# per GPU minor 15 GPU instances x (1 GI access + 8 CI access).
CAPS_CONFIG_MINOR, CAPS_MONITOR_MINOR = 1, 2
GIS_PER_GPU, CIS_PER_GI = 15, 8
_PER_GI = 1 + CIS_PER_GI
_PER_GPU = GIS_PER_GPU * _PER_GI


def gi_minor(gpu_minor: int, gi: int) -> int:
    return 3 + gpu_minor * _PER_GPU + gi * _PER_GI


def ci_minor(gpu_minor: int, gi: int, ci: int) -> int:
    return gi_minor(gpu_minor, gi) + 1 + ci


def parse_mig_spec(spec: str | None, gpus: int) -> dict[int, int]:
    """MIG spec -> {gpu index: MIG device count}. "" / None: no MIG. "N": every GPU has MIG
    enabled with N devices. "i:N,j:M": only the listed GPUs. N is 0..7 (0 = MIG mode on,
    no instances)."""
    if spec is None or spec.strip() == "":
        return {}
    spec = spec.strip()
    if re.fullmatch(r"\d+", spec):
        count = int(spec)
        _check_count(count, spec)
        return {i: count for i in range(gpus)}
    out: dict[int, int] = {}
    for part in spec.split(","):
        m = re.fullmatch(r"\s*(\d+)\s*:\s*(\d+)\s*", part)
        if not m:
            raise SimError(f"invalid --mig spec {spec!r}: expected N or GPU:N[,GPU:N...]")
        gpu, count = int(m.group(1)), int(m.group(2))
        if gpu >= gpus:
            raise SimError(f"invalid --mig spec {spec!r}: GPU {gpu} does not exist (node has {gpus})")
        if gpu in out:
            raise SimError(f"invalid --mig spec {spec!r}: GPU {gpu} given twice")
        _check_count(count, spec)
        out[gpu] = count
    return out


def _check_count(count: int, spec: str) -> None:
    if count > MAX_MIGS_PER_GPU:
        raise SimError(f"invalid --mig spec {spec!r}: at most {MAX_MIGS_PER_GPU} MIG devices per GPU")


def make_uuid(seed: str, what: str) -> str:
    h = hashlib.sha256(f"nct-sim:{seed}:{what}".encode()).hexdigest()
    return f"{h[0:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


MINOR_ORDERS = ("index", "reverse")


def plan_gpus(count: int, mig: dict[int, int], seed: str, minor_order: str = "index") -> tuple[SimGpu, ...]:
    """GPU i (bus-id order) gets minor i, or count-1-i with minor_order "reverse" (real
    drivers number minors in probe order, which need not match bus order)."""
    if not 0 <= count <= MAX_GPUS:
        raise SimError(f"invalid --gpus {count}: must be 0..{MAX_GPUS}")
    if minor_order not in MINOR_ORDERS:
        raise SimError(f"invalid --minor-order {minor_order!r}: expected one of {', '.join(MINOR_ORDERS)}")
    gpus = []
    for i in range(count):
        domain, bus = i // len(DGX_BUSES), DGX_BUSES[i % len(DGX_BUSES)]
        minor = i if minor_order == "index" else count - 1 - i
        migs: list[SimMig] = []
        if i in mig:
            profile, gis = MIG_LAYOUTS[mig[i]]
            for j, gi in enumerate(gis):
                migs.append(SimMig(
                    index=j, gi=gi, ci=0, gi_minor=gi_minor(minor, gi), ci_minor=ci_minor(minor, gi, 0),
                    profile=profile, uuid="MIG-" + make_uuid(seed, f"mig{i}:{gi}:0"),
                ))
        gpus.append(SimGpu(
            index=i, minor=minor, uuid="GPU-" + make_uuid(seed, f"gpu{i}"),
            bus_id=f"{domain:08x}:{bus:02x}:00.0", proc_bus=f"{domain:04x}:{bus:02x}:00.0",
            model=MODEL, brand=BRAND, brand_code=BRAND_CODE, compute_capability=COMPUTE_CAPABILITY,
            card_minor=i, render_minor=128 + i, mig_enabled=i in mig, migs=tuple(migs),
        ))
    return tuple(gpus)


# --- procfs texts -------------------------------------------------------------------------

def version_text(driver_version: str, arch: str = "x86_64") -> str:
    return (
        f"NVRM version: NVIDIA UNIX {arch} Kernel Module  {driver_version}  "
        "Tue Mar  5 22:23:56 UTC 2024\n"
        "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14) \n"
    )


PARAMS = (
    ("ResmanDebugLevel", "4294967295"), ("RmLogonRC", "1"), ("ModifyDeviceFiles", "1"),
    ("DeviceFileUID", "0"), ("DeviceFileGID", "0"), ("DeviceFileMode", "438"),
    ("InitializeSystemMemoryAllocations", "1"), ("UsePageAttributeTable", "4294967295"),
    ("EnableMSI", "1"), ("EnablePCIeGen3", "0"), ("MemoryPoolSize", "0"),
    ("KMallocHeapMaxSize", "0"), ("VMallocHeapMaxSize", "0"), ("IgnoreMMIOCheck", "0"),
    ("TCEBypassMode", "0"), ("EnableStreamMemOPs", "0"), ("EnableUserNUMAManagement", "1"),
    ("NvLinkDisable", "0"), ("RmProfilingAdminOnly", "1"), ("PreserveVideoMemoryAllocations", "0"),
    ("EnableS0ixPowerManagement", "0"), ("S0ixPowerManagementVideoMemoryThreshold", "256"),
    ("DynamicPowerManagement", "3"), ("DynamicPowerManagementVideoMemoryThreshold", "200"),
    ("RegisterPCIDriver", "1"), ("EnablePCIERelaxedOrderingMode", "0"), ("EnableResizableBar", "0"),
    ("EnableGpuFirmware", "18"), ("EnableGpuFirmwareLogs", "2"), ("RmNvlinkBandwidthLinkCount", "0"),
    ("EnableDbgBreakpoint", "0"), ("OpenRmEnableUnsupportedGpus", "1"), ("DmaRemapPeerMmio", "1"),
    ("ImexChannelCount", "2048"), ("CreateImexChannel0", "0"), ("GrdmaPciTopoCheckOverride", "0"),
    ("RegistryDwords", '""'), ("RegistryDwordsPerDevice", '""'), ("RmMsg", '""'),
    ("GpuBlacklist", '""'), ("TemporaryFilePath", '""'), ("ExcludedGpus", '""'),
)


def params_text() -> str:
    return "".join(f"{k}: {v}\n" for k, v in PARAMS)


REGISTRY_TEXT = 'Binary: ""\n'


def information_text(gpu: SimGpu) -> str:
    """/proc/driver/nvidia/gpus/<bus>/information, the driver's tab/space layout."""
    return (
        f"Model: \t\t {gpu.model}\n"
        f"IRQ:   \t\t {64 + gpu.index}\n"
        f"GPU UUID: \t {gpu.uuid}\n"
        f"Video BIOS: \t {VIDEO_BIOS}\n"
        "Bus Type: \t PCIe\n"
        "DMA Size: \t 47 bits\n"
        "DMA Mask: \t 0x7fffffffffff\n"
        f"Bus Location: \t {gpu.proc_bus}\n"
        f"Device Minor: \t {gpu.minor}\n"
        "GPU Excluded:\t No\n"
    )


def nct_sim_text(gpu: SimGpu) -> str:
    """Facts procfs lacks, for the simulated NVML: /proc/driver/nvidia/gpus/<bus>/nct-sim."""
    lines = [
        f"Brand: {gpu.brand_code}",
        f"Compute Capability: {gpu.compute_capability}",
        f"MIG Mode: {1 if gpu.mig_enabled else 0}",
        f"MIG Max Devices: {MAX_MIGS_PER_GPU if gpu.mig_enabled else 0}",
    ]
    lines += [
        f"MIG Device: {m.gi} {m.ci} {m.gi_minor} {m.ci_minor} {m.profile} {m.uuid}" for m in gpu.migs
    ]
    return "\n".join(lines) + "\n"


def trailer(gpus: tuple[SimGpu, ...]) -> bytes:
    """The node description appended to the simulated libnvidia-ml/libcuda (see simnode.h)."""
    body = "%%\n".join(
        f"Model: {g.model}\nGPU UUID: {g.uuid}\nBus Location: {g.proc_bus}\nDevice Minor: {g.minor}\n"
        + nct_sim_text(g)
        for g in gpus
    ).encode()
    body = b"\n" + body + b"%%\n"
    return body + b"NCTSIM" + b"%010d" % len(body) + b"\n"


def caps_text(minor: int, mode: int = 0o444) -> str:
    return f"DeviceFileMinor: {minor}\nDeviceFileMode: {mode}\nDeviceFileModify: 1\n"


def mig_minors_text(gpu_minors: list[int]) -> str:
    lines = [f"config {CAPS_CONFIG_MINOR}", f"monitor {CAPS_MONITOR_MINOR}"]
    for m in gpu_minors:
        for gi in range(GIS_PER_GPU):
            lines.append(f"gpu{m}/gi{gi}/access {gi_minor(m, gi)}")
            lines += [f"gpu{m}/gi{gi}/ci{ci}/access {ci_minor(m, gi, ci)}" for ci in range(CIS_PER_GI)]
    return "\n".join(lines) + "\n"


# /proc/modules of a node with the driver loaded (so --load-kmods never runs a modprobe).
MODULES_TEXT = (
    "nvidia_uvm 1630208 0 - Live 0x0000000000000000 (POE)\n"
    "nvidia_drm 118784 0 - Live 0x0000000000000000 (POE)\n"
    "nvidia_modeset 1638400 1 nvidia_drm, Live 0x0000000000000000 (POE)\n"
    "nvidia 56623104 2 nvidia_uvm,nvidia_modeset, Live 0x0000000000000000 (POE)\n"
)

# Host-like entries of /proc/devices around the NVIDIA ones.
HOST_CHAR_DEVICES = (
    (1, "mem"), (4, "/dev/vc/0"), (4, "tty"), (4, "ttyS"), (5, "/dev/tty"), (5, "/dev/console"),
    (5, "/dev/ptmx"), (7, "vcs"), (10, "misc"), (13, "input"), (29, "fb"), (89, "i2c"),
    (128, "ptm"), (136, "pts"), (180, "usb"), (189, "usb_device"),
)
HOST_BLOCK_DEVICES = ((7, "loop"), (8, "sd"), (9, "md"), (11, "sr"), (65, "sd"), (259, "blkext"))

# The NVIDIA names in /proc/devices with their preferred dynamic majors.
DYNAMIC_NAMES = ("nvidia-uvm", "nvidia-caps", "nvidia-caps-imex-channels", "nvidia-nvlink", "nvidia-nvswitch")


def choose_majors(host_taken: set[int]) -> dict[str, int]:
    """195 for the GPU frontend, 226 for DRM; dynamic majors counted down from 511 skipping
    every major the host has registered, so opening a simulated node never reaches a real
    host driver (it fails with ENXIO)."""
    majors = {"nvidia-frontend": 195, "drm": 226}
    candidate = 511
    for name in DYNAMIC_NAMES:
        while candidate in host_taken:
            candidate -= 1
        majors[name] = candidate
        candidate -= 1
    return majors


def devices_text(majors: dict[str, int]) -> str:
    chars = list(HOST_CHAR_DEVICES) + [(m, n) for n, m in majors.items()]
    chars.sort(key=lambda e: e[0])
    out = ["Character devices:"] + [f"{m:3d} {n}" for m, n in chars]
    out += ["", "Block devices:"] + [f"{m:3d} {n}" for m, n in HOST_BLOCK_DEVICES]
    return "\n".join(out) + "\n"


def parse_proc_devices(text: str) -> set[int]:
    """Majors registered in a /proc/devices text (both sections)."""
    taken = set()
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0].isdigit():
            taken.add(int(parts[0]))
    return taken
