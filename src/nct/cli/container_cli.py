"""`nvidia-container-cli`: upstream's global options and the `info` / `list` commands
(`configure` lives in nct.cli.configure_cmd, imported only when used).

Errors are printed as upstream does: "nvidia-container-cli: initialization error: ..." and
exit status 1, never a traceback.
"""

from __future__ import annotations

import logging
import os
import sys
from nct.record import Record

import click

from nct import UPSTREAM_COMPAT_VERSION, __version__
from nct.cli.lazy import LazyGroup
from nct.errors import NctError
from nct.limits import MAX_IMEX_CHANNEL, is_number

PROG = "nvidia-container-cli"
# libnvidia-container release that ships with the toolkit nct follows.
LIBNVC_VERSION = UPSTREAM_COMPAT_VERSION

COMMANDS = {
    "configure": ("nct.cli.configure_cmd", "configure",
                  "Configure a container with GPU support by exposing device drivers to it."),
}


class CliFailure(click.ClickException):
    """Upstream-style failure: '<prog>: <stage> error: <message>', exit 1."""

    exit_code = 1

    def show(self, file=None) -> None:
        click.echo(f"{PROG}: {self.message}", err=True)


class CliOptions(Record):
    """Global options, available to subcommands as ctx.obj (configure uses them too)."""

    root: str = "/"
    ldcache: str | None = None
    debug: str | None = None
    load_kmods: bool = False
    no_pivot: bool = False
    user: tuple[int, int] | None = None  # None = upstream default (overflow uid/gid)
    no_create_imex_channels: bool = False

    def roots(self):
        from nct.driver.rootpath import proc_root
        from nct.driver.model import Roots

        return Roots(driver=self.root, dev=self.root, proc=proc_root())


class _Group(LazyGroup):
    """Accepts upstream's optional-argument `-u/--user` (bare = current user) and keeps a
    missing lazy module from turning into a traceback."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        out, rest = [], list(args)
        while rest:
            a = rest.pop(0)
            if a in ("-u", "--user"):
                out.append("--user=")
                continue
            out.append(a)
            if a in self.lazy or a in self.commands:
                out += rest
                break
        return super().parse_args(ctx, out)

    def get_command(self, ctx: click.Context, name: str):
        try:
            return super().get_command(ctx, name)
        except ImportError:
            return None


def _parse_user(value: str) -> tuple[int, int]:
    """UID[:GID] (numbers or names); bare -> effective uid/gid."""
    import grp
    import pwd

    if value == "":
        return os.geteuid(), os.getegid()
    user, _, group = value.partition(":")
    try:
        uid = int(user) if user.isdigit() else pwd.getpwnam(user).pw_uid
        if group:
            gid = int(group) if group.isdigit() else grp.getgrnam(group).gr_gid
        else:
            gid = pwd.getpwuid(uid).pw_gid if not user.isdigit() else uid
    except (KeyError, ValueError):
        raise CliFailure(f"input error: invalid user: {value}") from None
    return uid, gid


def _setup_debug(path: str | None) -> None:
    path = path or os.environ.get("NVC_DEBUG_FILE")
    if not path:
        return
    try:
        handler = logging.FileHandler(path, mode="a")
    except OSError as e:
        raise CliFailure(f"input error: cannot open debug file {path}: {e.strerror or e}") from None
    handler.setFormatter(logging.Formatter(f"%(asctime)s {PROG}[{os.getpid()}] %(levelname)s %(name)s: %(message)s"))
    handler.set_name("nvidia-container-cli-debug")
    logger = logging.getLogger("nct")
    for old in [h for h in logger.handlers if h.get_name() == handler.get_name()]:
        logger.removeHandler(old)
        old.close()
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)


def _print_version(ctx: click.Context, _param, value: bool) -> None:
    if not value or ctx.resilient_parsing:
        return
    import platform

    click.echo(f"cli-version: {LIBNVC_VERSION}\nlib-version: {LIBNVC_VERSION}\nbuild date: n/a\n"
               f"build revision: nct {__version__}\nbuild compiler: python {platform.python_version()}\n"
               f"build platform: {platform.machine()}\nbuild flags: none")
    ctx.exit(0)


@click.group(cls=_Group, lazy=COMMANDS, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--version", is_flag=True, expose_value=False, is_eager=True, callback=_print_version,
              help="Print version information and exit.")
@click.option("-d", "--debug", metavar="FILE", default=None, help="Log debug information to FILE.")
@click.option("-k", "--load-kmods", is_flag=True, help="Load kernel modules and create missing device nodes.")
@click.option("-n", "--no-pivot", is_flag=True, help="Do not use pivot_root.")
@click.option("-u", "--user", metavar="UID[:GID]", default=None, help="User and group to use for privilege separation.")
@click.option("-r", "--root", metavar="PATH", default="/", help="Path to the driver root directory.")
@click.option("-l", "--ldcache", metavar="FILE", default=None, help="Path to the system's DSO cache (inside the root).")
@click.option("--no-create-imex-channels", is_flag=True, help="Don't automatically create IMEX channel device nodes.")
@click.pass_context
def cli(ctx: click.Context, debug, load_kmods, no_pivot, user, root, ldcache, no_create_imex_channels) -> None:
    """NVIDIA container command-line utility (nct implementation)."""
    _setup_debug(debug)
    if not root.startswith("/"):
        root = os.path.abspath(root)
    ctx.obj = CliOptions(
        root=root, ldcache=ldcache, debug=debug, load_kmods=load_kmods, no_pivot=no_pivot,
        user=_parse_user(user) if user is not None else None, no_create_imex_channels=no_create_imex_channels,
    )


def init_driver(opts: CliOptions, imex_channels=()) -> None:
    """upstream's init before every command: with --load-kmods, load the NVIDIA modules the
    kernel lacks and mknod missing nodes (requested IMEX channels unless
    --no-create-imex-channels). Problems are debug-log warnings, never a failure."""
    if not opts.load_kmods:
        return
    from nct.nodeprep.devinit import init_driver as _init

    report = _init(opts.roots(), imex_channels=imex_channels, create_imex_channels=not opts.no_create_imex_channels)
    logging.getLogger("nct.driver").debug("--load-kmods: %s", report)


def _discover(opts: CliOptions, imex_channels=()):
    from nct.driver.discover import discover_node

    init_driver(opts, imex_channels)
    try:
        return discover_node(opts.roots(), ldcache=opts.ldcache)
    except NctError as e:
        raise CliFailure(f"initialization error: {e}") from None
    except OSError as e:
        raise CliFailure(f"initialization error: {e.strerror or e}: {e.filename or ''}") from None


@cli.command("info")
@click.option("--csv", "csv_output", is_flag=True, help="Output in CSV format.")
@click.pass_obj
def info(opts: CliOptions, csv_output: bool) -> None:
    """Query the driver and report its information as well as the devices it detected."""
    node = _discover(opts)
    click.echo(format_info(node, csv_output), nl=False)


def format_info(node, csv_output: bool = False) -> str:
    """Upstream's layout: 15-wide labels, a blank line before each device."""
    cuda = node.cuda_version or "N/A"
    gpus = [g for g in node.gpus if not g.excluded]
    rows = [(g.index, g.minor, g.model, g.brand or "Unknown", g.uuid, g.bus_id, g.architecture or "N/A") for g in gpus]
    if csv_output:
        out = f"NVRM version,CUDA version\n{node.driver_version},{cuda}\n"
        out += "\nDevice Index,Device Minor,Model,Brand,GPU UUID,Bus Location,Architecture\n"
        out += "".join(",".join(str(c) for c in r) + "\n" for r in rows)
        return out
    out = f"{'NVRM version:':<15} {node.driver_version}\n{'CUDA version:':<15} {cuda}\n"
    labels = ("Device Index:", "Device Minor:", "Model:", "Brand:", "GPU UUID:", "Bus Location:", "Architecture:")
    for r in rows:
        out += "\n" + "".join(f"{lab:<15} {val}\n" for lab, val in zip(labels, r))
    return out


# --- list ------------------------------------------------------------------------------

def select_devices(node, ids: str | None):
    """Upstream's --device rules (nct.edits.select), with the CLI's error wording."""
    from nct.edits.select import UnknownDevice, select_devices as _select

    try:
        return _select(node, ids or "")
    except UnknownDevice as exc:
        why = f" ({exc.why})" if exc.why else ""
        raise CliFailure(f"device error: {exc.device}: unknown device{why}") from None


def _select_mig_mode(what: str, ids: str | None, visible) -> list | None:
    """--mig-config / --mig-monitor: only 'all' (of the visible, MIG-enabled GPUs)."""
    if ids is None:
        return None
    for dev in ids.split(","):
        dev = dev.strip()
        if not dev:
            continue
        if dev.lower() == "all":
            if not visible.all and visible.migs:
                raise CliFailure(f"{what} error: {dev}: cannot enable {what} with specific MIG devices selected")
            return [g for g in visible.gpus if g.mig_enabled]
        raise CliFailure(f"{what} error: {dev}: only 'all' devices are currently supported")
    return None


def _parse_imex(values: tuple[str, ...], node) -> list[int]:
    chans: list[int] = []
    for v in ",".join(values).split(","):
        v = v.strip()
        if not v:
            continue
        if v.lower() == "all":
            chans += [int(c.path.rsplit("channel", 1)[1]) for c in node.imex_channels]
            continue
        if not is_number(v) or int(v) > MAX_IMEX_CHANNEL:
            raise CliFailure(f"error parsing IMEX info: invalid channel ID: {v}")
        chans.append(int(v))
    return list(dict.fromkeys(chans))


@cli.command("list")
@click.option("-d", "--device", "devices", multiple=True, metavar="ID", help="Device UUID(s) or index(es) to list.")
@click.option("-l", "--libraries", is_flag=True, help="List driver libraries.")
@click.option("-b", "--binaries", is_flag=True, help="List driver binaries.")
@click.option("-i", "--ipcs", is_flag=True, help="List driver ipcs.")
@click.option("-f", "--firmwares", is_flag=True, help="List driver firmwares.")
@click.option("--compat32", is_flag=True, help="Enable 32bits compatibility.")
@click.option("--mig-config", "mig_config", multiple=True, metavar="ID", help="MIG devices to list config capabilities files for.")
@click.option("--mig-monitor", "mig_monitor", multiple=True, metavar="ID", help="MIG devices to list monitor capabilities files for.")
@click.option("--imex-channel", "imex", multiple=True, metavar="CHANNEL", help="IMEX channel ID(s) to inject.")
@click.option("--no-persistenced", is_flag=True, help="Don't include the NVIDIA persistenced socket.")
@click.option("--no-fabricmanager", is_flag=True, help="Don't include the NVIDIA fabricmanager socket.")
@click.option("--no-gsp-firmware", is_flag=True, help="Don't include GSP firmware.")
@click.pass_context
def list_cmd(ctx: click.Context, devices, libraries, binaries, ipcs, firmwares, compat32, mig_config, mig_monitor,
             imex, no_persistenced, no_fabricmanager, no_gsp_firmware) -> None:
    """Query the driver and list the components required in order to configure a container with GPU support."""
    opts: CliOptions = ctx.obj
    given = {k for k, v in ctx.params.items() if v not in (False, (), None)}
    if not given or given == {"imex"}:
        devices, compat32, libraries, binaries, ipcs, firmwares = ("all",), True, True, True, True, True
        mig_config = mig_monitor = ()
    node = _discover(opts, [c for v in imex for c in v.split(",")])
    click.echo("".join(p + "\n" for p in list_paths(
        node, devices=",".join(devices) if devices else None, libraries=libraries, binaries=binaries, ipcs=ipcs,
        firmwares=firmwares and not no_gsp_firmware, compat32=compat32,
        mig_config=",".join(mig_config) if mig_config else None,
        mig_monitor=",".join(mig_monitor) if mig_monitor else None, imex=imex,
        no_persistenced=no_persistenced, no_fabricmanager=no_fabricmanager)), nl=False)


def list_paths(node, *, devices: str | None, libraries: bool = False, binaries: bool = False, ipcs: bool = False,
               firmwares: bool = False, compat32: bool = False, mig_config: str | None = None,
               mig_monitor: str | None = None, imex: tuple[str, ...] = (), no_persistenced: bool = False,
               no_fabricmanager: bool = False) -> list[str]:
    """Host paths in upstream's order: control devices, GPU nodes, MIG access files, IMEX
    channels, MIG config/monitor files, binaries, libraries (+32-bit), IPCs, firmware."""
    from nct.driver import catalogue, procfs

    out: list[str] = []
    visible = select_devices(node, devices if devices is not None else "")
    cfg_gpus = _select_mig_mode("mig-config", mig_config, visible)
    mon_gpus = _select_mig_mode("mig-monitor", mig_monitor, visible)
    dev_caps = "nvidia-caps" in node.majors
    if devices is not None:
        out += [d.host_path for d in node.control_devices]
        out += [g.device.host_path for g in visible.gpus]
        if cfg_gpus is None and mon_gpus is None:
            for m in visible.migs:
                out += [m.gi_access_proc, m.ci_access_proc]
                if dev_caps:
                    out += [m.gi_access.host_path, m.ci_access.host_path]
    if imex:
        base = node.roots.host("/dev/nvidia-caps-imex-channels", node.roots.dev)
        out += [f"{base}/channel{c}" for c in _parse_imex(imex, node)]
    caps_dir = os.path.join(node.roots.proc, procfs.CAPABILITIES_DIR)
    minors = None
    for name, gpus, paths in (("config", cfg_gpus, node.mig_config), ("monitor", mon_gpus, node.mig_monitor)):
        if not gpus:
            continue
        out.append(os.path.join(caps_dir, "mig", name))
        if dev_caps and len(paths) > 1:
            out.append(paths[1])
        for g in gpus:
            out.append(os.path.join(caps_dir, f"gpu{g.minor}", "mig"))
            if dev_caps:
                if minors is None:
                    minors = _mig_minors(node)
                out.append(node.roots.host("/dev/nvidia-caps", node.roots.dev))
                out += [node.roots.host(f"/dev/nvidia-caps/nvidia-cap{n}", node.roots.dev)
                        for key, n in minors.items() if key.startswith(f"gpu{g.minor}/")]
    listed_libs = set(catalogue.all_library_names())
    if binaries:
        out += [f.host_path for f in node.files if f.kind == "bin"]
    if libraries:
        out += [f.host_path for f in node.files if f.kind == "lib" and f.name in listed_libs]
        if compat32:
            out += [f.host_path for f in node.files if f.kind == "lib32"]
    if ipcs:
        for f in node.files:
            if f.kind != "ipc":
                continue
            if (no_persistenced and "persistenced" in f.container_path) or (
                    no_fabricmanager and "fabricmanager" in f.container_path):
                continue
            out.append(f.host_path)
    if firmwares:
        out += [f.host_path for f in node.files if f.kind == "firmware"]
    return out


def _mig_minors(node) -> dict[str, int]:
    from nct.driver import procfs

    path = os.path.join(node.roots.proc, procfs.MIG_MINORS_FILE)
    try:
        return procfs.parse_mig_minors(procfs.read_text(path), path)
    except FileNotFoundError:
        return {}
    except NctError as e:
        raise CliFailure(f"mig error: {e}") from None


def main() -> None:
    """Entry point: click's own handling, plus any NctError from a subcommand as one line."""
    try:
        rv = cli.main(prog_name=PROG, standalone_mode=False)
    except click.exceptions.Exit as e:
        sys.exit(e.exit_code)
    except click.ClickException as e:
        e.show()
        sys.exit(e.exit_code)
    except click.exceptions.Abort:
        sys.exit(1)
    except NctError as e:
        click.echo(f"{PROG}: {e}", err=True)
        sys.exit(1)
    except KeyboardInterrupt:
        sys.exit(130)
    sys.exit(rv if isinstance(rv, int) else 0)
