"""`nvidia-ctk system`: node utilities run by system units and driver containers.

create-dev-char-symlinks: /dev/char/<major>:<minor> -> NVIDIA device node links (systemd
and runc look device nodes up through /dev/char; drivers loaded from a container do not
get udev's links). create-device-nodes: load the kernel modules and mknod the control
nodes (nvidiactl, nvidia-modeset, nvidia-uvm, nvidia-uvm-tools).

Every path is rooted: --driver-root (modules via chroot), --dev-root (where /dev is) and
NCT_PROC_ROOT (procfs: /proc/devices, mig-minors), so tests run against a temp tree.
Planning and the actions (mknod, symlink, modprobe) are nct.nodeprep.devinit's; this is
the click front end.
"""

from __future__ import annotations

import click

from nct.cli.errors import fail
from nct.nodeprep.devinit import (  # noqa: F401 (re-exported: the node logic lives in devinit)
    ensure_dev_char_links, load_modules, make_device_nodes,
    MODULES, NodeError, all_possible_device_nodes, control_device_nodes, count_gpus, create_node,
    existing_device_nodes, modprobe_argv, read_majors, read_mig_minors, run_modprobe,
)
from nct.driver.rootpath import proc_root
from nct.errors import NctError


class _Log:
    def __init__(self, quiet: bool):
        self.quiet = quiet

    def __call__(self, msg: str) -> None:
        if not self.quiet:
            click.echo(msg, err=True)


# ---------------------------------------------------------------------------------------
# click front end


def _quiet(ctx: click.Context) -> bool:
    obj = ctx.find_root().obj
    return bool(obj.get("quiet")) if isinstance(obj, dict) else False


_CTX = {"help_option_names": ["-h", "--help"]}


@click.group("system", context_settings=_CTX)
def system_group() -> None:
    """A collection of system-level utilities (device nodes, /dev/char links)."""


@system_group.command("create-dev-char-symlinks", context_settings=_CTX)
@click.option("--dev-char-path", envvar="DEV_CHAR_PATH", default="/dev/char", show_default=True,
              help="Directory for the MAJOR:MINOR links.")
@click.option("--driver-root", envvar=["NVIDIA_DRIVER_ROOT", "DRIVER_ROOT"], default="/", show_default=True,
              help="Driver root: where kernel modules are loaded from (chroot).")
@click.option("--dev-root", envvar=["NVIDIA_DEV_ROOT", "DEV_ROOT"], default=None,
              help="Root holding /dev (and /sys) with the device nodes [default: driver root].")
@click.option("--create-all", envvar="CREATE_ALL", is_flag=True,
              help="Link every possible node (from /proc/devices and the PCI GPU count), not just existing ones.")
@click.option("--load-kernel-modules", envvar="LOAD_KERNEL_MODULES", is_flag=True,
              help="Load the NVIDIA kernel modules first (only with --create-all).")
@click.option("--create-device-nodes", envvar="CREATE_DEVICE_NODES", is_flag=True,
              help="Create missing control device nodes first (only with --create-all).")
@click.option("--dry-run", envvar="DRY_RUN", is_flag=True, help="Print what would be done; change nothing.")
@click.pass_context
def create_dev_char_symlinks(
    ctx: click.Context, dev_char_path: str, driver_root: str, dev_root: str | None, create_all: bool,
    load_kernel_modules: bool, create_device_nodes: bool, dry_run: bool,
) -> None:
    """Create /dev/char/MAJOR:MINOR symlinks to the NVIDIA device nodes."""
    log = _Log(_quiet(ctx))
    dev_root = dev_root or driver_root
    if not create_all:
        if load_kernel_modules:
            log("Warning: --load-kernel-modules is only applicable with --create-all; ignoring")
            load_kernel_modules = False
        if create_device_nodes:
            log("Warning: --create-device-nodes is only applicable with --create-all; ignoring")
            create_device_nodes = False
    proc = proc_root()
    try:
        if load_kernel_modules:
            load_modules(driver_root, dry_run, log)
        if create_device_nodes:
            make_device_nodes(control_device_nodes(dev_root, read_majors(proc), proc), dry_run, log)
        if create_all:
            majors = read_majors(proc)
            count = count_gpus(dev_root, proc)
            if count == 0:
                log(f"No NVIDIA devices found in {dev_root}")
            nodes = all_possible_device_nodes(dev_root, majors, read_mig_minors(proc), count, proc)
        else:
            nodes = existing_device_nodes(dev_root)
        ensure_dev_char_links(nodes, dev_char_path, dry_run=dry_run, log=log)
    except NctError as e:
        fail(ctx, e)


@system_group.command("create-device-nodes", context_settings=_CTX)
@click.option("--root", "--driver-root", "driver_root", envvar=["ROOT", "NVIDIA_DRIVER_ROOT", "DRIVER_ROOT"],
              default="/", show_default=True, help="Driver root: modules are loaded from it (chroot).")
@click.option("--dev-root", envvar=["NVIDIA_DEV_ROOT", "DEV_ROOT"], default=None,
              help="Root under which dev/ nodes are created [default: driver root].")
@click.option("--control-devices", is_flag=True,
              help="Create the control nodes: nvidiactl, nvidia-modeset, nvidia-uvm, nvidia-uvm-tools.")
@click.option("--load-kernel-modules", is_flag=True, help="Load the NVIDIA kernel modules first.")
@click.option("--dry-run", envvar="DRY_RUN", is_flag=True, help="Print what would be done; change nothing.")
@click.pass_context
def create_device_nodes(
    ctx: click.Context, driver_root: str, dev_root: str | None, control_devices: bool,
    load_kernel_modules: bool, dry_run: bool,
) -> None:
    """Create NVIDIA device nodes (and optionally load the kernel modules)."""
    log = _Log(_quiet(ctx))
    dev_root = dev_root or driver_root
    proc = proc_root()
    try:
        if load_kernel_modules:
            load_modules(driver_root, dry_run, log)
        if control_devices:
            log(f"Creating control device nodes at {dev_root}")
            make_device_nodes(control_device_nodes(dev_root, read_majors(proc), proc), dry_run, log)
    except NctError as e:
        fail(ctx, e)
