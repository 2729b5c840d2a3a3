"""Optional NVML facts (CUDA version, brand, compute capability, MIG UUIDs and profiles).

Like libnvidia-container's driver RPC helper, the query runs in a forked child: the
discovered libnvidia-ml.so (inside the driver root) is loaded there, so a broken or
hostile library can crash or hang only the child, several nodes can be queried from one
process, and the caller never loads NVML. NVML is reached through a small ctypes binding
(NvmlLib) of the calls libnvidia-container makes, so every install has it: nothing to add
but the driver's libnvidia-ml.so.1. Any failure means "no NVML facts" (and a reason).
Without NVML the CUDA version comes from libcuda's cuDriverGetVersion (same child).
"""

from __future__ import annotations

import json
import logging
import os
from nct import child
from nct.record import Record, field

log = logging.getLogger("nct.driver")

BRANDS = (
    "Unknown", "Quadro", "Tesla", "NVS", "GRID", "GeForce", "TITAN", "VApps", "VPC", "VCS", "VWS",
    "CloudGaming", "QuadroRTX", "NvidiaRTX", "Nvidia", "GeForceRTX", "TitanRTX",
)


# Bytes of the child's answer read back (512 devices' facts are ~100 KB).
MAX_ANSWER = 4 << 20


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
    error: str | None = None  # why NVML did not answer (shown when a MIG UUID is unknown)


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


# nvml.h: return codes and buffer sizes of the calls below.
NVML_SUCCESS = 0
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_DEVICE_MIG_ENABLE = 1
_VERSION_BUFFER = 80  # NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE
_UUID_BUFFER = 96  # NVML_DEVICE_UUID_V2_BUFFER_SIZE
_NAME_BUFFER = 96  # NVML_DEVICE_NAME_V2_BUFFER_SIZE


class NvmlCallError(Exception):
    """An NVML call returned something other than NVML_SUCCESS."""

    def __init__(self, func: str, code: int, text: str):
        super().__init__(f"{func}: {text} ({code})")
        self.code = code


class NvmlLib:
    """The NVML calls nct makes, through ctypes, by the exported names nvml.h maps them to
    (nvmlInit -> nvmlInit_v2, ...) and with nvml.h's argument types. A few dozen lines
    instead of nvidia-ml-py: nothing to install, ~1.5 ms to import ctypes in the child
    against ~20 ms for pynvml, and no reliance on a binding's private library handle.
    Used only in the forked child of query()."""

    def __init__(self, path: str):
        import ctypes

        self.c = ctypes
        self.lib = ctypes.CDLL(path)  # OSError when missing or not loadable

    def call(self, func: str, *args) -> None:
        fn = getattr(self.lib, func, None)
        if fn is None:
            raise NvmlCallError(func, NVML_ERROR_FUNCTION_NOT_FOUND, "Function Not Found")
        fn.restype = self.c.c_int
        code = fn(*args)
        if code != NVML_SUCCESS:
            raise NvmlCallError(func, code, self.error_string(code))

    def error_string(self, code: int) -> str:
        fn = getattr(self.lib, "nvmlErrorString", None)
        if fn is None:
            return "error"
        fn.restype = self.c.c_char_p
        fn.argtypes = [self.c.c_int]
        return _s(fn(code) or b"error")

    def _text(self, func: str, size: int, *head) -> str:
        buf = self.c.create_string_buffer(size)
        self.call(func, *head, buf, self.c.c_uint(size))
        return _s(buf.value)

    def _uint(self, func: str, *head) -> int:
        v = self.c.c_uint(0)
        self.call(func, *head, self.c.byref(v))
        return v.value

    def _handle(self, func: str, *head):
        h = self.c.c_void_p()
        self.call(func, *head, self.c.byref(h))
        return h

    def init(self) -> None:
        self.call("nvmlInit_v2")

    def shutdown(self) -> None:
        self.call("nvmlShutdown")

    def driver_version(self) -> str:
        return self._text("nvmlSystemGetDriverVersion", _VERSION_BUFFER)

    def cuda_driver_version(self) -> int:
        v = self.c.c_int(0)
        self.call("nvmlSystemGetCudaDriverVersion", self.c.byref(v))
        return v.value

    def device_count(self) -> int:
        return self._uint("nvmlDeviceGetCount_v2")

    def device_by_index(self, i: int):
        return self._handle("nvmlDeviceGetHandleByIndex_v2", self.c.c_uint(i))

    def bus_id(self, h) -> str:
        """As libnvidia-container formats it: from the numeric fields of nvmlPciInfo_t."""
        c = self.c

        class PciInfo(c.Structure):  # type: ignore[name-defined]  # c is the ctypes module, imported late
            _fields_ = [("busIdLegacy", c.c_char * 16), ("domain", c.c_uint), ("bus", c.c_uint),
                        ("device", c.c_uint), ("pciDeviceId", c.c_uint), ("pciSubSystemId", c.c_uint),
                        ("busId", c.c_char * 32)]

        info = PciInfo()
        self.call("nvmlDeviceGetPciInfo_v3", h, c.byref(info))
        return f"{info.domain:08x}:{info.bus:02x}:{info.device:02x}.0"

    def uuid(self, h) -> str:
        return self._text("nvmlDeviceGetUUID", _UUID_BUFFER, h)

    def name(self, h) -> str:
        return self._text("nvmlDeviceGetName", _NAME_BUFFER, h)

    def minor(self, h) -> int:
        return self._uint("nvmlDeviceGetMinorNumber", h)

    def brand(self, h) -> int:
        v = self.c.c_int(0)  # nvmlBrandType_t
        self.call("nvmlDeviceGetBrand", h, self.c.byref(v))
        return v.value

    def compute_capability(self, h) -> tuple[int, int]:
        major, minor = self.c.c_int(0), self.c.c_int(0)
        self.call("nvmlDeviceGetCudaComputeCapability", h, self.c.byref(major), self.c.byref(minor))
        return major.value, minor.value

    def mig_mode(self, h) -> tuple[int, int]:
        current, pending = self.c.c_uint(0), self.c.c_uint(0)
        self.call("nvmlDeviceGetMigMode", h, self.c.byref(current), self.c.byref(pending))
        return current.value, pending.value

    def max_mig_device_count(self, h) -> int:
        return self._uint("nvmlDeviceGetMaxMigDeviceCount", h)

    def mig_device(self, h, j: int):
        return self._handle("nvmlDeviceGetMigDeviceHandleByIndex", h, self.c.c_uint(j))

    def gpu_instance_id(self, h) -> int:
        return self._uint("nvmlDeviceGetGpuInstanceId", h)

    def compute_instance_id(self, h) -> int:
        return self._uint("nvmlDeviceGetComputeInstanceId", h)


def _try(out: dict, key: str, fn, *args) -> None:
    """out[key] = fn(*args), unless the call fails (the fact is then unknown)."""
    try:
        out[key] = fn(*args)
    except (NvmlCallError, ValueError, OSError):
        pass


def _nvml_facts(N: NvmlLib, out: dict) -> None:
    """What libnvidia-container's driver RPC asks NVML, into `out` (partial on failure)."""
    N.init()
    out["nvml"] = True
    _try(out, "driver_version", N.driver_version)
    try:
        out["cuda_version"] = cuda_version_string(N.cuda_driver_version())
    except NvmlCallError:
        pass
    for i in range(N.device_count()):
        try:  # a GPU NVML cannot place is left out (procfs still has it)
            h = N.device_by_index(i)
            g: dict = {"bus_id": N.bus_id(h)}
        except NvmlCallError:
            continue
        _try(g, "uuid", N.uuid, h)
        _try(g, "name", N.name, h)
        _try(g, "minor", N.minor, h)
        try:
            b = N.brand(h)
            g["brand"] = BRANDS[b] if 0 <= b < len(BRANDS) else "Unknown"
        except NvmlCallError:
            pass
        try:
            g["architecture"] = "%d.%d" % N.compute_capability(h)
        except NvmlCallError:
            pass
        try:
            current, pending = N.mig_mode(h)
            g["mig_enabled"] = current == NVML_DEVICE_MIG_ENABLE and current == pending
        except NvmlCallError as e:
            if e.code in (NVML_ERROR_NOT_SUPPORTED, NVML_ERROR_FUNCTION_NOT_FOUND):
                g["mig_enabled"] = False
        migs = []
        if g.get("mig_enabled"):
            try:
                count = N.max_mig_device_count(h)
            except NvmlCallError:
                count = 0
            for j in range(count):
                try:
                    mh = N.mig_device(h, j)  # NOT_FOUND: an empty slot
                    m: dict = {"index": j, "gi": N.gpu_instance_id(mh), "ci": N.compute_instance_id(mh)}
                except NvmlCallError:
                    continue
                _try(m, "uuid", N.uuid, mh)
                _try(m, "name", N.name, mh)
                migs.append(m)
        g["migs"] = migs
        out["gpus"].append(g)
    try:
        N.shutdown()
    except NvmlCallError:
        pass


def _child_query(nvml_lib: str | None, cuda_lib: str | None, root: str | None = None) -> dict:
    """Runs in the forked child: everything here may fail; partial answers are kept."""
    import ctypes  # before any chroot: the module lives on the host

    nvml_lib, cuda_lib = _enter_root(root, [nvml_lib, cuda_lib])
    out: dict = {"gpus": []}
    if nvml_lib:
        try:
            _nvml_facts(NvmlLib(nvml_lib), out)
        except Exception as e:  # library missing or not loadable, init failure, ABI mismatch
            out["nvml_error"] = str(e) if isinstance(e, (NvmlCallError, OSError)) else f"{type(e).__name__}: {e}"
    if "cuda_version" not in out and cuda_lib:
        try:
            lib = ctypes.CDLL(cuda_lib)
            v = ctypes.c_int(0)
            if lib.cuDriverGetVersion(ctypes.byref(v)) == 0 and v.value > 0:
                out["cuda_version"] = cuda_version_string(v.value)
        except Exception as e:
            out["cuda_error"] = f"{type(e).__name__}: {e}"
    return out


def _run_forked(fn, *args, timeout: float) -> tuple[object, str]:
    """fn(*args) in a forked child, its JSON answer read back; (None, why) when it gives none."""
    def body(w: int) -> None:
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

    pid, r = child.fork(body)
    done = child.collect(pid, r, timeout, limit=MAX_ANSWER)
    why = ""
    if done.timed_out:
        why = f"timed out after {timeout:g} s"
    elif done.overflowed:  # the library wrote into our pipe: not an answer
        why = f"gave an answer longer than {MAX_ANSWER} bytes"
    elif os.WIFSIGNALED(done.status):
        why = f"crashed (signal {os.WTERMSIG(done.status)})"
    chunks = [done.data] if done.data else []
    from nct import jsonio

    try:  # nesting bounded (a library writing "[[[..." into our pipe: ValueError, not RecursionError)
        return (jsonio.loads(b"".join(chunks)) if chunks else None), why or "gave no answer"
    except ValueError:
        return None, why or "gave a garbled answer"


def query(nvml_lib: str | None, cuda_lib: str | None, timeout: float = 20.0, root: str | None = None) -> NvmlFacts:
    """Ask NVML (host path of libnvidia-ml.so.<v>) and/or libcuda for node facts; with a
    driver `root` (containing both paths) the child chroots there first."""
    missing = None if nvml_lib else "the driver's libnvidia-ml.so.1 was not found"
    if not nvml_lib and not cuda_lib:
        return NvmlFacts(error=missing)
    raw, why = _run_forked(_child_query, nvml_lib, cuda_lib, root, timeout=timeout)
    if raw is not None and not isinstance(raw, dict):
        raw, why = None, "gave a garbled answer"
    if raw is None:
        log.debug("NVML/libcuda query %s", why)
        return NvmlFacts(error=missing or f"the NVML query in a child process {why}")
    error = missing or raw.get("nvml_error")
    if "nvml_error" in raw:
        log.debug("NVML unavailable: %s", raw["nvml_error"])
    if "cuda_error" in raw:
        log.debug("libcuda unavailable: %s", raw["cuda_error"])
    try:
        return _facts(raw, error)
    except (TypeError, ValueError, KeyError, AttributeError):  # not what our child writes
        log.debug("NVML/libcuda query gave a garbled answer")
        return NvmlFacts(error=missing or "the NVML query in a child process gave a garbled answer")


def _opt(v, kind: type):
    """v when it is None or of `kind` (a bool is no int), else TypeError."""
    if v is None or (isinstance(v, kind) and not (kind is int and isinstance(v, bool))):
        return v
    raise TypeError(f"{type(v).__name__} where {kind.__name__} was expected")


def _facts(raw: dict, error: str | None) -> NvmlFacts:
    """NvmlFacts from the child's answer; TypeError/ValueError/KeyError when it is not of the
    shape _child_query writes (the driver's library shares the child's fds)."""
    from nct.driver.procfs import normalise_bus_id

    gpus = []
    for g in raw.get("gpus", ()):
        bus = normalise_bus_id(_opt(g.get("bus_id"), str) or "")
        if bus is None:
            continue
        migs = tuple(
            NvmlMig(gi=_opt(m["gi"], int), ci=_opt(m["ci"], int), uuid=_opt(m.get("uuid"), str),
                    name=_opt(m.get("name"), str), index=_opt(m.get("index", 0), int))
            for m in g.get("migs", ()) if "gi" in m and "ci" in m
        )
        gpus.append(NvmlGpu(bus_id=bus, uuid=_opt(g.get("uuid"), str), name=_opt(g.get("name"), str),
                            brand=_opt(g.get("brand"), str), architecture=_opt(g.get("architecture"), str),
                            minor=_opt(g.get("minor"), int), mig_enabled=_opt(g.get("mig_enabled"), bool),
                            migs=migs))
    return NvmlFacts(driver_version=_opt(raw.get("driver_version"), str),
                     cuda_version=_opt(raw.get("cuda_version"), str),
                     gpus=tuple(gpus), nvml=bool(raw.get("nvml")), error=None if raw.get("nvml") else error)
