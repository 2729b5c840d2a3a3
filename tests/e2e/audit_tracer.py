"""Trace a command and every process it starts (python-ptrace), recording each syscall that
could change the filesystem: open-for-write, creat, mkdir, mknod, symlink, link, rename,
unlink, rmdir, chmod, chown, truncate, mount, move_mount.

Usage: audit_tracer.py OUT.json ROOTFS -- CMD ARGS...   (stdin/stdout/stderr are CMD's)

For each event: the syscall, the path argument, what the directory fd (or the fd itself)
points at (readlink of /proc/PID/fd/N), whether the process's root at that moment is the
container root (same device and inode as ROOTFS: such a process cannot name a host path),
and the process's executable."""

from __future__ import annotations

import json
import os
import signal
import sys

from ptrace.debugger import NewProcessEvent, ProcessExecution, ProcessExit, ProcessSignal, PtraceDebugger
from ptrace.debugger.child import createChild

AT_FDCWD = -100
O_WRITE = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC
# x86_64 numbers -> (name, kind, index of dirfd arg or None, index of path arg or None)
SYSCALLS = {
    2: ("open", "open", None, 0), 257: ("openat", "open", 0, 1), 437: ("openat2", "openat2", 0, 1),
    85: ("creat", "path", None, 0), 83: ("mkdir", "path", None, 0), 258: ("mkdirat", "path", 0, 1),
    133: ("mknod", "path", None, 0), 259: ("mknodat", "path", 0, 1),
    88: ("symlink", "path", None, 1), 266: ("symlinkat", "path", 1, 2),
    86: ("link", "path", None, 1), 265: ("linkat", "path", 2, 3),
    82: ("rename", "rename", None, 0), 264: ("renameat", "renameat", 0, 1), 316: ("renameat2", "renameat", 0, 1),
    87: ("unlink", "path", None, 0), 263: ("unlinkat", "path", 0, 1), 84: ("rmdir", "path", None, 0),
    90: ("chmod", "path", None, 0), 91: ("fchmod", "fd", 0, None), 268: ("fchmodat", "path", 0, 1),
    92: ("chown", "path", None, 0), 93: ("fchown", "fd", 0, None), 94: ("lchown", "path", None, 0),
    260: ("fchownat", "path", 0, 1), 76: ("truncate", "path", None, 0),
    165: ("mount", "path", None, 1), 429: ("move_mount", "path", 2, 3),
}
ARG_REGS = ("rdi", "rsi", "rdx", "r10", "r8", "r9")


ENOSYS_RAX = (1 << 64) - 38  # rax holds -ENOSYS at a syscall-entry stop (x86_64)


def _fd(v: int) -> int:
    """A 32-bit fd argument from a 64-bit register (AT_FDCWD is negative)."""
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v >= 1 << 31 else v


def _str(proc, addr: int, limit: int = 4096) -> str | None:
    """A NUL-terminated string of the tracee, read one aligned word at a time (a string that
    ends just before an unmapped page must not make us read into it)."""
    if not addr:
        return None
    out = bytearray()
    word = addr & ~7
    skip = addr - word
    while len(out) < limit:
        chunk = proc.readWord(word).to_bytes(8, "little")[skip:]
        skip = 0
        nul = chunk.find(b"\0")
        if nul >= 0:
            out += chunk[:nul]
            break
        out += chunk
        word += 8
    return out.decode(errors="replace")


def _fdlink(pid: int, fd: int) -> str | None:
    if fd == AT_FDCWD:
        where = f"/proc/{pid}/cwd"
    else:
        where = f"/proc/{pid}/fd/{fd}"
    try:
        return os.readlink(where)
    except OSError:
        return None


def _magic(pid: int, path: str | None) -> str | None:
    """A /proc/self/fd/N[/rest] (or thread-self) path names exactly what the tracee's fd N is:
    the kernel follows that link, so record where it points (as the tracee sees it)."""
    if path is None:
        return None
    for prefix in ("/proc/self/fd/", "/proc/thread-self/fd/"):
        num, slash, rest = path[len(prefix):].partition("/")
        if path.startswith(prefix) and num.isdigit():
            where = _fdlink(pid, int(num))
            return path if where is None else where.rstrip("/") + slash + rest
    return path


def _detached(pid: int, fd: int) -> bool:
    """Whether fd is on a mount attached nowhere in the process's namespace (a new tmpfs
    from fsmount, a tree from open_tree before move_mount): writes there touch no path."""
    if fd < 0:
        return False
    try:
        with open(f"/proc/{pid}/fdinfo/{fd}") as f:
            mnt = next((l.split()[1] for l in f if l.startswith("mnt_id:")), None)
        with open(f"/proc/{pid}/mountinfo") as f:
            ids = {l.split()[0] for l in f}
    except OSError:
        return False
    return mnt is not None and mnt not in ids


def _confined(pid: int, root_id: tuple[int, int]) -> bool:
    try:
        st = os.stat(f"/proc/{pid}/root")
    except OSError:
        return False
    return (st.st_dev, st.st_ino) == root_id


def record(proc, root_id, events: list) -> None:
    regs = proc.getregs()
    nr = regs.orig_rax
    spec = SYSCALLS.get(nr)
    if spec is None:
        return
    name, kind, dirfd_i, path_i = spec
    args = [getattr(regs, r) for r in ARG_REGS]
    if kind == "open":
        flags = args[2] if name == "openat" else args[1]
        if not flags & O_WRITE:
            return
    elif kind == "openat2":
        how = proc.readBytes(args[2], 8)
        if not int.from_bytes(how, "little") & O_WRITE:
            return
    ev = {"pid": proc.pid, "syscall": name}
    if kind == "fd":
        ev["fd"] = _fdlink(proc.pid, _fd(args[0]))
    else:
        if path_i is not None:
            ev["path"] = _magic(proc.pid, _str(proc, args[path_i]))
        if dirfd_i is not None:
            ev["dirfd"] = _fdlink(proc.pid, _fd(args[dirfd_i]))
            ev["detached"] = _detached(proc.pid, _fd(args[dirfd_i]))
        elif ev.get("path") is not None and not ev["path"].startswith("/"):
            ev["dirfd"] = _fdlink(proc.pid, AT_FDCWD)
    if name == "mount":
        ev["flags"] = args[3]
        ev["source"] = _magic(proc.pid, _str(proc, args[0]))
        try:
            ev["own_ns"] = os.readlink(f"/proc/{proc.pid}/ns/mnt") != os.readlink("/proc/self/ns/mnt")
        except OSError:
            ev["own_ns"] = False
    if kind in ("rename", "renameat"):  # the destination too
        di, pi = (None, 1) if kind == "rename" else (2, 3)
        ev["path2"] = _str(proc, args[pi])
        ev["dirfd2"] = _fdlink(proc.pid, _fd(args[di])) if di is not None else ev.get("dirfd")
    ev["confined"] = _confined(proc.pid, root_id)
    try:
        ev["exe"] = os.readlink(f"/proc/{proc.pid}/exe")
    except OSError:
        ev["exe"] = None
    events.append(ev)


def trace(argv: list[str], rootfs: str) -> tuple[int, list[dict], int]:
    st = os.stat(rootfs)
    root_id = (st.st_dev, st.st_ino)
    dbg = PtraceDebugger()
    dbg.traceFork()
    dbg.traceExec()
    dbg.traceClone()
    child = createChild(argv, no_stdout=False, close_fds=False)
    first = dbg.addProcess(child, is_attached=True)
    first.syscall()
    events: list[dict] = []
    processes = 1
    rc = -1
    while dbg:
        try:
            ev = dbg.waitSyscall()
        except ProcessExit as e:
            if e.process.pid == child:
                rc = e.exitcode if e.exitcode is not None else 128 + (e.signum or 0)
            continue
        except ProcessSignal as e:
            e.process.syscall(e.signum if e.signum != signal.SIGSTOP else 0)
            continue
        except NewProcessEvent as e:
            processes += 1
            e.process.syscall()
            e.process.parent.syscall()
            continue
        except ProcessExecution as e:
            e.process.syscall()
            continue
        proc = ev.process
        if proc.getreg("rax") == ENOSYS_RAX:  # entry stop
            try:
                record(proc, root_id, events)
            except Exception as exc:  # noqa: BLE001 - a record we cannot read is itself a finding
                events.append({"pid": proc.pid, "syscall": "?", "error": repr(exc)})
        proc.syscall()
    dbg.quit()
    return rc, events, processes


def main() -> int:
    out, rootfs = sys.argv[1], sys.argv[2]
    argv = sys.argv[sys.argv.index("--") + 1:]
    rc, events, processes = trace(argv, rootfs)
    with open(out, "w") as f:
        json.dump({"rc": rc, "events": events, "processes": processes}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
