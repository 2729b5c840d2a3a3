"""A container the hook refuses is never started, and nothing was mounted into it: failing
requirements, unknown devices, bad capabilities, a CDI-only request (mode check)."""

from __future__ import annotations

import pytest

from e2e.harness import bundle_with_hook, needs_e2e, runc_run

pytestmark = needs_e2e

MARK = "CONTAINER-STARTED"


@pytest.mark.parametrize("env, message", [
    (["NVIDIA_VISIBLE_DEVICES=1", "NVIDIA_REQUIRE_CUDA=cuda>=99.0"],
     "unsatisfied condition: cuda>=99.0, please update your driver to a newer version"),
    (["NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_REQUIRE_DRIVER=driver<500"], "unsatisfied condition: driver<500"),
    (["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_REQUIRE_ARCH=arch>=9.0"], "unsatisfied condition: arch>=9.0"),
    (["NVIDIA_VISIBLE_DEVICES=1", "CUDA_VERSION=13.1.0"], "unsatisfied condition: cuda>=13.1"),
    (["NVIDIA_VISIBLE_DEVICES=7"], "unknown device: 7"),
    (["NVIDIA_VISIBLE_DEVICES=0,GPU-00000000-dead-beef-0000-000000000000"],
     "unknown device: GPU-00000000-dead-beef-0000-000000000000"),
    (["NVIDIA_VISIBLE_DEVICES=2:5"], "unknown device: 2:5"),
    (["NVIDIA_VISIBLE_DEVICES=1", "NVIDIA_DRIVER_CAPABILITIES=compute,warp"], "unsupported capabilities: warp"),
    (["NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=0"], "invoking the NVIDIA Container Runtime Hook directly"),
])
def test_refused_container_never_starts(sim_node, rootfs, env, message):
    bundle = bundle_with_hook(rootfs, f"echo {MARK}", env)
    res = runc_run(sim_node, bundle)
    out, err = res.stdout.decode(), res.stderr.decode()
    assert res.returncode != 0
    assert MARK not in out
    assert message in err
    assert "nvidia-container-runtime-hook: " in err and "Traceback" not in err
    # nothing half-configured: no library or node was put into the rootfs
    assert not (rootfs / "usr/lib/x86_64-linux-gnu/libcuda.so").exists()
    assert not list((rootfs / "usr/lib/x86_64-linux-gnu").iterdir())


@pytest.mark.parametrize("env", [
    ["NVIDIA_VISIBLE_DEVICES=1", "NVIDIA_REQUIRE_CUDA=cuda>=99.0", "NVIDIA_DISABLE_REQUIRE=true"],
    ["NVIDIA_VISIBLE_DEVICES=1", "NVIDIA_REQUIRE_CUDA=cuda>=12.4 brand=tesla"],
    ["NVIDIA_VISIBLE_DEVICES=2:0", "NVIDIA_REQUIRE_CUDA=cuda>=12.0,driver>=550 cuda>=99", "NVIDIA_REQUIRE_ARCH=arch=8.0"],
])
def test_satisfied_or_disabled_requirements_start(sim_node, rootfs, env):
    bundle = bundle_with_hook(rootfs, f"echo {MARK}; cuda-probe", env)
    res = runc_run(sim_node, bundle)
    assert res.returncode == 0, res.stderr.decode()
    assert MARK in res.stdout.decode() and "cuDriverGetVersion=12040" in res.stdout.decode()


def test_skip_mode_detection_allows_cdi_names_as_plain_ids(sim_node, rootfs, tmp_path):
    """With skip-mode-detection the CDI name is treated as a device id: unknown device."""
    cfg = tmp_path / "config.toml"
    cfg.write_text("[nvidia-container-runtime-hook]\nskip-mode-detection = true\n")
    from e2e.harness import HOOK, venv_bin

    hooks = {"prestart": [{"path": venv_bin(HOOK), "args": [HOOK, "-config", str(cfg), "prestart"]}]}
    bundle = bundle_with_hook(rootfs, f"echo {MARK}", ["NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=0"], hooks=hooks)
    res = runc_run(sim_node, bundle)
    assert res.returncode != 0 and MARK not in res.stdout.decode()
    assert "unknown device: nvidia.com/gpu=0" in res.stderr.decode()


def _jails() -> set[str]:
    """ldconfig jails (nct.container.cgroups) now present in any hierarchy."""
    import os

    found = set()
    for base in ("/sys/fs/cgroup/devices", "/sys/fs/cgroup", "/sys/fs/cgroup/unified"):
        for dirpath, dirnames, _ in os.walk(base):
            found.update(os.path.join(dirpath, d) for d in dirnames if d.startswith("nct-ldconfig-"))
            dirnames[:] = [d for d in dirnames if not d.startswith("nct-ldconfig-")] if dirpath.count("/") < 8 else []
    return found


@pytest.mark.parametrize("env", [["NVIDIA_VISIBLE_DEVICES=7"], ["NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_REQUIRE_DRIVER=driver<500"]])
def test_refused_container_leaves_no_ldconfig_child_or_jail(sim_node, rootfs, env):
    """The hook forks ldconfig's child (and makes its jail) before discovery and planning
    (nct.hook.core.early_ldconfig): a request refused there ends it, and removes its jail."""
    import time

    before = _jails()
    res = runc_run(sim_node, bundle_with_hook(rootfs, f"echo {MARK}", env))
    assert res.returncode != 0 and MARK not in res.stdout.decode()
    left = _jails() - before
    for _ in range(20):  # another process's jail (a parallel run) lives milliseconds
        if not left:
            break
        time.sleep(0.1)
        left &= _jails()
    assert not left
