"""nct.child: the one fork + pipe + deadline helper (NVML probe, modprobe, the container
configuration, the ldconfig jail): real forked children, real pipes, real signals."""

from __future__ import annotations

import os
import signal
import time

from nct import child


def test_answer_and_exit_status():
    pid, r = child.fork(lambda w: os.write(w, b"hello") and 3)
    done = child.collect(pid, r, 10)
    assert done.data == b"hello"
    assert os.WIFEXITED(done.status) and os.WEXITSTATUS(done.status) == 3
    assert not done.ok and not done.timed_out and not done.overflowed


def test_none_is_success_and_an_exception_is_error_exit():
    pid, r = child.fork(lambda w: None)
    assert child.collect(pid, r).ok

    def boom(w):
        raise RuntimeError("x")

    pid, r = child.fork(boom, error_exit=42)
    done = child.collect(pid, r)
    assert os.WEXITSTATUS(done.status) == 42 and done.data == b""


def test_a_silent_hang_is_killed_at_the_deadline():
    pid, r = child.fork(lambda w: time.sleep(60))
    start = time.monotonic()
    done = child.collect(pid, r, 0.3)
    assert done.timed_out and time.monotonic() - start < 10
    assert os.WIFSIGNALED(done.status) and os.WTERMSIG(done.status) == signal.SIGKILL


def test_a_child_that_closes_the_pipe_and_hangs_is_killed_too():
    def body(w):
        os.write(w, b"bye")
        os.close(w)
        time.sleep(60)

    pid, r = child.fork(body)
    done = child.collect(pid, r, 0.3)
    assert done.timed_out and done.data == b"bye"
    assert os.WIFSIGNALED(done.status)


def test_too_much_output_is_refused_and_dropped():
    def body(w):
        while True:
            os.write(w, b"x" * 4096)

    pid, r = child.fork(body)
    done = child.collect(pid, r, 10, limit=10000)
    assert done.overflowed and done.data == b"" and not done.timed_out


def test_tail_keeps_the_end_of_any_amount():
    def body(w):
        for i in range(1000):
            os.write(w, b"%04d\n" % i)

    pid, r = child.fork(body)
    done = child.collect(pid, r, 10, tail=10)
    assert done.ok and done.data == b"0998\n0999\n"


def test_the_pipe_is_closed_and_the_child_reaped():
    pid, r = child.fork(lambda w: 0)
    child.collect(pid, r, 5)
    try:
        os.fstat(r)
        raise AssertionError("read end left open")
    except OSError:
        pass
    try:
        os.waitpid(pid, os.WNOHANG)
        raise AssertionError("child not reaped")
    except ChildProcessError:
        pass


def _reporting(status: int, then_s: float):
    """A body that reports `status` on a status pipe, closes its output, then stays."""
    sr, sw = os.pipe2(os.O_CLOEXEC)

    def body(w: int) -> int:
        os.close(sr)
        os.write(w, b"out")
        os.close(w)
        child.report_status(sw, status)
        time.sleep(then_s)
        return 0
    pid, r = child.fork(body)
    os.close(sw)
    return pid, r, sr


def test_a_reported_status_is_used_and_reap_false_does_not_wait_for_the_exit():
    """collect(status_r=...): the child's report stands for its status; with reap=False a
    child that reported is left (a disposable caller), with reap=True it is still reaped."""
    pid, r, sr = _reporting(3 << 8, 30)  # "exited with 3", then 30 s before exiting
    start = time.monotonic()
    done = child.collect(pid, r, 10, status_r=sr, reap=False)
    assert time.monotonic() - start < 5 and not done.reaped
    assert done.data == b"out" and os.WIFEXITED(done.status) and os.WEXITSTATUS(done.status) == 3
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    pid, r, sr = _reporting(signal.SIGSEGV, 0.2)  # "killed by SIGSEGV", then exits 0
    done = child.collect(pid, r, 10, status_r=sr)
    assert done.reaped and os.WIFSIGNALED(done.status) and os.WTERMSIG(done.status) == signal.SIGSEGV
    assert not os.path.exists(f"/proc/{pid}")


def test_a_child_that_dies_before_reporting_is_reaped_either_way():
    sr, sw = os.pipe2(os.O_CLOEXEC)

    def body(w: int) -> int:
        os.close(sr)
        os.kill(os.getpid(), signal.SIGKILL)
        return 0
    pid, r = child.fork(body)
    os.close(sw)
    done = child.collect(pid, r, 10, status_r=sr, reap=False)
    assert done.reaped and os.WIFSIGNALED(done.status) and os.WTERMSIG(done.status) == signal.SIGKILL
