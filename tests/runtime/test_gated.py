"""Feature-gated device classes (NVIDIA_GDS=enabled, ...) from real device nodes."""

import os
import stat

import pytest

from nct.runtime.jit import gated_edits


@pytest.fixture
def dev_root(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("mknod needs root")
    root = tmp_path / "root"
    (root / "dev/infiniband").mkdir(parents=True)
    (root / "etc").mkdir()
    for name, minor in (("dev/nvidia-fs0", 0), ("dev/nvidia-fs1", 1), ("dev/infiniband/uverbs0", 192),
                        ("dev/infiniband/rdma_cm", 255)):
        os.mknod(root / name, stat.S_IFCHR | 0o666, os.makedev(240, minor))
    (root / "dev/gdrdrv").write_text("not a device")
    (root / "etc/cufile.json").write_text("{}")
    return root


def test_gds(dev_root):
    e = gated_edits(str(dev_root), "gds")
    assert [(d.path, d.major, d.minor, d.type) for d in e.device_nodes] == [
        ("/dev/nvidia-fs0", 240, 0, "c"), ("/dev/nvidia-fs1", 240, 1, "c")]
    assert e.device_nodes[0].host_path == str(dev_root / "dev/nvidia-fs0")
    assert [m.container_path for m in e.mounts] == ["/etc/cufile.json"]  # /run/udev absent


def test_mofed_and_absent_or_fake_nodes(dev_root):
    assert [d.path for d in gated_edits(str(dev_root), "mofed").device_nodes] == [
        "/dev/infiniband/uverbs0", "/dev/infiniband/rdma_cm"]
    assert gated_edits(str(dev_root), "gdrcopy").is_empty()  # a regular file is not a device
    assert gated_edits(str(dev_root), "nvswitch").is_empty()
