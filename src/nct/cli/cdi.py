"""`nvidia-ctk cdi` / `nct cdi`: generate, list, transform root, check.

generate and check hand their parsed options to nct.cdi.generate / nct.cdi.check."""

from __future__ import annotations

import os
import sys

import click

from nct.cli.errors import one_line_errors
from nct.errors import NctError

SPEC_DIRS_ENV = "NVIDIA_CTK_CDI_SPEC_DIRS"


def _prog(ctx: click.Context) -> str:
    return ctx.find_root().info_name or "nvidia-ctk"


def _global(ctx: click.Context) -> dict:
    return ctx.find_object(dict) or {}


def _split_list(values: tuple[str, ...]) -> tuple[str, ...]:
    """Repeatable flags that also take comma lists (as upstream's string slices)."""
    out: list[str] = []
    for v in values:
        out += [p.strip() for p in v.split(",") if p.strip()]
    return tuple(out)


@click.group("cdi", context_settings={"help_option_names": ["-h", "--help"]})
def cdi_group() -> None:
    """Container Device Interface: generate, list, transform and check specs."""


@cdi_group.command("list")
@click.option("--spec-dir", "spec_dirs", multiple=True,
              help=f"Directory to search for CDI specs (repeatable; env {SPEC_DIRS_ENV}; "
                   "default /etc/cdi, /var/run/cdi; later dirs win).")
@click.pass_context
@one_line_errors
def list_command(ctx: click.Context, spec_dirs: tuple[str, ...]) -> None:
    """List the fully-qualified CDI device names in the spec dirs."""
    from nct.cdi.registry import DEFAULT_SPEC_DIRS, Registry

    dirs = _split_list(spec_dirs)
    if not dirs:
        env = os.environ.get(SPEC_DIRS_ENV, "")
        dirs = _split_list((env,)) if env.strip() else DEFAULT_SPEC_DIRS
    reg = Registry(dirs)
    prog = _prog(ctx)
    for err in reg.errors:
        click.echo(f"{prog}: warning: {err}", err=True)
    names = reg.device_names()
    if not _global(ctx).get("quiet"):
        click.echo(f"{prog}: found {len(names)} CDI devices", err=True)
    for name in names:
        click.echo(name)


@cdi_group.group("transform")
def transform_group() -> None:
    """Transform a CDI spec."""


@transform_group.command("root")
@click.option("--from", "from_root", default="", help="Root to replace (path prefix).")
@click.option("--to", "to_root", default="", help="Root to put in its place.")
@click.option("--input", "input_path", default="-", show_default=True, help="Spec to read ('-' = stdin).")
@click.option("--output", "output_path", default="", help="Where to write (default stdout).")
@click.option("--relative-to", type=click.Choice(["host", "container"]), default="host", show_default=True,
              help="Transform host paths or container paths.")
@click.pass_context
@one_line_errors
def transform_root_command(ctx: click.Context, from_root: str, to_root: str, input_path: str,
                           output_path: str, relative_to: str) -> None:
    """Rewrite the root of the paths in a CDI spec (e.g. a driver container's root)."""
    from nct.cdi.spec import dump_spec, parse_spec_data, save_spec, validate_spec, with_minimum_version
    from nct.cdi.transform import transform_root

    if input_path == "-":
        data, source = sys.stdin.buffer.read(), "<stdin>"
    else:
        try:
            with open(input_path, "rb") as f:
                data = f.read()
        except OSError as e:
            raise NctError(f"{input_path}: cannot read: {e.strerror}") from None
        source = input_path
    doc, from_yaml = parse_spec_data(data, source)
    spec = transform_root(validate_spec(doc, source, from_yaml=from_yaml), from_root, to_root, relative_to)
    if output_path and output_path != "-":
        save_spec(spec, output_path, fmt="yaml" if from_yaml else "json")
    else:
        spec = validate_spec(with_minimum_version(spec), "<output>")
        click.echo(dump_spec(spec, "yaml" if from_yaml else "json"), nl=False)


_HOOK_CHOICES = ("create-symlinks", "chmod", "update-ldcache", "enable-cuda-compat",
                 "disable-device-node-modification", "update-application-profile", "all")


@cdi_group.command("generate")
@click.option("--output", envvar="NVIDIA_CTK_CDI_OUTPUT_FILE_PATH", default=None,
              help="Spec file to write (default stdout); .json/.yaml picks the format.")
@click.option("--format", "fmt", type=click.Choice(["json", "yaml"]), default=None,
              help="Output format (default yaml, or from the output's extension).")
@click.option("--mode", "--discovery-mode", "mode", default="auto", show_default=True,
              type=click.Choice(["auto", "csv", "gdrcopy", "gds", "imex", "management", "mofed",
                                 "nvml", "nvswitch", "wsl"]),
              help="Discovery mode.")
@click.option("--driver-root", envvar="NVIDIA_CTK_DRIVER_ROOT", default=None,
              help="Driver root (default config nvidia-container-cli.root, else /).")
@click.option("--dev-root", envvar="NVIDIA_CTK_DEV_ROOT", default=None, help="Device root (default driver root).")
@click.option("--device-name-strategy", "strategies", multiple=True,
              type=click.Choice(["index", "uuid", "type-index"]),
              help="How devices are named (repeatable; default index and uuid).")
@click.option("--nvidia-cdi-hook-path", "--nvidia-ctk-path", "hook_path", default=None,
              help="nvidia-cdi-hook (or nvidia-ctk) binary the hooks run.")
@click.option("--ldconfig-path", default=None, help="ldconfig the update-ldcache hook runs.")
@click.option("--vendor", "--cdi-vendor", "vendor", default=None, help="CDI vendor (default nvidia.com).")
@click.option("--class", "--cdi-class", "cls", default=None, help="CDI class (default gpu).")
@click.option("--config-search-path", multiple=True, help="Where to look for config files (repeatable).")
@click.option("--library-search-path", multiple=True, help="Where to look for driver libraries (repeatable).")
@click.option("--csv.file", "csv_files", multiple=True, help="CSV mount spec files (csv mode).")
@click.option("--csv.ignore-pattern", "csv_ignore", multiple=True, help="Patterns to skip in CSV files.")
@click.option("--csv.compat-container-root", "csv_compat_root", default=None, help="CUDA compat root (csv mode).")
@click.option("--disable-hook", "--disable-hooks", "disable_hooks", multiple=True,
              help="Hook to leave out (repeatable; 'all').")
@click.option("--enable-hook", "--enable-hooks", "enable_hooks", multiple=True,
              help="Hook to include even if disabled by default (repeatable).")
@click.option("--feature-flag", "--feature-flags", "feature_flags", multiple=True, help="nvcdi feature flag.")
@click.option("--no-all-device", is_flag=True, help="Do not add the 'all' device.")
@click.option("--compat32", is_flag=True,
              help="Also add the i386 (32-bit) driver libraries (nct; upstream's specs have none).")
@click.option("--device-id", "--devices", "device_ids", multiple=True, help="Devices to include (default all).")
@click.option("--max-cdi-version", default=None,
              help="nct: highest cdiVersion the consumer reads: below 0.7.0 leaves out additionalGids "
                   "(needed only for device nodes that are not world rw, e.g. video-group DRM nodes, which "
                   "podman 4.x cannot read); fails if the spec would still need more.")
@click.pass_context
@one_line_errors
def generate_command(ctx: click.Context, output, fmt, mode, driver_root, dev_root, strategies, hook_path,
                     ldconfig_path, vendor, cls, config_search_path, library_search_path, csv_files,
                     csv_ignore, csv_compat_root, disable_hooks, enable_hooks, feature_flags,
                     no_all_device, compat32, device_ids, max_cdi_version) -> None:
    """Generate a CDI specification for the NVIDIA devices on this node."""
    from nct.cdi.generate import GenerateOptions, generate

    disable = _split_list(disable_hooks)
    enable = _split_list(enable_hooks)
    for h in disable + enable:
        if h not in _HOOK_CHOICES:
            raise NctError(f"unknown hook name {h!r}")
    if "all" in enable:
        raise NctError("--enable-hook does not accept 'all'")
    g = _global(ctx)
    generate(GenerateOptions(
        output=output or None, format=fmt, mode=mode, driver_root=driver_root, dev_root=dev_root,
        device_name_strategies=_split_list(strategies) or ("index", "uuid"), hook_path=hook_path,
        ldconfig_path=ldconfig_path, vendor=vendor, cls=cls,
        config_search_paths=_split_list(config_search_path),
        library_search_paths=_split_list(library_search_path), csv_files=_split_list(csv_files),
        csv_ignore_patterns=_split_list(csv_ignore), csv_compat_container_root=csv_compat_root,
        disable_hooks=disable, enable_hooks=enable, feature_flags=_split_list(feature_flags),
        no_all_device=no_all_device, compat32=compat32, device_ids=_split_list(device_ids) or ("all",),
        config_path=g.get("config_path"), quiet=bool(g.get("quiet")), debug=bool(g.get("debug")),
        max_cdi_version=max_cdi_version, prog=_prog(ctx),
    ))


@cdi_group.command("check")
@click.argument("files", nargs=-1, type=click.Path(dir_okay=False))
@click.option("--spec-dir", "spec_dirs", multiple=True,
              help=f"Spec dir to check (repeatable; env {SPEC_DIRS_ENV}; default /etc/cdi, /var/run/cdi).")
@click.option("--driver-root", envvar="NVIDIA_CTK_DRIVER_ROOT", default=None, help="Driver root.")
@click.option("--dev-root", envvar="NVIDIA_CTK_DEV_ROOT", default=None, help="Device root.")
@click.pass_context
@one_line_errors
def check_command(ctx: click.Context, files, spec_dirs, driver_root, dev_root) -> None:
    """Report NVIDIA CDI specs (FILES, or those in the spec dirs) that no longer match this
    node: exit 1 with one line per stale spec, 0 when all match (nct addition)."""
    from nct.cdi.check import CheckOptions, check

    dirs = _split_list(spec_dirs)
    if not files and not dirs:
        dirs = _split_list((os.environ.get(SPEC_DIRS_ENV, ""),)) or CheckOptions.spec_dirs
    g = _global(ctx)
    rc = check(CheckOptions(spec_dirs=dirs, files=tuple(files), driver_root=driver_root, dev_root=dev_root,
                            config_path=g.get("config_path"), quiet=bool(g.get("quiet")), prog=_prog(ctx)))
    ctx.exit(rc)
