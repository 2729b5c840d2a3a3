"""The command line: upstream flags, --dry-run/--diff, --config-source command, oci-hook
mode, unconfigure, and one-line errors with a non-zero exit."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent


def ctk(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "nvidia-ctk"), *args], capture_output=True, text=True, **kw)


def nct(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "nct"), *args], capture_output=True, text=True)


def test_dry_run_prints_result_and_writes_nothing(tmp_path):
    f = tmp_path / "daemon.json"
    f.write_text('{"features": {"buildkit": true}}')
    r = ctk("runtime", "configure", "--config", str(f), "--dry-run", "--cdi.enabled")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == {"features": {"buildkit": True, "cdi": True},
                                    "runtimes": {"nvidia": {"path": "nvidia-container-runtime", "args": []}}}
    assert f.read_text() == '{"features": {"buildkit": true}}'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["daemon.json"]


def test_dry_run_diff(tmp_path):
    f = tmp_path / "config.toml"
    f.write_text('version = 2\n')
    r = ctk("runtime", "configure", "--runtime", "containerd", "--config", str(f), "--drop-in-config", "",
            "--set-as-default", "--dry-run", "--diff")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"--- {f}\n+++ {f}\n")
    assert '+default_runtime_name = "nvidia"' in r.stdout
    assert f.read_text() == "version = 2\n"


def test_configure_then_unconfigure_via_nct(tmp_path):
    f = tmp_path / "config.toml"
    f.write_text("# ops\nversion = 2\n")
    drop = tmp_path / "conf.d" / "99-nvidia.toml"
    r = ctk("runtime", "configure", "--runtime=containerd", f"--config={f}", f"--drop-in-config={drop}",
            "--nvidia-runtime-name=nv", "--nvidia-runtime-path=/opt/nv/runtime")
    assert r.returncode == 0, r.stderr
    assert f"Wrote updated config to {drop}" in r.stderr
    assert 'BinaryName = "/opt/nv/runtime"' in drop.read_text()
    r = ctk("--quiet", "runtime", "configure", "--runtime=containerd", f"--config={f}", f"--drop-in-config={drop}",
            "--nvidia-runtime-name=nv", "--nvidia-runtime-path=/opt/nv/runtime")
    assert r.returncode == 0 and r.stderr == ""
    r = nct("runtime", "unconfigure", "--runtime=containerd", f"--config={f}", f"--drop-in-config={drop}",
            "--nvidia-runtime-name=nv")
    assert r.returncode == 0, r.stderr
    assert f.read_text() == "# ops\nversion = 2\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.toml"]


def test_remove_flag(tmp_path):
    f = tmp_path / "daemon.json"
    f.write_text('{"a": 1}')
    assert ctk("runtime", "configure", "--config", str(f), "--set-as-default").returncode == 0
    assert ctk("runtime", "configure", "--config", str(f), "--remove").returncode == 0
    assert f.read_text() == '{"a": 1}'


@pytest.mark.parametrize("args,needle", [
    (["--runtime", "docker", "--drop-in-config", "/etc/docker/x.json"], "drop-in"),
    (["--runtime", "containerd", "--nvidia-runtime-path", "relative/rt"], "must be an absolute path"),
    (["--runtime", "containerd", "--drop-in-config", "rel.toml"], "must be an absolute path"),
])
def test_bad_flags_one_line(tmp_path, args, needle):
    r = ctk("runtime", "configure", "--config", str(tmp_path / "cfg"), *args)
    assert r.returncode != 0
    assert r.stderr.startswith("nvidia-ctk: ") and needle in r.stderr and r.stderr.count("\n") == 1
    assert "Traceback" not in r.stderr
    assert list(tmp_path.iterdir()) == []


def test_unparseable_file_one_line(tmp_path):
    f = tmp_path / "config.toml"
    f.write_text("version = 2\n[plugins\nx = 1\n")
    r = ctk("runtime", "configure", "--runtime", "containerd", "--config", str(f),
            "--drop-in-config", str(tmp_path / "d" / "99.toml"))
    assert r.returncode == 1
    assert r.stderr == f"nvidia-ctk: {f}: invalid TOML at line 2, column 8\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.toml"]


def fake_engine(tmp_path: Path, name: str, output: str, log: Path) -> Path:
    exe = tmp_path / name
    (tmp_path / f"{name}.out").write_text(output)
    exe.write_text(f'#!/bin/sh\necho "$@" > {log}\ncat {tmp_path / (name + ".out")}\n')
    exe.chmod(0o755)
    return exe


def test_config_source_command_containerd(tmp_path):
    """The runtime options come from the engine's effective config, the file is edited."""
    log = tmp_path / "argv"
    dump = ('version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd]\ndefault_runtime_name = "runc"\n'
            '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]\nSystemdCgroup = true\n')
    exe = fake_engine(tmp_path, "containerd", dump, log)
    f = tmp_path / "config.toml"
    f.write_text("version = 2\n")
    r = ctk("runtime", "configure", "--runtime", "containerd", "--config", str(f), "--drop-in-config", "",
            "--config-source", "command", "--executable-path", str(exe), "--dry-run")
    assert r.returncode == 0, r.stderr
    assert log.read_text().split() == ["--config", str(f), "config", "dump"]
    assert "SystemdCgroup = true" in r.stdout and r.stdout.startswith("version = 2\n")


def test_config_source_command_crio_and_failure(tmp_path):
    log = tmp_path / "argv"
    exe = fake_engine(tmp_path, "crio", '[crio.runtime]\ndefault_runtime = "crun"\n'
                      '[crio.runtime.runtimes.crun]\nruntime_root = "/run/crun"\n', log)
    r = ctk("runtime", "configure", "--runtime", "crio", "--config", str(tmp_path / "crio.conf"),
            "--config-source", "command", "--executable-path", str(exe), "--dry-run")
    assert r.returncode == 0, r.stderr
    assert log.read_text().split() == ["status", "config"]
    assert 'runtime_root = "/run/crun"' in r.stdout
    bad = tmp_path / "bad"
    bad.write_text("#!/bin/sh\necho 'cannot connect to crio' >&2\nexit 3\n")
    bad.chmod(0o755)
    r = ctk("runtime", "configure", "--runtime", "crio", "--config", str(tmp_path / "crio.conf"),
            "--config-source", "command", "--executable-path", str(bad))
    assert r.returncode == 1 and "cannot connect to crio" in r.stderr and r.stderr.count("\n") == 1


def test_oci_hook_mode(tmp_path):
    r = ctk("runtime", "configure", "--runtime", "crio", "--config-mode", "oci-hook",
            "--nvidia-runtime-hook-path", "/opt/nct/nvidia-container-runtime-hook")
    assert r.returncode == 0, r.stderr
    hook = json.loads(r.stdout)
    assert hook == {
        "version": "1.0.0",
        "hook": {"path": "/opt/nct/nvidia-container-runtime-hook",
                 "args": ["nvidia-container-runtime-hook", "prestart"],
                 "env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/opt/nct"]},
        "when": {"always": True, "commands": [".*"]},
        "stages": ["prestart"],
    }
    out = tmp_path / "hooks.d" / "oci-nvidia-hook.json"
    r = ctk("runtime", "configure", "--config-mode", "oci-hook", "--oci-hook-path", str(out))
    assert r.returncode == 0 and json.loads(out.read_text())["hook"]["path"] == "/usr/bin/nvidia-container-runtime-hook"


@pytest.mark.parametrize("engine", ["docker", "containerd", "crio"])
@pytest.mark.parametrize("mode", ["config", "config-file"])
def test_config_mode_config_is_config_file(tmp_path, engine, mode):
    """issue 12 #10: upstream accepts --config-mode config as config-file: the same edit."""
    base = ["runtime", "configure", "--runtime", engine, "--config", str(tmp_path / "engine.conf"), "--dry-run"]
    ref = ctk(*base)
    r = ctk(*base, f"--config-mode={mode}")
    assert r.returncode == 0, r.stderr
    assert r.stdout == ref.stdout and "nvidia" in r.stdout


def test_config_mode_unknown_falls_back_to_config_file(tmp_path):
    """Upstream: an unknown --config-mode is a warning, and the config file is edited."""
    r = ctk("runtime", "configure", "--config", str(tmp_path / "d.json"), "--config-mode", "bogus")
    assert r.returncode == 0, r.stderr
    assert "bogus" in r.stderr and "warning" in r.stderr
    assert json.loads((tmp_path / "d.json").read_text())["runtimes"]["nvidia"]


def _ignore_hup_block_usr1():
    import signal

    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})


def test_engine_command_gets_default_signals(tmp_path):
    """issue 12 #12: `--config-source command` runs the engine binary with default signal
    dispositions and no blocked signal, whatever nvidia-ctk itself inherited."""
    exe = tmp_path / "containerd"
    exe.write_text("#!/bin/sh\ngrep -E '^Sig(Ign|Blk):' /proc/self/status | tr '\\n\\t' '  ' >&2\nexit 3\n")
    exe.chmod(0o755)
    r = ctk("runtime", "configure", "--runtime", "containerd", "--config", str(tmp_path / "c.toml"),
            "--drop-in-config", "", "--config-source", "command", "--executable-path", str(exe), "--dry-run",
            preexec_fn=_ignore_hup_block_usr1)
    assert r.returncode == 1
    assert "SigIgn: 0000000000000000" in r.stderr and "SigBlk: 0000000000000000" in r.stderr, r.stderr
