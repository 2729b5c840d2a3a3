"""`nvidia-container-cli configure` doing real work: standalone (no --pid) on a rootfs in a
private mount namespace, and supervised (--pid) from a prestart hook that calls it the way
upstream's hook does."""

from __future__ import annotations

import sys

from e2e.harness import bundle_with_hook, needs_e2e, runc_run, venv_bin

pytestmark = needs_e2e

HOOK_SCRIPT = """
import json, os, sys
state = json.load(sys.stdin)
with open(os.path.join(state["bundle"], "config.json")) as f:
    root = json.load(f)["root"]["path"]
os.execv(sys.argv[1], [sys.argv[1], "configure", f"--pid={state['pid']}", *sys.argv[2:], root])
"""


def test_standalone(sim_node, rootfs):
    r = str(rootfs)
    script = (f"{venv_bin('nvidia-container-cli')} configure --device=1 --compute --utility "
              f"--ldconfig=@/sbin/ldconfig {r} && ls {r}/dev && chroot {r} cuda-probe && chroot {r} nvidia-smi -L"
              f" && cat {r}/proc/driver/nvidia/params | grep ModifyDeviceFiles")
    res = sim_node.run(["sh", "-c", script])
    assert res.returncode == 0, res.stderr.decode()
    out = res.stdout.decode().split()
    assert "nvidia1" in out and "nvidia0" not in out
    assert "cuDriverGetVersion=12040" in out
    assert sim_node.gpu(1)["uuid"] + ")" in out
    assert "ModifyDeviceFiles:" in out and out[out.index("ModifyDeviceFiles:") + 1] == "0"
    # the namespace is gone: on the host, /dev/nvidia1 in the rootfs is only the empty mount target
    assert not (rootfs / "dev/nvidia1").is_char_device()


def test_supervised_from_a_hook(sim_node, rootfs, tmp_path):
    hook = tmp_path / "cli-hook.py"
    hook.write_text(HOOK_SCRIPT)
    args = [sys.executable, str(hook), venv_bin("nvidia-container-cli"), "--device=2:0", "--utility",
            "--compute", "--ldconfig=@/sbin/ldconfig"]
    hooks = {"prestart": [{"path": sys.executable, "args": args}]}
    bundle = bundle_with_hook(rootfs, "ls /dev /dev/nvidia-caps; cat /dev/nvidia2; cuda-probe; nvidia-smi -L", [],
                              hooks=hooks)
    res = runc_run(sim_node, bundle)
    assert res.returncode == 0, res.stderr.decode()
    out = res.stdout.decode()
    mig = sim_node.gpu(2)["migs"][0]
    assert f"nvidia-cap{mig['gi_minor']}" in out and "nvidia0" not in out.split()
    assert "cuDriverGetVersion=12040" in out
    assert mig["uuid"] in out and sim_node.gpu(2)["migs"][1]["uuid"] not in out
    assert "No such device or address" in res.stderr.decode()


def test_supervised_failure_stops_the_container(sim_node, rootfs, tmp_path):
    hook = tmp_path / "cli-hook.py"
    hook.write_text(HOOK_SCRIPT)
    args = [sys.executable, str(hook), venv_bin("nvidia-container-cli"), "--device=0", "--require=cuda>=42"]
    bundle = bundle_with_hook(rootfs, "echo STARTED", [], hooks={"prestart": [{"path": sys.executable, "args": args}]})
    res = runc_run(sim_node, bundle)
    assert res.returncode != 0 and b"STARTED" not in res.stdout
    assert "nvidia-container-cli: requirement error: unsatisfied condition: cuda>=42" in res.stderr.decode()


def test_standalone_no_devbind_no_cgroups(sim_node, rootfs):
    """--no-devbind: device nodes are made with mknod (same major:minor) instead of bind mounts."""
    r = str(rootfs)
    script = (f"{venv_bin('nvidia-container-cli')} configure --device=0 --utility --no-devbind --no-cgroups "
              f"--ldconfig=@/sbin/ldconfig {r} && grep -c 'nvidia0' /proc/self/mountinfo; "
              f"stat -c '%F %t:%T' {r}/dev/nvidia0")
    res = sim_node.run(["sh", "-c", script])
    out = res.stdout.decode().split("\n")
    assert out[0] == "0", res.stdout.decode() + res.stderr.decode()  # not a mount
    assert out[1] == "character special file c3:0"  # 195:0 in hex
    assert (rootfs / "dev/nvidia0").is_char_device()
