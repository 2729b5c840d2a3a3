"""Ask a container engine to pick up its new configuration: docker reloads runtimes on
SIGHUP; containerd and CRI-O are restarted through systemd when it runs, else signalled
(containerd exits on SIGHUP and relies on its supervisor to start it again)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import struct
import subprocess

from nct.errors import EngineConfigError
from nct.sigreset import default_signals

SERVICE = {"docker": "docker", "containerd": "containerd", "crio": "crio"}
DEFAULT_PID_FILE = {"docker": "/run/docker.pid", "containerd": "", "crio": ""}


def systemd_running() -> bool:
    return os.path.isdir("/run/systemd/system") and shutil.which("systemctl") is not None


def read_pid(pid_file: str) -> int:
    try:
        with open(pid_file) as f:
            pid = int(f.read().strip())
    except FileNotFoundError:
        raise EngineConfigError(f"{pid_file}: engine pid file not found") from None
    except ValueError:
        raise EngineConfigError(f"{pid_file}: does not hold a process id") from None
    if pid <= 1:
        raise EngineConfigError(f"{pid_file}: does not hold a usable process id ({pid})")
    return pid


def pid_from_socket(path: str) -> int:
    """The pid of the process serving a unix socket (SO_PEERCRED): finds the engine's pid
    from its API socket when it keeps no pid file (containerd; any engine in a pod with
    hostPID)."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.connect(path)
            creds = s.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    except OSError as e:
        raise EngineConfigError(f"{path}: cannot connect to the engine socket: {e.strerror or e}") from None
    pid = struct.unpack("3i", creds)[0]
    if pid <= 1:
        raise EngineConfigError(f"{path}: the engine's pid is not visible (run with hostPID)")
    return pid


def reload_engine(engine: str, mode: str = "auto", pid_file: str | None = None, sock: str | None = None) -> str:
    """Reload or restart the engine; returns what was done, for the log.  The pid for a
    signal comes from `sock` (peer credentials) or `pid_file`."""
    if pid_file is None:
        pid_file = DEFAULT_PID_FILE[engine]
    if sock:
        if mode in ("auto", "signal"):
            return _signal(engine, pid_from_socket(sock), sock)
    if mode == "none":
        return f"not restarting {engine} (--restart-mode=none)"
    if mode == "auto":
        if engine == "docker" and pid_file and os.path.exists(pid_file):
            mode = "signal"
        elif systemd_running():
            mode = "systemd"
        elif pid_file and os.path.exists(pid_file):
            mode = "signal"
        else:
            return f"{engine}: no systemd and no pid file; restart {engine} to load the NVIDIA runtime"
    if mode == "systemd":
        verb = "reload" if engine == "docker" else "restart"
        res = subprocess.run(["systemctl", verb, SERVICE[engine]], capture_output=True, text=True,
                             preexec_fn=default_signals)
        if res.returncode != 0:
            msg = (res.stderr.strip().splitlines() or ["failed"])[-1]
            raise EngineConfigError(f"systemctl {verb} {SERVICE[engine]}: {msg}")
        return f"systemctl {verb} {SERVICE[engine]}"
    if mode == "signal":
        if not pid_file:
            raise EngineConfigError(f"--restart-mode=signal for {engine} needs --pid-file")
        return _signal(engine, read_pid(pid_file), pid_file)
    raise EngineConfigError(f"--restart-mode {mode}: want auto, signal, systemd or none")


def _signal(engine: str, pid: int, source: str) -> str:
    try:
        os.kill(pid, signal.SIGHUP)
    except ProcessLookupError:
        raise EngineConfigError(f"{source}: process {pid} is not running") from None
    return f"sent SIGHUP to {engine} (pid {pid})"
