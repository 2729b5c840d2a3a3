"""The launcher's pass-through fast path (issue 14): `nvidia-container-runtime state/kill/
delete/exec...` execs the low-level runtime without starting Python, from the settings the
shim left in python/.passthrough-cache, and starts Python on every doubt.

The oracle: after the cache is written, python/bin/python3 is moved away.  A call that still
reaches the probe runtime took the fast path; one that fails with the launcher's "cannot
execute .../python3" went to Python.  The probe records argv, environment and signal state,
so the fast path is compared with the Python path call by call."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

PROBE = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
int main(int argc, char **argv, char **envp) {
    FILE *f = fopen(getenv("PROBE_OUT"), "w");
    char line[512];
    for (int i = 0; i < argc; i++) fprintf(f, "arg %s\n", argv[i]);
    for (char **e = envp; *e; e++) fprintf(f, "env %s\n", *e);
    FILE *s = fopen("/proc/self/status", "r");
    while (fgets(line, sizeof line, s)) if (!strncmp(line, "SigBlk", 6) || !strncmp(line, "SigIgn", 6)) fputs(line, f);
    return 0;
}
"""


class Tree:
    def __init__(self, root: Path, tmp: Path):
        self.root, self.tmp = root, tmp
        self.cache = root / "python/.passthrough-cache"
        self.python = root / "python/bin/python3"
        self.bin = tmp / "bin"
        self.xdg = tmp / "xdg"
        self.config = self.xdg / "nvidia-container-runtime/config.toml"
        self.out = tmp / "probe.out"

    def env(self, **extra: str) -> dict[str, str]:
        env = {"PATH": f"{self.bin}:/usr/bin:/bin", "XDG_CONFIG_HOME": str(self.xdg), "PROBE_OUT": str(self.out)}
        env.update(extra)
        return env

    def run(self, args, env=None, name="nvidia-container-runtime", ignore_pipe=False):
        """(CompletedProcess, the probe's record or None)."""
        self.out.unlink(missing_ok=True)
        r = subprocess.run([str(self.root / name), *args], capture_output=True, text=True,
                           env=self.env() if env is None else env, cwd=self.tmp,
                           preexec_fn=(lambda: signal.signal(signal.SIGPIPE, signal.SIG_IGN)) if ignore_pipe else None)
        return r, (self.out.read_text() if self.out.exists() else None)

    @contextlib.contextmanager
    def no_python(self):
        """python3 moved away: only the fast path can reach the runtime."""
        off = self.python.with_name("python3.off")
        os.rename(self.python, off)
        try:
            yield
        finally:
            os.rename(off, self.python)

    def fast(self, args, env=None, **kw):
        """Run with the cache primed by a Python pass-through and python3 gone: the probe's
        record when the fast path ran, None when the launcher went for Python."""
        with self.no_python():
            r, rec = self.run(args, env, **kw)
        if rec is None:
            assert r.returncode == 127 and "cannot execute" in r.stderr and "python3" in r.stderr, r.stderr
        return rec


def make_tree(toolkit: Path, top: Path) -> Tree:
    """A copy of the toolkit under `top` with the probe built as its `runc`."""
    root = top / "tk"
    shutil.copytree(toolkit, root, symlinks=True)
    t = Tree(root, top)
    t.bin.mkdir()
    (top / "probe.c").write_text(PROBE)
    subprocess.run(["gcc", "-O1", "-o", str(t.bin / "runc"), str(top / "probe.c")], check=True)
    t.config.parent.mkdir(parents=True)
    return t


@pytest.fixture
def tree(toolkit, tmp_path) -> Tree:
    return make_tree(toolkit, tmp_path)


def prime(t: Tree, args=("--root", "/x", "state", "id"), env=None) -> str:
    """A pass-through through Python (which writes the cache); returns its probe record."""
    r, rec = t.run(list(args), env)
    assert r.returncode == 0 and rec is not None, r.stderr
    assert t.cache.is_file()
    return rec


STATE = ["--root", "/x", "state", "id"]


def test_fast_path_is_used_and_identical_to_python(tree):
    """argv, environment and signal state reach the runtime exactly as the Python shim
    passes them, for the shapes engines use (global flags first, --log files, exec's
    own arguments, the .cdi/.legacy names), with no config file and with one."""
    shapes = [STATE,
              ["--root", "/run/runc", "--log", str(tree.tmp / "engine.log"), "--log-format", "json", "kill", "id", "9"],
              ["--systemd-cgroup", "delete", "--force", "id"],
              ["exec", "--pid-file", "/p", "id", "sh", "-c", "echo hi"],
              ["--log=" + str(tree.tmp / "eq.log"), "start", "id"]]
    for config in (None, '[nvidia-container-runtime]\nlog-level = "info"\nruntimes = ["nope", "runc"]\n'):
        if config is not None:
            tree.config.write_text(config)
        for name in ("nvidia-container-runtime", "nvidia-container-runtime.cdi", "nvidia-container-runtime.legacy"):
            for args in shapes:
                for log in tree.tmp.glob("*.log"):
                    log.unlink()
                tree.cache.unlink(missing_ok=True)
                slow = tree.run(args, name=name)[1]  # Python (no cache yet), which writes it
                assert slow is not None and tree.cache.is_file()
                made_by_python = sorted(p.name for p in tree.tmp.glob("*.log"))
                for log in tree.tmp.glob("*.log"):
                    log.unlink()
                quick = tree.fast(args, name=name)
                assert quick == slow, (name, args)
                # the engine's --log file is created (empty) as the Python shim does
                assert sorted(p.name for p in tree.tmp.glob("*.log")) == made_by_python
    assert f"arg {tree.bin}/runc\n" in quick and "SigIgn:\t0000000000000000" in quick


def test_ignored_signals_and_duplicate_free_env_match(tree):
    """An engine that starts the shim with SIGPIPE ignored: both paths give the runtime
    default dispositions (nct.sigreset)."""
    prime(tree)
    slow = tree.run(STATE, ignore_pipe=True)[1]
    quick = tree.fast(STATE, ignore_pipe=True)
    assert quick == slow and "SigIgn:\t0000000000000000" in quick


def test_runtime_is_looked_up_now_not_cached(tree):
    """The cache holds config.toml's settings, not a lookup result: a runtime that appears
    earlier on PATH later is found by the fast path, as Python would find it."""
    prime(tree)
    earlier = tree.tmp / "earlier"
    earlier.mkdir()
    shutil.copy2(tree.bin / "runc", earlier / "runc")
    env = tree.env(PATH=f"{earlier}:{tree.bin}:/usr/bin:/bin")
    assert f"arg {earlier}/runc\n" in tree.fast(STATE, env)
    # the shim itself on PATH as `runc` is skipped, as nct.runtime.lookup does
    os.link(tree.root / "nvidia-container-runtime", earlier / "shim")
    (earlier / "runc").unlink()
    os.link(tree.root / "nvidia-container-runtime", earlier / "runc")
    rec = tree.fast(STATE, env, name="nvidia-container-runtime")
    assert rec is not None and f"arg {tree.bin}/runc\n" in rec


def test_lookup_matches_python_for_path_shapes(tree):
    """PATH entries with a trailing slash, empty and relative entries, and a runtime found
    only in the fallback directories (not on PATH): the fast path execs the same file
    under the same name as nct.runtime.lookup."""
    runc = shutil.which("runc", path="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
    for path in (f"{tree.bin}/:/usr/bin", f"::bin:{tree.bin}", "bin:/usr/bin", "/nonexistent"):
        if path == "/nonexistent" and not runc:
            continue
        env = tree.env(PATH=path)
        args = ["--root", str(tree.tmp / "runc-root"), "list"]  # real runc when found in a fallback dir
        tree.cache.unlink(missing_ok=True)
        slow_r, slow = tree.run(args, env)
        assert tree.cache.is_file(), slow_r.stderr
        with tree.no_python():
            fast_r, fast = tree.run(args, env)
        assert "cannot execute" not in fast_r.stderr, path
        assert (fast_r.returncode, fast_r.stdout, fast_r.stderr, fast) == \
            (slow_r.returncode, slow_r.stdout, slow_r.stderr, slow), path


@pytest.mark.parametrize("args", [
    ["create", "--bundle", "/b", "id"],
    ["--root", "/x", "--log", "/l", "create", "--bundle", "/b", "id"],  # create after global flags
    ["--root", "/x", "run", "id"],  # run creates a container too
    ["restore", "id"],
    ["--unknown-flag", "value", "state", "id"],  # a shape is_create cannot place
    ["state", "--bundle", "create"],  # upstream's literal rule would see `create`
    ["--version"],
    ["state", "--debug", "id"],
    ["exec", "id", "sh", "--debug"],  # Python's logger reads --debug anywhere
    ["--root", "/x"],  # no subcommand
    [],
    ["spec"],  # not on the fast path's list
])
def test_falls_back_on_argv_it_does_not_plainly_pass(tree, args):
    prime(tree)
    assert tree.fast(args) is None


def test_falls_back_when_config_changes_or_appears(tree):
    prime(tree)  # no config.toml: cached as absent
    tree.config.write_text('[nvidia-container-runtime]\nruntimes = ["runc"]\n')
    assert tree.fast(STATE) is None
    prime(tree)
    assert tree.fast(STATE) is not None
    os.utime(tree.config, ns=(0, 0))  # same size, other mtime
    assert tree.fast(STATE) is None
    prime(tree)
    tree.config.write_text('[nvidia-container-runtime]\nruntimes = ["nort"]\n')  # same size, new content
    assert tree.fast(STATE) is None
    # the Python shim then reports what the config says (no `nort` here), never the stale runc
    r, rec = tree.run(STATE)
    assert rec is None and r.returncode == 1 and "no low-level runtime found" in r.stderr
    # a cache made with a config file, and the file gone: built-in defaults now, Python reads them
    tree.config.write_text('[nvidia-container-runtime]\nruntimes = ["runc"]\n')
    prime(tree)
    tree.config.unlink()
    assert tree.fast(STATE) is None


def test_falls_back_when_env_chooses_another_config(tree):
    prime(tree)
    other = tree.tmp / "other.toml"
    other.write_text("")
    assert tree.fast(STATE, tree.env(NVIDIA_CTK_CONFIG_FILE_PATH=str(other))) is None
    assert tree.fast(STATE, tree.env(XDG_CONFIG_HOME=str(tree.tmp))) is None
    env = tree.env()
    del env["XDG_CONFIG_HOME"]
    assert tree.fast(STATE, env) is None


RAWEXEC = r"""
#include <string.h>
#include <unistd.h>
/* rawexec ENV... -- PROG ARGS...: exec with exactly these environment strings, duplicates kept */
int main(int argc, char **argv) {
    int i = 1;
    while (i < argc && strcmp(argv[i], "--")) i++;
    argv[i] = 0;
    execv(argv[i + 1], argv + i + 1);
    return 127;
}
"""


def test_falls_back_on_duplicate_env_entries(tree):
    """Two XDG_CONFIG_HOME entries: which one Python sees is not the launcher's guess."""
    (tree.tmp / "rawexec.c").write_text(RAWEXEC.replace("execv(argv[i + 1], argv + i + 1)",
                                                        "execve(argv[i + 1], argv + i + 1, argv + 1)"))
    subprocess.run(["gcc", "-o", str(tree.tmp / "rawexec"), str(tree.tmp / "rawexec.c")], check=True)
    prime(tree)
    base = [str(tree.tmp / "rawexec"), f"PROBE_OUT={tree.out}", f"PATH={tree.bin}:/usr/bin:/bin"]
    shim = ["--", str(tree.root / "nvidia-container-runtime"), *STATE]
    with tree.no_python():
        tree.out.unlink(missing_ok=True)
        r = subprocess.run([*base, f"XDG_CONFIG_HOME={tree.xdg}", *shim], capture_output=True, text=True)
        assert tree.out.exists(), r.stderr  # the helper itself is sound
        tree.out.unlink()
        r = subprocess.run([*base, f"XDG_CONFIG_HOME={tree.tmp}", f"XDG_CONFIG_HOME={tree.xdg}", *shim],
                           capture_output=True, text=True)
    assert not tree.out.exists() and "cannot execute" in r.stderr


@pytest.mark.parametrize("odd", [["FOO=1", "FOO=2"], ["JUNK"], ["=x"], [""]])
def test_falls_back_on_env_python_would_rewrite(tree, odd):
    """Python hands the runtime a dict of /proc/self/environ: a name given twice keeps only
    its last value, an entry without `=` or with an empty name is dropped.  The launcher,
    which would pass them on as they are, goes to Python instead."""
    (tree.tmp / "rawexec.c").write_text(RAWEXEC.replace("execv(argv[i + 1], argv + i + 1)",
                                                        "execve(argv[i + 1], argv + i + 1, argv + 1)"))
    subprocess.run(["gcc", "-o", str(tree.tmp / "rawexec"), str(tree.tmp / "rawexec.c")], check=True)
    cmd = [str(tree.tmp / "rawexec"), f"PROBE_OUT={tree.out}", f"PATH={tree.bin}:/usr/bin:/bin",
           f"XDG_CONFIG_HOME={tree.xdg}", *odd, "--", str(tree.root / "nvidia-container-runtime"), *STATE]
    subprocess.run(cmd, capture_output=True)  # Python (no cache yet), which writes it
    slow = tree.out.read_text()
    assert "env FOO=1\n" not in slow and "JUNK" not in slow and "env =x" not in slow and tree.cache.is_file()
    with tree.no_python():
        tree.out.unlink()
        r = subprocess.run(cmd, capture_output=True, text=True)
    assert not tree.out.exists() and "cannot execute" in r.stderr


def test_falls_back_when_logging_is_asked_for(tree):
    """Debug logging is Python's: no cache is written, and a cache from before no longer
    matches the changed config."""
    prime(tree)
    log = tree.tmp / "debug/runtime.log"
    tree.config.write_text(f'[nvidia-container-runtime]\ndebug = "{log}"\nlog-level = "debug"\n')
    assert tree.fast(STATE) is None
    tree.cache.unlink()
    r, rec = tree.run(STATE)
    assert rec is not None and "Using low-level runtime" in log.read_text()
    assert not tree.cache.exists()
    assert tree.fast(STATE) is None


def test_no_cache_when_python_logged_a_warning(tree):
    """An invalid log-level is a warning line in the debug file on every call: Python's."""
    log = tree.tmp / "runtime.log"
    tree.config.write_text(f'[nvidia-container-runtime]\ndebug = "{log}"\nlog-level = "loud"\n')
    r, rec = tree.run(STATE)
    assert rec is not None and "invalid log-level" in log.read_text()
    assert not tree.cache.exists()


def test_debug_file_is_created_like_python_and_uncreatable_falls_back(tree):
    log = tree.tmp / "logs/runtime.log"
    tree.config.write_text(f'[nvidia-container-runtime]\ndebug = "{log}"\n')
    prime(tree)
    assert log.exists() and log.read_text() == ""
    log.unlink()
    assert tree.fast(STATE) is not None and log.exists() and log.read_text() == ""
    shutil.rmtree(log.parent)  # Python makes the directory; the launcher does not
    assert tree.fast(STATE) is None


def test_falls_back_on_an_untrusted_or_broken_cache(tree):
    prime(tree)
    good = tree.cache.read_bytes()
    assert tree.fast(STATE) is not None
    tree.cache.chmod(0o666)
    assert tree.fast(STATE) is None
    tree.cache.chmod(0o644)
    os.chown(tree.cache, 12345, 0)
    assert tree.fast(STATE) is None
    tree.cache.unlink()
    elsewhere = tree.tmp / "cache-elsewhere"
    elsewhere.write_bytes(good)
    tree.cache.symlink_to(elsewhere)
    assert tree.fast(STATE) is None
    tree.cache.unlink()
    for bad in (good[:-1], good.replace(b"\x002\x00", b"\x003\x00"), good.replace(b"nct-passthrough 2", b"nct-passthrough 9"),
                good.replace(b"\x00end\x00", b"\x00xyz\x00")):
        tree.cache.write_bytes(bad)
        assert tree.fast(STATE) is None, bad
    tree.cache.write_bytes(good)
    assert tree.fast(STATE) is not None


def test_python_repairs_a_cache_the_launcher_refuses(tree):
    """Same content, but group-writable: the launcher refuses it, so the next Python
    pass-through writes it again as it should be (else the fast path would stay off)."""
    prime(tree)
    tree.cache.chmod(0o664)
    assert tree.fast(STATE) is None
    prime(tree)
    assert tree.cache.stat().st_mode & 0o777 == 0o644 and tree.fast(STATE) is not None


def test_falls_back_after_the_toolkit_is_replaced(tree):
    """An upgrade replaces python/ (a new NCT-TOOLKIT inode): a cache from the old install
    is not trusted."""
    prime(tree)
    marker = tree.root / "python/NCT-TOOLKIT"
    data = marker.read_bytes()
    marker.unlink()
    marker.write_bytes(data)
    assert tree.fast(STATE) is None


def test_falls_back_when_no_runtime_is_found(tree):
    """Python reports it (one line, exit 1); the launcher never makes up its own error."""
    shutil.copy2(tree.bin / "runc", tree.bin / "probe-rt")
    tree.config.write_text('[nvidia-container-runtime]\nruntimes = ["probe-rt"]\n')
    prime(tree)
    assert tree.fast(STATE, tree.env(PATH="/nonexistent")) is None
    r, rec = tree.run(STATE, tree.env(PATH="/nonexistent"))
    assert rec is None and r.returncode == 1 and "no low-level runtime found" in r.stderr


def test_no_cache_for_runtimes_the_launcher_would_resolve_differently(tree):
    """Relative paths with a slash and unnormalised absolute ones (abspath rewrites them in
    Python): no cache, so always Python."""
    for runtimes in (f'["./bin/runc"]', f'["{tree.bin}/../bin/runc"]'):
        tree.config.write_text(f"[nvidia-container-runtime]\nruntimes = {runtimes}\n")
        r, rec = tree.run(STATE)
        assert rec is not None, r.stderr
        assert not tree.cache.exists()


def test_real_runc_container_through_the_fast_path(tree, tmp_path):
    """A busybox container made by the shim (Python: create), then state/kill/delete with
    python3 gone: real runc behind the fast path."""
    runc = shutil.which("runc")
    busybox = shutil.which("busybox")
    if os.geteuid() != 0 or not runc or not busybox:
        pytest.skip("needs root, runc and busybox")
    import json

    rootfs = tmp_path / "rootfs"
    (rootfs / "bin").mkdir(parents=True)
    shutil.copy2(busybox, rootfs / "bin/busybox")
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    subprocess.run([runc, "spec", "--bundle", str(bundle)], check=True)
    spec = json.loads((bundle / "config.json").read_text())
    spec["root"] = {"path": str(rootfs), "readonly": True}
    spec["process"].update(terminal=False, args=["/bin/busybox", "sleep", "600"])
    (bundle / "config.json").write_text(json.dumps(spec))
    env = {"PATH": f"{Path(runc).parent}:/usr/bin:/bin", "XDG_CONFIG_HOME": str(tree.xdg)}
    shim = str(tree.root / "nvidia-container-runtime")
    root = str(tmp_path / "runc-root")
    cid = f"nct-fast-{os.getpid()}"
    # the container keeps create's stdio: files, not pipes (a pipe would never reach EOF)
    with open(tmp_path / "create.err", "w+") as err:
        r = subprocess.run([shim, "--root", root, "create", "--bundle", str(bundle), cid], env=env,
                           stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err, timeout=60)
    assert r.returncode == 0, (tmp_path / "create.err").read_text()
    try:
        r = subprocess.run([shim, "--root", root, "state", cid], env=env, capture_output=True, text=True)
        assert r.returncode == 0 and '"created"' in r.stdout and tree.cache.exists(), r.stderr
        with tree.no_python():
            for args, want in ((["start", cid], ""), (["state", cid], '"running"'), (["kill", cid, "KILL"], "")):
                r = subprocess.run([shim, "--root", root, *args], env=env, capture_output=True, text=True)
                assert r.returncode == 0 and want in r.stdout, (args, r.stderr)
            for _ in range(100):
                r = subprocess.run([shim, "--root", root, "state", cid], env=env, capture_output=True, text=True)
                if '"stopped"' in r.stdout:
                    break
            r = subprocess.run([shim, "--root", root, "delete", cid], env=env, capture_output=True, text=True)
            assert r.returncode == 0, r.stderr
            r = subprocess.run([shim, "--root", root, "state", cid], env=env, capture_output=True, text=True)
            assert r.returncode != 0 and "does not exist" in r.stderr
    finally:
        subprocess.run([runc, "--root", root, "delete", "--force", cid], capture_output=True)


@pytest.fixture
def coarse_fs(tmp_path):
    """A filesystem whose timestamps have 1 s granularity (ext4 with 128-byte inodes, as on
    NFS or a kernel without fine-grained timestamps): a same-size rewrite within the second
    keeps device, inode, size, mtime and ctime."""
    if os.geteuid() != 0 or not shutil.which("mkfs.ext4") or not shutil.which("losetup"):
        pytest.skip("needs root, mkfs.ext4 and loop devices")
    img, mnt = tmp_path / "coarse.img", tmp_path / "coarse"
    mnt.mkdir()
    with open(img, "wb") as f:
        f.truncate(16 << 20)
    subprocess.run(["mkfs.ext4", "-q", "-F", "-I", "128", str(img)], check=True, capture_output=True)
    r = subprocess.run(["mount", "-o", "loop", str(img), str(mnt)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot loop-mount: {r.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=False)


def test_same_size_rewrite_within_the_timestamp_tick_falls_back(tree, coarse_fs):
    """config.toml rewritten in place, same size, in the same second as the cached read:
    its stat key is unchanged, but the launcher compares the bytes and goes to Python,
    which runs what the new config names (never the stale runtime)."""
    for name in ("rt-old", "rt-new"):
        shutil.copy2(tree.bin / "runc", tree.bin / name)
    config = coarse_fs / "nvidia-container-runtime/config.toml"
    config.parent.mkdir()
    env = tree.env(XDG_CONFIG_HOME=str(coarse_fs))
    old, new = ('[nvidia-container-runtime]\nruntimes = ["%s"]\n' % n for n in ("rt-old", "rt-new"))
    for _ in range(20):  # until the rewrite lands in the same second as the cached read
        config.write_text(old)
        prime(tree, env=env)
        before = os.stat(config)
        with open(config, "r+") as f:
            f.write(new)
        after = os.stat(config)
        if (before.st_ino, before.st_size, before.st_mtime_ns, before.st_ctime_ns) == \
                (after.st_ino, after.st_size, after.st_mtime_ns, after.st_ctime_ns):
            break
    else:
        pytest.skip("could not rewrite within one timestamp tick")
    assert tree.fast(STATE, env) is None
    r, rec = tree.run(STATE, env)
    assert rec is not None and f"arg {tree.bin}/rt-new\n" in rec, r.stderr


def test_paths_are_the_bytes_python_uses_in_a_non_utf8_locale(tree):
    """Under an ISO-8859-1 locale Python's system calls spell `ü` as one byte (0xfc), not
    UTF-8's two: the fast path must exec the same file Python does."""
    if not shutil.which("localedef"):
        pytest.skip("needs localedef (locales)")
    locales = tree.tmp / "locales"
    locales.mkdir()
    r = subprocess.run(["localedef", "-i", "en_US", "-f", "ISO-8859-1", str(locales / "en_US.ISO-8859-1")],
                       capture_output=True, text=True)
    if r.returncode not in (0, 1) or not (locales / "en_US.ISO-8859-1").exists():
        pytest.skip(f"cannot build a latin-1 locale: {r.stderr.strip()}")
    rt = os.fsencode(tree.bin) + b"/r\xc3\xbcnc"
    latin1 = os.fsencode(tree.bin) + b"/r\xfcnc"
    shutil.copy2(tree.bin / "runc", rt)
    shutil.copy2(tree.bin / "runc", latin1)
    tree.config.write_text('[nvidia-container-runtime]\nruntimes = ["r\u00fcnc"]\n', encoding="utf-8")
    env = tree.env(LOCPATH=str(locales), LC_ALL="en_US.ISO-8859-1")

    def probe(fast: bool):
        tree.out.unlink(missing_ok=True)
        with tree.no_python() if fast else contextlib.nullcontext():
            r = subprocess.run([str(tree.root / "nvidia-container-runtime"), *STATE], env=env, capture_output=True,
                               cwd=tree.tmp)
        return r, (tree.out.read_bytes() if tree.out.exists() else None)

    r, slow = probe(False)
    assert slow is not None and b"arg " + latin1 + b"\n" in slow, r.stderr  # Python's spelling
    assert tree.cache.is_file()
    r, quick = probe(True)
    assert quick == slow, r.stderr


# Tokens for the argv fuzz: subcommands, global flags with and without values (every dash
# count, `=` forms), separators, ids named like subcommands, long and odd (non-UTF-8) ones.
FUZZ_TOKENS = [
    "state", "start", "kill", "delete", "exec", "ps", "pause", "resume", "events", "update", "list",
    "features", "create", "run", "restore", "spec", "checkpoint", "help", "init", "mounts", "version",
    "--root", "-root", "--root=r", "--log", "-log", "---log", "--log=l.log", "--log=", "--log-format", "--log-format=json",
    "--log-level", "--log-level=debug", "--criu", "--rootless", "--rootless=true", "--cgroup-manager", "-b", "--b",
    "--bundle", "-bundle", "--bundle=create", "-b=x", "--debug", "-debug", "--debug=false", "--version", "-version",
    "--version=1", "--systemd-cgroup", "--unknown", "--force", "--", "-", "", "=", "-=x", "id", "l.log", "json",
    "9", "KILL", "--" + "r" * 40, "--" + "log" * 12, "\udcff", "cr\udceate", "STATE", " state",
]


def test_argv_fuzz_fast_path_only_where_python_passes_through(tree):
    """Every short argv shape and many longer generated ones: whenever the launcher execs the runtime itself, Python
    (nct.runtime.argv) would also pass through quietly: not `create`, no --version (which
    prints), no --debug (which logs)."""
    import itertools
    import random

    from nct.runtime import argv as av

    prime(tree)
    rng = random.Random(14)
    cases = [["--log", "--version", "state", "id"], ["--log-format", "-version", "kill", "id"],
             ["--root", "--debug", "state"], ["--bundle", "state", "create"], ["--", "state", "id"]]
    # every shape of up to three tokens from a small alphabet (valued flags before
    # subcommands, `create` after them), then longer random ones from the whole list
    small = ["-b", "--bundle", "--root", "--log", "--log-format", "--log-level=x", "--systemd-cgroup", "--debug",
             "--version", "--", "state", "create", "spec", "id"]
    cases += [list(c) for n in (1, 2, 3) for c in itertools.product(small, repeat=n)]
    cases += [[rng.choice(FUZZ_TOKENS) for _ in range(rng.randint(0, 7))] for _ in range(800)]
    wrong, fast_count = [], 0
    with tree.no_python():
        for args in cases:
            tree.out.unlink(missing_ok=True)
            subprocess.run([os.fsencode(tree.root / "nvidia-container-runtime"), *map(os.fsencode, args)],
                           env=tree.env(), cwd=tree.tmp, capture_output=True)
            if not tree.out.exists():
                continue
            fast_count += 1
            la = av.log_args(args)
            if av.is_create(args) or av.has_version_flag(args) or la.debug or la.version:
                wrong.append(args)
    assert not wrong, wrong[:10]
    assert fast_count > 50  # the generator does reach the fast path


def test_cache_of_a_private_config_is_private(tree):
    """The cache holds config.toml's bytes: 0600 when config.toml is not readable by others
    (still used by root), 0644 when it is."""
    tree.config.write_text('[nvidia-container-runtime]\nruntimes = ["runc"]\n')
    for config_mode, cache_mode in ((0o600, 0o600), (0o640, 0o600), (0o644, 0o644)):
        os.chmod(tree.config, config_mode)
        prime(tree)
        assert tree.cache.stat().st_mode & 0o777 == cache_mode, oct(config_mode)
        assert tree.fast(STATE) is not None


def test_config_the_caller_cannot_read_falls_back(toolkit, tmp_path):
    """A root-made cache, and a caller (not root) who cannot read config.toml: Python fails
    to read it and says so; the launcher (which opens it as Python does) goes to Python and
    never runs the runtime from settings the caller cannot read."""
    import tempfile

    if os.geteuid() != 0:
        pytest.skip("needs root (a cache written by root, then a call as nobody)")
    top = Path(tempfile.mkdtemp(prefix="nct-pt-"))  # outside pytest's 0700 tree: nobody must enter it
    try:
        top.chmod(0o755)
        t = make_tree(toolkit, top)
        root = t.root
        t.config.write_text('[nvidia-container-runtime]\nruntimes = ["runc"]\n')
        os.chmod(t.config, 0o600)  # before the cache: its recorded key is this file's
        prime(t)
        out = top / "out"
        out.mkdir(mode=0o777)
        out.chmod(0o777)
        t.out = out / "probe.out"
        env = t.env(PROBE_OUT=str(t.out))

        def as_nobody():
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)

        with t.no_python():
            r = subprocess.run([str(root / "nvidia-container-runtime"), *STATE], env=env, cwd=out,
                               capture_output=True, text=True, preexec_fn=as_nobody)
        assert not t.out.exists() and "cannot execute" in r.stderr, r.stderr
        r = subprocess.run([str(root / "nvidia-container-runtime"), *STATE], env=env, cwd=out,
                           capture_output=True, text=True, preexec_fn=as_nobody)
        assert not t.out.exists() and r.returncode == 1 and "Permission denied" in r.stderr, r.stderr
    finally:
        shutil.rmtree(top, ignore_errors=True)


def test_mutated_caches_never_crash_the_launcher(tree):
    """Truncations, byte flips, extra or missing NULs, and counts at and past every limit
    (fields, runtimes, digits): the launcher either takes the fast path or starts Python,
    never dies of a signal (the parser's bounds in launcher.c)."""
    import random

    tree.config.write_text('[nvidia-container-runtime]\ndebug = "d.log"\nruntimes = ["nope", "runc"]\n')
    prime(tree)
    good = tree.cache.read_bytes()
    rng = random.Random(14)
    fields = good.split(b"\0")
    count_at = fields.index(b"2")
    bad = [good[:i] for i in range(0, len(good), 13)]
    for _ in range(80):
        b = bytearray(good)
        b[rng.randrange(len(b))] = rng.choice(b"\0-09a:/")
        bad.append(bytes(b))
    for n in (0, 1, 3, 9, 40, 41, 54, 55, 56, 63, 64, 65, 409, 410, 999, 2**31, 2**64, 10**30):
        f = list(fields)
        f[count_at] = str(n).encode()
        bad.append(b"\0".join(f))
        bad.append(b"\0".join(f[:count_at + 1] + [b"runc"] * min(n, 100) + [b"end", b""]))
    bad += [b"\0" * 100, b"\0" * 16384, good + b"x" * (16384 - len(good)), good * 200]
    with tree.no_python():
        for data in bad:
            tree.cache.write_bytes(data)
            tree.out.unlink(missing_ok=True)
            r = subprocess.run([str(tree.root / "nvidia-container-runtime"), *STATE], env=tree.env(), cwd=tree.tmp,
                               capture_output=True, text=True)
            assert r.returncode == 0 if tree.out.exists() else (r.returncode == 127 and "cannot execute" in r.stderr), \
                (r.returncode, r.stderr, data[:200])


def test_path_fuzz_lookup_matches_python(tree):
    """Generated $PATH values (empty, relative, `.`, doubled and trailing slashes, a `runc`
    that is a directory, not executable, a symlink, or the shim itself) and runtimes lists:
    the fast path execs the file Python's nct.runtime.lookup picks, under the same name, or
    goes to Python."""
    import random

    d = {name: tree.tmp / name for name in ("a", "b", "c", "e", "s")}
    for p in d.values():
        p.mkdir()
    shutil.copy2(tree.bin / "runc", d["a"] / "runc")
    shutil.copy2(tree.bin / "runc", d["a"] / "crun")
    (d["b"] / "runc").mkdir()  # a directory named runc
    shutil.copy2(tree.bin / "runc", d["c"] / "runc")
    os.chmod(d["c"] / "runc", 0o644)  # no exec bit
    (d["e"] / "runc").symlink_to(tree.bin / "runc")
    os.link(tree.root / "nvidia-container-runtime", d["s"] / "runc")  # the shim itself
    entries = ["", ".", "a", "a/", str(d["a"]), str(d["a"]) + "/", str(d["a"]).replace("/", "//"), str(d["b"]),
               str(d["c"]), str(d["e"]), str(d["s"]), str(tree.bin), str(tree.tmp / "missing"), "/nonexistent"]
    runtimes = ['["runc"]', '["crun", "runc"]', '["nope", "runc"]', f'["{d["c"]}/runc", "runc"]',
                f'["{d["e"]}/runc"]', f'["{d["s"]}/runc", "crun"]']
    rng = random.Random(14)
    taken = 0
    for _ in range(60):
        path = ":".join(rng.choice(entries) for _ in range(rng.randint(1, 5)))
        tree.config.write_text(f"[nvidia-container-runtime]\nruntimes = {rng.choice(runtimes)}\n")
        env = tree.env(PATH=path)
        tree.cache.unlink(missing_ok=True)
        slow_r, slow = tree.run(STATE, env)  # Python, which writes the cache
        with tree.no_python():
            fast_r, fast = tree.run(STATE, env)
        if "cannot execute" in fast_r.stderr:  # went to Python: only where Python found no runtime either
            assert "no low-level runtime found" in slow_r.stderr, (path, slow_r.stderr)
        else:  # the probe, or a real runc/crun from the fallback directories
            assert (fast_r.returncode, fast_r.stdout, fast_r.stderr, fast) == \
                (slow_r.returncode, slow_r.stdout, slow_r.stderr, slow), path
            taken += 1
    assert taken > 20
