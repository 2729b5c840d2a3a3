"""Feature-gated device classes (NVIDIA_GDS=enabled, ...) from real device nodes."""

import os
import stat

import pytest

from nct.driver.model import Roots
from nct.edits.classes import class_edits


def gated_edits(root: str, mode: str):
    """The runtime's gated class edits with `root` as its driver and dev root."""
    return class_edits(Roots(driver=root, dev=root), mode)


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


def test_symlinks_leaving_the_dev_root_are_not_devices(dev_root, tmp_path):
    """issue 13: the runtime's gated path and `cdi generate --mode` are one planner. A
    name under the dev root that is a symlink (here to the host's /dev/null, and through a
    linked directory to a node outside the root) is no device of that root: the runtime
    used to stat() through it and grant the host's device to the container."""
    os.symlink("/dev/null", dev_root / "dev/nvidia-fs7")
    outside = tmp_path / "outside"
    outside.mkdir()
    os.mknod(outside / "uverbs9", stat.S_IFCHR | 0o666, os.makedev(240, 9))
    (dev_root / "dev/infiniband/uverbs9").symlink_to(outside / "uverbs9")
    assert [d.path for d in gated_edits(str(dev_root), "gds").device_nodes] == ["/dev/nvidia-fs0", "/dev/nvidia-fs1"]
    assert [d.path for d in gated_edits(str(dev_root), "mofed").device_nodes] == [
        "/dev/infiniband/uverbs0", "/dev/infiniband/rdma_cm"]


def test_natural_order_and_one_entry_per_node(dev_root):
    """Nodes in natural order (nvidia-fs2 before nvidia-fs10), as `cdi generate` lists them;
    nvidia-nvswitchctl, matched by both nvswitch patterns, once."""
    for minor in (10, 2):
        os.mknod(dev_root / f"dev/nvidia-fs{minor}", stat.S_IFCHR | 0o666, os.makedev(240, minor))
    os.mknod(dev_root / "dev/nvidia-nvswitchctl", stat.S_IFCHR | 0o666, os.makedev(507, 255))
    assert [d.path for d in gated_edits(str(dev_root), "gds").device_nodes] == [
        "/dev/nvidia-fs0", "/dev/nvidia-fs1", "/dev/nvidia-fs2", "/dev/nvidia-fs10"]
    assert [d.path for d in gated_edits(str(dev_root), "nvswitch").device_nodes] == ["/dev/nvidia-nvswitchctl"]


def test_nodes_from_the_dev_root_files_from_the_driver_root(dev_root, tmp_path):
    """As upstream's discoverers: a class's nodes under the dev root, its files (cufile.json,
    /run/udev) under the driver root."""
    driver = tmp_path / "driver"
    (driver / "etc").mkdir(parents=True)
    (driver / "run/udev").mkdir(parents=True)
    (driver / "etc/cufile.json").write_text("{}")
    e = class_edits(Roots(driver=str(driver), dev=str(dev_root)), "gds")
    assert [d.host_path for d in e.device_nodes] == [str(dev_root / "dev/nvidia-fs0"), str(dev_root / "dev/nvidia-fs1")]
    assert sorted((m.container_path, m.host_path) for m in e.mounts) == [
        ("/etc/cufile.json", str(driver / "etc/cufile.json")), ("/run/udev", str(driver / "run/udev"))]


def test_every_gated_variable_names_a_device_class():
    """NVIDIA_GDS/MOFED/GDRCOPY/NVSWITCH name the classes of the one table that `cdi generate
    --mode` uses too."""
    from nct.edits.classes import DEVICE_CLASSES
    from nct.request.parse import GATED_MODES

    assert [mode for _, mode in GATED_MODES] == list(DEVICE_CLASSES)


def test_group_nodes_as_every_spec_node(dev_root):
    """A gated node that is not world rw carries its group and adds it to the container's
    groups, as every node of a spec (and `cdi generate --mode`) does; not with
    no-additional-gids-for-device-nodes."""
    from nct.edits.planner import PlanOptions

    os.chown(dev_root / "dev/nvidia-fs1", 0, 44)
    os.chmod(dev_root / "dev/nvidia-fs1", 0o660)
    roots = Roots(driver=str(dev_root), dev=str(dev_root))
    e = class_edits(roots, "gds", PlanOptions(target="spec"))
    assert [(d.path, d.gid) for d in e.device_nodes] == [("/dev/nvidia-fs0", None), ("/dev/nvidia-fs1", 44)]
    assert e.device_nodes[1].file_mode == stat.S_IFCHR | 0o660
    assert e.additional_gids == [44]
    assert class_edits(roots, "gds", PlanOptions(target="spec", no_additional_gids=True)).additional_gids == []
