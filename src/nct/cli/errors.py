"""How every click front end reports a domain error: `<prog>: <message>` on one line of
stderr and exit status 1, never a traceback (prog = the command the user typed)."""

from __future__ import annotations

import functools

import click

from nct.errors import NctError


def fail(ctx: click.Context, err: NctError | str) -> None:
    """Print the one-line error and exit 1."""
    click.echo(f"{ctx.find_root().info_name or 'nct'}: {err}", err=True)
    ctx.exit(1)


def one_line_errors(fn):
    """Decorator for a click command: NctError -> fail()."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except NctError as e:
            fail(click.get_current_context(), e)

    return wrapper
