"""The pass-through path stays light: no TOML parser, JSON, dataclasses, click or the
config model are imported for `state` (checked with -X importtime, not with timings)."""

import subprocess
import sys

import pytest

from .conftest import entry_point

HEAVY = ("tomllib", "json", "dataclasses", "click", "nct.config.load", "nct.config.model",
         "nct.runtime.create", "logging", "tempfile")


def _imported(env, args):
    r = subprocess.run([sys.executable, "-X", "importtime", entry_point("nvidia-container-runtime"), *args],
                       env=env, capture_output=True, text=True, timeout=60)
    mods = {line.split("|")[-1].strip() for line in r.stderr.splitlines() if line.startswith("import time:")}
    return r, mods


@pytest.mark.parametrize("config", [None, "default"])
def test_pass_through_imports(shim, fake_runtime, config):
    if config is None:
        shim.config.unlink()
        env = shim.env()
        del env["NVIDIA_CTK_CONFIG_FILE_PATH"]
        env["XDG_CONFIG_HOME"] = str(shim.tmp / "xdg-empty")
        env["PATH"] = f"{fake_runtime.path.parent}:{env['PATH']}"
        fake_runtime.path.rename(fake_runtime.path.parent / "runc")
    else:
        from pathlib import Path

        import nct.config

        default = Path(nct.config.__file__).parent / "default.toml"
        shim.config.write_text(default.read_text().replace(
            'runtimes = ["runc", "crun"]', f'runtimes = ["{fake_runtime.path}"]'))
        env = shim.env()
    r, mods = _imported(env, ["--root", "/x", "state", "id"])
    assert r.returncode == 0, r.stderr[-2000:]
    assert "nct.runtime.main" in mods
    assert not (set(HEAVY) & mods), sorted(set(HEAVY) & mods)
