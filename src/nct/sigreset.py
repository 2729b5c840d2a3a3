"""Default signal state for every program we exec (low-level runtime, ldconfig, modprobe,
commands in `nct sim run`).

An ignored signal stays ignored across execve, and so does the signal mask. Python ignores
SIGPIPE and SIGXFSZ at start-up, so without this the runtime we exec (and, with crun, every
OCI hook it runs) would get them ignored: `yes | head -c1` in a hook then fails with "Broken
pipe" instead of ending quietly. Upstream's Go binaries pass both at their defaults.
Imports only the built-in `_signal` (the `signal` module pulls in `enum`: hot path)."""

from __future__ import annotations

import _signal


def default_signals() -> None:
    """Every ignored signal back to its default disposition, and an empty signal mask.
    Handlers Python installed (SIGINT) revert to the default by themselves on execve."""
    for sig in range(1, _signal.NSIG):
        try:
            if _signal.getsignal(sig) == _signal.SIG_IGN:
                _signal.signal(sig, _signal.SIG_DFL)
        except (OSError, ValueError):  # SIGKILL/SIGSTOP, glibc's reserved real-time signals
            continue
    _signal.pthread_sigmask(_signal.SIG_SETMASK, ())
