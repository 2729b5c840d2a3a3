"""Against the real engines from Debian: containerd reads what we wrote (`config dump`),
and a private dockerd lists our runtime and runs a container through it."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from .conftest import needs_containerd, needs_docker, runc_wrapper

BIN = Path(sys.executable).parent


def ctk(*args: str) -> None:
    r = subprocess.run([str(BIN / "nvidia-ctk"), *args], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


@needs_containerd
@pytest.mark.parametrize("drop_in", [True, False])
def test_containerd_config_dump_shows_runtime(tmp_path, drop_in):
    default = subprocess.run(["containerd", "config", "default"], capture_output=True, text=True, check=True).stdout
    main = tmp_path / "config.toml"
    main.write_text(default.replace("SystemdCgroup = false", "SystemdCgroup = true"))
    drop = tmp_path / "conf.d" / "99-nvidia.toml"
    ctk("runtime", "configure", "--runtime=containerd", f"--config={main}",
        f"--drop-in-config={drop if drop_in else ''}", "--set-as-default",
        "--nvidia-runtime-path=/opt/nct/nvidia-container-runtime")
    dump = subprocess.run(["containerd", "--config", str(main), "config", "dump"], capture_output=True, text=True)
    assert dump.returncode == 0, dump.stderr
    cri = tomllib.loads(dump.stdout)["plugins"]["io.containerd.grpc.v1.cri"]
    nvidia = cri["containerd"]["runtimes"]["nvidia"]
    assert nvidia["options"]["BinaryName"] == "/opt/nct/nvidia-container-runtime"
    assert nvidia["options"]["SystemdCgroup"] is True
    assert nvidia["runtime_type"] == "io.containerd.runc.v2"
    assert cri["containerd"]["default_runtime_name"] == "nvidia"
    assert cri["containerd"]["runtimes"]["runc"]["options"]["BinaryName"] == ""
    ctk("runtime", "configure", "--remove", "--runtime=containerd", f"--config={main}",
        f"--drop-in-config={drop if drop_in else ''}")
    assert main.read_text() == default.replace("SystemdCgroup = false", "SystemdCgroup = true")


@needs_containerd
def test_containerd_config_source_command_uses_real_dump(tmp_path):
    """`--config-source command` copies the runtime options from containerd's own view
    (defaults included), while the file on disk is only edited where needed."""
    main = tmp_path / "config.toml"
    main.write_text("version = 2\n")
    r = subprocess.run([str(BIN / "nvidia-ctk"), "runtime", "configure", "--runtime=containerd", f"--config={main}",
                        "--drop-in-config=", "--config-source=command", "--executable-path=containerd", "--dry-run"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    nvidia = tomllib.loads(r.stdout)["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["runtimes"]["nvidia"]
    assert nvidia["options"]["BinaryName"] == "/usr/bin/nvidia-container-runtime"
    assert "SystemdCgroup" in nvidia["options"] and "runtime_root" in nvidia  # from the dump's runc
    assert main.read_text() == "version = 2\n"


DAEMON_JSON = """{
    "log-level": "warn",
    "features": {
        "buildkit": true
    },
    "max-concurrent-downloads": 2
}
"""


@needs_docker
def test_dockerd_lists_and_runs_configured_runtime(tmp_path, dockerd_factory, busybox_image):
    cfg = tmp_path / "daemon.json"
    cfg.write_text(DAEMON_JSON)
    marker = tmp_path / "runtime-calls"
    wrapper = runc_wrapper(tmp_path, marker)
    ctk("runtime", "configure", f"--config={cfg}", f"--nvidia-runtime-path={wrapper}", "--cdi.enabled")
    assert json.loads(cfg.read_text())["features"] == {"buildkit": True, "cdi": True}
    d = dockerd_factory(cfg)
    runtimes = d.runtimes()
    assert runtimes["nvidia"]["path"] == str(wrapper)
    image = busybox_image(d)
    r = d.docker("run", "--rm", "--network=none", "--runtime=nvidia", image, "/bin/echo", "hello-nct")
    assert r.stdout == "hello-nct\n"
    assert " create " in f" {marker.read_text()} "  # the engine ran our runtime path
    d.stop()
    ctk("runtime", "configure", "--remove", f"--config={cfg}")
    assert cfg.read_text() == DAEMON_JSON


@needs_docker
def test_dockerd_default_runtime_set(tmp_path, dockerd_factory, busybox_image):
    cfg = tmp_path / "daemon.json"
    cfg.write_text("")
    marker = tmp_path / "runtime-calls"
    wrapper = runc_wrapper(tmp_path, marker)
    ctk("runtime", "configure", f"--config={cfg}", f"--nvidia-runtime-path={wrapper}", "--set-as-default")
    d = dockerd_factory(cfg)
    assert d.default_runtime() == "nvidia"
    image = busybox_image(d)
    assert d.docker("run", "--rm", "--network=none", image, "/bin/true").returncode == 0
    assert marker.exists()


def _shim_available() -> str | None:
    if importlib.util.find_spec("nct.runtime.main") is None:
        return "nct.runtime.main (the runtime shim, area RUNTIME) is not there yet"
    if not (BIN / "nvidia-container-runtime").exists():
        return "nvidia-container-runtime is not installed in the venv"
    return None


@needs_docker
@pytest.mark.skipif(_shim_available() is not None, reason=str(_shim_available()))
def test_dockerd_runs_through_our_runtime_shim(tmp_path, dockerd_factory, busybox_image):
    """A non-GPU container passes straight through nvidia-container-runtime to runc."""
    cfg = tmp_path / "daemon.json"
    cfg.write_text("{}\n")
    ctk("runtime", "configure", f"--config={cfg}", f"--nvidia-runtime-path={BIN / 'nvidia-container-runtime'}")
    d = dockerd_factory(cfg)
    image = busybox_image(d)
    r = d.docker("run", "--rm", "--network=none", "--runtime=nvidia", image, "/bin/echo", "through-the-shim")
    assert r.stdout == "through-the-shim\n"
