"""Bad environment values (empty, garbage, very long, relative paths) given to the real
`nvidia-ctk-installer` the way the GPU Operator gives settings: each is one line that names
the variable and says what is wanted, exit 1, no traceback, nothing written (the toolkit dir
is not left behind, the engine's config is untouched).  The cases are the ones a sweep of
every variable with those four kinds of value found rejected; the rest are accepted as
upstream accepts them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent
LONG = "a" * 5000
GARBAGE = "\x7f;rm -rf /\n["
DAEMON_JSON = '{"log-level": "warn"}\n'

# (variable, bad value, what the line must say besides the variable's name)
CASES = [
    ("RUNTIME", "", "unknown runtime"),
    ("RUNTIME", GARBAGE, "unknown runtime"),
    ("ROOT", "rel/path", "absolute path"),
    ("ROOT", "", "absolute path"),
    ("RUNTIME_CONFIG", "rel/path", "absolute path"),
    ("RUNTIME_CONFIG", LONG, "absolute path"),
    ("HOST_ROOT_MOUNT", "rel/path", "absolute path"),
    ("CRIO_HOOKS_DIR", GARBAGE, "absolute path"),
    ("RUNTIME_RESTART_MODE", "rel/path", "want signal, systemd or none"),
    ("CRIO_CONFIG_MODE", LONG, "want config or hook"),
    ("CDI_KIND", "", "vendor/class"),
    ("CDI_KIND", GARBAGE, "invalid vendor"),
    ("CREATE_DEVICE_NODES", "rel/path", "want control, none"),
    ("NVIDIA_RUNTIME_NAME", "", "must not be empty"),
    ("CONTAINERD_RUNTIME_CLASS", "", "must not be empty"),
    ("CDI_ENABLED", "rel/path", "want true or false"),
    ("NO_DAEMON", LONG, "want true or false"),
    ("DOCKER_SET_AS_DEFAULT", GARBAGE, "want true or false"),
    ("NVIDIA_CONTAINER_RUNTIME_LOG_LEVEL", "rel/path", "unknown log level"),
    ("NVIDIA_CONTAINER_RUNTIME_MODE", LONG, "unknown mode"),
    ("NRI_PLUGIN_INDEX", GARBAGE, "range [0,99]"),
    ("TOOLKIT_PID_FILE", "rel/path", "toolkit.pid"),
]


KIND = {"": "empty", GARBAGE: "garbage", LONG: "long", "rel/path": "rel"}


@pytest.mark.parametrize("var, value, want", CASES, ids=[f"{c[0]}-{KIND[c[1]]}" for c in CASES])
def test_bad_env_value_is_one_line_naming_it(tmp_path, var, value, want):
    (tmp_path / "daemon.json").write_text(DAEMON_JSON)
    env = {"PATH": os.environ["PATH"], "RUNTIME": "docker", "RUNTIME_CONFIG": str(tmp_path / "daemon.json"),
           "RUNTIME_RESTART_MODE": "none", "NO_DAEMON": "true", "TOOLKIT_PID_FILE": str(tmp_path / "run/toolkit.pid"),
           "ROOT": str(tmp_path / "install"), "NVIDIA_DRIVER_ROOT": "/", "DRIVER_ROOT_CTR_PATH": "/"}
    env[var] = value
    r = subprocess.run([str(BIN / "nvidia-ctk-installer")], env=env, capture_output=True, text=True, timeout=300,
                       cwd=tmp_path)
    assert r.returncode == 1, r.stderr
    assert "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert var in lines[0] and want in lines[0], lines[0]
    assert not (tmp_path / "install").exists()
    assert (tmp_path / "daemon.json").read_text() == DAEMON_JSON
    assert sorted(p.name for p in tmp_path.iterdir()) == ["daemon.json"]
