"""Engine restart as upstream's installer does it: SIGHUP to the process behind the API
socket, `systemctl restart` (through chroot into the host's root), or nothing; clear errors."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from nct.engines import reload
from nct.errors import EngineConfigError

from .conftest import is_static

LISTENER = """
import signal, socket, sys, time
got = []
signal.signal(signal.SIGHUP, lambda *a: got.append(1))
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind(sys.argv[1]); s.listen(8)
print("up", flush=True)
while not got:
    time.sleep(0.05)
print("hup", flush=True)
"""


def test_signal_goes_to_the_process_serving_the_socket(tmp_path):
    """A real listening process (not this one) gets the SIGHUP."""
    sock = str(tmp_path / "engine.sock")
    proc = subprocess.Popen([sys.executable, "-c", LISTENER, sock], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline() == "up\n"
        assert reload.restart_engine("containerd", "signal", sock) == f"sent SIGHUP to containerd (pid {proc.pid})"
        assert proc.stdout.readline() == "hup\n"
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_pid_from_socket_is_the_listener(tmp_path):
    path = str(tmp_path / "engine.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as srv:
        srv.bind(path)
        srv.listen(1)
        assert reload.pid_from_socket(path) == os.getpid()


def test_systemd_restart_runs_systemctl_in_the_host_root(tmp_path):
    """HOST_ROOT_MOUNT: `chroot <host root> systemctl restart <engine>`, checked with a host root
    whose systemctl is a static busybox script that records its arguments."""
    busybox = "/bin/busybox"
    if os.geteuid() != 0 or not os.path.exists(busybox) or not is_static(busybox):
        pytest.skip("needs root and a static busybox (busybox-static)")
    host = tmp_path / "host"
    (host / "bin").mkdir(parents=True)
    (host / "bin/busybox").write_bytes(open(busybox, "rb").read())
    (host / "bin/busybox").chmod(0o755)
    os.symlink("busybox", host / "bin/sh")
    (host / "bin/systemctl").write_text('#!/bin/sh\necho "$@" > /called\n')
    (host / "bin/systemctl").chmod(0o755)
    assert reload.systemctl_command("crio", str(host)) == ["chroot", str(host), "systemctl", "restart", "crio"]
    assert reload.systemctl_command("crio", "/") == ["systemctl", "restart", "crio"]
    msg = reload.restart_engine("crio", "systemd", host_root=str(host))
    assert msg.startswith("restarted crio") and (host / "called").read_text() == "restart crio\n"
    (host / "bin/systemctl").write_text('#!/bin/sh\necho "Unit $2.service not found." >&2; exit 5\n')
    with pytest.raises(EngineConfigError, match="systemctl restart docker: failed: Unit docker.service not found"):
        reload.restart_engine("docker", "systemd", host_root=str(host))


def test_none_and_bad_modes(tmp_path):
    assert reload.restart_engine("docker", "none") == "not restarting docker (--restart-mode=none)"
    with pytest.raises(EngineConfigError, match="crio with a signal is not supported"):
        reload.restart_engine("crio", "signal", str(tmp_path / "crio.sock"))
    with pytest.raises(EngineConfigError, match="want signal, systemd or none"):
        reload.restart_engine("docker", "auto")


def test_socket_nobody_listens(tmp_path):
    with pytest.raises(EngineConfigError, match="cannot connect"):
        reload.restart_engine("docker", "signal", str(tmp_path / "none.sock"))


def test_run_tool_one_line_errors(tmp_path):
    """One runner for the engines' tools (systemctl for --restart-mode=systemd, crio status
    for --config-source command): not found names the flag, a failure its last stderr line."""
    env = {"PATH": "/usr/bin:/bin"}
    assert reload.run_tool(["sh", "-c", "echo out"], env=env, timeout=10, needed_by="x") == "out\n"
    with pytest.raises(EngineConfigError, match=r"^nct-no-such-tool: not found \(needed by --flag\)$"):
        reload.run_tool(["nct-no-such-tool"], env=env, timeout=10, needed_by="--flag")
    with pytest.raises(FileNotFoundError):  # None: the caller falls back to another tool
        reload.run_tool(["nct-no-such-tool"], env=env, timeout=10, needed_by=None)
    with pytest.raises(EngineConfigError, match=r"^sh -c echo a >&2; echo b >&2; exit 3: failed: b$"):
        reload.run_tool(["sh", "-c", "echo a >&2; echo b >&2; exit 3"], env=env, timeout=10, needed_by="x")
    with pytest.raises(EngineConfigError, match=r"^sh -c exit 4: failed: exit status 4$"):
        reload.run_tool(["sh", "-c", "exit 4"], env=env, timeout=10, needed_by="x")
    with pytest.raises(EngineConfigError, match=r"^sleep 5: timed out$"):
        reload.run_tool(["sleep", "5"], env=env, timeout=0.2, needed_by="x")
