"""The prestart hook on a kernel without open_tree/move_mount/fsmount/mount_setattr/openat2
(RHEL 8's 4.18, Ubuntu 20.04's 5.4, Debian 11's 5.10), simulated with a seccomp filter
(e2e/oldkernel.py): nct must fall back to mount(2) through /proc/self/fd magic links and to
the O_NOFOLLOW walk, and give the container exactly what it gets on a new kernel. (Every
hostile-image test of e2e/test_hostile.py also runs on the simulated old kernel.)"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from e2e.audit_rules import violations
from e2e.harness import HOOK, bundle_with_hook, needs_e2e, runc_run, venv_bin
from e2e.test_runc_hook import ENXIO, EPERM, SCRIPT, assert_driver, gpu_nodes, sections, smi_line

pytestmark = needs_e2e
HERE = Path(__file__).resolve().parent
PROBE = "from nct.container import syscalls as sc; print(sc.new_mount_api())"

# What the container sees of our mounts: mount point and per-mount options of every NVIDIA
# mount (mountinfo field 6), the /proc/driver/nvidia view, and a write to a driver library.
MOUNTS = r"""
echo "== mounts"; awk '$5 ~ /nvidia|libcuda|cuda-probe|ld.so/ {print $5, $6}' /proc/self/mountinfo | sort
echo "== proc"; ls /proc/driver/nvidia /proc/driver/nvidia/gpus; grep ModifyDeviceFiles /proc/driver/nvidia/params
echo "== write"; for f in /usr/lib/x86_64-linux-gnu/libcuda.so.*; do echo x 2>&1 >> "$f" | sed 's/.*: //'; done
"""


def old_hook(oldkernel: Path) -> dict:
    return {"prestart": [{"path": str(oldkernel), "args": ["oldkernel", venv_bin(HOOK), "prestart"]}]}


def test_the_filter_hides_the_new_mount_api(oldkernel):
    new = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True)
    old = subprocess.run([str(oldkernel), sys.executable, "-c", PROBE], capture_output=True, text=True)
    assert (new.stdout.strip(), old.stdout.strip()) == ("True", "False"), (new.stderr, old.stderr)


def test_one_gpu_on_an_old_kernel(sim_node, rootfs, oldkernel):
    gpu = sim_node.gpu(1)
    bundle = bundle_with_hook(rootfs, SCRIPT, ["NVIDIA_VISIBLE_DEVICES=1"], hooks=old_hook(oldkernel))
    res = runc_run(sim_node, bundle)
    assert res.returncode == 0, res.stderr.decode()
    out = sections(res.stdout.decode())
    assert gpu_nodes(out) == {"nvidia1"}
    assert out["open"] == [f"cat: can't open '/dev/nvidia1': {ENXIO}"]
    assert out["mknod"] == [f"cat: can't open '/dev/nvidia0': {EPERM}"]
    assert_driver(out)
    assert out["smi"] == [smi_line(gpu, 0)]


@pytest.mark.parametrize("visible", ["all", "2:0"])
def test_same_mounts_as_on_a_new_kernel(sim_node, rootfs, tmp_path, oldkernel, visible):
    """Every NVIDIA mount with the same per-mount options (ro,nosuid,nodev...), the same
    /proc/driver/nvidia view, read-only libraries: old kernel == new kernel."""
    seen = {}
    for kernel, hooks in (("new", None), ("old", old_hook(oldkernel))):
        (rootfs.parent / "config.json").unlink(missing_ok=True)
        bundle = bundle_with_hook(rootfs, MOUNTS, [f"NVIDIA_VISIBLE_DEVICES={visible}"], hooks=hooks)
        res = runc_run(sim_node, bundle)
        assert res.returncode == 0, (kernel, res.stderr.decode())
        seen[kernel] = sections(res.stdout.decode())
    assert seen["old"] == seen["new"]
    mounts = dict(line.split(" ", 1) for line in seen["old"]["mounts"])
    assert len(mounts) >= 10, mounts
    libcuda = next(opts for point, opts in mounts.items() if "/libcuda.so." in point)
    assert set(libcuda.split(",")) >= {"ro", "nosuid", "nodev"}, libcuda
    gpu = "/dev/nvidia0" if visible == "all" else f"/dev/nvidia{sim_node.gpu(2)['minor']}"
    assert set(mounts[gpu].split(",")) >= {"ro", "nosuid", "noexec"}, mounts
    assert "nodev" not in mounts[gpu].split(","), mounts  # a device node must open
    if visible == "2:0":  # the MIG device's access caps, and the capability files in the proc view
        assert any(p.startswith("/dev/nvidia-caps/nvidia-cap") for p in mounts), mounts
        assert any(p.startswith("/proc/driver/nvidia/capabilities/") for p in mounts), mounts
    assert seen["old"]["write"] and all(w == "Read-only file system" for w in seen["old"]["write"])
    assert seen["old"]["proc"][-1] == "ModifyDeviceFiles: 0"


def test_syscall_audit_on_an_old_kernel(sim_node, rootfs, tmp_path, oldkernel):
    """The python-ptrace audit (e2e/audit_tracer.py, audit_rules.py) of the real hook, run by
    runc as its prestart hook (before the pivot, as on a real old-kernel node)."""
    report = tmp_path / "trace.json"
    tracer = [sys.executable, str(HERE / "audit_tracer.py"), str(report), str(rootfs), "--",
              str(oldkernel), venv_bin(HOOK), "prestart"]
    hooks = {"prestart": [{"path": sys.executable, "args": tracer,
                           "env": ["PATH=/usr/sbin:/usr/bin:/sbin:/bin", "PYTHONDONTWRITEBYTECODE=1"]}]}
    bundle = bundle_with_hook(rootfs, "cuda-probe", ["NVIDIA_VISIBLE_DEVICES=1"], hooks=hooks)
    res = runc_run(sim_node, bundle, timeout=300)
    assert res.returncode == 0, res.stderr.decode()
    assert "cuDriverGetVersion=12040" in res.stdout.decode()
    trace = json.loads(report.read_text())
    assert trace["rc"] == 0
    kinds = {e["syscall"] for e in trace["events"]}
    assert "mount" in kinds and "move_mount" not in kinds, kinds
    bad = violations(trace["events"], str(rootfs))
    assert bad == [], json.dumps(bad[:5], indent=1)


def test_configure_after_pivot_is_refused_in_one_line(sim_node, rootfs, tmp_path, oldkernel):
    """nvidia-container-cli configure --pid of a container that runc has already pivoted:
    without open_tree the host files cannot be reached from its namespace. One line, exit 1,
    nothing mounted."""
    bundle = bundle_with_hook(rootfs, "sleep 30", [], hooks={})
    cid = "nct-old-" + tmp_path.name[-8:].replace("_", "")
    script = (f"runc create --bundle {bundle} {cid} </dev/null >/dev/null 2>&1 || exit 90; "
              f"pid=$(runc state {cid} | sed -n 's/.*\"pid\": *\\([0-9]*\\).*/\\1/p'); "
              f"{oldkernel} {venv_bin('nvidia-container-cli')} configure --pid=$pid --device=1 --utility {rootfs}; "
              f"rc=$?; runc delete --force {cid}; exit $rc")
    res = sim_node.run(["sh", "-c", script])
    err = res.stderr.decode().strip().splitlines()
    assert res.returncode == 1, (res.returncode, err)
    assert len(err) == 1 and err[0].startswith("nvidia-container-cli: "), err
    assert "already pivoted" in err[0] and "Linux < 5.12" in err[0], err
