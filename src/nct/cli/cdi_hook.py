"""`nvidia-cdi-hook` (and `nvidia-ctk hook`): the OCI hooks CDI specs reference.

Compatibility rules from upstream: a hook this version does not know (an unknown subcommand,
or an unknown flag before any known one) prints a warning "Unsupported CDI hook" and exits 0,
so specs made by newer toolkits keep working; no hook at all warns "No CDI hook specified"
and exits 0; an unknown flag given to a known hook is an error (exit 1), as upstream. The container comes from the OCI state on stdin (or --container-spec); nothing is
read from the container's environment.
"""

from __future__ import annotations

import os

import click

PROG = "nvidia-cdi-hook"


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
        from nct.errors import NctError

        try:
            return super().invoke(ctx)
        except NctError as e:
            click.echo(f"{PROG}: {e}", err=True)
            ctx.exit(1)
        except (OSError, ValueError) as e:  # an unexpected image layout: one line, no traceback
            msg = str(e)
            if isinstance(e, OSError) and e.strerror:
                msg = f"{e.filename}: {e.strerror}" if e.filename is not None else e.strerror
            click.echo(f"{PROG}: {self.name}: {' '.join(msg.splitlines())}", err=True)
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


def _state(container_spec: str | None) -> str:
    """Container root from the OCI state: on stdin, or in the file --container-spec names
    (upstream's meaning; "-" is stdin). A file without `bundle` is taken as the bundle's
    config.json itself (nct's older reading of the flag)."""
    from nct.container.hooks import container_root
    from nct.errors import ContainerError
    from nct import jsonio

    from_file = container_spec and container_spec != "-"
    state = jsonio.read_object(container_spec if from_file else None, ContainerError,
                               where=None if from_file else "container state on stdin", not_object="not a JSON object")
    if from_file and "bundle" not in state:
        return container_root(None, container_spec)
    return container_root(state)


def _log(ctx: click.Context, msg: str) -> None:
    obj = ctx.find_root().obj or {}
    if obj.get("debug") and not obj.get("quiet"):
        click.echo(f"{PROG}: {msg}", err=True)


_spec_option = click.option("--container-spec", default=None, hidden=True, help="Path to the OCI container spec.")


def _add_commands(group: click.Group) -> None:
    @group.command("update-ldcache")
    @click.option("--folder", "folders", multiple=True, help="A folder to add to the ldcache (repeatable).")
    @click.option("--ldconfig-path", default="/sbin/ldconfig", show_default=True,
                  help="Host ldconfig to run (.real preferred when present).")
    @_spec_option
    @click.pass_context
    def update_ldcache(ctx, folders, ldconfig_path, container_spec):
        """Update the container's ld cache for the given folders (isolated, host ldconfig)."""
        from nct.container.hooks import open_root
        from nct.container.ldconfig import run_ldconfig

        with open_root(_state(container_spec)) as root:
            run_ldconfig(root, list(folders), ldconfig="@" + ldconfig_path, write_conf=True)
        _log(ctx, f"updated ld cache of {root.path} for {list(folders)}")

    @group.command("create-symlinks")
    @click.option("--link", "links", multiple=True, help="TARGET::LINK (repeatable).")
    @_spec_option
    @click.pass_context
    def create_symlinks(ctx, links, container_spec):
        """Create symlinks in the container."""
        from nct.container.hooks import create_symlinks as run, open_root

        if not links:
            return
        with open_root(_state(container_spec)) as root:
            n = run(root, list(links))
        _log(ctx, f"created {n} symlinks")

    @group.command("chmod")
    @click.option("--mode", required=True, help="Octal mode.")
    @click.option("--path", "paths", multiple=True, help="Container path (repeatable).")
    @_spec_option
    def chmod(mode, paths, container_spec):
        """Change permissions of paths in the container (deprecated)."""
        from nct.container.hooks import chmod_paths, open_root
        from nct.errors import ContainerError

        try:
            value = int(mode, 8)
        except ValueError:
            raise ContainerError(f"invalid --mode {mode!r}: want an octal mode") from None
        if not paths:
            return
        with open_root(_state(container_spec)) as root:
            chmod_paths(root, value, list(paths))

    @group.command("enable-cuda-compat")
    @click.option("--host-driver-version", default="", help="Host driver version.")
    @click.option("--host-cuda-version", default="", help="Host CUDA version.")
    @click.option("--cuda-compat-container-root", default="/usr/local/cuda/compat", show_default=True)
    @_spec_option
    @click.pass_context
    def enable_cuda_compat(ctx, host_driver_version, host_cuda_version, cuda_compat_container_root, container_spec):
        """Use the image's CUDA forward-compat libraries when newer than the host driver."""
        from nct.container.compat import enable_compat
        from nct.container.hooks import open_root

        if not host_driver_version and not host_cuda_version:
            return
        with open_root(_state(container_spec)) as root:
            written = enable_compat(root, cuda_compat_container_root, host_driver_version or None,
                                    host_cuda_version or None)
        _log(ctx, f"compat: {written or 'not used'}")

    @group.command("disable-device-node-modification")
    @_spec_option
    def disable_device_node_modification(container_spec):
        """Show ModifyDeviceFiles: 0 in the container's /proc/driver/nvidia/params."""
        from nct.container.hooks import disable_device_node_modification as run, open_root

        from nct.driver.rootpath import proc_root

        proc = proc_root()
        with open_root(_state(container_spec)) as root:
            run(root, f"{proc}/driver/nvidia/params")

    @group.command("update-application-profile")
    @_spec_option
    def update_application_profile(container_spec):
        """Restrict EGL to the container's GPUs via an application profile."""
        from nct.container.hooks import open_root, update_application_profile as run

        with open_root(_state(container_spec)) as root:
            run(root)

    @group.command("noop", hidden=True)
    def noop():
        """Do nothing."""


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


def main() -> None:
    cdi_hook(prog_name=PROG)
