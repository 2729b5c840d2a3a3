"""`nvidia-ctk runtime configure` (upstream flags) and our `runtime unconfigure`."""

from __future__ import annotations

import sys

import click

from nct.cli.errors import one_line_errors


def _quiet() -> bool:
    ctx = click.get_current_context()
    obj = ctx.find_root().obj
    return bool(isinstance(obj, dict) and obj.get("quiet"))


def _info(msg: str) -> None:
    if not _quiet():
        click.echo(msg, err=True)


@click.group("runtime")
def runtime_group() -> None:
    """Configure a container engine (docker, containerd, CRI-O) for the NVIDIA runtime."""


def _common(fn):
    opts = [
        click.option("--runtime", "engine", default="docker", show_default=True,
                     type=click.Choice(["docker", "containerd", "crio"]), help="Container engine."),
        click.option("--config", "config", default=None, help="Engine's top-level config file."),
        click.option("--drop-in-config", "drop_in", default=None,
                     help='Drop-in file (containerd, crio); "" edits the top-level file.'),
        click.option("--dry-run", is_flag=True, help="Print the result instead of writing it."),
        click.option("--diff", "show_diff", is_flag=True, help="With --dry-run: print a unified diff."),
        click.option("--config-source", default="file", show_default=True,
                     type=click.Choice(["file", "command"]), help="Read the engine config from the file or the engine."),
        click.option("--executable-path", default="", help="Engine binary for --config-source command."),
        click.option("--nvidia-runtime-name", "runtime_name", default="nvidia", show_default=True),
        click.option("--nvidia-runtime-path", "--runtime-path", "runtime_path", default=None,
                     help="Runtime binary (absolute for containerd and crio)."),
    ]
    for opt in reversed(opts):
        fn = opt(fn)
    return fn


def _request(engine, config, drop_in, config_source, executable_path, runtime_name, runtime_path,
             set_as_default=False, cdi_enabled=False):
    from nct.engines.model import (
        DEFAULT_ABS_RUNTIME_PATH, DEFAULT_CONFIG, DEFAULT_DROP_IN, DEFAULT_RUNTIME_PATH, EngineRequest,
        RuntimeEntry,
    )

    if drop_in is None:
        drop_in = DEFAULT_DROP_IN[engine]
    if engine == "docker":
        config_source = "file"
    if runtime_path is None:
        runtime_path = DEFAULT_RUNTIME_PATH if engine == "docker" else DEFAULT_ABS_RUNTIME_PATH
    import os

    return EngineRequest(
        engine=engine, config=os.path.abspath(config or DEFAULT_CONFIG[engine]), drop_in=drop_in or None,
        runtimes=(RuntimeEntry(runtime_name, runtime_path),), set_as_default=set_as_default,
        cdi_enabled=cdi_enabled, config_source=config_source, executable_path=executable_path,
    )


def _emit(plan, dry_run: bool, show_diff: bool, engine: str, verb: str) -> None:
    from nct.engines.configure import apply

    if dry_run:
        if show_diff:
            sys.stdout.write(plan.diff())
        elif plan.primary is not None:
            sys.stdout.write(plan.files[plan.primary] or "")
        else:
            for path, text in plan.files.items():
                sys.stdout.write(f"# {path}\n" + (text or "") if len(plan.files) > 1 else (text or ""))
        return
    changed = apply(plan)
    if not changed:
        _info(f"{plan.request.config}: already {verb}; nothing to do")
        return
    for path in changed:
        _info(f"{'Removed' if plan.files[path] is None else 'Wrote updated config to'} {path}")
    _info(f"It is recommended that the {engine} daemon be restarted.")


@runtime_group.command("configure")
@_common
@click.option("--nvidia-set-as-default", "--set-as-default", "set_as_default", is_flag=True,
              help="Make the NVIDIA runtime the default.")
@click.option("--cdi.enabled", "--cdi.enable", "--enable-cdi", "cdi_enabled", is_flag=True,
              help="Enable CDI in the engine (docker, containerd).")
@click.option("--config-mode", default="",
              help='config-file (the default; "config" too), or oci-hook; anything else: config-file, with a warning.')
@click.option("--oci-hook-path", default="", help="Where oci-hook mode writes the hook JSON (default stdout).")
@click.option("--nvidia-runtime-hook-path", "hook_path", default="/usr/bin/nvidia-container-runtime-hook",
              show_default=True, help="Hook binary for oci-hook mode (absolute).")
@click.option("--remove", is_flag=True, help="Undo a previous configure (as `runtime unconfigure`).")
@one_line_errors
def configure(engine, config, drop_in, dry_run, show_diff, config_source, executable_path, runtime_name,
              runtime_path, set_as_default, cdi_enabled, config_mode, oci_hook_path, hook_path, remove):
    """Add the NVIDIA runtime to a container engine's configuration."""
    if config_mode in ("oci-hook", "hook"):
        return _oci_hook(hook_path, oci_hook_path, dry_run)
    if config_mode not in ("", "config-file", "config"):  # "config": upstream's alias
        # upstream warns and edits the config file all the same
        click.echo(f'nvidia-ctk: warning: ignoring unsupported config mode for {engine}: "{config_mode}" '
                   "(using config-file)", err=True)
    req = _request(engine, config, drop_in, config_source, executable_path, runtime_name, runtime_path,
                   set_as_default, cdi_enabled and engine != "crio")
    from nct.engines.configure import plan_configure, plan_unconfigure

    plan = plan_unconfigure(req) if remove else plan_configure(req)
    _emit(plan, dry_run, show_diff, engine, "unconfigured" if remove else "configured")


def _oci_hook(hook_path: str, out: str, dry_run: bool) -> None:
    import os

    from nct.engines.files import atomic_write, made_dirs
    from nct.engines.ocihook import hook_json
    from nct.errors import EngineConfigError

    if not os.path.isabs(hook_path):
        raise EngineConfigError(f"--nvidia-runtime-hook-path {hook_path}: must be an absolute path")
    text = hook_json(hook_path)
    if not out or dry_run:
        sys.stdout.write(text)
        return
    made_dirs(out)
    atomic_write(out, text)
    _info(f"Wrote OCI hook to {out}")


@runtime_group.command("unconfigure")
@_common
@one_line_errors
def unconfigure(engine, config, drop_in, dry_run, show_diff, config_source, executable_path, runtime_name,
                runtime_path):
    """Remove the NVIDIA runtime again, restoring the pre-nct configuration."""
    from nct.engines.configure import plan_unconfigure

    req = _request(engine, config, drop_in, "file", executable_path, runtime_name, runtime_path)
    _emit(plan_unconfigure(req), dry_run, show_diff, engine, "unconfigured")
