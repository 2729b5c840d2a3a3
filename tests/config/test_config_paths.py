"""Config file resolution: NVIDIA_CTK_CONFIG_FILE_PATH, then XDG_CONFIG_HOME, then /etc."""

from __future__ import annotations

import pytest

from nct.config import load, model, paths
from nct.errors import ConfigError


def test_resolution_order():
    assert paths.resolve_config_path({}) == ("/etc/nvidia-container-runtime/config.toml", False)
    assert paths.resolve_config_path({"XDG_CONFIG_HOME": "/x"}) == ("/x/nvidia-container-runtime/config.toml", False)
    env = {"XDG_CONFIG_HOME": "/x", "NVIDIA_CTK_CONFIG_FILE_PATH": "/y/c.toml"}
    assert paths.resolve_config_path(env) == ("/y/c.toml", True)
    # empty values are ignored, as upstream's len(...) != 0 checks
    assert paths.resolve_config_path({"XDG_CONFIG_HOME": "", "NVIDIA_CTK_CONFIG_FILE_PATH": ""})[0] == paths.SYSTEM_PATH
    assert paths.config_file_path({"XDG_CONFIG_HOME": "/x"}) == "/x/nvidia-container-runtime/config.toml"


@pytest.fixture
def clean_env(monkeypatch):
    monkeypatch.delenv("NVIDIA_CTK_CONFIG_FILE_PATH", raising=False)
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    monkeypatch.setattr(load, "_ldconfig_real_exists", lambda: False)
    return monkeypatch


def _write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_env_file_wins_over_xdg(tmp_path, clean_env):
    a = _write(tmp_path / "a.toml", 'disable-require = true\n')
    _write(tmp_path / "xdg/nvidia-container-runtime/config.toml", 'swarm-resource = "X"\n')
    clean_env.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    clean_env.setenv("NVIDIA_CTK_CONFIG_FILE_PATH", str(a))
    cfg = load.load_config()
    assert cfg.disable_require is True and cfg.swarm_resource == ""
    assert cfg.source_path == str(a)


def test_xdg_file_is_read(tmp_path, clean_env):
    x = _write(tmp_path / "xdg/nvidia-container-runtime/config.toml", 'swarm-resource = "X"\n')
    clean_env.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    cfg = load.load_config()
    assert cfg.swarm_resource == "X" and cfg.source_path == str(x)


def test_missing_resolved_file_gives_defaults(tmp_path, clean_env):
    clean_env.setenv("XDG_CONFIG_HOME", str(tmp_path / "nothing"))
    cfg = load.load_config()
    assert cfg == model.Config() and cfg.source_path is None
    clean_env.setenv("NVIDIA_CTK_CONFIG_FILE_PATH", str(tmp_path / "missing.toml"))
    assert load.load_config() == model.Config()


def test_missing_file_required(tmp_path, clean_env):
    missing = str(tmp_path / "missing.toml")
    with pytest.raises(ConfigError, match=f"^{missing}: config file not found$"):
        load.load_config(missing)
    clean_env.setenv("NVIDIA_CTK_CONFIG_FILE_PATH", missing)
    with pytest.raises(ConfigError, match="config file not found"):
        load.load_config(required=True)
    # an explicit path may be declared optional
    assert load.load_config(missing, required=False) == model.Config()
