"""Syscall auditor for tests: runs a command under ptrace (python-ptrace), following every
fork/clone/exec, and records each syscall that can modify the filesystem together with the
path it touches, resolved the way the kernel would for that process (dirfds and cwd through
/proc/PID/fd and /proc/PID/cwd; absolute paths against the process's root).

Usage: audit_tracer.py REPORT.json ALLOWED_PREFIX[:PREFIX...] -- CMD ARGS...
stdin is passed to CMD; exit status is CMD's. REPORT gets {"checked": N, "violations": [...]}.

A process that successfully pivot_root()s or chroot()s into a directory under an allowed
prefix is "jailed": every path it (and its children) can name is inside that root. Paths
relative to a detached mount (fsmount/open_tree fds) are not reachable from the host.
"""

from __future__ import annotations

import json
import os
import struct
import sys

from ptrace.debugger import (NewProcessEvent, ProcessExecution, ProcessExit, ProcessSignal,
                             PtraceDebugger)
from ptrace.debugger.child import createChild
from ptrace.func_call import FunctionCallOptions

AT_FDCWD = -100
O_WRITE = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC
MS_PROPAGATION = (1 << 20) | (1 << 18) | (1 << 19) | (1 << 17) | 16384  # shared/private/slave/unbindable/rec
MS_REMOUNT, MS_BIND = 32, 4096

# x86_64: name -> (nr, [(dirfd arg index or None, path arg index)], predicate on args)
PATHS = {
    2: ("open", [(None, 0)], lambda a, p: a[1] & O_WRITE),
    85: ("creat", [(None, 0)], None),
    257: ("openat", [(0, 1)], lambda a, p: a[2] & O_WRITE),
    437: ("openat2", [(0, 1)], lambda a, p: p.how_flags(a[2]) & O_WRITE),
    83: ("mkdir", [(None, 0)], None),
    258: ("mkdirat", [(0, 1)], None),
    133: ("mknod", [(None, 0)], None),
    259: ("mknodat", [(0, 1)], None),
    88: ("symlink", [(None, 1)], None),
    266: ("symlinkat", [(1, 2)], None),
    82: ("rename", [(None, 0), (None, 1)], None),
    264: ("renameat", [(0, 1), (2, 3)], None),
    316: ("renameat2", [(0, 1), (2, 3)], None),
    86: ("link", [(None, 1)], None),
    265: ("linkat", [(2, 3)], None),
    87: ("unlink", [(None, 0)], None),
    263: ("unlinkat", [(0, 1)], None),
    84: ("rmdir", [(None, 0)], None),
    90: ("chmod", [(None, 0)], None),
    268: ("fchmodat", [(0, 1)], None),
    452: ("fchmodat2", [(0, 1)], None),
    92: ("chown", [(None, 0)], None),
    94: ("lchown", [(None, 0)], None),
    260: ("fchownat", [(0, 1)], None),
    76: ("truncate", [(None, 0)], None),
    165: ("mount", [(None, 1)], lambda a, p: not (a[3] & MS_PROPAGATION and not a[3] & ~MS_PROPAGATION)),
    166: ("umount2", [(None, 0)], None),
    429: ("move_mount", [(2, 3)], None),
}
NR_PIVOT_ROOT, NR_CHROOT, NR_FSMOUNT, NR_OPEN_TREE, NR_CLOSE = 155, 161, 432, 428, 3


class Auditor:
    def __init__(self, allowed: list[str]):
        self.allowed = [a.rstrip("/") or "/" for a in allowed]
        self.checked = 0
        self.violations: list[dict] = []
        self.jailed: dict[int, str] = {}
        self.detached: dict[int, set[int]] = {}
        self.proc = None
        self.pids: set[int] = set()

    def inside(self, path: str) -> bool:
        path = os.path.normpath(path)
        return any(path == a or path.startswith(a + "/") for a in self.allowed)

    def how_flags(self, addr: int) -> int:
        return struct.unpack("<Q", self.mem(addr, 8))[0]

    def mem(self, addr: int, size: int) -> bytes:
        """Read tracee memory (fresh /proc/PID/mem each time: an exec replaces the mm)."""
        fd = os.open(f"/proc/{self.proc.pid}/mem", os.O_RDONLY)
        try:
            return os.pread(fd, size, addr)
        finally:
            os.close(fd)

    def read_str(self, addr: int) -> str:
        if not addr:
            return ""
        out = b""
        while len(out) < 8192:  # page by page: a string may end just before an unmapped page
            chunk = self.mem(addr, 4096 - (addr % 4096))
            end = chunk.find(b"\0")
            if end >= 0:
                return (out + chunk[:end]).decode(errors="replace")
            out += chunk
            addr += len(chunk)
        return out.decode(errors="replace")

    def base(self, pid: int, dirfd: int | None, path: str) -> str | None:
        """Absolute path (in the process's own view) of `path` relative to dirfd; None when
        it is relative to a detached mount."""
        if path.startswith("/"):
            return path
        if dirfd is None or dirfd == AT_FDCWD:
            where = os.readlink(f"/proc/{pid}/cwd")
        else:
            if dirfd in self.detached.get(pid, ()):
                return None
            where = os.readlink(f"/proc/{pid}/fd/{dirfd}")
        return where.rstrip("/") + ("/" + path if path else "")

    def on_enter(self, proc, nr: int, args: list[int]) -> None:
        spec = PATHS.get(nr)
        if spec is None:
            return
        name, pairs, pred = spec
        self.proc = proc
        if pred is not None and not pred(args, self):
            return
        pid = proc.pid
        self.pids.add(pid)
        for dirarg, patharg in pairs:
            self.checked += 1
            if pid in self.jailed:
                continue
            dirfd = None if dirarg is None else _int32(args[dirarg])
            path = self.read_str(args[patharg])
            try:
                full = self.base(pid, dirfd, path)
            except OSError as e:
                full = f"<unresolvable: {e}>"
            if full is None or self.inside(full):
                continue
            self.violations.append({"pid": pid, "syscall": name, "path": full, "arg": path})

    def on_exit(self, proc, nr: int, args: list[int], result: int) -> None:
        pid = proc.pid
        if nr in (NR_PIVOT_ROOT, NR_CHROOT) and result == 0:
            cwd = os.readlink(f"/proc/{pid}/root") if nr == NR_CHROOT else None
            root = cwd or self.jail_candidate.get(pid)
            if root and self.inside(root):
                self.jailed[pid] = root
        elif nr in (NR_FSMOUNT, NR_OPEN_TREE) and result >= 0:
            self.detached.setdefault(pid, set()).add(result)
        elif nr == NR_CLOSE and result == 0:
            self.detached.get(pid, set()).discard(_int32(args[0]))

    jail_candidate: dict[int, str] = {}


def _int32(v: int) -> int:
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v >= 1 << 31 else v


def _sint(v: int) -> int:
    return v - (1 << 64) if v >= 1 << 63 else v


def main() -> int:
    report, allowed = sys.argv[1], sys.argv[2].split(":")
    cmd = sys.argv[sys.argv.index("--") + 1:]
    auditor = Auditor(allowed)
    dbg = PtraceDebugger()
    dbg.traceFork()
    dbg.traceExec()
    dbg.traceClone()
    pid = createChild(cmd, no_stdout=False, env=dict(os.environ))
    root_proc = dbg.addProcess(pid, is_attached=True)
    opts = FunctionCallOptions(write_types=False, write_argname=False, write_address=False,
                               string_max_length=4096, replace_socketcall=False)
    exit_code = 1
    root_proc.syscall()
    while dbg:
        try:
            sysc = dbg.waitSyscall()
        except ProcessExit as ev:
            if ev.process.pid == pid:
                exit_code = ev.exitcode if ev.exitcode is not None else 128 + (ev.signum or 0)
            continue
        except NewProcessEvent as ev:
            child = ev.process
            parent = child.parent
            if parent.pid in auditor.jailed:
                auditor.jailed[child.pid] = auditor.jailed[parent.pid]
            auditor.detached[child.pid] = set(auditor.detached.get(parent.pid, set()))
            child.syscall()
            parent.syscall()
            continue
        except ProcessExecution as ev:
            ev.process.syscall()
            continue
        except ProcessSignal as ev:
            ev.process.syscall(ev.signum)
            continue
        proc = sysc.process
        call = proc.syscall_state.event(opts)
        if call is not None:
            regs = proc.getregs()
            args = [regs.rdi, regs.rsi, regs.rdx, regs.r10, regs.r8, regs.r9]
            if call.result is None:
                if call.syscall == NR_PIVOT_ROOT:
                    auditor.jail_candidate[proc.pid] = os.readlink(f"/proc/{proc.pid}/cwd")
                auditor.on_enter(proc, call.syscall, args)
            else:
                auditor.on_exit(proc, call.syscall, args, _sint(call.result))
        proc.syscall()
    dbg.quit()
    with open(report, "w") as f:
        json.dump({"checked": auditor.checked, "violations": auditor.violations,
                   "pids": sorted(auditor.pids), "jailed": sorted(auditor.jailed)}, f, indent=1)
    return exit_code


if __name__ == "__main__":
    sys.exit(main())
