"""The nvidia-cdi-refresh units: well-formed for systemd, and the command the service
runs, with the environment it sets, writes a CDI spec for a simulated node."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
UNITS = REPO / "packaging/systemd"
BIN = Path(sys.executable).parent


def unit_entries(path: Path) -> list[tuple[str, str, str]]:
    """(section, key, value) in order; systemd allows repeated keys, so no configparser."""
    section, out = "", []
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line.strip("[]")
            continue
        key, _, value = line.partition("=")
        out.append((section, key.strip(), value.strip()))
    return out


def test_units_are_well_formed():
    service = unit_entries(UNITS / "nvidia-cdi-refresh.service")
    assert ("Service", "Type", "oneshot") in service
    assert ("Service", "ExecStart", "/usr/bin/nvidia-ctk cdi generate") in service
    assert ("Service", "Environment", "NVIDIA_CTK_CDI_OUTPUT_FILE_PATH=/var/run/cdi/nvidia.yaml") in service
    assert ("Service", "EnvironmentFile", "-/etc/nvidia-container-toolkit/nvidia-cdi-refresh.env") in service
    path = unit_entries(UNITS / "nvidia-cdi-refresh.path")
    assert ("Path", "PathChanged", "/lib/modules/%v/modules.dep") in path
    assert ("Path", "Unit", "nvidia-cdi-refresh.service") in path
    if shutil.which("systemd-analyze"):
        r = subprocess.run(["systemd-analyze", "verify", "--man=no", str(UNITS / "nvidia-cdi-refresh.path")],
                           capture_output=True, text=True)
        assert "nvidia-cdi-refresh.path" not in r.stderr, r.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="nct sim run needs root")
def test_service_command_generates_spec_for_simulated_node(tmp_path):
    service = unit_entries(UNITS / "nvidia-cdi-refresh.service")
    env = {"PATH": f"{BIN}:/usr/sbin:/usr/bin:/sbin:/bin"}
    for section, key, value in service:
        if key == "Environment":
            k, _, v = value.partition("=")
            env[k] = v
    out = tmp_path / "cdi" / "nvidia.yaml"
    env["NVIDIA_CTK_CDI_OUTPUT_FILE_PATH"] = str(out)  # as the env file would override it
    argv = shlex.split(next(v for s, k, v in service if k == "ExecStart"))
    argv[0] = str(BIN / os.path.basename(argv[0]))  # this checkout's nvidia-ctk, not /usr/bin's
    sim = tmp_path / "node"
    r = subprocess.run([str(BIN / "nct"), "sim", "create", str(sim), "--gpus", "2"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([str(BIN / "nct"), "sim", "run", str(sim), "--", *argv], capture_output=True, text=True,
                       env=env)
    if "not implemented" in r.stderr:
        pytest.skip(f"`nvidia-ctk cdi generate` is not there yet: {r.stderr.strip()}")
    assert r.returncode == 0, r.stderr
    spec = yaml.safe_load(out.read_text())
    assert spec["kind"] == "nvidia.com/gpu"
    names = {d["name"] for d in spec["devices"]}
    assert {"0", "1", "all"} <= names
