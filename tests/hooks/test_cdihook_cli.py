"""nvidia-cdi-hook: every subcommand, run as the real console script against busybox rootfs
directories, hostile images included (their host "victim" must stay untouched)."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys

import pytest

from hookforms import hook_argv
from realparts import NV_MAJOR, build_lib, needs_gcc, needs_root, snapshot

HOOK = os.path.join(os.path.dirname(sys.executable), "nvidia-cdi-hook")
CTK = os.path.join(os.path.dirname(sys.executable), "nvidia-ctk")
CLEAN_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
pytestmark = pytest.mark.usefixtures("hook_form")  # alone and as an nct-steps step


def hook(*args, state: dict | None = None, env: dict | None = None, prog: str = HOOK,
         wrap: list[str] = ()) -> subprocess.CompletedProcess:
    return subprocess.run([*wrap, *hook_argv([prog, *args])], input=json.dumps(state) if state is not None else "",
                          capture_output=True, text=True, env=env or CLEAN_ENV, timeout=60)


def state_for(rootfs: str) -> dict:
    """An OCI state whose bundle config.json points at rootfs (relative, as runc bundles do)."""
    bundle = os.path.dirname(rootfs)
    with open(os.path.join(bundle, "config.json"), "w") as f:
        json.dump({"ociVersion": "1.0.2", "root": {"path": os.path.basename(rootfs)}}, f)
    return {"ociVersion": "1.0.2", "id": "x", "status": "creating", "pid": os.getpid(), "bundle": bundle}


# ---- compatibility rules --------------------------------------------------------------------
def test_unknown_subcommand_warns_and_exits_0():
    res = hook("some-future-hook", "--with", "flags")
    assert res.returncode == 0
    assert "Unsupported CDI hook" in res.stderr


@pytest.mark.parametrize("args, rc, message", [
    (["--no-such-flag"], 0, "Unsupported CDI hook"),                     # no known hook named
    (["--no-such-flag", "some-future-hook"], 0, "Unsupported CDI hook: some-future-hook"),
    (["--no-such-flag", "create-symlinks"], 1, "No such option"),       # a known hook: an error
    (["create-symlinks", "--future-flag", "x"], 1, "create-symlinks: No such option"),
    ([], 0, "No CDI hook specified"),
    (["-d"], 0, "No CDI hook specified"),
])
def test_unknown_flags_and_no_hook_as_upstream(args, rc, message):
    """Upstream's nvidia-cdi-hook: an unknown flag for a hook it knows fails the hook; an
    unknown (newer) hook, or none, is a warning and exit 0."""
    res = hook(*args)
    assert res.returncode == rc, res.stderr
    assert message in res.stderr and len(res.stderr.strip().splitlines()) == 1


def test_noop_and_ctk_hook_alias(rootfs):
    assert hook("noop").returncode == 0
    res = hook("hook", "create-symlinks", "--link", "libcuda.so.1::/usr/lib/x86_64-linux-gnu/libcuda.so",
               state=state_for(rootfs), prog=CTK)
    assert res.returncode == 0, res.stderr
    assert os.readlink(os.path.join(rootfs, "usr/lib/x86_64-linux-gnu/libcuda.so")) == "libcuda.so.1"


def test_bad_state_is_one_line_error():
    res = hook("create-symlinks", "--link", "a::/b", state=None)
    assert res.returncode != 0
    assert res.stderr.startswith("nvidia-cdi-hook: container state on stdin: invalid JSON")
    assert len(res.stderr.strip().splitlines()) == 1


def test_root_slash_refused(tmp_path):
    spec = tmp_path / "config.json"
    spec.write_text(json.dumps({"root": {"path": "/"}}))
    res = hook("update-ldcache", "--folder", "/usr/lib", "--container-spec", str(spec))
    assert res.returncode != 0 and "must not be /" in res.stderr


# ---- create-symlinks ------------------------------------------------------------------------
def test_create_symlinks_idempotent_and_replacing(rootfs):
    st = state_for(rootfs)
    link = os.path.join(rootfs, "usr/lib/x86_64-linux-gnu/libcuda.so")
    with open(link, "w") as f:  # a plain file in the way is replaced atomically
        f.write("image file")
    for _ in range(2):
        res = hook("create-symlinks", "--link", "libcuda.so.1::/usr/lib/x86_64-linux-gnu/libcuda.so",
                   "--link", "../libnvidia-allocator.so.1::/usr/lib/x86_64-linux-gnu/gbm/nvidia-drm_gbm.so", state=st)
        assert res.returncode == 0, res.stderr
    assert os.readlink(link) == "libcuda.so.1"
    gbm = os.path.join(rootfs, "usr/lib/x86_64-linux-gnu/gbm")
    assert stat.S_IMODE(os.stat(gbm).st_mode) == 0o755
    assert os.readlink(os.path.join(gbm, "nvidia-drm_gbm.so")) == "../libnvidia-allocator.so.1"
    assert not [n for n in os.listdir(os.path.dirname(link)) if n.startswith(".")]


def test_create_symlinks_hostile_parent_stays_in_root(rootfs, victim):
    """The image's lib dir is an absolute symlink to a host dir: the link lands inside the rootfs."""
    before = snapshot(victim)
    libdir = os.path.join(rootfs, "usr/lib/x86_64-linux-gnu")
    os.rmdir(libdir)
    os.symlink(os.path.join(victim, "lib"), libdir)
    res = hook("create-symlinks", "--link", "libcuda.so.1::/usr/lib/x86_64-linux-gnu/libcuda.so",
               "--link", "x::/usr/lib/x86_64-linux-gnu/../../../../../../../../keep", state=state_for(rootfs))
    assert res.returncode == 0, res.stderr
    assert snapshot(victim) == before
    inside = os.path.join(rootfs, victim.lstrip("/"), "lib", "libcuda.so")
    assert os.readlink(inside) == "libcuda.so.1"
    assert os.readlink(os.path.join(rootfs, "keep")) == "x"  # ".." stops at the container root


# ---- update-ldcache -------------------------------------------------------------------------
def _env_dumper(tmp_path) -> str:
    """A static stand-in for ldconfig that records its argv and environment in /ldconfig.out
    (of whatever root it runs in)."""
    src = tmp_path / "dump.c"
    src.write_text(r'''
#include <stdio.h>
extern char **environ;
int main(int argc, char **argv) {
    FILE *f = fopen("/ldconfig.out", "w");
    if (!f) return 3;
    for (int i = 0; i < argc; i++) fprintf(f, "arg %s\n", argv[i]);
    for (char **e = environ; *e; e++) fprintf(f, "env %s\n", *e);
    return fclose(f) ? 4 : 0;
}
''')
    out = str(tmp_path / "fake-ldconfig")
    subprocess.run(["gcc", "-static", "-O1", "-o", out, str(src)], check=True)
    return out


@needs_root
@needs_gcc
def test_update_ldcache_runs_chrooted_with_empty_env(tmp_path, rootfs):
    fake = _env_dumper(tmp_path)
    env = dict(CLEAN_ENV, LD_PRELOAD="/evil/preload.so", LD_LIBRARY_PATH="/evil", NVIDIA_CTK_DEBUG="false")
    res = hook("update-ldcache", "--folder", "/usr/lib/x86_64-linux-gnu", "--folder", "/opt/nv/lib",
               "--ldconfig-path", fake, state=state_for(rootfs), env=env)
    assert res.returncode == 0, res.stderr
    lines = open(os.path.join(rootfs, "ldconfig.out")).read().splitlines()
    assert lines[1:] == ["arg -f", "arg /etc/ld.so.conf", "arg -C", "arg /etc/ld.so.cache"]
    assert not [line for line in lines if line.startswith("env ")]  # empty environment
    assert not os.path.exists("/ldconfig.out")
    conf = open(os.path.join(rootfs, "etc/ld.so.conf")).read()
    assert conf == "include /etc/ld.so.conf.d/*.conf\n"
    confd = os.path.join(rootfs, "etc/ld.so.conf.d")
    names = sorted(os.listdir(confd))
    assert names[0].startswith("00-nvcr-") and names[1].startswith("zz-nvcr-")
    assert open(os.path.join(confd, names[0])).read() == "/opt/nv/lib\n"  # system dir not repeated
    assert "/usr/lib/x86_64-linux-gnu" in open(os.path.join(confd, names[1])).read()
    assert stat.S_IMODE(os.stat(os.path.join(confd, names[0])).st_mode) == 0o644


@needs_root
@needs_gcc
@pytest.mark.parametrize("configured,present", [
    ("ldconfig.real", "ldconfig"),        # .real configured, missing: the plain one runs
    ("ldconfig", "ldconfig.real"),        # plain configured, .real present: .real runs
    ("ldconfig.real", "ldconfig.real"),
])
def test_update_ldcache_ldconfig_real_fallback(tmp_path, rootfs, configured, present):
    d = tmp_path / "sbin"
    d.mkdir()
    os.rename(_env_dumper(tmp_path), d / present)
    res = hook("update-ldcache", "--folder", "/opt/nv/lib", "--ldconfig-path", str(d / configured),
               state=state_for(rootfs))
    assert res.returncode == 0, res.stderr
    assert open(os.path.join(rootfs, "ldconfig.out")).read().startswith("arg ")


@needs_root
@needs_gcc
def test_update_ldcache_hostile_etc_symlink_never_writes_host(tmp_path, rootfs, victim):
    """/etc -> host dir and /etc/ld.so.cache -> host file: ldconfig writes inside the rootfs."""
    before = snapshot(victim)
    build_lib(os.path.join(rootfs, "usr/lib/x86_64-linux-gnu"), "libnvfake.so.550.54.15", "libnvfake.so.1")
    shutil.rmtree(os.path.join(rootfs, "etc"))
    os.symlink(os.path.join(victim, "etc"), os.path.join(rootfs, "etc"))
    res = hook("update-ldcache", "--folder", "/usr/lib/x86_64-linux-gnu", state=state_for(rootfs))
    assert res.returncode == 0, res.stderr
    assert snapshot(victim) == before
    cache = os.path.join(rootfs, victim.lstrip("/"), "etc", "ld.so.cache")
    out = subprocess.run(["/sbin/ldconfig", "-p", "-C", cache], capture_output=True, text=True).stdout
    assert "libnvfake.so.1" in out


# ---- update-ldcache: what the container's loader already knows ------------------------------
def _ours(rootfs: str) -> list[str]:
    """Dirs of the 00-nvcr-* file the hook wrote (the ones it took as new to the loader)."""
    d = os.path.join(rootfs, "etc/ld.so.conf.d")
    out = []
    for n in sorted(os.listdir(d)) if os.path.isdir(d) else []:
        if n.startswith("00-nvcr-"):
            out += open(os.path.join(d, n)).read().split()
    return out


def _write(rootfs: str, path: str, text: str) -> None:
    p = os.path.join(rootfs, path.lstrip("/"))
    os.makedirs(os.path.dirname(p), exist_ok=True)
    with open(p, "w") as f:
        f.write(text)


@needs_root
@pytest.mark.parametrize("conf,files,ours", [
    # a custom include: its dirs are known, so not listed again ahead of the image's order
    ("include /opt/conf/*.conf\n", {"/opt/conf/nv.conf": "/opt/nv/lib\n"}, ["/opt/new"]),
    # relative include: relative to the including file's directory (/etc)
    ("include custom.d/*.conf\n", {"/etc/custom.d/a.conf": "/opt/nv/lib/\n"}, ["/opt/new"]),
    # nested includes
    ("include /etc/a.conf\n", {"/etc/a.conf": "include /etc/b.conf\n/opt/nv/lib\n",
                               "/etc/b.conf": "/opt/new\n"}, []),
    # /etc/ld.so.conf.d is not read when ld.so.conf does not include it
    ("/usr/local/lib\n", {"/etc/ld.so.conf.d/nv.conf": "/opt/nv/lib\n"}, ["/opt/nv/lib", "/opt/new"]),
    # the usual layout
    ("include /etc/ld.so.conf.d/*.conf\n", {"/etc/ld.so.conf.d/nv.conf": "/opt/nv/lib\n"}, ["/opt/new"]),
    # no ld.so.conf: the one nct creates (include /etc/ld.so.conf.d/*.conf) counts
    (None, {"/etc/ld.so.conf.d/nv.conf": "/opt/nv/lib\n"}, ["/opt/new"]),
    # comments, hwcap lines and =TYPE suffixes as ldconfig reads them
    ("# include /opt/conf/*.conf\nhwcap 0 nosegneg\n/opt/nv/lib=libc6\n", {"/opt/conf/x.conf": "/opt/new\n"},
     ["/opt/new"]),
])
def test_update_ldcache_follows_ld_so_conf_includes(rootfs, conf, files, ours):
    shutil.rmtree(os.path.join(rootfs, "etc/ld.so.conf.d"), ignore_errors=True)
    if os.path.exists(os.path.join(rootfs, "etc/ld.so.conf")):
        os.unlink(os.path.join(rootfs, "etc/ld.so.conf"))
    if conf is not None:
        _write(rootfs, "/etc/ld.so.conf", conf)
    for path, text in files.items():
        _write(rootfs, path, text)
    res = hook("update-ldcache", "--folder", "/opt/nv/lib", "--folder", "/opt/new", state=state_for(rootfs))
    assert res.returncode == 0, res.stderr
    assert _ours(rootfs) == ours


def _known_new(rootfs: str, folders: list[str]) -> list[str]:
    """What prepare_conf (the hook's reading of the image's conf files) takes as new."""
    from nct.container.ldconfig import prepare_conf
    from nct.container.rootfs import Root

    with Root(rootfs) as root:
        return [d for path, data in prepare_conf(root, folders) if "/00-nvcr-" in path
                for d in data.decode().split()]


@needs_root
def test_update_ldcache_includes_stay_in_root(rootfs, victim):
    """An include that names host paths, or an absolute symlink to a host file, is resolved in
    the root: the host's files never count (and the hook never writes there)."""
    host_conf = os.path.join(victim, "nv.conf")
    with open(host_conf, "w") as f:
        f.write("/opt/nv/lib\n")
    before = snapshot(victim)
    _write(rootfs, "/etc/ld.so.conf", f"include /etc/hostile/*.conf\ninclude {victim}/*.conf\n")
    os.makedirs(os.path.join(rootfs, "etc/hostile"))
    os.symlink(host_conf, os.path.join(rootfs, "etc/hostile/link.conf"))
    os.symlink("../../../../../../../" + host_conf, os.path.join(rootfs, "etc/hostile/up.conf"))
    res = hook("update-ldcache", "--folder", "/opt/nv/lib", state=state_for(rootfs))
    assert res.returncode == 0, res.stderr
    assert _ours(rootfs) == ["/opt/nv/lib"]
    assert snapshot(victim) == before


@needs_root
def test_ld_so_conf_include_fifo_device_and_cycles_never_block(rootfs):
    """Our reading skips a FIFO or device node (never opened) and reads each file of an include
    cycle once. (glibc's ldconfig itself loops on such a cycle: the hook's ldconfig timeout
    catches that one.)"""
    _write(rootfs, "/etc/ld.so.conf", "include /etc/h/*.conf\n")
    _write(rootfs, "/etc/h/a.conf", "include /etc/h/a.conf /etc/h/b.conf /etc/ld.so.conf\n/opt/a\n")
    _write(rootfs, "/etc/h/b.conf", "include /etc/h/*\n/opt/b\n")
    os.mkfifo(os.path.join(rootfs, "etc/h/fifo.conf"))
    os.mknod(os.path.join(rootfs, "etc/h/tty.conf"), 0o600 | stat.S_IFCHR, os.makedev(5, 0))
    assert _known_new(rootfs, ["/opt/a", "/opt/b", "/opt/c"]) == ["/opt/c"]


@needs_root
def test_ld_so_conf_include_bounds(rootfs):
    """More included files than the bound, a chain deeper than the nesting bound, a pattern
    over more names than the glob bound: reading stops, what is past it counts as new."""
    from nct.container import ldconfig

    d = os.path.join(rootfs, "etc/many")
    os.makedirs(d)
    n = ldconfig.MAX_CONF_FILES + 50
    for i in range(n):
        with open(os.path.join(d, f"{i:04}.conf"), "w") as f:
            f.write(f"/opt/d{i}\n")
    _write(rootfs, "/etc/ld.so.conf", "include /etc/many/*.conf\n")
    new = _known_new(rootfs, ["/opt/d0", f"/opt/d{n - 1}"])
    assert new == [f"/opt/d{n - 1}"]
    chain = ldconfig.MAX_INCLUDE_DEPTH + 5
    for i in range(chain):
        _write(rootfs, f"/etc/chain/{i}.conf", f"include /etc/chain/{i + 1}.conf\n/opt/c{i}\n")
    _write(rootfs, "/etc/ld.so.conf", "include /etc/chain/0.conf\n")
    assert _known_new(rootfs, ["/opt/c1", f"/opt/c{chain - 1}"]) == [f"/opt/c{chain - 1}"]
    for i in range(ldconfig.MAX_GLOB_NAMES + 10):
        open(os.path.join(rootfs, f"etc/many/x{i}"), "w").close()
    _write(rootfs, "/etc/ld.so.conf", "include /etc/many/*.conf\n")
    assert _known_new(rootfs, ["/opt/d0"]) == ["/opt/d0"]  # the whole pattern was past the bound


@needs_root
def test_ld_so_conf_glob_never_backtracks_exponentially(rootfs):
    """Review finding: `*a*a*...*b` against a 200-character name made the old recursive
    matcher try every split (C(200, 12) ways: hours of host CPU in the hook for one include
    line). Each star now only ever widens the last one: the hook answers at once."""
    os.makedirs(os.path.join(rootfs, "d"))
    open(os.path.join(rootfs, "d", "a" * 200), "w").close()
    _write(rootfs, "/d/" + "a" * 199 + "b", "/opt/nv/lib\n")
    _write(rootfs, "/etc/ld.so.conf", "include /d/" + "*a" * 12 + "*b\n")
    res = hook("update-ldcache", "--folder", "/opt/nv/lib", "--folder", "/opt/new", state=state_for(rootfs))
    assert res.returncode == 0, res.stderr
    assert _ours(rootfs) == ["/opt/new"]  # the one matching name was still found


def _spy(monkeypatch, cls, name: str, record) -> None:
    real = getattr(cls, name)

    def spy(*args, **kw):
        out = real(*args, **kw)
        record(args, kw, out)
        return out
    monkeypatch.setattr(cls, name, spy)


@needs_root
def test_ld_so_conf_glob_budget_is_checked_before_listing(rootfs, monkeypatch):
    """Review finding: the names budget was charged after each listing and never checked
    before the next, so every further `include /d/*` line listed the whole directory again
    (80k such lines in a 1 MiB conf file over a 5000-entry dir: minutes; over a directory
    of millions, all of it each time). Now no more than the budget is ever read."""
    from nct.container import ldconfig
    from nct.container.rootfs import Root

    d = os.path.join(rootfs, "d")
    os.makedirs(d)
    for i in range(ldconfig.MAX_GLOB_NAMES + 1000):
        open(os.path.join(d, f"f{i}"), "w").close()
    _write(rootfs, "/etc/ld.so.conf", "include /d/*\n" * 20)
    seen = []
    _spy(monkeypatch, Root, "listdir", lambda a, kw, out: seen.append(len(out)))
    assert _known_new(rootfs, ["/opt/a"]) == ["/opt/a"]
    assert sum(seen) <= ldconfig.MAX_GLOB_NAMES + 1


@needs_root
def test_ld_so_conf_long_patterns_and_total_bytes_are_bounded(rootfs, monkeypatch):
    """Review finding: a 1 MiB include pattern of 400k components was walked and opened
    (2 s per file, with 256 such files minutes; here a shorter one stands for it), and each of 256 files could be 1 MiB of
    lines to parse. A pattern longer than PATH_MAX now matches nothing, and all conf files
    together are read up to MAX_CONF_BYTES (past it: unknown, so listed again: harmless)."""
    from nct.container import ldconfig
    from nct.container.rootfs import Root

    _write(rootfs, "/etc/ld.so.conf", "include " + "/a" * 3000 + "\ninclude /etc/big/*.conf\n")
    for i in range(4):  # with ld.so.conf, a little more than MAX_CONF_BYTES in all
        _write(rootfs, f"/etc/big/{i}.conf", "#" * (ldconfig.MAX_CONF_BYTES // 4 - 20) + f"\n/opt/b{i}\n")
    opened = []
    _spy(monkeypatch, Root, "open", lambda a, kw, out: opened.append(len(a[1])))
    got = []
    real_read = os.read
    monkeypatch.setattr(ldconfig.os, "read", lambda fd, n: got.append(real_read(fd, n)) or got[-1])
    new = _known_new(rootfs, ["/opt/b0", "/opt/b3"])
    assert max(opened) <= ldconfig.MAX_PATTERN
    assert sum(map(len, got)) <= ldconfig.MAX_CONF_BYTES
    assert new == ["/opt/b3"]  # the first file fits the byte budget, the last does not


@needs_root
@pytest.mark.parametrize("openat2", [True, False], ids=["openat2", "walk"])
def test_ld_so_conf_nul_bytes_are_refused_both_ways(rootfs, monkeypatch, openat2):
    """Review finding: a NUL byte in an include raised ValueError ("embedded null byte") out of
    the component walk (kernels without openat2), failing the hook, while openat2 read the
    path as a C string cut at the NUL (another file). Both now refuse such a path."""
    from nct.container import rootfs as rootfs_mod

    monkeypatch.setattr(rootfs_mod, "USE_OPENAT2", openat2)
    _write(rootfs, "/etc/x/a.conf", "/opt/a\n")
    _write(rootfs, "/etc/y/b.conf", "/opt/b\n")
    _write(rootfs, "/etc/ld.so.conf", "include /etc/x/a.conf\0junk /etc/x/\0*.conf\n/opt/\0c\ninclude /etc/y/*.conf\n")
    assert _known_new(rootfs, ["/opt/a", "/opt/b"]) == ["/opt/a"]


@needs_root
def test_ld_so_conf_glob_cost_does_not_multiply(rootfs, monkeypatch):
    """Review findings: a 4 KB include line `/d/*/x/x/.../x` (2000 plain components after a
    wildcard over 4000 dirs) built each path component by component (4.4 s of host CPU);
    and a listing of an empty directory cost nothing, so 80k `include /e/*` lines listed it
    80k times. Plain runs are now appended at once (bench/limits_bench.py), and every
    listing costs at least one (here)."""
    from nct.container import ldconfig
    from nct.container.rootfs import Root

    for i in range(ldconfig.MAX_GLOB_NAMES - 100):
        os.makedirs(os.path.join(rootfs, f"d/{i}"))
    os.makedirs(os.path.join(rootfs, "e"))
    _write(rootfs, "/etc/ld.so.conf", "include /d/*/" + "x/" * 2000 + "\n" + "include /e/*\n" * 20000)
    built = []
    real_open = Root.open
    monkeypatch.setattr(Root, "open", lambda self, p, *a, **kw: built.append(len(p)) or real_open(self, p, *a, **kw))
    assert _known_new(rootfs, ["/opt/a"]) == ["/opt/a"]
    assert len(built) < 2 * ldconfig.MAX_GLOB_NAMES + 4 * ldconfig.MAX_CONF_FILES  # listings and opens
    # (the component-by-component paths: bench/limits_bench.py, "ld.so.conf plain run")


def test_glob_match_work_is_bounded_by_the_shared_budget():
    """The matcher's step budget: once spent (by any number of matches), nothing matches."""
    from nct.container.ldconfig import glob_match

    steps = [10_000]
    assert glob_match("a" * 200 + "b", "*a" * 12 + "*b", steps)
    while steps[0] > 0:
        glob_match("a" * 250, "*a" * 100 + "*b", steps)
    assert not glob_match("x.conf", "*.conf", steps)
    assert glob_match("x.conf", "*.conf") and not glob_match(".x.conf", "*.conf")


# ---- enable-cuda-compat ---------------------------------------------------------------------
CUDA_12_9_NOTE = {"Format": 1, "CUDA Version": "12.9", "Driver": [535, 550, 560, 565, 570, 575],
                  "Device": [1, 2, 7, 8, 9, 10, 11, 12, 13, 14]}  # the note of a CUDA 12.9 compat libcuda


def _note_blob(desc: bytes) -> bytes:
    """An ELF note as the compat libcuda carries it: owner "NVIDIA Corporation", JSON body."""
    name = b"NVIDIA Corporation\0"
    return (len(name).to_bytes(4, "little") + len(desc).to_bytes(4, "little") + (1).to_bytes(4, "little")
            + name + b"\0" * (-len(name) % 4) + desc + b"\0" * (-len(desc) % 4))


def _compat_lib(rootfs: str, version: str, note: dict | bytes | None = None, how: str = "section",
                relative: str = "usr/local/cuda/compat") -> None:
    """A gcc-built compat libcuda; the note goes in through a .section in C ("section", also
    "m32": a 32-bit i386 library, a foreign architecture here) or objcopy --add-section."""
    d = os.path.join(rootfs, relative)
    body = "int cuDriverGetVersion(int *v) { *v = 12040; return 0; }"
    blob = None
    if note is not None:
        blob = _note_blob(note if isinstance(note, bytes) else json.dumps(note).encode() + b"\0")
    if blob is not None and how in ("section", "m32"):
        arr = ",".join(str(b) for b in blob)
        body += ('\n__attribute__((used, section(".note.cuda.fwd_compatibility"), aligned(4))) '
                 f"static const unsigned char note[] = {{{arr}}};")
    if how == "m32":
        os.makedirs(d, exist_ok=True)
        src = os.path.join(d, ".c.c")
        with open(src, "w") as f:
            f.write(body + "\n")
        subprocess.run(["gcc", "-m32", "-shared", "-fPIC", "-o", os.path.join(d, f"libcuda.so.{version}"), src],
                       check=True)
        os.unlink(src)
    else:
        build_lib(d, f"libcuda.so.{version}", "libcuda.so.1", body)
    if blob is not None and how == "objcopy":
        lib = os.path.join(d, f"libcuda.so.{version}")
        with open(lib + ".note", "wb") as f:
            f.write(blob)
        subprocess.run(["objcopy", "--add-section", f".note.cuda.fwd_compatibility={lib}.note",
                        "--set-section-flags", ".note.cuda.fwd_compatibility=alloc,readonly", lib],
                       check=True, capture_output=True)
        os.unlink(lib + ".note")
    os.symlink(f"libcuda.so.{version}", os.path.join(d, "libcuda.so.1"))


def _compat_conf(rootfs: str) -> list[str]:
    d = os.path.join(rootfs, "etc/ld.so.conf.d")
    return [open(os.path.join(d, n)).read() for n in sorted(os.listdir(d)) if n.startswith("00-compat-")] \
        if os.path.isdir(d) else []


@needs_gcc
@pytest.mark.parametrize("host,used", [("550.54.15", True), ("565.10.01", False)])
def test_enable_cuda_compat_by_major(rootfs, host, used):
    _compat_lib(rootfs, "560.35.03")
    res = hook("enable-cuda-compat", f"--host-driver-version={host}", state=state_for(rootfs))
    assert res.returncode == 0, res.stderr
    assert _compat_conf(rootfs) == (["/usr/local/cuda/compat\n"] if used else [])


@needs_gcc
@pytest.mark.parametrize("how", ["section", "objcopy", "m32"])
@pytest.mark.parametrize("host,used", [
    ("570.211.01", True),    # an older branch the note lists
    ("535.54.03", True),
    ("575.10.10", True),     # the compat lib's own branch, older build on the host
    ("575.57.08", False),    # the same build
    ("575.99.99", False),    # the same branch, newer on the host
    ("590.44.01", False),    # a newer branch, not listed
    ("545.23.08", False),    # an older branch the note does not list
])
def test_enable_cuda_compat_by_elf_note(rootfs, host, used, how):
    """The note's `Driver` list holds the host branches the compat lib supports (upstream's
    rule: the host's branch listed and the compat lib strictly newer), whatever the ELF class
    or machine of the library and however the note got into it."""
    if how == "m32" and subprocess.run(["gcc", "-m32", "-x", "c", "-c", "-o", "/dev/null", "/dev/null"],
                                       capture_output=True).returncode:
        pytest.skip("gcc -m32 (gcc-multilib) missing")
    _compat_lib(rootfs, "575.57.08", CUDA_12_9_NOTE, how)
    res = hook("enable-cuda-compat", f"--host-driver-version={host}", state=state_for(rootfs))
    assert res.returncode == 0, res.stderr
    assert _compat_conf(rootfs) == (["/usr/local/cuda/compat\n"] if used else [])


@needs_gcc
@pytest.mark.parametrize("note,host,used", [
    (None, "570.211.01", True),                          # no note: majors, 575 > 570
    (None, "575.10.10", False),                          # no note: same major
    (b"{not json\0", "570.211.01", True),                # undecodable note: majors
    (b"{not json\0", "590.44.01", False),
    (b'{"Driver": ["570"]}\0', "570.211.01", True),      # strings where upstream wants numbers: majors
    (b'{"Driver": ["570"]}\0', "575.10.10", False),
])
def test_enable_cuda_compat_without_a_usable_note(rootfs, note, host, used):
    _compat_lib(rootfs, "575.57.08", note)
    res = hook("enable-cuda-compat", f"--host-driver-version={host}", state=state_for(rootfs))
    assert res.returncode == 0, res.stderr
    assert _compat_conf(rootfs) == (["/usr/local/cuda/compat\n"] if used else [])


@needs_gcc
@pytest.mark.parametrize("link,real,written", [
    ("/etc/alternatives/cuda", "etc/alternatives/cuda", "/etc/alternatives/cuda/compat"),
    ("../../../../../../", "", "/compat"),  # ".." stops at the container root
])
def test_enable_cuda_compat_names_the_resolved_dir(rootfs, link, real, written):
    """As upstream: the conf file names the compat dir as it resolves inside the root."""
    cuda = os.path.join(rootfs, "usr/local/cuda")
    os.makedirs(os.path.join(rootfs, real, "compat"), exist_ok=True)
    os.makedirs(os.path.dirname(cuda), exist_ok=True)
    _compat_lib(os.path.join(rootfs, real) if real else rootfs, "575.57.08", None, relative="compat")
    os.symlink(link, cuda)
    res = hook("enable-cuda-compat", "--host-driver-version=570.211.01", state=state_for(rootfs))
    assert res.returncode == 0, res.stderr
    assert _compat_conf(rootfs) == [written + "\n"]


def test_enable_cuda_compat_noop_without_versions_or_lib(rootfs):
    assert hook("enable-cuda-compat", state=state_for(rootfs)).returncode == 0
    res = hook("enable-cuda-compat", "--host-driver-version=550.54.15", state=state_for(rootfs))
    assert res.returncode == 0 and _compat_conf(rootfs) == []


def test_compat_dir_cost_does_not_grow_with_the_image(rootfs, monkeypatch):
    """Review finding: a compat dir of 200k `libcuda.so.N.0` files cost 3.7 s of host CPU per
    container start (one in-root lstat each; 10M files: minutes), all to answer "more than
    one: no compat". A second candidate now ends the search, and a directory larger than
    MAX_COMPAT_NAMES is not read past it (no compat)."""
    from nct.container import compat
    from nct.container.rootfs import Root

    d = os.path.join(rootfs, "usr/local/cuda/compat")
    os.makedirs(d)
    monkeypatch.setattr(compat, "MAX_COMPAT_NAMES", 500, raising=False)
    for i in range(300):
        open(os.path.join(d, f"libcuda.so.{i}.0"), "w").close()
    looked = []
    real = Root.lstat
    monkeypatch.setattr(Root, "lstat", lambda self, p: looked.append(p) or real(self, p))
    with Root(rootfs) as root:
        assert compat.compat_libcuda(root, "/usr/local/cuda/compat") is None
        assert len(looked) == 2
        for i in range(300):
            open(os.path.join(d, f"other{i}"), "w").close()
        for n in os.listdir(d):
            if n.startswith("libcuda.so.") and n != "libcuda.so.7.0":
                os.unlink(os.path.join(d, n))
        looked.clear()  # one candidate among more names than the bound: not read past it
        monkeypatch.setattr(compat, "MAX_COMPAT_NAMES", 200, raising=False)
        assert compat.compat_libcuda(root, "/usr/local/cuda/compat") is None
        assert len(os.listdir(d)) == 301 and len(looked) <= 1
        monkeypatch.setattr(compat, "MAX_COMPAT_NAMES", 1 << 16)
        assert compat.compat_libcuda(root, "/usr/local/cuda/compat") == ("/usr/local/cuda/compat/libcuda.so.7.0",
                                                                          "7.0")


# ---- disable-device-node-modification --------------------------------------------------------
@needs_root
@pytest.mark.parametrize("kernel", ["new", "old"])
def test_disable_device_node_modification(tmp_path, rootfs, kernel):
    """"old": a simulated kernel without the new mount API (tests/e2e/oldkernel.py): mount(2)."""
    hostproc = tmp_path / "hostproc"
    (hostproc / "driver/nvidia").mkdir(parents=True)
    (hostproc / "driver/nvidia/params").write_text("EnableMSI: 1\nModifyDeviceFiles: 1\n")
    cparams = os.path.join(rootfs, "proc/driver/nvidia/params")
    os.makedirs(os.path.dirname(cparams))
    with open(cparams, "w") as f:
        f.write("EnableMSI: 1\nModifyDeviceFiles: 1\n")
    st = state_for(rootfs)
    env = dict(CLEAN_ENV, NCT_PROC_ROOT=str(hostproc))
    # Mounts stay inside a private mount namespace that dies with the shell.
    prefix = ""
    if kernel == "old":
        from e2e import oldkernel

        prefix = str(oldkernel.build(tmp_path / "oldkernel")) + " "
    script = (f'{prefix}{HOOK} disable-device-node-modification && cat {cparams} && '
              f'grep "{cparams}" /proc/self/mountinfo')
    res = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", script],
                         input=json.dumps(st), capture_output=True, text=True, env=env, timeout=60)
    assert res.returncode == 0, res.stderr
    assert "ModifyDeviceFiles: 0" in res.stdout
    assert " ro," in res.stdout.splitlines()[-1] and "nodev" in res.stdout.splitlines()[-1]
    assert open(cparams).read().endswith("ModifyDeviceFiles: 1\n")  # image file itself untouched


@needs_root
@pytest.mark.parametrize("params,after", [
    ("ModifyDeviceFiles: 11\n", None),                       # not exactly 1
    ("  ModifyDeviceFiles: 1\n", None),                      # leading spaces
    ("ModifyDeviceFiles: 1  \n", None),                      # trailing spaces
    ("ModifyDeviceFiles: 0\nModifyDeviceFiles: 1\n", None),  # already 0: nothing to do
    ("EnableMSI: 1\nModifyDeviceFiles: 1", "EnableMSI: 1\nModifyDeviceFiles: 0\n"),
    ("ModifyDeviceFiles: 1\r\nX: ModifyDeviceFiles: 1\n", "ModifyDeviceFiles: 0\nX: ModifyDeviceFiles: 1\n"),
])
def test_disable_device_node_modification_exact_line(tmp_path, rootfs, params, after):
    """Upstream rewrites only a line that is exactly `ModifyDeviceFiles: 1`; otherwise the
    container's params file is left alone (no mount)."""
    hostproc = tmp_path / "hostproc"
    (hostproc / "driver/nvidia").mkdir(parents=True)
    (hostproc / "driver/nvidia/params").write_bytes(params.encode())
    cparams = os.path.join(rootfs, "proc/driver/nvidia/params")
    os.makedirs(os.path.dirname(cparams))
    with open(cparams, "w") as f:
        f.write("image copy\n")
    env = dict(CLEAN_ENV, NCT_PROC_ROOT=str(hostproc))
    res = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c",
                          f"{HOOK} disable-device-node-modification && cat {cparams}"],
                         input=json.dumps(state_for(rootfs)), capture_output=True, text=True, env=env, timeout=60)
    assert res.returncode == 0, res.stderr
    assert res.stdout == (after if after is not None else "image copy\n")


# ---- update-application-profile / chmod -------------------------------------------------------
@needs_root
def test_update_application_profile(rootfs):
    for name, minor in (("nvidia1", 1), ("nvidia3", 3), ("nvidiactl", 255)):
        os.mknod(os.path.join(rootfs, "dev", name), 0o666 | stat.S_IFCHR, os.makedev(NV_MAJOR, minor))
    with open(os.path.join(rootfs, "dev", "nvidia7"), "w"):
        pass  # not a char device: ignored
    res = hook("update-application-profile", state=state_for(rootfs))
    assert res.returncode == 0, res.stderr
    d = os.path.join(rootfs, "etc/nvidia/nvidia-application-profiles-rc.d")
    assert stat.S_IMODE(os.stat(d).st_mode) == 0o555
    conf = os.path.join(d, "10-container.conf")
    assert stat.S_IMODE(os.stat(conf).st_mode) == 0o444
    doc = open(conf).read()
    assert '"EGLVisibleDGPUDevices", 0xa ]' in doc and '"profile": "_container_"' in doc


def test_chmod(rootfs):
    os.makedirs(os.path.join(rootfs, "dev/dri"), mode=0o700)
    res = hook("chmod", "--mode", "755", "--path", "/dev/dri", "--path", "/dev/absent", state=state_for(rootfs))
    assert res.returncode == 0, res.stderr
    assert stat.S_IMODE(os.stat(os.path.join(rootfs, "dev/dri")).st_mode) == 0o755
    assert hook("chmod", "--path", "/dev/dri", state=state_for(rootfs)).returncode != 0


def test_update_ldcache_alpine_uses_musl_path(rootfs):
    os.unlink(os.path.join(rootfs, "etc/debian_version"))
    with open(os.path.join(rootfs, "etc/alpine-release"), "w") as f:
        f.write("3.19.0\n")
    st = state_for(rootfs)
    for _ in range(2):  # idempotent
        res = hook("update-ldcache", "--folder", "/usr/lib", "--folder", "/opt/nv/lib", state=st)
        assert res.returncode == 0, res.stderr
    musl = os.path.join(rootfs, f"etc/ld-musl-{os.uname().machine}.path")
    assert open(musl).read().split() == ["/lib", "/usr/local/lib", "/usr/lib", "/opt/nv/lib"]
    assert not os.path.exists(os.path.join(rootfs, "etc/ld.so.cache"))


def test_version():
    res = hook("--version")
    assert res.returncode == 0 and res.stdout.startswith("nvidia-cdi-hook version ")
