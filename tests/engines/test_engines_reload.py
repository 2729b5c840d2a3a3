"""Engine reload: SIGHUP to the pid from a pid file or behind a socket; clear errors."""

from __future__ import annotations

import signal
import socket
import subprocess

import pytest

from nct.engines import reload
from nct.errors import EngineConfigError


def test_signal_via_pid_file(tmp_path):
    proc = subprocess.Popen(["sleep", "600"])
    try:
        pid_file = tmp_path / "engine.pid"
        pid_file.write_text(f"{proc.pid}\n")
        assert reload.reload_engine("containerd", "signal", str(pid_file)) == f"sent SIGHUP to containerd (pid {proc.pid})"
        assert proc.wait(timeout=60) == -signal.SIGHUP
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_pid_from_socket_is_the_listener(tmp_path):
    path = str(tmp_path / "engine.sock")
    import os
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as srv:
        srv.bind(path)
        srv.listen(1)
        assert reload.pid_from_socket(path) == os.getpid()


def test_auto_without_systemd_or_pid_file_only_says_so(tmp_path, monkeypatch):
    monkeypatch.setattr(reload, "systemd_running", lambda: False)
    msg = reload.reload_engine("crio", "auto", str(tmp_path / "missing.pid"))
    assert "restart crio" in msg


@pytest.mark.parametrize("content,needle", [(None, "not found"), ("abc", "does not hold a process id"),
                                            ("1", "usable process id")])
def test_bad_pid_file(tmp_path, content, needle):
    f = tmp_path / "engine.pid"
    if content is not None:
        f.write_text(content)
    with pytest.raises(EngineConfigError, match=needle):
        reload.reload_engine("docker", "signal", str(f))


def test_socket_nobody_listens(tmp_path):
    with pytest.raises(EngineConfigError, match="cannot connect"):
        reload.reload_engine("docker", "signal", sock=str(tmp_path / "none.sock"))
