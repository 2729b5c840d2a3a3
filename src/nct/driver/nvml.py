"""Optional NVML facts (CUDA version, brand, compute capability, MIG UUIDs and profiles).

Like libnvidia-container's driver RPC helper, the query runs in a forked child: the
discovered libnvidia-ml.so (inside the driver root) is loaded there, so a broken or
hostile library can crash or hang only the child, several nodes can be queried from one
process, and pynvml is never imported by the caller. Any failure means "no NVML facts".
Without NVML the CUDA version comes from libcuda's cuDriverGetVersion (same child).
"""

from __future__ import annotations

import json
import logging
import os
import select
import signal
import time
from nct.record import Record, field

log = logging.getLogger("nct.driver")

BRANDS = (
    "Unknown", "Quadro", "Tesla", "NVS", "GRID", "GeForce", "TITAN", "VApps", "VPC", "VCS", "VWS",
    "CloudGaming", "QuadroRTX", "NvidiaRTX", "Nvidia", "GeForceRTX", "TitanRTX",
)


class NvmlMig(Record):
    gi: int
    ci: int
    uuid: str | None = None
    name: str | None = None  # "NVIDIA A100-SXM4-40GB MIG 1g.5gb"
    index: int = 0  # NVML MIG device index on the parent

    @property
    def profile(self) -> str | None:
        if self.name and " MIG " in self.name:
            return self.name.rsplit(" MIG ", 1)[1].strip()
        return None


class NvmlGpu(Record):
    bus_id: str  # normalised 8-digit domain, lower case
    uuid: str | None = None
    name: str | None = None
    brand: str | None = None
    architecture: str | None = None
    minor: int | None = None
    mig_enabled: bool | None = None
    migs: tuple[NvmlMig, ...] = ()


class NvmlFacts(Record):
    driver_version: str | None = None
    cuda_version: str | None = None
    gpus: tuple[NvmlGpu, ...] = field(default_factory=tuple)
    nvml: bool = False  # NVML itself answered (not only libcuda)


def cuda_version_string(v: int) -> str:
    """12040 -> "12.4" (the CUDA driver API's encoding)."""
    return f"{v // 1000}.{(v % 1000) // 10}"


def _s(v) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _enter_root(root: str | None, paths: list[str | None]) -> list[str | None]:
    """chroot into a driver root (as libnvidia-container's RPC helper does) so the driver's
    libraries resolve their own dependencies there; returns the paths as seen inside.
    Without the privilege to chroot the libraries are loaded from the host view."""
    if not root or root == "/":
        return paths
    prefix = root.rstrip("/")
    try:
        os.chroot(root)
        os.chdir("/")
    except OSError:
        return paths
    return [p[len(prefix):] if p and p.startswith(prefix + "/") else p for p in paths]


def _child_query(nvml_lib: str | None, cuda_lib: str | None, root: str | None = None) -> dict:
    """Runs in the forked child: everything here may fail; partial answers are kept."""
    import ctypes

    try:
        import pynvml as N  # before any chroot: the module lives on the host
    except ImportError:
        N = None
    nvml_lib, cuda_lib = _enter_root(root, [nvml_lib, cuda_lib])
    out: dict = {"gpus": []}
    if nvml_lib and N is None:
        out["nvml_error"] = "nvidia-ml-py (pynvml) is not installed"
    elif nvml_lib:
        try:
            N.nvmlLib = ctypes.CDLL(nvml_lib)
            N.nvmlInit()
            out["nvml"] = True
            try:
                out["driver_version"] = _s(N.nvmlSystemGetDriverVersion())
            except Exception:
                pass
            try:
                out["cuda_version"] = cuda_version_string(N.nvmlSystemGetCudaDriverVersion())
            except Exception:
                pass
            for i in range(N.nvmlDeviceGetCount()):
                h = N.nvmlDeviceGetHandleByIndex(i)
                g: dict = {"bus_id": _s(N.nvmlDeviceGetPciInfo(h).busId)}
                for key, fn in (("uuid", N.nvmlDeviceGetUUID), ("name", N.nvmlDeviceGetName),
                                ("minor", N.nvmlDeviceGetMinorNumber)):
                    try:
                        v = fn(h)
                        g[key] = v if isinstance(v, int) else _s(v)
                    except Exception:
                        pass
                try:
                    b = N.nvmlDeviceGetBrand(h)
                    g["brand"] = BRANDS[b] if 0 <= b < len(BRANDS) else "Unknown"
                except Exception:
                    pass
                try:
                    major, minor = N.nvmlDeviceGetCudaComputeCapability(h)
                    g["architecture"] = f"{major}.{minor}"
                except Exception:
                    pass
                try:
                    current, _pending = N.nvmlDeviceGetMigMode(h)
                    g["mig_enabled"] = current == 1
                except Exception:
                    pass
                migs = []
                if g.get("mig_enabled"):
                    try:
                        count = N.nvmlDeviceGetMaxMigDeviceCount(h)
                    except Exception:
                        count = 0
                    for j in range(count):
                        try:
                            mh = N.nvmlDeviceGetMigDeviceHandleByIndex(h, j)
                        except Exception:
                            continue
                        m: dict = {"index": j}
                        try:
                            m["gi"] = N.nvmlDeviceGetGpuInstanceId(mh)
                            m["ci"] = N.nvmlDeviceGetComputeInstanceId(mh)
                        except Exception:
                            continue
                        for key, fn in (("uuid", N.nvmlDeviceGetUUID), ("name", N.nvmlDeviceGetName)):
                            try:
                                m[key] = _s(fn(mh))
                            except Exception:
                                pass
                        migs.append(m)
                g["migs"] = migs
                out["gpus"].append(g)
            try:
                N.nvmlShutdown()
            except Exception:
                pass
        except Exception as e:  # library missing, init failure, ABI mismatch...
            out["nvml_error"] = f"{type(e).__name__}: {e}"
    if "cuda_version" not in out and cuda_lib:
        try:
            lib = ctypes.CDLL(cuda_lib)
            v = ctypes.c_int(0)
            if lib.cuDriverGetVersion(ctypes.byref(v)) == 0 and v.value > 0:
                out["cuda_version"] = cuda_version_string(v.value)
        except Exception as e:
            out["cuda_error"] = f"{type(e).__name__}: {e}"
    return out


def _run_forked(fn, *args, timeout: float) -> dict | None:
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        code = 0
        try:
            os.close(r)
            # Driver libraries may print; keep the caller's stderr clean (and no faulthandler
            # dump from a crash in the library).
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 2)
            try:
                import faulthandler

                faulthandler.disable()
            except Exception:
                pass
            data = json.dumps(fn(*args)).encode()
            view = memoryview(data)
            while view:
                n = os.write(w, view)
                view = view[n:]
        except BaseException:
            code = 1
        finally:
            os._exit(code)
    os.close(w)
    chunks = []
    deadline = time.monotonic() + timeout
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                os.kill(pid, signal.SIGKILL)
                log.debug("NVML query timed out")
                break
            ready, _, _ = select.select([r], [], [], left)
            if not ready:
                continue
            chunk = os.read(r, 65536)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(r)
        os.waitpid(pid, 0)
    try:
        return json.loads(b"".join(chunks)) if chunks else None
    except ValueError:
        return None


def query(nvml_lib: str | None, cuda_lib: str | None, timeout: float = 20.0, root: str | None = None) -> NvmlFacts:
    """Ask NVML (host path of libnvidia-ml.so.<v>) and/or libcuda for node facts; with a
    driver `root` (containing both paths) the child chroots there first."""
    from nct.driver.procfs import normalise_bus_id

    if not nvml_lib and not cuda_lib:
        return NvmlFacts()
    raw = _run_forked(_child_query, nvml_lib, cuda_lib, root, timeout=timeout)
    if raw is None:
        log.debug("NVML/libcuda query gave no answer")
        return NvmlFacts()
    if "nvml_error" in raw:
        log.debug("NVML unavailable: %s", raw["nvml_error"])
    if "cuda_error" in raw:
        log.debug("libcuda unavailable: %s", raw["cuda_error"])
    gpus = []
    for g in raw.get("gpus", ()):
        bus = normalise_bus_id(str(g.get("bus_id", "")))
        if bus is None:
            continue
        migs = tuple(
            NvmlMig(gi=int(m["gi"]), ci=int(m["ci"]), uuid=m.get("uuid"), name=m.get("name"), index=int(m.get("index", 0)))
            for m in g.get("migs", ()) if "gi" in m and "ci" in m
        )
        gpus.append(NvmlGpu(bus_id=bus, uuid=g.get("uuid"), name=g.get("name"), brand=g.get("brand"),
                            architecture=g.get("architecture"), minor=g.get("minor"),
                            mig_enabled=g.get("mig_enabled"), migs=migs))
    return NvmlFacts(driver_version=raw.get("driver_version"), cuda_version=raw.get("cuda_version"),
                     gpus=tuple(gpus), nvml=bool(raw.get("nvml")))
