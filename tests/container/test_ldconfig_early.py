"""ldconfig's child started early (nct.container.ldconfig.start_ldconfig, issue 14 §2): it is
forked and moved into its deny-all device cgroup while the caller still attaches mounts and
creates links, then runs ldconfig only when told, seeing everything done in between; cancelled,
it runs nothing and leaves no cgroup. The confinement tests (test_devnodes.py) run through the
same child, started early and right away. Real parts: busybox rootfs, gcc-built libraries,
real cgroups, a private mount namespace (unshare -m) for the bind mount."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from realparts import build_lib, needs_gcc, needs_root

pytestmark = [needs_root, needs_gcc]

SCRIPT = """
import json, os, subprocess, sys
from nct.container.ldconfig import start_ldconfig
from nct.container.rootfs import Root

rootfs, libs, mode = sys.argv[1], sys.argv[2], sys.argv[3]
out = {}
with Root(rootfs) as root:
    pending = start_ldconfig(root)
    out["pid"] = pending.pid
    jail = pending.jail
    out["jail"] = jail.name if jail is not None and not jail.problem else ""
    # the child is in its jail before run(): the slow cgroup move overlaps what follows
    for _ in range(200):
        cg = open(f"/proc/{pending.pid}/cgroup").read()
        if out["jail"] and out["jail"] in cg:
            break
        import time; time.sleep(0.01)
    out["in_jail_before_run"] = bool(out["jail"]) and out["jail"] in cg
    # work done after the fork: a bind mount and a link the ldconfig run must see
    os.makedirs(os.path.join(rootfs, "opt/nv/lib"), exist_ok=True)
    subprocess.run(["mount", "--bind", libs, os.path.join(rootfs, "opt/nv/lib")], check=True)
    if mode == "run":
        pending.run(["/opt/nv/lib"], write_conf=True)
    else:
        pending.cancel()
    out["child_gone"] = not os.path.exists(f"/proc/{out['pid']}") or \\
        open(f"/proc/{out['pid']}/stat").read().split()[2] == "Z"
print(json.dumps(out))
"""


def _run(rootfs: str, libs: str, mode: str) -> dict:
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", **{k: v for k, v in os.environ.items() if k == "PYTHONPATH"}}
    r = subprocess.run(["unshare", "-m", "--propagation", "private", sys.executable, "-c", textwrap.dedent(SCRIPT),
                        rootfs, libs, mode], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def _jail_dirs(name: str) -> list[str]:
    """Where a jail of that name would be, in any hierarchy (v1 devices, v2)."""
    found = []
    for base in ("/sys/fs/cgroup/devices", "/sys/fs/cgroup", "/sys/fs/cgroup/unified"):
        for dirpath, dirnames, _ in os.walk(base):
            if name in dirnames:
                found.append(os.path.join(dirpath, name))
            if dirpath.count("/") > 8:
                dirnames[:] = []
    return found


@pytest.fixture
def libs(tmp_path) -> str:
    d = str(tmp_path / "hostlibs")
    build_lib(d, "libnvearly.so.550.54.15", "libnvearly.so.1")
    return d


def test_early_child_waits_in_its_jail_and_sees_later_mounts(rootfs, libs):
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare (util-linux)")
    out = _run(rootfs, libs, "run")
    if out["jail"]:
        assert out["in_jail_before_run"], out
        assert not _jail_dirs(out["jail"])  # removed once ldconfig is done
    assert out["child_gone"]
    cache = subprocess.run(["/sbin/ldconfig", "-p", "-C", os.path.join(rootfs, "etc/ld.so.cache")],
                           capture_output=True, text=True).stdout
    assert "libnvearly.so.1 (libc6,x86-64) => /opt/nv/lib/libnvearly.so.1" in cache, cache
    names = os.listdir(os.path.join(rootfs, "etc/ld.so.conf.d"))
    assert any(n.startswith("00-nvcr-") for n in names)


def test_cancelled_child_runs_nothing_and_leaves_no_cgroup(rootfs, libs):
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare (util-linux)")
    confd = os.path.join(rootfs, "etc/ld.so.conf.d")
    before = sorted(os.listdir(confd)) if os.path.isdir(confd) else []
    out = _run(rootfs, libs, "cancel")
    assert out["child_gone"]
    assert not os.path.exists(os.path.join(rootfs, "etc/ld.so.cache"))
    assert (sorted(os.listdir(confd)) if os.path.isdir(confd) else []) == before
    if out["jail"]:
        assert not _jail_dirs(out["jail"])


def test_overlong_command_line_is_refused_not_truncated(rootfs):
    """The waiting child gets its command line through a pipe: one over the bound (folders on
    ldconfig's command line, `configure`'s way) is one clear error and nothing is run or
    written, never a command line cut at the bound (a folder cut short, the rest dropped)."""
    folders = [f"/opt/{i:04d}/" + "d" * 4000 for i in range(300)]  # ~1.2 MB, each arg < 128 KiB
    script = textwrap.dedent("""
        import json, sys
        from nct.container.ldconfig import run_ldconfig
        from nct.container.rootfs import Root
        from nct.errors import ContainerError
        try:
            with Root(sys.argv[1]) as root:
                run_ldconfig(root, json.load(sys.stdin), write_conf=False)
        except ContainerError as e:
            print("ERR", e)
        else:
            print("OK")
    """)
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", **{k: v for k, v in os.environ.items() if k == "PYTHONPATH"}}
    r = subprocess.run([sys.executable, "-c", script, rootfs], input=json.dumps(folders), capture_output=True,
                       text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    out = r.stdout.strip().splitlines()[-1]
    assert out.startswith("ERR ldconfig command line of ") and "over 1048576" in out, out
    assert not os.path.exists(os.path.join(rootfs, "etc/ld.so.cache"))


HOST_SIDE = """
import json, os, sys, time
from nct.container.apply import _enter
from nct.container.ldconfig import start_ldconfig

rootfs, pid = sys.argv[1], int(sys.argv[2])
# forked host side, before anything entered the container: the child enters it itself
pending = start_ldconfig(None, enter=lambda: _enter(rootfs, pid, "/proc"))
out = {"jail": pending.jail.name if pending.jail is not None and not pending.jail.problem else ""}
for _ in range(200):
    cg = open(f"/proc/{pending.pid}/cgroup").read()
    if out["jail"] and out["jail"] in cg:
        break
    time.sleep(0.01)
out["in_jail_before_enter"] = bool(out["jail"]) and out["jail"] in cg
out["host_mnt_ns"] = os.readlink(f"/proc/{pending.pid}/ns/mnt") == os.readlink("/proc/self/ns/mnt")
root = _enter(rootfs, pid, "/proc")
pending.attach(root)
pending.run(["/opt/nv/lib"], write_conf=True)
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def oldkernel_bin(tmp_path_factory) -> str:
    from e2e import oldkernel

    return str(oldkernel.build(tmp_path_factory.mktemp("oldkernel") / "oldkernel"))


@pytest.mark.parametrize("kernel", ["new", "old"])
def test_child_forked_host_side_runs_ldconfig_in_the_containers_mount_namespace(rootfs, libs, kernel, oldkernel_bin):
    """The legacy hook forks ldconfig's child before it enters the container (its cgroup move
    then overlaps the host-side work too): the child enters the container's mount namespace
    itself, so ldconfig sees a mount that exists only there (the host's view lacks it). On
    an old kernel (no new mount API: the mount(2) path, which reads our fd links through the
    host procfs fd of the child's own Root) too."""
    if shutil.which("unshare") is None or shutil.which("nsenter") is None:
        pytest.skip("needs unshare and nsenter (util-linux)")
    os.makedirs(os.path.join(rootfs, "opt/nv/lib"), exist_ok=True)
    box = subprocess.Popen(["unshare", "-m", "--propagation", "private", "sleep", "120"])
    try:
        for _ in range(100):  # until unshare has exec'd sleep in its own namespace
            if os.readlink(f"/proc/{box.pid}/ns/mnt") != os.readlink("/proc/self/ns/mnt"):
                break
            import time
            time.sleep(0.01)
        subprocess.run(["nsenter", "-t", str(box.pid), "-m", "mount", "--bind", libs,
                        os.path.join(rootfs, "opt/nv/lib")], check=True)
        assert not os.listdir(os.path.join(rootfs, "opt/nv/lib"))  # not in the host's view
        env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", **{k: v for k, v in os.environ.items() if k == "PYTHONPATH"}}
        prefix = [oldkernel_bin] if kernel == "old" else []
        r = subprocess.run([*prefix, sys.executable, "-c", textwrap.dedent(HOST_SIDE), rootfs, str(box.pid)],
                           capture_output=True, text=True, timeout=120, env=env)
        assert r.returncode == 0, r.stderr
        out = json.loads(r.stdout.strip().splitlines()[-1])
    finally:
        box.kill()
        box.wait()
    assert out["host_mnt_ns"]  # it was forked before the caller entered the container
    if out["jail"]:
        assert out["in_jail_before_enter"], out
        assert not _jail_dirs(out["jail"])
    cache = subprocess.run(["/sbin/ldconfig", "-p", "-C", os.path.join(rootfs, "etc/ld.so.cache")],
                           capture_output=True, text=True).stdout
    assert "libnvearly.so.1 (libc6,x86-64) => /opt/nv/lib/libnvearly.so.1" in cache, cache


PID_REUSED = """
import os, sys
from nct.container.apply import ApplyOptions, _enter, early_ldconfig

rootfs, pid, fake_proc = sys.argv[1], int(sys.argv[2]), sys.argv[3]
pending = early_ldconfig(rootfs, pid, ApplyOptions(host_proc=fake_proc))
# the container's pid exits and its number now names a host process (our own namespace)
os.unlink(f"{fake_proc}/{pid}")
os.symlink("/proc/self", f"{fake_proc}/{pid}")
root = _enter(rootfs, pid, "/proc")  # the hook entered the container before that
pending.attach(root)
pending.run(["/opt/nv/lib"], write_conf=True)
print("OK")
"""


def test_child_forked_host_side_enters_the_namespace_of_when_it_was_forked(rootfs, libs, tmp_path):
    """ldconfig's child forked host side must not look the container's pid up again when it
    runs: should that pid exit and its number be reused (here: a host process), it would run
    ldconfig in another mount namespace than the one the hook configured. It enters through
    a namespace fd opened before the fork (apply._entry)."""
    if shutil.which("unshare") is None or shutil.which("nsenter") is None:
        pytest.skip("needs unshare and nsenter (util-linux)")
    import time

    os.makedirs(os.path.join(rootfs, "opt/nv/lib"), exist_ok=True)
    box = subprocess.Popen(["unshare", "-m", "--propagation", "private", "sleep", "120"])
    try:
        for _ in range(100):
            if os.readlink(f"/proc/{box.pid}/ns/mnt") != os.readlink("/proc/self/ns/mnt"):
                break
            time.sleep(0.01)
        subprocess.run(["nsenter", "-t", str(box.pid), "-m", "mount", "--bind", libs,
                        os.path.join(rootfs, "opt/nv/lib")], check=True)
        fake = tmp_path / "proc"
        fake.mkdir()
        os.symlink(f"/proc/{box.pid}", fake / str(box.pid))
        env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", **{k: v for k, v in os.environ.items() if k == "PYTHONPATH"}}
        r = subprocess.run([sys.executable, "-c", textwrap.dedent(PID_REUSED), rootfs, str(box.pid), str(fake)],
                           capture_output=True, text=True, timeout=120, env=env)
    finally:
        box.kill()
        box.wait()
    assert r.returncode == 0, r.stderr
    cache = subprocess.run(["/sbin/ldconfig", "-p", "-C", os.path.join(rootfs, "etc/ld.so.cache")],
                           capture_output=True, text=True).stdout
    assert "libnvearly.so.1 (libc6,x86-64) => /opt/nv/lib/libnvearly.so.1" in cache, cache


DISPOSABLE = """
import json, os, sys, time
from nct.container import ldconfig as L
from nct.container.rootfs import Root
from nct.errors import ContainerError

rootfs, prog, reap = sys.argv[1], sys.argv[2], sys.argv[3] == "reap"
L.LDCONFIG_TIMEOUT = 1
out = {}
with Root(rootfs) as root:
    pending = L.start_ldconfig(root, ldconfig="@" + prog, reap=reap)
    pid, jail = pending.pid, pending.jail
    out["jail"] = jail.name if jail is not None and not jail.problem else ""
    try:
        pending.run(["/opt/nv/lib"])
        out["result"] = "OK"
    except ContainerError as e:
        out["result"] = "ERR " + str(e)
    out["waited"] = not os.path.exists(f"/proc/{pid}")  # reaped (else a zombie or still exiting)
    out["fds"] = sorted(os.listdir("/proc/self/fd"))
print(json.dumps(out))
"""

LDCONFIGS = {
    "ok": "int main(void) { return 0; }\n",
    "fails": '#include <stdio.h>\nint main(void) { puts("LAST WORDS"); return 3; }\n',
    # a fault, not raise(): as PID 1 of its PID namespace, ldconfig ignores signals it sends itself
    "signal": "int main(void) { *(volatile int *)0 = 1; return 0; }\n",
    "hangs": "#include <unistd.h>\nint main(void) { for (;;) pause(); }\n",
}


@pytest.mark.parametrize("kind", sorted(LDCONFIGS))
def test_unreaped_child_reports_ldconfigs_end_as_a_reaped_one(tmp_path, rootfs, kind):
    """start_ldconfig(reap=False), the hook's way (it exits right after): the caller learns
    ldconfig's end from the child's status pipe and does not wait for the child's own exit.
    A success, a failure (its last line), a signal and a timeout (the child dies of its
    alarm before reporting: waited for) give exactly the messages of a reaping caller, no
    fd is left open, and the jail is removed once the child is gone (its remover)."""
    src = tmp_path / f"{kind}.c"
    src.write_text(LDCONFIGS[kind])
    prog = str(tmp_path / kind)
    subprocess.run(["gcc", "-O1", "-static", "-o", prog, str(src)], check=True)
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", **{k: v for k, v in os.environ.items() if k == "PYTHONPATH"}}
    outs = {}
    for mode in ("reap", "leave"):
        r = subprocess.run([sys.executable, "-c", textwrap.dedent(DISPOSABLE), rootfs, prog, mode],
                           capture_output=True, text=True, timeout=60, env=env)
        assert r.returncode == 0, r.stderr
        outs[mode] = json.loads(r.stdout.strip().splitlines()[-1])
    reaped, left = outs["reap"], outs["leave"]
    expected = {"ok": "OK", "fails": "failed: LAST WORDS", "signal": "failed: exit status -11",
                "hangs": "timed out (after 1s"}[kind]
    assert expected in reaped["result"], reaped
    assert left["result"] == reaped["result"]
    assert reaped["waited"] and left["fds"] == reaped["fds"]
    if kind != "hangs":  # reported: the child was not waited for (the hang: it died first)
        assert not left["waited"]
    import time

    for _ in range(100):
        if not left["jail"] or not _jail_dirs(left["jail"]):
            break
        time.sleep(0.05)
    assert not left["jail"] or not _jail_dirs(left["jail"])


REMOVER_GONE = """
import json, os, signal, sys, threading, time
from nct.container import ldconfig as L
from nct.container.rootfs import Root
from nct.errors import ContainerError

rootfs, prog = sys.argv[1], sys.argv[2]
out = {}


def children(pid):
    try:
        kids = open(f"/proc/{pid}/task/{pid}/children").read().split()
    except OSError:
        return {}
    names = {}
    for k in kids:
        try:
            names[int(k)] = open(f"/proc/{k}/comm").read().strip()
        except OSError:
            pass
    return names


def end_remover(pid):  # once ldconfig runs: the remover ends first (here SIGINT: exit 0)
    for _ in range(1000):
        kids = children(pid)
        if len(kids) == 2:
            for k, name in kids.items():
                if name == "nvc:[ldconf-rm]":
                    os.kill(k, signal.SIGINT)
                    out["remover_ended"] = True
                    return
        time.sleep(0.005)


with Root(rootfs) as root:
    pending = L.start_ldconfig(root, ldconfig="@" + prog, reap=False)
    t = threading.Thread(target=end_remover, args=(pending.pid,))
    t.start()
    try:
        pending.run(["/opt/nv/lib"])
        out["result"] = "OK"
    except ContainerError as e:
        out["result"] = "ERR " + str(e)
    t.join()
print(json.dumps(out))
"""


def test_ldconfigs_status_is_its_own_not_another_childs(tmp_path, rootfs):
    """The status reported is ldconfig's, never that of the child's other child (its jail's
    remover): a remover that ends while ldconfig still runs (killed, interrupted) must not
    pass for ldconfig's end. Here ldconfig fails after a moment and the remover exits 0
    before it: the caller must see the failure (it saw success, ldconfig then killed
    half-way, when the child waited for any child)."""
    src = tmp_path / "slow.c"
    src.write_text('#include <stdio.h>\n#include <unistd.h>\n'
                   'int main(void) { sleep(1); puts("LAST WORDS"); return 3; }\n')
    prog = str(tmp_path / "slow")
    subprocess.run(["gcc", "-O1", "-static", "-o", prog, str(src)], check=True)
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", **{k: v for k, v in os.environ.items() if k == "PYTHONPATH"}}
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(REMOVER_GONE), rootfs, prog],
                       capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out.get("remover_ended"), out
    assert "failed: LAST WORDS" in out["result"], out


def test_a_crashing_ldconfig_leaves_no_core_dump(tmp_path, rootfs):
    """An ldconfig that crashes (a hostile image's, or the host's driven by a hostile
    configuration) must not leave a core dump in the container root, neither its own nor one
    of the child above it (a root process holding the caller's memory: the child used to die
    of ldconfig's signal to pass it on). The caller runs with RLIMIT_CORE unlimited (as
    containerd's unit sets it) and core_pattern "core" (relative: the dumping process's cwd,
    the container root)."""
    import resource

    if open("/proc/sys/kernel/core_pattern").read().strip() != "core":
        pytest.skip("needs core_pattern 'core'")
    src = tmp_path / "crash.c"
    src.write_text(LDCONFIGS["signal"])
    prog = str(tmp_path / "crash")
    subprocess.run(["gcc", "-O1", "-static", "-o", prog, str(src)], check=True)
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", **{k: v for k, v in os.environ.items() if k == "PYTHONPATH"}}

    def cores() -> list[str]:
        return [n for n in os.listdir(rootfs) if n == "core" or n.startswith("core.")]

    assert not cores()
    for mode in ("reap", "leave"):
        r = subprocess.run([sys.executable, "-c", textwrap.dedent(DISPOSABLE), rootfs, prog, mode],
                           capture_output=True, text=True, timeout=60, env=env, cwd=str(tmp_path),
                           preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_CORE, (-1, -1)))
        assert r.returncode == 0, r.stderr
        out = json.loads(r.stdout.strip().splitlines()[-1])
        assert "failed: exit status -11" in out["result"], out
        assert not cores(), f"{mode}: core dump in the container root: {cores()}"


KILLED = """
import os, signal, sys, threading, time
from nct.container import ldconfig as L
from nct.container.rootfs import Root

rootfs, prog, stage = sys.argv[1], sys.argv[2], sys.argv[3]
root = Root(rootfs)
pending = L.start_ldconfig(root, ldconfig="@" + prog, reap=False)
for _ in range(1000):  # its first child: the remover
    kids = open(f"/proc/{pending.pid}/task/{pending.pid}/children").read().split()
    if kids:
        break
    time.sleep(0.005)
print(pending.pid, kids[0], pending.jail.name if pending.jail is not None and not pending.jail.problem else "",
      flush=True)


def die_once_ldconfig_runs(pid):
    for _ in range(2000):
        try:
            kids = open(f"/proc/{pid}/task/{pid}/children").read().split()
        except OSError:
            kids = []
        if len(kids) == 2:
            break
        time.sleep(0.005)
    os.kill(os.getpid(), signal.SIGKILL)


if stage == "waiting":  # the child waits for its command line
    time.sleep(0.2)
    os.kill(os.getpid(), signal.SIGKILL)
threading.Thread(target=die_once_ldconfig_runs, args=(pending.pid,)).start()
pending.run(["/opt/nv/lib"])
"""


@pytest.mark.parametrize("stage", ["waiting", "running"])
def test_a_killed_caller_leaves_no_process_and_no_jail(tmp_path, rootfs, stage):
    """The hook killed (SIGKILL) while ldconfig's child waits for its command line, or while
    ldconfig runs: the child and ldconfig die with it (parent-death signals), the remover
    removes the jail once they are gone and exits; nothing is left."""
    import time

    src = tmp_path / "slow.c"
    src.write_text("#include <unistd.h>\nint main(void) { sleep(30); return 0; }\n")
    prog = str(tmp_path / "slow")
    subprocess.run(["gcc", "-O1", "-static", "-o", prog, str(src)], check=True)
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", **{k: v for k, v in os.environ.items() if k == "PYTHONPATH"}}
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(KILLED), rootfs, prog, stage],
                       capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == -9, r.stderr
    child, remover, jail = r.stdout.split()
    started = time.monotonic()
    left: list[str] = []
    while time.monotonic() - started < 15:  # well before ldconfig's 30 s: it died with the caller
        left = [p for p in (child, remover) if os.path.exists(f"/proc/{p}")] + _jail_dirs(jail)
        if not left:
            break
        time.sleep(0.025)
    assert not left, left


def test_a_huge_host_ldconfig_is_refused_before_it_is_copied(tmp_path):
    """The host ldconfig is copied into memory (a sealed memfd) on every container start: a
    configured file far larger than any ldconfig (a sparse 1 GiB file with a static ELF's
    header, say) is refused, with its size, before anything is copied, by the caller's
    check and by the copy itself (the file may have grown since)."""
    from nct.container import ldconfig as L
    from nct.errors import ContainerError

    src = tmp_path / "ok.c"
    src.write_text("int main(void) { return 0; }\n")
    prog = tmp_path / "ldconfig"
    subprocess.run(["gcc", "-O1", "-static", "-o", str(prog), str(src)], check=True)
    small = L.open_static(str(prog))  # a real one is fine
    os.close(small)
    os.truncate(prog, 1 << 30)
    with pytest.raises(ContainerError, match="over"):
        os.close(L.open_static(str(prog)))
    fd = os.open(prog, os.O_RDONLY | os.O_CLOEXEC)
    try:
        with pytest.raises(ContainerError, match="over"):
            os.close(L.seal_copy(fd, str(prog)))
    finally:
        os.close(fd)
