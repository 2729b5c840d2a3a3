"""`nct`: the umbrella command. Our additions (sim, install, cdi check, runtime unconfigure)
live here, and every upstream-named command is reachable as a subcommand too."""

from __future__ import annotations

import click

from nct import __version__
from nct.cli.lazy import LazyGroup

COMMANDS = {
    "sim": ("nct.cli.sim", "sim", "Simulated GPU node: create one, run commands inside it."),
    "install": ("nct.cli.installer", "installer_command",
                "nvidia-ctk-installer: install the toolkit and configure an engine."),
    "runtime": ("nct.cli.engines", "runtime_group", "Configure or unconfigure a container engine."),
    "cdi": ("nct.cli.cdi", "cdi_group", "CDI specs: generate, list, check against the node."),
    "ctk": ("nct.cli.ctk", "ctk", "nvidia-ctk: the toolkit's command-line tool."),
    "container-cli": ("nct.cli.container_cli", "cli", "nvidia-container-cli: info, list, configure."),
    "cdi-hook": ("nct.cli.cdi_hook", "cdi_hook", "nvidia-cdi-hook: OCI hooks for CDI specs."),
}


@click.group(cls=LazyGroup, lazy=COMMANDS, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="nct")
def nct() -> None:
    """nct: a Python implementation of the NVIDIA Container Toolkit.

    The upstream commands are installed under their own names too:
    nvidia-container-runtime, nvidia-container-runtime-hook (nvidia-container-toolkit),
    nvidia-container-cli, nvidia-ctk and nvidia-cdi-hook; the installer as
    nvidia-ctk-installer and nvidia-toolkit (= nct install).
    """


def main() -> None:
    nct(prog_name="nct")
