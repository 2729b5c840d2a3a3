"""`docker run --gpus` through Debian's dockerd, started inside `nct sim run` with its own
data root, exec root, socket and pid file (no bridge, no iptables, cgroupfs). dockerd finds
our nvidia-container-runtime-hook on its PATH, as it finds upstream's."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from e2e.harness import _boot_ticks, mounts_under, needs_e2e, venv_bin, wait_no_stray_ldconfig

pytestmark = [needs_e2e, pytest.mark.skipif(shutil.which("dockerd") is None or shutil.which("docker") is None,
                                            reason="needs docker.io (dockerd and docker)")]
IMAGE = "nct-e2e-busybox:latest"


class Dockerd:
    def __init__(self, node, base: Path):
        self.base = base
        self.sock = f"unix://{base}/docker.sock"
        (base / "daemon.json").write_text("{}\n")
        env = dict(os.environ, PATH=f"{Path(venv_bin('nct')).parent}:{os.environ.get('PATH', '')}")
        self.log = open(base / "dockerd.log", "wb")
        argv = [venv_bin("nct"), "sim", "run", str(node.dir), "--", "dockerd",
                "--config-file", str(base / "daemon.json"), "--data-root", str(base / "data"),
                "--exec-root", str(base / "exec"), "-H", self.sock, "--pidfile", str(base / "docker.pid"),
                "--bridge=none", "--iptables=false", "--ip-forward=false", "--ip-masq=false",
                "--exec-opt", "native.cgroupdriver=cgroupfs", "--storage-driver=vfs"]
        self.proc = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT, env=env,
                                     start_new_session=True)

    def docker(self, *args: str, input: bytes | None = None, timeout: int = 120) -> subprocess.CompletedProcess:
        return subprocess.run(["docker", "-H", self.sock, *args], input=input, capture_output=True, timeout=timeout)

    def wait_ready(self, limit: float = 90.0) -> None:
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            if self.docker("version", timeout=30).returncode == 0:
                return
            time.sleep(0.5)
        raise RuntimeError("dockerd did not come up:\n" + (self.base / "dockerd.log").read_text()[-3000:])

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)  # dockerd itself (nct sim run execs it)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.log.close()
        for point in reversed(mounts_under(self.base)):  # the namespace was private: expect none
            subprocess.run(["umount", "-l", point], check=False)


@pytest.fixture(scope="module")
def dockerd(sim_node, rootfs_template):
    base = Path(tempfile.mkdtemp(prefix="nctd-", dir="/tmp"))
    d = Dockerd(sim_node, base)
    try:
        d.wait_ready()
        tar = subprocess.run(["tar", "-C", str(rootfs_template), "-c", "."], capture_output=True, check=True).stdout
        res = d.docker("import", "-", IMAGE, input=tar)
        assert res.returncode == 0, res.stderr.decode()
        yield d
    finally:
        d.stop()
        leftovers = mounts_under(base)
        shutil.rmtree(base, ignore_errors=True)
        assert leftovers == []


def run(dockerd, *args: str) -> subprocess.CompletedProcess:
    return dockerd.docker("run", "--rm", "--network", "none", *args)


def test_gpus_device_1(dockerd, sim_node):
    res = run(dockerd, "--gpus", "device=1", IMAGE, "nvidia-smi", "-L")
    assert res.returncode == 0, res.stderr.decode()
    assert res.stdout.decode().splitlines() == [
        f"GPU 0: {sim_node.gpu(1)['model']} (UUID: {sim_node.gpu(1)['uuid']})"]


def test_gpus_all_and_probe(dockerd, sim_node):
    res = run(dockerd, "--gpus", "all", IMAGE, "sh", "-c", "ls /dev; cuda-probe; nvidia-smi -L")
    assert res.returncode == 0, res.stderr.decode()
    out = res.stdout.decode()
    assert "cuDriverGetVersion=12040" in out
    for g in sim_node.info["gpus"]:
        assert g["uuid"] in out


def test_gpus_leaves_no_stray_process_or_jail(dockerd):
    """The hook leaves ldconfig's child to exit on its own (it does not wait for it): under
    dockerd the orphan and its jail remover go to the container's shim (a subreaper), which
    reaps them. After GPU containers, none of them is left, not even as a zombie, and no
    ldconfig jail (deny-all device cgroup) is left behind."""
    from e2e.test_failures import _jails

    before, since = _jails(), _boot_ticks()
    for _ in range(3):
        res = run(dockerd, "--gpus", "all", IMAGE, "true")
        assert res.returncode == 0, res.stderr.decode()
    assert wait_no_stray_ldconfig(since) == []
    for _ in range(100):  # other tests may be running ldconfig right now: theirs come and go
        if not _jails() - before:
            break
        time.sleep(0.05)
    assert _jails() - before == set()


def test_gpus_capabilities_utility_only(dockerd):
    res = run(dockerd, "--gpus", '"device=0","capabilities=utility"', IMAGE, "sh", "-c", "cuda-probe; nvidia-smi -L")
    assert res.returncode == 0, res.stderr.decode()
    assert "dlopen failed" in res.stdout.decode() and "GPU 0:" in res.stdout.decode()


def test_no_gpus_flag_untouched(dockerd):
    res = run(dockerd, IMAGE, "sh", "-c", "ls /dev | grep -c nvidia; true")
    assert res.returncode == 0 and res.stdout.decode().strip() == "0"


def test_unknown_device_refused(dockerd):
    res = run(dockerd, "--gpus", "device=9", IMAGE, "echo", "STARTED")
    assert res.returncode != 0 and b"STARTED" not in res.stdout
    assert "unknown device: 9" in res.stderr.decode()
