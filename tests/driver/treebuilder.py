"""Tiny driver trees for discovery tests: procfs texts in the driver's formats, real device
nodes (mknod), real ELF libraries (gcc) with SONAME links, and an ld.so.cache made by the
real `ldconfig -r`. Independent of `nct sim` so discovery is tested on its own."""

from __future__ import annotations

import os
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from nct.driver import catalogue
from nct.driver.model import Roots
from nct.record import Record, field

VERSION = "550.54.15"
LIB64 = "/usr/lib/x86_64-linux-gnu"
LIB32 = "/usr/lib/i386-linux-gnu"
BUSES = ("0000:07:00.0", "0000:0f:00.0", "0000:47:00.0", "0000:4e:00.0",
         "0000:87:00.0", "0000:90:00.0", "0000:b7:00.0", "0000:bd:00.0")
MAJORS = {"nvidia-frontend": 195, "nvidia-uvm": 509, "nvidia-caps": 508, "nvidia-caps-imex-channels": 507}


def have_gcc() -> bool:
    return shutil.which("gcc") is not None


def gcc_m32() -> bool:
    try:
        r = subprocess.run(["gcc", "-m32", "-shared", "-x", "c", "-", "-o", "/dev/null"], input=b"int x;",
                           capture_output=True, timeout=60)
        return r.returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def link_lib(out: Path, soname: str | None, *, m32: bool = False, extra: list[str] | None = None) -> Path:
    """A real shared object with the given SONAME (None = no SONAME)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    src = out.parent / (out.name + ".c")
    src.write_text("#include <unistd.h>\nint nct_test_symbol(void) { return (int)getpid(); }\n")
    cmd = ["gcc", "-shared", "-fPIC", "-o", str(out), str(src)]
    if soname:
        cmd.insert(1, f"-Wl,-soname,{soname}")
    if m32:
        cmd.insert(1, "-m32")
    cmd += extra or []
    subprocess.run(cmd, check=True, capture_output=True)
    src.unlink()
    return out


class LibFarm:
    """Every catalogue library built once per test session, copied into trees."""

    def __init__(self, base: Path, version: str = VERSION, m32: bool = True):
        self.base, self.version, self.m32 = base, version, m32
        jobs = []
        for name in catalogue.all_library_names():
            soname = catalogue.soname_for(name, version)
            jobs.append((base / "64" / f"{name}.{version}", soname, False))
            if m32:
                jobs.append((base / "32" / f"{name}.{version}", soname, True))
        for name in catalogue.GRAPHICS_EXTRA_LIBRARIES:
            jobs.append((base / "64" / f"{name}.1.1.1", f"{name}.1", False))
        with ThreadPoolExecutor(max_workers=4) as ex:
            list(ex.map(lambda j: link_lib(j[0], j[1], m32=j[2]), jobs))

    def lib(self, name: str, bits: int = 64) -> Path:
        return self.base / str(bits) / f"{name}.{self.version}"


class Tree(Record, frozen=False):
    root: Path
    version: str = VERSION
    gpus: list[dict] = field(default_factory=list)

    @property
    def roots(self) -> Roots:
        return Roots(driver=str(self.root), dev=str(self.root), proc=str(self.root / "proc"))

    def path(self, p: str) -> Path:
        return self.root / p.lstrip("/")

    def write(self, p: str, text: str | bytes) -> Path:
        f = self.path(p)
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_bytes(text if isinstance(text, bytes) else text.encode())
        return f

    def mknod(self, p: str, major: int, minor: int, mode: int = 0o666) -> None:
        f = self.path(p)
        f.parent.mkdir(parents=True, exist_ok=True)
        if f.exists():
            f.unlink()
        os.mknod(f, 0o020000 | mode, os.makedev(major, minor))
        os.chmod(f, mode)

    def ldconfig(self) -> None:
        self.write("/etc/ld.so.conf", f"{LIB64}\n{LIB32}\n")
        subprocess.run(["ldconfig", "-r", str(self.root), "-C", "/etc/ld.so.cache", "-f", "/etc/ld.so.conf"],
                       check=True, capture_output=True)


def information(model: str, uuid: str, bus: str, minor: int, excluded: bool = False) -> str:
    return (
        f"Model: \t\t {model}\nIRQ:   \t\t {64 + minor}\nGPU UUID: \t {uuid}\nVideo BIOS: \t 92.00.45.00.03\n"
        "Bus Type: \t PCIe\nDMA Size: \t 47 bits\nDMA Mask: \t 0x7fffffffffff\n"
        f"Bus Location: \t {bus}\nDevice Minor: \t {minor}\nGPU Excluded:\t {'Yes' if excluded else 'No'}\n"
    )


def caps(minor: int, mode: int = 256) -> str:
    return f"DeviceFileMinor: {minor}\nDeviceFileMode: {mode}\nDeviceFileModify: 1\n"


def build_tree(root: Path, farm: LibFarm | None, *, gpus: int = 1, mig: dict[int, list[tuple[int, int]]] | None = None,
               version: str = VERSION, lib32: bool = True, bins: bool = True, nodes: bool = True,
               ldconfig: bool = True) -> Tree:
    """A node with `gpus` GPUs (minor = index, bus ids out of order on disk), optional MIG
    instances {gpu: [(gi, ci), ...]}, every catalogue library, binaries, firmware, configs."""
    t = Tree(root, version)
    t.write("/proc/driver/nvidia/version",
            f"NVRM version: NVIDIA UNIX x86_64 Kernel Module  {version}  Tue Mar  5 22:23:56 UTC 2024\n"
            "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14) \n")
    t.write("/proc/driver/nvidia/params", "ModifyDeviceFiles: 1\nDeviceFileUID: 0\nDeviceFileGID: 0\nDeviceFileMode: 438\n")
    chars = [(1, "mem"), (4, "tty"), (10, "misc")] + [(m, n) for n, m in MAJORS.items()] + [(226, "drm")]
    t.write("/proc/devices", "Character devices:\n" + "".join(f"{m:3d} {n}\n" for m, n in sorted(chars))
            + "\nBlock devices:\n  7 loop\n259 blkext\n")
    mig = mig or {}
    minors_lines = ["config 1", "monitor 2"]
    for i in range(gpus):
        bus = BUSES[i % 8] if i < 8 else f"{i // 8:04x}:{BUSES[i % 8][5:]}"
        uuid = f"GPU-{i:08x}-1111-2222-3333-444455556666"
        t.gpus.append({"index": i, "minor": i, "bus": bus, "uuid": uuid})
        t.write(f"/proc/driver/nvidia/gpus/{bus}/information", information("NVIDIA A100-SXM4-40GB", uuid, bus, i))
        if nodes:
            t.mknod(f"/dev/nvidia{i}", 195, i)
            t.mknod(f"/dev/dri/card{i + 1}", 226, i + 1, 0o660)
            t.mknod(f"/dev/dri/renderD{128 + i}", 226, 128 + i, 0o666)
            bp = t.path("/dev/dri/by-path")
            bp.mkdir(parents=True, exist_ok=True)
            os.symlink(f"../card{i + 1}", bp / f"pci-{bus}-card")
            os.symlink(f"../renderD{128 + i}", bp / f"pci-{bus}-render")
        if i in mig:
            t.write(f"/proc/driver/nvidia/capabilities/gpu{i}/mig/.keep", "")
            os.unlink(t.path(f"/proc/driver/nvidia/capabilities/gpu{i}/mig/.keep"))
            for gi, ci in mig[i]:
                gmin, cmin = 3 + i * 135 + gi * 9, 3 + i * 135 + gi * 9 + 1 + ci
                t.write(f"/proc/driver/nvidia/capabilities/gpu{i}/mig/gi{gi}/access", caps(gmin, 292))
                t.write(f"/proc/driver/nvidia/capabilities/gpu{i}/mig/gi{gi}/ci{ci}/access", caps(cmin, 292))
                minors_lines += [f"gpu{i}/gi{gi}/access {gmin}", f"gpu{i}/gi{gi}/ci{ci}/access {cmin}"]
                if nodes:
                    t.mknod(f"/dev/nvidia-caps/nvidia-cap{gmin}", MAJORS["nvidia-caps"], gmin, 0o444)
                    t.mknod(f"/dev/nvidia-caps/nvidia-cap{cmin}", MAJORS["nvidia-caps"], cmin, 0o444)
    if mig:
        t.write("/proc/driver/nvidia/capabilities/mig/config", caps(1, 256))
        t.write("/proc/driver/nvidia/capabilities/mig/monitor", caps(2, 292))
        if nodes:
            t.mknod("/dev/nvidia-caps/nvidia-cap1", MAJORS["nvidia-caps"], 1, 0o400)
            t.mknod("/dev/nvidia-caps/nvidia-cap2", MAJORS["nvidia-caps"], 2, 0o444)
    t.write("/proc/driver/nvidia-caps/mig-minors", "\n".join(minors_lines) + "\n")
    if nodes:
        t.mknod("/dev/nvidiactl", 195, 255)
        t.mknod("/dev/nvidia-uvm", MAJORS["nvidia-uvm"], 0)
        t.mknod("/dev/nvidia-uvm-tools", MAJORS["nvidia-uvm"], 1)
        t.mknod("/dev/nvidia-modeset", 195, 254)
        t.mknod("/dev/nvidia-caps-imex-channels/channel0", MAJORS["nvidia-caps-imex-channels"], 0)
        t.mknod("/dev/nvidia-caps-imex-channels/channel1", MAJORS["nvidia-caps-imex-channels"], 1)
    if farm is not None:
        install_libs(t, farm, lib32=lib32)
        for name in catalogue.GRAPHICS_EXTRA_LIBRARIES:
            dst = t.path(f"{LIB64}/{name}.1.1.1")
            shutil.copy(farm.base / "64" / f"{name}.1.1.1", dst)
            os.symlink(dst.name, dst.parent / f"{name}.1")
    if bins:
        for names in catalogue.BINARIES.values():
            for n in names:
                b = t.write(f"/usr/bin/{n}", "#!/bin/sh\nexit 0\n")
                b.chmod(0o755)
    t.write(f"/lib/firmware/nvidia/{version}/gsp_ga10x.bin", b"\0" * 16)
    t.write(f"/lib/firmware/nvidia/{version}/gsp_tu10x.bin", b"\0" * 16)
    for cfg in ("/usr/share/glvnd/egl_vendor.d/10_nvidia.json", "/etc/vulkan/icd.d/nvidia_icd.json",
                "/etc/OpenCL/vendors/nvidia.icd"):
        t.write(cfg, "{}\n")
    if farm is not None and ldconfig:
        t.ldconfig()
    return t


def install_libs(t: Tree, farm: LibFarm, *, lib32: bool = True, names: list[str] | None = None) -> None:
    for name in names or catalogue.all_library_names():
        for bits, d in ((64, LIB64), (32, LIB32)):
            if bits == 32 and not (lib32 and farm.m32):
                continue
            real = t.path(f"{d}/{name}.{t.version}")
            real.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(farm.lib(name, bits), real)
            soname = catalogue.soname_for(name, t.version)
            if soname != real.name:
                os.symlink(real.name, real.parent / soname)
            os.symlink(soname, real.parent / name)
