"""`nvidia-ctk`'s click front end: upstream's command set, each subcommand group in its own
module (nct.cli.ctk runs `nvidia-ctk hook ...` without it)."""

from __future__ import annotations


import click

from nct import UPSTREAM_COMPAT_VERSION, __version__
from nct.cli.lazy import LazyGroup

COMMANDS = {
    "hook": ("nct.cli.cdi_hook", "ctk_hook", "OCI hooks used by CDI specs (as nvidia-cdi-hook)."),
    "runtime": ("nct.cli.engines", "runtime_group", "Configure a container engine for the NVIDIA runtime."),
    "cdi": ("nct.cli.cdi", "cdi_group", "Generate and list CDI specifications."),
    "config": ("nct.cli.config", "config_group", "Show, edit or create config.toml."),
    "system": ("nct.cli.system", "system_group", "Node utilities: device nodes and /dev/char links."),
}


@click.group(cls=LazyGroup, lazy=COMMANDS, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(
    __version__, prog_name="nvidia-ctk",
    message=f"NVIDIA Container Toolkit CLI version {UPSTREAM_COMPAT_VERSION} (nct {__version__})",
)
@click.option("-d", "--debug", is_flag=True, envvar="NVIDIA_CTK_DEBUG", help="Enable debug-level logging.")
@click.option("--quiet", is_flag=True, envvar="NVIDIA_CTK_QUIET", help="Suppress all output except errors.")
@click.option("--config", "config_path", envvar="NVIDIA_CTK_CONFIG", default=None, help="Config file.")
@click.pass_context
def ctk(ctx: click.Context, debug: bool, quiet: bool, config_path: str | None) -> None:
    """NVIDIA Container Toolkit CLI (nct implementation)."""
    ctx.ensure_object(dict)
    ctx.obj.update(debug=debug and not quiet, quiet=quiet, config_path=config_path)


@ctk.command("info")
def info() -> None:
    """Provide information about the system (no subcommands, as upstream)."""
