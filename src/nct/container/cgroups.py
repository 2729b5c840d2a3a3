"""Device cgroup: let a container open the device nodes we give it.

cgroup v1: append "c MAJ:MIN rw" rules to the container's devices.allow.
cgroup v2: device access is decided by BPF_PROG_TYPE_CGROUP_DEVICE programs attached to the
container's cgroup (runc attaches one). We load, for each attached program, a new program
made of our allow rules followed by that program's own instructions (so its allows and denies
keep applying to everything else), attach it next to the old one and detach the old one.
"""

from __future__ import annotations

import os
import resource
import struct
import time

from nct.container import syscalls as sc
from nct.errors import ContainerError
from nct.record import Record

TYPE_CHECKING = False  # typing costs an import on the hook's path
if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Sequence


class DeviceRule(Record):
    """One allow rule: type "c"/"b", major, minor (-1 = any), access subset of "rwm"."""

    type: str
    major: int
    minor: int
    access: str = "rw"

    def v1(self) -> str:
        minor = "*" if self.minor < 0 else str(self.minor)
        return f"{self.type} {self.major}:{minor} {self.access}"


# ---- locating the container's cgroups ------------------------------------------------------
def _mounts(mountinfo: str) -> list[tuple[str, str, str, str]]:
    """(root, mount point, fstype, super options) of cgroup mounts in a mountinfo file."""
    out = []
    with open(mountinfo) as f:
        for line in f:
            left, _, right = line.partition(" - ")
            fields, rfields = left.split(), right.split()
            if len(fields) >= 5 and rfields and rfields[0] in ("cgroup", "cgroup2"):
                point = fields[4].replace("\\040", " ")
                out.append((fields[3], point, rfields[0], rfields[2] if len(rfields) > 2 else ""))
    return out


def _join(mount_root: str, point: str, cgpath: str) -> str | None:
    if mount_root != "/":
        if cgpath != mount_root and not cgpath.startswith(mount_root.rstrip("/") + "/"):
            return None
        cgpath = cgpath[len(mount_root):] or "/"
    return os.path.normpath(point + "/" + cgpath.lstrip("/"))


def find_device_cgroups(pid: int, proc_root: str = "/proc",
                        mountinfo: str = "/proc/self/mountinfo") -> tuple[str | None, str | None]:
    """(v1 devices cgroup dir, v2 cgroup dir) of process `pid`, as seen from this process."""
    try:
        with open(f"{proc_root}/{pid}/cgroup") as f:
            lines = f.read().splitlines()
    except OSError as e:
        raise ContainerError(f"{proc_root}/{pid}/cgroup: {e.strerror}") from None
    v1_path = v2_path = None
    for line in lines:
        hid, _, rest = line.partition(":")
        ctrls, _, path = rest.partition(":")
        if hid == "0" and ctrls == "":
            v2_path = path
        elif "devices" in ctrls.split(","):
            v1_path = path
    v1_dir = v2_dir = None
    for root, point, fstype, opts in _mounts(mountinfo):
        if fstype == "cgroup" and v1_path is not None and "devices" in opts.split(",") and v1_dir is None:
            v1_dir = _join(root, point, v1_path)
        elif fstype == "cgroup2" and v2_path is not None and v2_dir is None:
            v2_dir = _join(root, point, v2_path)
    return v1_dir, v2_dir


# ---- v1 -------------------------------------------------------------------------------------
def allow_v1(cgroup_dir: str, rules: list[DeviceRule]) -> None:
    path = os.path.join(cgroup_dir, "devices.allow")
    for rule in rules:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
            try:
                os.write(fd, rule.v1().encode())
            finally:
                os.close(fd)
        except OSError as e:
            raise ContainerError(f"{path}: cannot allow {rule.v1()}: {e.strerror}") from None


# ---- v2: BPF programs -----------------------------------------------------------------------
_BPF_DEVCG_DEV = {"b": 1, "c": 2}
_BPF_DEVCG_ACC = {"m": 1, "r": 2, "w": 4}


def _insn(code: int, dst: int = 0, src: int = 0, off: int = 0, imm: int = 0) -> bytes:
    return struct.pack("<BBhi", code, (src << 4) | dst, off, imm)


# opcodes
_LDX_W = 0x61  # r_dst = *(u32 *)(r_src + off)
_MOV64_REG, _MOV64_K = 0xBF, 0xB7
_AND64_K, _RSH64_K, _XOR64_K = 0x57, 0x77, 0xA7
_JNE_K = 0x55
_EXIT = 0x95


def rules_prologue(rules: list[DeviceRule]) -> bytes:
    """Instructions returning 1 (allow) for a device our rules allow; falls through otherwise.
    r1 (the context) is left intact for the instructions that follow.

    Each comparison is made on a scratch copy (r6 = field ^ value; r6 != 0: next rule), never
    on the field registers themselves: a direct `if r3 != X` would teach the verifier that
    r3 == X on one path, so every rule would reach the next with a different register state,
    no path could be pruned, and verification would grow with the square of the rules
    (1.4 s at 800 rules, rejected as too complex above ~1000). The XOR also unlinks r6 from
    the field (a plain copy would share its bounds). With identical states at each rule,
    verification is linear."""
    code = [
        _insn(_LDX_W, 2, 1, 0),       # r2 = ctx->access_type
        _insn(_MOV64_REG, 3, 2),      # r3 = r2
        _insn(_AND64_K, 3, imm=0xFFFF),  # r3 = device type
        _insn(_RSH64_K, 2, imm=16),   # r2 = access bits
        _insn(_LDX_W, 4, 1, 4),       # r4 = major
        _insn(_LDX_W, 5, 1, 8),       # r5 = minor
    ]
    for rule in rules:
        acc = 0
        for ch in rule.access:
            acc |= _BPF_DEVCG_ACC[ch]
        block: list[tuple[str, str | int]] = [("type", rule.type), ("major", rule.major)]
        if rule.minor >= 0:
            block.append(("minor", rule.minor))
        n = 3 * len(block) + 5  # (mov/xor/jne) per compare + mov/and/jne + mov/exit
        out: list[bytes] = []
        for what, value in block:
            reg = {"type": 3, "major": 4, "minor": 5}[what]
            imm = _BPF_DEVCG_DEV[str(value)] if what == "type" else int(value)
            out.append(_insn(_MOV64_REG, 6, reg))
            out.append(_insn(_XOR64_K, 6, imm=imm))
            out.append(_insn(_JNE_K, 6, off=n - len(out) - 1, imm=0))
        out.append(_insn(_MOV64_REG, 0, 2))
        out.append(_insn(_AND64_K, 0, imm=~acc & 0xFFFF))
        out.append(_insn(_JNE_K, 0, off=n - len(out) - 1, imm=0))
        out.append(_insn(_MOV64_K, 0, imm=1))
        out.append(_insn(_EXIT))
        code.extend(out)
    return b"".join(code)


def deny_all_program(allow: Sequence[DeviceRule] = ()) -> bytes:
    """A complete program: allow `allow`, deny everything else (what runc attaches, in tests)."""
    return rules_prologue(list(allow)) + _insn(_MOV64_K, 0, imm=0) + _insn(_EXIT)


def _raise_memlock() -> None:
    try:
        resource.setrlimit(resource.RLIMIT_MEMLOCK, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    except (ValueError, OSError):
        pass


def _open_cgroup(cgroup_dir: str) -> int:
    try:
        return os.open(cgroup_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as e:
        raise ContainerError(f"cgroup {cgroup_dir}: {e.strerror}") from None


def allow_v2(cgroup_dir: str, rules: list[DeviceRule]) -> int:
    """Add allow rules in front of every device program attached to `cgroup_dir`.
    Returns how many programs were replaced (0 = no program: nothing restricts devices)."""
    if not rules:
        return 0
    cg = _open_cgroup(cgroup_dir)
    try:
        flags, ids = sc.bpf_prog_query(cg, cgroup_dir)
        if not ids:
            return 0
        _raise_memlock()
        prologue = rules_prologue(rules)
        for prog_id in ids:
            old = sc.bpf_prog_get_fd_by_id(prog_id)
            try:
                new = sc.bpf_prog_load_device(prologue + sc.bpf_prog_xlated(old))
                try:
                    if flags & sc.BPF_F_ALLOW_MULTI:
                        # Attach next to the old one (both must allow: never wider), then drop it.
                        sc.bpf_prog_attach(cg, new, sc.BPF_F_ALLOW_MULTI, what=cgroup_dir)
                        sc.bpf_prog_detach(cg, old, what=cgroup_dir)
                    else:  # single-program cgroup: attaching with the same flags replaces it
                        sc.bpf_prog_attach(cg, new, flags, what=cgroup_dir)
                finally:
                    os.close(new)
            finally:
                os.close(old)
        return len(ids)
    finally:
        os.close(cg)


def allow_devices(pid: int, rules: list[DeviceRule], proc_root: str = "/proc") -> None:
    """Allow `rules` in the device cgroup(s) of process `pid` (v1 and/or v2)."""
    if not rules:
        return
    v1_dir, v2_dir = find_device_cgroups(pid, proc_root)
    if v1_dir is not None:
        # v1 devices controller present (v1 or hybrid host): it is what runtimes use. The
        # hybrid unified tree is shared with the host; its programs are not ours to replace.
        allow_v1(v1_dir, rules)
    elif v2_dir is not None and os.path.isdir(v2_dir):
        allow_v2(v2_dir, rules)
    else:
        raise ContainerError(f"no device cgroup found for pid {pid}")


# ---- a deny-all device cgroup for the processes we run against an image -------------------
# Which hierarchies JailSite.jail() tries, in order (tests pin one: 1 = v1 devices controller,
# 2 = a BPF program on the unified hierarchy).
JAIL_VERSIONS: tuple[int, ...] = (1, 2)
JAIL_STALE_S = 300


class DeviceJail:
    """A fresh child of our own device cgroup in which no device may be opened (v1: `a` in
    devices.deny; v2: a deny-all BPF device program). ldconfig runs in it, so that a device
    node planted in the image is refused by the kernel even if a mount still allowed it.
    Made through directory fds (JailSite, opened on the host side: the container's mount
    namespace may not show our cgroup): `enter()` moves the calling process in, `close()`
    removes the cgroup."""

    def __init__(self, parent_fd: int = -1, name: str = "", procs_fd: int = -1, version: int = 0,
                 problem: str = "") -> None:
        self.parent_fd, self.name, self.procs_fd, self.version = parent_fd, name, procs_fd, version
        self.problem = problem  # why there is no jail (empty when there is one)

    def enter(self) -> None:
        """Move the calling process (and so everything it forks) into the jail."""
        if self.procs_fd >= 0:
            os.write(self.procs_fd, b"0")

    def close(self, remove: bool = True) -> None:
        """Close it; `remove` False: leave the cgroup to the process that removes it once its
        last member is gone (ldconfig's remover)."""
        if self.procs_fd >= 0:
            os.close(self.procs_fd)
            self.procs_fd = -1
        if self.parent_fd >= 0 and remove:
            for _ in range(100):  # the killed PID namespace may take a moment to leave it
                try:
                    os.rmdir(self.name, dir_fd=self.parent_fd)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.01)
        self.parent_fd = -1  # the JailSite's fd: closed with the site


class JailSite:
    """Where jails are made: an fd of our own cgroup directory per hierarchy (v1 devices,
    v2), in JAIL_VERSIONS order. Cheap (no cgroup is created until `jail()`); open it on the
    host side, before entering a container's mount namespace."""

    def __init__(self) -> None:
        self.dirs: list[tuple[int, int, str]] = []  # (version, fd, path)
        self.problems: list[str] = []
        for version in JAIL_VERSIONS:
            try:
                base = _own_cgroup_dir(version)
            except (ContainerError, OSError) as e:
                self.problems.append(str(e))
                continue
            if base is None:
                self.problems.append(f"no cgroup v{version} {'devices controller' if version == 1 else 'hierarchy'}")
                continue
            try:
                self.dirs.append((version, os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC), base))
            except OSError as e:
                self.problems.append(f"cgroup v{version} {base}: {e.strerror}")

    def jail(self) -> DeviceJail:
        """A new deny-all device cgroup; one whose `problem` says why none could be made (no
        writable cgroup: a nested container, a cgroup namespace): callers report it and rely
        on their nodev mounts."""
        problems = list(self.problems)
        for version, parent, base in self.dirs:
            name = f"nct-ldconfig-{os.urandom(8).hex()}"
            jail = DeviceJail(parent, name, -1, version)
            try:
                _sweep(parent)
                os.mkdir(name, 0o700, dir_fd=parent)
                cg = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=parent)
                try:
                    if version == 1:
                        fd = os.open("devices.deny", os.O_WRONLY | os.O_CLOEXEC, dir_fd=cg)
                        try:
                            os.write(fd, b"a")
                        finally:
                            os.close(fd)
                    else:
                        _attach_fd(cg, deny_all_program(), f"{base}/{name}")
                    jail.procs_fd = os.open("cgroup.procs", os.O_WRONLY | os.O_CLOEXEC, dir_fd=cg)
                finally:
                    os.close(cg)
                return jail
            except (OSError, ContainerError) as e:
                problems.append(f"cgroup v{version} {base}/{name}: {getattr(e, 'strerror', None) or e}")
                jail.close()
        return DeviceJail(problem="; ".join(problems) or "no cgroup hierarchy")

    def close(self) -> None:
        for _, fd, _ in self.dirs:
            os.close(fd)
        self.dirs = []


def _attach_fd(cgroup_fd: int, insns: bytes, what: str) -> None:
    _raise_memlock()
    prog = sc.bpf_prog_load_device(insns)
    try:
        sc.bpf_prog_attach(cgroup_fd, prog, sc.BPF_F_ALLOW_MULTI, what=what)
    finally:
        os.close(prog)


def _sweep(parent: int) -> None:
    """Remove jails left by a process that died before closing its own (a killed hook):
    any older than a jail can live (ldconfig's timeout and then some). rmdir only removes an
    empty cgroup."""
    now = time.time()
    for entry in os.listdir(parent):
        if not entry.startswith("nct-ldconfig-"):
            continue
        try:
            if now - os.stat(entry, dir_fd=parent, follow_symlinks=False).st_mtime > JAIL_STALE_S:
                os.rmdir(entry, dir_fd=parent)
        except OSError:
            pass


def _own_cgroup_dir(version: int) -> str | None:
    v1_dir, v2_dir = find_device_cgroups(os.getpid())
    return v1_dir if version == 1 else v2_dir
