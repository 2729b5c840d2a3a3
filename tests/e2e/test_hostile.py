"""Hostile images: symlinks that point at host paths where we mount, write or run ldconfig;
LD_PRELOAD/LD_LIBRARY_PATH in the image env; files where directories are needed. The host
(a victim dir beside the bundle) must stay untouched; the container either works (paths
resolved inside its root) or is refused with a one-line error."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from e2e import harness
from e2e.harness import HOOK, bundle_with_hook, mounts_under, needs_e2e, runc_run, snapshot, venv_bin

pytestmark = needs_e2e


@pytest.fixture(autouse=True, params=["new-kernel", "old-kernel"])
def kernel(request, monkeypatch):
    """Every hostile image twice: as is, and with the hook on a simulated kernel without the
    new mount API and openat2 (e2e/oldkernel.py: mount(2) through fd magic links, the
    O_NOFOLLOW walk)."""
    if request.param == "old-kernel":
        wrapper = str(request.getfixturevalue("oldkernel"))
        monkeypatch.setattr(harness, "hook_entry", lambda *extra: {"prestart": [
            {"path": wrapper, "args": ["oldkernel", venv_bin(HOOK), *extra, "prestart"]}]})
    return request.param

LIBDIR = "usr/lib/x86_64-linux-gnu"
SCRIPT = "ls /dev; cuda-probe; nvidia-smi -L"

EVIL_C = r"""
#include <fcntl.h>
#include <unistd.h>
__attribute__((constructor)) static void evil(void) {
    int fd = open(MARKER, O_WRONLY | O_CREAT, 0644);
    if (fd >= 0) { write(fd, "loaded\n", 7); close(fd); }
}
"""


def make_victim(v: Path) -> Path:
    for d in ("lib", "etc", "dev", "bin", "proc"):
        (v / d).mkdir(parents=True)
    (v / "etc/ld.so.cache").write_bytes(b"HOST CACHE")
    (v / "etc/ld.so.conf").write_text("# host\n")
    (v / "lib/keep").write_text("host lib\n")
    (v / "bin/nvidia-smi").write_text("#!/bin/sh\necho host\n")
    (v / "dev/null").write_text("not a device\n")
    return v


@pytest.fixture
def victim(tmp_path) -> Path:
    return make_victim(tmp_path / "host-victim")


def check(sim_node, rootfs: Path, victim: Path, env=("NVIDIA_VISIBLE_DEVICES=1",), script=SCRIPT):
    before = snapshot(victim)
    bundle = bundle_with_hook(rootfs, script, list(env))
    res = runc_run(sim_node, bundle)
    assert snapshot(victim) == before, "the host victim dir changed"
    assert mounts_under(victim) == [] and mounts_under(rootfs) == []
    err = res.stderr.decode()
    assert "Traceback" not in err
    if res.returncode != 0:  # runc quotes the hook's stderr: one line, ours
        assert err.count("nvidia-container-runtime-hook: ") == 1, err
        assert "\\n" not in err.split("nvidia-container-runtime-hook: ", 1)[1].rstrip().rstrip('"').rstrip("\\n"), err
    return res


def works(res) -> str:
    assert res.returncode == 0, res.stderr.decode()
    out = res.stdout.decode()
    assert "cuDriverGetVersion=12040" in out
    return out


def test_lib_dir_is_absolute_symlink_to_host(sim_node, rootfs, victim):
    shutil.rmtree(rootfs / LIBDIR)
    os.symlink(str(victim / "lib"), rootfs / LIBDIR)
    works(check(sim_node, rootfs, victim))
    # the link was followed inside the root: the libraries' mount targets are under the rootfs
    assert (rootfs / str(victim / "lib").lstrip("/") / "libcuda.so.550.54.15").exists()


def test_lib_dir_is_relative_symlink_climbing_out(sim_node, rootfs, victim):
    shutil.rmtree(rootfs / LIBDIR)
    os.symlink("../../../../../../../../../../" + str(victim / "lib").lstrip("/"), rootfs / LIBDIR)
    works(check(sim_node, rootfs, victim))


def test_ld_so_cache_and_conf_are_symlinks_to_host(sim_node, rootfs, victim):
    os.symlink(str(victim / "etc/ld.so.cache"), rootfs / "etc/ld.so.cache")
    (rootfs / "etc/ld.so.conf").unlink()
    os.symlink(str(victim / "etc/ld.so.conf"), rootfs / "etc/ld.so.conf")
    works(check(sim_node, rootfs, victim))


def test_etc_is_symlink_to_host(sim_node, rootfs, victim):
    shutil.copytree(rootfs / "etc", victim / "etc", dirs_exist_ok=True)
    shutil.rmtree(rootfs / "etc")
    os.symlink(str(victim / "etc"), rootfs / "etc")
    works(check(sim_node, rootfs, victim))


def test_dev_is_symlink_to_host(sim_node, rootfs, tmp_path):
    """runc itself (1.1) follows a /dev symlink and writes its /dev links (ptmx, fd, std*)
    into the host dir, hook or not. So: a control run without our hook on one victim, a run
    with it on another; the hook must not add or change anything beyond what runc did."""
    def run(name: str, hook: bool) -> dict:
        v = make_victim(tmp_path / name)
        r = tmp_path / f"{name}-bundle" / "rootfs"
        shutil.copytree(rootfs, r, symlinks=True)
        shutil.rmtree(r / "dev")
        os.symlink(str(v / "dev"), r / "dev")
        bundle = bundle_with_hook(r, SCRIPT, ["NVIDIA_VISIBLE_DEVICES=1"], hooks=None if hook else {})
        res = runc_run(sim_node, bundle)
        assert "Traceback" not in res.stderr.decode()
        assert mounts_under(v) == [] and mounts_under(r) == []
        return {k: (mode, data) for k, (mode, _u, _g, _s, _m, data) in snapshot(v).items()}

    assert run("with-hook", True) == run("control", False)


def test_mount_targets_are_symlinks_to_host(sim_node, rootfs, victim):
    os.symlink(str(victim / "bin/nvidia-smi"), rootfs / "usr/bin/nvidia-smi")
    os.symlink(str(victim / "lib/keep"), rootfs / LIBDIR / "libcuda.so.550.54.15")
    os.symlink(str(victim / "proc"), rootfs / "proc/driver")
    os.symlink(str(victim / "lib/keep"), rootfs / LIBDIR / "libcuda.so")
    out = works(check(sim_node, rootfs, victim))
    assert "GPU 0: " in out  # nvidia-smi was mounted over the link's in-root target


def test_ld_preload_and_library_path_never_reach_host_processes(sim_node, rootfs, victim, tmp_path):
    marker = tmp_path / "evil-loaded"
    src = tmp_path / "evil.c"
    src.write_text(EVIL_C)
    evil = victim / "lib/libevil.so"
    subprocess.run(["gcc", "-shared", "-fPIC", f'-DMARKER="{marker}"', "-o", str(evil), str(src)], check=True)
    # also a fake libc in a dir named by LD_LIBRARY_PATH, as a host ldconfig would see it
    shutil.copy(evil, victim / "lib/libc.so.6")
    env = ("NVIDIA_VISIBLE_DEVICES=1", f"LD_PRELOAD={evil}", f"LD_LIBRARY_PATH={victim / 'lib'}",
           "LD_AUDIT=" + str(evil))
    res = check(sim_node, rootfs, victim, env=env, script="cuda-probe 2>/dev/null; echo done")
    assert res.returncode == 0, res.stderr.decode()
    assert "cuDriverGetVersion=12040" in res.stdout.decode()
    assert not marker.exists(), "a host process loaded the image's LD_PRELOAD library"
    # positive control: the library does write the marker when a host process loads it
    subprocess.run(["true"], env={"LD_PRELOAD": str(evil), "PATH": os.environ["PATH"]}, check=True)
    assert marker.exists()


@pytest.mark.parametrize("path", [LIBDIR, "usr/bin", "proc/driver", "dev/nvidia-caps", "etc/ld.so.conf.d"])
def test_file_where_a_directory_is_needed(sim_node, rootfs, victim, path):
    target = rootfs / path
    if target.is_dir():
        shutil.rmtree(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text("I am a file\n")
    env = ["NVIDIA_VISIBLE_DEVICES=2:0" if path.startswith("dev") else "NVIDIA_VISIBLE_DEVICES=1"]
    res = check(sim_node, rootfs, victim, env=env)
    if path in (LIBDIR, "usr/bin"):  # we must mount there: refused, naming the path
        assert res.returncode != 0
        assert f"/{path} is a file where a directory is needed in container root {rootfs}" in res.stderr.decode()
    else:  # hidden by runc's /proc and /dev mounts, or not needed (ldconfig gets dirs as args)
        works(res)
    assert target.read_text() == "I am a file\n"
