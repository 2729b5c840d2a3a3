"""`nvidia-container-runtime-hook prestart`: configure a container from its OCI state.

Steps, as upstream's hook + nvidia-container-cli, in one process:
1. OCI state on stdin -> pid and bundle (`bundlePath` for old runc);
2. <bundle>/config.json, minimally checked (ociVersion, process, root);
3. the request from the spec's env (None = not a GPU container: exit 0, untouched);
4. the legacy-mode assertion (unless skip-mode-detection);
5. with load-kmods (the default): load missing NVIDIA modules, mknod missing nodes;
6. discover, plan, check requirements (all before anything is mounted);
7. apply inside the container's mount namespace.
"""

from __future__ import annotations

import os

from nct import jsonio
from nct.log import get_logger
from nct.errors import SpecError

log = get_logger("nct.hook")

MODE_ERROR = ("invoking the NVIDIA Container Runtime Hook directly (e.g. specifying the docker --gpus flag) "
              "is not supported. Please use the NVIDIA Container Runtime (e.g. specify the --runtime=nvidia "
              "flag) instead.")


def read_state(state_bytes: bytes) -> tuple[int, str]:
    """(pid, bundle dir) from the OCI state JSON."""
    try:
        state = jsonio.loads(state_bytes or b"")
    except ValueError as e:
        raise SpecError(f"invalid OCI state on stdin: {e}") from None
    if not isinstance(state, dict):
        raise SpecError("invalid OCI state on stdin: expected a JSON object")
    pid = state.get("pid")
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        raise SpecError(f"invalid OCI state on stdin: pid must be a positive integer, not {pid!r}")
    bundle = state.get("bundle") or state.get("bundlePath")
    if not isinstance(bundle, str) or not bundle:
        raise SpecError("invalid OCI state on stdin: no bundle (or bundlePath)")
    return pid, bundle


def load_spec(bundle: str) -> tuple[dict, str]:
    """The bundle's config.json and the absolute rootfs (a relative or empty root.path is
    taken relative to the bundle, the hook's working directory under runc, as upstream)."""
    path = os.path.join(bundle, "config.json")
    spec = jsonio.read_object(path, SpecError)
    if not isinstance(spec.get("ociVersion"), str) or not spec["ociVersion"]:
        raise SpecError(f"{path}: missing ociVersion")
    if not isinstance(spec.get("process"), dict):
        raise SpecError(f"{path}: missing process")
    root = spec.get("root")
    if not isinstance(root, dict):
        raise SpecError(f"{path}: missing root")
    rootfs = root.get("path")
    if rootfs is None:
        rootfs = ""  # upstream: an empty root.path is the hook's working directory, the bundle
    if not isinstance(rootfs, str):
        raise SpecError(f"{path}: root.path must be a string")
    if not os.path.isabs(rootfs):
        rootfs = os.path.join(os.path.abspath(bundle), rootfs)
    return spec, os.path.normpath(rootfs)


def assert_legacy_mode(cfg, request) -> None:
    """The hook serves legacy mode only: `auto` resolves to cdi when every device is a
    CDI name and to csv on Tegra, legacy otherwise; any other explicit mode is refused."""
    from nct.errors import RequestError
    from nct.request.model import is_qualified_cdi_name
    from nct.runtime.modes import check_mode, is_tegra

    if cfg.nvidia_container_runtime_hook.skip_mode_detection:
        return
    mode = check_mode(cfg.nvidia_container_runtime.mode)
    if mode == "auto":
        if request.devices and all(is_qualified_cdi_name(d) for d in request.devices):
            mode = "cdi"
        elif is_tegra(cfg.nvidia_container_cli.root or "/"):
            mode = "csv"
        else:
            mode = "legacy"
    if mode != "legacy":
        raise RequestError(MODE_ERROR)


def settings_from_config(cfg):
    from nct.driver.discover import roots_from_config
    from nct.hook.core import Settings

    cli = cfg.nvidia_container_cli
    return Settings(
        roots=roots_from_config(cfg), ldcache=cli.ldcache or None, ldconfig=cli.ldconfig,
        no_cgroups=cli.no_cgroups, no_pivot=cli.no_pivot, load_kmods=cli.load_kmods,
        no_create_imex_channels=cfg.features.disable_imex_channel_creation,
    )


def _setup_logging(debug: bool, cfg) -> None:
    target = "/dev/stderr" if debug else cfg.nvidia_container_cli.debug
    if not target:
        return
    import logging

    try:
        handler = logging.StreamHandler() if debug else logging.FileHandler(target, mode="a")
    except OSError:
        return  # an unwritable log must not fail the container
    handler.setFormatter(logging.Formatter(f"%(asctime)s nvidia-container-runtime-hook[{os.getpid()}] "
                                           "%(levelname)s %(name)s: %(message)s"))
    logger = logging.getLogger("nct")
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)


def prestart(state_bytes: bytes, *, config_path: str | None = None, debug: bool = False,
             disposable: bool = False) -> None:
    """Configure the container described by the OCI state. Raises an NctError (one line).
    `disposable`: this is the hook process, which exits right after (the container is
    configured without forking, leaving this process in the container's mount namespace)."""
    from time import perf_counter

    t0 = perf_counter()
    from nct.config.load import check_supported_capabilities, load_config
    from nct.hook import core
    from nct.request.parse import request_from_spec

    cfg = load_config(config_path)
    check_supported_capabilities(cfg)
    _setup_logging(debug, cfg)
    pid, bundle = read_state(state_bytes)
    spec, rootfs = load_spec(bundle)
    request = request_from_spec(spec, cfg)
    if request is None:
        log.debug("not a GPU container: nothing to do")
        return
    assert_legacy_mode(cfg, request)
    rootfs = core.check_rootfs(rootfs)
    settings = settings_from_config(cfg)
    core.init_driver(settings, request)
    t1 = perf_counter()
    # the hook process only (it applies in-process): ldconfig's child now, so that its slow
    # move into its device cgroup overlaps discovery and planning (core.early_ldconfig)
    early = core.early_ldconfig(rootfs, pid, settings) if disposable else None
    try:
        prepared = core.prepare(request, rootfs, settings)
    except BaseException:
        if early is not None:
            early.cancel()
        raise
    t2 = perf_counter()
    log.debug("configuring pid %d rootfs %s: %d device nodes, %d mounts", pid, rootfs,
              len(prepared.edits.device_nodes), len(prepared.edits.mounts))
    core.configure(prepared, request, rootfs, pid, settings, in_process=disposable, early=early)
    log.debug("timings: request %.1f ms, discover+plan %.1f ms, apply %.1f ms",
              (t1 - t0) * 1e3, (t2 - t1) * 1e3, (perf_counter() - t2) * 1e3)
