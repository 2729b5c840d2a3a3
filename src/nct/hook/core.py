"""The configure core shared by the prestart hook and `nvidia-container-cli configure`.

Both front ends turn their input (an OCI bundle + config.toml, or CLI flags) into a
ContainerRequest and a `Settings`, then call `prepare()` (discover, pick the image's library
dirs, plan, check requirements: everything that can fail on bad input, before anything is
mounted) and `configure()` (apply the plan inside the container). NVML is loaded only when
the request needs a fact only NVML has (MIG UUIDs, arch/brand requirements); a `cuda`
requirement asks libcuda alone.
"""

from __future__ import annotations

import os

from nct.log import get_logger
from nct.record import Record, field
from nct.driver.model import Node, Roots
from nct.edits.model import ContainerEdits
from nct.request.model import ContainerRequest

log = get_logger("nct.hook")


class Settings(Record):
    """Node- and run-wide knobs (config.toml / global CLI options / configure flags)."""

    roots: Roots = field(default_factory=Roots)
    ldcache: str | None = None  # path inside the driver root; None = /etc/ld.so.cache
    ldconfig: str | None = "@/sbin/ldconfig"  # "@host" or a container path; None = no ldconfig run
    no_cgroups: bool = False
    no_devbind: bool = False
    no_pivot: bool = False
    no_persistenced: bool = False
    no_fabricmanager: bool = False
    no_gsp_firmware: bool = False
    host_proc: str = "/proc"  # procfs in which the container pid is looked up
    load_kmods: bool = False  # --load-kmods / load-kmods: modprobe + mknod before discovery
    no_create_imex_channels: bool = False  # with load_kmods: don't mknod requested IMEX channels


class Prepared(Record):
    """The outcome of prepare(): the node as discovered and the plan for the container."""

    node: Node
    edits: ContainerEdits
    lib_dir: str
    lib32_dir: str


# --- the image's library dirs ------------------------------------------------------------------

def image_lib_dirs(rootfs: str, machine: str | None = None) -> tuple[str, str]:
    """(lib dir, 32-bit lib dir) of the image, looked up inside the rootfs without following
    any symlink out of it: /etc/debian_version -> multiarch dirs, else /usr/lib64 and
    /usr/lib32 (/usr/lib when the image has no /usr/lib32)."""
    from nct.container.rootfs import Root
    from nct.edits.planner import container_lib_dirs

    machine = machine or os.uname().machine
    with Root(rootfs) as root:
        debian = root.stat("/etc/debian_version") is not None
        lib32 = root.stat("/usr/lib32")
        lib32_exists = lib32 is not None and _isdir(lib32)
    return container_lib_dirs(debian, machine, lib32_exists=lib32_exists)


def _isdir(st: os.stat_result) -> bool:
    import stat

    return stat.S_ISDIR(st.st_mode)


# --- driver init (--load-kmods) --------------------------------------------------------------

def init_driver(settings: Settings, request: ContainerRequest | None = None):
    """upstream's init before discovery when load_kmods is set: load the NVIDIA modules the
    kernel lacks and mknod missing nodes (nct.nodeprep.devinit). Never raises for a node
    problem (discovery reports a missing driver); returns the InitReport, or None."""
    if not settings.load_kmods:
        return None
    from nct.nodeprep.devinit import init_driver as _init

    # IMEX channel nodes are the request's own: made by configure(), once the whole request
    # has been planned and checked (a request that fails leaves no node behind)
    report = _init(settings.roots, create_imex_channels=False)
    log.debug("load-kmods: %s", report)
    return report


# --- discovery, sized to the request ------------------------------------------------------------

def needs_nvml(request: ContainerRequest, node: Node) -> bool:
    """NVML is needed for MIG UUIDs (and GPU UUIDs procfs does not know) and for arch/brand
    conditions."""
    from nct.edits.select import nvml_needed
    from nct.request.requirements import mentioned_names

    if node.nvml or node.nvml_error is not None:
        return False
    return nvml_needed(node, request.devices) or bool(mentioned_names(request.requirements) & {"arch", "brand"})


def needs_cuda_version(request: ContainerRequest) -> bool:
    from nct.request.requirements import mentioned_names

    return "cuda" in mentioned_names(request.requirements)


def discover(request: ContainerRequest, settings: Settings) -> Node:
    """discover_node(), then NVML only when the request needs it; the CUDA version from
    libcuda alone when only a `cuda` condition needs it."""
    from nct.driver.discover import discover_node

    node = discover_node(settings.roots, ldcache=settings.ldcache, use_nvml=False)
    if needs_nvml(request, node):
        from nct.driver.discover import add_nvml_facts

        node = add_nvml_facts(node)
    if node.cuda_version is None and needs_cuda_version(request):
        from nct.driver import nvml

        cu = next((f.host_path for f in node.files if f.kind == "lib" and f.name == "libcuda.so"), None)
        if cu is not None:
            facts = nvml.query(None, cu)
            if facts.cuda_version:
                node = node.replace(cuda_version=facts.cuda_version)
    log.debug("discovered driver %s, CUDA %s, %d GPU(s), nvml=%s", node.driver_version, node.cuda_version,
              len(node.gpus), node.nvml)
    return node


# --- plan and apply ---------------------------------------------------------------------------------

def prepare(request: ContainerRequest, rootfs: str, settings: Settings, node: Node | None = None) -> Prepared:
    """Discover (unless `node` is given), choose the image's lib dirs and plan, checking
    devices and requirements. Raises an NctError; nothing has been touched yet."""
    from nct.edits.planner import PlanOptions, plan

    lib_dir, lib32_dir = image_lib_dirs(rootfs)
    if node is None:
        node = discover(request, settings)
    options = PlanOptions(
        target="live", lib_dir=lib_dir, lib32_dir=lib32_dir, no_devbind=settings.no_devbind,
        no_persistenced=settings.no_persistenced, no_fabricmanager=settings.no_fabricmanager,
        no_gsp_firmware=settings.no_gsp_firmware,
    )
    edits = plan(node, request, options)
    return Prepared(node=node, edits=edits, lib_dir=lib_dir, lib32_dir=lib32_dir)


def apply_options(prepared: Prepared, request: ContainerRequest, settings: Settings):
    """ApplyOptions for a plan: cgroups/devbind/ldconfig knobs and the CUDA compat mode."""
    from nct.container.apply import ApplyOptions

    compat = request.cuda_compat_mode if request.cuda_compat_mode in ("ldconfig", "mount") else "disabled"
    return ApplyOptions(
        no_cgroups=settings.no_cgroups, no_devbind=settings.no_devbind,
        ldconfig=settings.ldconfig or "@/sbin/ldconfig", no_ldconfig=settings.ldconfig is None,
        no_pivot=settings.no_pivot, driver_version=prepared.node.driver_version,
        cuda_version=prepared.node.cuda_version, cuda_compat_mode=compat,
        proc_root=prepared.node.roots.proc, host_proc=settings.host_proc,
    )


def early_ldconfig(rootfs: str, pid: int, settings: Settings):
    """ldconfig's child, forked before discovery by the disposable hook process (see
    nct.container.apply.early_ldconfig); None when no ldconfig is configured. Hand it to
    configure(early=...), which always ends it; cancel() it if configure is not reached."""
    from nct.container.apply import ApplyOptions, early_ldconfig as _early

    return _early(rootfs, pid, ApplyOptions(ldconfig=settings.ldconfig or "@/sbin/ldconfig",
                                            no_ldconfig=settings.ldconfig is None, no_pivot=settings.no_pivot,
                                            host_proc=settings.host_proc))


def configure(prepared: Prepared, request: ContainerRequest, rootfs: str, pid: int | None,
              settings: Settings, *, in_process: bool = False, early=None) -> None:
    """Apply a prepared plan to the container (its mount namespace when `pid` is given).
    `in_process`: the caller is a disposable process (see apply_edits): no fork. `early`:
    from early_ldconfig (ended here, used or not)."""
    from nct.container.apply import apply_edits

    edits = prepared.edits
    if request.cuda_compat_mode not in ("ldconfig", "mount"):
        edits = edits.replace(cuda_compat_dir=None)
    try:
        made = make_request_nodes(edits, settings)
    except BaseException:
        if early is not None:
            early.cancel()
        raise
    try:
        apply_edits(edits, rootfs, pid, apply_options(prepared, request, settings), in_process=in_process,
                    early=early)
    except BaseException:
        if made is not None:
            log.debug("removed the nodes made for this container: %s", made.undo())
        raise
    finally:
        if made is not None:
            made.close()


def make_request_nodes(edits: ContainerEdits, settings: Settings):
    """With load-kmods (and IMEX channel creation on): mknod the planned IMEX channel nodes
    the host lacks (upstream's --load-kmods does for requested channels). Called only
    after the whole request has been planned. Returns the devinit.MadeNodes, or None."""
    if not settings.load_kmods or settings.no_create_imex_channels:
        return None
    from nct.nodeprep.devinit import MadeNodes, imex_nodes_to_make

    made = MadeNodes()
    for node in imex_nodes_to_make(edits.device_nodes, settings.roots.dev or "/"):
        try:
            if made.make(node):
                log.debug("created %s (%d:%d)", node.host_path, node.major, node.minor)
        except OSError as e:  # the apply step names the missing node
            log.debug("could not create device node %s: %s", node.host_path, e.strerror or e)
    return made


def check_rootfs(rootfs: str) -> str:
    """ROOTFS must be absolute and not /; returned normalised."""
    from nct.errors import ContainerError

    norm = "/" + os.path.normpath(rootfs).lstrip("/") if rootfs else ""
    if not os.path.isabs(rootfs or "") or norm == "/":
        raise ContainerError(f"invalid rootfs {rootfs!r}: must be an absolute path other than /")
    return norm
