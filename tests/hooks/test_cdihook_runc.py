"""nvidia-cdi-hook as createContainer hooks of a real runc container (what a CDI spec
injects): the hooks run in the container's mount namespace before pivot_root."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from hookforms import hook_argv
from realparts import NV_MAJOR, needs_gcc, needs_root, needs_runc, run_container, write_bundle

HOOK = os.path.join(os.path.dirname(sys.executable), "nvidia-cdi-hook")
LIBDIR = "/usr/lib/x86_64-linux-gnu"
pytestmark = [needs_root, needs_runc, needs_gcc, pytest.mark.usefixtures("hook_form")]


def _hook(*args: str) -> dict:
    return {"path": HOOK, "args": hook_argv(["nvidia-cdi-hook", *args]), "env": ["NVIDIA_CTK_DEBUG=false"]}


def test_cdi_style_container(rootfs, host_gpu):
    bundle = os.path.dirname(rootfs)
    hooks = {"createContainer": [
        _hook("create-symlinks", "--link", f"libnvfake.so.1::{LIBDIR}/libnvfake.so"),
        _hook("update-ldcache", "--folder", LIBDIR),
        _hook("update-application-profile"),
        _hook("future-hook", "--whatever"),  # unknown: warning, exit 0, container still starts
    ]}
    mounts = [{"source": host_gpu["lib"], "destination": f"{LIBDIR}/libnvfake.so.550.54.15",
               "type": "bind", "options": ["ro", "nosuid", "nodev", "rbind", "rprivate"]}]
    write_bundle(bundle, ["sh", "-c", f"ls -l {LIBDIR}; cat /dev/nvidia1 2>&1; "
                          "cat /etc/nvidia/nvidia-application-profiles-rc.d/10-container.conf"],
                 hooks=hooks, extra_mounts=mounts, env=["PATH=/bin", "LD_PRELOAD=/evil.so"])
    with open(os.path.join(bundle, "config.json")) as f:
        spec = json.load(f)
    spec["linux"]["devices"] = [{"path": "/dev/nvidia1", "type": "c", "major": NV_MAJOR, "minor": 1,
                                 "fileMode": 0o666, "uid": 0, "gid": 0}]
    spec["linux"]["resources"]["devices"].append({"allow": True, "type": "c", "major": NV_MAJOR, "minor": 1,
                                                  "access": "rw"})
    with open(os.path.join(bundle, "config.json"), "w") as f:
        json.dump(spec, f)
    res = run_container(bundle)
    assert res.returncode == 0, res.stderr
    assert "libnvfake.so -> libnvfake.so.1" in res.stdout
    assert "libnvfake.so.1 -> libnvfake.so.550.54.15" in res.stdout
    assert "No such device or address" in res.stdout
    assert '"EGLVisibleDGPUDevices", 0x2 ]' in res.stdout
    cache = subprocess.run(["/sbin/ldconfig", "-p", "-C", os.path.join(rootfs, "etc/ld.so.cache")],
                           capture_output=True, text=True).stdout
    assert f"libnvfake.so.1 (libc6,x86-64) => {LIBDIR}/libnvfake.so.1" in cache


# ---- issue 9 §5: nothing created in a volume -------------------------------------------------
import pytest  # noqa: E402

from realparts import snapshot  # noqa: E402


@pytest.mark.parametrize("hook", ["create-symlinks", "update-ldcache"])
def test_cdi_hooks_create_nothing_in_a_volume(rootfs, tmp_path, hook):
    """An image link leads a CDI hook into a read-write volume (a bind mount of a host dir):
    create-symlinks' link dir, update-ldcache's /etc/ld.so.conf.d. Refused in one line; the
    host directory is unchanged."""
    import shutil

    volume = tmp_path / "host-volume"
    volume.mkdir()
    (volume / "keep").write_text("host data\n")
    bundle = os.path.dirname(rootfs)
    if hook == "create-symlinks":
        shutil.rmtree(os.path.join(rootfs, LIBDIR.lstrip("/")))
        os.symlink("/vol", os.path.join(rootfs, LIBDIR.lstrip("/")))
        args = ("create-symlinks", "--link", f"libnvfake.so.1::{LIBDIR}/libnvfake.so")
    else:
        conf_d = os.path.join(rootfs, "etc/ld.so.conf.d")
        if os.path.isdir(conf_d):
            shutil.rmtree(conf_d)
        os.symlink("/vol", conf_d)
        args = ("update-ldcache", "--folder", "/opt/nv/lib")
    mounts = [{"source": str(volume), "destination": "/vol", "type": "bind", "options": ["rbind", "rw"]}]
    write_bundle(bundle, ["true"], hooks={"createContainer": [_hook(*args)]}, extra_mounts=mounts)
    before = snapshot(str(volume))
    res = run_container(bundle)
    assert snapshot(str(volume)) == before, "the hook created files in the host's volume"
    assert res.returncode != 0
    assert "is on a volume, not the image's own filesystem" in res.stderr, res.stderr
    assert res.stderr.count("nvidia-cdi-hook: ") == 1, res.stderr


# ---- issue 9 §1: image device nodes never reach the host's disk ------------------------------
from e2e.scratchdisk import WHERE, OpenWatch, plant, scratch_disk  # noqa: E402,F401 - fixture


@pytest.mark.parametrize("kernel", ["new", "old"])
def test_update_ldcache_with_image_device_nodes(rootfs, host_gpu, scratch_disk, tmp_path, kernel):
    """update-ldcache as a createContainer hook on an image carrying nodes of the "host disk"
    (a loop device) at /etc/ld.so.cache~, behind a lib*.so link and as a conf entry; also on
    the simulated old kernel (mount(2) remounts for the nodev view): the disk is unchanged,
    no planted node was opened, and the container finds the library through its cache."""
    from pathlib import Path

    path, args = HOOK, ["nvidia-cdi-hook"]
    if kernel == "old":
        from e2e import oldkernel

        path, args = str(oldkernel.build(tmp_path / "oldkernel")), ["oldkernel", HOOK]
    bundle = os.path.dirname(rootfs)
    hooks = {"createContainer": [{"path": path, "args": [*args, "update-ldcache", "--folder", LIBDIR],
                                  "env": ["NVIDIA_CTK_DEBUG=false"]}]}
    mounts = [{"source": host_gpu["lib"], "destination": f"{LIBDIR}/libnvfake.so.550.54.15",
               "type": "bind", "options": ["ro", "nosuid", "nodev", "rbind", "rprivate"]}]
    write_bundle(bundle, ["true"], hooks=hooks, extra_mounts=mounts)
    watch = OpenWatch()
    for where in WHERE:
        watch.add(plant(Path(rootfs), scratch_disk.rdev, where))
    try:
        res = run_container(bundle)
        opened = watch.opened()
    finally:
        watch.close()
    assert scratch_disk.unchanged(), "the host disk was written through the image's node"
    assert opened == [], f"a host process opened the image's device node: {opened}"
    assert res.returncode == 0, res.stderr
    cache = subprocess.run(["/sbin/ldconfig", "-p", "-C", os.path.join(rootfs, "etc/ld.so.cache")],
                           capture_output=True, text=True).stdout
    assert "libnvfake.so.550.54.15" in cache or "libnvfake.so.1" in cache, cache
