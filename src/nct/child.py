"""Run code in a forked child and read back what it writes to a pipe, within a deadline.

The NVML probe (a driver library may crash or hang), modprobe, the container
configuration in the container's namespaces and the ldconfig jail all fork a child that
answers over a pipe. The fork, the pipe, the deadline, the kill and the reaping are
written here once: `fork` starts the child, `collect` reads its answer and reaps it.
Imports only what the hook already loads (no subprocess, no signal: the hook starts on
every container).
"""

from __future__ import annotations

import os
import select
import time

TYPE_CHECKING = False  # typing costs an import on the hook's path
if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Callable


class Finished:
    """What a child left: the bytes it wrote (all, or the tail), its wait status, whether
    it was killed for running past the deadline or for writing too much, and whether it was
    reaped (`collect(reap=False)` leaves a child that reported its status)."""

    __slots__ = ("data", "status", "timed_out", "overflowed", "reaped")

    def __init__(self, data: bytes, status: int, timed_out: bool, overflowed: bool, reaped: bool = True) -> None:
        self.data = data
        self.status = status
        self.timed_out = timed_out
        self.overflowed = overflowed
        self.reaped = reaped

    @property
    def ok(self) -> bool:
        """Exited with status 0."""
        return os.WIFEXITED(self.status) and os.WEXITSTATUS(self.status) == 0


def fork(body: Callable[[int], int | None], *, error_exit: int = 1) -> tuple[int, int]:
    """Fork; the child runs body(write_fd) and exits with its return value (None: 0; an
    exception: `error_exit`; the body reports its own errors), never returning into the
    caller's code. Returns (pid, read_fd) in the parent. Both pipe ends are close-on-exec:
    a body that execs keeps the write end only where it dup2()s it (stderr, say)."""
    r, w = os.pipe2(os.O_CLOEXEC)
    pid = os.fork()
    if pid == 0:  # child
        code = error_exit
        try:
            os.close(r)
            result = body(w)
            code = 0 if result is None else result
        except BaseException:  # noqa: BLE001 - the body says what went wrong; we only exit
            pass
        finally:
            os._exit(code)
    os.close(w)
    return pid, r


def collect(pid: int, r: int, timeout: float | None = None, *, limit: int | None = None,
            tail: int | None = None, status_r: int | None = None, reap: bool = True) -> Finished:
    """Read `r` to its end, then reap `pid`; closes `r`. Past `timeout` seconds (reading
    or waiting for the exit) the child is killed (timed_out). More than `limit` bytes kill
    it too and drop what was read (overflowed); with `tail`, only the last `tail` bytes are
    kept and any amount may be read.
    `status_r` (closed here): a pipe on which the child writes the wait status it stands for
    (4 bytes, little-endian: `report_status`) once its work is done, before it exits; that
    status is used, and with `reap` False a child that reported is not waited for (a
    disposable caller: the exit of a child that unshared namespaces waits for their
    teardown; the orphan goes to the caller's reaper once the caller exits). A child that
    did not report (it died first) is reaped and its own status used, as without."""
    deadline = None if timeout is None else time.monotonic() + timeout
    chunks: list[bytes] = []
    size = 0
    kept = b""
    timed_out = overflowed = False
    poller = select.poll()  # not select(): fds above 1023 are fine
    poller.register(r, select.POLLIN)
    try:
        while True:
            wait_ms = None
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    timed_out = True
                    break
                wait_ms = max(1, int(left * 1000))
            if not poller.poll(wait_ms):
                continue
            chunk = os.read(r, 65536)
            if not chunk:
                break
            if tail is not None:
                kept = (kept + chunk)[-tail:]
                continue
            chunks.append(chunk)
            size += len(chunk)
            if limit is not None and size > limit:
                overflowed = True
                chunks = []
                break
    except BaseException:
        _kill_and_reap(pid)
        raise
    finally:
        os.close(r)
    reported = None
    if status_r is not None:
        try:
            if not (timed_out or overflowed):
                reported = _read_status(status_r, deadline)
        except BaseException:
            _kill_and_reap(pid)
            raise
        finally:
            os.close(status_r)
    if timed_out or overflowed:
        status = _kill_and_reap(pid)
    elif reported is not None and not reap:
        return Finished(kept if tail is not None else b"".join(chunks), reported, False, False, reaped=False)
    else:
        status, timed_out = _reap(pid, deadline)
        if reported is not None and not timed_out:
            status = reported
    return Finished(kept if tail is not None else b"".join(chunks), status, timed_out, overflowed)


def report_status(status_w: int, status: int) -> None:
    """In the child: the wait status it stands for, to the parent's `collect(status_r=...)`;
    closes `status_w`. Close the output pipe first: the parent reads that to its end first."""
    try:
        os.write(status_w, status.to_bytes(4, "little", signed=True))
    finally:
        os.close(status_w)


def _read_status(status_r: int, deadline: float | None) -> int | None:
    """The reported wait status, or None when the writer closed (or the deadline passed) first."""
    poller = select.poll()
    poller.register(status_r, select.POLLIN)
    data = b""
    while len(data) < 4:
        wait_ms = None
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            wait_ms = max(1, int(left * 1000))
        if not poller.poll(wait_ms):
            continue
        chunk = os.read(status_r, 4 - len(data))
        if not chunk:
            return None
        data += chunk
    return int.from_bytes(data, "little", signed=True)


def _reap(pid: int, deadline: float | None) -> tuple[int, bool]:
    """(wait status, killed at the deadline): a child that closed the pipe may still run."""
    if deadline is None:
        return os.waitpid(pid, 0)[1], False
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status, False
        if time.monotonic() >= deadline:
            return _kill_and_reap(pid), True
        time.sleep(0.002)


def _kill_and_reap(pid: int) -> int:
    """SIGKILL `pid` (the signal module imports enum: not on the hook's path), then its wait status."""
    try:
        os.kill(pid, 9)
    except ProcessLookupError:
        pass
    return os.waitpid(pid, 0)[1]
