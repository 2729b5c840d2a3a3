"""Driver initialisation: load the NVIDIA kernel modules and create missing device nodes.

Shared by `--load-kmods` (the prestart hook and `nvidia-container-cli`, via `init_driver`)
and `nvidia-ctk system create-device-nodes | create-dev-char-symlinks`. On real nodes the
uvm module is loaded lazily and nothing runs udev rules for it, so /dev/nvidia-uvm often
does not exist until someone makes it: without this CUDA fails in containers.

`init_driver` runs on every container start, so its steady state (modules loaded, nodes
present) costs one read of <proc>/modules, a few small procfs reads and lstat()s: no
subprocess (modprobe is fork+execve), no click, no logging unless a log was set up.
Planning is pure; the thin layer below forks, mknods and never follows a symlink below
the dev root (a dangling /dev symlink must not make us create a node elsewhere).
"""

from __future__ import annotations

import os
import stat
import sys

from nct import child
from nct.errors import NctError
from nct.limits import IMEX_CHANNEL_COUNT
from nct.driver.model import DeviceNode
from nct.driver.rootpath import host_path
from nct.record import Record

TYPE_CHECKING = False  # typing costs an import on the hook's path
if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Sequence

MODULES = ("nvidia", "nvidia-uvm", "nvidia-modeset")
CONTROL_MINORS = {"nvidia-modeset": 254, "nvidiactl": 255, "nvidia-uvm": 0, "nvidia-uvm-tools": 1}
NVIDIA_VENDOR = "0x10de"
GPU_CLASSES = ("0x030000", "0x030200")  # VGA controller, 3D controller
CAPS_MAJOR = "nvidia-caps"
IMEX_MAJOR = "nvidia-caps-imex-channels"
MODPROBE = "/sbin/modprobe"
MODPROBE_TIMEOUT = 20.0  # seconds; a hung module load must not hang the container start
FULL_ID_MAP = ("0", "0", "4294967295")


class NodeError(NctError):
    """A node utility could not do its job (missing major, mknod refused, modprobe failed)."""


def dev_char_name(node: DeviceNode) -> str:
    """The node's name under /dev/char: "<major>:<minor>"."""
    return f"{node.major}:{node.minor}"


def dev_root_of(node: DeviceNode) -> str:
    """The dev root `node.host_path` lies under: host_path is `node.path` joined onto it
    (rootpath.host_path), and components below it are never followed when the node is made."""
    host, path = node.host_path, node.path
    if host == path:
        return "/"
    if not path.startswith("/") or not host.endswith(path):
        raise OSError(22, "not under a dev root", host)
    return host[:-len(path)] or "/"


class InitReport(Record):
    """What init_driver did (for logs and tests)."""

    skipped: str | None = None  # why nothing was done (user namespace, WSL)
    loaded: tuple[str, ...] = ()  # modules modprobe'd successfully
    failed: tuple[str, ...] = ()  # modules whose modprobe failed
    created: tuple[str, ...] = ()  # host paths of the nodes made




def cap_path(minor: int) -> str:
    return f"/dev/nvidia-caps/nvidia-cap{minor}"


def _node(dev_root: str, path: str, major: int, minor: int, mode: int = 0o666) -> DeviceNode:
    return DeviceNode(path, host_path(dev_root, path), major, minor, mode)


# ---------------------------------------------------------------------------------------
# pure planning


def in_user_namespace(uid_map: str) -> bool:
    """True unless /proc/self/uid_map is the initial namespace's full identity map."""
    lines = [line.split() for line in uid_map.splitlines() if line.strip()]
    return lines != [list(FULL_ID_MAP)]


def loaded_modules(text: str) -> set[str]:
    """Module names of a /proc/modules text ('-' and '_' are the same to the kernel)."""
    return {line.split(None, 1)[0].replace("-", "_") for line in text.splitlines() if line.strip()}


def modules_to_load(modules_text: str) -> list[str]:
    """Which of nvidia, nvidia-uvm, nvidia-modeset /proc/modules does not list, in load order."""
    loaded = loaded_modules(modules_text)
    return [m for m in MODULES if m.replace("-", "_") not in loaded]


def gpu_major_of(majors: dict[str, int]) -> int | None:
    """Major of /dev/nvidia*: 'nvidia-frontend' (multi-module builds) or 'nvidia'."""
    return majors.get("nvidia-frontend", majors.get("nvidia"))


def node_plan(dev_root: str, majors: dict[str, int], *, control: bool = True, gpus=(), modeset: bool = True,
              caps: list[tuple[int, int]] | tuple = (), imex=(), proc: str | None = None) -> list[DeviceNode]:
    """The one node planner: the nodes the driver's state calls for, in the order the
    module loads make them: nvidiactl (with `control`) and /dev/nvidia<minor> for `gpus`
    (GPU major), nvidia-caps nodes `caps` ((minor, mode) pairs; caps major), IMEX channels
    `imex` (IMEX major), nvidia-uvm(-tools) (uvm major) and nvidia-modeset (with `control`,
    and `modeset`: that module loaded). Without `proc` (--load-kmods) a kind whose major
    the kernel lacks is left out; with `proc` (the system commands) a missing GPU or uvm
    major is an error naming <proc>/devices. One node per path."""
    if proc is not None:
        if control or gpus:
            gpu_major(majors, proc)
        if control:
            named_major(majors, "nvidia-uvm", proc)
        if caps:
            named_major(majors, CAPS_MAJOR, proc)
    nodes: list[DeviceNode] = []
    gpu = gpu_major_of(majors)
    if gpu is not None:
        if control:
            nodes.append(_node(dev_root, "/dev/nvidiactl", gpu, CONTROL_MINORS["nvidiactl"]))
        nodes += [_node(dev_root, f"/dev/nvidia{m}", gpu, m) for m in gpus]
    if CAPS_MAJOR in majors:
        nodes += [_node(dev_root, cap_path(minor), majors[CAPS_MAJOR], minor, mode) for minor, mode in caps]
    if IMEX_MAJOR in majors:
        nodes += [_node(dev_root, f"/dev/nvidia-caps-imex-channels/channel{c}", majors[IMEX_MAJOR], c)
                  for c in imex]
    if control and "nvidia-uvm" in majors:
        uvm = majors["nvidia-uvm"]
        nodes.append(_node(dev_root, "/dev/nvidia-uvm", uvm, CONTROL_MINORS["nvidia-uvm"]))
        nodes.append(_node(dev_root, "/dev/nvidia-uvm-tools", uvm, CONTROL_MINORS["nvidia-uvm-tools"]))
    if control and gpu is not None and modeset:
        nodes.append(_node(dev_root, "/dev/nvidia-modeset", gpu, CONTROL_MINORS["nvidia-modeset"]))
    return list({n.path: n for n in nodes}.values())


def init_plan(dev_root: str, majors: dict[str, int], gpu_minors: list[int], *, modeset: bool = True,
              caps: list[tuple[int, int]] | tuple = (), imex=()) -> list[DeviceNode]:
    """Every node --load-kmods ensures, for the drivers the kernel has a major for: the
    control nodes, /dev/nvidia<minor> of `gpu_minors`, caps and IMEX channels (node_plan)."""
    return node_plan(dev_root, majors, gpus=gpu_minors, modeset=modeset, caps=caps, imex=imex)


def missing_nodes(nodes: list[DeviceNode]) -> list[DeviceNode]:
    """Those of `nodes` with nothing (of any kind, a dangling symlink included) at their path."""
    return [n for n in nodes if not os.path.lexists(n.host_path)]


def imex_ids(channels) -> list[int]:
    """Numeric channel ids of a request ('all' and garbage are not created)."""
    out = []
    for c in channels:
        c = str(c)
        c = c[len("channel"):] if c.startswith("channel") else c
        if c.isascii() and c.isdigit() and len(c) <= 9 and int(c) < IMEX_CHANNEL_COUNT:
            out.append(int(c))
    return list(dict.fromkeys(out))


def modprobe_argv(driver_root: str, module: str) -> list[str]:
    """upstream: `[chroot ROOT] /sbin/modprobe MODULE` (chroot only for a non-/ root)."""
    if not module.startswith("nvidia"):
        raise NodeError(f"invalid kernel module {module!r}: not an NVIDIA module")
    argv = ["chroot", driver_root] if driver_root not in ("", "/") else []
    return argv + [MODPROBE, module]


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
    major = gpu_major_of(majors)
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
    pci = host_path(dev_root, "/sys/bus/pci/devices")
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


def read_gpu_minors(proc: str) -> list[int]:
    """Device Minor of every GPU in <proc>/driver/nvidia/gpus (unreadable ones skipped:
    discovery reports them)."""
    from nct.driver import procfs

    minors = []
    try:
        dirs = procfs.list_gpu_dirs(proc)
    except NctError as e:
        _debug("init: %s", e)
        return []
    for d in dirs:
        path = os.path.join(d, "information")
        try:
            minors.append(procfs.parse_gpu_information(procfs.read_text(path), path).minor)
        except (OSError, NctError) as e:
            _debug("init: skipping %s: %s", path, e)
    return sorted(set(minors))


def cap_files(proc: str, gpu_minors: list[int]) -> list[tuple[int, str]]:
    """(minor, capability file) of the MIG config/monitor caps and of the GI/CI access caps
    of the MIG instances that exist. Instances are the capabilities tree's gi*/ci* dirs;
    minors come from one read of mig-minors (the per-file DeviceFileMinor only where that
    file is absent), so the steady state does not open a file per instance."""
    from nct.driver import procfs

    caps_dir = os.path.join(proc, procfs.CAPABILITIES_DIR)
    if not os.path.isdir(caps_dir):
        return []
    table = _read(os.path.join(proc, procfs.MIG_MINORS_FILE))
    if table is not None:
        table = "\n" + table  # every entry is then "\n<key> <minor>"

    def minor(key: str, path: str) -> int | None:
        if table is not None:  # a find per key: the file has ~1000 lines, we need a few
            at = table.find(f"\n{key} ")
            if at < 0:
                return None
            start = at + len(key) + 2
            end = table.find("\n", start)
            value = table[start:end if end >= 0 else None].strip()
            return int(value) if value.isdigit() else None
        try:
            return procfs.read_capability(path).minor
        except (OSError, NctError):
            return None

    found: list[tuple[str, str]] = [(f"{n}", os.path.join(caps_dir, "mig", n)) for n in ("config", "monitor")]
    if table is None:
        found = [(k, p) for k, p in found if os.path.isfile(p)]
    for g in gpu_minors:
        mig_dir = os.path.join(caps_dir, f"gpu{g}", "mig")
        for gi, gi_name in _numbered(mig_dir, "gi"):
            gi_dir = os.path.join(mig_dir, gi_name)
            found.append((f"gpu{g}/gi{gi}/access", os.path.join(gi_dir, "access")))
            for ci, ci_name in _numbered(gi_dir, "ci"):
                found.append((f"gpu{g}/gi{gi}/ci{ci}/access", os.path.join(gi_dir, ci_name, "access")))
    out = []
    for key, path in found:
        m = minor(key, path)
        if m is not None:
            out.append((m, path))
    return list(dict.fromkeys(out))


def _numbered(path: str, prefix: str) -> list[tuple[int, str]]:
    try:
        names = os.listdir(path)
    except OSError:
        return []
    return sorted((int(n[len(prefix):]), n) for n in names if n.startswith(prefix) and n[len(prefix):].isdigit())


def cap_mode(path: str, default: int = 0o444) -> int:
    """DeviceFileMode of a capability file (the mode the driver gives its node)."""
    from nct.driver import procfs

    try:
        return procfs.read_capability(path).mode
    except (OSError, NctError):
        return default


# ---------------------------------------------------------------------------------------
# NVIDIA nodes in a /dev tree (nvidia-ctk system)


BLOCKED_PREFIXES = ("nvidia-fs", "nvidia-nvswitch", "nvidia-nvlink")


def existing_device_nodes(dev_root: str) -> list[DeviceNode]:
    """NVIDIA character nodes that exist: /dev/nvidia* and /dev/nvidia-caps/nvidia-*,
    except nvidia-fs*, nvidia-nvswitch*, nvidia-nvlink*."""
    found: list[DeviceNode] = []
    for directory, prefix in (("/dev", "nvidia"), ("/dev/nvidia-caps", "nvidia-")):
        host_dir = host_path(dev_root, directory)
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
                found.append(DeviceNode(f"{directory}/{name}", path, os.major(st.st_rdev), os.minor(st.st_rdev),
                                        stat.S_IMODE(st.st_mode)))
    return found


def all_possible_device_nodes(
    dev_root: str, majors: dict[str, int], mig_minors: dict[str, int] | None, gpu_count: int, proc: str
) -> list[DeviceNode]:
    """Every node the driver could create for `gpu_count` GPUs (node_plan): control nodes,
    /dev/nvidiaN, and with MIG support (mig-minors readable) the MIG config/monitor caps and
    each GPU's GI/CI access caps."""
    if gpu_count == 0:
        return []
    gpu_major(majors, proc)
    named_major(majors, "nvidia-uvm", proc)
    caps: list[tuple[int, int]] = []
    if mig_minors is not None:
        named_major(majors, CAPS_MAJOR, proc)
        mig = mig_minors
        caps += [(mig[name], 0o666) for name in ("config", "monitor") if name in mig]
        for index in range(gpu_count):
            gi = 0
            while f"gpu{index}/gi{gi}/access" in mig:
                caps.append((mig[f"gpu{index}/gi{gi}/access"], 0o666))
                ci = 0
                while f"gpu{index}/gi{gi}/ci{ci}/access" in mig:
                    caps.append((mig[f"gpu{index}/gi{gi}/ci{ci}/access"], 0o666))
                    ci += 1
                gi += 1
    return node_plan(dev_root, majors, gpus=range(gpu_count), caps=caps, proc=proc)


def control_device_nodes(dev_root: str, majors: dict[str, int], proc: str) -> list[DeviceNode]:
    """nvidiactl, nvidia-uvm, nvidia-uvm-tools (uvm major), nvidia-modeset (GPU major):
    node_plan's control nodes; a missing major is an error."""
    return node_plan(dev_root, majors, proc=proc)


# ---------------------------------------------------------------------------------------
# actions


def ensure_dev_char_links(nodes: list[DeviceNode], dev_char_path: str = "/dev/char", *, dry_run: bool = False,
                          log=None) -> int:
    """/dev/char/<major>:<minor> -> node, for each node. systemd (runc's systemd cgroup
    driver) turns a container's device rules into DeviceAllow=/dev/char/M:m entries and
    drops those it cannot resolve, so without the links a `systemctl daemon-reload` takes
    the GPUs away from running containers ("Failed to initialize NVML: Unknown Error").
    An entry that already reaches the same device is kept (udev's relative links); a stale
    one is replaced atomically. `log(msg)` gets each action. Returns the links made."""
    say = log or (lambda msg: None)
    if nodes and not dry_run:
        try:
            os.makedirs(dev_char_path, mode=0o755, exist_ok=True)
        except OSError as e:
            raise NodeError(f"failed to create directory {dev_char_path}: {e.strerror or e}") from None
    made = 0
    for node in nodes:
        link = os.path.join(dev_char_path, dev_char_name(node))
        if os.path.lexists(link) and _same_device(link, node):
            continue
        say(f"Creating link {link} => {node.host_path}")
        if dry_run:
            continue
        tmp = os.path.join(dev_char_path, f".{dev_char_name(node)}.nct-tmp")
        try:
            if os.path.lexists(tmp):
                os.unlink(tmp)
            os.symlink(node.host_path, tmp)
            os.replace(tmp, link)
            made += 1
        except OSError as e:
            say(f"Warning: could not create symlink {link}: {e.strerror or e}")
            try:
                os.unlink(tmp)
            except OSError:
                pass
    return made


def imex_nodes_to_make(device_nodes, dev_root: str) -> list[DeviceNode]:
    """The IMEX channel nodes of a container's planned device nodes (nct.edits
    DeviceNodeEdit) that lie where the dev root puts them: what --load-kmods makes for a
    request (mode 0666), once the whole request is planned."""
    prefix = "/dev/nvidia-caps-imex-channels/"
    return [DeviceNode(d.path, d.host_path, d.major, d.minor, 0o666) for d in device_nodes
            if d.path.startswith(prefix) and d.host_path == host_path(dev_root, d.path)]


def added_char_devices(old: dict, new: dict, roots: tuple[str, ...]) -> list[DeviceNode]:
    """The char devices an OCI spec edit added (in `new`'s linux.devices, not in `old`'s),
    each looked up under the dev roots in turn and kept only when the node there is that
    very device: what the runtime links under /dev/char for the systemd cgroup driver."""
    def devices(spec: dict) -> list[dict]:
        linux = spec.get("linux")
        listed = linux.get("devices") if isinstance(linux, dict) else None
        return [d for d in listed if isinstance(d, dict)] if isinstance(listed, list) else []

    def key(d: dict) -> tuple:
        return d.get("path"), d.get("type"), d.get("major"), d.get("minor")

    before = {key(d) for d in devices(old)}
    nodes = []
    for d in devices(new):
        major, minor, path = d.get("major"), d.get("minor"), d.get("path")
        if d.get("type") != "c" or key(d) in before or not isinstance(path, str) \
                or not isinstance(major, int) or not isinstance(minor, int):
            continue
        for root in roots:
            host = host_path(root, path)
            try:
                st = os.stat(host)
            except OSError:
                continue
            if stat.S_ISCHR(st.st_mode) and st.st_rdev == os.makedev(major, minor):
                nodes.append(DeviceNode(path, host, major, minor))
                break
    return nodes


def _same_device(link: str, node: DeviceNode) -> bool:
    try:
        if os.readlink(link) == node.host_path:
            return True
    except OSError:
        return False
    try:
        st = os.stat(link)
    except OSError:
        return False
    return stat.S_ISCHR(st.st_mode) and st.st_rdev == os.makedev(node.major, node.minor)


def create_node(node: DeviceNode) -> bool:
    """mknod `node` (its mode exactly, whatever the umask) unless something exists at its
    path; True when made. Directories below the dev root are opened (and made, 0755) one
    component at a time without following symlinks. Raises OSError."""
    fd, name = _open_parent(node)
    try:
        return _mknod_at(fd, name, node)
    finally:
        os.close(fd)


def _open_parent(node: DeviceNode) -> tuple[int, str]:
    """(fd of the node's parent directory, made as needed without following symlinks, name)."""
    root = dev_root_of(node)
    parts = [p for p in node.path.split("/") if p]
    if not parts or ".." in parts:
        raise OSError(22, "invalid device node path", node.host_path)
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
    old = os.umask(0)  # modes exactly as planned (the umask would narrow mkdir's)
    try:
        try:
            fd = os.open(root, flags)
        except FileNotFoundError:  # the dev root itself is the admin's: made as given
            os.makedirs(root, 0o755, exist_ok=True)
            fd = os.open(root, flags)
        try:
            for part in parts[:-1]:
                try:
                    nfd = os.open(part, flags | os.O_NOFOLLOW, dir_fd=fd)
                except FileNotFoundError:
                    try:
                        os.mkdir(part, 0o755, dir_fd=fd)
                    except FileExistsError:
                        pass
                    nfd = os.open(part, flags | os.O_NOFOLLOW, dir_fd=fd)
                os.close(fd)
                fd = nfd
        except BaseException:
            os.close(fd)
            raise
    finally:
        os.umask(old)
    return fd, parts[-1]


def _mknod_at(fd: int, name: str, node: DeviceNode) -> bool:
    try:
        os.stat(name, dir_fd=fd, follow_symlinks=False)
        return False
    except FileNotFoundError:
        pass
    old = os.umask(0)
    try:
        os.mknod(name, stat.S_IFCHR | (node.mode & 0o7777), os.makedev(node.major, node.minor), dir_fd=fd)
    except FileExistsError:
        return False  # raced with udev (or anyone): theirs stands
    finally:
        os.umask(old)
    return True


class MadeNodes:
    """Device nodes made for one container's request (IMEX channels), to be removed when
    configuring that container fails. Each is kept as (parent directory fd, name, rdev):
    the hook enters the container's mount namespace before it knows whether it failed,
    and a host path would resolve there."""

    def __init__(self) -> None:
        self._dirs: dict[str, int] = {}
        self.made: list[tuple[int, str, int, str]] = []  # (dir fd, name, rdev, host path)

    def make(self, node: DeviceNode) -> bool:
        """create_node(), remembering what was made. Raises OSError."""
        parent = node.host_path.rsplit("/", 1)[0]
        fd = self._dirs.get(parent)
        if fd is None:
            fd, name = _open_parent(node)
            self._dirs[parent] = fd
        else:
            name = node.host_path.rsplit("/", 1)[1]
        if not _mknod_at(fd, name, node):
            return False
        self.made.append((fd, name, os.makedev(node.major, node.minor), node.host_path))
        return True

    def undo(self) -> list[str]:
        """Remove the nodes made (those still the very nodes we made); their paths."""
        gone = []
        for fd, name, rdev, path in self.made:
            try:
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                if stat.S_ISCHR(st.st_mode) and st.st_rdev == rdev:
                    os.unlink(name, dir_fd=fd)
                    gone.append(path)
            except OSError:
                pass
        self.made = []
        return gone

    def close(self) -> None:
        for fd in self._dirs.values():
            os.close(fd)
        self._dirs = {}


def run_modprobe(driver_root: str, module: str, timeout: float = MODPROBE_TIMEOUT) -> tuple[int, str]:
    """Run `[chroot ROOT] /sbin/modprobe MODULE` as fork + chroot + execve (no subprocess
    import on the hook path): empty environment, stdin/stdout /dev/null, stderr captured.
    Returns (exit status, last stderr line); a child past the deadline is killed and
    reported as status -9. Never raises for the child's failures."""
    from nct.sigreset import default_signals  # here: the child may chroot away from nct

    modprobe_argv(driver_root, module)  # refuses a non-NVIDIA module name
    null = os.open("/dev/null", os.O_RDWR | os.O_CLOEXEC)

    def body(w: int) -> int:  # exec or _exit, never return into the caller's code
        try:
            os.dup2(null, 0)
            os.dup2(null, 1)
            os.dup2(w, 2)
            if driver_root not in ("", "/"):
                try:
                    os.chroot(driver_root)
                except OSError as e:
                    os.write(2, f"chroot: {driver_root}: {e.strerror}\n".encode())
                    return 125
            os.chdir("/")
            default_signals()
            os.execve(MODPROBE, [MODPROBE, module], {})
        except OSError as e:
            os.write(2, f"{MODPROBE}: {e.strerror}\n".encode())
        return 127

    try:
        pid, r = child.fork(body, error_exit=127)
    finally:
        os.close(null)
    done = child.collect(pid, r, timeout, tail=4096)
    if done.timed_out:
        return -9, f"timed out after {timeout:g}s"
    status = os.waitstatus_to_exitcode(done.status)
    err = done.data
    lines = err.decode("utf-8", "replace").strip().splitlines()
    return status, lines[-1] if lines else ""


def load_modules(driver_root: str, dry_run: bool, log) -> None:
    """`nvidia-ctk system ... --load-kernel-modules`: modprobe every NVIDIA module, saying
    each command line to `log` (a callable taking a line); NodeError when one fails."""
    for module in MODULES:
        argv = modprobe_argv(driver_root, module)
        log("Running: " + " ".join(argv))
        if dry_run:
            continue
        try:
            status, detail = run_modprobe(driver_root, module)
        except OSError as e:
            raise NodeError(f"failed to load module {module}: {argv[0]}: {e.strerror or e}") from None
        if status != 0:
            detail = f": {detail}" if detail else ""
            raise NodeError(f"failed to load module {module}: {' '.join(argv)} exited {status}{detail}")


def make_device_nodes(nodes: list[DeviceNode], dry_run: bool, log) -> None:
    """mknod each missing node, saying each to `log`; an existing path is left alone."""
    for node in nodes:
        if os.path.lexists(node.host_path):
            log(f"Skipping: {node.host_path} already exists")
            continue
        log(f"Running: mknod --mode={node.mode:04o} {node.host_path} c {node.major} {node.minor}")
        if dry_run:
            continue
        try:
            if not create_node(node):
                log(f"Skipping: {node.host_path} already exists")
        except OSError as e:
            raise NodeError(f"failed to create device node {node.host_path}: {e.strerror or e}") from None


def _debug(msg: str, *args) -> None:
    if "logging" in sys.modules:
        import logging

        logging.getLogger("nct.nodeprep.devinit").debug(msg, *args)


def _warn(msg: str, *args) -> None:
    """A warning for the debug log, as upstream's init: only where a log was set up (never
    stderr noise in the hook, never an import of logging just to drop it)."""
    if "logging" in sys.modules:
        import logging

        logger = logging.getLogger("nct.nodeprep.devinit")
        if logger.hasHandlers():
            logger.warning(msg, *args)


def _read(path: str) -> str | None:
    try:
        with open(path, "rb") as f:
            return f.read(1 << 20).decode("utf-8", "replace")
    except OSError:
        return None


def init_driver(roots, *, imex_channels=(), create_imex_channels: bool = True,
                timeout: float = MODPROBE_TIMEOUT) -> InitReport:
    """libnvidia-container's --load-kmods init: unless in a user namespace (or on WSL),
    modprobe the NVIDIA modules /proc/modules lacks, then mknod the missing nodes (see
    init_plan; IMEX channel nodes for the requested ids unless create_imex_channels is
    off). Failures are warnings in the debug log: the discovery that follows reports a
    missing driver. `roots`: nct.driver.model.Roots (driver, dev, proc)."""
    uid_map = _read("/proc/self/uid_map")
    if uid_map is None or in_user_namespace(uid_map):
        _warn("skipping kernel modules load due to user namespace")
        return InitReport(skipped="user namespace")
    if os.path.lexists(host_path(roots.dev, "/dev/dxg")):
        _debug("skipping kernel modules load on WSL")
        return InitReport(skipped="WSL")
    modules_path = os.path.join(roots.proc, "modules")
    modules_text = _read(modules_path)
    loaded: tuple[str, ...] = ()
    failed: tuple[str, ...] = ()
    if modules_text is None:
        _debug("init: %s unreadable: not loading kernel modules", modules_path)
        have_modeset = True
    else:
        for module in modules_to_load(modules_text):
            _debug("loading kernel module %s", module)
            try:
                status, detail = run_modprobe(roots.driver, module, timeout)
            except OSError as e:
                status, detail = -1, e.strerror or str(e)
            if status == 0:
                loaded += (module,)
            else:
                failed += (module,)
                _warn("could not load kernel module %s: %s exited %d%s", module,
                      " ".join(modprobe_argv(roots.driver, module)), status, f": {detail}" if detail else "")
        if loaded:
            modules_text = _read(modules_path) or modules_text
        have_modeset = "nvidia_modeset" in loaded_modules(modules_text) or "nvidia-modeset" in loaded
    try:
        majors = read_majors(roots.proc)
    except NctError as e:
        _warn("init: %s", e)
        return InitReport(loaded=loaded, failed=failed)
    minors = read_gpu_minors(roots.proc) if gpu_major_of(majors) is not None else []
    caps = []
    for minor, path in (cap_files(roots.proc, minors) if CAPS_MAJOR in majors else []):
        # the mode matters only for a node to be made: read the capability file only then
        missing = not os.path.lexists(host_path(roots.dev, cap_path(minor)))
        caps.append((minor, cap_mode(path) if missing else 0o444))
    imex = imex_ids(imex_channels) if create_imex_channels else []
    created = []
    for node in missing_nodes(init_plan(roots.dev, majors, minors, modeset=have_modeset, caps=caps, imex=imex)):
        try:
            if create_node(node):
                created.append(node.host_path)
                _debug("created %s (%d:%d, mode %o)", node.host_path, node.major, node.minor, node.mode)
        except OSError as e:
            _warn("could not create device node %s: %s", node.host_path, e.strerror or e)
    return InitReport(loaded=loaded, failed=failed, created=tuple(created))
