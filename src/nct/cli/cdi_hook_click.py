"""The click front end of `nvidia-cdi-hook` and `nvidia-ctk hook`: help, --version and every
message about a malformed invocation (upstream's compatibility rules are in nct.cli.cdi_hook,
which runs well-formed invocations without importing click). The hooks themselves run
through nct.cli.cdi_hook.run_step either way."""

from __future__ import annotations

import os

import click

from nct.cli.cdi_hook import DEFAULTS, PROG, STEPS_HOOK, States, error_line, parse_steps, run_step, run_steps
from nct.errors import NctError


def _warn_unsupported(what: str) -> None:
    click.echo(f'{PROG}: warning: Unsupported CDI hook: {what}', err=True)


class _HookCommand(click.Command):
    """A hook subcommand: an unknown flag is an error (as upstream), errors are one line."""

    def parse_args(self, ctx, args):
        try:
            return super().parse_args(ctx, args)
        except click.NoSuchOption as e:
            click.echo(f"{PROG}: {self.name}: {e.format_message()}", err=True)
            ctx.exit(1)

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except Exception as e:
            line = error_line(self.name, e)
            if line is None:
                raise
            click.echo(line, err=True)
            ctx.exit(1)


class _HookGroup(click.Group):
    command_class = _HookCommand

    def parse_args(self, ctx, args):
        try:
            return super().parse_args(ctx, args)
        except click.NoSuchOption as e:
            # upstream: an error when the first argument that is not a flag names a known
            # hook (a bad flag for it); otherwise an unsupported (newer) hook: warn, exit 0
            first = next((a for a in args if not a.startswith("-")), None)
            if first is not None and self.get_command(ctx, first) is not None:
                click.echo(f"{PROG}: {e.format_message()}", err=True)
                ctx.exit(1)
            _warn_unsupported(first if first is not None else e.format_message())
            ctx.exit(0)

    def resolve_command(self, ctx, args):
        cmd = self.get_command(ctx, args[0]) if args else None
        if cmd is None and args and not args[0].startswith("-"):
            _warn_unsupported(args[0])
            ctx.exit(0)
        return super().resolve_command(ctx, args)


def _run(ctx: click.Context, name: str, **opts) -> None:
    """One hook, as the fast path runs it (nct.cli.cdi_hook.run_step)."""
    msg = run_step(name, opts, States())
    obj = ctx.find_root().obj or {}
    if msg and obj.get("debug") and not obj.get("quiet"):
        click.echo(f"{PROG}: {msg}", err=True)


_spec_option = click.option("--container-spec", default=None, hidden=True, help="Path to the OCI container spec.")


def _add_commands(group: click.Group) -> None:
    @group.command("update-ldcache")
    @click.option("--folder", "folders", multiple=True, help="A folder to add to the ldcache (repeatable).")
    @click.option("--ldconfig-path", default=DEFAULTS["ldconfig_path"], show_default=True,
                  help="Host ldconfig to run (.real preferred when present).")
    @_spec_option
    @click.pass_context
    def update_ldcache(ctx, folders, ldconfig_path, container_spec):
        """Update the container's ld cache for the given folders (isolated, host ldconfig)."""
        _run(ctx, "update-ldcache", folders=folders, ldconfig_path=ldconfig_path, container_spec=container_spec)

    @group.command("create-symlinks")
    @click.option("--link", "links", multiple=True, help="TARGET::LINK (repeatable).")
    @_spec_option
    @click.pass_context
    def create_symlinks(ctx, links, container_spec):
        """Create symlinks in the container."""
        _run(ctx, "create-symlinks", links=links, container_spec=container_spec)

    @group.command("chmod")
    @click.option("--mode", required=True, help="Octal mode.")
    @click.option("--path", "paths", multiple=True, help="Container path (repeatable).")
    @_spec_option
    @click.pass_context
    def chmod(ctx, mode, paths, container_spec):
        """Change permissions of paths in the container (deprecated)."""
        _run(ctx, "chmod", mode=mode, paths=paths, container_spec=container_spec)

    @group.command("enable-cuda-compat")
    @click.option("--host-driver-version", default="", help="Host driver version.")
    @click.option("--host-cuda-version", default="", help="Host CUDA version.")
    @click.option("--cuda-compat-container-root", default=DEFAULTS["cuda_compat_container_root"], show_default=True)
    @_spec_option
    @click.pass_context
    def enable_cuda_compat(ctx, host_driver_version, host_cuda_version, cuda_compat_container_root, container_spec):
        """Use the image's CUDA forward-compat libraries when newer than the host driver."""
        _run(ctx, "enable-cuda-compat", host_driver_version=host_driver_version,
             host_cuda_version=host_cuda_version, cuda_compat_container_root=cuda_compat_container_root,
             container_spec=container_spec)

    @group.command("disable-device-node-modification")
    @_spec_option
    @click.pass_context
    def disable_device_node_modification(ctx, container_spec):
        """Show ModifyDeviceFiles: 0 in the container's /proc/driver/nvidia/params."""
        _run(ctx, "disable-device-node-modification", container_spec=container_spec)

    @group.command("update-application-profile")
    @_spec_option
    @click.pass_context
    def update_application_profile(ctx, container_spec):
        """Restrict EGL to the container's GPUs via an application profile."""
        _run(ctx, "update-application-profile", container_spec=container_spec)

    @group.command(STEPS_HOOK, hidden=True, context_settings={"ignore_unknown_options": True})
    @click.argument("args", nargs=-1, type=click.UNPROCESSED)
    @click.pass_context
    def steps(ctx, args):
        """Several hooks in one process: HOOK ARGS... HOOK ARGS... (nct's jit-cdi specs)."""
        parsed = parse_steps(list(args))
        if not parsed or any(name == STEPS_HOOK for name, _ in parsed):
            from nct.limits import shown

            raise NctError(f"{STEPS_HOOK}: not a list of known hooks with well-formed flags: "
                           f"{shown(' '.join(args).replace(chr(10), ' '), 300)}")
        obj = ctx.find_root().obj or {}
        ctx.exit(run_steps(parsed, bool(obj.get("debug") and not obj.get("quiet"))))

    @group.command("noop", hidden=True)
    @_spec_option
    def noop(container_spec):
        """Do nothing (takes --container-spec, as every hook and the fast parser do)."""


def _version() -> str:
    from nct import UPSTREAM_COMPAT_VERSION, __version__

    return f"{UPSTREAM_COMPAT_VERSION} (nct {__version__})"


def _group(name: str) -> click.Group:
    @click.group(name=name, cls=_HookGroup, invoke_without_command=True,
                 context_settings={"help_option_names": ["-h", "--help"]})
    @click.option("-d", "--debug", is_flag=True, envvar=["NVIDIA_CTK_DEBUG", "NVIDIA_CDI_DEBUG"],
                  help="Enable debug-level logging.")
    @click.option("--quiet", is_flag=True, envvar=["NVIDIA_CTK_QUIET", "NVIDIA_CDI_QUIET"],
                  help="Suppress all output except errors.")
    @click.version_option(_version(), prog_name=PROG, message="%(prog)s version %(version)s")
    @click.pass_context
    def group(ctx: click.Context, debug: bool, quiet: bool) -> None:
        """OCI hooks used by CDI specifications for NVIDIA devices."""
        os.umask(0o022)  # parents we create are 0755 whatever umask the runtime passed on
        ctx.ensure_object(dict)
        ctx.obj.setdefault("debug", debug)
        ctx.obj.setdefault("quiet", quiet)
        if debug:
            ctx.obj["debug"] = True
        if ctx.invoked_subcommand is None:  # upstream: a warning, not a failed container
            click.echo(f"{PROG}: warning: No CDI hook specified", err=True)
            ctx.exit(0)

    _add_commands(group)
    return group


cdi_hook = _group("nvidia-cdi-hook")
ctk_hook = _group("hook")


