"""`nvidia-ctk`: upstream's command set (nct.cli.ctk_click). `nvidia-ctk hook ...`, the hook
every container of a CDI or jit-cdi spec runs, is tried first without loading click
(nct.cli.cdi_hook); anything it does not take as well-formed goes to the click front end."""

from __future__ import annotations

import sys


def main() -> int | None:
    argv = sys.argv[1:]
    if argv[:1] == ["hook"]:
        from nct.cli.cdi_hook import parse_argv, run_steps

        parsed = parse_argv(argv[1:])
        if parsed is not None:
            return run_steps(parsed[1], parsed[0])
    from nct.cli.ctk_click import ctk

    ctk(prog_name="nvidia-ctk")
    return None


def __getattr__(name: str):
    """The click group (`nct ctk`, tests), built on first use."""
    if name == "ctk":
        from nct.cli import ctk_click

        return ctk_click.ctk
    raise AttributeError(name)
