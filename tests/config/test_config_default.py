"""The shipped default config.toml: identical copies, upstream layout, loads to the model defaults."""

from __future__ import annotations

import re
import tomllib
from importlib import resources
from pathlib import Path

import pytest
import tomlkit

from nct.config import edit, load, model, schema

REPO = Path(__file__).resolve().parents[2]
REPO_DEFAULT = REPO / "config" / "config.toml"
PKG_DEFAULT = REPO / "src" / "nct" / "config" / "default.toml"


@pytest.fixture
def no_ldconfig_real(monkeypatch):
    monkeypatch.setattr(load, "_ldconfig_real_exists", lambda: False)


def test_repo_and_package_copies_are_identical():
    assert REPO_DEFAULT.read_bytes() == PKG_DEFAULT.read_bytes()


def test_installed_package_data_is_the_same_file():
    text = resources.files("nct.config").joinpath("default.toml").read_text(encoding="utf-8")
    assert text == REPO_DEFAULT.read_text(encoding="utf-8")


def test_default_file_loads_to_model_defaults(no_ldconfig_real):
    cfg = load.load_config(str(REPO_DEFAULT))
    assert cfg == model.Config()
    assert cfg.source_path == str(REPO_DEFAULT)
    assert load.default_config() == model.Config()


def _commented_keys(text: str) -> set[str]:
    """Dotted keys that appear as '#key = value' suggestions, per table."""
    keys, table = set(), ""
    for line in text.splitlines():
        if line.startswith("["):
            table = line.strip("[]")
        m = re.match(r"#([a-z0-9-]+) = ", line)
        if m:
            keys.add(f"{table}.{m.group(1)}" if table else m.group(1))
    return keys


def _active_keys(data: dict, prefix: str = "") -> set[str]:
    out = set()
    for k, v in data.items():
        path = f"{prefix}.{k}" if prefix else k
        if isinstance(v, dict):
            out |= _active_keys(v, path)
        else:
            out.add(path)
    return out


def test_every_key_is_active_or_a_commented_suggestion():
    text = REPO_DEFAULT.read_text()
    active = _active_keys(tomllib.loads(text))
    commented = _commented_keys(text)
    assert active.isdisjoint(commented)
    assert active <= set(schema.KEYS)
    assert commented == set(schema.COMMENTED_SUGGESTIONS)
    # everything else is upstream's "unset, omitted from the file"
    omitted = set(schema.KEYS) - active - commented
    assert omitted == set(schema.OPTIONAL_KEYS)


def test_commented_suggestions_match_upstream_values():
    text = REPO_DEFAULT.read_text()
    for key, value in schema.COMMENTED_SUGGESTIONS.items():
        name = key.rsplit(".", 1)[-1]
        rendered = tomlkit.item(value).as_string()
        assert f"#{name} = {rendered}\n" in text, key


def test_upstream_layout_order_and_sections():
    text = REPO_DEFAULT.read_text()
    headers = [line for line in text.splitlines() if line.startswith("[")]
    assert headers == [
        "[nvidia-container-cli]",
        "[nvidia-container-runtime]",
        "[nvidia-container-runtime.modes]",
        "[nvidia-container-runtime.modes.cdi]",
        "[nvidia-container-runtime.modes.csv]",
        "[nvidia-container-runtime.modes.legacy]",
        "[nvidia-container-runtime-hook]",
        "[nvidia-ctk]",
    ]
    assert text.startswith("#accept-nvidia-visible-devices-as-volume-mounts = false\n")
    assert 'runtimes = ["runc", "crun"]\n' in text
    assert 'spec-dirs = ["/etc/cdi", "/var/run/cdi"]\n' in text
    assert text.endswith('[nvidia-ctk]\npath = "nvidia-ctk"\n')
    # keys inside each table are sorted, as go-toml writes them (comments included)
    table_lines: list[list[str]] = [[]]
    for line in text.splitlines():
        if line.startswith("["):
            table_lines.append([])
        elif line:
            table_lines[-1].append(line.lstrip("#").split(" = ")[0])
    for names in table_lines:
        assert names == sorted(names)


def test_ldconfig_real_is_used_where_it_exists(monkeypatch):
    monkeypatch.setattr(load, "_ldconfig_real_exists", lambda: True)
    cfg = load.load_config(str(REPO_DEFAULT))
    assert cfg.nvidia_container_cli.ldconfig == "@/sbin/ldconfig.real"
    assert load.default_config().nvidia_container_cli.ldconfig == "@/sbin/ldconfig.real"
    text = edit.default_text()
    assert 'ldconfig = "@/sbin/ldconfig.real"\n' in text
    assert text.replace("@/sbin/ldconfig.real", "@/sbin/ldconfig") == REPO_DEFAULT.read_text()
    # an explicit non-default path is never rewritten
    cfg = load.parse_config('[nvidia-container-cli]\nldconfig = "@/usr/sbin/ldconfig"\n')
    assert cfg.nvidia_container_cli.ldconfig == "@/usr/sbin/ldconfig"


def test_default_text_without_ldconfig_real(no_ldconfig_real):
    assert edit.default_text() == REPO_DEFAULT.read_text()
