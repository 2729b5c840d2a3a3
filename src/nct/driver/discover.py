"""discover_node(): read procfs, /dev, ld.so.cache and (optionally) NVML into one Node.

Roots make the same code work on a host (all "/"), against a driver container
(driver=dev=/run/nvidia/driver) and against a simulated node (everything under DIR/root).
"""

from __future__ import annotations

import os

from nct.log import get_logger
from nct.driver import devices as devs
from nct.driver import fsview
from nct.driver import libraries as libs
from nct.driver import procfs
from nct.driver.model import DriverFile, Gpu, MigDevice, Node, Roots, native_machine
from nct.driver.rootpath import dirs_memo, host_path, proc_root, resolve_in_root
from nct.errors import DiscoveryError

TYPE_CHECKING = False  # typing costs an import on the hook's path
if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Callable
    from typing import TypeVar

    from nct.driver.ldcache import LdCache
    from nct.driver.snapshot import TreeFiles

    _T = TypeVar("_T")

log = get_logger("nct.driver")

DEFAULT_LDCACHE = "/etc/ld.so.cache"


def roots_from_config(cfg) -> Roots:
    """Driver root = [nvidia-container-cli] root (or "/"), dev root = driver root,
    proc root = $NCT_PROC_ROOT or /proc."""
    root = cfg.nvidia_container_cli.root or "/"
    return Roots(driver=root, dev=root, proc=proc_root())


def _sys_root(proc_root: str) -> str:
    """sysfs next to the proc root: /proc -> /sys, DIR/root/proc -> DIR/root/sys."""
    return os.path.join(os.path.dirname(os.path.abspath(proc_root).rstrip("/")) or "/", "sys")


def _read_optional(path: str, parse: Callable[[str, str], _T]) -> _T | None:
    try:
        text = procfs.read_text(path)
    except FileNotFoundError:
        return None
    return parse(text, path)


def read_driver_version(proc_root: str) -> procfs.DriverVersion:
    path = os.path.join(proc_root, procfs.VERSION_FILE)
    try:
        text = procfs.read_text(path)
    except FileNotFoundError:
        raise DiscoveryError(f"NVIDIA driver not loaded: {path} not found") from None
    return procfs.parse_version(text, path)


def read_gpus(roots: Roots, majors: dict[str, int]) -> list[Gpu]:
    """GPUs from procfs, indexed in bus-id order (excluded GPUs numbered last)."""
    infos: list[tuple[procfs.GpuInfo, str]] = []
    for d in procfs.list_gpu_dirs(roots.proc):
        path = os.path.join(d, "information")
        try:
            text = procfs.read_text(path)
        except FileNotFoundError:
            raise DiscoveryError(f"{path}: missing GPU information file") from None
        infos.append((procfs.parse_gpu_information(text, path), d))
    infos.sort(key=lambda t: (t[0].excluded, t[0].bus_id))
    minors = [i.minor for i, _ in infos]
    if len(set(minors)) != len(minors):
        raise DiscoveryError(f"{os.path.join(roots.proc, procfs.GPUS_DIR)}: two GPUs share a Device Minor")
    caps_dir = os.path.join(roots.proc, procfs.CAPABILITIES_DIR)
    sys_root = _sys_root(roots.proc)
    gpus = []
    for index, (info, d) in enumerate(infos):
        migs = [
            MigDevice(
                parent_index=index, gi=m.gi, ci=m.ci,
                gi_access=devs.caps_node(roots.dev, m.gi_access.minor, majors, m.gi_access.mode),
                ci_access=devs.caps_node(roots.dev, m.ci_access.minor, majors, m.ci_access.mode),
                gi_access_proc=m.gi_access_path, ci_access_proc=m.ci_access_path, ordinal=j,
            )
            for j, m in enumerate(procfs.scan_mig_caps(caps_dir, info.minor))
        ]
        mig_enabled = bool(migs) or os.path.isdir(os.path.join(caps_dir, f"gpu{info.minor}", "mig"))
        gpus.append(Gpu(
            index=index, minor=info.minor, uuid=info.uuid, model=info.model, bus_id=info.bus_id, proc_dir=d,
            device=devs.gpu_node(roots.dev, info.minor, majors), excluded=info.excluded,
            drm=tuple(devs.drm_nodes(roots.dev, info.bus_id, sys_root)), mig_enabled=mig_enabled, migs=tuple(migs),
        ))
    return gpus


def _mig_cap_paths(roots: Roots, name: str, majors: dict[str, int]) -> tuple[str, ...]:
    """capabilities/mig/<name> proc file and its /dev/nvidia-caps node (host paths)."""
    path = os.path.join(roots.proc, procfs.CAPABILITIES_DIR, "mig", name)
    cap = _read_optional(path, procfs.parse_capability)
    if cap is None:
        return ()
    node = devs.caps_node(roots.dev, cap.minor, majors, cap.mode)
    return (path, node.host_path)


def load_ldcache(roots: Roots, ldcache: str | None) -> LdCache | None:
    """The driver root's cache (`ldcache` is a path inside the driver root, as upstream's
    --ldcache). A missing default cache is tolerated (libraries are then searched in the
    standard dirs); a missing explicit one is an error."""
    from nct.driver.ldcache import read_ldcache  # the full pass only: not on the hook's path

    path = ldcache or DEFAULT_LDCACHE
    real = resolve_in_root(roots.driver, path)
    shown = host_path(roots.driver, path)
    if real is None or not fsview.is_file(host_path(roots.driver, real)):
        if ldcache:
            raise DiscoveryError(f"{shown}: ld.so.cache not found")
        log.debug("%s: no ld.so.cache, searching standard library dirs", shown)
        return None
    return read_ldcache(host_path(roots.driver, real), shown)


def find_driver_files(roots: Roots, version: str, ldcache: str | None = None,
                      machine: str | None = None) -> list[DriverFile]:
    """Every driver file of the node, in upstream's listing order: what the driver tree
    holds (from the validated snapshot when nothing there changed, nct.driver.snapshot)
    with the IPC sockets, which come and go while the node runs, looked up live."""
    from nct.driver import snapshot

    machine = machine or native_machine()
    head, tail = snapshot.tree_files(roots.driver, version, ldcache, machine, os.environ.get("PATH", ""),
                                     lambda: _read_tree(roots, version, ldcache, machine))
    return head + libs.find_ipcs(roots.driver, os.environ.get("CUDA_MPS_PIPE_DIRECTORY")) + tail


def _read_tree(roots: Roots, version: str, ldcache: str | None, machine: str) -> TreeFiles:
    """The full pass over the driver tree: the ld cache, then every file it leads to."""
    from nct.hostcache import ElfCache

    cache = load_ldcache(roots, ldcache)
    with dirs_memo():
        return _find_tree_files(roots, version, cache, machine, ElfCache())


def _find_tree_files(roots: Roots, version: str, cache: LdCache | None, machine: str, elf_cache) -> TreeFiles:
    # elf_cache: pyelftools answers, reused across runs while the files are unchanged
    lib64 = libs.find_libraries(roots.driver, cache, version, machine=machine, elf_cache=elf_cache)
    lib32 = libs.find_libraries(roots.driver, cache, version, compat32=True, machine=machine, elf_cache=elf_cache)
    lib_dirs = []
    for f in lib64:
        d = os.path.dirname(f.container_path)
        if d not in lib_dirs:
            lib_dirs.append(d)
    extra = libs.find_graphics_extra_libraries(roots.driver, lib_dirs or list(libs.FALLBACK_LIB_DIRS.get(machine, ())), machine,
                                               elf_cache=elf_cache)
    elf_cache.save()
    return (
        libs.find_binaries(roots.driver) + lib64 + extra + lib32,
        libs.find_firmware(roots.driver, version)
        + libs.find_graphics_configs(roots.driver, machine)
        + libs.find_xorg_modules(roots.driver, version, lib_dirs),
    )


def _apply_nvml(gpus: list[Gpu], facts) -> list[Gpu]:
    by_bus = {g.bus_id: g for g in facts.gpus}
    out = []
    for gpu in gpus:
        f = by_bus.get(gpu.bus_id)
        if f is None or (f.uuid and f.uuid.lower() != gpu.uuid.lower()):
            out.append(gpu)
            continue
        migs = list(gpu.migs)
        if f.migs:
            order = {(m.gi, m.ci): m for m in f.migs}
            known = sorted((m for m in migs if (m.gi, m.ci) in order), key=lambda m: order[(m.gi, m.ci)].index)
            rest = [m for m in migs if (m.gi, m.ci) not in order]
            migs = [
                m.replace(ordinal=j, uuid=order[(m.gi, m.ci)].uuid if (m.gi, m.ci) in order else m.uuid,
                        profile=order[(m.gi, m.ci)].profile if (m.gi, m.ci) in order else m.profile)
                for j, m in enumerate(known + rest)
            ]
        out.append(gpu.replace(
            brand=f.brand or gpu.brand, architecture=f.architecture or gpu.architecture,
            mig_enabled=gpu.mig_enabled if f.mig_enabled is None else (f.mig_enabled or bool(migs)), migs=tuple(migs),
        ))
    return out


def discover_node(roots: Roots | None = None, *, ldcache: str | None = None, use_nvml: bool = True) -> Node:
    """Everything the node has. Raises DiscoveryError (one line) when there is no driver or
    a file holds garbage; NVML problems only mean fewer facts."""
    roots = roots or Roots(proc=proc_root())
    version = read_driver_version(roots.proc)
    majors = _read_optional(os.path.join(roots.proc, procfs.DEVICES_FILE), procfs.parse_devices) or {}
    # mig-minors is checked for validation: garbage there is reported even if unused.
    _read_optional(os.path.join(roots.proc, procfs.MIG_MINORS_FILE), procfs.check_mig_minors)
    with dirs_memo():  # /dev, /dev/dri, ...: looked up again for every GPU otherwise
        gpus = read_gpus(roots, majors)
    files = find_driver_files(roots, version.version, ldcache)
    lib_dirs = []
    for f in files:
        if f.kind == "lib" and f.name in _CATALOGUE_LIBS:
            d = os.path.dirname(f.host_path)
            if d not in lib_dirs:
                lib_dirs.append(d)
    node = Node(
        roots=roots, driver_version=version.version, cuda_version=None, gpus=tuple(gpus),
        control_devices=tuple(devs.control_devices(roots.dev)), majors=majors, files=tuple(files),
        imex_channels=tuple(devs.imex_channels(roots.dev)),
        mig_config=_mig_cap_paths(roots, "config", majors), mig_monitor=_mig_cap_paths(roots, "monitor", majors),
        caps_devices=tuple(devs.caps_devices(roots.dev)), lib_dirs=tuple(lib_dirs),
    )
    return add_nvml_facts(node) if use_nvml else node


def add_nvml_facts(node: Node) -> Node:
    """`node` with what NVML knows and procfs does not (MIG UUIDs and profiles, brand,
    compute capability, CUDA version), asked in a forked child through the driver's own
    libnvidia-ml.so.1 (nct.driver.nvml). Without NVML: the node as it was, with the CUDA
    version from libcuda when it answers, and `nvml_error` saying why."""
    from nct.driver import nvml

    if node.nvml or node.nvml_error is not None:  # asked already
        return node
    ml = next((f.host_path for f in node.files if f.kind == "lib" and f.name == "libnvidia-ml.so"), None)
    cu = next((f.host_path for f in node.files if f.kind == "lib" and f.name == "libcuda.so"), None)
    facts = nvml.query(ml, cu, root=node.roots.driver)
    cuda_version = facts.cuda_version or node.cuda_version
    if not facts.nvml:
        return node.replace(cuda_version=cuda_version, nvml_error=facts.error or "NVML gave no answer")
    if facts.driver_version and facts.driver_version != node.driver_version:
        log.debug("NVML driver %s differs from NVRM %s", facts.driver_version, node.driver_version)
    return node.replace(cuda_version=cuda_version, gpus=tuple(_apply_nvml(list(node.gpus), facts)), nvml=True,
                        nvml_error=None)


def with_search_paths(node: Node, dirs: tuple[str, ...]) -> Node:
    """`node` with the catalogue libraries found in `dirs` (paths inside the driver root,
    looked up as discovery looks up ld cache entries: same version and ELF checks): `cdi
    generate --library-search-path`, added to, or replacing, what the ld cache gave."""
    from nct.driver.ldcache import CacheEntry, LdCache
    from nct.errors import NctError

    entries = []
    for d in dirs:
        if not d.startswith("/"):
            raise NctError(f"--library-search-path {d!r}: must be an absolute path")
        real = resolve_in_root(node.roots.driver, d)
        if real is None:
            continue
        listing = fsview.listdir(host_path(node.roots.driver, real))
        if listing is None:
            continue
        names = sorted(listing)
        # FLAG_ELF: no ABI claimed, the ELF check of each candidate decides.
        entries += [CacheEntry(key=n, path=os.path.join(real, n), flags=0x0001)
                    for n in names if n.startswith("lib") and ".so" in n]
    cache = LdCache(path="<library-search-path>", format="new", entries=tuple(entries))
    found = (libs.find_libraries(node.roots.driver, cache, node.driver_version)
             + libs.find_libraries(node.roots.driver, cache, node.driver_version, compat32=True))
    if not found:
        return node
    keys = {(f.kind, f.name) for f in found}
    files = [f for f in node.files if (f.kind, f.name) not in keys]
    at = next((i for i, f in enumerate(files) if f.kind in ("lib", "lib32")), len(files))
    files[at:at] = found
    lib_dirs = list(dict.fromkeys([os.path.dirname(f.host_path) for f in found if f.kind == "lib"]
                                  + list(node.lib_dirs)))
    return node.replace(files=tuple(files), lib_dirs=tuple(lib_dirs))


def _catalogue_libs() -> frozenset[str]:
    from nct.driver.catalogue import all_library_names

    return frozenset(all_library_names())


_CATALOGUE_LIBS = _catalogue_libs()
