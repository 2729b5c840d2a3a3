"""`nvidia-ctk system`: node utilities run by system units and driver containers.

create-dev-char-symlinks: /dev/char/<major>:<minor> -> NVIDIA device node links (systemd
and runc look device nodes up through /dev/char; drivers loaded from a container do not
get udev's links). create-device-nodes: load the kernel modules and mknod the control
nodes (nvidiactl, nvidia-modeset, nvidia-uvm, nvidia-uvm-tools).

Every path is rooted: --driver-root (modules via chroot), --dev-root (where /dev is) and
NCT_PROC_ROOT (procfs: /proc/devices, mig-minors), so tests run against a temp tree.
Planning is pure (lists of DevNode / argv); the thin layer below does mknod/symlink/exec.
"""

from __future__ import annotations

import os
import stat
import subprocess
from nct.record import Record

import click

from nct.cli.errors import fail
from nct.errors import NctError

BLOCKED_PREFIXES = ("nvidia-fs", "nvidia-nvswitch", "nvidia-nvlink")
CONTROL_MINORS = {"nvidia-modeset": 254, "nvidiactl": 255, "nvidia-uvm": 0, "nvidia-uvm-tools": 1}
CONTROL_NODES = ("nvidiactl", "nvidia-modeset", "nvidia-uvm", "nvidia-uvm-tools")
MODULES = ("nvidia", "nvidia-uvm", "nvidia-modeset")
NVIDIA_VENDOR = "0x10de"
GPU_CLASSES = ("0x030000", "0x030200")  # VGA controller, 3D controller


class NodeError(NctError):
    """A node utility could not do its job (missing major, mknod refused, modprobe failed)."""


class DevNode(Record):
    """A character device node: host path (dev root applied), major, minor."""

    path: str
    major: int
    minor: int

    @property
    def dev_char_name(self) -> str:
        return f"{self.major}:{self.minor}"


def proc_root() -> str:
    return os.environ.get("NCT_PROC_ROOT") or "/proc"


def rooted(root: str, path: str) -> str:
    """Join an absolute path onto a root ("/" leaves it unchanged)."""
    if root in ("", "/"):
        return path
    return root.rstrip("/") + "/" + path.lstrip("/")


# ---------------------------------------------------------------------------------------
# procfs / sysfs readers (parsers are the discovery area's)


def read_majors(proc: str) -> dict[str, int]:
    from nct.driver.procfs import parse_devices

    path = os.path.join(proc, "devices")
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError as e:
        raise NodeError(f"{path}: cannot read device majors: {e.strerror or e}") from None
    return parse_devices(text, path)


def read_mig_minors(proc: str) -> dict[str, int] | None:
    """name -> minor from mig-minors; None when the file is absent (no MIG support)."""
    from nct.driver.procfs import parse_mig_minors

    path = os.path.join(proc, "driver", "nvidia-caps", "mig-minors")
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
    except FileNotFoundError:
        return None
    except OSError as e:
        raise NodeError(f"{path}: cannot read MIG minors: {e.strerror or e}") from None
    return parse_mig_minors(text, path)


def gpu_major(majors: dict[str, int], proc: str) -> int:
    major = majors.get("nvidia-frontend", majors.get("nvidia"))
    if major is None:
        raise NodeError(f"{os.path.join(proc, 'devices')}: no 'nvidia' device major (is the nvidia module loaded?)")
    return major


def named_major(majors: dict[str, int], name: str, proc: str) -> int:
    if name not in majors:
        raise NodeError(f"{os.path.join(proc, 'devices')}: no '{name}' device major (is the {name} module loaded?)")
    return majors[name]


def count_gpus(dev_root: str, proc: str) -> int:
    """NVIDIA display-class PCI functions under <dev-root>/sys/bus/pci/devices, as upstream;
    where that tree is absent, the GPUs the driver lists in <proc>/driver/nvidia/gpus."""
    pci = rooted(dev_root, "/sys/bus/pci/devices")
    if os.path.isdir(pci):
        count = 0
        for entry in sorted(os.listdir(pci)):
            try:
                with open(os.path.join(pci, entry, "vendor")) as f:
                    vendor = f.read().strip().lower()
                with open(os.path.join(pci, entry, "class")) as f:
                    cls = f.read().strip().lower()
            except OSError:
                continue
            if vendor == NVIDIA_VENDOR and cls in GPU_CLASSES:
                count += 1
        return count
    gpus = os.path.join(proc, "driver", "nvidia", "gpus")
    try:
        return len([e for e in os.listdir(gpus) if not e.startswith(".")])
    except OSError:
        return 0


# ---------------------------------------------------------------------------------------
# planning (pure given the inputs)


def existing_device_nodes(dev_root: str) -> list[DevNode]:
    """NVIDIA character nodes that exist: /dev/nvidia* and /dev/nvidia-caps/nvidia-*,
    except nvidia-fs*, nvidia-nvswitch*, nvidia-nvlink*."""
    found: list[DevNode] = []
    for directory, prefix in (("/dev", "nvidia"), ("/dev/nvidia-caps", "nvidia-")):
        host_dir = rooted(dev_root, directory)
        try:
            names = sorted(os.listdir(host_dir))
        except OSError:
            continue
        for name in names:
            if not name.startswith(prefix) or name.startswith(BLOCKED_PREFIXES):
                continue
            path = os.path.join(host_dir, name)
            try:
                st = os.stat(path)
            except OSError:
                continue
            if stat.S_ISCHR(st.st_mode):
                found.append(DevNode(path, os.major(st.st_rdev), os.minor(st.st_rdev)))
    return found


def cap_path(minor: int) -> str:
    return f"/dev/nvidia-caps/nvidia-cap{minor}"


def all_possible_device_nodes(
    dev_root: str, majors: dict[str, int], mig_minors: dict[str, int] | None, gpu_count: int, proc: str
) -> list[DevNode]:
    """Every node the driver could create for `gpu_count` GPUs: control nodes, MIG
    config/monitor caps, /dev/nvidiaN and each GPU's GI/CI access caps."""
    if gpu_count == 0:
        return []
    gpu = gpu_major(majors, proc)
    uvm = named_major(majors, "nvidia-uvm", proc)
    caps = named_major(majors, "nvidia-caps", proc) if mig_minors is not None else None
    mig = mig_minors or {}
    nodes = [
        DevNode(rooted(dev_root, "/dev/nvidia-modeset"), gpu, CONTROL_MINORS["nvidia-modeset"]),
        DevNode(rooted(dev_root, "/dev/nvidiactl"), gpu, CONTROL_MINORS["nvidiactl"]),
        DevNode(rooted(dev_root, "/dev/nvidia-uvm"), uvm, CONTROL_MINORS["nvidia-uvm"]),
        DevNode(rooted(dev_root, "/dev/nvidia-uvm-tools"), uvm, CONTROL_MINORS["nvidia-uvm-tools"]),
    ]
    for name in ("config", "monitor"):
        if name in mig and caps is not None:
            nodes.append(DevNode(rooted(dev_root, cap_path(mig[name])), caps, mig[name]))
    for index in range(gpu_count):
        nodes.append(DevNode(rooted(dev_root, f"/dev/nvidia{index}"), gpu, index))
        if caps is None:
            continue
        gi = 0
        while f"gpu{index}/gi{gi}/access" in mig:
            minor = mig[f"gpu{index}/gi{gi}/access"]
            nodes.append(DevNode(rooted(dev_root, cap_path(minor)), caps, minor))
            ci = 0
            while f"gpu{index}/gi{gi}/ci{ci}/access" in mig:
                minor = mig[f"gpu{index}/gi{gi}/ci{ci}/access"]
                nodes.append(DevNode(rooted(dev_root, cap_path(minor)), caps, minor))
                ci += 1
            gi += 1
    return nodes


def control_device_nodes(dev_root: str, majors: dict[str, int], proc: str) -> list[DevNode]:
    """nvidiactl, nvidia-modeset (GPU major), nvidia-uvm, nvidia-uvm-tools (UVM major)."""
    gpu = gpu_major(majors, proc)
    uvm = named_major(majors, "nvidia-uvm", proc)
    major = {"nvidiactl": gpu, "nvidia-modeset": gpu, "nvidia-uvm": uvm, "nvidia-uvm-tools": uvm}
    return [DevNode(rooted(dev_root, f"/dev/{n}"), major[n], CONTROL_MINORS[n]) for n in CONTROL_NODES]


def modprobe_argv(driver_root: str, module: str) -> list[str]:
    """upstream: `[chroot ROOT] /sbin/modprobe MODULE` (chroot only for a non-/ root)."""
    if not module.startswith("nvidia"):
        raise NodeError(f"invalid kernel module {module!r}: not an NVIDIA module")
    argv = ["chroot", driver_root] if driver_root not in ("", "/") else []
    return argv + ["/sbin/modprobe", module]


# ---------------------------------------------------------------------------------------
# actions


class _Log:
    def __init__(self, quiet: bool):
        self.quiet = quiet

    def __call__(self, msg: str) -> None:
        if not self.quiet:
            click.echo(msg, err=True)


def load_modules(driver_root: str, dry_run: bool, log: _Log) -> None:
    for module in MODULES:
        argv = modprobe_argv(driver_root, module)
        log("Running: " + " ".join(argv))
        if dry_run:
            continue
        try:
            res = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, check=False)
        except OSError as e:
            raise NodeError(f"failed to load module {module}: {argv[0]}: {e.strerror or e}") from None
        if res.returncode != 0:
            out = (res.stderr or res.stdout).strip().splitlines()
            detail = f": {out[-1]}" if out else ""
            raise NodeError(f"failed to load module {module}: {' '.join(argv)} exited {res.returncode}{detail}")


def make_device_nodes(nodes: list[DevNode], dry_run: bool, log: _Log) -> None:
    """mknod each missing node, mode 0666; an existing path is left alone."""
    for node in nodes:
        if os.path.lexists(node.path):
            log(f"Skipping: {node.path} already exists")
            continue
        log(f"Running: mknod --mode=0666 {node.path} c {node.major} {node.minor}")
        if dry_run:
            continue
        try:
            os.makedirs(os.path.dirname(node.path), mode=0o755, exist_ok=True)
            os.mknod(node.path, stat.S_IFCHR | 0o666, os.makedev(node.major, node.minor))
            os.chmod(node.path, 0o666)  # mknod is subject to the umask
        except OSError as e:
            raise NodeError(f"failed to create device node {node.path}: {e.strerror or e}") from None


def create_links(nodes: list[DevNode], dev_char_path: str, dry_run: bool, log: _Log) -> int:
    """/dev/char/<major>:<minor> -> node. An entry that already reaches the same device is
    kept (udev's relative links); a stale one is replaced atomically. Returns links made."""
    if nodes and not dry_run:
        try:
            os.makedirs(dev_char_path, mode=0o755, exist_ok=True)
        except OSError as e:
            raise NodeError(f"failed to create directory {dev_char_path}: {e.strerror or e}") from None
    made = 0
    for node in nodes:
        link = os.path.join(dev_char_path, node.dev_char_name)
        if os.path.lexists(link) and _same_device(link, node):
            continue
        log(f"Creating link {link} => {node.path}")
        if dry_run:
            continue
        tmp = os.path.join(dev_char_path, f".{node.dev_char_name}.nct-tmp")
        try:
            if os.path.lexists(tmp):
                os.unlink(tmp)
            os.symlink(node.path, tmp)
            os.replace(tmp, link)
            made += 1
        except OSError as e:
            log(f"Warning: could not create symlink {link}: {e.strerror or e}")
            try:
                os.unlink(tmp)
            except OSError:
                pass
    return made


def _same_device(link: str, node: DevNode) -> bool:
    try:
        if os.readlink(link) == node.path:
            return True
    except OSError:
        return False
    try:
        st = os.stat(link)
    except OSError:
        return False
    return stat.S_ISCHR(st.st_mode) and st.st_rdev == os.makedev(node.major, node.minor)


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
        create_links(nodes, dev_char_path, dry_run, log)
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
