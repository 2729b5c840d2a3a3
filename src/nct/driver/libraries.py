"""Driver files per capability: libraries (ld.so.cache + ELF checks), binaries, IPC
sockets, GSP firmware, graphics configs and Xorg modules, all looked up inside the driver root.

Rules (upstream's libnvidia-container, plus the toolkit's config/firmware lists):
- a library is a cache entry whose key is the catalogue name or name.<n>, of the wanted ABI
  (cache flags), whose real file (resolved inside the root) ends with ".<driver version>",
  and whose ELF header agrees (class, machine, SONAME); first match per name wins;
- libraries missing from the cache are looked for next to the others and in vdpau/;
- binaries are searched in PATH (plus the default PATH) inside the root.
"""

from __future__ import annotations

import os
import stat

from nct.log import get_logger
from nct.driver import catalogue, fsview
from nct.driver.model import DriverFile, native_machine
from nct.driver.rootpath import host_path, resolve_in_root

TYPE_CHECKING = False  # the ld cache and ELF readers are for the full pass, not the hook's path
if TYPE_CHECKING:  # pragma: no cover
    from nct.driver.ldcache import LdCache

log = get_logger("nct.driver")

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# Where libraries are looked for when the cache has nothing (toolkit's library locator).
FALLBACK_LIB_DIRS: dict[str, tuple[str, ...]] = {
    "x86_64": ("/usr/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu/nvidia/current", "/usr/lib64",
               "/lib/x86_64-linux-gnu", "/lib64", "/usr/lib"),
    "aarch64": ("/usr/lib/aarch64-linux-gnu", "/usr/lib/aarch64-linux-gnu/nvidia/current", "/usr/lib64",
                "/lib/aarch64-linux-gnu", "/lib64", "/usr/lib"),
}
FALLBACK_LIB32_DIRS = ("/usr/lib/i386-linux-gnu", "/usr/lib32", "/lib/i386-linux-gnu", "/lib32", "/usr/lib")
XORG_DIRS = tuple(
    f"{base}/{sub}"
    for base in ("/usr/lib/xorg/modules", "/usr/lib64/xorg/modules", "/usr/X11R6/lib/modules", "/usr/X11R6/lib64/modules")
    for sub in ("drivers", "extensions", "updates/drivers", "updates/extensions")
)


def _lib_name(key: str, names: list[str], order: dict[str, int] | None = None) -> str | None:
    """The first of `names` (catalogue order) that `key` equals or starts with, followed by
    a dot ("libcuda.so.1" -> "libcuda.so"). With `order` (name -> position in names) this is
    a few dict lookups: the candidates are `key` itself and its prefixes that end at a dot."""
    if order is None:
        for n in names:
            if key == n or key.startswith(n + "."):
                return n
        return None
    best = order.get(key)
    i = key.find(".")
    while i >= 0:
        pos = order.get(key[:i])
        if pos is not None and (best is None or pos < best):
            best = pos
        i = key.find(".", i + 1)
    return None if best is None else names[best]


def _make_lib(root: str, node_path: str, name: str, version: str, *, compat32: bool, machine: str,
              versioned: bool = True, elf_cache=None) -> DriverFile | None:
    """Check one candidate (node path inside root); None (with a debug log) when rejected."""
    real = resolve_in_root(root, node_path)
    kind = "lib32" if compat32 else "lib"
    if real is None:
        log.debug("%s: %s missing or dangling", name, node_path)
        return None
    if versioned and not os.path.basename(real).endswith("." + version):
        log.debug("%s: skipping %s (not driver version %s)", name, real, version)
        return None
    host = host_path(root, real)
    if not fsview.is_file(host):
        log.debug("%s: skipping %s (not a regular file)", name, real)
        return None
    from nct.driver.elf import check_library

    info, reason = check_library(host, name, compat32=compat32, machine=machine, cache=elf_cache)
    if info is None:
        log.debug("%s: skipping %s (%s)", name, real, reason)
        return None
    cap = catalogue.capability_of_library(name) or "graphics"
    return DriverFile(kind=kind, host_path=host, container_path=real, capability=cap, name=name, soname=info.soname)


def find_libraries(root: str, cache: LdCache | None, version: str, *, compat32: bool = False,
                   machine: str | None = None, elf_cache=None) -> list[DriverFile]:
    """Catalogue libraries of one ABI (native, or 32-bit with compat32), catalogue order."""
    from nct.driver.ldcache import NATIVE_FLAGS

    machine = machine or native_machine()
    native_flags, flags32 = NATIVE_FLAGS.get(machine, (None, None))
    want = flags32 if compat32 else native_flags
    if want is None:
        return []
    names = catalogue.all_library_names()
    order = {n: i for i, n in enumerate(names)}
    candidates: dict[str, list[str]] = {}
    if cache is not None:
        for e in cache.entries:
            # FLAG_ELF (1) entries carry no ABI (as glibc, accept them; the ELF check decides).
            if e.flags not in (want, 0x0001) or e.hwcaps_subdir:
                continue
            n = _lib_name(e.key, names, order)
            if n is not None:
                candidates.setdefault(n, []).append(e.path)
    found: dict[str, DriverFile] = {}
    for n in names:
        for path in candidates.get(n, ()):
            f = _make_lib(root, path, n, version, compat32=compat32, machine=machine, elf_cache=elf_cache)
            if f is not None:
                found[n] = f
                break
    # Not in the cache: look next to the libraries we did find (and vdpau/), else the
    # standard library dirs (no cache at all).
    dirs = _dirs_of(found.values())
    if not dirs:
        dirs = list(FALLBACK_LIB32_DIRS if compat32 else FALLBACK_LIB_DIRS.get(machine, ()))
    search = [d2 for d in dirs for d2 in (d, d + "/vdpau")]
    for n in names:
        if n in found:
            continue
        for d in search:
            f = _make_lib(root, f"{d}/{n}.{version}", n, version, compat32=compat32, machine=machine, elf_cache=elf_cache)
            if f is not None:
                found[n] = f
                break
    return [found[n] for n in names if n in found]


def _dirs_of(files) -> list[str]:
    dirs: list[str] = []
    for f in files:
        d = os.path.dirname(f.container_path)
        if d not in dirs:
            dirs.append(d)
    return dirs


def _dotted_version(s: str) -> bool:
    """'1.2' / '1.2.3' ...: two or more dot-separated runs of ASCII digits."""
    parts = s.split(".")
    return len(parts) >= 2 and all(p.isascii() and p.isdigit() for p in parts)


def find_graphics_extra_libraries(root: str, lib_dirs: list[str], machine: str | None = None,
                                  elf_cache=None) -> list[DriverFile]:
    """EGL platform libraries (libnvidia-egl-gbm.so.1.1.1 ...): own versions, not NVRM's."""
    machine = machine or native_machine()
    listings: list[tuple[str, list[str]]] = []  # each lib dir read once
    prefixes = tuple(name + "." for name in catalogue.GRAPHICS_EXTRA_LIBRARIES)
    for d in lib_dirs:
        real_dir = resolve_in_root(root, d)
        if real_dir is None:
            continue
        listing = fsview.listdir(host_path(root, real_dir))
        if listing is None:
            continue
        listings.append((real_dir, sorted(e for e in listing if e.startswith(prefixes))))
    found = []
    for name in catalogue.GRAPHICS_EXTRA_LIBRARIES:
        f = None
        for real_dir, entries in listings:
            hits = [e for e in entries if e.startswith(name + ".") and _dotted_version(e[len(name) + 1:])]
            for e in hits:
                f = _make_lib(root, f"{real_dir}/{e}", name, "", compat32=False, machine=machine, versioned=False,
                              elf_cache=elf_cache)
                if f is not None:
                    found.append(DriverFile(kind="lib", host_path=f.host_path, container_path=f.container_path,
                                            capability="graphics", name=name, soname=f.soname))
                    break
            if f is not None:
                break
    return found


def find_binaries(root: str, path_env: str | None = None) -> list[DriverFile]:
    """Catalogue binaries found on PATH inside the root, capability order."""
    dirs: list[str] = []
    for d in (path_env if path_env is not None else os.environ.get("PATH", "")).split(":") + DEFAULT_PATH.split(":"):
        if d.startswith("/") and d not in dirs:
            dirs.append(d.rstrip("/") or "/")
    found = []
    for cap, names in catalogue.BINARIES.items():
        for name in names:
            for d in dirs:
                node_path = f"{d}/{name}" if d != "/" else f"/{name}"
                hit = _stat_in_root(root, node_path)
                if hit is None:
                    continue
                host, st = hit
                if stat.S_ISREG(st.st_mode) and st.st_mode & 0o111:
                    found.append(DriverFile(kind="bin", host_path=host, container_path=node_path,
                                            capability=cap, name=name))
                    break
    return found


def _stat_in_root(root: str, node_path: str) -> tuple[str, os.stat_result] | None:
    """(host path, stat) of a node path resolved inside the driver root; None if absent."""
    real = resolve_in_root(root, node_path)
    if real is None:
        return None
    host = host_path(root, real)
    st = fsview.stat(host)
    return None if st is None else (host, st)


def find_ipcs(root: str, mps_pipe_dir: str | None = None) -> list[DriverFile]:
    """persistenced / fabricmanager sockets and the MPS pipe directory: first match each."""
    found = []
    for candidates, cap in catalogue.IPCS:
        is_mps = any("nvidia-mps" in c for c in candidates)
        if is_mps and mps_pipe_dir:
            candidates = (mps_pipe_dir,) + tuple(candidates)
        for node_path in candidates:
            hit = _stat_in_root(root, node_path)
            if hit is None:
                continue
            host, st = hit
            ok = stat.S_ISDIR(st.st_mode) if is_mps else stat.S_ISSOCK(st.st_mode)
            if ok:
                found.append(DriverFile(kind="ipc", host_path=host, container_path=node_path, capability=cap,
                                        name=os.path.basename(node_path.rstrip("/")) if is_mps else node_path.split("/")[-2]))
                break
    return found


def find_firmware(root: str, version: str) -> list[DriverFile]:
    """GSP firmware nvidia/<version>/gsp*.bin, first directory wins per file name."""
    found: dict[str, DriverFile] = {}
    for base in catalogue.FIRMWARE_DIRS:
        d = f"{base}/nvidia/{version}"
        real_dir = resolve_in_root(root, d)
        if real_dir is None:
            continue
        listing = fsview.listdir(host_path(root, real_dir))
        if listing is None:
            continue
        names = sorted(listing)
        for n in names:
            if not (n.startswith("gsp") and n.endswith(".bin")) or n in found:
                continue
            hit = _stat_in_root(root, f"{real_dir}/{n}")
            if hit is None or not stat.S_ISREG(hit[1].st_mode):
                continue
            found[n] = DriverFile(kind="firmware", host_path=hit[0], container_path=f"{d}/{n}",
                                  capability=None, name=n)
    return list(found.values())


def find_graphics_configs(root: str, machine: str | None = None) -> list[DriverFile]:
    """Vulkan/EGL/GLX/OpenCL/Xorg config files; /usr/share ones also under /usr/local/share."""
    machine = machine or native_machine()
    found = []
    for container_path in catalogue.GRAPHICS_CONFIGS:
        candidates = [container_path]
        if container_path.startswith("/usr/share/"):
            candidates.insert(0, "/usr/local/share/" + container_path[len("/usr/share/"):])
        if container_path.endswith("/nvidia_icd.json"):
            candidates.append(container_path[:-len(".json")] + f".{machine}.json")
        for node_path in candidates:
            hit = _stat_in_root(root, node_path)
            if hit is not None and stat.S_ISREG(hit[1].st_mode):
                found.append(DriverFile(kind="config", host_path=hit[0], container_path=container_path,
                                        capability="graphics", name=os.path.basename(container_path)))
                break
    return found


def find_xorg_modules(root: str, version: str, lib_dirs: list[str]) -> list[DriverFile]:
    """nvidia_drv.so and libglxserver_nvidia.so.<version>, mounted at their node path."""
    dirs = [f"{d}/nvidia/xorg" for d in lib_dirs] + list(XORG_DIRS)
    found = []
    for name in ("nvidia_drv.so", f"libglxserver_nvidia.so.{version}"):
        for d in dirs:
            hit = _stat_in_root(root, f"{d}/{name}")
            if hit is not None and stat.S_ISREG(hit[1].st_mode):
                found.append(DriverFile(kind="xorg", host_path=hit[0], container_path=f"{d}/{name}",
                                        capability="graphics", name=name.split(".so")[0] + ".so"))
                break
    return found
