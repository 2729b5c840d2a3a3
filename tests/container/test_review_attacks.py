"""Attacks from the security review of the device-node confinement and the volume policy
(issue 9 §1, §5; docs/security.md §3b, §3c): each is a hostile image (or container) against
the real parts; the ones that found a defect are regression tests, the rest are asserted
negative results (the defence held)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from e2e.scratchdisk import OpenWatch, scratch_disk  # noqa: F401 - fixture
from realparts import needs_gcc, needs_root
from test_devnodes import cache_lists, image, oldkernel_bin, run_ldconfig  # noqa: F401 - fixtures

pytestmark = [needs_root, needs_gcc]
PATH_MAX = 4096


def _mkdirs_at(base: str, comps: list[str]) -> int:
    """O_PATH fd of base/comps..., made one component at a time (the whole path may be longer
    than PATH_MAX: no single path string names it)."""
    fd = os.open(base, os.O_PATH | os.O_DIRECTORY)
    for c in comps:
        try:
            os.mkdir(c, 0o755, dir_fd=fd)
        except FileExistsError:
            pass
        nxt = os.open(c, os.O_PATH | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = nxt
    return fd


@pytest.mark.parametrize("kernel", ["new", "old"])
def test_volume_mounted_past_path_max_is_sealed_too(image, scratch_disk, oldkernel_bin, tmp_path, kernel):
    """A volume whose host-side mount point is longer than PATH_MAX (an image's `VOLUME` at a
    deep path: the in-root path stays below PATH_MAX, the rootfs prefix pushes it over). On
    kernels without mount_setattr every mount of ldconfig's copy is remounted by its path
    from mountinfo; that open failed (ENAMETOOLONG) and the mount was skipped, keeping device
    nodes (and writes) in ldconfig's view. With the device cgroup off (a cgroup namespace),
    ldconfig opened a node of the host's disk through a lib link in that volume."""
    from e2e.scratchdisk import EVIL_LIB

    want = PATH_MAX - len(image) + 8  # in-root length: the host path is over PATH_MAX
    assert want + 1 + len(EVIL_LIB) < PATH_MAX - 16, "rootfs path too short for this test"
    comps, left = [], want
    while left > 0:
        n = min(200, left - 1) if left > 201 else left - 1
        if n <= 0:
            break
        comps.append("d" * n)
        left -= n + 1
    inroot = "/" + "/".join(comps)
    assert len(image) + len(inroot) > PATH_MAX
    vol = tmp_path / "volume"
    vol.mkdir()
    os.mknod(vol / "disk-node", 0o60666, scratch_disk.rdev)
    os.symlink("disk-node", vol / EVIL_LIB)
    fd = _mkdirs_at(image, comps)
    subprocess.run(["mount", "--bind", str(vol), f"/proc/{os.getpid()}/fd/{fd}"], check=True)
    os.close(fd)
    (Path(image) / "etc/ld.so.conf.d").mkdir(parents=True, exist_ok=True)
    (Path(image) / "etc/ld.so.conf.d/deep.conf").write_text(inroot + "\n")
    watch = OpenWatch()
    watch.add(vol / "disk-node")
    try:
        res = run_ldconfig(image, jail=1, kernel=kernel, oldkernel_bin=oldkernel_bin, disable="jail")
        opened = watch.opened()
    finally:
        watch.close()
        subprocess.run(["umount", "-l", f"{vol}"], check=False)  # no-op: unmounted below
        fd = _mkdirs_at(image, comps)
        subprocess.run(["umount", "-l", f"/proc/{os.getpid()}/fd/{fd}"], check=False)
        os.close(fd)
    assert res.stdout.strip() == "OK", res.stdout + res.stderr
    assert opened == [], "ldconfig opened a host disk node in a volume mounted past PATH_MAX"
    assert scratch_disk.unchanged()
    assert sorted(os.listdir(vol)) == sorted(["disk-node", EVIL_LIB]), "ldconfig wrote into the volume"


@pytest.fixture
def mounts(tmp_path):
    """mount(8) in the test's namespace; everything is unmounted (lazily) afterwards."""
    made: list[str] = []

    def mount(*args: str) -> None:
        subprocess.run(["mount", *args], check=True)
        made.append(args[-1])

    yield mount
    for target in reversed(made):
        subprocess.run(["umount", "-l", target], check=False)


@pytest.mark.parametrize("how", ["whole tmpfs bound", "fresh container tmpfs"])
def test_shared_tmpfs_volume_is_a_volume(rootfs, tmp_path, mounts, how):
    """A tmpfs mounted on the host and bound whole into the container (`-v /dev/shm:/data`,
    a docker tmpfs named volume, a Kubernetes emptyDir with medium Memory shared by a pod's
    containers) has mount root "/" like the tmpfs runc makes for the container's /dev. It
    was taken for the container's own, so an image link led nct (host root) to create files
    in a directory shared with the host and other containers. A tmpfs is the container's own
    only when the same filesystem is mounted nowhere outside the container root; a fresh one
    (runc's /dev) still is."""
    from nct.container.rootfs import Root
    from nct.errors import ContainerError

    data = Path(rootfs) / "data"
    data.mkdir()
    if how == "whole tmpfs bound":
        shared = tmp_path / "host-shm"
        shared.mkdir()
        mounts("-t", "tmpfs", "-o", "mode=1777", "tmpfs", str(shared))
        (shared / "lib").mkdir()
        (shared / "keep").write_text("host data\n")
        mounts("--bind", str(shared), str(data))
    else:
        mounts("-t", "tmpfs", "tmpfs", str(data))
        (data / "lib").mkdir()
    os.symlink("/data/lib", Path(rootfs) / "nvlib")
    with Root(rootfs) as root:
        if how == "whole tmpfs bound":
            with pytest.raises(ContainerError, match=r"refusing to create /nvlib/libnvidia-ml\.so\.1 .* on a volume"):
                root.write_file("/nvlib/libnvidia-ml.so.1", b"x")
            with pytest.raises(ContainerError, match="on a volume"):
                root.symlink("libnvidia-ml.so.1", "/nvlib/libnvidia-ml.so")
            assert sorted(os.listdir(shared)) == ["keep", "lib"] and os.listdir(shared / "lib") == []
        else:
            root.write_file("/nvlib/libnvidia-ml.so.1", b"x")
            assert (data / "lib/libnvidia-ml.so.1").read_bytes() == b"x"


FD_PROBE_C = r'''
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>
static const char *kind(mode_t m) {
    return S_ISFIFO(m) ? "fifo" : S_ISDIR(m) ? "dir" : S_ISREG(m) ? "file" : S_ISCHR(m) ? "chr" :
           S_ISBLK(m) ? "blk" : S_ISSOCK(m) ? "sock" : S_ISLNK(m) ? "link" : "other";
}
int main(void) {
    char line[128];
    int n = 0;
    for (int fd = 0; fd <= 1024; fd++) {  /* /proc is hidden: ask each number */
        struct stat st;
        if (fcntl(fd, F_GETFD) < 0) continue;
        if (fstat(fd, &st) != 0) continue;
        snprintf(line, sizeof line, "%d %s\n", fd, kind(st.st_mode));
        n++;
        FILE *out = fopen("/ldconfig.out", "a");
        if (!out) return 3;
        fputs(line, out);
        fclose(out);
    }
    return n ? 0 : 4;
}
'''


@needs_gcc
def test_image_ldconfig_inherits_no_fd_but_its_stdio(tmp_path, rootfs, host_gpu):
    """`configure --pid` after `runc create` with the image's own ldconfig (a static probe):
    every fd open in it at execve, found by F_GETFD on 0..1024 (/proc is hidden), must be
    its three pipes: no fd of the host's /proc, cgroup dirs, sources, the root or the
    ldconfig binary reaches image code."""
    import json as _json
    import uuid

    from hookhelper import load
    from nct.container.apply import ApplyOptions, apply_edits
    from realparts import write_bundle, write_edits
    from test_container_runc import gpu_edits

    if not shutil.which("runc"):
        pytest.skip("needs runc")
    src = tmp_path / "probe.c"
    src.write_text(FD_PROBE_C)
    dst = Path(rootfs) / "sbin/ldconfig"
    dst.parent.mkdir(exist_ok=True)
    if dst.is_symlink() or dst.exists():
        dst.unlink()
    subprocess.run(["gcc", "-O1", "-static", "-o", str(dst), str(src)], check=True)
    bundle = os.path.dirname(rootfs)
    write_bundle(bundle, ["sh", "-c", "true"])
    edits, _ = load(write_edits(str(tmp_path / "edits.json"), gpu_edits(host_gpu)))
    cid = "nct-test-" + uuid.uuid4().hex[:10]
    try:
        with open(tmp_path / "out.txt", "w") as f:
            subprocess.run(["runc", "create", "--bundle", bundle, cid], stdout=f, stderr=f, stdin=subprocess.DEVNULL,
                           check=True, timeout=60)
        pid = _json.loads(subprocess.run(["runc", "state", cid], capture_output=True, text=True,
                                         check=True).stdout)["pid"]
        apply_edits(edits, rootfs, pid, ApplyOptions(ldconfig="/sbin/ldconfig"))
    finally:
        subprocess.run(["runc", "delete", "-f", cid], capture_output=True)
    assert (Path(rootfs) / "ldconfig.out").read_text().splitlines() == ["0 fifo", "1 fifo", "2 fifo"]


@pytest.mark.parametrize("kernel", ["new", "old"])
def test_image_ldconfig_fds_on_both_kernels(image, oldkernel_bin, tmp_path, kernel):
    """The same probe through run_ldconfig on a new and on the simulated old kernel (mount(2)
    and /proc/self/fd paths): three pipes only."""
    src = tmp_path / "probe.c"
    src.write_text(FD_PROBE_C)
    dst = Path(image) / "sbin/ldconfig"
    dst.parent.mkdir(exist_ok=True)
    if dst.is_symlink() or dst.exists():
        dst.unlink()
    subprocess.run(["gcc", "-O1", "-static", "-o", str(dst), str(src)], check=True)
    res = run_ldconfig(image, jail=1, kernel=kernel, oldkernel_bin=oldkernel_bin, ldconfig="/sbin/ldconfig",
                       write_conf=False)
    assert res.stdout.strip() == "OK", res.stdout + res.stderr
    assert (Path(image) / "ldconfig.out").read_text().splitlines() == ["0 fifo", "1 fifo", "2 fifo"]


PROCWALK_C = r'''
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
int main(void) {
    char pid[32] = {0}, path[512];
    FILE *in = fopen("/probe-target", "r");
    if (!in || !fgets(pid, sizeof pid, in)) return 3;
    pid[strcspn(pid, "\n")] = 0;
    snprintf(path, sizeof path, "/hostproc/%s/root/%s", pid, "@VICTIM@");
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    FILE *out = fopen("/ldconfig.out", "w");
    if (!out) return 4;
    if (fd < 0) { fprintf(out, "%s\n", strerror(errno)); }
    else { if (write(fd, "owned\n", 6) != 6) return 5; close(fd); fprintf(out, "written\n"); }
    return fclose(out) ? 6 : 0;
}
'''


@pytest.mark.parametrize("pivot", [True, False], ids=["pivot_root", "chroot"])
@pytest.mark.parametrize("kernel", ["new", "old"])
def test_image_ldconfig_cannot_walk_a_procfs_volume_to_the_host(image, oldkernel_bin, tmp_path, mounts, kernel, pivot):
    """`-v /proc:/host/proc:ro` (monitoring images do this) puts the host's procfs below the
    root; only the standard /proc was hidden. The image's own ldconfig (uid 0 with three
    capabilities) could follow /host/proc/PID/root of any host process it may ptrace (uid 0,
    capabilities a subset of its own: here a root process without capabilities) into that
    process's root, a writable host mount, and create host files. Every procfs, sysfs and
    other kernel filesystem mount below the root is detached from ldconfig's view."""
    victim_dir = tmp_path / "host-victim"
    victim_dir.mkdir()
    victim = victim_dir / "created-by-image"
    src = tmp_path / "probe.c"
    src.write_text(PROCWALK_C.replace("@VICTIM@", str(victim).lstrip("/")))
    dst = Path(image) / "sbin/ldconfig"
    dst.parent.mkdir(exist_ok=True)
    if dst.is_symlink() or dst.exists():
        dst.unlink()
    subprocess.run(["gcc", "-O1", "-static", "-o", str(dst), str(src)], check=True)
    (Path(image) / "hostproc").mkdir()
    mounts("--bind", "-o", "ro", "/proc", str(Path(image) / "hostproc"))
    target = subprocess.Popen(["setpriv", "--inh-caps=-all", "--bounding-set=-all", "sleep", "120"])
    try:
        (Path(image) / "probe-target").write_text(f"{target.pid}\n")
        res = _run_with(image, jail=1, ldconfig="/sbin/ldconfig", write_conf=False, no_pivot=not pivot,
                        prefix=(oldkernel_bin,) if kernel == "old" else ())
    finally:
        target.kill()
        target.wait()
    assert res.stdout.strip() == "OK", res.stdout + res.stderr
    report = (Path(image) / "ldconfig.out").read_text().strip()
    assert not victim.exists(), "the image's ldconfig created a host file through a procfs volume"
    assert report == "No such file or directory", report


FAKE_PROC = """
import os, sys
from nct.container import syscalls as sc
from nct.container.rootfs import Root
rootfs, node = sys.argv[1], sys.argv[2]
proc_self = os.open("/proc/self", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)  # as apply._enter
sc.unshare(sc.CLONE_NEWNS)
sc.mount(None, "/", None, sc.MS_REC | sc.MS_PRIVATE)
# the container's /proc after `configure --pid` entered it (a container that may mount, in its
# own user namespace): every /proc/self/fd/N names its node
sc.mount("tmpfs", "/proc", "tmpfs", 0, "mode=0755")
os.makedirs("/proc/self/fd")
for n in range(256):
    os.symlink(node, f"/proc/self/fd/{n}")
with Root(rootfs, proc_self=proc_self) as root:
    fd = root.open_regular("/etc/nct-conf")
    print(os.read(fd, 64).decode(errors="replace").splitlines()[0])
"""


def test_open_regular_reopens_through_our_procfs(rootfs, scratch_disk, tmp_path):
    """open_regular (and the O_PATH re-opens of Root.open and chmod) re-opened their fd by
    the path "/proc/self/fd/N": after entering a pivoted container's mount namespace that is
    the container's /proc, which a container able to mount (its own user namespace) replaces,
    so the re-open named any node it likes. They go through the host procfs fd taken before
    entering the namespace."""
    import sys

    node = tmp_path / "disk-node"
    os.mknod(node, 0o60666, scratch_disk.rdev)
    (Path(rootfs) / "etc").mkdir(exist_ok=True)
    (Path(rootfs) / "etc/nct-conf").write_text("root: a regular file\n")
    watch = OpenWatch()
    watch.add(node)
    try:
        res = subprocess.run([sys.executable, "-c", FAKE_PROC, rootfs, str(node)], capture_output=True, text=True,
                             timeout=60)
        opened = watch.opened()
    finally:
        watch.close()
    assert opened == [], "open_regular opened the node a fake /proc/self/fd named"
    assert res.returncode == 0 and res.stdout.startswith("root:"), res.stdout + res.stderr


def _run_with(image: str, extra: str = "", *, jail: int, disable: str = "", ldconfig: str = "@/sbin/ldconfig",
              write_conf: bool = True, no_pivot: bool = False, prefix: tuple[str, ...] = ()
              ) -> subprocess.CompletedProcess:
    """test_devnodes.run_ldconfig with `extra` code run in the child first, and no_pivot."""
    import sys
    import textwrap

    from test_devnodes import CLEAN_ENV, NO_JAIL, NO_NODEV

    code = "import os\nfrom nct.container import cgroups, ldconfig as L\n"
    code += f"cgroups.JAIL_VERSIONS = {(jail,)}\n" + textwrap.dedent(extra)
    code += (NO_NODEV if "nodev" in disable else "") + (NO_JAIL if "jail" in disable else "")
    code += textwrap.dedent(f"""
        from nct.container.rootfs import Root
        from nct.errors import NctError
        try:
            with Root({image!r}) as r:
                L.run_ldconfig(r, ["/usr/lib/x86_64-linux-gnu"], ldconfig={ldconfig!r}, write_conf={write_conf!r},
                               no_pivot={no_pivot!r})
        except NctError as e:
            print("ERR", e)
        else:
            print("OK")
    """)
    env = dict(CLEAN_ENV, **{k: v for k, v in os.environ.items() if k == "PYTHONPATH"})
    return subprocess.run([*prefix, sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)


@pytest.mark.parametrize("layer", ["both", "nodev only", "cgroup v1 only", "cgroup v2 only"])
def test_cache_temp_node_recreated_after_the_removal(image, scratch_disk, layer):
    """A running container (`configure --pid`, CAP_MKNOD is in docker's default set) puts the
    disk node back at /etc/ld.so.cache~ between nct's removal and ldconfig's
    O_CREAT|O_WRONLY|O_TRUNC open (here: the removal is skipped, the widest race). Each layer
    alone refuses the open: ldconfig fails (the container's own problem), the disk is
    untouched and the node never opened."""
    from e2e.scratchdisk import plant

    node = plant(Path(image), scratch_disk.rdev, "cache~")
    watch = OpenWatch()
    watch.add(node)
    jail = 2 if "v2" in layer else 1
    disable = {"both": "", "nodev only": "jail", "cgroup v1 only": "nodev", "cgroup v2 only": "nodev"}[layer]
    try:
        res = _run_with(image, "from nct.container.rootfs import Root\nRoot.remove_unless_regular = "
                        "lambda self, path: False\n", jail=jail, disable=disable)
        opened = watch.opened()
    finally:
        watch.close()
    if jail == 2 and "without a deny-all device cgroup" in res.stderr:
        pytest.skip("no cgroup v2 device program possible here")
    assert res.stdout.startswith("ERR ldconfig in container root"), res.stdout + res.stderr
    assert "ld.so.cache~" in res.stdout and ("Permission denied" in res.stdout
                                             or "Operation not permitted" in res.stdout), res.stdout
    assert opened == [] and scratch_disk.unchanged()


@pytest.mark.parametrize("how", ["renamed over", "hard link"])
def test_regular_file_swapped_for_a_node_after_the_check(rootfs, scratch_disk, tmp_path, monkeypatch, how):
    """open_regular checks the O_PATH fd (fstat: regular) and re-opens that fd's magic link:
    a running container that renames a disk node (or a hard link to one) over the name
    between the two gets the file it had, never the node. A hard link to a node is a node."""
    from nct.container.rootfs import Root
    from nct.errors import ContainerError

    etc = Path(rootfs) / "etc"
    etc.mkdir(exist_ok=True)
    (etc / "nct-conf").write_text("the regular file\n")
    node = tmp_path / "disk-node"
    os.mknod(node, 0o60666, scratch_disk.rdev)
    watch = OpenWatch()
    watch.add(node)
    real_open = Root.open

    def racing_open(self, path, flags=os.O_PATH | os.O_CLOEXEC, *, follow=True):
        fd = real_open(self, path, flags, follow=follow)
        if how == "renamed over":
            os.link(node, etc / "swap")  # the watched inode
            os.rename(etc / "swap", etc / "nct-conf")
        return fd

    try:
        with Root(rootfs) as root:
            if how == "hard link":
                os.link(node, etc / "linked")
                with pytest.raises(ContainerError, match="not a regular file"):
                    root.open_regular("/etc/linked")
            else:
                monkeypatch.setattr(Root, "open", racing_open)
                fd = root.open_regular("/etc/nct-conf")
                try:
                    assert os.read(fd, 64) == b"the regular file\n"
                finally:
                    os.close(fd)
                assert stat_is_blk(etc / "nct-conf")
        opened = watch.opened()
    finally:
        watch.close()
    assert opened == [] and scratch_disk.unchanged()


def stat_is_blk(path: Path) -> bool:
    import stat

    return stat.S_ISBLK(os.lstat(path).st_mode)


def test_host_ldconfig_makes_no_links_in_host_dirs_through_a_procfs_volume(image, tmp_path, mounts):
    """The same procfs volume with the host's ldconfig: an image conf entry naming
    /hostproc/PID/root/<host lib dir> had ldconfig (uid 0, three capabilities) scan a host
    directory through the magic link and create its SONAME link there."""
    from realparts import build_lib

    host_dir = tmp_path / "host-libs"
    build_lib(str(host_dir), "libnctvictim.so.1.0", "libnctvictim.so.1")
    before = sorted(os.listdir(host_dir))
    (Path(image) / "hostproc").mkdir()
    mounts("--bind", "-o", "ro", "/proc", str(Path(image) / "hostproc"))
    target = subprocess.Popen(["setpriv", "--inh-caps=-all", "--bounding-set=-all", "sleep", "120"])
    try:
        conf = Path(image) / "etc/ld.so.conf.d"
        conf.mkdir(parents=True, exist_ok=True)
        (conf / "host.conf").write_text(f"/hostproc/{target.pid}/root{host_dir}\n")
        res = _run_with(image, jail=1)
    finally:
        target.kill()
        target.wait()
    assert res.stdout.strip() == "OK", res.stdout + res.stderr
    assert sorted(os.listdir(host_dir)) == before, "ldconfig created a link in a host directory"
    assert cache_lists(image, "libnctgood.so.1") and not cache_lists(image, "libnctvictim")




@pytest.mark.parametrize("flags", ["allow-multi", "allow-override", "none"])
def test_v2_jail_under_a_parent_that_allows_every_device(image, scratch_disk, flags):
    """cgroup v2 device programs: the hook's own cgroup already has a program that allows
    every device. BPF_F_ALLOW_MULTI there: the effective set is both programs and all must
    allow, so the jail's deny wins; BPF_F_ALLOW_OVERRIDE: the jail's program replaces the
    parent's; no flag: nothing may be attached below, the jail cannot be made, ldconfig
    says so and the nodev view still holds. The nodev view is off except in the last case."""
    from e2e.scratchdisk import plant
    from nct.container import cgroups as cg
    from nct.container import syscalls as sc

    base = next((p for r, p, t, _ in cg._mounts("/proc/self/mountinfo") if t == "cgroup2" and r == "/"), None)
    if base is None:
        pytest.skip("no cgroup2 mount")
    parent = os.path.join(base, f"nct-review-{os.urandom(4).hex()}")
    os.mkdir(parent)
    try:
        cg._raise_memlock()
        fd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY)
        prog = sc.bpf_prog_load_device(cg._insn(cg._MOV64_K, 0, imm=1) + cg._insn(cg._EXIT))
        attach = {"allow-multi": sc.BPF_F_ALLOW_MULTI, "allow-override": sc.BPF_F_ALLOW_OVERRIDE, "none": 0}[flags]
        sc.bpf_prog_attach(fd, prog, attach, what=parent)
        os.close(prog)
        os.close(fd)
        nodes = [plant(Path(image), scratch_disk.rdev, w) for w in ("lib", "conf")]
        watch = OpenWatch()
        for n in nodes:
            watch.add(n)
        try:
            res = _run_with(image, f"open({parent + '/cgroup.procs'!r}, 'w').write('0')\n", jail=2,
                            disable="" if flags == "none" else "nodev")
            opened = watch.opened()
        finally:
            watch.close()
    finally:
        os.rmdir(parent)
    assert res.stdout.strip() == "OK", res.stdout + res.stderr
    if flags == "none":
        assert "warning: ldconfig runs without a deny-all device cgroup" in res.stderr, res.stderr
    else:
        assert "without a deny-all device cgroup" not in res.stderr, res.stderr
    assert opened == [] and scratch_disk.unchanged()
    assert cache_lists(image, "libnctgood.so.1")


def test_chmod_through_an_image_link_into_a_volume_is_refused(rootfs, tmp_path, mounts):
    """`nvidia-cdi-hook chmod` resolves its paths in the root; an image symlink into a volume
    had host root change the mode of a host file (a 0600 secret made 0755). Refused in one
    line, like every creation there; the container's own files are still changed."""
    from nct.container.hooks import chmod_paths
    from nct.container.rootfs import Root
    from nct.errors import ContainerError

    host = tmp_path / "host-secrets"
    host.mkdir()
    (host / "key").write_text("secret\n")
    os.chmod(host / "key", 0o600)
    (Path(rootfs) / "data").mkdir()
    mounts("--bind", str(host), str(Path(rootfs) / "data"))
    os.symlink("/data/key", Path(rootfs) / "nvdev")
    (Path(rootfs) / "own").write_text("x")
    with Root(rootfs) as root:
        with pytest.raises(ContainerError, match=r"refusing to change the mode of /nvdev .* it is on a volume"):
            chmod_paths(root, 0o755, ["/nvdev"])
        chmod_paths(root, 0o755, ["/own"])
    assert os.stat(host / "key").st_mode & 0o777 == 0o600
    assert os.stat(Path(rootfs) / "own").st_mode & 0o777 == 0o755


def test_shared_tmpfs_volume_after_the_runtime_pivoted(rootfs, tmp_path, mounts, host_gpu):
    """`configure --pid` after `runc create`: the container's mount table no longer has the
    host's mounts, so a host tmpfs bound whole at /data looked like the container's own tmpfs
    there. The host's table, opened before entering the container, still shows it."""
    import json as _json
    import uuid

    from hookhelper import load
    from nct.container.apply import ApplyOptions, apply_edits
    from nct.errors import ContainerError
    from realparts import write_bundle, write_edits
    from test_container_runc import gpu_edits

    if not shutil.which("runc"):
        pytest.skip("needs runc")
    shared = tmp_path / "host-shm"
    shared.mkdir()
    mounts("-t", "tmpfs", "-o", "mode=1777", "tmpfs", str(shared))
    (shared / "keep").write_text("host data\n")
    (Path(rootfs) / "data").mkdir()
    os.symlink("/data", Path(rootfs) / "nvlink")
    bundle = os.path.dirname(rootfs)
    write_bundle(bundle, ["sh", "-c", "true"], extra_mounts=[
        {"destination": "/data", "type": "bind", "source": str(shared), "options": ["rbind", "rw"]}])
    edits_dict = gpu_edits(host_gpu, lib=False)
    edits_dict["symlinks"] = [dict(target="libnvidia-ml.so.1", link="/nvlink/libnvidia-ml.so")]
    edits, _ = load(write_edits(str(tmp_path / "edits.json"), edits_dict))
    cid = "nct-test-" + uuid.uuid4().hex[:10]
    try:
        with open(tmp_path / "out.txt", "w") as f:
            subprocess.run(["runc", "create", "--bundle", bundle, cid], stdout=f, stderr=f, stdin=subprocess.DEVNULL,
                           check=True, timeout=60)
        pid = _json.loads(subprocess.run(["runc", "state", cid], capture_output=True, text=True,
                                         check=True).stdout)["pid"]
        with pytest.raises(ContainerError, match=r"refusing to create /nvlink/libnvidia-ml\.so .* on a volume"):
            apply_edits(edits, rootfs, pid, ApplyOptions())
    finally:
        subprocess.run(["runc", "delete", "-f", cid], capture_output=True)
    assert sorted(os.listdir(shared)) == ["keep"]


def test_mount_id_reused_by_a_volume_is_not_the_cached_tmpfs(rootfs, tmp_path, mounts):
    """Root caches the mount table by mount id. A running container that can mount replaces
    its /run tmpfs (checked once: the container's own) by a bind of a volume, which takes the
    freed mount id: the stale entry said "a fresh tmpfs" and nct created in the volume. The
    entry is re-read when the directory's device is not the one it names."""
    from nct.container.rootfs import Root
    from nct.errors import ContainerError

    run = Path(rootfs) / "run"
    run.mkdir(exist_ok=True)
    vol = tmp_path / "volume"
    vol.mkdir()
    (vol / "keep").write_text("host data\n")
    mounts("-t", "tmpfs", "tmpfs", str(run))
    with Root(rootfs) as root:
        fd = root.open("/run")
        before = root._mount_id(fd)
        os.close(fd)
        root.write_file("/run/first", b"x")
        subprocess.run(["umount", "-l", str(run)], check=True)
        mounts("--bind", str(vol), str(run))
        fd = root.open("/run")
        after = root._mount_id(fd)
        os.close(fd)
        if after != before:
            pytest.skip("the kernel did not reuse the mount id")
        with pytest.raises(ContainerError, match="on a volume"):
            root.write_file("/run/second", b"x")
    assert sorted(os.listdir(vol)) == ["keep"]


@pytest.mark.parametrize("kernel", ["new", "old"])
def test_volume_at_an_oddly_named_mount_point_is_sealed(image, scratch_disk, oldkernel_bin, tmp_path, mounts, kernel):
    """Mount points are read from mountinfo on old kernels: spaces, a newline, a backslash
    and " - " in the name (escaped there as \\040, \\012, \\134) must still name the mount, or
    it would keep device nodes in ldconfig's view. A lib link leads into the volume."""
    from e2e.scratchdisk import EVIL_LIB, LIBDIR

    odd = "odd dir\n - x\\040y\tz"
    vol = tmp_path / "volume"
    vol.mkdir()
    os.mknod(vol / "disk-node", 0o60666, scratch_disk.rdev)
    (Path(image) / odd).mkdir()
    mounts("--bind", str(vol), str(Path(image) / odd))
    link = Path(image) / LIBDIR / EVIL_LIB
    link.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(f"/{odd}/disk-node", link)
    watch = OpenWatch()
    watch.add(vol / "disk-node")
    try:
        res = run_ldconfig(image, jail=1, kernel=kernel, oldkernel_bin=oldkernel_bin, disable="jail")
        opened = watch.opened()
    finally:
        watch.close()
    assert res.stdout.strip() == "OK", res.stdout + res.stderr
    assert opened == [] and scratch_disk.unchanged()
    assert cache_lists(image, "libnctgood.so.1")


def _jails(cgroup_dir: str) -> set[str]:
    return {n for n in os.listdir(cgroup_dir) if n.startswith("nct-ldconfig-")}


def test_jail_left_by_a_killed_hook_is_swept_later(image):
    """A hook SIGKILLed while ldconfig runs (blocked on a FIFO in its configuration) cannot
    remove its jail; ldconfig dies with it (parent-death signal), the jail is left empty, and
    a later run removes it once it is older than a jail can live (JAIL_STALE_S; 0 here), never
    one in use. The jail is a child of the hook's own cgroup, not the container's."""
    import signal
    import sys
    import time

    from nct.container import cgroups as cg

    v1, _ = cg.find_device_cgroups(os.getpid())
    if v1 is None:
        pytest.skip("no cgroup v1 devices hierarchy")
    before = _jails(v1)
    os.makedirs(os.path.join(image, "etc/ld.so.conf.d"), exist_ok=True)
    os.mkfifo(os.path.join(image, "etc/ld.so.conf"))
    code = (f"from nct.container import cgroups, ldconfig as L\nfrom nct.container.rootfs import Root\n"
            f"cgroups.JAIL_VERSIONS = (1,)\nL.run_ldconfig(Root({image!r}), [], write_conf=False)\n")
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", **{k: v for k, v in os.environ.items() if k == "PYTHONPATH"}}
    hook = subprocess.Popen([sys.executable, "-c", code], env=env, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 20
    while not _jails(v1) - before and time.monotonic() < deadline:
        time.sleep(0.05)
    left = _jails(v1) - before
    assert len(left) == 1, "no jail was made"
    time.sleep(0.5)  # ldconfig is in it now, blocked on the FIFO
    hook.send_signal(signal.SIGKILL)
    hook.wait()
    jail = os.path.join(v1, left.pop())
    while time.monotonic() < deadline:  # ldconfig and its parent die of their parent-death signal
        with open(os.path.join(jail, "cgroup.procs")) as f:
            if not f.read().strip():
                break
        time.sleep(0.05)
    assert os.path.isdir(jail)
    os.unlink(os.path.join(image, "etc/ld.so.conf"))
    res = _run_with(image, "cgroups.JAIL_STALE_S = 0\n", jail=1)
    assert res.stdout.strip() == "OK", res.stdout + res.stderr
    assert not os.path.exists(jail), "the leftover jail was not swept"
    assert _jails(v1) - before == set()


PAUSE_AFTER_SEALING = """
import time as _time
_orig_detach = L._detach_kernel_mounts
def _paused(proc):  # in ldconfig's child, pivoted into the sealed copy: wait for the test
    _orig_detach(proc)
    open("/ready", "w").close()
    for _ in range(400):
        if os.path.exists("/go"):
            break
        _time.sleep(0.05)
L._detach_kernel_mounts = _paused
"""


@pytest.mark.parametrize("kernel", ["new", "old"])
def test_mount_made_after_the_copy_does_not_reach_ldconfig(image, scratch_disk, oldkernel_bin, tmp_path, mounts,
                                                          kernel):
    """The container root is a shared mount (a running container's namespace, or the host's,
    with shared propagation). After ldconfig's copy is made, a volume holding a disk node is
    mounted in the root (a container racing `configure --pid`). The child made its namespace
    private before copying, so nothing propagates into ldconfig's view: /late stays the
    image's empty directory there."""
    import sys
    import time

    from e2e.scratchdisk import EVIL_LIB
    from test_devnodes import CLEAN_ENV, NO_JAIL

    mounts("--bind", image, image)
    # a peer group of its own (private first: not a peer of the host's / mount, where the
    # volume below would propagate to and outlive the test)
    subprocess.run(["mount", "--make-private", image], check=True)
    subprocess.run(["mount", "--make-shared", image], check=True)
    vol = tmp_path / "volume"
    vol.mkdir()
    os.mknod(vol / "disk-node", 0o60666, scratch_disk.rdev)
    os.symlink("disk-node", vol / EVIL_LIB)
    (Path(image) / "late").mkdir()
    (Path(image) / "etc/ld.so.conf.d").mkdir(parents=True, exist_ok=True)
    (Path(image) / "etc/ld.so.conf.d/late.conf").write_text("/late\n")
    code = ("import os\nfrom nct.container import cgroups, ldconfig as L\nfrom nct.container.rootfs import Root\n"
            + PAUSE_AFTER_SEALING + NO_JAIL
            + f"L.run_ldconfig(Root({image!r}), [], write_conf=False)\nprint('OK')\n")
    env = dict(CLEAN_ENV, **{k: v for k, v in os.environ.items() if k == "PYTHONPATH"})
    prefix = [oldkernel_bin] if kernel == "old" else []
    watch = OpenWatch()
    watch.add(vol / "disk-node")
    proc = subprocess.Popen([*prefix, sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while not (Path(image) / "ready").exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        assert (Path(image) / "ready").exists(), proc.communicate(timeout=30)
        mounts("--bind", str(vol), str(Path(image) / "late"))
        assert (Path(image) / "late" / EVIL_LIB).is_symlink()  # the host's (and any peer's) view has it
        (Path(image) / "go").touch()
        out, err = proc.communicate(timeout=60)
        opened = watch.opened()
    finally:
        if proc.poll() is None:
            proc.kill()
        watch.close()
    assert out.strip() == "OK", out + err
    assert opened == [] and scratch_disk.unchanged()


def test_bind_of_the_roots_own_filesystem_is_a_volume(rootfs, tmp_path, mounts):
    """A bind mount of another directory of the same filesystem (same st_dev as the root:
    here a host directory next to the rootfs) is told apart by its mount id, not its device:
    nothing is created through an image link into it."""
    from nct.container.rootfs import Root
    from nct.errors import ContainerError

    host = tmp_path / "same-fs-dir"
    host.mkdir()
    assert os.stat(host).st_dev == os.stat(rootfs).st_dev
    (Path(rootfs) / "data").mkdir()
    mounts("--bind", str(host), str(Path(rootfs) / "data"))
    os.symlink("/data", Path(rootfs) / "nvlib")
    with Root(rootfs) as root:
        with pytest.raises(ContainerError, match="on a volume"):
            root.mkdirs("/nvlib/sub")
        with pytest.raises(ContainerError, match="on a volume"):
            root.mknod("/nvlib/nvidia0", 0o20666, 195, 0)
    assert os.listdir(host) == []
