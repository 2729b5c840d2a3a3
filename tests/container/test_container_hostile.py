"""Hostile images against apply_edits in real runc containers: symlinks to host paths in the
lib dir, /dev, /etc, mount targets; ".." escapes; a file where a directory is needed; image
env with LD_PRELOAD. The host "victim" dir must stay byte-for-byte untouched."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from realparts import (HOOKHELPER, NV_MAJOR, helper_hook, needs_gcc, needs_root, needs_runc, run_container, snapshot,
                       write_bundle, write_edits)

pytestmark = [needs_root, needs_runc]
LIBDIR = "/usr/lib/x86_64-linux-gnu"


def _lib_edits(host_gpu) -> dict:
    return {
        "device_nodes": [dict(path="/dev/nvidia1", host_path=host_gpu["nodes"]["nvidia1"], major=NV_MAJOR, minor=1)],
        "mounts": [dict(host_path=host_gpu["lib"], container_path=f"{LIBDIR}/libnvfake.so.550.54.15")],
        "symlinks": [dict(target="libnvfake.so.1", link=f"{LIBDIR}/libnvfake.so")],
        "ldconfig_folders": [LIBDIR],
    }


def _run(tmp_path, rootfs, edits: dict, script: str, options: dict | None = None, env: list[str] | None = None):
    bundle = os.path.dirname(rootfs)
    write_bundle(bundle, ["sh", "-c", script], hooks=helper_hook(write_edits(str(tmp_path / "e.json"), edits, options)),
                 env=env)
    return run_container(bundle)


@needs_gcc
def test_libdir_symlink_to_host(tmp_path, rootfs, host_gpu, victim):
    before = snapshot(victim)
    libdir = os.path.join(rootfs, LIBDIR.lstrip("/"))
    os.rmdir(libdir)
    os.symlink(os.path.join(victim, "lib"), libdir)
    res = _run(tmp_path, rootfs, _lib_edits(host_gpu), f"ls {LIBDIR}/; cat /dev/nvidia1 2>&1; true")
    assert res.returncode == 0, res.stderr
    assert "libnvfake.so.550.54.15" in res.stdout and "No such device or address" in res.stdout
    assert snapshot(victim) == before
    inside = os.path.join(rootfs, victim.lstrip("/"), "lib")
    assert os.path.islink(os.path.join(inside, "libnvfake.so"))
    assert os.path.isfile(os.path.join(inside, "libnvfake.so.550.54.15"))  # the (empty) mount target


@needs_gcc
def test_etc_and_cache_symlinks_to_host(tmp_path, rootfs, host_gpu, victim):
    before = snapshot(victim)
    etc = os.path.join(rootfs, "etc")
    shutil.rmtree(etc)
    os.makedirs(etc)
    os.symlink(os.path.join(victim, "etc", "ld.so.cache"), os.path.join(etc, "ld.so.cache"))
    os.symlink(os.path.join(victim, "etc", "ld.so.conf"), os.path.join(etc, "ld.so.conf"))
    res = _run(tmp_path, rootfs, _lib_edits(host_gpu), "true")
    assert res.returncode == 0, res.stderr
    assert snapshot(victim) == before
    # ldconfig replaced the image's cache symlink with a real cache inside the rootfs
    cache = os.path.join(etc, "ld.so.cache")
    assert not os.path.islink(cache)
    out = subprocess.run(["/sbin/ldconfig", "-p", "-C", cache], capture_output=True, text=True).stdout
    assert "libnvfake.so.1" in out


@needs_gcc
@pytest.mark.parametrize("no_pivot", [False, True])
def test_whole_etc_symlink_to_host(tmp_path, rootfs, host_gpu, victim, no_pivot):
    """Also with --no-pivot (ldconfig chrooted instead of pivoted)."""
    before = snapshot(victim)
    shutil.rmtree(os.path.join(rootfs, "etc"))
    os.symlink(os.path.join(victim, "etc"), os.path.join(rootfs, "etc"))
    res = _run(tmp_path, rootfs, _lib_edits(host_gpu), "true", {"no_pivot": no_pivot})
    assert res.returncode == 0, res.stderr
    assert snapshot(victim) == before
    assert os.path.isfile(os.path.join(rootfs, victim.lstrip("/"), "etc", "ld.so.cache"))


def test_dev_symlink_to_host(tmp_path, rootfs, host_gpu, victim):
    """runc itself refuses an image whose /dev is a symlink, so this one runs apply_edits
    standalone (no pid: current mount namespace) inside a private namespace."""
    before = snapshot(victim)
    shutil.rmtree(os.path.join(rootfs, "dev"))
    os.symlink(os.path.join(victim, "dev"), os.path.join(rootfs, "dev"))
    edits = write_edits(str(tmp_path / "e.json"), {"device_nodes": [
        dict(path="/dev/nvidia1", host_path=host_gpu["nodes"]["nvidia1"], major=NV_MAJOR, minor=1)]})
    inside = os.path.join(rootfs, victim.lstrip("/"), "dev", "nvidia1")
    script = f"{sys.executable} {HOOKHELPER} {edits} --rootfs {rootfs} && stat -c %t:%T {inside}"
    res = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", script],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "c3:1"  # 195:1 bound onto the in-root target
    assert snapshot(victim) == before


def test_mount_target_symlink_and_dotdot(tmp_path, rootfs, host_gpu, victim):
    """A mount target that is a symlink to a host file, and a target full of "..": both land
    inside the rootfs; the host file keeps its content."""
    before = snapshot(victim)
    src = tmp_path / "nvidia-smi"
    src.write_text("#!/bin/sh\necho fake smi\n")
    src.chmod(0o755)
    os.symlink(os.path.join(victim, "lib", "keep"), os.path.join(rootfs, "usr/bin/nvidia-smi"))
    edits = {"mounts": [dict(host_path=str(src), container_path="/usr/bin/nvidia-smi"),
                        dict(host_path=str(src), container_path="/../../../../../../tmp/../../escape")]}
    res = _run(tmp_path, rootfs, edits, "cat /usr/bin/nvidia-smi; cat /escape")
    assert res.returncode == 0, res.stderr
    assert res.stdout.count("fake smi") == 2
    assert snapshot(victim) == before
    assert os.path.isfile(os.path.join(rootfs, victim.lstrip("/"), "lib", "keep"))
    assert os.path.exists(os.path.join(rootfs, "escape"))


@needs_gcc
def test_file_where_directory_needed_fails_cleanly(tmp_path, rootfs, host_gpu):
    libdir = os.path.join(rootfs, LIBDIR.lstrip("/"))
    os.rmdir(libdir)
    with open(libdir, "w") as f:
        f.write("not a dir")
    marker = os.path.join(rootfs, "ran")
    res = _run(tmp_path, rootfs, _lib_edits(host_gpu), "touch /ran")
    assert res.returncode != 0
    assert "x86_64-linux-gnu is a file where a directory is needed" in res.stderr
    assert not os.path.exists(marker)
    assert open(libdir).read() == "not a dir"


@needs_gcc
def test_image_ld_preload_never_reaches_host_processes(tmp_path, rootfs, host_gpu):
    """The image env carries LD_PRELOAD/LD_LIBRARY_PATH; ldconfig (here a static env dumper
    standing in for it) starts with an empty environment, chrooted in the rootfs."""
    src = tmp_path / "dump.c"
    src.write_text('#include <stdio.h>\nextern char **environ;\nint main(void){FILE*f=fopen("/ld.out","w");'
                   'for(char**e=environ;*e;e++)fprintf(f,"%s\\n",*e);fprintf(f,"done\\n");return fclose(f);}\n')
    fake = str(tmp_path / "ldconfig")
    subprocess.run(["gcc", "-static", "-o", fake, str(src)], check=True)
    env = ["PATH=/bin", "LD_PRELOAD=/evil.so", "LD_LIBRARY_PATH=/evil"]
    res = _run(tmp_path, rootfs, _lib_edits(host_gpu), "echo $LD_PRELOAD", {"ldconfig": "@" + fake}, env=env)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "/evil.so"  # the image did have it
    assert open(os.path.join(rootfs, "ld.out")).read() == "done\n"
