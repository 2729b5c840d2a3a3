"""`nvidia-ctk system create-device-nodes | create-dev-char-symlinks` against a temp tree
with real character device nodes (mknod): never the host's /dev."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from nct.cli import system

CTK = shutil.which("nvidia-ctk")
pytestmark = [
    pytest.mark.skipif(CTK is None, reason="nvidia-ctk console script not installed"),
    pytest.mark.skipif(os.geteuid() != 0, reason="mknod of character devices needs root"),
]

PROC_DEVICES = """Character devices:
  1 mem
  4 /dev/vc/0
195 nvidia-frontend
195 nvidia
234 nvidia-uvm
235 nvidia-caps
236 nvidia-caps-imex-channels

Block devices:
  8 sd
"""
MIG_MINORS = """config 1
monitor 2
gpu0/gi0/access 3
gpu0/gi0/ci0/access 4
gpu0/gi0/ci1/access 5
gpu0/gi1/access 12
gpu1/gi0/access 21
gpu2/gi0/access 30
"""


@pytest.fixture
def node(tmp_path):
    """A driver root with /proc files and an empty /dev; NCT_PROC_ROOT points at its proc."""
    root = tmp_path / "root"
    (root / "dev").mkdir(parents=True)
    proc = root / "proc"
    (proc / "driver" / "nvidia-caps").mkdir(parents=True)
    (proc / "devices").write_text(PROC_DEVICES)
    (proc / "driver" / "nvidia-caps" / "mig-minors").write_text(MIG_MINORS)
    for bus in ("0000:01:00.0", "0000:02:00.0"):
        (proc / "driver" / "nvidia" / "gpus" / bus).mkdir(parents=True)
    return root


def run(root: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    e = {k: v for k, v in os.environ.items()
         if k not in ("DRIVER_ROOT", "NVIDIA_DRIVER_ROOT", "DEV_ROOT", "NVIDIA_DEV_ROOT", "ROOT",
                      "DEV_CHAR_PATH", "DRY_RUN", "CREATE_ALL")}
    e["NCT_PROC_ROOT"] = str(root / "proc")
    e.update(env or {})
    return subprocess.run([CTK, "system", *args], capture_output=True, text=True, env=e, timeout=60)


def mknod(path: Path, major: int, minor: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(major, minor))


def dev(path: Path) -> tuple[int, int, int]:
    st = os.lstat(path)
    assert stat.S_ISCHR(st.st_mode), path
    return os.major(st.st_rdev), os.minor(st.st_rdev), st.st_mode & 0o777


def links(d: Path) -> dict[str, str]:
    return {p.name: os.readlink(p) for p in sorted(d.iterdir())}


# --- create-device-nodes -------------------------------------------------------------------


def test_control_devices_are_created(node):
    old = os.umask(0o077)  # mode must be 0666 whatever the umask
    try:
        res = run(node, "create-device-nodes", "--driver-root", str(node), "--control-devices")
    finally:
        os.umask(old)
    assert res.returncode == 0, res.stderr
    assert dev(node / "dev/nvidiactl") == (195, 255, 0o666)
    assert dev(node / "dev/nvidia-modeset") == (195, 254, 0o666)
    assert dev(node / "dev/nvidia-uvm") == (234, 0, 0o666)
    assert dev(node / "dev/nvidia-uvm-tools") == (234, 1, 0o666)
    # idempotent: existing nodes are skipped
    res = run(node, "create-device-nodes", "--root", str(node), "--control-devices")
    assert res.returncode == 0 and res.stderr.count("already exists") == 4


def test_dev_root_separate_from_driver_root(node, tmp_path):
    devroot = tmp_path / "devroot"
    res = run(node, "create-device-nodes", "--control-devices", env={"DRIVER_ROOT": str(node), "DEV_ROOT": str(devroot)})
    assert res.returncode == 0, res.stderr
    assert dev(devroot / "dev/nvidiactl")[:2] == (195, 255)
    assert not (node / "dev/nvidiactl").exists()


def test_dry_run_changes_nothing(node):
    res = run(node, "create-device-nodes", "--driver-root", str(node), "--control-devices", "--dry-run")
    assert res.returncode == 0, res.stderr
    assert f"Running: mknod --mode=0666 {node}/dev/nvidiactl c 195 255" in res.stderr
    assert f"Running: mknod --mode=0666 {node}/dev/nvidia-uvm-tools c 234 1" in res.stderr
    assert list((node / "dev").iterdir()) == []


def test_load_kernel_modules_argv(node):
    res = run(node, "create-device-nodes", "--driver-root", str(node), "--load-kernel-modules", "--dry-run")
    assert res.returncode == 0, res.stderr
    assert [line for line in res.stderr.splitlines() if "modprobe" in line] == [
        f"Running: chroot {node} /sbin/modprobe nvidia",
        f"Running: chroot {node} /sbin/modprobe nvidia-uvm",
        f"Running: chroot {node} /sbin/modprobe nvidia-modeset",
    ]
    assert system.modprobe_argv("/", "nvidia") == ["/sbin/modprobe", "nvidia"]
    with pytest.raises(system.NodeError):
        system.modprobe_argv("/", "ext4")


def test_modprobe_failure_is_one_line(node):
    if shutil.which("chroot") is None:
        pytest.skip("chroot not installed")
    # the driver root has no /sbin/modprobe: chroot fails, and nothing after it runs
    res = run(node, "create-device-nodes", "--driver-root", str(node), "--load-kernel-modules", "--control-devices",
              env={"DRY_RUN": ""})
    assert res.returncode == 1
    err = [line for line in res.stderr.splitlines() if line.startswith("nvidia-ctk: ")]
    assert len(err) == 1 and f"failed to load module nvidia: chroot {node} /sbin/modprobe nvidia exited" in err[0]
    assert "Traceback" not in res.stderr
    assert list((node / "dev").iterdir()) == []


def test_missing_major_is_a_clear_error(node):
    (node / "proc/devices").write_text("Character devices:\n195 nvidia\n")
    res = run(node, "create-device-nodes", "--driver-root", str(node), "--control-devices")
    assert res.returncode == 1
    assert res.stderr.splitlines()[-1] == (
        f"nvidia-ctk: {node}/proc/devices: no 'nvidia-uvm' device major (is the nvidia-uvm module loaded?)"
    )
    (node / "proc/devices").write_text("garbage\n")
    res = run(node, "create-device-nodes", "--driver-root", str(node), "--control-devices")
    assert res.returncode == 1 and "Traceback" not in res.stderr
    assert res.stderr.splitlines()[-1].startswith(f"nvidia-ctk: {node}/proc/devices")


# --- create-dev-char-symlinks --------------------------------------------------------------


def test_links_for_existing_nodes(node):
    mknod(node / "dev/nvidia0", 195, 0)
    mknod(node / "dev/nvidiactl", 195, 255)
    mknod(node / "dev/nvidia-uvm", 234, 0)
    mknod(node / "dev/nvidia-caps/nvidia-cap1", 235, 1)
    mknod(node / "dev/nvidia-fs0", 240, 0)  # skipped
    mknod(node / "dev/nvidia-nvswitchctl", 241, 0)  # skipped
    mknod(node / "dev/nvidia-nvlink", 242, 0)  # skipped
    (node / "dev/nvidia-not-a-device").write_text("")  # not a char device
    char = node / "dev/char"
    res = run(node, "create-dev-char-symlinks", "--driver-root", str(node), "--dev-char-path", str(char))
    assert res.returncode == 0, res.stderr
    d = f"{node}/dev"
    assert links(char) == {
        "195:0": f"{d}/nvidia0", "195:255": f"{d}/nvidiactl", "234:0": f"{d}/nvidia-uvm",
        "235:1": f"{d}/nvidia-caps/nvidia-cap1",
    }
    assert os.stat(char / "195:0").st_rdev == os.makedev(195, 0)  # resolves to the node
    # idempotent, and a stale link is replaced
    os.unlink(char / "195:0")
    os.symlink("/nonexistent", char / "195:0")
    res = run(node, "create-dev-char-symlinks", "--driver-root", str(node), "--dev-char-path", str(char))
    assert res.returncode == 0
    assert res.stderr.strip().splitlines() == [f"Creating link {char}/195:0 => {d}/nvidia0"]
    assert os.readlink(char / "195:0") == f"{d}/nvidia0"
    assert sorted(p.name for p in char.iterdir()) == ["195:0", "195:255", "234:0", "235:1"]


def test_udev_style_relative_links_are_kept(node):
    mknod(node / "dev/nvidia0", 195, 0)
    char = node / "dev/char"
    char.mkdir()
    os.symlink("../nvidia0", char / "195:0")
    res = run(node, "create-dev-char-symlinks", "--driver-root", str(node), "--dev-char-path", str(char))
    assert res.returncode == 0 and os.readlink(char / "195:0") == "../nvidia0"


def test_env_vars_and_dry_run(node):
    mknod(node / "dev/nvidia0", 195, 0)
    char = node / "dev/char"
    res = run(node, "create-dev-char-symlinks",
              env={"DRIVER_ROOT": str(node), "DEV_CHAR_PATH": str(char), "DRY_RUN": "true"})
    assert res.returncode == 0, res.stderr
    assert f"Creating link {char}/195:0 => {node}/dev/nvidia0" in res.stderr
    assert not char.exists()
    res = run(node, "create-dev-char-symlinks", env={"NVIDIA_DRIVER_ROOT": str(node), "DEV_CHAR_PATH": str(char)})
    assert links(char) == {"195:0": f"{node}/dev/nvidia0"}


def test_quiet_suppresses_progress(node):
    mknod(node / "dev/nvidia0", 195, 0)
    res = subprocess.run([CTK, "--quiet", "system", "create-dev-char-symlinks", "--driver-root", str(node),
                          "--dev-char-path", str(node / "c")], capture_output=True, text=True,
                         env={**os.environ, "NCT_PROC_ROOT": str(node / "proc")}, timeout=60)
    assert res.returncode == 0 and res.stderr == ""
    assert (node / "c/195:0").is_symlink()


def _expected_all(node: Path, gpus: int) -> dict[str, str]:
    d = f"{node}/dev"
    want = {
        "195:254": f"{d}/nvidia-modeset", "195:255": f"{d}/nvidiactl",
        "234:0": f"{d}/nvidia-uvm", "234:1": f"{d}/nvidia-uvm-tools",
        "235:1": f"{d}/nvidia-caps/nvidia-cap1", "235:2": f"{d}/nvidia-caps/nvidia-cap2",
    }
    caps = {0: [3, 4, 5, 12], 1: [21], 2: [30]}
    for i in range(gpus):
        want[f"195:{i}"] = f"{d}/nvidia{i}"
        for m in caps[i]:
            want[f"235:{m}"] = f"{d}/nvidia-caps/nvidia-cap{m}"
    return want


def test_create_all_counts_gpus_from_procfs(node):
    char = node / "char"
    res = run(node, "create-dev-char-symlinks", "--driver-root", str(node), "--dev-char-path", str(char), "--create-all")
    assert res.returncode == 0, res.stderr
    assert links(char) == _expected_all(node, 2)


def test_create_all_counts_gpus_from_pci_sysfs(node):
    pci = node / "sys/bus/pci/devices"
    for bdf, vendor, cls in [
        ("0000:01:00.0", "0x10de", "0x030200"),  # 3D controller
        ("0000:02:00.0", "0x10de", "0x030000"),  # VGA
        ("0000:03:00.0", "0x10de", "0x040300"),  # NVIDIA audio function: not a GPU
        ("0000:04:00.0", "0x8086", "0x030000"),  # other vendor
        ("0000:05:00.0", "0x10de", "0x030000"),
    ]:
        (pci / bdf).mkdir(parents=True)
        (pci / bdf / "vendor").write_text(vendor + "\n")
        (pci / bdf / "class").write_text(cls + "\n")
    char = node / "char"
    res = run(node, "create-dev-char-symlinks", "--driver-root", str(node), "--dev-char-path", str(char), "--create-all")
    assert res.returncode == 0, res.stderr
    assert links(char) == _expected_all(node, 3)


def test_create_all_with_device_nodes(node):
    char = node / "char"
    res = run(node, "create-dev-char-symlinks", "--driver-root", str(node), "--dev-char-path", str(char),
              "--create-all", "--create-device-nodes", "--load-kernel-modules", "--dry-run")
    assert res.returncode == 0, res.stderr
    assert f"Running: chroot {node} /sbin/modprobe nvidia" in res.stderr
    assert f"Running: mknod --mode=0666 {node}/dev/nvidiactl c 195 255" in res.stderr
    assert not char.exists() and list((node / "dev").iterdir()) == []
    res = run(node, "create-dev-char-symlinks", "--driver-root", str(node), "--dev-char-path", str(char),
              "--create-all", "--create-device-nodes")
    assert res.returncode == 0, res.stderr
    assert dev(node / "dev/nvidia-uvm")[:2] == (234, 0)
    assert os.stat(char / "234:0").st_rdev == os.makedev(234, 0)  # link resolves to the new node


def test_create_options_need_create_all(node):
    res = run(node, "create-dev-char-symlinks", "--driver-root", str(node), "--dev-char-path", str(node / "c"),
              "--create-device-nodes", "--load-kernel-modules")
    assert res.returncode == 0, res.stderr
    assert "only applicable with --create-all" in res.stderr
    assert "modprobe" not in res.stderr and list((node / "dev").iterdir()) == []


def test_create_all_without_mig_support_and_no_gpus(node):
    os.unlink(node / "proc/driver/nvidia-caps/mig-minors")
    (node / "proc/devices").write_text("Character devices:\n195 nvidia\n234 nvidia-uvm\n")
    char = node / "char"
    res = run(node, "create-dev-char-symlinks", "--driver-root", str(node), "--dev-char-path", str(char), "--create-all")
    assert res.returncode == 0, res.stderr
    assert sorted(links(char)) == ["195:0", "195:1", "195:254", "195:255", "234:0", "234:1"]
    shutil.rmtree(node / "proc/driver/nvidia/gpus")
    res = run(node, "create-dev-char-symlinks", "--driver-root", str(node), "--dev-char-path", str(node / "c2"),
              "--create-all")
    assert res.returncode == 0 and "No NVIDIA devices found" in res.stderr and not (node / "c2").exists()


def test_create_all_mig_minors_need_caps_major(node):
    (node / "proc/devices").write_text("Character devices:\n195 nvidia\n234 nvidia-uvm\n")
    res = run(node, "create-dev-char-symlinks", "--driver-root", str(node), "--dev-char-path", str(node / "c"),
              "--create-all")
    assert res.returncode == 1
    assert res.stderr.splitlines()[-1] == (
        f"nvidia-ctk: {node}/proc/devices: no 'nvidia-caps' device major (is the nvidia-caps module loaded?)"
    )
