"""Thin ctypes wrappers for the syscalls Python's os module lacks (3.11): mount API (old and
new), namespaces, openat2, pivot_root and bpf. The only module of nct that mounts or loads BPF.

Every failure raises ContainerError naming the path (or object) at fault, never OSError.
"""

from __future__ import annotations

import ctypes
import errno as _errno
import os

import struct

from nct.errors import ContainerError

_libc = ctypes.CDLL(None, use_errno=True)
_syscall = _libc.syscall
_syscall.restype = ctypes.c_long

# Syscall numbers. The new (>= 424) ones are the same on every architecture.
_ARCH = os.uname().machine
_NR_LEGACY = {
    "x86_64": {"pivot_root": 155, "bpf": 321, "setns": 308, "unshare": 272},
    "aarch64": {"pivot_root": 41, "bpf": 280, "setns": 268, "unshare": 97},
}.get(_ARCH, {})
NR_OPEN_TREE, NR_MOVE_MOUNT, NR_FSOPEN, NR_FSCONFIG, NR_FSMOUNT = 428, 429, 430, 431, 432
NR_CLOSE_RANGE, NR_OPENAT2, NR_MOUNT_SETATTR = 436, 437, 442

# mount(2) flags
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC = 32, 4096, 16384
MS_NOSYMFOLLOW = 256
MS_PRIVATE = 1 << 18
MNT_DETACH = 2
UMOUNT_NOFOLLOW = 8

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS, CLONE_NEWIPC, CLONE_NEWPID, CLONE_NEWNET = 0x04000000, 0x08000000, 0x20000000, 0x40000000

# openat2 resolve flags
RESOLVE_NO_MAGICLINKS, RESOLVE_IN_ROOT = 0x02, 0x10

# new mount API
AT_EMPTY_PATH, AT_RECURSIVE = 0x1000, 0x8000
OPEN_TREE_CLONE, OPEN_TREE_CLOEXEC = 1, os.O_CLOEXEC
MOVE_MOUNT_F_EMPTY_PATH, MOVE_MOUNT_T_EMPTY_PATH = 0x04, 0x40
MOUNT_ATTR_RDONLY, MOUNT_ATTR_NOSUID, MOUNT_ATTR_NODEV, MOUNT_ATTR_NOEXEC = 1, 2, 4, 8
MOUNT_ATTR_NOSYMFOLLOW = 0x00200000
FSOPEN_CLOEXEC, FSMOUNT_CLOEXEC = 1, 1
FSCONFIG_SET_STRING, FSCONFIG_CMD_CREATE = 1, 6

# Mount option words (OCI/CDI spelling) -> MOUNT_ATTR_* bits.
OPTION_ATTRS = {
    "ro": MOUNT_ATTR_RDONLY, "nosuid": MOUNT_ATTR_NOSUID, "nodev": MOUNT_ATTR_NODEV,
    "noexec": MOUNT_ATTR_NOEXEC, "nosymfollow": MOUNT_ATTR_NOSYMFOLLOW,
}


def _fail(what: str, err: int) -> ContainerError:
    return ContainerError(f"{what}: {os.strerror(err)}")


def _check(ret: int, what: str) -> int:
    if ret < 0:
        raise _fail(what, ctypes.get_errno())
    return ret


def _b(s: str | None) -> bytes | None:
    return None if s is None else os.fsencode(s)


class SyscallError(ContainerError):
    """A ContainerError that keeps the errno, for callers that branch on it."""

    def __init__(self, message: str, err: int):
        super().__init__(message)
        self.errno = err


def _raise(what: str) -> None:
    err = ctypes.get_errno()
    raise SyscallError(f"{what}: {os.strerror(err)}", err)


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None, *,
          what: str | None = None) -> None:
    """mount(2); `what` names the target in errors (when `target` is an fd magic link)."""
    if _libc.mount(_b(source), _b(target), _b(fstype), ctypes.c_ulong(flags), _b(data)) != 0:
        _raise(f"mount {what or target}")


def umount2(target: str, flags: int = 0) -> None:
    if _libc.umount2(_b(target), flags) != 0:
        _raise(f"umount {target}")


def setns(fd: int, nstype: int, what: str = "namespace") -> None:
    if _libc.setns(fd, nstype) != 0:
        _raise(f"setns {what}")


def unshare(flags: int) -> None:
    if _libc.unshare(flags) != 0:
        _raise("unshare")


def pivot_root(new_root: str, put_old: str) -> None:
    nr = _NR_LEGACY.get("pivot_root")
    if nr is None:
        raise SyscallError(f"pivot_root: unsupported architecture {_ARCH}", _errno.ENOSYS)
    if _syscall(ctypes.c_long(nr), _b(new_root), _b(put_old)) != 0:
        _raise(f"pivot_root {new_root}")


def openat2(dirfd: int, path: str, flags: int, resolve: int, mode: int = 0) -> int:
    """openat2(2); raises SyscallError (errno kept: ENOSYS means fall back)."""
    how = struct.pack("QQQ", flags, mode, resolve)
    ret = _syscall(ctypes.c_long(NR_OPENAT2), ctypes.c_int(dirfd), _b(path), how, ctypes.c_size_t(len(how)))
    if ret < 0:
        _raise(f"open {path}")
    return ret


def open_tree(dirfd: int, path: str, flags: int) -> int:
    ret = _syscall(ctypes.c_long(NR_OPEN_TREE), ctypes.c_int(dirfd), _b(path), ctypes.c_uint(flags))
    if ret < 0:
        _raise(f"open_tree {path}")
    return ret


def move_mount(from_fd: int, from_path: str, to_fd: int, to_path: str, flags: int, what: str) -> None:
    ret = _syscall(ctypes.c_long(NR_MOVE_MOUNT), ctypes.c_int(from_fd), _b(from_path),
                   ctypes.c_int(to_fd), _b(to_path), ctypes.c_uint(flags))
    if ret < 0:
        _raise(f"mount {what}")


def mount_setattr(fd: int, attr_set: int, attr_clr: int = 0, *, recursive: bool = False,
                  propagation: int = 0, what: str = "mount") -> None:
    attr = struct.pack("QQQQ", attr_set, attr_clr, propagation, 0)
    flags = AT_EMPTY_PATH | (AT_RECURSIVE if recursive else 0)
    ret = _syscall(ctypes.c_long(NR_MOUNT_SETATTR), ctypes.c_int(fd), b"", ctypes.c_uint(flags),
                   attr, ctypes.c_size_t(len(attr)))
    if ret < 0:
        _raise(f"set mount options on {what}")


_NEW_MOUNT_API: bool | None = None


def new_mount_api() -> bool:
    """Whether the kernel has the mount API the applier prefers: open_tree/move_mount/fsmount
    (Linux 5.2) and mount_setattr (5.12). Probed once per process with harmless calls (an
    O_PATH open of "/", an attribute change on fd -1); False means use mount(2) (see
    nct.container.apply: older kernels such as RHEL 8's 4.18)."""
    global _NEW_MOUNT_API
    if _NEW_MOUNT_API is None:
        fd = _syscall(ctypes.c_long(NR_OPEN_TREE), ctypes.c_int(-100), b"/", ctypes.c_uint(OPEN_TREE_CLOEXEC))
        ok = fd >= 0 or ctypes.get_errno() != _errno.ENOSYS
        if fd >= 0:
            os.close(fd)
        if ok:
            attr = struct.pack("QQQQ", 0, 0, 0, 0)
            ret = _syscall(ctypes.c_long(NR_MOUNT_SETATTR), ctypes.c_int(-1), b"", ctypes.c_uint(AT_EMPTY_PATH),
                           attr, ctypes.c_size_t(len(attr)))
            ok = ret >= 0 or ctypes.get_errno() != _errno.ENOSYS
        _NEW_MOUNT_API = ok
    return _NEW_MOUNT_API


def fd_path(fd: int) -> str:
    """The magic link naming an open fd, for mount(2), which takes paths only: the kernel
    follows it to exactly that file, never re-resolving a name (as runc mounts)."""
    return f"/proc/self/fd/{fd}"


def ms_flags(attrs: int) -> int:
    """MOUNT_ATTR_* bits -> MS_* flags (the same bits, except nosymfollow)."""
    flags = attrs & (MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC)
    return flags | (MS_NOSYMFOLLOW if attrs & MOUNT_ATTR_NOSYMFOLLOW else 0)


def fsmount_tmpfs(options: dict[str, str], attrs: int, what: str) -> int:
    """A detached tmpfs mount (fsopen/fsconfig/fsmount); returns its mount fd."""
    fsfd = _syscall(ctypes.c_long(NR_FSOPEN), b"tmpfs", ctypes.c_uint(FSOPEN_CLOEXEC))
    if fsfd < 0:
        _raise(f"tmpfs for {what}")
    try:
        for key, value in options.items():
            if _syscall(ctypes.c_long(NR_FSCONFIG), ctypes.c_int(fsfd), ctypes.c_uint(FSCONFIG_SET_STRING),
                        _b(key), _b(value), ctypes.c_int(0)) < 0:
                _raise(f"tmpfs option {key}={value} for {what}")
        if _syscall(ctypes.c_long(NR_FSCONFIG), ctypes.c_int(fsfd), ctypes.c_uint(FSCONFIG_CMD_CREATE),
                    None, None, ctypes.c_int(0)) < 0:
            _raise(f"tmpfs for {what}")
        mfd = _syscall(ctypes.c_long(NR_FSMOUNT), ctypes.c_int(fsfd), ctypes.c_uint(FSMOUNT_CLOEXEC),
                       ctypes.c_uint(attrs))
        if mfd < 0:
            _raise(f"tmpfs for {what}")
        return mfd
    finally:
        os.close(fsfd)


PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_NAME, PR_SET_NO_NEW_PRIVS = 1, 4, 15, 38
PR_CAPBSET_READ, PR_CAPBSET_DROP = 23, 24
CAP_CHOWN, CAP_DAC_OVERRIDE, CAP_FOWNER = 0, 1, 3
_LINUX_CAPABILITY_VERSION_3 = 0x20080522


def prctl(option: int, arg: int | bytes = 0) -> None:
    if _libc.prctl(option, arg, 0, 0, 0) != 0:
        _raise(f"prctl {option}")


# --- seccomp ------------------------------------------------------------------------------
# Syscalls a process that only reads files and writes a cache never needs, by architecture
# (AUDIT_ARCH value, numbers): sockets, other processes (fork/clone, ptrace,
# process_vm_*), namespaces and mounts (old and new API), handles, kernel modules and kexec,
# keys, BPF/perf/io_uring/userfaultfd, and host-wide state (clock, swap, reboot, acct).
_SECCOMP_DENY = {
    "x86_64": (0xC000003E, (
        41, 53, 56, 57, 58, 435, 101, 310, 311, 165, 166, 155, 161, 272, 308, 428, 429, 430, 431, 432, 433, 442,
        303, 304, 175, 313, 176, 246, 320, 248, 249, 250, 321, 298, 425, 426, 427, 323, 172, 173, 167, 168,
        169, 164, 227, 163, 179, 300)),
    "aarch64": (0xC00000B7, (
        198, 199, 220, 435, 117, 270, 271, 40, 39, 41, 51, 97, 268, 428, 429, 430, 431, 432, 433, 442, 264,
        265, 105, 273, 106, 104, 294, 217, 218, 219, 280, 241, 425, 426, 427, 282, 224, 225, 142, 170, 112,
        89, 60, 262)),
}
PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 22, 2
_RET_ALLOW, _RET_KILL_PROCESS = 0x7FFF0000, 0x80000000
_RET_EPERM = 0x00050000 | _errno.EPERM
_X32_BIT = 0x40000000


def seccomp_deny_filter(arch: str = _ARCH) -> bytes | None:
    """A classic-BPF seccomp program: EPERM for the _SECCOMP_DENY syscalls of `arch` (and
    every x32 syscall on x86_64), the process killed when called through another ABI
    (i386 numbers on x86_64), everything else allowed. None on an architecture without a
    table."""
    table = _SECCOMP_DENY.get(arch)
    if table is None:
        return None
    audit_arch, nrs = table

    def insn(code: int, jt: int, jf: int, k: int) -> bytes:
        return struct.pack("<HBBI", code, jt, jf, k)

    ld_w_abs, jeq_k, jge_k, ret_k = 0x20, 0x15, 0x35, 0x06
    prog = [insn(ld_w_abs, 0, 0, 4),                  # seccomp_data.arch
            insn(jeq_k, 1, 0, audit_arch),
            insn(ret_k, 0, 0, _RET_KILL_PROCESS),
            insn(ld_w_abs, 0, 0, 0)]                  # seccomp_data.nr
    deny_at = 4 + (1 if arch == "x86_64" else 0) + len(nrs) + 1  # index of "return EPERM"
    if arch == "x86_64":
        prog.append(insn(jge_k, deny_at - len(prog) - 1, 0, _X32_BIT))
    for nr in nrs:
        prog.append(insn(jeq_k, deny_at - len(prog) - 1, 0, nr))
    prog.append(insn(ret_k, 0, 0, _RET_ALLOW))
    prog.append(insn(ret_k, 0, 0, _RET_EPERM))
    assert len(prog) == deny_at + 1
    return b"".join(prog)


def seccomp_deny(arch: str = _ARCH) -> bool:
    """Install seccomp_deny_filter() on the calling thread (inherited by execve and
    children; needs no-new-privileges or CAP_SYS_ADMIN). False when `arch` has no table."""
    prog = seccomp_deny_filter(arch)
    if prog is None:
        return False
    buf = ctypes.create_string_buffer(prog, len(prog))

    class _Fprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    fprog = _Fprog(len(prog) // 8, ctypes.addressof(buf))
    if _libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
        _raise("install seccomp filter")
    return True


def cap_last_cap() -> int:
    """The highest capability number the running kernel knows (what
    /proc/sys/kernel/cap_last_cap says), probed with PR_CAPBSET_READ: no path look-up."""
    cap = 0
    while cap < 63 and _libc.prctl(PR_CAPBSET_READ, cap + 1, 0, 0, 0) >= 0:
        cap += 1
    return cap


def limit_caps(keep: tuple[int, ...] | list[int], last_cap: int) -> None:
    """Drop every capability but `keep` from the bounding set (0..last_cap), then set the
    effective, permitted and inheritable sets to exactly `keep` (capset, version 3). A uid-0
    execve afterwards gets `keep` and nothing else. Needs CAP_SETPCAP until the bounding set
    is done; acts on the calling thread only."""
    for cap in range(last_cap + 1):
        if cap not in keep and _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            _raise(f"drop capability {cap} from the bounding set")
    mask = 0
    for cap in keep:
        mask |= 1 << cap
    header = ctypes.create_string_buffer(struct.pack("Ii", _LINUX_CAPABILITY_VERSION_3, 0), 8)
    lo, hi = mask & 0xFFFFFFFF, mask >> 32
    data = ctypes.create_string_buffer(struct.pack("IIIIII", lo, lo, lo, hi, hi, hi), 24)
    if _libc.capset(header, data) != 0:
        _raise("capset")


def ensure_nofile(need: int, what: str) -> None:
    """Raise RLIMIT_NOFILE so that `need` fds fit: the soft limit up to the hard one, and the
    hard one too (CAP_SYS_RESOURCE, up to fs.nr_open) when it is lower. The worker holds one
    detached mount per source until it has entered the container, so a plan's size, not a
    fixed number, decides how many it needs."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or need <= soft:
        return
    new_hard = hard if hard == resource.RLIM_INFINITY or hard >= need else need
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (need, new_hard))
    except (OSError, ValueError) as e:
        raise ContainerError(f"{what} needs {need} open files; the limit is {soft} (hard {hard}) and cannot be "
                             f"raised ({getattr(e, 'strerror', None) or e}): raise LimitNOFILE of the "
                             "container engine") from None


def close_fds_except(keep: set[int] | frozenset[int]) -> None:
    """Close every fd from 3 up except `keep`: a forked child must not carry its parent's fds
    into a process with a low RLIMIT_NOFILE. close_range(2) (Linux >= 5.9), else the fds
    listed in /proc/self/fd (so call it before leaving the host's /proc)."""
    ranges, lo = [], 3
    for fd in sorted(f for f in keep if f >= 3):
        if fd > lo:
            ranges.append((lo, fd - 1))
        lo = fd + 1
    ranges.append((lo, 0xFFFFFFFF))
    for first, last in ranges:
        if _syscall(NR_CLOSE_RANGE, ctypes.c_uint(first), ctypes.c_uint(last), ctypes.c_uint(0)) != 0:
            break
    else:
        return
    for name in os.listdir("/proc/self/fd"):  # the listing's own fd is gone by now: EBADF
        fd = int(name)
        if fd >= 3 and fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass


def attrs_from_options(options: tuple[str, ...] | list[str]) -> int:
    """MOUNT_ATTR_* bits for the per-mount flags among OCI mount options."""
    bits = 0
    for opt in options:
        bits |= OPTION_ATTRS.get(opt, 0)
    return bits


# ---- bpf ---------------------------------------------------------------------------------
BPF_PROG_LOAD, BPF_PROG_ATTACH, BPF_PROG_DETACH = 5, 8, 9
BPF_PROG_GET_FD_BY_ID, BPF_OBJ_GET_INFO_BY_FD, BPF_PROG_QUERY = 13, 15, 16
BPF_PROG_TYPE_CGROUP_DEVICE = 15
BPF_CGROUP_DEVICE = 6
BPF_F_ALLOW_OVERRIDE, BPF_F_ALLOW_MULTI = 1, 2
_ATTR_SIZE = 144


def _bpf(cmd: int, attr: ctypes.Array, what: str) -> int:
    nr = _NR_LEGACY.get("bpf")
    if nr is None:
        raise SyscallError(f"bpf: unsupported architecture {_ARCH}", _errno.ENOSYS)
    ret = _syscall(ctypes.c_long(nr), ctypes.c_int(cmd), attr, ctypes.c_uint(len(attr)))
    if ret < 0:
        _raise(what)
    return ret


def bpf_prog_load_device(insns: bytes, license: bytes = b"Apache") -> int:
    """Load a BPF_PROG_TYPE_CGROUP_DEVICE program; returns its fd. Verifier log in the error.

    Loaded without a verifier log: since Linux 6.4 a log that overflows its buffer turns a
    successful load into ENOSPC (large rule sets). Only a failed load is retried with the log,
    to put the verifier's reason in the error (the errno stays the one of the log-less load)."""
    code = ctypes.create_string_buffer(insns, len(insns))
    lic = ctypes.create_string_buffer(license)

    def load(log: ctypes.Array | None) -> int:
        attr = ctypes.create_string_buffer(_ATTR_SIZE)
        struct.pack_into("IIQQIIQ", attr, 0, BPF_PROG_TYPE_CGROUP_DEVICE, len(insns) // 8,
                         ctypes.addressof(code), ctypes.addressof(lic), 1 if log is not None else 0,
                         len(log) if log is not None else 0, ctypes.addressof(log) if log is not None else 0)
        struct.pack_into("16s", attr, 48, b"nct_devices")
        return _bpf(BPF_PROG_LOAD, attr, "load device cgroup program")

    try:
        return load(None)
    except SyscallError as e:
        first = e
    log = ctypes.create_string_buffer(65536)
    try:
        return load(log)
    except SyscallError:
        pass
    # The last line is the verifier's statistics ("processed N insns ..."): show the reason.
    detail = [line for line in log.value.decode(errors="replace").strip().splitlines()
              if line.strip() and not line.startswith("processed ")]
    if detail:
        raise SyscallError(f"{first}: {detail[-1]}", first.errno) from None
    raise first


def bpf_prog_attach(cgroup_fd: int, prog_fd: int, flags: int, replace_fd: int = 0, what: str = "") -> None:
    attr = ctypes.create_string_buffer(_ATTR_SIZE)
    struct.pack_into("IIIII", attr, 0, cgroup_fd, prog_fd, BPF_CGROUP_DEVICE, flags, replace_fd)
    _bpf(BPF_PROG_ATTACH, attr, f"attach device program to {what}")


def bpf_prog_detach(cgroup_fd: int, prog_fd: int, what: str = "") -> None:
    attr = ctypes.create_string_buffer(_ATTR_SIZE)
    struct.pack_into("III", attr, 0, cgroup_fd, prog_fd, BPF_CGROUP_DEVICE)
    _bpf(BPF_PROG_DETACH, attr, f"detach device program from {what}")


def bpf_prog_query(cgroup_fd: int, what: str = "") -> tuple[int, list[int]]:
    """(attach_flags, program ids) of device programs attached directly to a cgroup."""
    ids = (ctypes.c_uint32 * 64)()
    attr = ctypes.create_string_buffer(_ATTR_SIZE)
    struct.pack_into("IIIIQI", attr, 0, cgroup_fd, BPF_CGROUP_DEVICE, 0, 0, ctypes.addressof(ids), 64)
    _bpf(BPF_PROG_QUERY, attr, f"query device programs of {what}")
    flags = struct.unpack_from("I", attr, 12)[0]
    count = struct.unpack_from("I", attr, 24)[0]
    return flags, list(ids[: min(count, 64)])


def bpf_prog_get_fd_by_id(prog_id: int) -> int:
    attr = ctypes.create_string_buffer(_ATTR_SIZE)
    struct.pack_into("I", attr, 0, prog_id)
    return _bpf(BPF_PROG_GET_FD_BY_ID, attr, f"open bpf program {prog_id}")


def bpf_prog_xlated(prog_fd: int) -> bytes:
    """The (verifier-translated) instructions of a loaded program."""
    info = ctypes.create_string_buffer(256)
    attr = ctypes.create_string_buffer(_ATTR_SIZE)
    struct.pack_into("IIQ", attr, 0, prog_fd, len(info), ctypes.addressof(info))
    _bpf(BPF_OBJ_GET_INFO_BY_FD, attr, "read bpf program info")
    size = struct.unpack_from("I", info, 20)[0]
    buf = ctypes.create_string_buffer(size)
    info = ctypes.create_string_buffer(256)
    struct.pack_into("I", info, 20, size)
    struct.pack_into("Q", info, 32, ctypes.addressof(buf))
    struct.pack_into("IIQ", attr, 0, prog_fd, len(info), ctypes.addressof(info))
    _bpf(BPF_OBJ_GET_INFO_BY_FD, attr, "read bpf program instructions")
    return buf.raw[:size]
