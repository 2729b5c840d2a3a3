"""Issue 9 §1: a device node in the image must never be opened by a host process. A loop
device over a scratch file stands in for the host's disk; nodes of it are planted where
ldconfig (or nct) would open them: ldconfig's temp cache file /etc/ld.so.cache~ (opened
O_CREAT|O_WRONLY|O_TRUNC by glibc's ldconfig, then renamed), a lib*.so link in a lib dir
ldconfig scans, an /etc/ld.so.conf.d entry. After the run the disk's bytes must be unchanged,
no process may have opened a planted node (inotify), and the cache must still be built.

Two independent defences (nct/container/ldconfig.py): ldconfig sees the root only through a
nodev,nosuid recursive copy, and runs in a deny-all device cgroup. Each is shown to hold on
its own (the other disabled in the child), and with both disabled the same image does
overwrite the disk (the negative control: the test detects the attack). cgroup v1 (devices
controller) and v2 (a BPF device program on the unified hierarchy); a new kernel and the
simulated old one (tests/e2e/oldkernel.py: mount(2) remounts instead of mount_setattr)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from e2e.scratchdisk import EVIL_LIB, LIBDIR, WHERE, OpenWatch, plant, scratch_disk  # noqa: F401 - fixture
from realparts import build_lib, needs_gcc, needs_root

pytestmark = [needs_root, needs_gcc]
CLEAN_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}

# Child-side switches for the layer tests: replace one defence by a no-op.
NO_NODEV = """
def _plain(root):  # the root as is: no nodev copy (pivot_root refuses a non-mount: chroot)
    return os.open(root.path, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
L._sealed_root = _plain
"""
NO_JAIL = """
cgroups.JailSite.jail = lambda self: cgroups.DeviceJail(problem="disabled by the test")
"""


def run_ldconfig(rootfs: str, *, jail: int, kernel: str, oldkernel_bin: str | None = None, disable: str = "",
                 ldconfig: str = "@/sbin/ldconfig", write_conf: bool = True,
                 early: bool = False) -> subprocess.CompletedProcess:
    """nct's run_ldconfig on `rootfs` in a fresh process (jail: which cgroup version holds the
    deny-all device cgroup), printing "OK" or "ERR <one line>". `early`: the child is started
    first and told to run only after the caller's work (start_ldconfig, as the hooks do)."""
    code = "import os\nfrom nct.container import cgroups, ldconfig as L\n"
    code += f"cgroups.JAIL_VERSIONS = {(jail,) if jail else ()}\n"
    code += (NO_NODEV if "nodev" in disable else "") + (NO_JAIL if "jail" in disable else "")
    code += textwrap.dedent(f"""
        from nct.container.rootfs import Root
        from nct.errors import NctError
        try:
            with Root({rootfs!r}) as r:
                if {early!r}:
                    p = L.start_ldconfig(r, ldconfig={ldconfig!r})
                    import time; time.sleep(0.05)  # the caller's mounts and links
                    p.run(["/{LIBDIR}", "/opt/nv/lib"], write_conf={write_conf!r})
                else:
                    L.run_ldconfig(r, ["/{LIBDIR}", "/opt/nv/lib"], ldconfig={ldconfig!r}, write_conf={write_conf!r})
        except NctError as e:
            print("ERR", e)
        else:
            print("OK")
    """)
    prefix = [oldkernel_bin] if kernel == "old" else []
    env = dict(CLEAN_ENV, **{k: v for k, v in os.environ.items() if k == "PYTHONPATH"})
    return subprocess.run([*prefix, sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)


@pytest.fixture(scope="module")
def oldkernel_bin(tmp_path_factory) -> str:
    from e2e import oldkernel

    return str(oldkernel.build(tmp_path_factory.mktemp("oldkernel") / "oldkernel"))


@pytest.fixture
def image(rootfs):
    """The busybox rootfs with one real shared library in its lib dir (the cache must list it)."""
    build_lib(os.path.join(rootfs, LIBDIR), "libnctgood.so.1", "libnctgood.so.1")
    return rootfs


def cache_lists(rootfs: str, soname: str) -> bool:
    out = subprocess.run(["/sbin/ldconfig", "-p", "-C", os.path.join(rootfs, "etc/ld.so.cache")],
                         capture_output=True, text=True).stdout
    return soname in out


def _jail_made(res: subprocess.CompletedProcess) -> bool:
    return "without a deny-all device cgroup" not in res.stderr


def _skip_without_v2_jail(res: subprocess.CompletedProcess, jail: int) -> None:
    if jail == 2 and not _jail_made(res):
        pytest.skip(f"no cgroup v2 device program possible here: {res.stderr.strip()[-200:]}")


@pytest.mark.parametrize("kernel", ["new", "old"])
@pytest.mark.parametrize("jail", [1, 2])
@pytest.mark.parametrize("where", WHERE)
def test_image_device_node_never_reaches_the_host_disk(image, scratch_disk, oldkernel_bin, where, jail, kernel):
    node = plant(Path(image), scratch_disk.rdev, where)
    watch = OpenWatch()
    watch.add(node)
    try:
        res = run_ldconfig(image, jail=jail, kernel=kernel, oldkernel_bin=oldkernel_bin)
        opened = watch.opened()
    finally:
        watch.close()
    _skip_without_v2_jail(res, jail)
    assert res.stdout.strip() == "OK", res.stdout + res.stderr
    assert _jail_made(res), res.stderr
    assert scratch_disk.unchanged(), "the host disk was written through the image's node"
    assert opened == [], f"a host process opened the image's device node: {opened}"
    assert cache_lists(image, "libnctgood.so.1")  # the container still works
    if where == "cache~":  # ldconfig's temp file was replaced, not written through
        assert stat.S_ISREG(os.lstat(os.path.join(image, "etc/ld.so.cache")).st_mode)


@pytest.mark.parametrize("start", ["right away", "early"])
@pytest.mark.parametrize("kernel", ["new", "old"])
@pytest.mark.parametrize("layer", ["nodev only", "cgroup v1 only", "cgroup v2 only"])
def test_each_defence_holds_alone(image, scratch_disk, oldkernel_bin, layer, kernel, start):
    """nodev alone, the device cgroup alone (v1 and v2): ldconfig's open of the linked node is
    refused either way, whether its child was started right away or early (in its jail while
    the caller worked). The cache~ node is removed before ldconfig runs, so this uses the
    lib link and the conf entry, which only the two defences keep closed."""
    jail = 2 if "v2" in layer else 1
    disable = "jail" if layer == "nodev only" else "nodev"
    nodes = [plant(Path(image), scratch_disk.rdev, w) for w in ("lib", "conf")]
    watch = OpenWatch()
    for n in nodes:
        watch.add(n)
    try:
        res = run_ldconfig(image, jail=jail, kernel=kernel, oldkernel_bin=oldkernel_bin, disable=disable,
                           early=start == "early")
        opened = watch.opened()
    finally:
        watch.close()
    _skip_without_v2_jail(res, jail)
    assert res.stdout.strip() == "OK", res.stdout + res.stderr
    assert opened == [], f"{layer}: a host process opened the image's device node: {opened}"
    assert scratch_disk.unchanged()
    assert cache_lists(image, "libnctgood.so.1")


def test_negative_control_without_both_defences_the_linked_node_is_opened(image, scratch_disk):
    """The lib link with nodev and the device cgroup both disabled: the host ldconfig opens
    the node (inotify sees it). Proves the tests above detect the attack."""
    node = plant(Path(image), scratch_disk.rdev, "lib")
    watch = OpenWatch()
    watch.add(node)
    try:
        res = run_ldconfig(image, jail=1, kernel="new", disable="nodev,jail")
        opened = watch.opened()
    finally:
        watch.close()
    assert res.stdout.strip() == "OK", res.stdout + res.stderr
    assert opened == [str(node)], "ldconfig did not open the linked node: the attack is not exercised"


def test_negative_control_cache_temp_file_without_defences(image, scratch_disk):
    """ldconfig truncates and writes /etc/ld.so.cache~ in place: with every defence off
    (nodev, cgroup and nct's removal of a non-regular temp file), the disk is overwritten."""
    plant(Path(image), scratch_disk.rdev, "cache~")
    code = NO_NODEV + NO_JAIL + "L.Root.remove_unless_regular = lambda self, path: False\n"
    env = dict(CLEAN_ENV, **{k: v for k, v in os.environ.items() if k == "PYTHONPATH"})
    script = ("import os\nfrom nct.container import cgroups, ldconfig as L\n" + code + textwrap.dedent(f"""
        from nct.container.rootfs import Root
        with Root({image!r}) as r:
            L.run_ldconfig(r, ["/{LIBDIR}"], write_conf=True)
        print("OK")
    """))
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env)
    assert res.stdout.strip() == "OK", res.stderr
    assert not scratch_disk.unchanged(), "the unprotected run did not write the disk: attack not exercised"


@pytest.mark.parametrize("kind", ["block", "char"])
def test_nct_never_opens_image_nodes_it_reads(image, scratch_disk, kind):
    """nct's own reads in the root (ld.so.conf(.d) when writing the CDI hook's conf files,
    the musl path file, the compat libcuda) open O_PATH, check for a regular file and only
    then re-open: a device node there is skipped or refused, never opened."""
    from nct.container import compat, ldconfig
    from nct.container.rootfs import Root
    from nct.errors import ContainerError

    rdev = scratch_disk.rdev if kind == "block" else os.makedev(1, 3)
    mode = stat.S_IFBLK if kind == "block" else stat.S_IFCHR
    conf = plant(Path(image), rdev, "conf", kind=mode)
    (Path(image) / "etc/alpine-release").write_text("3.19\n")
    musl = Path(image) / f"etc/ld-musl-{os.uname().machine}.path"
    os.mknod(musl, mode | 0o666, rdev)
    compat_dir = Path(image) / "usr/local/cuda/compat"
    compat_dir.mkdir(parents=True)
    lib = compat_dir / "libcuda.so.560.1"
    os.mknod(lib, mode | 0o666, rdev)
    watch = OpenWatch()
    for n in (conf, musl, lib):
        watch.add(n)
    try:
        with Root(image) as r:
            files = ldconfig.prepare_conf(r, ["/opt/nv/lib"])
            assert any("/opt/nv/lib" in data.decode() for _, data in files)
            with pytest.raises(ContainerError, match="not a regular file"):
                ldconfig.update_musl_path(r, ["/opt/nv/lib"])
            with pytest.raises(ContainerError, match="not a regular file"):
                r.open_regular("/usr/local/cuda/compat/libcuda.so.560.1")
            assert compat.wants_compat(r, "/usr/local/cuda/compat", "550.54.15") is False
        assert watch.opened() == []
    finally:
        watch.close()
    assert scratch_disk.unchanged()


PROBE_C = r'''
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
static const char *try_write(const char *path) {
    int fd = open(path, O_RDWR);
    if (fd < 0) return strerror(errno);
    char buf[512];
    memset(buf, 'X', sizeof buf);
    ssize_t n = write(fd, buf, sizeof buf);
    fsync(fd);
    close(fd);
    return n == (ssize_t)sizeof buf ? "written" : "short write";
}
int main(void) {
    FILE *out = fopen("/ldconfig.out", "w");
    if (!out) return 3;
    fprintf(out, "block %s\n", try_write("/opt-disk-node"));
    fprintf(out, "char %s\n", try_write("/image-null"));
    return fclose(out) ? 5 : 0;
}
'''


@pytest.mark.parametrize("kernel", ["new", "old"])
@pytest.mark.parametrize("layer", ["both", "nodev only", "cgroup v1 only", "cgroup v2 only", "none"])
def test_image_ldconfig_cannot_reach_host_devices(image, scratch_disk, oldkernel_bin, tmp_path, layer, kernel):
    """`nvidia-container-cli configure` without `--ldconfig=@...` runs the image's own
    ldconfig (upstream's default). Here it is a static program that opens a node of the host
    disk and a char node shipped in the image, O_RDWR, and writes: nodev answers EACCES, the
    deny-all device cgroup EPERM; with both off ("none", the control) it writes the disk."""
    if kernel == "old" and layer == "none":
        pytest.skip("the control runs once")
    src = tmp_path / "probe.c"
    src.write_text(PROBE_C)
    dst = Path(image) / "sbin/ldconfig"
    dst.parent.mkdir(exist_ok=True)
    if dst.is_symlink() or dst.exists():
        dst.unlink()
    subprocess.run(["gcc", "-O1", "-static", "-o", str(dst), str(src)], check=True)
    os.mknod(Path(image) / "opt-disk-node", stat.S_IFBLK | 0o666, scratch_disk.rdev)
    os.mknod(Path(image) / "image-null", stat.S_IFCHR | 0o666, os.makedev(1, 3))
    jail = 2 if "v2" in layer else 1
    disable = {"both": "", "nodev only": "jail", "cgroup v1 only": "nodev", "cgroup v2 only": "nodev",
               "none": "nodev,jail"}[layer]
    res = run_ldconfig(image, jail=jail, kernel=kernel, oldkernel_bin=oldkernel_bin, disable=disable,
                       ldconfig="/sbin/ldconfig", write_conf=False)  # allow-ldconfig-from-container
    _skip_without_v2_jail(res, jail)
    assert res.stdout.strip() == "OK", res.stdout + res.stderr
    report = dict(line.split(" ", 1) for line in (Path(image) / "ldconfig.out").read_text().splitlines())
    if layer == "none":
        assert report == {"block": "written", "char": "written"}
        assert not scratch_disk.unchanged()
        return
    want = "Permission denied" if layer in ("both", "nodev only") else "Operation not permitted"
    assert report == {"block": want, "char": want}, report
    assert scratch_disk.unchanged()


@pytest.mark.parametrize("kind", ["fifo", "socket", "symlink"])
def test_non_regular_cache_temp_file_is_replaced(image, kind):
    """A FIFO at /etc/ld.so.cache~ would block ldconfig's open until its timeout (the container
    fails after 30 s), a socket fails it, a symlink is refused by ldconfig's O_NOFOLLOW:
    nct removes whatever non-regular file is there first, and the cache is built."""
    import socket

    temp = os.path.join(image, "etc/ld.so.cache~")
    if kind == "fifo":
        os.mkfifo(temp)
    elif kind == "socket":
        s = socket.socket(socket.AF_UNIX)
        s.bind(temp)
        s.close()
    else:
        os.symlink("/etc/passwd", temp)
    res = run_ldconfig(image, jail=1, kernel="new")
    assert res.stdout.strip() == "OK", res.stdout + res.stderr
    assert cache_lists(image, "libnctgood.so.1")
    assert not os.path.lexists(temp)


def test_without_a_cgroup_ldconfig_still_runs_on_the_nodev_view(image, scratch_disk):
    """No cgroup can be made (a cgroup namespace, a read-only cgroupfs): one warning line
    naming why, and the nodev view alone keeps the disk out."""
    node = plant(Path(image), scratch_disk.rdev, "lib")
    watch = OpenWatch()
    watch.add(node)
    try:
        res = run_ldconfig(image, jail=0, kernel="new")  # JAIL_VERSIONS = (): no hierarchy tried
        opened = watch.opened()
    finally:
        watch.close()
    assert res.stdout.strip() == "OK", res.stdout + res.stderr
    assert "warning: ldconfig runs without a deny-all device cgroup" in res.stderr
    assert opened == [] and scratch_disk.unchanged()


def test_mounts_at_or_below_parses_mountinfo():
    from nct.container.ldconfig import mounts_at_or_below

    info = ("21 1 0:19 / /run rw - tmpfs tmpfs rw\n"
            "30 21 8:1 / /run/c/root rw - ext4 /dev/sda1 rw\n"
            "31 30 0:5 / /run/c/root/dev rw - tmpfs tmpfs rw\n"
            "32 30 8:1 /vol /run/c/root/my\\040vol rw - ext4 /dev/sda1 rw\n"
            "33 21 8:1 / /run/c/rootfs-other rw - ext4 /dev/sda1 rw\n")
    assert mounts_at_or_below(info, "/run/c/root/") == ["/run/c/root", "/run/c/root/dev", "/run/c/root/my vol"]
