"""The toolkit installer (`nvidia-ctk-installer`, `nvidia-toolkit`, `nct install`): what the
GPU Operator's toolkit container does on every GPU node.  Install nct into
`$ROOT/toolkit` (self-contained), write its config.toml, optionally create the control
device nodes and the CDI specs, register the runtimes with the engine (or write CRI-O's
OCI hook), restart the engine; then, unless told not to, wait for a signal and undo all of
it (engine config back to its original bytes, toolkit removed).

Paths come in two kinds: what this process touches (the engine's config files, the CDI
output dir, the device nodes, the driver for discovery) is named as the pod sees it; what
the engine or the installed commands read later (containerd's `imports`, runtime
`BinaryName`s, the hook path in CRI-O's hook JSON, config.toml's driver root and ldconfig,
the paths in a CDI spec) is named as the host sees it.  The toolkit dir is the same path in
both, as upstream recommends.  The click front end is `nct.cli.installer`."""

from __future__ import annotations

import errno
import fcntl
import json
import os
import subprocess
from pathlib import Path

from nct.engines.bundle import Installed, base_python, copy_library, write_wrappers
from nct.engines.files import read_text, remove_file
from nct.engines.model import EngineRequest, RuntimeEntry
from nct.engines.toolkit import copy_toolkit, running_toolkit
from nct.errors import EngineConfigError, NctError
from nct.record import Record, asdict, field
from nct.sigreset import default_signals

MANIFEST = ".nct-install.json"
CONFIG_REL = ".config/nvidia-container-runtime/config.toml"
TOOLKIT_SUBDIR = "toolkit"
PID_FILE_NAME = "toolkit.pid"
# runtime handler name suffix -> installed binary
RUNTIME_BINARIES = (("", "nvidia-container-runtime"), ("-cdi", "nvidia-container-runtime.cdi"),
                    ("-legacy", "nvidia-container-runtime.legacy"))
DEFAULT_LOW_LEVEL_RUNTIMES = ("runc", "crun")
HOST_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class EngineDefaults(Record):
    config: str
    socket: str
    restart_mode: str
    drop_in: str
    config_sources: tuple[str, ...]


# Upstream's runtime-specific defaults (RUNTIME_SPECIFIC_DEFAULT), but CRI-O's drop-in: upstream
# writes /etc/crio/conf.d/99-nvidia.toml, a directory CRI-O does not read (its config dir is
# /etc/crio/crio.conf.d); nct writes where CRI-O looks.
ENGINE_DEFAULTS = {
    "containerd": EngineDefaults("/etc/containerd/config.toml", "/run/containerd/containerd.sock", "signal",
                                 "/etc/containerd/conf.d/99-nvidia.toml", ("command", "file")),
    "crio": EngineDefaults("/etc/crio/crio.conf", "/var/run/crio/crio.sock", "systemd",
                           "/etc/crio/crio.conf.d/99-nvidia.toml", ("command", "file")),
    "docker": EngineDefaults("/etc/docker/daemon.json", "/var/run/docker.sock", "signal", "", ("file",)),
}


class InstallOptions(Record, frozen=False):
    """Every setting, resolved (flags over env over defaults).  Optional config.toml values
    are None when neither a flag nor an env var set them (upstream writes them only then)."""

    toolkit_dir: str = "/usr/local/nvidia/toolkit"
    runtime: str = "docker"
    pid_file: str = "/run/nvidia/toolkit/toolkit.pid"
    no_daemon: bool = False
    no_runtime_config: bool = False
    toolkit_source: str | None = None
    python: str | None = None
    ignore_errors: bool = False
    # the driver and /dev: host paths (what config.toml and specs name) and pod paths (what we read)
    driver_root: str = "/run/nvidia/driver"
    driver_root_ctr_path: str = "/run/nvidia/driver"
    dev_root: str = ""
    dev_root_ctr_path: str = ""
    # config.toml
    runtime_debug: str | None = None
    runtime_log_level: str | None = None
    runtime_mode: str | None = None
    cdi_default_kind: str | None = None
    cdi_annotation_prefixes: list[str] | None = None
    low_level_runtimes: list[str] | None = None
    hook_skip_mode_detection: bool = True
    cli_debug: str | None = None
    accept_envvar_unprivileged: bool = True
    accept_volume_mounts: bool = False
    opt_in_features: list[str] = field(default_factory=list)
    # CDI
    cdi_enabled: bool = False
    cdi_output_dir: str = "/var/run/cdi"
    cdi_kind: str = "management.nvidia.com/gpu"
    cdi_full_spec: bool = False
    create_device_nodes: list[str] = field(default_factory=lambda: ["control"])
    # the engine
    config: str = ""
    drop_in: str = ""
    drop_in_host_path: str = ""
    socket: str = ""
    restart_mode: str = ""
    enable_cdi_in_runtime: bool | None = None  # None: as cdi_enabled ends up after validate()
    host_root: str = "/host"
    runtime_name: str = "nvidia"
    set_as_default: bool = True
    config_sources: list[str] = field(default_factory=list)
    executable_path: str = ""
    containerd_runtime_type: str = "io.containerd.runc.v2"
    containerd_use_legacy_config: bool = False
    runtime_config_override: str = "{}"
    crio_config_mode: str = "config"
    crio_hooks_dir: str = "/usr/share/containers/oci/hooks.d"
    crio_hook_filename: str = "oci-nvidia-hook.json"

    @property
    def dev_root_host(self) -> str:
        return self.dev_root or self.driver_root

    @property
    def dev_root_pod(self) -> str:
        return self.dev_root_ctr_path or self.driver_root_ctr_path

    @property
    def hook_mode(self) -> bool:
        return self.runtime == "crio" and self.crio_config_mode == "hook"


def apply_engine_defaults(opts: InstallOptions) -> None:
    """Fill the runtime-specific defaults left empty; the drop-in's host path defaults to
    its own path (the installer runs on the host, or pod and host paths match)."""
    d = ENGINE_DEFAULTS.get(opts.runtime)
    if d is None:
        raise EngineConfigError(f"unknown runtime {opts.runtime!r} (want docker, containerd or crio)")
    opts.config = opts.config or d.config
    opts.socket = opts.socket or d.socket
    opts.restart_mode = opts.restart_mode or d.restart_mode
    opts.config_sources = opts.config_sources or list(d.config_sources)


def validate(opts: InstallOptions) -> list[str]:
    """Check the settings (one-line errors); returns warnings.  Mirrors upstream's
    validation: pid file named toolkit.pid, a valid CDI kind, CDI off without an output
    dir, device nodes only with CDI."""
    from nct.cdi.names import parse_kind
    from nct.engines.reload import RESTART_MODES
    from nct.errors import SpecError

    warnings = []
    if opts.runtime not in ENGINE_DEFAULTS:
        raise EngineConfigError(f"unknown runtime {opts.runtime!r} (want docker, containerd or crio)")
    if not opts.toolkit_dir or not os.path.isabs(opts.toolkit_dir):
        raise EngineConfigError(f"toolkit install dir {opts.toolkit_dir!r}: must be an absolute path "
                                "(--toolkit-install-dir, TOOLKIT_INSTALL_DIR, ROOT)")
    if os.path.basename(opts.pid_file) != PID_FILE_NAME:
        raise EngineConfigError(f"invalid toolkit.pid path {opts.pid_file}: the file must be named {PID_FILE_NAME}")
    if opts.restart_mode not in RESTART_MODES:
        raise EngineConfigError(f"invalid restart mode {opts.restart_mode!r}: want signal, systemd or none")
    if opts.crio_config_mode not in ("config", "hook"):
        raise EngineConfigError(f"invalid cri-o config mode {opts.crio_config_mode!r}: want config or hook")
    for p, what in ((opts.config, "--config"), (opts.drop_in, "--drop-in-config"), (opts.host_root, "--host-root"),
                    (opts.drop_in_host_path, "--drop-in-config-host-path"), (opts.crio_hooks_dir, "--hooks-dir")):
        if p and not os.path.isabs(p):
            raise EngineConfigError(f"{what} {p}: must be an absolute path")
    if opts.runtime == "docker" and opts.drop_in:
        raise EngineConfigError("docker does not support drop-in config files (--drop-in-config, RUNTIME_DROP_IN_CONFIG)")
    try:
        parse_kind(opts.cdi_kind)
    except SpecError as e:
        raise EngineConfigError(f"--cdi-kind: {e}") from None
    if opts.cdi_enabled and not opts.cdi_output_dir:
        warnings.append("skipping CDI spec generation (no output directory specified)")
        opts.cdi_enabled = False
    disabled = False
    for mode in opts.create_device_nodes:
        if mode not in ("", "none", "control"):
            raise EngineConfigError(f"invalid --create-device-nodes value: {mode!r} (want control, none or '')")
        disabled = disabled or mode in ("", "none")
    if disabled or not opts.cdi_enabled:
        opts.create_device_nodes = []
    if opts.enable_cdi_in_runtime is None:  # upstream: the engine's CDI follows --cdi-enabled
        opts.enable_cdi_in_runtime = opts.cdi_enabled
    if opts.hook_mode:
        warnings.append('the "hook" config mode for cri-o is deprecated')
    return warnings


class Installation(Record, frozen=False):
    """What one install did; saved in the toolkit dir so `--uninstall` can undo it later."""

    options: InstallOptions
    installed: Installed = field(default_factory=Installed)
    engine_configured: bool = False
    hook_file: str | None = None
    cdi_specs: list[str] = field(default_factory=list)
    log: list[str] = field(default_factory=list)

    def save(self) -> None:
        from nct.fileio import atomic_write

        data = {"options": asdict(self.options), "installed": asdict(self.installed),
                "engine_configured": self.engine_configured, "hook_file": self.hook_file,
                "cdi_specs": self.cdi_specs}
        atomic_write(str(Path(self.options.toolkit_dir) / MANIFEST), (json.dumps(data, indent=2) + "\n").encode(),
                     mode=0o600)

    @classmethod
    def load(cls, toolkit_dir: str) -> "Installation":
        path = Path(toolkit_dir) / MANIFEST
        text = read_text(str(path))
        if text is None:
            raise EngineConfigError(f"{path}: no nct installation found there")
        try:
            data = json.loads(text)
            opts = InstallOptions(**data["options"])
            inst = cls(opts, Installed(**data["installed"]), data["engine_configured"], data.get("hook_file"),
                       list(data.get("cdi_specs") or []))
        except (ValueError, KeyError, TypeError):
            raise EngineConfigError(f"{path}: corrupt install manifest") from None
        # what it removes is bounded by the dir it was found in, whatever the file says: the
        # toolkit dir asked for, CDI specs and the hook by their file type (CDI and CRI-O read
        # only those), never any other host file
        opts.toolkit_dir = toolkit_dir
        inst.cdi_specs = [p for p in inst.cdi_specs if isinstance(p, str) and p.endswith((".yaml", ".json"))]
        if not (isinstance(inst.hook_file, str) and inst.hook_file.endswith(".json")):
            inst.hook_file = None
        return inst


# --- the pid file -------------------------------------------------------------------------

class PidLock(Record):
    """The locked pid file: its open fd (the lock lives as long as it) and the dirs made for it."""

    path: str
    fd: int
    dirs: tuple[str, ...] = ()


def lock_pid_file(path: str) -> PidLock:
    """Take the single-instance lock: open (never through a symlink, never truncating another
    instance's file), flock without waiting, then write our pid."""
    from nct.engines.files import made_dirs

    try:
        dirs = tuple(made_dirs(path))
    except OSError as e:
        raise EngineConfigError(f"{path}: cannot create its directory: {e.strerror or e}") from None
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as e:
        raise EngineConfigError(f"{path}: cannot open the pid file: {e.strerror or e}") from None
    import stat

    if not stat.S_ISREG(os.fstat(fd).st_mode):  # a FIFO or device planted there
        os.close(fd)
        raise EngineConfigError(f"{path}: the pid file is not a regular file; remove it")
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        other = os.pread(fd, 32, 0).decode(errors="replace").strip()
        os.close(fd)
        if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            raise EngineConfigError(f"{path}: another toolkit installer is running (pid {other or '?'}); "
                                    "stop it first") from None
        raise EngineConfigError(f"{path}: cannot lock the pid file: {e.strerror or e}") from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return PidLock(path, fd, dirs)


def release_pid_file(lock: PidLock) -> None:
    """Remove the pid file if it is still the one we locked, drop the lock, and remove the
    dirs made for it when empty."""
    try:
        if os.path.samestat(os.fstat(lock.fd), os.lstat(lock.path)):
            os.unlink(lock.path)
    except OSError:
        pass
    os.close(lock.fd)
    for d in reversed(lock.dirs):
        try:
            os.rmdir(d)
        except OSError:
            break


# --- what the toolkit's config.toml says ----------------------------------------------------

def driver_ldconfig(opts: InstallOptions) -> str:
    """`@<driver root>/sbin/ldconfig(.real)`: the host path, the `.real` variant when the driver
    root (looked at through its pod path) has one."""
    for rel in ("sbin/ldconfig.real", "sbin/ldconfig"):
        if os.path.exists(os.path.join(opts.driver_root_ctr_path or "/", rel)):
            break
    return "@" + os.path.join(opts.driver_root or "/", rel)


def toolkit_config_text(opts: InstallOptions, warn: list[str] | None = None) -> str:
    """The installed commands' config.toml: nct's default file with the keys upstream's
    installer sets (always) and the optional ones it sets only when given and non-empty."""
    from nct.config.edit import default_text, parse_document, render, set_value
    from nct.errors import ConfigError

    root = Path(opts.toolkit_dir)
    doc = parse_document(default_text(), "default config")
    values: list[tuple[str, object]] = [
        ("accept-nvidia-visible-devices-envvar-when-unprivileged", opts.accept_envvar_unprivileged),
        ("accept-nvidia-visible-devices-as-volume-mounts", opts.accept_volume_mounts),
        ("nvidia-container-cli.root", opts.driver_root or "/"),
        ("nvidia-container-cli.path", str(root / "nvidia-container-cli")),
        ("nvidia-container-cli.ldconfig", driver_ldconfig(opts)),
        ("nvidia-ctk.path", str(root / "nvidia-ctk")),
        ("nvidia-container-runtime-hook.path", str(root / "nvidia-container-runtime-hook")),
        ("nvidia-container-runtime-hook.skip-mode-detection", opts.hook_skip_mode_detection),
    ]
    if opts.low_level_runtimes:
        values.append(("nvidia-container-runtime.runtimes", list(opts.low_level_runtimes)))
    optional = [("nvidia-container-runtime.debug", opts.runtime_debug),
                ("nvidia-container-runtime.log-level", opts.runtime_log_level),
                ("nvidia-container-runtime.mode", opts.runtime_mode),
                ("nvidia-container-runtime.modes.cdi.annotation-prefixes", opts.cdi_annotation_prefixes),
                ("nvidia-container-runtime.modes.cdi.default-kind", opts.cdi_default_kind),
                ("nvidia-container-cli.debug", opts.cli_debug)]
    values += [(k, v) for k, v in optional if v]
    for key, value in values:
        set_value(doc, key, value)
    for feature in opts.opt_in_features:
        if not feature:
            continue
        try:
            set_value(doc, f"features.{feature}", True)
        except ConfigError:
            if warn is not None:
                warn.append(f"ignoring unknown opt-in feature {feature!r}")
    return render(doc, str(root / CONFIG_REL))


# --- the engine's own config ------------------------------------------------------------------

def engine_request(opts: InstallOptions) -> EngineRequest:
    root = Path(opts.toolkit_dir)
    runtimes = tuple(RuntimeEntry(opts.runtime_name + suffix, str(root / binary))
                     for suffix, binary in RUNTIME_BINARIES)
    prefixes = (opts.cdi_annotation_prefixes or []) if opts.runtime == "containerd" else []
    return EngineRequest(
        engine=opts.runtime, config=opts.config, runtimes=runtimes, drop_in=opts.drop_in or None,
        set_as_default=opts.set_as_default,
        cdi_enabled=bool(opts.enable_cdi_in_runtime) and opts.runtime != "crio",
        drop_in_host_path=opts.drop_in_host_path or None, runtime_type=opts.containerd_runtime_type,
        container_annotations=tuple(p + "*" for p in prefixes if p),
        runtime_config_override="" if opts.runtime_config_override.strip() in ("", "{}")
        else opts.runtime_config_override,
        legacy_config=opts.containerd_use_legacy_config)


def _command_source(opts: InstallOptions) -> str:
    """The engine's effective config from the engine itself, run on the host (chroot)."""
    exe = opts.executable_path or ("containerd" if opts.runtime == "containerd" else "crio")
    cmd = [exe, "config", "dump"] if opts.runtime == "containerd" else [exe, "status", "config"]
    chroot = bool(opts.host_root) and os.path.normpath(opts.host_root) != "/"
    if chroot:
        cmd = ["chroot", opts.host_root] + cmd
    elif opts.runtime == "containerd" and os.path.exists(opts.config):
        cmd[1:1] = ["--config", opts.config]
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env={"PATH": HOST_PATH},
                             preexec_fn=default_signals)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise EngineConfigError(f"{' '.join(cmd)}: {getattr(e, 'strerror', None) or e}") from None
    if res.returncode != 0:
        err = (res.stderr.strip().splitlines() or [f"exit status {res.returncode}"])[-1]
        raise EngineConfigError(f"{' '.join(cmd)}: {err}")
    return res.stdout


def read_source(opts: InstallOptions, log: list[str]) -> str | None:
    """The engine's effective config from the first config source that answers
    (RUNTIME_CONFIG_SOURCES: `command`, `file` or `file=PATH`); None = the config file."""
    if opts.runtime == "docker":
        return None
    for source in opts.config_sources:
        kind, _, arg = source.partition("=")
        kind, arg = kind.strip(), arg.strip()
        if kind == "file":
            path = arg or opts.config
            return None if path == opts.config else (read_text(path) or "")
        if kind == "command":
            try:
                return _command_source(opts)
            except EngineConfigError as e:
                log.append(f"warning: config source 'command' failed, trying the next one: {e}")
                continue
        raise EngineConfigError(f"unsupported config source {source!r} (want command, file or file=PATH)")
    return None


def low_level_runtimes(engine: str, text: str | None) -> list[str]:
    """Upstream's default nvidia-container-runtime.runtimes: the binaries the engine's
    config gives its default (non-nvidia) runtime, runc and crun, then `runc`, `crun`."""
    from nct.tomledit import parse, plain

    paths: list[str] = []
    try:
        if engine == "docker":
            doc = json.loads(text) if text and text.strip() else {}
            runtimes, default = doc.get("runtimes") or {}, doc.get("default-runtime")
            binary = lambda r: r.get("path")  # noqa: E731
        else:
            doc = plain(parse(text or "", engine))
            if engine == "crio":
                rt = (doc.get("crio") or {}).get("runtime") or {}
                runtimes, default = rt.get("runtimes") or {}, rt.get("default_runtime")
                binary = lambda r: r.get("runtime_path")  # noqa: E731
            else:
                plugins = doc.get("plugins") or {}
                cri: dict = next((plugins[k] for k in ("io.containerd.cri.v1.runtime", "io.containerd.grpc.v1.cri", "cri")
                            if isinstance(plugins.get(k), dict)), {})
                ctd = cri.get("containerd") or {}
                runtimes, default = ctd.get("runtimes") or {}, ctd.get("default_runtime_name")
                binary = lambda r: (r.get("options") or {}).get("BinaryName")  # noqa: E731
    except (ValueError, AttributeError, RecursionError, EngineConfigError):  # configure names the error
        runtimes, default, binary = {}, None, None
    names = ([default] if isinstance(default, str) and default and not default.startswith("nvidia") else [])
    for name in names + ["runc", "crun"]:
        entry = runtimes.get(name) if isinstance(runtimes, dict) else None
        path = binary(entry) if binary and isinstance(entry, dict) else None
        if isinstance(path, str) and path and path not in paths:
            paths.append(path)
    return paths + [r for r in DEFAULT_LOW_LEVEL_RUNTIMES if r not in paths]


# --- steps ----------------------------------------------------------------------------------------

def _run_installed(opts: InstallOptions, args: list[str], what: str) -> str:
    """Run one of the installed commands (the toolkit we just copied), stdout returned."""
    cmd = [str(Path(opts.toolkit_dir) / "nvidia-ctk"), *args]
    env = {k: v for k, v in os.environ.items() if k in ("NCT_PROC_ROOT", "LANG")}
    env["PATH"] = HOST_PATH
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, preexec_fn=default_signals)
    if res.returncode != 0:
        msg = (res.stderr.strip().splitlines() or [f"exit status {res.returncode}"])[-1]
        raise EngineConfigError(f"{what} failed: {msg}")
    return res.stdout


def install_toolkit(opts: InstallOptions, inst: Installation) -> None:
    root = Path(opts.toolkit_dir)
    inst.installed.mkdir(root)
    source = Path(opts.toolkit_source) if opts.toolkit_source else (None if opts.python else running_toolkit())
    if source is not None:  # the self-contained toolkit: its own Python, no host Python used
        copy_toolkit(source, root, inst.installed)  # launchers: config.toml in root/.config
    else:  # development (a venv): wrappers that run this interpreter on a copy of nct
        lib = root / "lib" / "python"
        copy_library(lib, inst.installed)
        write_wrappers(root, lib, opts.python or base_python(), inst.installed, config_home=root / ".config")
    cfg = root / CONFIG_REL
    from nct.engines.files import unlink_links

    unlink_links(str(root), str(cfg))  # config.toml never lands outside the toolkit dir
    inst.installed.mkdir(cfg.parent)
    from nct.fileio import atomic_write

    atomic_write(str(cfg), toolkit_config_text(opts, inst.log).encode(), mode=0o644, keep_owner=False)
    inst.installed.add_file(cfg)
    inst.log.append(f"installed the NVIDIA Container Toolkit (nct) into {root}")


def create_device_nodes(opts: InstallOptions, inst: Installation) -> None:
    if "control" not in opts.create_device_nodes:
        return
    _run_installed(opts, ["--quiet", "system", "create-device-nodes", "--control-devices",
                          "--dev-root", opts.dev_root_pod or "/"], "creating the control device nodes")
    inst.log.append(f"created the control device nodes under {opts.dev_root_pod or '/'}")


def _spec(opts: InstallOptions, extra: list[str]) -> dict:
    """A spec generated from the driver at its pod path, naming host paths: the driver root's
    paths moved from DRIVER_ROOT_CTR_PATH to DRIVER_ROOT, device nodes from DEV_ROOT_CTR_PATH
    to DEV_ROOT."""
    from nct.cdi.spec import parse_spec_data, validate_spec
    from nct.cdi.transform import transform_path, transform_root

    hook = str(Path(opts.toolkit_dir) / "nvidia-cdi-hook")
    out = _run_installed(opts, ["cdi", "generate", "--format", "json", "--driver-root", opts.driver_root_ctr_path or "/",
                                "--dev-root", opts.dev_root_pod or "/", "--nvidia-cdi-hook-path", hook, *extra],
                         "CDI spec generation")
    doc, from_yaml = parse_spec_data(out.encode(), "nvidia-ctk cdi generate")
    spec = validate_spec(doc, "nvidia-ctk cdi generate", from_yaml=from_yaml)
    edits = [spec.get("containerEdits") or {}] + [d.get("containerEdits") or {} for d in spec.get("devices") or []]
    nodes = [(n, n.get("hostPath") or n["path"]) for e in edits for n in e.get("deviceNodes") or []]
    spec = transform_root(spec, opts.driver_root_ctr_path or "/", opts.driver_root or "/")
    edits = [spec.get("containerEdits") or {}] + [d.get("containerEdits") or {} for d in spec.get("devices") or []]
    moved = [n for e in edits for n in e.get("deviceNodes") or []]
    for node, (_, original) in zip(moved, nodes):
        node["hostPath"] = transform_path(original, opts.dev_root_pod or "/", opts.dev_root_host or "/")
    return spec


def write_cdi_specs(opts: InstallOptions, inst: Installation) -> None:
    """CDI on: the management spec (`<vendor>-<class>.yaml`, e.g. management.nvidia.com/gpu=all,
    what the operator's management containers use), and with --cdi-full-spec the spec of
    every GPU (nvidia.yaml)."""
    if not opts.cdi_enabled:
        return
    from nct.cdi.names import parse_kind
    from nct.cdi.spec import save_spec, spec_file_name

    vendor, cls = parse_kind(opts.cdi_kind)
    wanted = [(["--mode", "management", "--vendor", vendor, "--class", cls], spec_file_name(vendor, cls) + ".yaml")]
    if opts.cdi_full_spec:
        wanted.append(([], "nvidia.yaml"))
    inst.installed.mkdir(Path(opts.cdi_output_dir))
    for extra, name in wanted:
        spec = _spec(opts, extra)
        path = os.path.join(opts.cdi_output_dir, name)
        inst.cdi_specs.append(path)
        save_spec(spec, path, fmt="yaml")
        inst.log.append(f"wrote CDI spec {path}")


def configure_engine(opts: InstallOptions, inst: Installation, source: str | None) -> None:
    from nct.engines.configure import apply, plan_configure
    from nct.engines.reload import restart_engine

    if opts.hook_mode:
        from nct.engines.files import made_dirs
        from nct.engines.ocihook import hook_json
        from nct.fileio import atomic_write

        path = os.path.join(opts.crio_hooks_dir, opts.crio_hook_filename)
        text = hook_json(str(Path(opts.toolkit_dir) / "nvidia-container-runtime-hook"))
        inst.hook_file = path
        inst.save()
        for d in made_dirs(path):
            inst.installed.dirs.append(d)
        atomic_write(path, text.encode(), mode=0o644, keep_owner=False)
        inst.log.append(f"wrote the OCI hook {path}")
        return  # CRI-O reads hooks.d for every new container: no restart needed
    if opts.drop_in and os.path.islink(opts.drop_in):  # nct's own file: never written through a link
        raise EngineConfigError(f"{opts.drop_in}: the drop-in is a symbolic link; remove it (nct writes a plain file)")
    req = engine_request(opts)
    plan = plan_configure(req, source)
    inst.engine_configured = True
    inst.save()
    for path in apply(plan):
        inst.log.append(f"configured {opts.runtime}: {path}")
    inst.log.append(restart_engine(opts.runtime, opts.restart_mode, opts.socket, opts.host_root))


def prepare(opts: InstallOptions) -> Installation:
    """A fresh Installation for `opts`; an earlier manifest in the toolkit dir (a restarted
    pod) hands over the dirs that install made, so they are still removed at the end."""
    inst = Installation(opts)
    if (Path(opts.toolkit_dir) / MANIFEST).exists():
        try:
            inst.installed.dirs.extend(Installation.load(opts.toolkit_dir).installed.dirs)
        except EngineConfigError:
            pass
    return inst


def install(inst: Installation) -> Installation:
    """Do the whole setup; on any failure, undo what was done and re-raise.  Steps that
    fail under --ignore-errors are logged and skipped, as upstream."""
    opts = inst.options
    try:
        source = None if opts.no_runtime_config or opts.hook_mode else read_source(opts, inst.log)
        if opts.low_level_runtimes is None:
            opts.low_level_runtimes = low_level_runtimes(opts.runtime, source if source is not None
                                                         else read_text(opts.config))
        install_toolkit(opts, inst)
        inst.save()
        for step in (create_device_nodes, write_cdi_specs):
            try:
                step(opts, inst)
            except NctError as e:
                if not opts.ignore_errors:
                    raise
                inst.log.append(f"ignoring error: {e}")
        inst.save()
        if opts.no_runtime_config:
            inst.log.append("not configuring the container engine (--no-runtime-config)")
        else:
            configure_engine(opts, inst, source)
    except BaseException:
        uninstall(inst, quiet_errors=True)
        raise
    return inst


def runtime_still_loaded(opts: InstallOptions) -> str:
    """Why the engine may still start containers through the installed runtime after its
    config is restored ("" when it cannot): dockerd's SIGHUP reload keeps the values of keys
    the file no longer has (`runtimes`, `default-runtime`; seen on dockerd 20.10), so after
    the undo it would default to a removed binary until it restarts.  containerd exits on
    SIGHUP and its supervisor starts it on the restored file; `systemd` restarts the engine;
    CRI-O re-reads hooks.d for every container; `none` never made the engine load it."""
    if opts.runtime == "docker" and opts.restart_mode == "signal":
        return ("dockerd's SIGHUP reload does not forget the nvidia runtime (nor its default-runtime), "
                "so it keeps using these files until docker restarts")
    return ""


def _engine_files_name(opts: InstallOptions) -> bool:
    """Whether the engine's files (as they are now) name the toolkit dir; True when unreadable."""
    try:
        return any(opts.toolkit_dir in (read_text(p) or "") for p in (opts.config, opts.drop_in) if p)
    except NctError:
        return True


def uninstall(inst: Installation, quiet_errors: bool = False) -> None:
    """Undo an install: engine config back (original bytes), engine restarted, hook and specs
    removed, toolkit files removed, unless the engine still has the runtime loaded (see
    runtime_still_loaded): then the toolkit dir stays, with a manifest that `--uninstall`
    removes it by.  Created device nodes stay (containers may use them)."""
    from nct.engines.configure import apply, plan_unconfigure
    from nct.engines.reload import restart_engine

    opts = inst.options
    errors: list[str] = []
    if inst.hook_file:
        remove_file(inst.hook_file)
        inst.log.append(f"removed the OCI hook {inst.hook_file}")
    keep = ""
    if inst.engine_configured:
        try:
            changed = apply(plan_unconfigure(engine_request(opts)))
            inst.log.append(f"restored {opts.runtime} configuration")
            if changed:
                inst.log.append(restart_engine(opts.runtime, opts.restart_mode, opts.socket, opts.host_root))
            keep = runtime_still_loaded(opts)
        except NctError as e:
            errors.append(str(e))
            if _engine_files_name(opts):
                keep = f"{opts.runtime}'s configuration could not be restored and still names it"
    for spec in inst.cdi_specs:
        remove_file(spec)
    if keep:  # the engine would fail every container start (and stop) without these files
        inst.engine_configured, inst.hook_file, inst.cdi_specs = False, None, []
        inst.save()
        inst.log.append(f"keeping {opts.toolkit_dir}: {keep}; remove it after that with "
                        f"`nct install --toolkit-root {opts.toolkit_dir} --uninstall` (or leave it to the next install)")
    else:
        remove_file(str(Path(opts.toolkit_dir) / MANIFEST))
        inst.installed.remove(opts.toolkit_dir)
    if errors and not quiet_errors:
        raise EngineConfigError("; ".join(errors))
