"""The pass-through config read: same answers as a real TOML parser, or defer to it."""

import tomllib

import pytest

from nct.errors import ConfigError
from nct.runtime.settings import read_settings, scan_runtime_section

DEFAULT_FILE = """
#accept-nvidia-visible-devices-as-volume-mounts = false
disable-require = false
supported-driver-capabilities = "compat32,compute,display,graphics,ngx,utility,video"

[nvidia-container-cli]
environment = []
ldconfig = "@/sbin/ldconfig"
load-kmods = true

[nvidia-container-runtime]
#debug = "/var/log/nvidia-container-runtime.log"
log-level = "info"
mode = "auto"
runtimes = ["runc", "crun"]

[nvidia-container-runtime.modes]

[nvidia-container-runtime.modes.cdi]
annotation-prefixes = ["cdi.k8s.io/"]
default-kind = "nvidia.com/gpu"
spec-dirs = ["/etc/cdi", "/var/run/cdi"]

[nvidia-container-runtime-hook]
path = "nvidia-container-runtime-hook"
"""

SIMPLE = [
    DEFAULT_FILE,
    "",
    "[nvidia-container-runtime]\n",
    "[nvidia-container-runtime]\ndebug = '/var/log/x.log'  # comment\nruntimes = [ 'crun' , \"runc\", ]\n",
    "[ nvidia-container-runtime ]  # hdr comment\nlog-level = \"debug\"\nruntimes = []\n",
    "[nvidia-container-runtime]\nruntimes = [\"/opt/my#runc\"] # x\n",
    "[nvidia-container-runtime]\nmodes.cdi.default-kind = \"a/b\"\nmode = \"cdi\"\n",
    "[other]\nruntimes = [\"nope\"]\n[nvidia-container-runtime]\nmode = \"legacy\"\n[x.y]\ndebug = \"no\"\n",
    "[[arr]]\nx = 1\n[nvidia-container-runtime]\ndebug = \"/d\"\n",
]

COMPLEX = [
    "[nvidia-container-runtime]\nruntimes = [\n  \"runc\",\n]\n",
    "[nvidia-container-runtime]\ndebug = \"/a\\\\b\"\n",
    "nvidia-container-runtime.runtimes = [\"crun\"]\n",
    "nvidia-container-runtime = { runtimes = [\"crun\"] }\n",
    "[\"nvidia-container-runtime\"]\nruntimes = [\"crun\"]\n",
    "[nvidia-container-runtime]\n\"runtimes\" = [\"crun\"]\n",
    "[nvidia-container-runtime]\nruntimes.x = 1\n",
    "x = \"\"\"\n[nvidia-container-runtime]\nruntimes = [\"fake\"]\n\"\"\"\n",
    "[nvidia-container-runtime]\nmode = \"a\" \"b\"\n",
    # another key's value over several lines: a line of it looks like a [table] header
    "[nvidia-container-runtime]\nother = [\n  [1, 2],\n]\ndebug = \"/d\"\n",
]


@pytest.mark.parametrize("text", SIMPLE)
def test_scanner_agrees_with_tomllib(text):
    got = scan_runtime_section(text)
    assert got is not None
    want = tomllib.loads(text).get("nvidia-container-runtime", {})
    for key in ("runtimes", "debug", "log-level", "mode"):
        assert got.get(key) == want.get(key), key


@pytest.mark.parametrize("text", COMPLEX)
def test_scanner_defers_anything_unusual(text):
    assert scan_runtime_section(text) is None


def _settings(tmp_path, text, monkeypatch):
    p = tmp_path / "config.toml"
    p.write_text(text)
    return read_settings({"NVIDIA_CTK_CONFIG_FILE_PATH": str(p)})


def test_read_settings_via_tomllib_fallback(tmp_path, monkeypatch):
    s = _settings(tmp_path, "[nvidia-container-runtime]\nruntimes = [\n \"crun\",\n]\nlog-level = 'debug'\n", monkeypatch)
    assert s.runtimes == ("crun",) and s.log_level == "debug" and s.exists


def test_read_settings_defaults_when_no_file(tmp_path):
    s = read_settings({"XDG_CONFIG_HOME": str(tmp_path)})
    assert s.path == str(tmp_path / "nvidia-container-runtime/config.toml")
    assert (s.runtimes, s.debug, s.log_level, s.exists) == (("runc", "crun"), "/dev/null", "info", False)


def test_explicit_missing_file_is_an_error(tmp_path):
    with pytest.raises(ConfigError, match="nope.toml: config file not found"):
        read_settings({"NVIDIA_CTK_CONFIG_FILE_PATH": str(tmp_path / "nope.toml")})


@pytest.mark.parametrize("text, match", [
    ("[nvidia-container-runtime\n", "invalid TOML"),
    ("[nvidia-container-runtime]\nruntimes = 3\n", "runtimes: expected an array of strings"),
    ("[nvidia-container-runtime]\ndebug = 3\n", "debug: expected a string"),
])
def test_bad_values_are_one_line_errors(tmp_path, monkeypatch, text, match):
    with pytest.raises(ConfigError, match=match) as e:
        _settings(tmp_path, text, monkeypatch)
    assert "\n" not in str(e.value)


def test_comma_string_runtimes(tmp_path, monkeypatch):
    assert _settings(tmp_path, "[nvidia-container-runtime]\nruntimes = \"crun, runc\"\n", monkeypatch).runtimes == ("crun", "runc")
