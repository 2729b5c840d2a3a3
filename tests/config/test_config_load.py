"""load_config / parse_config: typing, validation, one-line errors with file + line + key."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from nct.config import load, model, schema
from nct.errors import ConfigError


@pytest.fixture(autouse=True)
def no_ldconfig_real(monkeypatch):
    monkeypatch.setattr(load, "_ldconfig_real_exists", lambda: False)


def _doc_for(key: str, rendered_value: str) -> tuple[str, int]:
    """A config with a few lines of padding and `key` (in its table) set to the value.
    Returns (text, line of the key)."""
    section, _, name = key.rpartition(".")
    lines = ["# padding", 'padding = false', ""]
    if section:
        lines += ["[other]", "x = 1", "", f"[{section}]", "# a comment"]
    lines.append(f"{name} = {rendered_value}")
    lines += ["", "[tail]", "y = 2"]
    return "\n".join(lines) + "\n", len(lines) - 3


WRONG = {"bool": '"yes"', "str": "5", "optstr": "true", "list": "7"}


@pytest.mark.parametrize("key", sorted(schema.KEYS))
def test_every_key_wrong_type_names_file_line_and_key(tmp_path, key):
    kind = schema.KEYS[key].kind
    text, line = _doc_for(key, WRONG[kind])
    path = tmp_path / "config.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as ei:
        load.load_config(str(path))
    msg = str(ei.value)
    assert msg.startswith(f"{path}: line {line}: {key}: expected ")
    assert "\n" not in msg


@pytest.mark.parametrize(
    "text,message",
    [
        ('[nvidia-container-runtime]\nruntimes = ["runc", 3]\n',
         "<config>: line 2: nvidia-container-runtime.runtimes: expected an array of strings, item 1 is integer 3"),
        ('nvidia-container-cli = "x"\n', '<config>: line 1: nvidia-container-cli: expected a table, got string "x"'),
        ('[nvidia-container-runtime]\nmodes = 3\n',
         "<config>: line 2: nvidia-container-runtime.modes: expected a table, got integer 3"),
        # inline tables and dotted keys: the line of the key that holds the value
        ('[nvidia-container-runtime]\n\nmodes = { cdi = { default-kind = 1 } }\n',
         "<config>: line 3: nvidia-container-runtime.modes.cdi.default-kind: expected a string, got integer 1"),
        ('[nvidia-container-runtime]\nmodes.csv.mount-spec-path = false\n',
         "<config>: line 2: nvidia-container-runtime.modes.csv.mount-spec-path: expected a string, got boolean False"),
        ('"features".allow-ldconfig-from-container = "on"\n',
         '<config>: line 1: features.allow-ldconfig-from-container: expected a boolean, got string "on"'),
        ('[features]\nno-additional-gids-for-device-nodes = 1\n',
         "<config>: line 2: features.no-additional-gids-for-device-nodes: expected a boolean, got integer 1"),
    ],
)
def test_type_error_messages(text, message):
    with pytest.raises(ConfigError) as ei:
        load.parse_config(text)
    assert str(ei.value) == message


def test_multiline_strings_do_not_confuse_line_lookup():
    text = 'swarm-resource = """\nload-kmods = 1\n"""\n[nvidia-container-cli]\nload-kmods = "no"\n'
    with pytest.raises(ConfigError, match=r"^f: line 5: nvidia-container-cli.load-kmods: "):
        load.parse_config(text, "f")


@pytest.mark.parametrize(
    "text,where",
    [
        ("disable-require = \n", "line 1, column 19"),
        ("[nvidia-container-cli]\nroot = '/x\n", "line 2"),  # tomllib: "at end of document"
        ("a = 1\na = 2\n", "line 2, column 6"),
        ("[t]\n[t]\n", "line 2, column 3"),
    ],
)
def test_invalid_toml_names_file_and_line(tmp_path, text, where):
    path = tmp_path / "c.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as ei:
        load.load_config(str(path))
    msg = str(ei.value)
    assert msg.startswith(f"{path}: {where}: invalid TOML: ")
    assert "\n" not in msg and "(at line" not in msg


def test_not_utf8_and_unreadable(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_bytes(b"a = 1\nb = '\xff'\n")
    with pytest.raises(ConfigError, match=r"bad.toml: line 2: invalid TOML: not valid UTF-8"):
        load.load_config(str(bad))
    with pytest.raises(ConfigError, match=r"cannot read config file"):
        load.load_config(str(tmp_path))  # a directory


def test_unknown_keys_are_kept():
    text = (
        'future-top = "a"\n[nvidia-container-cli]\nroot = "/r"\nfuture-cli = [1, 2]\n'
        '[nvidia-container-runtime.modes.future]\nk = true\n[brand-new]\nx = 1\n'
    )
    cfg = load.parse_config(text, "f")
    assert cfg.nvidia_container_cli.root == "/r"
    assert cfg.raw["future-top"] == "a"
    assert cfg.raw["nvidia-container-cli"]["future-cli"] == [1, 2]
    assert cfg.raw["nvidia-container-runtime"]["modes"]["future"] == {"k": True}
    assert cfg.raw["brand-new"] == {"x": 1}


def test_round_trip_of_every_section():
    text = """
accept-nvidia-visible-devices-as-volume-mounts = true
accept-nvidia-visible-devices-envvar-when-unprivileged = false
disable-require = true
supported-driver-capabilities = "compute,utility"
swarm-resource = "DOCKER_RESOURCE_GPU"

[nvidia-container-cli]
root = "/run/nvidia/driver"
path = "/usr/bin/nvidia-container-cli"
environment = ["A=1", "B=2"]
debug = "/var/log/x.log"
ldcache = "/etc/ld.so.cache"
load-kmods = false
no-cgroups = true
no-pivot = true
user = "root:video"
ldconfig = "@/usr/sbin/ldconfig"

[nvidia-container-runtime]
debug = "/var/log/r.log"
log-level = "DEBUG"
mode = "jit-cdi"
runtimes = ["crun"]

[nvidia-container-runtime.modes.cdi]
annotation-prefixes = ["a/", "b/"]
default-kind = "example.com/gpu"
spec-dirs = ["/cdi"]

[nvidia-container-runtime.modes.csv]
mount-spec-path = "/csv"
compat-container-root = "/usr/local/cuda/compat_orin"

[nvidia-container-runtime.modes.jit-cdi]
nvcdi-feature-flags = ["disable-multiple-csv-devices"]
nvcdi-disable-hooks = ["all"]

[nvidia-container-runtime.modes.legacy]
cuda-compat-mode = "hook"

[nvidia-container-runtime-hook]
path = "/usr/bin/nvidia-container-runtime-hook"
skip-mode-detection = true

[nvidia-ctk]
path = "/usr/bin/nvidia-ctk"

[features]
allow-cuda-compat-libs-from-container = true
allow-ldconfig-from-container = true
allow-unknown-oci-spec-fields = true
disable-cuda-compat-lib-hook = true
disable-imex-channel-creation = true
ignore-imex-channel-requests = true
no-additional-gids-for-device-nodes = true
"""
    cfg = load.parse_config(text)
    expected = model.Config(
        accept_nvidia_visible_devices_as_volume_mounts=True,
        accept_nvidia_visible_devices_envvar_when_unprivileged=False,
        disable_require=True,
        supported_driver_capabilities="compute,utility",
        swarm_resource="DOCKER_RESOURCE_GPU",
        nvidia_container_cli=model.CliConfig(
            root="/run/nvidia/driver", path="/usr/bin/nvidia-container-cli", environment=("A=1", "B=2"),
            debug="/var/log/x.log", ldcache="/etc/ld.so.cache", load_kmods=False, no_cgroups=True,
            no_pivot=True, user="root:video", ldconfig="@/usr/sbin/ldconfig",
        ),
        nvidia_container_runtime=model.RuntimeConfig(
            debug="/var/log/r.log", log_level="DEBUG", mode="jit-cdi", runtimes=("crun",),
            modes=model.ModesConfig(
                cdi=model.CdiModeConfig(("a/", "b/"), "example.com/gpu", ("/cdi",)),
                csv=model.CsvModeConfig("/csv", "/usr/local/cuda/compat_orin"),
                jit_cdi=model.JitCdiModeConfig(("disable-multiple-csv-devices",), ("all",)),
                legacy=model.LegacyModeConfig("hook"),
            ),
        ),
        nvidia_container_runtime_hook=model.HookConfig("/usr/bin/nvidia-container-runtime-hook", True),
        nvidia_ctk=model.CtkConfig("/usr/bin/nvidia-ctk"),
        features=model.FeaturesConfig(*([True] * 7)),
    )
    assert cfg == expected


def test_list_as_comma_separated_string():
    cfg = load.parse_config('[nvidia-container-runtime]\nruntimes = "runc, crun"\n')
    assert cfg.nvidia_container_runtime.runtimes == ("runc", "crun")
    cfg = load.parse_config("[nvidia-container-cli]\nenvironment = []\n")
    assert cfg.nvidia_container_cli.environment == ()


def test_ldconfig_must_be_a_host_path():
    text = '\n[nvidia-container-cli]\nldconfig = "/sbin/ldconfig"\n'
    with pytest.raises(ConfigError) as ei:
        load.parse_config(text, "/etc/x.toml")
    assert str(ei.value).startswith('/etc/x.toml: line 3: nvidia-container-cli.ldconfig: "/sbin/ldconfig" must be')
    cfg = load.parse_config(text + "[features]\nallow-ldconfig-from-container = true\n")
    assert cfg.nvidia_container_cli.ldconfig == "/sbin/ldconfig"


@pytest.mark.parametrize(
    "text,key",
    [
        ('[nvidia-container-runtime]\nmode = "magic"\n', "nvidia-container-runtime.mode"),
        ('[nvidia-container-runtime]\nlog-level = "loud"\n', "nvidia-container-runtime.log-level"),
        ('[nvidia-container-runtime.modes.legacy]\ncuda-compat-mode = "on"\n',
         "nvidia-container-runtime.modes.legacy.cuda-compat-mode"),
    ],
)
def test_enumerated_values_are_checked(text, key):
    with pytest.raises(ConfigError) as ei:
        load.parse_config(text, "c.toml")
    assert str(ei.value).startswith(f"c.toml: line 2: {key}: unknown ")


@pytest.mark.parametrize("mode", schema.RUNTIME_MODES)
def test_every_mode_accepted(mode):
    assert load.parse_config(f'[nvidia-container-runtime]\nmode = "{mode}"\n').nvidia_container_runtime.mode == mode


@pytest.mark.parametrize("level", ["trace", "debug", "info", "warning", "WARN", "Error", "fatal", "panic"])
def test_log_levels_are_logrus_names(level):
    assert load.parse_config(f'[nvidia-container-runtime]\nlog-level = "{level}"\n')


def test_loader_stays_light():
    """The hook and runtime load config on every container start: no tomlkit, no click."""
    code = "import sys, nct.config.load as l; l.load_config('/nonexistent', required=False); " \
           "print(sorted(m for m in ('tomlkit', 'click', 'nct.config.edit') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    assert out.stdout.strip() == "[]"
