"""Fixtures for engine tests: a private dockerd (own data root, exec root, socket and pid
file; killed by pid, its mounts unmounted) and a busybox image imported into it."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

VENV_BIN = Path(sys.executable).parent
BUSYBOX = shutil.which("busybox") or "/bin/busybox"


def have(*tools: str) -> bool:
    return all(shutil.which(t) for t in tools)


def is_static(path: str) -> bool:
    out = subprocess.run(["file", "-L", path], capture_output=True, text=True).stdout if have("file") else ""
    if out:
        return "statically linked" in out or "static-pie" in out
    return subprocess.run(["ldd", path], capture_output=True, text=True).returncode != 0


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root")
needs_docker = pytest.mark.skipif(
    os.geteuid() != 0 or not have("dockerd", "docker", "runc") or not is_static(BUSYBOX),
    reason="needs root, dockerd, docker, runc and a static busybox (busybox-static)",
)
needs_containerd = pytest.mark.skipif(not have("containerd"), reason="needs containerd")


def wait_for(predicate, what: str, limit: float = 90.0, step: float = 0.2):
    """Readiness wait (not an assertion on time): poll until predicate() is truthy."""
    deadline = time.monotonic() + limit
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise RuntimeError(f"gave up waiting for {what}")
        time.sleep(step)


def busybox_tar(dest: Path) -> Path:
    root = dest / "rootfs"
    (root / "bin").mkdir(parents=True)
    shutil.copy2(BUSYBOX, root / "bin" / "busybox")
    for app in ("sh", "echo", "cat", "ls", "true"):
        os.symlink("busybox", root / "bin" / app)
    tar = dest / "busybox.tar"
    subprocess.run(["tar", "-C", str(root), "-cf", str(tar), "."], check=True)
    return tar


def _unmount_under(prefix: str) -> None:
    with open("/proc/self/mountinfo") as f:
        points = [line.split()[4] for line in f]
    for point in sorted((p for p in points if p.startswith(prefix)), key=len, reverse=True):
        subprocess.run(["umount", "-l", point], capture_output=True)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


class Dockerd:
    """A dockerd of our own; `docker(...)` runs the CLI against it."""

    def __init__(self, base: Path, daemon_json: Path, wrap: list[str] | None = None):
        self.wrap = list(wrap or [])
        self.base = base
        self.daemon_json = daemon_json
        self.sock = base / "d.sock"
        self.pidfile = base / "d.pid"
        self.log = base / "dockerd.log"
        self.proc: subprocess.Popen | None = None

    def start(self) -> "Dockerd":
        env = {"PATH": f"{VENV_BIN}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [*self.wrap, "dockerd", "--data-root", str(self.base / "data"), "--exec-root", str(self.base / "exec"),
                 "-H", f"unix://{self.sock}", "--pidfile", str(self.pidfile), "--bridge=none",
                 "--iptables=false", "--ip-forward=false", "--ip-masq=false",
                 "--exec-opt", "native.cgroupdriver=cgroupfs", "--config-file", str(self.daemon_json)],
                stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True,
            )
        wait_for(lambda: self.proc.poll() is not None or self.docker("version", check=False).returncode == 0,
                 "dockerd to answer")
        if self.proc.poll() is not None:
            raise RuntimeError(f"dockerd exited: {self.log.read_text()[-2000:]}")
        return self

    @property
    def pid(self) -> int:
        return self.proc.pid

    def docker(self, *args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
        res = subprocess.run(["docker", "-H", f"unix://{self.sock}", *args], capture_output=True, text=True,
                             timeout=timeout)
        if check and res.returncode != 0:
            raise AssertionError(f"docker {' '.join(args)} failed: {res.stderr}\n{self.log_tail()}")
        return res

    def runtimes(self) -> dict:
        import json
        return json.loads(self.docker("info", "--format", "{{json .Runtimes}}").stdout)

    def default_runtime(self) -> str:
        return self.docker("info", "--format", "{{.DefaultRuntime}}").stdout.strip()

    def log_tail(self) -> str:
        try:
            return self.log.read_text()[-3000:]
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        # the daemon's own containerd and shims are in its session: end any left, by pid
        try:
            out = subprocess.run(["ps", "-eo", "pid=,sid="], capture_output=True, text=True).stdout
            for line in out.splitlines():
                pid, sid = (int(x) for x in line.split())
                if self.proc is not None and sid == self.proc.pid and _alive(pid):
                    os.kill(pid, signal.SIGKILL)
        except (OSError, ValueError):
            pass
        _unmount_under(str(self.base))


@pytest.fixture
def dockerd_factory():
    """Start dockerds on given daemon.json files; all are stopped and cleaned up after."""
    made: list[Dockerd] = []
    bases: list[Path] = []

    def start(daemon_json: Path, wrap: list[str] | None = None) -> Dockerd:
        """`wrap`: a command prefix, e.g. `nct sim run DIR --` to run it on a simulated node."""
        base = Path(tempfile.mkdtemp(prefix="nct-dk-", dir="/tmp"))
        bases.append(base)
        d = Dockerd(base, daemon_json, wrap)
        made.append(d)
        return d.start()

    yield start
    for d in made:
        d.stop()
    for base in bases:
        _unmount_under(str(base))
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def busybox_image(tmp_path):
    """Import a busybox-static rootfs into a dockerd: call with the Dockerd."""
    tar = busybox_tar(tmp_path / "img")

    def load(d: Dockerd, tag: str = "nct-busybox:test") -> str:
        d.docker("import", str(tar), tag)
        return tag

    return load


def runc_wrapper(directory: Path, marker: Path) -> Path:
    """A tiny 'runtime' that records each call and execs runc: proves the engine ran our path."""
    script = directory / "fake-nvidia-runtime"
    script.write_text(f"#!/bin/sh\necho \"$*\" >> {marker}\nexec runc \"$@\"\n")
    script.chmod(0o755)
    return script
