"""In-root path resolution (rootfs.Root) on a real directory tree: absolute and relative
symlinks, "..", loops, files in the way; with openat2 and with the O_NOFOLLOW walk."""

from __future__ import annotations

import os
import stat

import pytest

from nct.container import rootfs as rootfs_mod
from nct.container.rootfs import Root
from nct.errors import ContainerError


@pytest.fixture(params=["openat2", "walk"])
def root(request, tmp_path, monkeypatch):
    monkeypatch.setattr(rootfs_mod, "USE_OPENAT2", request.param == "openat2")
    r = tmp_path / "root"
    (r / "usr/lib").mkdir(parents=True)
    (r / "etc").mkdir()
    (r / "etc/hostname").write_text("container")
    host = tmp_path / "host"
    (host / "etc").mkdir(parents=True)
    (host / "etc/hostname").write_text("HOST")
    os.symlink(str(host), r / "abs")                    # absolute link to a host dir
    os.symlink("../../etc", r / "usr/lib/rel")          # relative link
    os.symlink("../../../../../../etc", r / "usr/up")   # climbs above the root
    os.symlink("loop2", r / "loop1")
    os.symlink("loop1", r / "loop2")
    os.symlink("/proc/self/root", r / "magic")          # a magic link name, read as a string
    with Root(str(r)) as root:
        root.host = str(host)
        yield root


def read(root: Root, path: str) -> str:
    fd = root.open(path, os.O_RDONLY)
    try:
        return os.read(fd, 100).decode()
    finally:
        os.close(fd)


def test_symlinks_resolve_inside_root(root):
    assert read(root, "/etc/hostname") == "container"
    assert read(root, "/usr/lib/rel/hostname") == "container"
    assert read(root, "/usr/up/hostname") == "container"
    assert read(root, "/../../../etc/hostname") == "container"
    assert root.resolve("/usr/up/hostname") == "/etc/hostname"
    with pytest.raises(FileNotFoundError):
        root.open("/abs/etc/hostname")  # would be the host file if followed on the host


def test_loops_and_magic_links(root):
    with pytest.raises(ContainerError, match="too many levels|Too many levels|symbolic"):
        root.open("/loop1/x")
    # /proc/self/root is just the string "/proc/self/root" inside the root: not there
    with pytest.raises(FileNotFoundError):
        root.open("/magic/etc/hostname")


def test_mkdirs_through_absolute_link_creates_inside(root):
    fd = root.mkdirs("/abs/etc/new/dir")
    os.close(fd)
    inside = os.path.join(root.path, root.host.lstrip("/"), "etc/new/dir")
    assert os.path.isdir(inside)
    assert stat.S_IMODE(os.stat(inside).st_mode) == 0o755
    assert os.listdir(os.path.join(root.host, "etc")) == ["hostname"]


def test_file_where_directory_is_needed(root):
    with pytest.raises(ContainerError, match="not a directory"):
        root.mkdirs("/etc/hostname/sub")
    with pytest.raises(ContainerError, match="file where a directory is needed"):
        root.mkdirs("/etc/hostname")
    with pytest.raises(ContainerError, match="is a directory where a file is needed"):
        root.mount_target("/etc", directory=False)


def test_mount_target_follows_final_symlink_in_root(root):
    os.symlink(os.path.join(root.host, "etc/hostname"), os.path.join(root.path, "usr/bin-target"))
    fd = root.mount_target("/usr/bin-target", directory=False)
    os.close(fd)
    assert open(os.path.join(root.host, "etc/hostname")).read() == "HOST"
    assert os.path.isfile(os.path.join(root.path, root.host.lstrip("/"), "etc/hostname"))


def test_write_file_and_symlink_are_atomic_and_in_root(root):
    root.write_file("/abs/etc/hostname", b"new", 0o600)
    assert open(os.path.join(root.host, "etc/hostname")).read() == "HOST"
    p = os.path.join(root.path, root.host.lstrip("/"), "etc/hostname")
    assert open(p).read() == "new" and stat.S_IMODE(os.stat(p).st_mode) == 0o600
    assert root.symlink("libcuda.so.1", "/usr/lib/libcuda.so") is True
    assert root.symlink("libcuda.so.1", "/usr/lib/libcuda.so") is False
    assert os.readlink(os.path.join(root.path, "usr/lib/libcuda.so")) == "libcuda.so.1"
    assert root.create_file_if_absent("/etc/hostname", b"x") is False
    with pytest.raises(ContainerError, match="directory is in the way"):
        root.symlink("x", "/usr/lib")


def test_mount_target_symlink_loop_is_an_error(root):
    os.symlink("/self", os.path.join(root.path, "self"))
    with pytest.raises(ContainerError, match="too many levels"):
        root.mount_target("/self", directory=False)
