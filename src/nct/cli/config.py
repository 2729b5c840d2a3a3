"""`nvidia-ctk config`: show or edit config.toml (comments kept), print the default file."""

from __future__ import annotations

import sys

import click

from nct.config.paths import config_file_path
from nct.cli.errors import fail
from nct.errors import NctError


def _emit(text: str, output: str | None) -> None:
    from nct.config.edit import write_atomic

    if output:
        write_atomic(output, text)
    else:
        sys.stdout.write(text)
        sys.stdout.flush()


@click.group(
    "config",
    invoke_without_command=True,
    context_settings={"help_option_names": ["-h", "--help"]},
)
@click.option(
    "--config-file", "--config", "-c", "config_file",
    default=None, metavar="FILE",
    help="Config file to read (default: $NVIDIA_CTK_CONFIG_FILE_PATH, "
    "$XDG_CONFIG_HOME/nvidia-container-runtime/config.toml or /etc/nvidia-container-runtime/config.toml).",
)
@click.option(
    "--set", "sets", multiple=True, metavar="KEY[=VALUE]",
    help="Set a config value; a boolean key alone means true; lists are comma-separated; "
    "'nil' unsets an optional key. Repeatable.",
)
@click.option(
    "--set-list-separator", default=None, metavar="SEP",
    help="Separator for list values given with --set (default ',' or ':' when no ',').",
)
@click.option("--in-place", "-i", is_flag=True, help="Write the result back to the config file.")
@click.option("--output", "-o", default=None, metavar="FILE", help="Write the result to FILE instead of stdout.")
@click.pass_context
def config_group(
    ctx: click.Context,
    config_file: str | None,
    sets: tuple[str, ...],
    set_list_separator: str | None,
    in_place: bool,
    output: str | None,
) -> None:
    """Interact with the NVIDIA Container Toolkit configuration.

    Without a subcommand: read the config file, apply any --set, and print the result
    (or write it with --in-place / --output). Comments and other keys are kept as they are.
    """
    if ctx.invoked_subcommand is not None:
        return
    from nct.config import edit

    path = config_file or config_file_path()
    try:
        if in_place and output:
            raise NctError("cannot specify both --in-place and --output")
        doc, _existed = edit.load_document(path)
        edit.apply_sets(doc, list(sets), list_separator=set_list_separator)
        text = edit.render(doc, path if _existed else None)
        _emit(text, path if in_place else output)
    except NctError as e:
        fail(ctx, e)


@click.command("default", context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--output", "-o", default=None, metavar="FILE", help="Write to FILE instead of stdout.")
@click.pass_context
def default_command(ctx: click.Context, output: str | None) -> None:
    """Generate the default NVIDIA Container Toolkit configuration file."""
    from nct.config import edit

    try:
        _emit(edit.default_text(), output)
    except NctError as e:
        fail(ctx, e)


config_group.add_command(default_command, "default")
for _alias in ("create-default", "generate-default"):
    config_group.add_command(
        click.Command(
            _alias,
            callback=default_command.callback,
            params=default_command.params,
            help="Alias of 'default'.",
            hidden=True,
            context_settings={"help_option_names": ["-h", "--help"]},
        ),
        _alias,
    )
