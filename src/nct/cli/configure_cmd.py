"""`nvidia-container-cli configure ROOTFS`: upstream's flags over the same core as the hook
(nct.hook.core). Our addition: `--dry-run` prints the plan (ContainerEdits as JSON) and
touches nothing."""

from __future__ import annotations

import click

from nct.errors import NctError
from nct.limits import is_number

MAX_REQUIRES = 32
COMPAT_MODES = ("ldconfig", "mount", "disabled")
CAP_FLAGS = ("compat32", "compute", "display", "graphics", "ngx", "utility", "video")


def _fail(message: str):
    from nct.cli.container_cli import CliFailure

    return CliFailure(message)


def _split(values) -> tuple[str, ...]:
    out: list[str] = []
    for v in values:
        out.extend(p.strip() for p in v.split(",") if p.strip())
    return tuple(dict.fromkeys(out))


def _imex(values) -> tuple[str, ...]:
    out = []
    for v in _split(values):
        if v.lower() == "all":
            out.append("all")
            continue
        if not is_number(v) or int(v) > (1 << 20) - 1:
            raise _fail(f"error parsing IMEX info: invalid channel ID: {v}")
        out.append(str(int(v)))
    return tuple(out)


@click.command("configure")
@click.option("-p", "--pid", type=int, default=None, metavar="PID", help="Container PID.")
@click.option("-d", "--device", "devices", multiple=True, metavar="ID", help="Device UUID(s) or index(es) to isolate.")
@click.option("-r", "--require", "requires", multiple=True, metavar="EXPR", help="Check container requirements.")
@click.option("-l", "--ldconfig", default=None, metavar="PATH", help="Path to the ldconfig binary ('@' = host path).")
@click.option("-c", "--compute", is_flag=True, help="Enable compute capability.")
@click.option("-u", "--utility", is_flag=True, help="Enable utility capability.")
@click.option("-v", "--video", is_flag=True, help="Enable video capability.")
@click.option("-g", "--graphics", is_flag=True, help="Enable graphics capability.")
@click.option("-D", "--display", is_flag=True, help="Enable display capability.")
@click.option("-n", "--ngx", is_flag=True, help="Enable ngx capability.")
@click.option("--compat32", is_flag=True, help="Enable 32bits compatibility.")
@click.option("--mig-config", "mig_config", multiple=True, metavar="ID", help="Enable configuration of MIG devices.")
@click.option("--mig-monitor", "mig_monitor", multiple=True, metavar="ID", help="Enable monitoring of MIG devices.")
@click.option("--imex-channel", "imex", multiple=True, metavar="CHANNEL", help="IMEX channel ID(s) to inject.")
@click.option("--no-cgroups", is_flag=True, help="Don't use cgroup enforcement.")
@click.option("--no-devbind", is_flag=True, help="Don't bind mount devices.")
@click.option("--no-persistenced", is_flag=True, help="Don't include the NVIDIA persistenced socket.")
@click.option("--no-fabricmanager", is_flag=True, help="Don't include the NVIDIA fabricmanager socket.")
@click.option("--no-gsp-firmware", is_flag=True, help="Don't include GSP firmware.")
@click.option("--cuda-compat-mode", default=None, metavar="MODE",
              help="CUDA forward compatibility: ldconfig, mount (default) or disabled.")
@click.option("--no-cntlibs", is_flag=True, help="Don't use the CUDA compat libraries of the container.")
@click.option("--dry-run", is_flag=True, help="Print the plan (JSON) instead of configuring the container (nct).")
@click.argument("rootfs", metavar="ROOTFS")
@click.pass_context
def configure(ctx: click.Context, pid, devices, requires, ldconfig, compute, utility, video, graphics, display, ngx,
              compat32, mig_config, mig_monitor, imex, no_cgroups, no_devbind, no_persistenced, no_fabricmanager,
              no_gsp_firmware, cuda_compat_mode, no_cntlibs, dry_run, rootfs) -> None:
    """Configure a container with GPU support by exposing device drivers to it."""
    from nct.hook import core

    opts = ctx.obj
    if len(requires) > MAX_REQUIRES:
        raise _fail(f"input error: too many requirements (at most {MAX_REQUIRES})")
    if cuda_compat_mode is not None and cuda_compat_mode not in COMPAT_MODES:
        raise _fail(f"input error: invalid --cuda-compat-mode {cuda_compat_mode!r} "
                    f"(expected one of {', '.join(COMPAT_MODES)})")
    try:
        rootfs = core.check_rootfs(rootfs)
    except NctError as e:
        raise _fail(f"input error: {e}") from None
    if pid is not None and pid <= 0:
        raise _fail(f"input error: invalid pid: {pid}")
    request = request_from_flags(
        devices=devices, requires=requires, caps={n for n in CAP_FLAGS if ctx.params[n]},
        mig_config=mig_config, mig_monitor=mig_monitor, imex=imex,
        cuda_compat_mode="disabled" if no_cntlibs else (cuda_compat_mode or "mount"),
    )
    settings = core.Settings(
        roots=opts.roots(), ldcache=opts.ldcache, ldconfig=ldconfig or "/sbin/ldconfig",
        no_cgroups=no_cgroups, no_devbind=no_devbind, no_pivot=opts.no_pivot, no_persistenced=no_persistenced,
        no_fabricmanager=no_fabricmanager, no_gsp_firmware=no_gsp_firmware,
        load_kmods=opts.load_kmods and not dry_run, no_create_imex_channels=opts.no_create_imex_channels,
    )
    core.init_driver(settings, request)
    try:
        prepared = core.prepare(request, rootfs, settings)
    except NctError as e:
        raise _fail(f"{_stage(e)} error: {e}") from None
    if dry_run:
        from nct.edits.dump import edits_to_json

        click.echo(edits_to_json(prepared.edits))
        return
    try:
        core.configure(prepared, request, rootfs, pid, settings)
    except NctError as e:
        raise _fail(f"mount error: {e}") from None


def _stage(e: NctError) -> str:
    from nct.errors import DiscoveryError, RequestError, RequirementError

    if isinstance(e, RequirementError):
        return "requirement"
    if isinstance(e, RequestError):
        return "device"
    if isinstance(e, DiscoveryError):
        return "initialization"
    return "container"


def request_from_flags(*, devices=(), requires=(), caps=frozenset(), mig_config=(), mig_monitor=(), imex=(),
                       cuda_compat_mode: str = "mount"):
    """The ContainerRequest that configure's flags describe (no --device = no GPU)."""
    from nct.request.model import ContainerRequest

    ids = tuple(d for d in _split(devices) if d.lower() != "none")
    if any(d.lower() == "all" for d in ids):
        ids = ("all",)
    return ContainerRequest(
        devices=ids, capabilities=frozenset(caps), requirements=tuple(r for r in requires if r),
        mig_config=",".join(_split(mig_config)) or None, mig_monitor=",".join(_split(mig_monitor)) or None,
        imex_channels=_imex(imex), privileged=True, cuda_compat_mode=cuda_compat_mode,
    )
