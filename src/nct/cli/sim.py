"""`nct sim`: create a simulated GPU node, run commands inside it."""

from __future__ import annotations

import json
import sys

import click

from nct.errors import NctError


def _fail(e: NctError) -> None:
    click.echo(f"nct: {e}", err=True)
    sys.exit(1)


@click.group("sim")
def sim() -> None:
    """Simulated GPU node: create one, run commands inside it (see docs/sim.md)."""


@sim.command("create")
@click.argument("directory", type=click.Path(file_okay=False))
@click.option("--gpus", type=int, default=1, show_default=True, help="Number of GPUs (0..64).")
@click.option("--driver-version", default=None, help="NVRM version (default 550.54.15).")
@click.option("--cuda-version", default=None, help="CUDA driver API version (default 12.4).")
@click.option("--mig", "mig", default=None,
              help="MIG layout: N (every GPU, N devices, 0..7) or GPU:N[,GPU:N...].")
@click.option("--arch", default="x86_64", show_default=True, help="Architecture (only x86_64).")
@click.option("--seed", default=None, help="Seed for UUIDs (default: the directory's name).")
@click.option("--imex-channels", type=int, default=0, show_default=True, help="IMEX channel nodes to create.")
@click.option("--no-lib32", is_flag=True, help="Skip the 32-bit library copies.")
@click.option("--minor-order", type=click.Choice(["index", "reverse"]), default="index", show_default=True,
              help="Device minors in bus order, or reversed (minor != index, as on some hosts).")
@click.option("--json", "as_json", is_flag=True, help="Print node.json after creating.")
def create_cmd(directory, gpus, driver_version, cuda_version, mig, arch, seed, imex_channels, no_lib32,
               minor_order, as_json):
    """Build a simulated node in DIRECTORY (must be absent or empty)."""
    from nct.sim.model import DEFAULT_CUDA_VERSION, DEFAULT_DRIVER_VERSION
    from nct.sim.node import create_node

    try:
        node = create_node(
            directory, gpus=gpus, driver_version=driver_version or DEFAULT_DRIVER_VERSION, mig=mig,
            cuda_version=cuda_version or DEFAULT_CUDA_VERSION, arch=arch, seed=seed,
            imex_channels=imex_channels, lib32=False if no_lib32 else None, minor_order=minor_order,
        )
    except NctError as e:
        _fail(e)
    if as_json:
        click.echo(json.dumps(node.to_json(), indent=2))
    else:
        migs = len(node.migs)
        click.echo(f"created simulated node {node.dir}: {len(node.gpus)} GPU(s), {migs} MIG device(s), "
                   f"driver {node.driver_version}, CUDA {node.cuda_version}")


@sim.command("run", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.argument("directory", type=click.Path(exists=True, file_okay=False))
@click.argument("command", nargs=-1, type=click.UNPROCESSED, required=True)
def run_cmd(directory, command):
    """Run COMMAND in a private mount namespace where the node in DIRECTORY appears at the
    real paths (/proc/driver/nvidia, /dev/nvidia*, driver libraries, nvidia-smi)."""
    from nct.sim.run import run

    argv = list(command)
    if argv and argv[0] == "--":
        argv = argv[1:]
    try:
        run(directory, argv)
    except NctError as e:
        _fail(e)


@sim.command("show")
@click.argument("directory", type=click.Path(exists=True, file_okay=False))
def show_cmd(directory):
    """Print the node's description (node.json)."""
    from nct.sim.node import load_node

    try:
        node = load_node(directory)
    except NctError as e:
        _fail(e)
    click.echo(json.dumps(node.to_json(), indent=2))
