"""`create`: read the bundle's config.json, apply the mode's modifiers, write it back.

The order of work matters for safety: everything that can fail (config, spec parsing,
device resolution, discovery, CDI injection) happens in memory first; the spec file is
replaced atomically only at the end, and only when something changed. A container that
requests no GPU is left exactly as it was (the file is not even rewritten), except that in
the cdi, jit-cdi and csv modes a stale NVIDIA prestart hook is removed, as upstream does.

Other areas are reached through `Backend` (request parsing, discovery + planner, CDI
registry, OCI injection), imported lazily; tests substitute a fake.
"""

from __future__ import annotations

import copy
import os

from nct.errors import ConfigError, NctError
from nct.request.model import is_qualified_cdi_name
from nct.runtime import argv as av
from nct.runtime import modes
from nct.runtime.bundle import read_spec, write_spec
from nct.runtime.lookup import resolve_tool


class Backend:
    """The runtime's view of the other areas. Every method may raise NctError."""

    def request(self, spec: dict, cfg, *, annotations: bool):
        """ContainerRequest | None for the spec (None = not a GPU container)."""
        from nct.request.parse import request_from_spec

        return request_from_spec(spec, cfg, runtime=True, annotations=annotations)

    def tegra(self, cfg) -> bool:
        return modes.is_tegra(cfg.nvidia_container_cli.root or "/")

    _node = None

    def node(self, cfg, request=None):
        """The node's driver state, discovered once per create; NVML is asked (in a child)
        only when the requested devices need it (MIG UUIDs, MIG profiles)."""
        if self._node is None:
            from nct.driver.discover import discover_node, roots_from_config

            self._node = discover_node(roots_from_config(cfg), use_nvml=False)
        if request is not None and not self._node.nvml:
            from nct.edits.select import nvml_needed

            if nvml_needed(self._node, request.devices, mig_profiles=True):
                from nct.driver.discover import add_nvml_facts

                self._node = add_nvml_facts(self._node)
        return self._node

    def jit_inject(self, spec: dict, cfg, request, hook_path: str, log) -> dict:
        """Plan the requested devices from our own discovery and apply them to `spec`
        (upstream's in-memory runtime.nvidia.com CDI spec)."""
        from nct.runtime import jit

        return jit.jit_inject(spec, self.node(cfg, request), request, cfg, hook_path)

    def graphics_inject(self, spec: dict, cfg, request, hook_path: str, log) -> dict:
        from nct.runtime import jit

        return jit.graphics_inject(spec, self.node(cfg, request), request, cfg, hook_path)

    def gated_inject(self, spec: dict, cfg, request, hook_path: str, log) -> dict:
        from nct.runtime import jit

        return jit.gated_inject(spec, request, cfg, hook_path)

    def inject_cdi(self, spec: dict, names: list[str], spec_dirs: tuple[str, ...], log) -> dict:
        from nct.runtime import jit

        return jit.inject_from_registry(spec, names, spec_dirs, log)


def handle_create(args: list[str], settings, forced_mode: str | None, log, environ=None,
                  backend: Backend | None = None) -> bool:
    """Modify <bundle>/config.json for `create`; returns whether the file was rewritten."""
    from nct.runtime.settings import load_full_config

    env = os.environ if environ is None else environ
    bundle = av.bundle_dir(args) or os.getcwd()
    path = os.path.join(bundle, "config.json")
    cfg = load_full_config(settings)
    mode = modes.check_mode(forced_mode or cfg.nvidia_container_runtime.mode)
    spec = read_spec(path, strict=not cfg.features.allow_unknown_oci_spec_fields)
    log.debug(f"Using OCI specification file path: {path}")
    new = modify_spec(copy.deepcopy(spec), cfg, mode, log, backend or Backend(), env.get("PATH"))
    if new is None or new == spec:
        log.debug("OCI specification left unmodified")
        return False
    write_spec(path, new)
    log.info(f"Wrote modified OCI specification {path}")
    if systemd_cgroups(new):
        try:
            made = dev_char_links(spec, new, dev_roots(cfg), log)
        except (NctError, OSError) as e:  # never fail a container for it
            log.warning(f"could not create /dev/char links for the injected devices: {e}")
        else:
            if made:
                log.info(f"Created {made} /dev/char link(s) for the systemd cgroup driver")
    return True


def systemd_cgroups(spec: dict) -> bool:
    """Whether the engine uses runc's systemd cgroup driver: cgroupsPath is then
    "slice:prefix:name" (the cgroupfs driver takes a path)."""
    linux = spec.get("linux")
    path = linux.get("cgroupsPath") if isinstance(linux, dict) else None
    return isinstance(path, str) and not path.startswith("/") and path.count(":") == 2


def dev_roots(cfg) -> tuple[str, ...]:
    from nct.driver.discover import roots_from_config

    return tuple(dict.fromkeys((roots_from_config(cfg).dev, "/")))


def dev_char_links(old: dict, new: dict, roots: tuple[str, ...], log, dev_char_path: str = "/dev/char") -> int:
    """/dev/char links for the char devices the modifiers added to the spec: systemd
    resolves the container's DeviceAllow entries through them, and drops the devices it
    cannot resolve on its next reload (nct.nodeprep.devinit). Returns the links made."""
    from nct.nodeprep.devinit import added_char_devices, ensure_dev_char_links

    nodes = added_char_devices(old, new, roots)
    return ensure_dev_char_links(nodes, dev_char_path, log=lambda msg: log.debug(msg))


def modify_spec(spec: dict, cfg, mode: str, log, backend: Backend, env_path: str | None = None) -> dict | None:
    """Apply the modifiers of the resolved mode to `spec` (a private copy, changed in
    place). None when the container requests no device (leave it untouched)."""
    request = None
    if mode in ("auto", "cdi"):  # annotations count only for these
        request = backend.request(spec, cfg, annotations=True)
    if mode == "auto":
        devices = request.devices if request is not None else None
        all_cdi = devices is not None and bool(devices) and all(is_qualified_cdi_name(d) for d in devices)
        mode = modes.resolve_mode(mode, devices, tegra=(not all_cdi) and backend.tegra(cfg))
    if mode != "cdi":
        request = backend.request(spec, cfg, annotations=False)
    if request is None:
        # upstream runs the hook remover in these modes whatever is requested: a stale
        # prestart hook (docker --gpus, an old config) must not outlive the legacy hook
        if "nvidia-hook-remover" in modes.MODIFIERS[mode] and modes.remove_nvidia_hooks(spec):
            log.info("No NVIDIA devices requested; removed stale NVIDIA Container Runtime Hook prestart hook(s)")
            return spec
        log.info(f"No NVIDIA devices requested; leaving the OCI specification unmodified (mode {mode})")
        return None
    log.info(f"Using {mode} mode for devices {list(request.devices) or ['none']}")
    if mode == "csv":
        raise ConfigError(
            "nvidia-container-runtime.mode: csv mode (Tegra CSV mount files) is not supported on this platform"
        )
    for name in modes.MODIFIERS[mode]:
        if name == "nvidia-hook-remover":
            removed = modes.remove_nvidia_hooks(spec)
            if removed:
                log.info(f"Removed {removed} NVIDIA Container Runtime Hook prestart hook(s)")
        elif name == "feature-gated":
            spec = feature_gated(spec, cfg, request, log, backend, env_path)
        elif name == "graphics":
            spec = graphics(spec, cfg, request, log, backend, env_path)
        elif mode == "legacy":
            hook = resolve_tool(cfg.nvidia_container_runtime_hook.path, "nvidia-container-runtime-hook", env_path)
            if modes.add_legacy_hook(spec, hook):
                log.info(f"Using prestart hook path: {hook}")
            else:
                log.info("Existing NVIDIA prestart hook found in OCI specification")
        else:
            spec = cdi_modifier(spec, cfg, mode, request, log, backend, env_path)
    return spec


def cdi_modifier(spec: dict, cfg, mode: str, request, log, backend: Backend, env_path: str | None) -> dict:
    """cdi / jit-cdi: qualify names (default kind, or runtime.nvidia.com/gpu in jit-cdi);
    runtime.nvidia.com names are generated just in time, others come from spec dirs."""
    kind = modes.JIT_KIND if mode == "jit-cdi" else cfg.nvidia_container_runtime.modes.cdi.default_kind
    names = modes.qualify(request.devices, kind)
    ids = modes.split_jit(names)
    if ids is None:
        dirs = cfg.nvidia_container_runtime.modes.cdi.spec_dirs
        log.info(f"Injecting CDI devices {names} from {list(dirs)}")
        return backend.inject_cdi(spec, names, dirs, log)
    devices = tuple(i for i in ids if i != "none")
    hook_path = resolve_tool(cfg.nvidia_ctk.path, "nvidia-ctk", env_path)
    log.info(f"Generating just-in-time CDI edits for devices {names}")
    return backend.jit_inject(spec, cfg, request.replace(devices=devices), hook_path, log)


def _hook_args(hook_path: str, name: str, *args: str) -> list[str]:
    base = os.path.basename(hook_path)
    if base == "nvidia-ctk":
        return [base, "hook", name, *args]
    return [base, name, *args]


def feature_gated(spec: dict, cfg, request, log, backend: Backend, env_path: str | None) -> dict:
    """legacy/csv: opt-in device classes (NVIDIA_GDS=enabled, ...) as JIT edits, and the
    CUDA compat hook when modes.legacy.cuda-compat-mode = "hook"."""
    if request.gated_modes:
        hook_path = resolve_tool(cfg.nvidia_ctk.path, "nvidia-ctk", env_path)
        log.info(f"Adding feature-gated devices {list(request.gated_modes)}")
        spec = backend.gated_inject(spec, cfg, request, hook_path, log)
    if (cfg.nvidia_container_runtime.modes.legacy.cuda_compat_mode == "hook"
            and not cfg.features.disable_cuda_compat_lib_hook):
        node = backend.node(cfg)
        hook_path = resolve_tool(cfg.nvidia_ctk.path, "nvidia-ctk", env_path)
        hooks = spec.setdefault("hooks", {}).setdefault("createContainer", [])
        for args in (_hook_args(hook_path, "enable-cuda-compat", f"--host-driver-version={node.driver_version}"),
                     _hook_args(hook_path, "update-ldcache")):
            hook = {"path": hook_path, "args": args, "env": ["NVIDIA_CTK_DEBUG=false"]}
            if hook not in hooks:
                hooks.append(hook)
        log.info("Added CUDA compat hooks")
    return spec


GRAPHICS_CAPS = ("graphics", "display")


def graphics(spec: dict, cfg, request, log, backend: Backend, env_path: str | None) -> dict:
    """legacy: DRM nodes of the selected GPUs, their /dev/dri/by-path links and the
    graphics config files, when graphics or display is requested."""
    if not any(c in request.capabilities for c in GRAPHICS_CAPS):
        return spec
    hook_path = resolve_tool(cfg.nvidia_ctk.path, "nvidia-ctk", env_path)
    log.info("Adding graphics devices and files")
    return backend.graphics_inject(spec, cfg, request, hook_path, log)

