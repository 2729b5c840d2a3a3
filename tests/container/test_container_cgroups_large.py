"""Device programs for large nodes: hundreds of allow rules load and are enforced. Since
Linux 6.4 a verifier log that overflows its buffer turns a successful load into ENOSPC, so
programs are loaded without a log (it only explains failures). The rules compare scratch
copies of the device fields (cgroups.rules_prologue), so verification is linear: 2000 rules
load (direct comparisons took 1.4 s at 800 rules and were rejected above ~1000)."""

from __future__ import annotations

import errno
import os

import pytest

from nct.container import cgroups as cg
from nct.container import syscalls as sc
from realparts import NV_MAJOR, needs_root
from test_container_cgroups import attach_program, cgroup2_dir, nodes, open_in  # noqa: F401 - pytest fixtures

pytestmark = needs_root

MANY = 2000  # linear verification: ~50 ms (it took 1.4 s at 800 and failed above ~1000)


def _rules(n: int, skip_minor: int) -> list[cg.DeviceRule]:
    # Minor 0 (nodes[0]) is never allowed; nodes[1] (minor 1) only when skip_minor != 1.
    return [cg.DeviceRule("c", NV_MAJOR, m, "rw") for m in range(1, n + 1) if m != skip_minor]


def test_program_with_many_rules_loads_and_is_enforced(cgroup2_dir, nodes):
    attach_program(cgroup2_dir, cg.deny_all_program([cg.DeviceRule("c", 1, 3, "rwm"), *_rules(MANY, 0)]))
    assert open_in(os.path.join(cgroup2_dir, "cgroup.procs"), ["/dev/null", *nodes]) == [
        "ok", "Operation not permitted", "No such device or address"]


def test_allow_v2_with_many_rules(cgroup2_dir, nodes):
    attach_program(cgroup2_dir, cg.deny_all_program([cg.DeviceRule("c", 1, 3, "rwm")]))
    assert cg.allow_v2(cgroup2_dir, _rules(MANY, 0)) == 1
    assert open_in(os.path.join(cgroup2_dir, "cgroup.procs"), ["/dev/null", *nodes]) == [
        "ok", "Operation not permitted", "No such device or address"]


def test_a_rejected_program_still_explains_itself():
    """Without the log on the first load, a verifier rejection still carries its last log line
    and the errno of the failure (not the ENOSPC of an overflowing log)."""
    cg._raise_memlock()
    bad = cg._insn(0xB7, 0, imm=1)  # r0 = 1, then falls off the end: no exit
    with pytest.raises(sc.SyscallError) as e:
        sc.bpf_prog_load_device(bad)
    assert e.value.errno == errno.EINVAL
    assert str(e.value).startswith("load device cgroup program: Invalid argument: ")
    assert "last insn is not an exit" in str(e.value)  # the reason, not the statistics line
    assert len(str(e.value).splitlines()) == 1
