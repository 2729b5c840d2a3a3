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


CREATE_HEAVY = ("json", "re", "enum", "tempfile", "dataclasses", "typing", "click", "yaml", "elftools", "logging",
                "subprocess", "nct.cdi.registry", "nct.cdi.spec", "nct.driver.nvml")


def test_jit_cdi_create_imports(shim, fake_runtime, make_bundle, sim_node, tmp_path):
    """A GPU container's `create` in jit-cdi mode, at a node's steady state (driver files
    past the caches' racy window, ELF checks cached), imports none of CREATE_HEAVY: no `json`
    to write config.json (nct.jsonio.dumps_compact), no YAML, no pyelftools, no NVML."""
    import os
    import time

    from .conftest import oci_spec

    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    shim.write_config(f'[nvidia-container-cli]\nroot = "{sim_node}/root"\n'
                      '[nvidia-container-runtime]\nmode = "jit-cdi"\n')
    env = shim.env(NCT_PROC_ROOT=str(sim_node / "root" / "proc"), NCT_CACHE_DIR=str(cache))
    newest = max(os.stat(sim_node / "root" / d).st_mtime for d in ("usr/lib/x86_64-linux-gnu", "usr/bin"))
    time.sleep(max(0.0, 2.5 - (time.time() - newest)))
    # as installed (`python -IS` launcher; pip's console script imports `re` itself)
    launcher = ["-I", "-S", "-c", f"import sys; sys.path[:0] = {sys.path!r}; sys.argv[0] = 'nvidia-container-runtime'; "
                "from nct.runtime.main import main; sys.exit(main())"]
    for i in range(2):  # the first create fills the ELF cache
        b = make_bundle(oci_spec(["NVIDIA_VISIBLE_DEVICES=all"]), name=f"bundle{i}")
        r = subprocess.run([sys.executable, "-X", "importtime", *launcher, "create", "--bundle", str(b), "id"],
                           env=env, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr[-2000:]
    mods = {line.split("|")[-1].strip() for line in r.stderr.splitlines() if line.startswith("import time:")}
    assert "nct.runtime.create" in mods and "nct.edits.planner" in mods
    assert "NVIDIA_VISIBLE_DEVICES=void" in (b / "config.json").read_text()
    heavy = sorted(m for m in mods if m in CREATE_HEAVY or m.split(".")[0] in CREATE_HEAVY)
    assert not heavy, heavy
