"""The installer as the GPU Operator runs it (env only, as a daemon): the pid file, the
engine restarted through its socket (a real listening process gets the SIGHUPs), SIGTERM
undoing every change byte for byte and removing the toolkit, a signal during setup, a second
instance refused by the lock, and the CDI management spec naming host paths."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from .conftest import wait_for

BIN = Path(sys.executable).parent
CONTAINERD_TOML = '# the operator\'s file\nversion = 2\n\n[plugins."io.containerd.grpc.v1.cri".containerd]\n' \
                  '  default_runtime_name = "runc"\n  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]\n' \
                  '    runtime_type = "io.containerd.runc.v2"\n'
DAEMON_JSON = '{\n  "log-level": "warn"\n}\n'
ENGINE_LISTENER = """
import signal, socket, sys
signal.signal(signal.SIGHUP, lambda *a: print("SIGHUP", flush=True))
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind(sys.argv[1]); s.listen(8)
print("up", flush=True)
while True:
    signal.pause()
"""


class Engine:
    """A stand-in engine process serving an API socket; counts the SIGHUPs it gets."""

    def __init__(self, sock: Path, log: Path):
        self.log = log
        self.proc = subprocess.Popen([sys.executable, "-c", ENGINE_LISTENER, str(sock)], stdout=open(log, "w"))
        wait_for(lambda: "up" in log.read_text(), "the engine socket")

    def hups(self) -> int:
        return self.log.read_text().count("SIGHUP")

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()


class Installer:
    def __init__(self, env: dict[str, str], log: Path):
        self.log = open(log, "w+")
        self.proc = subprocess.Popen([str(BIN / "nvidia-toolkit")], stdout=self.log, stderr=subprocess.STDOUT,
                                     env={"PATH": os.environ["PATH"], **env})

    def output(self) -> str:
        self.log.seek(0)
        return self.log.read()

    def wait_ready(self) -> None:
        wait_for(lambda: "ready (pid" in self.output() or self.proc.poll() is not None, "the installer")
        assert self.proc.poll() is None, self.output()

    def stop(self, sig: int = signal.SIGTERM) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.proc.wait(timeout=120)


def snapshot(root: Path) -> dict[str, bytes | None]:
    """Every file and dir under root (dirs as None), for a byte-for-byte comparison."""
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None) for p in sorted(root.rglob("*"))}


def host(tmp: Path, runtime: str) -> tuple[Path, dict[str, str]]:
    """A host under tmp/host with the engine's files; the env the operator would set, with
    the engine's config dir mounted at another path in the pod (tmp/pod)."""
    h = tmp / "host"
    (h / "etc/containerd").mkdir(parents=True)
    (h / "etc/containerd/config.toml").write_text(CONTAINERD_TOML)
    (h / "etc/docker").mkdir(parents=True)
    (h / "etc/docker/daemon.json").write_text(DAEMON_JSON)
    (h / "usr/local/nvidia").mkdir(parents=True)
    (h / "run/nvidia").mkdir(parents=True)
    pod = tmp / "pod"
    pod.mkdir()
    os.symlink(h / "etc/containerd", pod / "containerd-config")  # the pod's mount of the host's dir
    env = {"RUNTIME": runtime, "TOOLKIT_INSTALL_DIR": f"{h}/usr/local/nvidia",
           "TOOLKIT_PID_FILE": f"{h}/run/nvidia/toolkit/toolkit.pid", "HOST_ROOT_MOUNT": f"{tmp}/no-host",
           "RUNTIME_CONFIG_SOURCES": "file", "DRIVER_ROOT": "/", "DRIVER_ROOT_CTR_PATH": "/"}
    if runtime == "containerd":
        env.update(CONTAINERD_CONFIG=f"{pod}/containerd-config/config.toml",
                   RUNTIME_DROP_IN_CONFIG=f"{pod}/containerd-config/conf.d/99-nvidia.toml",
                   RUNTIME_DROP_IN_CONFIG_HOST_PATH="/etc/containerd/conf.d/99-nvidia.toml")
    elif runtime == "docker":
        env.update(DOCKER_CONFIG=f"{h}/etc/docker/daemon.json")
    else:
        env.update(CRIO_CONFIG_MODE="hook", CRIO_HOOKS_DIR=f"{h}/usr/share/containers/oci/hooks.d",
                   RUNTIME_CONFIG=f"{h}/etc/crio/crio.conf", RUNTIME_RESTART_MODE="none")
    return h, env


@pytest.mark.parametrize("runtime", ["containerd", "docker", "crio"])
def test_daemon_sigterm_restores_every_file(tmp_path, runtime):
    h, env = host(tmp_path, runtime)
    before = snapshot(h)
    engine = Engine(tmp_path / "engine.sock", tmp_path / "engine.log") if runtime != "crio" else None
    if engine:
        env["RUNTIME_SOCKET"] = str(tmp_path / "engine.sock")
    inst = Installer(env, tmp_path / "install.log")
    try:
        inst.wait_ready()
        pid_file = h / "run/nvidia/toolkit/toolkit.pid"
        assert pid_file.read_text() == f"{inst.proc.pid}\n"
        toolkit = h / "usr/local/nvidia/toolkit"
        assert os.access(toolkit / "nvidia-container-runtime", os.X_OK)
        if runtime == "containerd":
            # the engine imports the drop-in by its host path; the installer wrote it at the pod path
            assert 'imports = ["/etc/containerd/conf.d/*.toml"]' in (h / "etc/containerd/config.toml").read_text()
            drop_in = (h / "etc/containerd/conf.d/99-nvidia.toml").read_text()
            assert f'BinaryName = "{toolkit}/nvidia-container-runtime"' in drop_in
            assert engine.hups() == 1
        elif runtime == "docker":
            assert f'"path": "{toolkit}/nvidia-container-runtime"' in (h / "etc/docker/daemon.json").read_text()
            assert engine.hups() == 1
        else:
            hook = (h / "usr/share/containers/oci/hooks.d/oci-nvidia-hook.json").read_text()
            assert f'"path": "{toolkit}/nvidia-container-runtime-hook"' in hook
            assert not (h / "etc/crio").exists()
    finally:
        rc = inst.stop()
        if engine:
            wait_for(lambda: engine.hups() == 2, "the engine to be told again")
            engine.stop()
    assert rc == 0, inst.output()
    if runtime == "docker":  # dockerd's SIGHUP reload keeps the runtime: the toolkit stays, said once
        toolkit = "usr/local/nvidia/toolkit"
        assert inst.output().count(f"keeping {h / toolkit}: dockerd's SIGHUP reload does not forget") == 1
        assert all(k == toolkit or k.startswith(toolkit + "/") for k in set(snapshot(h)) - set(before))
        assert {k: v for k, v in snapshot(h).items() if k in before} == before, inst.output()
        r = subprocess.run([str(BIN / "nct"), "install", "--toolkit-root", str(h / toolkit), "--uninstall"],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
    assert snapshot(h) == before, inst.output()  # config back byte for byte; toolkit, hook, pid file gone


def test_docker_restarted_through_systemd_forgets_the_runtime_so_the_toolkit_goes(tmp_path):
    """With `--restart-mode systemd` dockerd restarts on the restored daemon.json: nothing
    uses the toolkit any more and the undo removes it."""
    from .conftest import is_static

    if not is_static("/bin/busybox"):
        pytest.skip("needs a static busybox (busybox-static)")
    h, env = host(tmp_path, "docker")
    (h / "bin").mkdir()
    (h / "bin/busybox").write_bytes(Path("/bin/busybox").read_bytes())
    (h / "bin/busybox").chmod(0o755)
    os.symlink("busybox", h / "bin/sh")
    (h / "bin/systemctl").write_text('#!/bin/sh\necho "$@" >> /systemctl.log\n')
    (h / "bin/systemctl").chmod(0o755)
    before = snapshot(h)
    env.update(RUNTIME_RESTART_MODE="systemd", HOST_ROOT_MOUNT=str(h))
    inst = Installer(env, tmp_path / "install.log")
    try:
        inst.wait_ready()
        assert (h / "systemctl.log").read_text() == "restart docker\n"
    finally:
        assert inst.stop() == 0, inst.output()
    assert (h / "systemctl.log").read_text() == "restart docker\nrestart docker\n"
    (h / "systemctl.log").unlink()
    assert "keeping" not in inst.output()
    assert snapshot(h) == before, inst.output()


def test_signal_during_setup_still_undoes_everything(tmp_path):
    """SIGTERM while setup runs (here: while the engine's config is read through a slow
    `command` source): setup completes, then everything is undone; no stale pid file."""
    h, env = host(tmp_path, "containerd")
    before = snapshot(h)
    slow = tmp_path / "slow-containerd"
    slow.write_text(f"#!/bin/sh\ntouch {tmp_path}/reading\nsleep 2\ncat {h}/etc/containerd/config.toml\n")
    slow.chmod(0o755)
    env.update(RUNTIME_CONFIG_SOURCES="command,file", RUNTIME_EXECUTABLE_PATH=str(slow), HOST_ROOT_MOUNT="",
               RUNTIME_RESTART_MODE="none")
    inst = Installer(env, tmp_path / "install.log")
    wait_for(lambda: (tmp_path / "reading").exists() or inst.proc.poll() is not None, "setup to start")
    assert (h / "run/nvidia/toolkit/toolkit.pid").exists()
    rc = inst.stop()
    assert rc == 0, inst.output()
    out = inst.output()
    assert "got SIGTERM; restoring" in out and "restored containerd configuration" in out, out
    assert "ready (pid" not in out
    assert snapshot(h) == before, out


def test_second_instance_refused_by_the_lock(tmp_path):
    h, env = host(tmp_path, "docker")
    env["RUNTIME_RESTART_MODE"] = "none"
    first = Installer(env, tmp_path / "first.log")
    try:
        first.wait_ready()
        pid_file = h / "run/nvidia/toolkit/toolkit.pid"
        r = subprocess.run([str(BIN / "nvidia-ctk-installer")], capture_output=True, text=True,
                           env={"PATH": os.environ["PATH"], **env, "TOOLKIT_INSTALL_DIR": f"{tmp_path}/other"})
        assert r.returncode == 1
        assert r.stderr.strip().splitlines()[-1] == (
            f"nct: {pid_file}: another toolkit installer is running (pid {first.proc.pid}); stop it first")
        assert pid_file.read_text() == f"{first.proc.pid}\n"  # not truncated by the loser
        assert not (tmp_path / "other").exists()
    finally:
        assert first.stop() == 0, first.output()
    assert not (h / "run/nvidia/toolkit/toolkit.pid").exists()


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    node = tmp_path_factory.mktemp("sim") / "node"
    r = subprocess.run([str(BIN / "nct"), "sim", "create", str(node), "--gpus", "2"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return node


@pytest.mark.parametrize("cdi", [True, False])
def test_cdi_management_spec_names_host_paths(tmp_path, sim, cdi):
    """The driver is read at its pod path (DRIVER_ROOT_CTR_PATH, here the simulated node); the
    spec names the host's (DRIVER_ROOT=/run/nvidia/driver); SIGTERM removes it again."""
    h, env = host(tmp_path, "containerd")
    env.update(DRIVER_ROOT="/run/nvidia/driver", DRIVER_ROOT_CTR_PATH=f"{sim}/root", NCT_PROC_ROOT=f"{sim}/root/proc",
               CDI_OUTPUT_DIR=f"{h}/var/run/cdi", CDI_ENABLED="true" if cdi else "false",
               CREATE_DEVICE_NODES="none", RUNTIME_RESTART_MODE="none")
    before = snapshot(h)
    inst = Installer(env, tmp_path / "install.log")
    try:
        inst.wait_ready()
        spec_file = h / "var/run/cdi/management.nvidia.com-gpu.yaml"
        drop_in = (h / "etc/containerd/conf.d/99-nvidia.toml").read_text()
        assert ("enable_cdi = true" in drop_in) == cdi
        assert spec_file.exists() == cdi
        if cdi:
            spec = yaml.safe_load(spec_file.read_text())
            assert spec["kind"] == "management.nvidia.com/gpu" and [d["name"] for d in spec["devices"]] == ["all"]
            edits = spec["containerEdits"]
            host_paths = [m["hostPath"] for m in edits["mounts"]] + [n["hostPath"] for n in edits["deviceNodes"]]
            assert host_paths and all(p.startswith("/run/nvidia/driver/") for p in host_paths), host_paths
            assert not any(str(sim) in p for p in host_paths)
            assert "/run/nvidia/driver/dev/nvidiactl" in host_paths
            toolkit = h / "usr/local/nvidia/toolkit"
            assert {hk["path"] for hk in edits.get("hooks", [])} <= {f"{toolkit}/nvidia-cdi-hook"}
    finally:
        assert inst.stop() == 0, inst.output()
    assert snapshot(h) == before


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod needs root")
def test_control_device_nodes_created_at_the_pod_dev_root(tmp_path, sim):
    """CDI on, CREATE_DEVICE_NODES=control (the default): the control nodes are made under
    DEV_ROOT_CTR_PATH with the majors of the node's /proc/devices; the spec names them under
    DEV_ROOT, the host's."""
    h, env = host(tmp_path, "docker")
    devroot = tmp_path / "pod-dev"
    devroot.mkdir()
    env.update(DRIVER_ROOT="/run/nvidia/driver", DRIVER_ROOT_CTR_PATH=f"{sim}/root", NCT_PROC_ROOT=f"{sim}/root/proc",
               DEV_ROOT="/", DEV_ROOT_CTR_PATH=str(devroot), CDI_OUTPUT_DIR=f"{h}/var/run/cdi", CDI_ENABLED="1",
               RUNTIME_RESTART_MODE="none", NO_DAEMON="1")
    r = subprocess.run([str(BIN / "nvidia-ctk-installer")], capture_output=True, text=True,
                       env={"PATH": os.environ["PATH"], **env})
    assert r.returncode == 0, r.stderr
    nodes = {p.name: p.stat() for p in (devroot / "dev").iterdir()}
    assert set(nodes) == {"nvidiactl", "nvidia-modeset", "nvidia-uvm", "nvidia-uvm-tools"}
    assert os.major(nodes["nvidiactl"].st_rdev) == 195 and os.minor(nodes["nvidiactl"].st_rdev) == 255
    spec = yaml.safe_load((h / "var/run/cdi/management.nvidia.com-gpu.yaml").read_text())
    assert {"/dev/nvidiactl", "/dev/nvidia-uvm"} <= {n["hostPath"] for n in spec["containerEdits"]["deviceNodes"]}
    assert not any(str(devroot) in n["hostPath"] for n in spec["containerEdits"]["deviceNodes"])


@pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/bin/busybox"), reason="needs root and busybox")
def test_crio_config_mode_restarted_through_systemd_in_the_host_root(tmp_path):
    """CRI-O (config mode, upstream's default restart mode `systemd`): `chroot HOST_ROOT_MOUNT
    systemctl restart crio` after setup and again after the undo; the drop-in goes away and
    crio.conf keeps its bytes."""
    from .conftest import is_static

    if not is_static("/bin/busybox"):
        pytest.skip("needs a static busybox (busybox-static)")
    h, env = host(tmp_path, "crio")
    (h / "etc/crio").mkdir(parents=True)
    (h / "etc/crio/crio.conf").write_text('[crio.runtime]\ndefault_runtime = "crun"\n')
    (h / "bin").mkdir()
    (h / "bin/busybox").write_bytes(Path("/bin/busybox").read_bytes())
    (h / "bin/busybox").chmod(0o755)
    os.symlink("busybox", h / "bin/sh")
    (h / "bin/systemctl").write_text('#!/bin/sh\necho "$@" >> /systemctl.log\n')
    (h / "bin/systemctl").chmod(0o755)
    before = snapshot(h)
    env.update(CRIO_CONFIG_MODE="config", RUNTIME_RESTART_MODE="systemd", HOST_ROOT_MOUNT=str(h),
               RUNTIME_DROP_IN_CONFIG=f"{h}/etc/crio/crio.conf.d/99-nvidia.toml")
    inst = Installer(env, tmp_path / "install.log")
    try:
        inst.wait_ready()
        assert (h / "systemctl.log").read_text() == "restart crio\n"
        drop_in = (h / "etc/crio/crio.conf.d/99-nvidia.toml").read_text()
        assert f'runtime_path = "{h}/usr/local/nvidia/toolkit/nvidia-container-runtime"' in drop_in
    finally:
        assert inst.stop() == 0, inst.output()
    assert (h / "systemctl.log").read_text() == "restart crio\nrestart crio\n"
    (h / "systemctl.log").unlink()
    assert snapshot(h) == before, inst.output()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGPIPE])
def test_upstreams_other_stop_signals_undo_too(tmp_path, sig):
    h, env = host(tmp_path, "docker")
    env["RUNTIME_RESTART_MODE"] = "none"
    before = snapshot(h)
    inst = Installer(env, tmp_path / "install.log")
    try:
        inst.wait_ready()
    finally:
        assert inst.stop(sig) == 0, inst.output()
    assert f"got {signal.Signals(sig).name}; restoring" in inst.output()
    assert snapshot(h) == before
