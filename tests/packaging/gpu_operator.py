"""The GPU Operator's toolkit pod, reproduced for tests: the DaemonSet asset
(gpu-operator assets/state-container-toolkit/0500_daemonset.yaml) after the operator's
TransformToolkit/transformForRuntime (controllers/object_controls.go), as env and mounts,
and a simulated GPU host to run it on.

`operator_pod()` is the contract the installer image has to meet; `SimHost` is a private
mount namespace (`nct sim run`) where the simulated node is the host and the operator's
host paths (/etc/containerd, /run/nvidia, /var/run/cdi, ...) are temp dirs bound at those
very paths, so what the pod writes is what a real node's engine would read."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from nct.record import Record, field

NCT = str(Path(sys.executable).parent / "nct")
HOST_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"  # engines on the host: no venv, no nct on PATH
DEFAULT_INSTALL_DIR = "/usr/local/nvidia"
CONFIG_DIR, DROP_IN_DIR, SOCKET_DIR = "/runtime/config-dir/", "/runtime/config-dir.d/", "/runtime/sock-dir/"
TOP_LEVEL = {"containerd": "/etc/containerd/config.toml", "docker": "/etc/docker/daemon.json",
             "crio": "/etc/crio/config.toml"}
DROP_IN = {"containerd": "/etc/containerd/conf.d/99-nvidia.toml", "crio": "/etc/crio/crio.conf.d/99-nvidia.conf"}
SOCKET = {"containerd": "/run/containerd/containerd.sock", "docker": "/var/run/docker.sock"}
CONFIG_ENV = {"containerd": "CONTAINERD_CONFIG", "docker": "DOCKER_CONFIG", "crio": "CRIO_CONFIG"}
SOCKET_ENV = {"containerd": "CONTAINERD_SOCKET", "docker": "DOCKER_SOCKET"}

# The ConfigMap nvidia-container-toolkit-entrypoint, mounted at /bin/entrypoint.sh (mode
# 0700) and run as `/bin/bash -c /bin/entrypoint.sh`: wait for the driver validation, export
# the roots it found, start the installer by its operator name.  (The operator's script also
# sleeps 5 s first, for a containerd 1.6.9 restart race; left out here to save test time.)
ENTRYPOINT_SH = """#!/bin/bash
until [[ -f /run/nvidia/validations/driver-ready ]]; do
  echo "driver validation not ready yet"
  sleep 5
done
set -o allexport
cat /run/nvidia/validations/driver-ready
. /run/nvidia/validations/driver-ready
exec nvidia-toolkit
"""
# What the operator's validator writes for a driver installed on the host.
HOST_DRIVER_READY = ("IS_HOST_DRIVER=true\nNVIDIA_DRIVER_ROOT=/\nDRIVER_ROOT_CTR_PATH=/host\n"
                     "NVIDIA_DEV_ROOT=/\nDEV_ROOT_CTR_PATH=/host\n")


class Mount(Record):
    host: str
    pod: str
    read_only: bool = False
    propagation: str = ""  # "rslave" for the operator's HostToContainer


class Pod(Record, frozen=False):
    env: dict[str, str] = field(default_factory=dict)
    mounts: list[Mount] = field(default_factory=list)


def operator_pod(runtime: str, *, cdi: bool = False, install_dir: str = DEFAULT_INSTALL_DIR,
                 toolkit_env: dict[str, str] | None = None) -> Pod:
    """Env and mounts of the nvidia-container-toolkit-ctr container as the operator renders
    them for `runtime` (its ClusterPolicy: cdi.enabled, toolkit.installDir, toolkit.env)."""
    pod = Pod()
    pod.env.update({"ROOT": DEFAULT_INSTALL_DIR,
                    "NVIDIA_CONTAINER_RUNTIME_MODES_CDI_DEFAULT_KIND": "management.nvidia.com/gpu",
                    "NVIDIA_VISIBLE_DEVICES": "void", "TOOLKIT_PID_FILE": "/run/nvidia/toolkit/toolkit.pid"})
    crio_hooks = "/usr/share/containers/oci/hooks.d" if runtime == "crio" else "/run/containers/oci/hooks.d"
    pod.mounts += [Mount("/run/nvidia/toolkit", "/run/nvidia/toolkit"),
                   Mount("/run/nvidia/validations", "/run/nvidia/validations"),
                   Mount(install_dir, install_dir),
                   Mount(crio_hooks, "/usr/share/containers/oci/hooks.d"),
                   Mount("/run/nvidia/driver", "/driver-root", propagation="rslave"),
                   Mount("/", "/host", read_only=True, propagation="rslave"),
                   Mount("/var/run/cdi", "/var/run/cdi")]
    if cdi:
        pod.env.update({"CDI_ENABLED": "true", "NVIDIA_RUNTIME_SET_AS_DEFAULT": "false",
                        "NVIDIA_CONTAINER_RUNTIME_MODE": "cdi", "CRIO_CONFIG_MODE": "config"})
    elif runtime == "crio":
        pod.env["CRIO_CONFIG_MODE"] = "hook"
    if install_dir != DEFAULT_INSTALL_DIR:
        pod.env["ROOT"] = install_dir
    pod.env.update(toolkit_env or {})
    pod.env["RUNTIME"] = runtime
    if runtime == "containerd":
        pod.env["CONTAINERD_RUNTIME_CLASS"] = "nvidia"
    top = pod.env.get(CONFIG_ENV[runtime]) or pod.env.get("RUNTIME_CONFIG") or TOP_LEVEL[runtime]
    pod.env["RUNTIME_CONFIG"] = pod.env[CONFIG_ENV[runtime]] = CONFIG_DIR + os.path.basename(top)
    pod.mounts.append(Mount(os.path.dirname(top), CONFIG_DIR))
    if runtime in DROP_IN:
        drop_in = pod.env.get("RUNTIME_DROP_IN_CONFIG") or DROP_IN[runtime]
        pod.env["RUNTIME_DROP_IN_CONFIG"] = DROP_IN_DIR + os.path.basename(drop_in)
        pod.env["RUNTIME_DROP_IN_CONFIG_HOST_PATH"] = drop_in
        pod.mounts.append(Mount(os.path.dirname(drop_in), DROP_IN_DIR))
    if runtime in SOCKET:
        sock = pod.env.get(SOCKET_ENV[runtime]) or SOCKET[runtime]
        pod.env["RUNTIME_SOCKET"] = pod.env[SOCKET_ENV[runtime]] = SOCKET_DIR + os.path.basename(sock)
        pod.mounts.append(Mount(os.path.dirname(sock), SOCKET_DIR))
    return pod


def podman_run_args(pod: Pod, entrypoint_sh: Path) -> list[str]:
    """`podman run` options for the pod: privileged, hostPID, the operator's command."""
    args = ["--privileged", "--pid=host", "--network", "none", "--entrypoint", '["/bin/bash", "-c"]',
            "-v", f"{entrypoint_sh}:/bin/entrypoint.sh:ro"]
    for m in pod.mounts:
        opts = ",".join(o for o in ("ro" if m.read_only else "", m.propagation) if o)
        args += ["-v", f"{m.host}:{m.pod}" + (f":{opts}" if opts else "")]
    for k, v in pod.env.items():
        args += ["-e", f"{k}={v}"]
    return args


def snapshot(directory: Path) -> dict[str, bytes | None]:
    """Every file (bytes) and directory (None) under `directory`, by relative path."""
    out: dict[str, bytes | None] = {}
    for dirpath, dirnames, filenames in os.walk(directory):
        rel = os.path.relpath(dirpath, directory)
        for d in dirnames:
            out[os.path.join(rel, d)] = None
        for f in filenames:
            out[os.path.join(rel, f)] = Path(dirpath, f).read_bytes()
    return out


def mount_namespace(pid: int) -> str:
    return os.readlink(f"/proc/{pid}/ns/mnt")


def _default_sighup() -> None:
    signal.signal(signal.SIGHUP, signal.SIG_DFL)  # as under systemd: SIGHUP ends containerd


class SimHost:
    """A private mount namespace (`nct sim run NODE`) standing for a GPU node: the simulated
    driver at the real paths, and each of `binds` (host path -> temp dir) bound at its host
    path.  Commands enter it with nsenter; close() ends every process in it."""

    def __init__(self, node: Path, binds: dict[str, Path]):
        script = "set -e; " + "".join(f"mkdir -p {p}; mount --bind {src} {p}; " for p, src in binds.items())
        self.holder = subprocess.Popen([NCT, "sim", "run", str(node), "--", "sh", "-c",
                                        script + "echo ready; exec sleep 86400"],
                                       stdout=subprocess.PIPE, text=True, start_new_session=True)
        self.daemons: list[subprocess.Popen] = []
        line = self.holder.stdout.readline() if self.holder.stdout else ""
        if line.strip() != "ready":
            self.close()
            raise RuntimeError(f"simulated host did not start (exit {self.holder.poll()})")
        self.ns = mount_namespace(self.holder.pid)

    def argv(self, argv: list[str]) -> list[str]:
        return ["nsenter", "-t", str(self.holder.pid), "-m", "--", *argv]

    def run(self, argv: list[str], *, timeout: float = 180, env: dict | None = None) -> subprocess.CompletedProcess:
        return subprocess.run(self.argv(argv), capture_output=True, text=True, timeout=timeout,
                              env=env or {"PATH": HOST_PATH})

    def daemon(self, script: str, log: Path) -> subprocess.Popen:
        """A supervised daemon (`sh -c script`, its own process group), like a systemd unit."""
        with open(log, "ab") as f:
            p = subprocess.Popen(self.argv(["sh", "-c", script]), stdout=f, stderr=subprocess.STDOUT,
                                 env={"PATH": HOST_PATH}, start_new_session=True, preexec_fn=_default_sighup)
        self.daemons.append(p)
        return p

    def stop_daemon(self, p: subprocess.Popen, sig: int = signal.SIGTERM, timeout: float = 30) -> None:
        if p.poll() is None:
            try:
                os.killpg(p.pid, sig)
                p.wait(timeout=timeout)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                pass
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait()

    def members(self) -> list[int]:
        """Pids in this mount namespace (ours: everything started in it)."""
        out = []
        for d in os.listdir("/proc"):
            if d.isdigit():
                try:
                    if mount_namespace(int(d)) == self.ns:
                        out.append(int(d))
                except OSError:
                    pass
        return out

    def close(self) -> None:
        for p in self.daemons:
            self.stop_daemon(p)
        if self.holder.poll() is None:
            for pid in getattr(self, "ns", None) and self.members() or []:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            self.holder.kill()
        self.holder.wait()
        if self.holder.stdout:
            self.holder.stdout.close()


def wait_for(predicate, what: str, limit: float = 120.0, step: float = 0.25, diag=lambda: ""):
    """Readiness wait (not a timing assertion): poll until predicate() is truthy."""
    deadline = time.monotonic() + limit
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}\n{diag()}")
        time.sleep(step)


def unmount_under(prefix: Path) -> None:
    with open("/proc/self/mountinfo") as f:
        points = [line.split()[4] for line in f]
    for point in sorted((p for p in points if p.startswith(str(prefix))), key=len, reverse=True):
        subprocess.run(["umount", "-l", point], capture_output=True)


def remove_tree(path: Path) -> None:
    unmount_under(path)
    shutil.rmtree(path, ignore_errors=True)
