"""Make a container engine load its new configuration, as upstream's installer does
(`--restart-mode`): `signal` sends SIGHUP to the process serving the engine's API socket
(docker reloads its runtimes; containerd exits and its supervisor starts it again),
`systemd` runs `systemctl restart <engine>` on the host (through `chroot HOST_ROOT_MOUNT`
when the installer runs in a pod), `none` leaves the engine alone."""

from __future__ import annotations

import os
import signal
import socket
import struct
import subprocess

from nct.errors import EngineConfigError
from nct.sigreset import default_signals

SERVICE = {"docker": "docker", "containerd": "containerd", "crio": "crio"}
RESTART_MODES = ("signal", "systemd", "none")


def pid_from_socket(path: str) -> int:
    """The pid of the process serving a unix socket (SO_PEERCRED): the engine's pid from its
    API socket (in a pod this needs hostPID, else the peer's pid is not visible)."""
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


def systemctl_command(engine: str, host_root: str) -> list[str]:
    """`systemctl restart <service>`, in the host's root when one is mounted (upstream:
    `chroot $HOST_ROOT_MOUNT systemctl restart ...`)."""
    cmd = ["systemctl", "restart", SERVICE[engine]]
    if host_root and os.path.normpath(host_root) != "/":
        cmd = ["chroot", host_root] + cmd
    return cmd


def restart_engine(engine: str, mode: str, sock: str = "", host_root: str = "") -> str:
    """Restart or signal the engine; returns what was done, for the log."""
    if mode == "none":
        return f"not restarting {engine} (--restart-mode=none)"
    if mode == "signal":
        if engine == "crio":  # as upstream: CRI-O is restarted through systemd only
            raise EngineConfigError("restarting crio with a signal is not supported: "
                                    "use --restart-mode=systemd (or none)")
        if not sock:
            raise EngineConfigError(f"--restart-mode=signal for {engine} needs --socket")
        pid = pid_from_socket(sock)
        try:
            os.kill(pid, signal.SIGHUP)
        except ProcessLookupError:
            raise EngineConfigError(f"{sock}: process {pid} is not running") from None
        return f"sent SIGHUP to {engine} (pid {pid})"
    if mode == "systemd":
        cmd = systemctl_command(engine, host_root)
        run_tool(cmd, env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}, timeout=300,
                 needed_by="--restart-mode=systemd")
        return f"restarted {engine}: {' '.join(cmd)}"
    raise EngineConfigError(f"--restart-mode {mode}: want signal, systemd or none")


def run_tool(cmd: list[str], *, env: dict[str, str], timeout: float, needed_by: str | None) -> str:
    """Run an engine's tool (systemctl, crio status) and return its stdout. Each failure is
    one EngineConfigError line: not found (naming the flag it is `needed_by`; None lets
    FileNotFoundError through for the caller's fallback), timed out, or failed with the
    last line of its stderr."""
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env,
                             preexec_fn=default_signals)
    except FileNotFoundError:
        if needed_by is None:
            raise
        raise EngineConfigError(f"{cmd[0]}: not found (needed by {needed_by})") from None
    except subprocess.TimeoutExpired:
        raise EngineConfigError(f"{' '.join(cmd)}: timed out") from None
    if res.returncode != 0:
        err = (res.stderr.strip().splitlines() or [f"exit status {res.returncode}"])[-1]
        raise EngineConfigError(f"{' '.join(cmd)}: failed: {err}")
    return res.stdout
