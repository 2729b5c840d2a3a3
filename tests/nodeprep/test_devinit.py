"""nct.nodeprep.devinit: --load-kmods planning (pure) and its thin layer against temp trees:
real mknod, real fork + chroot + execve of a static fake modprobe built with gcc."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from nct.nodeprep import devinit
from nct.driver.model import DeviceNode, Roots

FIXTURES = Path(__file__).parent.parent / "driver" / "fixtures"  # procfs captures, shared with the discovery tests

PROC_DEVICES = """Character devices:
  1 mem
195 nvidia-frontend
195 nvidia
234 nvidia-uvm
235 nvidia-caps
236 nvidia-caps-imex-channels

Block devices:
  8 sd
"""
MODULES_ALL = """nvidia_uvm 1437696 0 - Live 0x0000000000000000 (POE)
nvidia_modeset 1290240 0 - Live 0x0000000000000000 (POE)
nvidia 56807424 2 nvidia_uvm,nvidia_modeset, Live 0x0000000000000000 (POE)
ext4 937984 1 - Live 0x0000000000000000
"""


def _is_root() -> bool:
    return os.geteuid() == 0


def _init_ns() -> bool:
    try:
        return not devinit.in_user_namespace(Path("/proc/self/uid_map").read_text())
    except OSError:
        return False


needs_root = pytest.mark.skipif(not _is_root(), reason="mknod of character devices needs root")
needs_init_ns = pytest.mark.skipif(not _init_ns(), reason="init_driver skips inside a user namespace")


# --- pure planning ------------------------------------------------------------------------


def test_modules_to_load():
    assert devinit.modules_to_load(MODULES_ALL) == []
    assert devinit.modules_to_load("") == ["nvidia", "nvidia-uvm", "nvidia-modeset"]
    only_nvidia = "nvidia 56807424 0 - Live 0x0 (POE)\nnvidia_drm 1 0 - Live 0x0\n"
    assert devinit.modules_to_load(only_nvidia) == ["nvidia-uvm", "nvidia-modeset"]
    # a prefix is not the module: nvidia_uvm_extra does not make nvidia_uvm loaded
    assert devinit.modules_to_load("nvidia_uvm_extra 1 0 - Live 0x0\nnvidia 1 0 - Live 0x0\n") == [
        "nvidia-uvm", "nvidia-modeset"]
    assert devinit.loaded_modules("nvidia-uvm 1 0 - Live 0x0\n") == {"nvidia_uvm"}


def test_user_namespace_detection():
    assert not devinit.in_user_namespace("         0          0 4294967295\n")
    assert devinit.in_user_namespace("         0     100000      65536\n")
    assert devinit.in_user_namespace("0 0 4294967295\n1 1 1\n")
    assert devinit.in_user_namespace("")


def test_init_plan_follows_majors_and_minors():
    from nct.driver.procfs import parse_devices

    majors = parse_devices(PROC_DEVICES)
    plan = devinit.init_plan("/r", majors, [0, 5], caps=[(1, 0o400), (12, 0o444)], imex=[3])
    got = [(n.host_path, n.major, n.minor, n.mode) for n in plan]
    assert got == [
        ("/r/dev/nvidiactl", 195, 255, 0o666),
        ("/r/dev/nvidia0", 195, 0, 0o666),
        ("/r/dev/nvidia5", 195, 5, 0o666),  # Device Minor, not index
        ("/r/dev/nvidia-caps/nvidia-cap1", 235, 1, 0o400),
        ("/r/dev/nvidia-caps/nvidia-cap12", 235, 12, 0o444),
        ("/r/dev/nvidia-caps-imex-channels/channel3", 236, 3, 0o666),
        ("/r/dev/nvidia-uvm", 234, 0, 0o666),
        ("/r/dev/nvidia-uvm-tools", 234, 1, 0o666),
        ("/r/dev/nvidia-modeset", 195, 254, 0o666),
    ]
    assert all(n.host_path == "/r" + n.path and devinit.dev_root_of(n) == "/r" for n in plan)
    # no uvm major (module not loaded): no uvm nodes; no modeset module: no modeset node
    only_nvidia = {"nvidia": 195}
    paths = [n.host_path for n in devinit.init_plan("/", only_nvidia, [0], modeset=False, caps=[(1, 0o400)], imex=[0])]
    assert paths == ["/dev/nvidiactl", "/dev/nvidia0"]
    assert devinit.init_plan("/", {}, [0, 1]) == []


def test_one_node_planner_for_load_kmods_and_the_system_commands():
    """issue 13: --load-kmods (tolerant), create-device-nodes --control-devices and
    create-dev-char-symlinks --create-all (strict) plan with one node_plan."""
    from nct.driver.procfs import parse_devices

    majors = parse_devices(PROC_DEVICES)
    control = [(n.host_path, n.major, n.minor) for n in devinit.control_device_nodes("/r", majors, "/p")]
    assert sorted(control) == [("/r/dev/nvidia-modeset", 195, 254), ("/r/dev/nvidia-uvm", 234, 0),
                               ("/r/dev/nvidia-uvm-tools", 234, 1), ("/r/dev/nvidiactl", 195, 255)]
    assert control == [(n.host_path, n.major, n.minor) for n in devinit.init_plan("/r", majors, [])]
    mig = {"config": 1, "monitor": 2, "gpu0/gi0/access": 3, "gpu0/gi0/ci0/access": 4, "gpu1/gi0/access": 21}
    every = {n.host_path for n in devinit.all_possible_device_nodes("/r", majors, mig, 2, "/p")}
    assert every == {p for p, _, _ in control} | {"/r/dev/nvidia0", "/r/dev/nvidia1"} | {
        f"/r/dev/nvidia-caps/nvidia-cap{m}" for m in (1, 2, 3, 4, 21)}
    with pytest.raises(devinit.NodeError, match="^/p/devices: no 'nvidia-uvm' device major"):
        devinit.control_device_nodes("/r", {"nvidia": 195}, "/p")
    assert [n.host_path for n in devinit.init_plan("/r", {"nvidia": 195}, [])] == ["/r/dev/nvidiactl", "/r/dev/nvidia-modeset"]


def test_imex_ids():
    assert devinit.imex_ids(("0", "7", "all", "channel9", "x", "7", "2047", "2048", str(1 << 20))) == [0, 7, 9, 2047]


def test_missing_nodes(tmp_path):
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev" / "nvidiactl").write_text("")
    (tmp_path / "dev" / "nvidia-uvm").symlink_to(tmp_path / "nowhere")
    plan = devinit.init_plan(str(tmp_path), {"nvidia": 195, "nvidia-uvm": 500}, [0], modeset=False)
    assert [Path(n.host_path).name for n in devinit.missing_nodes(plan)] == ["nvidia0", "nvidia-uvm-tools"]


def test_modprobe_argv():
    assert devinit.modprobe_argv("/", "nvidia-uvm") == ["/sbin/modprobe", "nvidia-uvm"]
    assert devinit.modprobe_argv("/run/nvidia/driver", "nvidia") == [
        "chroot", "/run/nvidia/driver", "/sbin/modprobe", "nvidia"]
    with pytest.raises(devinit.NodeError):
        devinit.modprobe_argv("/", "ext4")


# --- mknod without following symlinks -------------------------------------------------------


@needs_root
def test_create_node_mode_and_rdev(tmp_path):
    old = os.umask(0o077)
    try:
        node = DeviceNode("/dev/nvidia-caps/nvidia-cap3", str(tmp_path / "dev/nvidia-caps/nvidia-cap3"), 235, 3, 0o444)
        assert devinit.create_node(node) is True
    finally:
        os.umask(old)
    st = os.lstat(node.host_path)
    assert stat.S_ISCHR(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o444
    assert (os.major(st.st_rdev), os.minor(st.st_rdev)) == (235, 3)
    assert stat.S_IMODE(os.stat(tmp_path / "dev/nvidia-caps").st_mode) == 0o755
    assert devinit.create_node(node) is False  # exists: left alone


@needs_root
def test_create_node_never_follows_symlinks(tmp_path):
    root = tmp_path / "root"
    (root / "dev").mkdir(parents=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    # a dangling symlink at the node's path: left alone, nothing made at its target
    (root / "dev/nvidia-uvm").symlink_to(elsewhere / "uvm")
    assert devinit.create_node(DeviceNode("/dev/nvidia-uvm", str(root / "dev/nvidia-uvm"), 234, 0, 0o666)) is False
    assert os.path.islink(root / "dev/nvidia-uvm") and not os.path.lexists(elsewhere / "uvm")
    # a symlinked directory below the dev root is refused, not followed
    (root / "dev/nvidia-caps").symlink_to(elsewhere)
    with pytest.raises(OSError):
        devinit.create_node(DeviceNode("/dev/nvidia-caps/nvidia-cap1", str(root / "dev/nvidia-caps/nvidia-cap1"), 235, 1, 0o400))
    assert list(elsewhere.iterdir()) == []
    # a regular file is "something at the path" too
    (root / "dev/nvidiactl").write_text("x")
    assert devinit.create_node(DeviceNode("/dev/nvidiactl", str(root / "dev/nvidiactl"), 195, 255, 0o666)) is False
    assert (root / "dev/nvidiactl").read_text() == "x"


# --- init_driver against a temp node, with a static fake modprobe ----------------------------

FAKE_MODPROBE = r"""
#include <stdio.h>
#include <string.h>
#include <unistd.h>
extern char **environ;
int main(int argc, char **argv) {
    FILE *f = fopen("/modprobe.log", "a");
    if (!f) return 3;
    fprintf(f, "argv:");
    for (int i = 0; i < argc; i++) fprintf(f, " %s", argv[i]);
    int n = 0;
    for (char **e = environ; *e; e++) n++;
    fprintf(f, "\nenv: %d\n", n);
    fclose(f);
    if (argc > 1 && strcmp(argv[1], "nvidia-hang") == 0) pause();
    if (argc > 1 && strcmp(argv[1], "nvidia-modeset") == 0) {
        fprintf(stderr, "modprobe: FATAL: Module nvidia-modeset not found.\n");
        return 1;
    }
    return 0;
}
"""


@pytest.fixture(scope="module")
def fake_modprobe(tmp_path_factory) -> Path:
    if shutil.which("gcc") is None:
        pytest.skip("needs gcc")
    d = tmp_path_factory.mktemp("modprobe")
    (d / "modprobe.c").write_text(FAKE_MODPROBE)
    res = subprocess.run(["gcc", "-static", "-O1", "-o", str(d / "modprobe"), str(d / "modprobe.c")],
                         capture_output=True, text=True)
    if res.returncode != 0:
        pytest.skip(f"gcc -static failed: {res.stderr[-300:]}")
    return d / "modprobe"


def make_node(tmp_path: Path, modprobe: Path | None, modules: str | None = MODULES_ALL,
              mig_minors: bool = False) -> Roots:
    """A driver root (with /sbin/modprobe when given), procfs files for two GPUs with
    Device Minors 0 and 3 (GPU minor 3 with one MIG instance), an empty /dev."""
    root = tmp_path / "root"
    (root / "sbin").mkdir(parents=True)
    (root / "dev").mkdir()
    if modprobe is not None:
        shutil.copy(modprobe, root / "sbin/modprobe")
    proc = tmp_path / "proc"
    (proc / "driver/nvidia/gpus").mkdir(parents=True)
    (proc / "devices").write_text(PROC_DEVICES)
    if modules is not None:
        (proc / "modules").write_text(modules)
    info = (FIXTURES / "information.a100").read_text()
    for bus, minor in (("0000:07:00.0", 0), ("0000:0f:00.0", 3)):
        d = proc / "driver/nvidia/gpus" / bus
        d.mkdir()
        text = "\n".join(
            f"Device Minor: \t {minor}" if line.startswith("Device Minor") else
            f"Bus Location: \t {bus}" if line.startswith("Bus Location") else line
            for line in info.splitlines())
        (d / "information").write_text(text + "\n")
    caps = proc / "driver/nvidia/capabilities"
    (caps / "mig").mkdir(parents=True)
    (caps / "mig/config").write_text("DeviceFileMinor: 1\nDeviceFileMode: 256\nDeviceFileModify: 1\n")
    (caps / "mig/monitor").write_text("DeviceFileMinor: 2\nDeviceFileMode: 292\nDeviceFileModify: 1\n")
    ci = caps / "gpu3/mig/gi1/ci0"
    ci.mkdir(parents=True)
    (caps / "gpu3/mig/gi1/access").write_text("DeviceFileMinor: 30\nDeviceFileMode: 292\nDeviceFileModify: 1\n")
    (ci / "access").write_text("DeviceFileMinor: 31\nDeviceFileMode: 292\nDeviceFileModify: 1\n")
    if mig_minors:  # as the driver: every possible instance listed, only existing ones made
        (proc / "driver/nvidia-caps").mkdir(parents=True)
        (proc / "driver/nvidia-caps/mig-minors").write_text(
            "config 1\nmonitor 2\ngpu0/gi1/access 3\ngpu3/gi0/access 29\ngpu3/gi1/access 30\n"
            "gpu3/gi1/ci0/access 31\ngpu3/gi1/ci1/access 32\n")
    return Roots(driver=str(root), dev=str(root), proc=str(proc))


def rdev(path: Path) -> tuple[int, int, int]:
    st = os.lstat(path)
    assert stat.S_ISCHR(st.st_mode), path
    return os.major(st.st_rdev), os.minor(st.st_rdev), stat.S_IMODE(st.st_mode)


@needs_root
@needs_init_ns
@pytest.mark.parametrize("mig_minors", [True, False], ids=["mig-minors", "capability-files"])
def test_init_creates_missing_nodes(tmp_path, mig_minors):
    roots = make_node(tmp_path, None, mig_minors=mig_minors)
    dev = Path(roots.dev) / "dev"
    (dev / "nvidia0").write_text("")  # something else is there: left alone
    report = devinit.init_driver(roots, imex_channels=("2", "all"))
    assert report.skipped is None and report.loaded == () and report.failed == ()
    assert rdev(dev / "nvidiactl") == (195, 255, 0o666)
    assert rdev(dev / "nvidia3") == (195, 3, 0o666)
    assert not (dev / "nvidia1").exists()
    assert (dev / "nvidia0").read_text() == ""
    assert rdev(dev / "nvidia-uvm") == (234, 0, 0o666)
    assert rdev(dev / "nvidia-uvm-tools") == (234, 1, 0o666)
    assert rdev(dev / "nvidia-modeset") == (195, 254, 0o666)
    caps = dev / "nvidia-caps"
    assert {p.name: rdev(p) for p in caps.iterdir()} == {
        "nvidia-cap1": (235, 1, 0o400), "nvidia-cap2": (235, 2, 0o444),
        "nvidia-cap30": (235, 30, 0o444), "nvidia-cap31": (235, 31, 0o444)}
    assert rdev(dev / "nvidia-caps-imex-channels/channel2") == (236, 2, 0o666)
    assert sorted(Path(p).relative_to(dev).as_posix() for p in report.created) == sorted([
        "nvidiactl", "nvidia3", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset", "nvidia-caps/nvidia-cap1",
        "nvidia-caps/nvidia-cap2", "nvidia-caps/nvidia-cap30", "nvidia-caps/nvidia-cap31",
        "nvidia-caps-imex-channels/channel2"])
    # the steady state: everything there, nothing made
    assert devinit.init_driver(roots, imex_channels=("2",)).created == ()


@needs_root
@needs_init_ns
def test_init_no_imex_creation_and_dangling_symlink(tmp_path):
    roots = make_node(tmp_path, None)
    dev = Path(roots.dev) / "dev"
    target = tmp_path / "target"
    (dev / "nvidia-uvm").symlink_to(target)
    report = devinit.init_driver(roots, imex_channels=("2",), create_imex_channels=False)
    assert not (dev / "nvidia-caps-imex-channels").exists()
    assert os.path.islink(dev / "nvidia-uvm") and not os.path.lexists(target)
    assert str(dev / "nvidia-uvm") not in report.created
    assert rdev(dev / "nvidia-uvm-tools") == (234, 1, 0o666)


@needs_root
@needs_init_ns
def test_modprobe_only_missing_modules_empty_env(tmp_path, fake_modprobe, monkeypatch):
    monkeypatch.setenv("NCT_SECRET", "must-not-leak")
    roots = make_node(tmp_path, fake_modprobe, modules="nvidia 56807424 0 - Live 0x0 (POE)\n")
    report = devinit.init_driver(roots)
    log = (Path(roots.driver) / "modprobe.log").read_text().splitlines()
    # chrooted (the log is inside the driver root), only the modules /proc/modules lacks
    assert log == ["argv: /sbin/modprobe nvidia-uvm", "env: 0", "argv: /sbin/modprobe nvidia-modeset", "env: 0"]
    # the failing modeset load is a warning, not an error; the rest goes on
    assert report.loaded == ("nvidia-uvm",) and report.failed == ("nvidia-modeset",)
    dev = Path(roots.dev) / "dev"
    assert rdev(dev / "nvidia-uvm") == (234, 0, 0o666)
    assert not (dev / "nvidia-modeset").exists()  # nvidia_modeset is still not loaded


@needs_root
@needs_init_ns
def test_nothing_loaded_when_all_listed(tmp_path, fake_modprobe):
    roots = make_node(tmp_path, fake_modprobe)
    devinit.init_driver(roots)
    assert not (Path(roots.driver) / "modprobe.log").exists()


@needs_root
def test_run_modprobe_status_and_deadline(tmp_path, fake_modprobe):
    roots = make_node(tmp_path, fake_modprobe)
    assert devinit.run_modprobe(roots.driver, "nvidia-uvm") == (0, "")
    assert devinit.run_modprobe(roots.driver, "nvidia-modeset") == (
        1, "modprobe: FATAL: Module nvidia-modeset not found.")
    status, detail = devinit.run_modprobe(roots.driver, "nvidia-hang", timeout=0.5)
    assert status == -9 and "timed out" in detail
    # no modprobe in the root: exec fails in the child, reported, nothing raised
    empty = tmp_path / "empty"
    empty.mkdir()
    assert devinit.run_modprobe(str(empty), "nvidia") == (127, "/sbin/modprobe: No such file or directory")


@needs_root
def test_user_namespace_skips(tmp_path):
    """In a user namespace (unshare -U, mapped root) init does nothing at all."""
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare")
    roots = make_node(tmp_path, None)
    code = ("import sys; from nct.nodeprep import devinit; from nct.driver.model import Roots;"
            f"r = devinit.init_driver(Roots(driver={roots.driver!r}, dev={roots.dev!r}, proc={roots.proc!r}));"
            "print(r.skipped)")
    import sys

    res = subprocess.run(["unshare", "-Ur", sys.executable, "-c", code], capture_output=True, text=True)
    if res.returncode != 0 and "unshare" in res.stderr:
        pytest.skip(f"user namespaces unavailable: {res.stderr.strip()[-200:]}")
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "user namespace"
    assert list((Path(roots.dev) / "dev").iterdir()) == []


@needs_root
@needs_init_ns
def test_init_path_stays_light(tmp_path, fake_modprobe):
    """Even when it runs modprobe, init imports neither subprocess nor logging nor click."""
    import sys

    roots = make_node(tmp_path, fake_modprobe, modules="")
    code = ("import sys; from nct.nodeprep import devinit; from nct.driver.model import Roots;"
            f"r = devinit.init_driver(Roots(driver={roots.driver!r}, dev={roots.dev!r}, proc={roots.proc!r}));"
            "print(r.failed, sorted(m for m in ('subprocess', 'logging', 'click', 'typing', 'dataclasses')"
            " if m in sys.modules))")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "('nvidia-modeset',) []"
    assert res.stderr == ""
