"""issue 12 #12: programs we exec get default signal dispositions and an empty signal mask.

Python ignores SIGPIPE and SIGXFSZ at start-up and an ignored signal stays ignored across
execve; so does the mask. A stand-in runtime reports what it got; crun (which, unlike runc,
passes its own signal state on to OCI hooks) runs a hook doing `yes | head -c1`."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile

import pytest

from .conftest import entry_point, runc_bundle
from .test_runc import Runc

REPORT = """#!/bin/sh
exec grep -E '^Sig(Ign|Blk):' /proc/self/status > "{out}"
"""


def _masks(text: str) -> dict[str, int]:
    return {k: int(v, 16) for k, v in (line.split(":\t") for line in text.splitlines())}


def _hostile_parent():
    """The engine that starts the shim may itself ignore or block signals: those go too."""
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1, signal.SIGTERM})


@pytest.mark.parametrize("args", [["state", "x"], ["--root", "/r", "delete", "x"], ["--version"]])
def test_low_level_runtime_gets_default_signals(tmp_path, args):
    out = tmp_path / "sig"
    rt = tmp_path / "stand-in-runc"
    rt.write_text(REPORT.format(out=out))
    rt.chmod(0o755)
    cfg = tmp_path / "config.toml"
    cfg.write_text(f'[nvidia-container-runtime]\nruntimes = ["{rt}"]\n')
    env = {"PATH": "/usr/bin:/bin", "NVIDIA_CTK_CONFIG_FILE_PATH": str(cfg)}
    res = subprocess.run([entry_point("nvidia-container-runtime"), *args], env=env, capture_output=True,
                         text=True, timeout=60, preexec_fn=_hostile_parent)
    assert res.returncode == 0, res.stderr
    assert _masks(out.read_text()) == {"SigIgn": 0, "SigBlk": 0}


class Crun(Runc):
    """crun through the shim, cgroups off. crun refuses a hybrid cgroup v1/v2 host: on one,
    each call runs in a private mount namespace that sees only the cgroup2 hierarchy."""

    def __init__(self, tmp_path, env):
        super().__init__(tmp_path, env)
        if _fs_type("/sys/fs/cgroup") != "cgroup2fs":
            if not shutil.which("unshare"):
                pytest.skip("hybrid cgroups and no unshare(1)")
            wrap = ["unshare", "-m", "--propagation", "private", "sh", "-c",
                    'mount -t cgroup2 none /sys/fs/cgroup && exec "$@"', "sh"]
            self.shim_argv = [*wrap, self.shim]
        else:
            self.shim_argv = [self.shim]

    def __call__(self, *args, check=True):
        with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
            r = subprocess.run([*self.shim_argv, "--cgroup-manager=disabled", "--root", str(self.root), *args],
                               env=self.env, stdin=subprocess.DEVNULL, stdout=out, stderr=err, timeout=120)
            out.seek(0)
            err.seek(0)
            r.stdout, r.stderr = out.read(), err.read()
        if check:
            assert r.returncode == 0, f"{args}: {r.stderr}"
        return r


def _fs_type(path: str) -> str:
    return subprocess.run(["stat", "-fc", "%T", path], capture_output=True, text=True).stdout.strip()


def test_crun_hook_yes_head(tmp_path):
    """With crun as the low-level runtime, a prestart hook's `yes | head -c1`: `yes` must die
    of SIGPIPE quietly, not report "Broken pipe" (SIGPIPE ignored)."""
    if os.geteuid() != 0 or not shutil.which("crun"):
        pytest.skip("needs root and crun (apt-get install crun)")
    hookdir = tmp_path / "hook"
    hookdir.mkdir()
    script = hookdir / "hook.sh"
    script.write_text(f"#!/bin/sh\ngrep -E '^Sig(Ign|Blk):' /proc/self/status > {hookdir}/sig\n"
                      f"yes 2> {hookdir}/yes.err | head -c1 > /dev/null\n")
    script.chmod(0o755)
    bundle, out = runc_bundle(tmp_path, "echo ran > /out/result")
    spec = json.loads((bundle / "config.json").read_text())
    spec["hooks"] = {"prestart": [{"path": str(script), "args": ["hook.sh"]}]}
    (bundle / "config.json").write_text(json.dumps(spec))
    cfg = tmp_path / "config.toml"
    cfg.write_text('[nvidia-container-runtime]\nruntimes = ["crun"]\n')
    env = {"PATH": f"{os.path.dirname(entry_point('nvidia-container-runtime'))}:/usr/sbin:/usr/bin:/sbin:/bin",
           "NVIDIA_CTK_CONFIG_FILE_PATH": str(cfg), "XDG_RUNTIME_DIR": str(tmp_path)}
    crun = Crun(tmp_path, env)
    try:
        crun.run_to_exit(bundle)
    finally:
        crun.cleanup()
    assert (out / "result").read_text() == "ran\n"
    assert (hookdir / "yes.err").read_text() == ""
    assert _masks((hookdir / "sig").read_text())["SigIgn"] & (1 << (signal.SIGPIPE - 1)) == 0
