"""RLIMIT_NOFILE handling of the container applier (issue 9 §2): the limit follows the
plan, a limit that cannot be raised is one line, and a forked child sheds inherited fds."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

SNIPPET = """
import resource, sys
from nct.container import syscalls as sc
from nct.errors import ContainerError
try:
    sc.ensure_nofile(int(sys.argv[1]), "mounting 5000 files and devices")
except ContainerError as e:
    print("ERR", e); sys.exit(1)
print("OK", *resource.getrlimit(resource.RLIMIT_NOFILE))
"""


def _run(prefix: list[str], need: int) -> subprocess.CompletedProcess:
    return subprocess.run([*prefix, sys.executable, "-c", SNIPPET, str(need)], capture_output=True, text=True)


def test_soft_limit_is_raised_to_what_the_plan_needs():
    res = _run(["prlimit", "--nofile=256:8192", "--"], 5064)
    assert res.stdout.split() == ["OK", "5064", "8192"], res.stderr


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root and setpriv")
def test_unraisable_limit_is_one_line():
    """Without CAP_SYS_RESOURCE (an unprivileged user here) the hard limit stays: one line."""
    res = _run(["prlimit", "--nofile=256:1024", "--", "setpriv", "--reuid=65534", "--regid=65534",
                "--clear-groups", "--"], 5064)
    assert res.returncode == 1
    assert res.stdout.splitlines() == [
        "ERR mounting 5000 files and devices needs 5064 open files; the limit is 256 (hard 1024) and cannot be "
        "raised (not allowed to raise maximum limit): raise LimitNOFILE of the container engine"]


def test_close_fds_except_keeps_only_what_is_asked():
    from nct.container import syscalls as sc

    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            fds = [os.open("/dev/null", os.O_RDONLY) for _ in range(50)]
            keep = {fds[3], fds[40]}
            sc.close_fds_except(keep)
            left = {int(n) for n in os.listdir("/proc/self/fd")} - {0, 1, 2}
            # the listing's own fd is the one extra entry
            code = 0 if keep <= left and len(left - keep) <= 1 else 2
        finally:
            os._exit(code)
    assert os.WEXITSTATUS(os.waitpid(pid, 0)[1]) == 0
