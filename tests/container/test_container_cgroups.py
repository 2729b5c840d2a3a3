"""Device cgroup rules on real cgroups: v1 devices.allow on a child of the devices hierarchy,
v2 BPF device programs on a child cgroup of a cgroup2 mount. The process that opens the nodes
is moved into the child cgroup; ENXIO (allowed, no driver) vs EPERM (denied)."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import tempfile
import uuid

import pytest

from nct.container import cgroups as cg
from nct.container import syscalls as sc
from realparts import NV_MAJOR, needs_root

pytestmark = needs_root

OPENER = """
import os, sys
for p in sys.argv[1:]:
    try:
        os.close(os.open(p, os.O_RDWR)); print("ok")
    except OSError as e:
        print(os.strerror(e.errno))
"""


def attach_program(cgroup_dir: str, insns: bytes) -> None:
    """Load and attach a whole device program next to any others (BPF_F_ALLOW_MULTI), as runc
    does: built from the shipped syscall wrappers, the way cgroups.allow_v2 uses them."""
    try:  # kernels before 5.11 charge BPF programs to RLIMIT_MEMLOCK
        resource.setrlimit(resource.RLIMIT_MEMLOCK, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    except (ValueError, OSError):
        pass
    cgfd = os.open(cgroup_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        prog = sc.bpf_prog_load_device(insns)
        try:
            sc.bpf_prog_attach(cgfd, prog, sc.BPF_F_ALLOW_MULTI, what=cgroup_dir)
        finally:
            os.close(prog)
    finally:
        os.close(cgfd)


def attached_programs(cgroup_dir: str) -> tuple[int, list[int]]:
    """(attach flags, program ids) of the device programs on `cgroup_dir`."""
    cgfd = os.open(cgroup_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        return sc.bpf_prog_query(cgfd, cgroup_dir)
    finally:
        os.close(cgfd)


def open_in(procs_file: str, paths: list[str]) -> list[str]:
    def enter():
        with open(procs_file, "w") as f:
            f.write(str(os.getpid()))
    res = subprocess.run([sys.executable, "-c", OPENER, *paths], preexec_fn=enter, capture_output=True,
                         text=True, timeout=30)
    assert res.returncode == 0, res.stderr
    return res.stdout.splitlines()


@pytest.fixture
def nodes(tmp_path):
    out = []
    for minor in (0, 1):
        p = str(tmp_path / f"nvidia{minor}")
        os.mknod(p, 0o666 | 0o020000, os.makedev(NV_MAJOR, minor))
        out.append(p)
    return out


def _v1_devices_root() -> str | None:
    for root, point, fstype, opts in cg._mounts("/proc/self/mountinfo"):
        if fstype == "cgroup" and "devices" in opts.split(",") and root == "/":
            return point
    return None


def test_v1_devices_allow(nodes):
    base = _v1_devices_root()
    if base is None:
        pytest.skip("no cgroup v1 devices hierarchy on this host")
    d = os.path.join(base, "nct-test-" + uuid.uuid4().hex[:8])
    os.mkdir(d)
    try:
        with open(os.path.join(d, "devices.deny"), "w") as f:
            f.write("a")
        cg.allow_v1(d, [cg.DeviceRule("c", 1, 3, "rw"), cg.DeviceRule("c", NV_MAJOR, 1, "rw")])
        assert open_in(os.path.join(d, "cgroup.procs"), ["/dev/null", *nodes]) == [
            "ok", "Operation not permitted", "No such device or address"]
        assert f"c {NV_MAJOR}:1 rw" in open(os.path.join(d, "devices.list")).read()
    finally:
        os.rmdir(d)


@pytest.fixture
def cgroup2_dir():
    """A child of a cgroup2 mount: the host's, or a fresh one in a temp dir (unmounted after)."""
    mounted = None
    base = next((p for r, p, t, _ in cg._mounts("/proc/self/mountinfo") if t == "cgroup2" and r == "/"), None)
    if base is None:
        mounted = tempfile.mkdtemp(prefix="nct-cg2-")
        try:
            sc.mount("cgroup2", mounted, "cgroup2", 0)
        except Exception as e:  # noqa: BLE001
            os.rmdir(mounted)
            pytest.skip(f"cannot mount cgroup2: {e}")
        base = mounted
    d = os.path.join(base, "nct-test-" + uuid.uuid4().hex[:8])
    os.mkdir(d)
    try:
        yield d
    finally:
        os.rmdir(d)
        if mounted:
            sc.umount2(mounted, sc.MNT_DETACH)
            os.rmdir(mounted)


def test_v2_bpf_program_keeps_existing_rules(cgroup2_dir, nodes):
    # What runc does: one program allowing /dev/null (c 1:3), denying everything else.
    attach_program(cgroup2_dir, cg.deny_all_program([cg.DeviceRule("c", 1, 3, "rwm")]))
    procs = os.path.join(cgroup2_dir, "cgroup.procs")
    assert open_in(procs, ["/dev/null", *nodes]) == ["ok", "Operation not permitted", "Operation not permitted"]
    _, before = attached_programs(cgroup2_dir)
    assert cg.allow_v2(cgroup2_dir, [cg.DeviceRule("c", NV_MAJOR, 1, "rw")]) == 1
    flags, after = attached_programs(cgroup2_dir)
    assert len(after) == 1 and after != before and flags & sc.BPF_F_ALLOW_MULTI
    # ours allowed, the old allow kept, the old deny kept
    assert open_in(procs, ["/dev/null", *nodes]) == ["ok", "Operation not permitted", "No such device or address"]
    # a second update stacks on top of the first
    cg.allow_v2(cgroup2_dir, [cg.DeviceRule("c", NV_MAJOR, 0, "rw")])
    assert open_in(procs, ["/dev/null", *nodes]) == ["ok", "No such device or address", "No such device or address"]


def test_v2_access_bits_are_enforced(cgroup2_dir, nodes):
    attach_program(cgroup2_dir, cg.deny_all_program([cg.DeviceRule("c", 1, 3, "rwm")]))
    cg.allow_v2(cgroup2_dir, [cg.DeviceRule("c", NV_MAJOR, 1, "r")])
    script = ("import os, sys\n"
              "for flags in (os.O_RDONLY, os.O_WRONLY):\n"
              "    try: os.open(sys.argv[1], flags)\n"
              "    except OSError as e: print(os.strerror(e.errno))\n")

    def enter():
        with open(os.path.join(cgroup2_dir, "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))
    res = subprocess.run([sys.executable, "-c", script, nodes[1]], preexec_fn=enter, capture_output=True, text=True)
    assert res.stdout.splitlines() == ["No such device or address", "Operation not permitted"]


def test_v2_no_program_means_nothing_to_do(cgroup2_dir):
    assert cg.allow_v2(cgroup2_dir, [cg.DeviceRule("c", NV_MAJOR, 1)]) == 0


def test_find_device_cgroups_of_a_process():
    v1, v2 = cg.find_device_cgroups(os.getpid())
    assert v1 is None or os.path.isdir(v1)
    assert v2 is None or os.path.isdir(v2)
    assert v1 or v2


def test_allow_devices_dispatches_to_v2_on_a_v2_only_view(tmp_path, cgroup2_dir, nodes):
    """allow_devices(pid) on a process whose /proc/PID/cgroup shows only the unified
    hierarchy: the BPF path is taken for the process's own cgroup."""
    base = next(p for r, p, t, _ in cg._mounts("/proc/self/mountinfo") if t == "cgroup2" and r == "/")
    rel = "/" + os.path.relpath(cgroup2_dir, base)
    fake_proc = tmp_path / "proc"
    (fake_proc / "4242").mkdir(parents=True)
    (fake_proc / "4242" / "cgroup").write_text(f"0::{rel}\n")
    attach_program(cgroup2_dir, cg.deny_all_program([cg.DeviceRule("c", 1, 3, "rwm")]))
    cg.allow_devices(4242, [cg.DeviceRule("c", NV_MAJOR, 0, "rw")], str(fake_proc))
    assert open_in(os.path.join(cgroup2_dir, "cgroup.procs"), nodes) == [
        "No such device or address", "Operation not permitted"]
