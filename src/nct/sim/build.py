"""Compile the simulated driver's libraries and binaries with gcc, once per (sources,
driver version, CUDA version, compiler) and cached, so node creation costs a copy.

Cache: $NCT_SIM_CACHE, else $XDG_CACHE_HOME/nct/sim, else ~/.cache/nct/sim; one directory
per key holding lib64/, lib32/ and bin/."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from nct.record import Record
from pathlib import Path

from nct.driver import catalogue
from nct.sim.model import SimError

CSRC = Path(__file__).resolve().parent / "csrc"

# Libraries the real driver ships without a 32-bit build.
NO_LIB32 = frozenset({
    "libcudadebugger.so", "libnvidia-nscq.so", "libnvidia-pkcs11.so", "libnvidia-pkcs11-openssl3.so",
    "libnvidia-ngx.so", "libnvidia-rtcore.so", "libnvoptix.so", "libnvidia-cbl.so",
    "libnvidia-tileiras.so", "libnvidia-cfg.so", "libnvidia-nvvm.so",
})
# Graphics helper libraries with their own (non-driver) versions: name -> (file version, SONAME major).
EXTRA_LIBS = {
    "libnvidia-egl-gbm.so": ("1.1.1", "1"),
    "libnvidia-egl-wayland.so": ("1.1.13", "1"),
    "libnvidia-egl-wayland2.so": ("1.0.0", "1"),
    "libnvidia-egl-xcb.so": ("1.0.0", "1"),
    "libnvidia-egl-xlib.so": ("1.0.0", "1"),
}
TOOLS = ("nvidia-debugdump", "nvidia-persistenced", "nv-fabricmanager",
         "nvidia-cuda-mps-control", "nvidia-cuda-mps-server")
XORG_MODULES = ("nvidia_drv.so", "libglxserver_nvidia.so")


class LibBuild(Record):
    name: str  # catalogue name, libfoo.so
    filename: str  # libfoo.so.550.54.15
    soname: str
    bits: int  # 64 or 32


def library_builds(driver_version: str, lib32: bool) -> list[LibBuild]:
    out = []
    for bits in (64, 32) if lib32 else (64,):
        for name in catalogue.all_library_names():
            if bits == 32 and name in NO_LIB32:
                continue
            out.append(LibBuild(name, f"{name}.{driver_version}", catalogue.soname_for(name, driver_version), bits))
        if bits == 64:
            for name, (ver, major) in EXTRA_LIBS.items():
                out.append(LibBuild(name, f"{name}.{ver}", f"{name}.{major}", bits))
    return out


def gcc_supports_m32() -> bool:
    """Whether `gcc -m32` can build a shared object here (gcc-multilib installed)."""
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp, "t.c")
        src.write_text("int f(void) { return 0; }\n")
        r = subprocess.run(["gcc", "-m32", "-shared", "-fPIC", "-o", str(Path(tmp, "t.so")), str(src)],
                           capture_output=True)
        return r.returncode == 0


def _cache_root() -> Path:
    if os.environ.get("NCT_SIM_CACHE"):
        return Path(os.environ["NCT_SIM_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base, "nct", "sim")


def _key(driver_version: str, cuda_code: int, lib32: bool) -> str:
    h = hashlib.sha256()
    for f in sorted(CSRC.iterdir()):
        h.update(f.name.encode() + b"\0" + f.read_bytes())
    h.update(f"{driver_version}|{cuda_code}|{lib32}".encode())
    h.update(Path(__file__).read_bytes())
    h.update(repr(catalogue.LIBRARIES).encode() + repr(catalogue.SONAME_MAJOR).encode())
    gcc = subprocess.run(["gcc", "--version"], capture_output=True, text=True)
    h.update(gcc.stdout.encode())
    return h.hexdigest()[:20]


def _gcc(args: list[str]) -> None:
    r = subprocess.run(["gcc", *args], capture_output=True, text=True)
    if r.returncode != 0:
        first = (r.stderr.strip().splitlines() or ["?"])[0]
        raise SimError(f"gcc failed building {args[args.index('-o') + 1]}: {first}")


def _jobs(out: Path, driver_version: str, cuda_code: int, lib32: bool) -> list[list[str]]:
    defs = [f'-DNCT_DRIVER_VERSION="{driver_version}"', f"-DNCT_CUDA_VERSION={cuda_code}"]
    jobs = []
    for lib in library_builds(driver_version, lib32):
        sub = "lib64" if lib.bits == 64 else "lib32"
        srcs = [str(CSRC / "simlib.c")]
        if lib.name == "libnvidia-ml.so":
            srcs.append(str(CSRC / "nvml.c"))
        elif lib.name == "libcuda.so":
            srcs.append(str(CSRC / "cuda.c"))
        jobs.append([
            "-m64" if lib.bits == 64 else "-m32", "-O1", "-shared", "-fPIC", "-fvisibility=default",
            f"-I{CSRC}", *defs, f'-DNCT_LIBNAME="{lib.name}"', f"-Wl,-soname,{lib.soname}",
            "-o", str(out / sub / lib.filename), *srcs, "-Wl,--no-as-needed", "-lc",
        ])
    jobs.append(["-O1", f"-I{CSRC}", *defs, "-o", str(out / "bin" / "nvidia-smi"), str(CSRC / "smi.c"), "-ldl"])
    for tool in TOOLS:
        jobs.append(["-O1", *defs, f'-DNCT_TOOLNAME="{tool}"', "-o", str(out / "bin" / tool), str(CSRC / "tool.c")])
    for mod in XORG_MODULES:
        soname = mod if mod == "nvidia_drv.so" else f"{mod}.{driver_version}"
        filename = mod if mod == "nvidia_drv.so" else f"{mod}.{driver_version}"
        jobs.append(["-O1", "-shared", "-fPIC", *defs, f'-DNCT_LIBNAME="{mod}"', f"-Wl,-soname,{soname}",
                     "-o", str(out / "xorg" / filename), str(CSRC / "simlib.c")])
    return jobs


def build_artifacts(driver_version: str, cuda_code: int, lib32: bool) -> Path:
    """Directory of compiled artifacts for this driver/CUDA version (built on first use)."""
    if shutil.which("gcc") is None:
        raise SimError("gcc not found: nct sim create compiles the simulated driver (apt-get install gcc)")
    root = _cache_root()
    final = root / _key(driver_version, cuda_code, lib32)
    if (final / "complete").exists():
        os.utime(final)
        return final
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".build-", dir=root))
    try:
        for sub in ("lib64", "lib32", "bin", "xorg"):
            (tmp / sub).mkdir()
        with ThreadPoolExecutor(max_workers=max(2, (os.cpu_count() or 1) * 2)) as pool:
            list(pool.map(_gcc, _jobs(tmp, driver_version, cuda_code, lib32)))
        (tmp / "complete").write_text("ok\n")
        try:
            os.rename(tmp, final)
        except OSError:  # a concurrent build won the race: use its result
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _prune(root, keep=final)
    return final


def _prune(root: Path, keep: Path, limit: int = 8) -> None:
    """Drop the least recently used builds beyond `limit` (other versions, old sources)."""
    builds = sorted((p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".") and p != keep),
                    key=lambda p: p.stat().st_mtime, reverse=True)
    for old in builds[limit - 1:]:
        shutil.rmtree(old, ignore_errors=True)
