"""The ldconfig child is confined: an image-provided (or exploited) ldconfig keeps only the three
file capabilities it needs, cannot reach the host through /proc and cannot signal host
processes (own PID namespace); the host ldconfig must be a
static ELF; FIFOs and odd files in the image's ld.so configuration never hang container creation.
Real parts: busybox rootfs, gcc-built static programs, real FIFOs, the real /sbin/ldconfig."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time

import pytest

from realparts import needs_gcc, needs_root

HOOK = os.path.join(os.path.dirname(sys.executable), "nvidia-cdi-hook")
CLEAN_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
LDCONFIG_CAPS = 0xB  # CAP_CHOWN, CAP_DAC_OVERRIDE, CAP_FOWNER (no CAP_DAC_READ_SEARCH: see below)

PROBE_C = r'''
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <signal.h>
#include <sched.h>
#include <sys/socket.h>
#include <linux/capability.h>

static void try_read(FILE *out, const char *what, const char *path) {
    char buf[256] = {0};
    int fd = open(path, O_RDONLY);
    if (fd < 0) { fprintf(out, "%s denied %s\n", what, strerror(errno)); return; }
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    buf[strcspn(buf, "\n")] = 0;
    fprintf(out, "%s read %s\n", what, n > 0 ? buf : "");
}

int main(void) {
    FILE *out = fopen("/ldconfig.out", "w");
    if (!out) return 3;
    struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct d[2];
    if (syscall(SYS_capget, &h, d)) return 4;
    unsigned long long bnd = 0;
    for (int c = 0; c < 64; c++) if (prctl(PR_CAPBSET_READ, c, 0, 0, 0) == 1) bnd |= 1ULL << c;
    fprintf(out, "CapEff %llx\nCapPrm %llx\nCapInh %llx\nCapBnd %llx\n",
            d[0].effective | (unsigned long long)d[1].effective << 32,
            d[0].permitted | (unsigned long long)d[1].permitted << 32,
            d[0].inheritable | (unsigned long long)d[1].inheritable << 32, bnd);
    /* the reviewer's attack: a procfs of the host PID namespace, then a process's root */
    fprintf(out, "mountproc %s\n", mount("proc", "/proc", "proc", 0, NULL) ? strerror(errno) : "ok");
    char path[512];
    snprintf(path, sizeof path, "/proc/1/root%s", HOST_SECRET);
    try_read(out, "pid1root", path);
    snprintf(path, sizeof path, "/proc/%d/root%s", (int)getppid(), HOST_SECRET);
    try_read(out, "ppidroot", path);
    fprintf(out, "chroot %s\n", chroot("/tmp") ? strerror(errno) : "ok");
    /* a root-owned host process (the test's): same uid, so without a PID namespace the
       signal check passes even with CAP_KILL dropped */
    fprintf(out, "pid %d\n", (int)getpid());
    fprintf(out, "killhost %s\n", kill(HOST_PID, 0) ? strerror(errno) : "ok");
    /* seccomp: no sockets, no new processes, no user namespace (which needs no capability) */
    int sk = socket(AF_UNIX, SOCK_STREAM, 0);
    fprintf(out, "socket %s\n", sk < 0 ? strerror(errno) : "ok");
    pid_t child = fork();
    if (child == 0) _exit(0);
    fprintf(out, "fork %s\n", child < 0 ? strerror(errno) : "ok");
    fprintf(out, "userns %s\n", unshare(CLONE_NEWUSER) ? strerror(errno) : "ok");
    /* "shocker": the root directory of the filesystem the rootfs lives on (ext4 inode 2) */
    struct { struct file_handle h; unsigned char b[8]; } fh;
    unsigned int ino = 2, gen = 0;
    fh.h.handle_bytes = 8; fh.h.handle_type = 1; /* FILEID_INO32_GEN */
    memcpy(fh.h.f_handle, &ino, 4); memcpy(fh.h.f_handle + 4, &gen, 4);
    int hfd = open_by_handle_at(open("/", O_RDONLY), &fh.h, O_RDONLY | O_DIRECTORY);
    fprintf(out, "openbyhandle %s\n", hfd < 0 ? strerror(errno) : "ok");
    return fclose(out) ? 5 : 0;
}
'''


def _build(tmp_path, name: str, source: str, *flags: str) -> str:
    src = tmp_path / f"{name}.c"
    src.write_text(source)
    out = str(tmp_path / name)
    subprocess.run(["gcc", "-O1", *flags, "-o", out, str(src)], check=True)
    return out


def _as_image_ldconfig(rootfs: str, prog: str) -> None:
    """Install the static program `prog` as the image's own /sbin/ldconfig."""
    os.makedirs(os.path.join(rootfs, "sbin"), exist_ok=True)
    dst = os.path.join(rootfs, "sbin", "ldconfig")
    if os.path.lexists(dst):
        os.unlink(dst)
    with open(prog, "rb") as f, open(dst, "wb") as g:
        g.write(f.read())
    os.chmod(dst, 0o755)


def _run_ldconfig(rootfs: str, *, ldconfig: str = "@/sbin/ldconfig", write_conf: bool = True,
                  timeout_s: int | None = None, limit: float = 60, prefix: tuple[str, ...] = ()
                  ) -> subprocess.CompletedProcess:
    """run_ldconfig on `rootfs` in a subprocess, so that a hang fails the test (limit) instead
    of blocking the suite. Prints "OK" or the one-line error."""
    code = textwrap.dedent(f"""
        from nct.container import ldconfig as L
        from nct.container.rootfs import Root
        from nct.errors import NctError
        if {timeout_s!r} is not None:
            L.LDCONFIG_TIMEOUT = {timeout_s!r}
        try:
            with Root({rootfs!r}) as r:
                L.run_ldconfig(r, ["/usr/lib/x86_64-linux-gnu", "/opt/nv/lib"], ldconfig={ldconfig!r},
                               write_conf={write_conf!r})
        except NctError as e:
            print("ERR", e)
        else:
            print("OK")
    """)
    env = dict(CLEAN_ENV, **{k: v for k, v in os.environ.items() if k == "PYTHONPATH"})
    return subprocess.run([*prefix, sys.executable, "-c", code], capture_output=True, text=True, timeout=limit,
                          env=env)


# ---- capabilities and namespaces ------------------------------------------------------------
@needs_root
@needs_gcc
@pytest.mark.parametrize("kernel", ["new", "old"])
def test_container_ldconfig_keeps_three_caps_and_cannot_read_host(tmp_path, rootfs, kernel):
    """"old": on a simulated kernel without the new mount API (tests/e2e/oldkernel.py), where
    the child binds the root onto itself with mount(2) to pivot into it."""
    secret = tmp_path / "host-secret"
    secret.write_text("HOST-ONLY-SECRET\n")
    probe = _build(tmp_path, "probe", PROBE_C, "-static", f'-DHOST_SECRET="{secret}"', f"-DHOST_PID={os.getpid()}")
    _as_image_ldconfig(rootfs, probe)
    prefix: tuple[str, ...] = ()
    if kernel == "old":
        from e2e import oldkernel

        prefix = (str(oldkernel.build(tmp_path / "oldkernel")),)
    res = _run_ldconfig(rootfs, ldconfig="/sbin/ldconfig", prefix=prefix)  # allow-ldconfig-from-container
    assert res.stdout.strip() == "OK", res.stdout + res.stderr
    report = dict(line.split(" ", 1) for line in open(os.path.join(rootfs, "ldconfig.out")).read().splitlines())
    for key in ("CapEff", "CapPrm", "CapInh", "CapBnd"):
        assert int(report[key], 16) == LDCONFIG_CAPS, report
    assert report["mountproc"] == "Operation not permitted", report
    assert report["pid1root"].startswith("denied"), report
    assert report["ppidroot"].startswith("denied"), report
    assert report["chroot"] == "Operation not permitted", report
    assert report["openbyhandle"] != "ok", report  # with CAP_DAC_READ_SEARCH: the host's "/"
    # its own PID namespace: PID 1 there, and no host process can be named (let alone signalled)
    assert report["pid"] == "1", report
    assert report["killhost"] == "No such process", report
    # its seccomp filter (syscalls.seccomp_deny): EPERM where a plain process would succeed
    assert (report["socket"], report["fork"], report["userns"]) == ("Operation not permitted",) * 3, report
    assert "HOST-ONLY-SECRET" not in open(os.path.join(rootfs, "ldconfig.out")).read()


# ---- the host ldconfig must be a static ELF -----------------------------------------------------
@needs_root
@needs_gcc
def test_dynamic_or_script_host_ldconfig_refused(tmp_path, rootfs):
    from nct.container.ldconfig import sealed_copy
    from nct.errors import ContainerError

    dynamic = _build(tmp_path, "dyn", "int main(void) { return 0; }\n")
    static = _build(tmp_path, "stat", "int main(void) { return 0; }\n", "-static")
    script = tmp_path / "script"
    script.write_text("#!/bin/sh\nexit 0\n")
    script.chmod(0o755)
    with pytest.raises(ContainerError, match=r"dynamically linked \(PT_INTERP\)"):
        sealed_copy(dynamic)
    with pytest.raises(ContainerError, match="not an ELF executable"):
        sealed_copy(str(script))
    os.close(sealed_copy(static))
    os.close(sealed_copy("/sbin/ldconfig"))  # the real one is static(-pie)
    state = {"ociVersion": "1.0.2", "id": "x", "status": "creating", "pid": os.getpid(),
             "bundle": os.path.dirname(rootfs)}
    with open(os.path.join(state["bundle"], "config.json"), "w") as f:
        json.dump({"ociVersion": "1.0.2", "root": {"path": "rootfs"}}, f)
    res = subprocess.run([HOOK, "update-ldcache", "--folder", "/usr/lib/x86_64-linux-gnu",
                          "--ldconfig-path", dynamic], input=json.dumps(state), capture_output=True,
                         text=True, env=CLEAN_ENV, timeout=60)
    assert res.returncode != 0
    err = res.stderr.strip().splitlines()
    assert len(err) == 1 and "PT_INTERP" in err[0], res.stderr


# ---- FIFOs and other non-regular files in the image's configuration -----------------------------
@needs_root
@pytest.mark.parametrize("fifo", ["etc/ld.so.conf", "etc/ld.so.conf.d/x.conf"])
@pytest.mark.parametrize("write_conf", [True, False], ids=["cdi-hook", "cli-configure"])
def test_fifo_in_ld_so_conf_does_not_hang(rootfs, fifo, write_conf):
    os.makedirs(os.path.join(rootfs, "etc/ld.so.conf.d"), exist_ok=True)
    if fifo == "etc/ld.so.conf.d/x.conf":
        with open(os.path.join(rootfs, "etc/ld.so.conf"), "w") as f:
            f.write("include /etc/ld.so.conf.d/*.conf\n")
    os.mkfifo(os.path.join(rootfs, fifo))
    start = time.monotonic()
    res = _run_ldconfig(rootfs, write_conf=write_conf, timeout_s=2, limit=30)
    assert time.monotonic() - start < 20
    out = res.stdout.strip()
    assert out.startswith("ERR ") and "ldconfig in container root" in out and "timed out" in out, \
        res.stdout + res.stderr
    assert len(out.splitlines()) == 1


@needs_root
@needs_gcc
def test_ldconfig_ignoring_its_alarm_is_killed(tmp_path, rootfs):
    """A container ldconfig that ignores SIGALRM and blocks is killed by the parent."""
    prog = _build(tmp_path, "sleeper", "#include <signal.h>\n#include <unistd.h>\n"
                  "int main(void) { signal(SIGALRM, SIG_IGN); for (;;) pause(); }\n", "-static")
    _as_image_ldconfig(rootfs, prog)
    start = time.monotonic()
    res = _run_ldconfig(rootfs, ldconfig="/sbin/ldconfig", timeout_s=1, limit=40)
    assert time.monotonic() - start < 30
    assert res.stdout.strip().startswith("ERR ") and "timed out" in res.stdout, res.stdout + res.stderr


@needs_root
@pytest.mark.parametrize("kind", ["dir", "fifo"])
def test_musl_path_not_a_regular_file(rootfs, kind):
    with open(os.path.join(rootfs, "etc/alpine-release"), "w") as f:
        f.write("3.19.0\n")
    path = os.path.join(rootfs, "etc", f"ld-musl-{os.uname().machine}.path")
    os.mkdir(path) if kind == "dir" else os.mkfifo(path)
    res = _run_ldconfig(rootfs, write_conf=True, limit=30)
    out = res.stdout.strip()
    assert out == f"ERR /etc/ld-musl-{os.uname().machine}.path in container root {rootfs}: not a regular file", \
        res.stdout + res.stderr


@needs_root
def test_musl_path_fifo_is_never_opened(rootfs):
    """Review finding: /etc/ld-musl-ARCH.path was opened (O_RDONLY|O_NONBLOCK) before its type
    was checked, so a device node there was opened by host root (a watchdog node arms the
    host's watchdog on open). Shown with a FIFO: a writer blocked in open() is released the
    moment anyone opens it for reading. It must stay blocked: the path is pinned with O_PATH
    and only a regular file is ever opened."""
    import threading

    with open(os.path.join(rootfs, "etc/alpine-release"), "w") as f:
        f.write("3.19.0\n")
    path = os.path.join(rootfs, "etc", f"ld-musl-{os.uname().machine}.path")
    os.mkfifo(path)
    opened = threading.Event()

    def writer():
        fd = os.open(path, os.O_WRONLY)  # blocks until a reader opens the FIFO
        opened.set()
        os.close(fd)
    t = threading.Thread(target=writer, daemon=True)
    t.start()
    res = _run_ldconfig(rootfs, write_conf=True, limit=30)
    assert res.stdout.strip().endswith("not a regular file"), res.stdout + res.stderr
    was_opened = opened.wait(1)
    if not was_opened:  # release our writer
        os.close(os.open(path, os.O_RDONLY | os.O_NONBLOCK))
        t.join(5)
    assert not was_opened, "the hook opened the image's FIFO"


# ---- what ldconfig prints is not all kept ---------------------------------------------------
CHATTY_C = r'''
#include <string.h>
#include <unistd.h>
int main(void) {
    static char buf[1 << 16];
    memset(buf, 'x', sizeof buf);
    buf[sizeof buf - 1] = '\n';
    for (int i = 0; i < 4800; i++)  /* 300 MiB */
        if (write(2, buf, sizeof buf) < 0) return 2;
    const char *last = "LAST LINE FROM LDCONFIG\n";
    write(2, last, strlen(last));
    return 1;
}
'''


@needs_root
@needs_gcc
def test_ldconfig_output_is_bounded(tmp_path, rootfs):
    """Review finding: the parent kept all of ldconfig's output to show its last line. An
    image's ldconfig (`ldconfig = "/sbin/ldconfig"` in config.toml), or the host one warning
    about every line of a hostile configuration, could print gigabytes within its 10 s of CPU
    into host memory. Only a bounded tail is kept; the error is still its last line."""
    prog = _build(tmp_path, "chatty", CHATTY_C, "-static")
    _as_image_ldconfig(rootfs, prog)
    code = textwrap.dedent(f"""
        import resource
        from nct.container import ldconfig as L
        from nct.container.rootfs import Root
        from nct.errors import NctError
        try:
            with Root({rootfs!r}) as r:
                L.run_ldconfig(r, ["/opt/nv/lib"], ldconfig="/sbin/ldconfig", write_conf=True)
        except NctError as e:
            print("ERR", e)
        print("MAXRSS_KIB", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
    """)
    env = dict(CLEAN_ENV, **{k: v for k, v in os.environ.items() if k == "PYTHONPATH"})
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    lines = res.stdout.strip().splitlines()
    assert len(lines) == 2 and lines[0].startswith("ERR ") and "failed: LAST LINE FROM LDCONFIG" in lines[0], \
        res.stdout[:2000] + res.stderr[-2000:]
    assert int(lines[1].split()[1]) < 150 * 1024, lines[1]  # 300 MiB were printed


FDS_C = r'''
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>
int main(void) {
    FILE *out = fopen("/ldconfig-fds.out", "w");
    if (!out) return 3;
    for (int fd = 0; fd < 4096; fd++)
        if (fd != fileno(out) && fcntl(fd, F_GETFD) != -1)
            fprintf(out, "%d\n", fd);
    /* an fd of the root opened before the pivot would lead back to the host's tree by ".." */
    fclose(out);
    return 0;
}
'''


@needs_root
@needs_gcc
@pytest.mark.parametrize("ldconfig", ["/sbin/ldconfig", "@HOST"])
def test_ldconfig_inherits_no_fd_but_stdio(tmp_path, rootfs, ldconfig):
    """Review check (held): ldconfig starts with fds 0-2 only. An fd of the container root
    opened before the pivot (the child holds one) would be a way out: fchdir to it and ".."
    walks the old namespace's tree, and with CAP_DAC_OVERRIDE any host file opens. "@HOST":
    the same probe run as the host ldconfig (sealed memfd, fexecve). Seen failing with the
    root fd made inheritable."""
    prog = _build(tmp_path, "fds", FDS_C, "-static")
    if ldconfig == "@HOST":
        ldconfig = "@" + prog
    else:
        _as_image_ldconfig(rootfs, prog)
    res = _run_ldconfig(rootfs, ldconfig=ldconfig)
    assert res.stdout.strip() == "OK", res.stdout + res.stderr
    assert open(os.path.join(rootfs, "ldconfig-fds.out")).read().split() == ["0", "1", "2"]
