"""nvidia-cdi-hook on odd images and odd input, through the real console script: every
failure is one line on stderr and exit 1, never a Python traceback; a container root that is
the host's / by another name ("//") is refused before anything is done."""

from __future__ import annotations

import json
import os
import stat
import subprocess

import pytest

from realparts import needs_gcc, needs_root
from test_cdihook_cli import _compat_conf, _compat_lib, hook, state_for

pytestmark = pytest.mark.usefixtures("hook_form")  # alone and as an nct-steps step


def one_line_error(res: subprocess.CompletedProcess) -> str:
    assert "Traceback" not in res.stderr, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("nvidia-cdi-hook: "), res.stderr
    return lines[0]


# ---- chmod: a dangling symlink is skipped (upstream skips paths that do not exist) ----------
def test_chmod_skips_dangling_symlink(rootfs):
    dri = os.path.join(rootfs, "dev/dri")
    os.makedirs(dri, mode=0o700)
    os.symlink("/dev/dri/no-such-card", os.path.join(dri, "card0"))
    with open(os.path.join(dri, "card1"), "w"):
        pass
    os.chmod(os.path.join(dri, "card1"), 0o600)
    res = hook("chmod", "--mode", "755", "--path", "/dev/dri/card0", "--path", "/dev/dri/card1",
               state=state_for(rootfs))
    assert res.returncode == 0, res.stderr
    assert "Traceback" not in res.stderr
    assert stat.S_IMODE(os.stat(os.path.join(dri, "card1")).st_mode) == 0o755  # the rest still done
    assert os.readlink(os.path.join(dri, "card0")) == "/dev/dri/no-such-card"


# ---- unexpected OSError / ValueError: one line, exit 1 ---------------------------------------
def test_nul_in_root_path_is_one_line_error(tmp_path):
    """A ValueError from inside a hook command: the bundle's root.path holds a NUL byte
    (valid JSON, not a valid path; os.open raises ValueError, not OSError)."""
    spec = tmp_path / "config.json"
    spec.write_text(json.dumps({"root": {"path": "rootfs\u0000x"}}))
    link = tmp_path / "made-by-hook"
    res = hook("create-symlinks", "--link", f"x::{link}", "--container-spec", str(spec))
    assert res.returncode == 1
    assert "null" in one_line_error(res)
    assert not os.path.lexists(link)


def test_alpine_musl_path_is_a_directory_is_one_line(rootfs):
    """/etc/ld-musl-ARCH.path is a directory in the image: whatever update-ldcache decides,
    it is never a traceback (an error is one line, exit 1)."""
    os.unlink(os.path.join(rootfs, "etc/debian_version"))
    with open(os.path.join(rootfs, "etc/alpine-release"), "w") as f:
        f.write("3.19.0\n")
    os.mkdir(os.path.join(rootfs, f"etc/ld-musl-{os.uname().machine}.path"))
    res = hook("update-ldcache", "--folder", "/usr/lib", state=state_for(rootfs))
    assert "Traceback" not in res.stderr, res.stderr
    if res.returncode != 0:
        assert res.returncode == 1
        one_line_error(res)


# ---- enable-cuda-compat: digits that str.isdigit accepts but int() does not -------------------
@pytest.mark.parametrize("host", ["5²0.54.15", "550.5²", "²"])
@needs_gcc
def test_enable_cuda_compat_superscript_host_version(rootfs, host):
    _compat_lib(rootfs, "560.35.03")
    res = hook("enable-cuda-compat", f"--host-driver-version={host}", state=state_for(rootfs))
    assert res.returncode == 0, res.stderr
    assert "Traceback" not in res.stderr


@needs_gcc
@pytest.mark.parametrize("note", [b'{"CUDA Version": "12.6", "Driver": ["5\xc2\xb20", 550]}\0',
                                  b'{"CUDA Version": "12.6", "Driver": [550, ' + b"9" * 5000 + b"]}\0"])
def test_enable_cuda_compat_undecodable_driver_list(rootfs, note):
    """A branch list upstream's decoder refuses (a string, a number past int64) makes the
    note unusable: the majors decide (560 > 550), no traceback."""
    _compat_lib(rootfs, "560.35.03", note)
    res = hook("enable-cuda-compat", "--host-driver-version=550.54.15", state=state_for(rootfs))
    assert res.returncode == 0, res.stderr
    assert "Traceback" not in res.stderr
    assert _compat_conf(rootfs) == ["/usr/local/cuda/compat\n"]


@needs_gcc
def test_enable_cuda_compat_superscript_cuda_version(rootfs):
    _compat_lib(rootfs, "560.35.03", {"CUDA Version": "12.²", "Driver": [550, 560]})
    res = hook("enable-cuda-compat", "--host-cuda-version=12.4", state=state_for(rootfs))
    assert res.returncode == 0, res.stderr
    assert "Traceback" not in res.stderr


# ---- a root of "//" is the host's / ----------------------------------------------------------
@needs_root
@pytest.mark.parametrize("root", ["//", "//.", "/.//"])
def test_root_double_slash_refused(tmp_path, root):
    """Paths below are host paths under tmp_path, so a hook that took "//" for a container
    root would visibly act on the host (and only there)."""
    spec = tmp_path / "config.json"
    spec.write_text(json.dumps({"root": {"path": root}}))
    host_file = tmp_path / "host-file"
    host_file.write_text("host")
    os.chmod(host_file, 0o644)
    link = tmp_path / "made-by-hook"
    for args in (["create-symlinks", "--link", f"x::{link}"],
                 ["chmod", "--mode", "600", "--path", str(host_file)],
                 ["update-application-profile"]):
        res = hook(*args, "--container-spec", str(spec))
        assert res.returncode == 1, res.stderr
        assert "must not be /" in one_line_error(res)
    assert not os.path.lexists(link)
    assert stat.S_IMODE(os.stat(host_file).st_mode) == 0o644


@needs_root
def test_root_symlink_to_slash_refused(tmp_path):
    os.symlink("/", tmp_path / "rootfs")
    spec = tmp_path / "config.json"
    spec.write_text(json.dumps({"root": {"path": "rootfs"}}))
    link = tmp_path / "made-by-hook"
    res = hook("create-symlinks", "--link", f"x::{link}", "--container-spec", str(spec))
    assert res.returncode == 1 and "must not be /" in one_line_error(res)
    assert not os.path.lexists(link)
