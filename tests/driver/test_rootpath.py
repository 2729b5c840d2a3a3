"""In-root path resolution: absolute links, '..' and loops never leave the driver root."""

from __future__ import annotations

import os

from nct.driver.rootpath import host_path, resolve_in_root


def test_absolute_symlink_stays_in_root(tmp_path):
    root = tmp_path / "driver"
    (root / "usr/lib").mkdir(parents=True)
    (root / "usr/lib/libcuda.so.550").write_text("x")
    os.symlink("/usr/lib/libcuda.so.550", root / "usr/lib/libcuda.so.1")
    assert resolve_in_root(str(root), "/usr/lib/libcuda.so.1") == "/usr/lib/libcuda.so.550"


def test_escape_attempts(tmp_path):
    root = tmp_path / "driver"
    (root / "lib").mkdir(parents=True)
    secret = tmp_path / "secret"
    secret.write_text("host file")
    os.symlink("../../secret", root / "lib/up")  # '..' clamps at the root
    os.symlink(str(secret), root / "lib/abs")  # absolute: looked up inside the root
    assert resolve_in_root(str(root), "/lib/up") is None
    assert resolve_in_root(str(root), "/lib/abs") is None
    assert resolve_in_root(str(root), "/../../secret") is None


def test_loops_and_missing(tmp_path):
    root = tmp_path / "r"
    root.mkdir()
    os.symlink("b", root / "a")
    os.symlink("a", root / "b")
    assert resolve_in_root(str(root), "/a") is None
    assert resolve_in_root(str(root), "/missing/file") is None


def test_host_root_and_join(tmp_path):
    assert resolve_in_root("/", "/proc/self/..") == "/proc"
    assert host_path("/", "/dev/nvidia0") == "/dev/nvidia0"
    assert host_path("/run/nvidia/driver/", "/dev/nvidia0") == "/run/nvidia/driver/dev/nvidia0"
