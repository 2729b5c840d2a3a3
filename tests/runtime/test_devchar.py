"""/dev/char links for devices the shim injects when the engine uses runc's systemd cgroup
driver: systemd resolves DeviceAllow=/dev/char/M:m through them and drops what it cannot
resolve on `systemctl daemon-reload` (upstream's "Failed to initialize NVML: Unknown Error").
Real device nodes (mknod) under a temp dev root, links in a temp /dev/char."""

from __future__ import annotations

import os
import stat

import pytest

from nct.runtime.create import dev_char_links, systemd_cgroups

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (mknod)")


class Log:
    def __init__(self):
        self.lines = []

    def debug(self, msg):
        self.lines.append(msg)


@pytest.mark.parametrize("path,want", [
    ("system.slice:docker:0123abcd", True),
    ("kubepods-besteffort-pod1.slice:cri-containerd:abc", True),
    ("/docker/0123abcd", False),
    ("/kubepods/besteffort/pod1/abc", False),
    ("a:b", False),
    (None, False),
])
def test_systemd_driver_detected_from_cgroups_path(path, want):
    spec = {"linux": {"cgroupsPath": path}} if path is not None else {"linux": {}}
    assert systemd_cgroups(spec) is want


def _dev(root, name, major, minor, kind=stat.S_IFCHR):
    p = root / "dev" / name
    p.parent.mkdir(parents=True, exist_ok=True)
    os.mknod(p, kind | 0o666, os.makedev(major, minor))
    return p


def test_links_for_added_char_devices_only(tmp_path):
    root = tmp_path / "driver"
    gpu0 = _dev(root, "nvidia0", 195, 0)
    ctl = _dev(root, "nvidiactl", 195, 255)
    _dev(root, "nvidia1", 195, 7)  # another device at that path: not linked
    _dev(root, "blk", 7, 0, stat.S_IFBLK)
    old = {"linux": {"devices": [{"path": "/dev/null", "type": "c", "major": 1, "minor": 3}]}}
    new = {"linux": {"devices": old["linux"]["devices"] + [
        {"path": "/dev/nvidia0", "type": "c", "major": 195, "minor": 0},
        {"path": "/dev/nvidiactl", "type": "c", "major": 195, "minor": 255},
        {"path": "/dev/nvidia1", "type": "c", "major": 195, "minor": 1},
        {"path": "/dev/blk", "type": "b", "major": 7, "minor": 0},
        {"path": "/dev/absent", "type": "c", "major": 195, "minor": 9},
    ]}}
    char = tmp_path / "char"
    log = Log()
    assert dev_char_links(old, new, (str(root), "/nonexistent"), log, str(char)) == 2
    assert sorted(os.listdir(char)) == ["195:0", "195:255"]
    assert os.readlink(char / "195:0") == str(gpu0) and os.readlink(char / "195:255") == str(ctl)
    assert os.stat(char / "195:0").st_rdev == os.makedev(195, 0)
    # again: nothing to do; a stale link is replaced
    assert dev_char_links(old, new, (str(root),), log, str(char)) == 0
    os.unlink(char / "195:0")
    os.symlink("/nonexistent/old-node", char / "195:0")
    assert dev_char_links(old, new, (str(root),), log, str(char)) == 1
    assert os.readlink(char / "195:0") == str(gpu0)
    assert any("Creating link" in line for line in log.lines)


def test_nothing_added_nothing_linked(tmp_path):
    spec = {"linux": {"devices": [{"path": "/dev/null", "type": "c", "major": 1, "minor": 3}]}}
    assert dev_char_links(spec, spec, ("/",), Log(), str(tmp_path / "char")) == 0
    assert not (tmp_path / "char").exists()
