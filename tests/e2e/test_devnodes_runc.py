"""Issue 9 §1 through runc: an image carrying nodes of the "host disk" (a loop device over a
scratch file) at /etc/ld.so.cache~, behind a lib*.so link in its lib dir and as an
ld.so.conf.d entry. Through the legacy prestart hook (new and simulated old kernel) and
`nvidia-container-cli configure --pid` (host ldconfig, and upstream's default: the image's
own ldconfig, here a program that tries to write the disk): the disk's bytes are unchanged,
no process opened a planted node, and the container still runs CUDA."""

from __future__ import annotations

import stat
import subprocess
import sys
from pathlib import Path

import pytest

from e2e import harness
from nct.container import cgroups as cg
from e2e.harness import HOOK, bundle_with_hook, needs_e2e, runc_run, venv_bin
from e2e.scratchdisk import WHERE, OpenWatch, plant, scratch_disk  # noqa: F401 - fixture
from e2e.test_cli_configure import HOOK_SCRIPT

pytestmark = needs_e2e
SCRIPT = "cuda-probe; nvidia-smi -L"


def _plant_all(rootfs: Path, rdev: int) -> OpenWatch:
    watch = OpenWatch()
    for where in WHERE:
        watch.add(plant(rootfs, rdev, where))
    return watch


def _check(res, watch: OpenWatch, disk) -> None:
    opened = watch.opened()
    watch.close()
    assert disk.unchanged(), "the host disk was written through the image's node"
    assert opened == [], f"a host process opened the image's device node: {opened}"
    assert res.returncode == 0, res.stderr.decode()
    assert "cuDriverGetVersion=12040" in res.stdout.decode()


def _v2_only_hook(extra: tuple[str, ...]) -> dict:
    """The hook in a mount namespace without the cgroup v1 devices hierarchy: it sees a
    cgroup v2 host, and its ldconfig jail is a BPF device program on the unified tree."""
    v1 = next((p for r, p, t, o in cg._mounts("/proc/self/mountinfo") if t == "cgroup" and "devices" in o.split(",")),
              None)
    if v1 is None or not any(t == "cgroup2" for _r, _p, t, _o in cg._mounts("/proc/self/mountinfo")):
        pytest.skip("needs a hybrid cgroup host (v1 devices and a cgroup2 mount) to show the hook a v2 view")
    cmd = f"umount -l {v1} && exec {venv_bin(HOOK)} {' '.join(extra)} prestart"
    return {"prestart": [{"path": "/usr/bin/unshare", "args": ["unshare", "-m", "sh", "-c", cmd]}]}


@pytest.mark.parametrize("kernel", ["new-kernel", "old-kernel", "cgroup-v2-view"])
def test_legacy_hook(sim_node, rootfs, scratch_disk, kernel, request, monkeypatch):
    if kernel == "old-kernel":
        wrapper = str(request.getfixturevalue("oldkernel"))
        monkeypatch.setattr(harness, "hook_entry", lambda *extra: {"prestart": [
            {"path": wrapper, "args": ["oldkernel", venv_bin(HOOK), *extra, "prestart"]}]})
    elif kernel == "cgroup-v2-view":
        monkeypatch.setattr(harness, "hook_entry", lambda *extra: _v2_only_hook(extra))
    watch = _plant_all(rootfs, scratch_disk.rdev)
    # with the v1 hierarchy hidden from it, the hook cannot allow the GPU in the container's
    # (v1) device cgroup: nvidia-smi is left out there, the ld cache check stays
    script = "cuda-probe" if kernel == "cgroup-v2-view" else SCRIPT
    res = runc_run(sim_node, bundle_with_hook(rootfs, script, ["NVIDIA_VISIBLE_DEVICES=1"]))
    _check(res, watch, scratch_disk)
    assert stat.S_ISREG((rootfs / "etc/ld.so.cache").lstat().st_mode)


PROBE_C = r'''
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <errno.h>
#include <unistd.h>
/* what a hostile image's ldconfig would do: write the host disk through a node it ships */
int main(void) {
    char buf[512];
    memset(buf, 'X', sizeof buf);
    int fd = open("/opt-disk-node", O_RDWR);
    const char *r = fd < 0 ? strerror(errno) : (write(fd, buf, sizeof buf) == sizeof buf ? "written" : "short");
    FILE *out = fopen("/ldconfig.out", "w");
    if (out) { fprintf(out, "%s\n", r); fclose(out); }
    return 0;
}
'''


@pytest.mark.parametrize("ldconfig", ["@/sbin/ldconfig", "image"])
def test_nvidia_container_cli_configure(sim_node, rootfs, scratch_disk, tmp_path, ldconfig):
    """"image": no --ldconfig, as upstream's default runs the container's /sbin/ldconfig;
    the image's is a static program doing what glibc's ldconfig does to ld.so.cache~."""
    watch = _plant_all(rootfs, scratch_disk.rdev)
    extra = ["--ldconfig=@/sbin/ldconfig"]
    if ldconfig == "image":
        src = tmp_path / "probe.c"
        src.write_text(PROBE_C)
        dst = rootfs / "sbin/ldconfig"
        dst.parent.mkdir(exist_ok=True)
        if dst.is_symlink() or dst.exists():
            dst.unlink()
        subprocess.run(["gcc", "-O1", "-static", "-o", str(dst), str(src)], check=True)
        extra = []
    hook = tmp_path / "cli-hook.py"
    hook.write_text(HOOK_SCRIPT)
    args = [sys.executable, str(hook), venv_bin("nvidia-container-cli"), "--device=1", "--utility", "--compute",
            *extra]
    bundle = bundle_with_hook(rootfs, SCRIPT, [], hooks={"prestart": [{"path": sys.executable, "args": args}]})
    res = runc_run(sim_node, bundle)
    _check(res, watch, scratch_disk)
    if ldconfig == "image":
        # the image's program ran, confined: nodev refuses the node (EACCES)
        assert (rootfs / "ldconfig.out").read_text().strip() == "Permission denied"
