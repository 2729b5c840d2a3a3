"""`nvidia-ctk-installer` / `nvidia-toolkit` / `nct install`: upstream's toolkit-installer
command line.  Every flag of upstream's installer with the environment variables behind it,
resolved as urfave/cli does: the flag on the command line wins, else the first listed
variable that is set (even to ""), else the default.  The work is done by
nct.engines.installer; this module parses, runs the lifecycle (pid file, signals) and prints."""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

import click

from nct.record import Record

SPECIFIC = "RUNTIME_SPECIFIC_DEFAULT"  # upstream's marker for a per-engine default
# upstream's installer exits (after cleanup) on any of these
SIGNALS = (signal.SIGHUP, signal.SIGINT, signal.SIGQUIT, signal.SIGPIPE, signal.SIGTERM)


class Flag(Record):
    """One option: its destination, command-line names, env vars (first set wins), kind
    (str, bool or list: comma-separated, repeatable) and default."""

    dest: str
    names: tuple[str, ...]
    envs: tuple[str, ...] = ()
    kind: str = "str"
    default: Any = None
    hidden: bool = False
    help: str = ""


def _f(dest: str, names: str, envs: str = "", kind: str = "str", default: Any = None, hidden: bool = False,
       help: str = "") -> Flag:
    return Flag(dest, tuple(names.split()), tuple(envs.split()), kind, default, hidden, help)


FLAGS: tuple[Flag, ...] = (
    # main.go
    _f("no_daemon", "--no-daemon -n", "NO_DAEMON", "bool", False,
       help="Exit after setup (nothing is undone when it exits)."),
    _f("runtime", "--runtime -r", "RUNTIME", default="docker", help="docker, containerd or crio."),
    _f("toolkit_install_dir", "--toolkit-install-dir --root", "TOOLKIT_INSTALL_DIR ROOT", default="/usr/local/nvidia",
       help="Install into ROOT/toolkit (the same path in the pod and on the host)."),
    _f("toolkit_source_root", "--toolkit-source-root --toolkit", "TOOLKIT_SOURCE_ROOT", default="",
       help="nct toolkit tree to install (default: the one this command runs from)."),
    _f("toolkit_package_type", "--toolkit-package-type", "TOOLKIT_PACKAGE_TYPE", default="auto",
       help="Accepted for compatibility; nct installs one tree for every host."),
    _f("pid_file", "--pid-file --toolkit-pid-file", "TOOLKIT_PID_FILE PID_FILE",
       default="/run/nvidia/toolkit/toolkit.pid", help="Single-instance lock; must be named toolkit.pid."),
    _f("no_runtime_config", "--no-runtime-config", "NO_RUNTIME_CONFIG", "bool", False,
       help="Install the toolkit but leave the engine's configuration alone."),
    _f("debug", "--debug -d", "TOOLKIT_DEBUG", "bool", False, help="Log the resolved settings."),
    # toolkit/toolkit.go
    _f("driver_root", "--driver-root --nvidia-driver-root", "NVIDIA_DRIVER_ROOT DRIVER_ROOT",
       default="/run/nvidia/driver", help="The driver's root on the host."),
    _f("driver_root_ctr_path", "--driver-root-ctr-path", "DRIVER_ROOT_CTR_PATH", default="/run/nvidia/driver",
       help="The driver's root as this container sees it."),
    _f("dev_root", "--dev-root", "NVIDIA_DEV_ROOT DEV_ROOT", default="",
       help="Root of /dev on the host (default: the driver root)."),
    _f("dev_root_ctr_path", "--dev-root-ctr-path", "DEV_ROOT_CTR_PATH", default="",
       help="Root of /dev in this container (default: --driver-root-ctr-path)."),
    _f("runtime_debug", "--nvidia-container-runtime.debug --nvidia-container-runtime-debug",
       "NVIDIA_CONTAINER_RUNTIME_DEBUG"),
    _f("runtime_log_level", "--nvidia-container-runtime.log-level --nvidia-container-runtime-debug-log-level",
       "NVIDIA_CONTAINER_RUNTIME_LOG_LEVEL"),
    _f("runtime_mode", "--nvidia-container-runtime.mode --nvidia-container-runtime-mode",
       "NVIDIA_CONTAINER_RUNTIME_MODE"),
    _f("cdi_default_kind", "--nvidia-container-runtime.modes.cdi.default-kind",
       "NVIDIA_CONTAINER_RUNTIME_MODES_CDI_DEFAULT_KIND"),
    _f("cdi_annotation_prefixes", "--nvidia-container-runtime.modes.cdi.annotation-prefixes "
       "--nvidia-container-runtime-modes.cdi.annotation-prefixes",
       "NVIDIA_CONTAINER_RUNTIME_MODES_CDI_ANNOTATION_PREFIXES", "list"),
    _f("low_level_runtimes", "--nvidia-container-runtime.runtimes", "NVIDIA_CONTAINER_RUNTIME_RUNTIMES", "list"),
    _f("hook_skip_mode_detection", "--nvidia-container-runtime-hook.skip-mode-detection",
       "NVIDIA_CONTAINER_RUNTIME_HOOK_SKIP_MODE_DETECTION", "bool", True),
    _f("cli_debug", "--nvidia-container-cli.debug --nvidia-container-cli-debug", "NVIDIA_CONTAINER_CLI_DEBUG"),
    _f("accept_envvar_unprivileged", "--accept-nvidia-visible-devices-envvar-when-unprivileged",
       "ACCEPT_NVIDIA_VISIBLE_DEVICES_ENVVAR_WHEN_UNPRIVILEGED", "bool", True),
    _f("accept_volume_mounts", "--accept-nvidia-visible-devices-as-volume-mounts",
       "ACCEPT_NVIDIA_VISIBLE_DEVICES_AS_VOLUME_MOUNTS", "bool", False),
    _f("cdi_enabled", "--cdi-enabled --enable-cdi --cdi", "CDI_ENABLED ENABLE_CDI", "bool", False,
       help="Write the management CDI spec (and enable CDI in the engine)."),
    _f("cdi_output_dir", "--cdi-output-dir", "CDI_OUTPUT_DIR", default="/var/run/cdi",
       help="Where CDI specs go; empty: none."),
    _f("cdi_kind", "--cdi-kind", "CDI_KIND", default="management.nvidia.com/gpu"),
    _f("cdi_full_spec", "--cdi-full-spec", "NCT_CDI_FULL_SPEC", "bool", False,
       help="nct: with CDI on, also write the spec of every GPU (nvidia.yaml)."),
    _f("ignore_errors", "--ignore-errors", "", "bool", False, hidden=True),
    _f("create_device_nodes", "--create-device-nodes", "CREATE_DEVICE_NODES", "list", ["control"],
       help="With CDI on: control, or none."),
    _f("opt_in_features", "--opt-in-features", "NVIDIA_CONTAINER_TOOLKIT_OPT_IN_FEATURES", "list", [], hidden=True),
    # container/runtime/runtime.go
    _f("config", "--config", "RUNTIME_CONFIG CONTAINERD_CONFIG DOCKER_CONFIG", default=SPECIFIC,
       help="The engine's top-level config file (as this container sees it)."),
    _f("executable_path", "--executable-path", "RUNTIME_EXECUTABLE_PATH", default="",
       help="Engine binary for the 'command' config source."),
    _f("drop_in", "--drop-in-config", "RUNTIME_DROP_IN_CONFIG", default=SPECIFIC,
       help="Drop-in to write (as this container sees it); empty: edit the top-level file."),
    _f("drop_in_host_path", "--drop-in-config-host-path", "RUNTIME_DROP_IN_CONFIG_HOST_PATH", default="",
       help="The drop-in's path on the host (what containerd's imports name)."),
    _f("socket", "--socket", "RUNTIME_SOCKET CONTAINERD_SOCKET DOCKER_SOCKET", default=SPECIFIC),
    _f("restart_mode", "--restart-mode", "RUNTIME_RESTART_MODE", default=SPECIFIC, help="signal, systemd or none."),
    _f("enable_cdi_in_runtime", "--enable-cdi-in-runtime", "RUNTIME_ENABLE_CDI", "bool", False,
       help="Enable CDI in the engine (default: --cdi-enabled)."),
    _f("host_root", "--host-root", "HOST_ROOT_MOUNT", default="/host",
       help="The host's / in this container (systemd restarts, 'command' config source)."),
    _f("runtime_name", "--runtime-name --nvidia-runtime-name --runtime-class",
       "NVIDIA_RUNTIME_NAME CONTAINERD_RUNTIME_CLASS DOCKER_RUNTIME_NAME", default="nvidia"),
    _f("set_as_default", "--set-as-default", "NVIDIA_RUNTIME_SET_AS_DEFAULT CONTAINERD_SET_AS_DEFAULT "
       "DOCKER_SET_AS_DEFAULT", "bool", True, hidden=True),
    _f("config_sources", "--config-source", "RUNTIME_CONFIG_SOURCES RUNTIME_CONFIG_SOURCE", "list", [],
       help="command, file, file=PATH: where the engine's current config is read (first that works)."),
    # container/runtime/containerd
    _f("containerd_use_legacy_config", "--use-legacy-config", "CONTAINERD_USE_LEGACY_CONFIG", "bool", False),
    _f("containerd_runtime_type", "--runtime-type", "CONTAINERD_RUNTIME_TYPE", default="io.containerd.runc.v2"),
    _f("runtime_config_override", "--runtime-config-override",
       "RUNTIME_CONFIG_OVERRIDE CONTAINERD_RUNTIME_CONFIG_OVERRIDE", default="{}"),
    # container/runtime/crio
    _f("crio_hooks_dir", "--hooks-dir", "CRIO_HOOKS_DIR", default="/usr/share/containers/oci/hooks.d"),
    _f("crio_hook_filename", "--hook-filename", "CRIO_HOOK_FILENAME", default="oci-nvidia-hook.json"),
    _f("crio_config_mode", "--config-mode", "CRIO_CONFIG_MODE", default="config", help="config or hook."),
    # nct
    _f("toolkit_root", "--toolkit-root", "", default="",
       help="nct: install into exactly this dir (--toolkit-install-dir ROOT installs into ROOT/toolkit)."),
    _f("python", "--python", "", default="", hidden=True),
    _f("uninstall", "--uninstall", "", "bool", False, hidden=True),
)
TRUE = ("1", "t", "T", "true", "TRUE", "True")
FALSE = ("0", "f", "F", "false", "FALSE", "False")


def _bool(value: str, where: str) -> bool:
    """Go's strconv.ParseBool, as urfave uses it; an empty env var is false."""
    if value in TRUE:
        return True
    if value in FALSE or value == "":
        return False
    from nct.errors import EngineConfigError

    raise EngineConfigError(f"could not parse {value!r} as a bool value from {where} (want true or false)")


def _list(values: list[str] | tuple[str, ...]) -> list[str]:
    return [part.strip() for v in values for part in v.split(",")]


class Resolved(Record, frozen=False):
    values: dict
    was_set: set


def resolve(given: dict[str, Any], environ: dict[str, str]) -> Resolved:
    """Flags over env vars over defaults.  `given` holds the raw command-line values (None
    or () when the flag was not given)."""
    values, was_set = {}, set()
    for flag in FLAGS:
        raw = given.get(flag.dest)
        if raw is not None and raw != ():
            where = f"flag {flag.names[0]}"
            value: Any = raw
        else:
            env = next((e for e in flag.envs if e in environ), None)
            if env is None:
                values[flag.dest] = list(flag.default) if isinstance(flag.default, list) else flag.default
                continue
            where, value = f"environment variable {env}", environ[env]
            if flag.kind == "list":
                value = (value,)
        if flag.kind == "bool":
            value = _bool(value, where)
        elif flag.kind == "list":
            value = _list(value)
        values[flag.dest] = value
        was_set.add(flag.dest)
    return Resolved(values, was_set)


def build_options(r: Resolved):
    """InstallOptions from the resolved values (engine defaults filled, not validated)."""
    from nct.engines.installer import ENGINE_DEFAULTS, TOOLKIT_SUBDIR, InstallOptions, apply_engine_defaults

    v = r.values
    toolkit_dir = v["toolkit_root"] or os.path.join(v["toolkit_install_dir"], TOOLKIT_SUBDIR)
    runtime = v["runtime"]
    d = ENGINE_DEFAULTS.get(runtime)

    def specific(key: str, default: str) -> str:
        return default if v[key] == SPECIFIC else v[key]

    opts = InstallOptions(
        toolkit_dir=toolkit_dir if v["toolkit_install_dir"] or v["toolkit_root"] else "",
        runtime=runtime, pid_file=v["pid_file"], no_daemon=v["no_daemon"],
        no_runtime_config=v["no_runtime_config"], toolkit_source=v["toolkit_source_root"] or None,
        python=v["python"] or None, ignore_errors=v["ignore_errors"],
        driver_root=v["driver_root"], driver_root_ctr_path=v["driver_root_ctr_path"],
        dev_root=v["dev_root"], dev_root_ctr_path=v["dev_root_ctr_path"],
        runtime_debug=v["runtime_debug"], runtime_log_level=v["runtime_log_level"],
        runtime_mode=v["runtime_mode"], cdi_default_kind=v["cdi_default_kind"],
        cdi_annotation_prefixes=v["cdi_annotation_prefixes"] if "cdi_annotation_prefixes" in r.was_set else None,
        low_level_runtimes=([x for x in v["low_level_runtimes"] if x] or None)
        if "low_level_runtimes" in r.was_set else None,
        hook_skip_mode_detection=v["hook_skip_mode_detection"], cli_debug=v["cli_debug"],
        accept_envvar_unprivileged=v["accept_envvar_unprivileged"], accept_volume_mounts=v["accept_volume_mounts"],
        opt_in_features=v["opt_in_features"], cdi_enabled=v["cdi_enabled"], cdi_output_dir=v["cdi_output_dir"],
        cdi_kind=v["cdi_kind"], cdi_full_spec=v["cdi_full_spec"], create_device_nodes=v["create_device_nodes"],
        config=specific("config", ""), drop_in=specific("drop_in", d.drop_in if d else ""),
        drop_in_host_path=v["drop_in_host_path"], socket=specific("socket", ""),
        restart_mode=specific("restart_mode", ""),
        enable_cdi_in_runtime=v["enable_cdi_in_runtime"] if "enable_cdi_in_runtime" in r.was_set else None,
        host_root=v["host_root"], runtime_name=v["runtime_name"], set_as_default=v["set_as_default"],
        config_sources=[s for s in v["config_sources"] if s], executable_path=v["executable_path"],
        containerd_runtime_type=v["containerd_runtime_type"],
        containerd_use_legacy_config=v["containerd_use_legacy_config"],
        runtime_config_override=v["runtime_config_override"], crio_config_mode=v["crio_config_mode"],
        crio_hooks_dir=v["crio_hooks_dir"], crio_hook_filename=v["crio_hook_filename"],
    )
    if d is not None:
        apply_engine_defaults(opts)
    return opts


def _option(flag: Flag):
    kw: dict[str, Any] = {"default": None, "hidden": flag.hidden, "help": flag.help}
    if flag.kind == "bool":  # `--flag` or `--flag=false`, as urfave's bool flags
        kw.update(is_flag=False, flag_value="true", metavar="[=BOOL]")
    elif flag.kind == "list":
        kw.update(multiple=True)
    envs = ", ".join(f"${e}" for e in flag.envs)
    if envs:
        kw["help"] = f"{kw['help']} [env: {envs}]".strip()
    if flag.default not in (None, "", [], SPECIFIC):
        shown = ",".join(flag.default) if isinstance(flag.default, list) else flag.default
        kw["help"] = f"{kw['help']} [default: {shown}]".strip()
    return click.option(*flag.names, flag.dest, **kw)


def _options(fn):
    for flag in reversed(FLAGS):
        fn = _option(flag)(fn)
    return fn


def _say(msg: str) -> None:
    name = click.get_current_context().find_root().info_name or "nvidia-ctk-installer"
    click.echo(f"{name}: {msg}", err=True)


def _flush(inst) -> None:
    for line in inst.log:
        _say(line)
    inst.log.clear()


@click.command("nvidia-ctk-installer", context_settings={"help_option_names": ["-h", "--help"]})
@_options
@click.version_option(package_name="nct", prog_name="nvidia-ctk-installer")
def installer_command(**given: Any) -> None:
    """Install the NVIDIA Container Toolkit (nct) and configure the container engine to use
    the `nvidia` runtime; wait for a signal, then undo it all.  Every flag can be given as
    the environment variable named in its help."""
    from nct.engines import installer as eng
    from nct.errors import NctError

    try:
        resolved = resolve(given, dict(os.environ))
        opts = build_options(resolved)
        if resolved.values["uninstall"]:
            inst = eng.Installation.load(opts.toolkit_dir)
            eng.uninstall(inst)
            _flush(inst)
            return
        for warning in eng.validate(opts):
            _say(f"warning: {warning}")
        if resolved.values["debug"]:
            from nct.record import asdict

            for key, value in sorted(asdict(opts).items()):
                _say(f"debug: {key} = {value!r}")
        _run(opts)
    except NctError as e:
        click.echo(f"nct: {e}", err=True)
        sys.exit(1)


def _run(opts) -> None:
    """The lifecycle: lock, set up with the stop signals held back, then wait for one and
    undo.  A signal that arrives during setup is acted on as soon as setup is done (or has
    been rolled back): the pod never leaves a half-configured engine behind."""
    from nct.engines import installer as eng

    signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)
    lock = eng.lock_pid_file(opts.pid_file)
    try:
        inst = eng.prepare(opts)
        try:
            eng.install(inst)
        finally:
            _flush(inst)
        pending = set(signal.sigpending()) & set(SIGNALS)
        if opts.no_daemon and not pending:
            return
        if not pending:
            _say(f"ready (pid {os.getpid()}); waiting for SIGTERM (or SIGINT, SIGHUP, SIGQUIT, SIGPIPE) "
                 "to undo the installation")
            sys.stderr.flush()
        sig = signal.sigwait(SIGNALS)
        _say(f"got {signal.Signals(sig).name}; restoring")
        try:
            eng.uninstall(inst)
        finally:
            _flush(inst)
    finally:
        eng.release_pid_file(lock)


def main() -> None:
    installer_command(prog_name=os.path.basename(sys.argv[0]) or "nvidia-ctk-installer")
