"""`nct install`: the GPU Operator's toolkit-container flow.  Install nct into a toolkit
directory (self-contained), write its config.toml, register the runtimes with the engine,
reload the engine, optionally write the CDI spec; then, by default, stay in the foreground
and undo all of it on SIGTERM/SIGINT (engine config back to its original bytes)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from nct.record import Record, asdict, field
from pathlib import Path

import click

from nct.engines.bundle import Installed, base_python, copy_library, write_wrappers
from nct.engines.files import atomic_write, read_text, remove_file
from nct.engines.toolkit import copy_toolkit, running_toolkit
from nct.engines.model import DEFAULT_CONFIG, DEFAULT_DROP_IN, EngineRequest, RuntimeEntry
from nct.sigreset import default_signals
from nct.errors import EngineConfigError, NctError

MANIFEST = ".nct-install.json"
CONFIG_REL = ".config/nvidia-container-runtime/config.toml"
# runtime handler name suffix -> installed binary
RUNTIME_BINARIES = (("", "nvidia-container-runtime"), ("-cdi", "nvidia-container-runtime.cdi"),
                    ("-legacy", "nvidia-container-runtime.legacy"))


class InstallOptions(Record, frozen=False):
    toolkit_root: str
    engine: str = "docker"
    driver_root: str = "/"
    set_as_default: bool = False
    cdi: bool = False
    cdi_output_dir: str = "/var/run/cdi"
    config: str | None = None
    drop_in: str | None = None
    pid_file: str | None = None
    socket: str | None = None
    restart_mode: str = "auto"
    toolkit_pid_file: str = "/run/nvidia/toolkit.pid"
    runtime_name: str = "nvidia"
    python: str | None = None
    toolkit: str | None = None


class Installation(Record, frozen=False):
    """What one install did; saved in the toolkit dir so `--uninstall` can undo it later."""

    options: InstallOptions
    installed: Installed = field(default_factory=Installed)
    engine_configured: bool = False
    cdi_spec: str | None = None
    log: list[str] = field(default_factory=list)

    def save(self) -> None:
        data = {"options": asdict(self.options), "installed": asdict(self.installed),
                "engine_configured": self.engine_configured, "cdi_spec": self.cdi_spec}
        atomic_write(str(Path(self.options.toolkit_root) / MANIFEST), json.dumps(data, indent=2) + "\n")

    @classmethod
    def load(cls, toolkit_root: str) -> "Installation":
        path = Path(toolkit_root) / MANIFEST
        text = read_text(str(path))
        if text is None:
            raise EngineConfigError(f"{path}: no nct installation found there")
        try:
            data = json.loads(text)
            return cls(InstallOptions(**data["options"]), Installed(**data["installed"]),
                       data["engine_configured"], data["cdi_spec"])
        except (ValueError, KeyError, TypeError):
            raise EngineConfigError(f"{path}: corrupt install manifest") from None


def engine_request(opts: InstallOptions) -> EngineRequest:
    root = Path(opts.toolkit_root)
    runtimes = tuple(RuntimeEntry(opts.runtime_name + suffix, str(root / binary))
                     for suffix, binary in RUNTIME_BINARIES)
    drop_in = DEFAULT_DROP_IN[opts.engine] if opts.drop_in is None else opts.drop_in
    return EngineRequest(engine=opts.engine, config=opts.config or DEFAULT_CONFIG[opts.engine],
                         runtimes=runtimes, drop_in=drop_in or None, set_as_default=opts.set_as_default,
                         cdi_enabled=opts.cdi and opts.engine != "crio")


def toolkit_config_text(opts: InstallOptions) -> str:
    """config.toml for the installed commands: driver root and the installed paths."""
    from nct.config.edit import default_text, parse_document, render, set_value

    root = Path(opts.toolkit_root)
    doc = parse_document(default_text(), "default config")
    if opts.driver_root not in ("", "/"):
        set_value(doc, "nvidia-container-cli.root", opts.driver_root)
        for ldconfig in ("sbin/ldconfig.real", "sbin/ldconfig"):
            if os.path.exists(os.path.join(opts.driver_root, ldconfig)):
                set_value(doc, "nvidia-container-cli.ldconfig", "@" + os.path.join(opts.driver_root, ldconfig))
                break
    set_value(doc, "nvidia-container-cli.path", str(root / "nvidia-container-cli"))
    set_value(doc, "nvidia-container-runtime-hook.path", str(root / "nvidia-container-runtime-hook"))
    set_value(doc, "nvidia-ctk.path", str(root / "nvidia-ctk"))
    return render(doc, str(root / CONFIG_REL))


def _check_pid_file(path: str) -> None:
    text = read_text(path)
    if not text:
        return
    try:
        pid = int(text.strip())
    except ValueError:
        return
    if pid != os.getpid() and os.path.exists(f"/proc/{pid}"):
        raise EngineConfigError(f"{path}: another nct install is running (pid {pid})")


def install(opts: InstallOptions) -> Installation:
    """Do the whole setup; on any failure, undo what was done and re-raise."""
    from nct.engines.configure import apply, check_request, plan_configure
    from nct.engines.reload import reload_engine

    if not os.path.isabs(opts.toolkit_root):
        raise EngineConfigError(f"--toolkit-root {opts.toolkit_root}: must be an absolute path")
    req = engine_request(opts)
    check_request(req)
    _check_pid_file(opts.toolkit_pid_file)
    inst = Installation(opts)
    root = Path(opts.toolkit_root)
    if (root / MANIFEST).exists():  # an upgrade: the dirs the first install made are still ours
        try:
            inst.installed.dirs.extend(Installation.load(str(root)).installed.dirs)
        except EngineConfigError:
            pass
    try:
        inst.installed.mkdir(root)
        source = Path(opts.toolkit) if opts.toolkit else (None if opts.python else running_toolkit())
        if source is not None:  # the self-contained toolkit: its own Python, no host Python used
            copy_toolkit(source, root, inst.installed)  # launchers: config.toml in root/.config
        else:  # development (a venv): wrappers that run this interpreter on a copy of nct
            lib = root / "lib" / "python"
            copy_library(lib, inst.installed)
            write_wrappers(root, lib, opts.python or base_python(), inst.installed, config_home=root / ".config")
        cfg = root / CONFIG_REL
        inst.installed.mkdir(cfg.parent)
        atomic_write(str(cfg), toolkit_config_text(opts))
        inst.installed.add_file(cfg)
        inst.log.append(f"installed nct into {root}")
        if opts.cdi:
            inst.cdi_spec = _generate_cdi(opts, inst)
        plan = plan_configure(req)
        inst.engine_configured = True
        inst.save()
        for path in apply(plan):
            inst.log.append(f"configured {opts.engine}: {path}")
        inst.log.append(reload_engine(opts.engine, opts.restart_mode, opts.pid_file, opts.socket))
        Path(opts.toolkit_pid_file).parent.mkdir(parents=True, exist_ok=True)
        atomic_write(opts.toolkit_pid_file, f"{os.getpid()}\n")
    except BaseException:
        uninstall(inst, quiet_errors=True)
        raise
    return inst


def _generate_cdi(opts: InstallOptions, inst: Installation) -> str:
    out = os.path.join(opts.cdi_output_dir, "nvidia.yaml")
    cmd = [str(Path(opts.toolkit_root) / "nvidia-ctk"), "cdi", "generate", "--output", out,
           "--driver-root", opts.driver_root or "/",
           "--nvidia-cdi-hook-path", str(Path(opts.toolkit_root) / "nvidia-cdi-hook")]
    inst.installed.mkdir(Path(opts.cdi_output_dir))
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "NCT_PROC_ROOT", "NVIDIA_CTK_DEV_ROOT", "LANG")}
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, preexec_fn=default_signals)
    if res.returncode != 0:
        msg = (res.stderr.strip().splitlines() or [f"exit status {res.returncode}"])[-1]
        raise EngineConfigError(f"CDI spec generation failed: {msg}")
    inst.log.append(f"wrote CDI spec {out}")
    return out


def uninstall(inst: Installation, quiet_errors: bool = False) -> None:
    """Undo an install: engine config back, engine reloaded, spec and files removed."""
    from nct.engines.configure import apply, plan_unconfigure
    from nct.engines.reload import reload_engine

    opts = inst.options
    errors: list[str] = []
    if inst.engine_configured:
        try:
            changed = apply(plan_unconfigure(engine_request(opts)))
            inst.log.append(f"restored {opts.engine} configuration")
            if changed:
                inst.log.append(reload_engine(opts.engine, opts.restart_mode, opts.pid_file, opts.socket))
        except NctError as e:
            errors.append(str(e))
    if inst.cdi_spec:
        remove_file(inst.cdi_spec)
    remove_file(str(Path(opts.toolkit_root) / MANIFEST))
    inst.installed.remove()
    text = read_text(opts.toolkit_pid_file)
    if text and text.strip() == str(os.getpid()):
        remove_file(opts.toolkit_pid_file)
    if errors and not quiet_errors:
        raise EngineConfigError("; ".join(errors))


def _echo(msg: str) -> None:
    click.echo(f"nct install: {msg}", err=True)


@click.command("install")
@click.option("--toolkit-root", required=True, help="Directory to install into (e.g. /usr/local/nvidia/toolkit).")
@click.option("--runtime", "engine", default="docker", show_default=True,
              type=click.Choice(["docker", "containerd", "crio"]), help="Container engine to configure.")
@click.option("--driver-root", default="/", show_default=True, help="Where the driver is (/run/nvidia/driver).")
@click.option("--set-as-default", is_flag=True, help="Make the NVIDIA runtime the engine's default.")
@click.option("--cdi", is_flag=True, help="Generate the CDI spec and enable CDI in the engine.")
@click.option("--cdi-output-dir", default="/var/run/cdi", show_default=True)
@click.option("--config", default=None, help="Engine config file (default: the engine's usual path).")
@click.option("--drop-in-config", "drop_in", default=None, help='Engine drop-in ("" = top-level file).')
@click.option("--pid-file", default=None, help="Engine pid file, for a SIGHUP (docker: /run/docker.pid).")
@click.option("--socket", default=None, help="Engine API socket: its peer pid gets the SIGHUP (needs hostPID in a pod).")
@click.option("--restart-mode", default="auto", show_default=True,
              type=click.Choice(["auto", "signal", "systemd", "none"]), help="How to make the engine reload.")
@click.option("--toolkit-pid-file", default="/run/nvidia/toolkit.pid", show_default=True)
@click.option("--nvidia-runtime-name", "runtime_name", default="nvidia", show_default=True)
@click.option("--toolkit", default=None,
              help="Self-contained toolkit tree to install (default: the one this nct runs from).")
@click.option("--python", default=None,
              help="Development only: install wrappers that run this interpreter instead of a toolkit tree.")
@click.option("--no-daemon", is_flag=True, help="Exit after setup instead of waiting for SIGTERM.")
@click.option("--uninstall", "undo", is_flag=True, help="Undo an earlier --no-daemon install in --toolkit-root.")
def install_command(toolkit_root, engine, driver_root, set_as_default, cdi, cdi_output_dir, config, drop_in,
                    pid_file, socket, restart_mode, toolkit_pid_file, runtime_name, toolkit, python, no_daemon, undo):
    """Install nct into a toolkit directory and configure a container engine."""
    try:
        if undo:
            inst = Installation.load(toolkit_root)
            uninstall(inst)
            for line in inst.log:
                _echo(line)
            return
        opts = InstallOptions(toolkit_root=toolkit_root, engine=engine, driver_root=driver_root,
                              set_as_default=set_as_default, cdi=cdi, cdi_output_dir=cdi_output_dir, config=config,
                              drop_in=drop_in, pid_file=pid_file, socket=socket, restart_mode=restart_mode,
                              toolkit_pid_file=toolkit_pid_file, runtime_name=runtime_name, python=python,
                              toolkit=toolkit)
        waited = {signal.SIGTERM, signal.SIGINT}
        if not no_daemon:  # a signal during setup stays pending and ends the wait at once
            signal.pthread_sigmask(signal.SIG_BLOCK, waited)
        inst = install(opts)
        for line in inst.log:
            _echo(line)
        if no_daemon:
            remove_file(toolkit_pid_file)
            return
        _echo(f"ready (pid {os.getpid()}); waiting for SIGTERM to undo")
        sys.stderr.flush()
        sig = signal.sigwait(waited)
        _echo(f"got {signal.Signals(sig).name}; restoring")
        inst.log.clear()
        uninstall(inst)
        for line in inst.log:
            _echo(line)
    except NctError as e:
        click.echo(f"nct: {e}", err=True)
        sys.exit(1)
