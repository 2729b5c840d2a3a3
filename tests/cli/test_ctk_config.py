"""`nvidia-ctk config` end to end, through the installed console script."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from nct.config import edit, load

REPO_DEFAULT = Path(__file__).resolve().parents[2] / "config" / "config.toml"
CTK = shutil.which("nvidia-ctk")
pytestmark = pytest.mark.skipif(CTK is None, reason="nvidia-ctk console script not installed")


def _expected_default() -> str:
    """The default for this host (ldconfig.real where it exists, as upstream)."""
    return edit.default_text()


def run(*args: str, env: dict | None = None, tmp: Path | None = None) -> subprocess.CompletedProcess:
    e = {k: v for k, v in os.environ.items() if k not in ("NVIDIA_CTK_CONFIG_FILE_PATH", "XDG_CONFIG_HOME")}
    if tmp is not None:  # never fall back to the real /etc file
        e["XDG_CONFIG_HOME"] = str(tmp / "xdg")
    e.update(env or {})
    return subprocess.run([CTK, *args], capture_output=True, text=True, env=e, timeout=60)


def assert_one_line_error(res: subprocess.CompletedProcess, *fragments: str) -> None:
    assert res.returncode != 0
    assert res.stdout == ""
    lines = res.stderr.splitlines()
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith("nvidia-ctk: ")
    assert "Traceback" not in res.stderr
    for f in fragments:
        assert f in lines[0]


def test_default_prints_the_default_file(tmp_path):
    res = run("config", "default", tmp=tmp_path)
    assert res.returncode == 0, res.stderr
    assert res.stdout == _expected_default()
    if not os.path.exists("/sbin/ldconfig.real"):
        assert res.stdout == REPO_DEFAULT.read_text()


@pytest.mark.parametrize("name", ["default", "create-default", "generate-default"])
def test_default_aliases_write_output(tmp_path, name):
    out = tmp_path / "new" / "dir" / "config.toml"
    res = run("config", name, "-o", str(out), tmp=tmp_path)
    assert res.returncode == 0, res.stderr
    assert res.stdout == ""
    assert out.read_text() == _expected_default()


def test_show_prints_file_byte_for_byte(tmp_path):
    cfg = tmp_path / "c.toml"
    text = "# mine\ndisable-require = true   # why\n\n[vendor-x]\nk = 'v'\n"
    cfg.write_text(text)
    for flag in ("-c", "--config", "--config-file"):
        res = run("config", flag, str(cfg), tmp=tmp_path)
        assert res.returncode == 0, res.stderr
        assert res.stdout == text


def test_set_in_place_keeps_comments(tmp_path):
    cfg = tmp_path / "config.toml"
    cfg.write_text(REPO_DEFAULT.read_text().replace("[nvidia-ctk]\n", "# local note\n[nvidia-ctk]\n"))
    res = run("config", "-c", str(cfg), "-i",
              "--set", "nvidia-container-cli.no-cgroups",
              "--set", "nvidia-container-runtime.runtimes=crun,runc",
              "--set", "features.disable-imex-channel-creation=true", tmp=tmp_path)
    assert res.returncode == 0, res.stderr
    assert res.stdout == ""
    text = cfg.read_text()
    assert "# local note\n[nvidia-ctk]\n" in text
    assert "\nno-cgroups = true\n" in text and "#no-cgroups" not in text
    assert '#root = "/run/nvidia/driver"\n' in text
    c = load.load_config(str(cfg))
    assert c.nvidia_container_cli.no_cgroups is True
    assert c.nvidia_container_runtime.runtimes == ("crun", "runc")
    assert c.features.disable_imex_channel_creation is True


def test_set_to_stdout_and_output_leave_original(tmp_path):
    cfg = tmp_path / "config.toml"
    cfg.write_text(REPO_DEFAULT.read_text())
    res = run("config", "-c", str(cfg), "--set", "nvidia-container-runtime.mode=cdi", tmp=tmp_path)
    assert res.returncode == 0, res.stderr
    assert '\nmode = "cdi"\n' in res.stdout
    out = tmp_path / "out.toml"
    res = run("config", "-c", str(cfg), "--set", "disable-require", "-o", str(out), tmp=tmp_path)
    assert res.returncode == 0 and res.stdout == ""
    assert load.load_config(str(out)).disable_require is True
    assert cfg.read_text() == REPO_DEFAULT.read_text()


def test_missing_file_in_place_creates_complete_file(tmp_path):
    cfg = tmp_path / "etc" / "nvidia-container-runtime" / "config.toml"
    res = run("--quiet", "config", f"--config-file={cfg}", "--in-place", tmp=tmp_path)  # the deb postinst call
    assert res.returncode == 0, res.stderr
    assert cfg.read_text() == _expected_default()
    res = run("config", "-c", str(cfg), "-i", "--set", "nvidia-container-cli.root=/run/nvidia/driver", tmp=tmp_path)
    assert res.returncode == 0
    assert load.load_config(str(cfg)).nvidia_container_cli.root == "/run/nvidia/driver"


def test_resolution_env_and_xdg(tmp_path):
    xdg_file = tmp_path / "xdg" / "nvidia-container-runtime" / "config.toml"
    xdg_file.parent.mkdir(parents=True)
    xdg_file.write_text('swarm-resource = "FROM_XDG"\n')
    res = run("config", tmp=tmp_path)
    assert res.stdout == 'swarm-resource = "FROM_XDG"\n'
    env_file = tmp_path / "env.toml"
    env_file.write_text('swarm-resource = "FROM_ENV"\n')
    res = run("config", "-i", "--set", "disable-require", env={"NVIDIA_CTK_CONFIG_FILE_PATH": str(env_file)}, tmp=tmp_path)
    assert res.returncode == 0, res.stderr
    assert env_file.read_text() == 'swarm-resource = "FROM_ENV"\ndisable-require = true\n'
    assert xdg_file.read_text() == 'swarm-resource = "FROM_XDG"\n'


@pytest.mark.parametrize(
    "args,fragments",
    [
        (["--set", "nvidia-container-cli.nope=1"], ["invalid config option nvidia-container-cli.nope: unknown key"]),
        (["--set", "disable-require=maybe"], ["disable-require=maybe", "expected a boolean"]),
        (["--set", "swarm-resource"], ["expected swarm-resource=VALUE"]),
        (["--set", "nvidia-container-runtime.mode=fast"], ["nvidia-container-runtime.mode", "unknown mode"]),
        (["--set", "nvidia-container-cli.ldconfig=/sbin/ldconfig"], ["nvidia-container-cli.ldconfig", "'@'"]),
        (["-i", "-o", "/tmp/x.toml"], ["cannot specify both --in-place and --output"]),
    ],
)
def test_errors_are_one_line_and_file_untouched(tmp_path, args, fragments):
    cfg = tmp_path / "config.toml"
    cfg.write_text(REPO_DEFAULT.read_text())
    res = run("config", "-c", str(cfg), "-i", *args, tmp=tmp_path) if "-i" not in args else \
        run("config", "-c", str(cfg), *args, tmp=tmp_path)
    assert_one_line_error(res, *fragments)
    assert cfg.read_text() == REPO_DEFAULT.read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.toml"]


def test_invalid_toml_is_reported_with_file_and_line(tmp_path):
    cfg = tmp_path / "config.toml"
    cfg.write_text("[nvidia-container-cli]\nroot = \n")
    res = run("config", "-c", str(cfg), "--set", "disable-require", tmp=tmp_path)
    assert_one_line_error(res, f"{cfg}: line 2", "invalid TOML")


def test_wrong_type_in_file_is_reported(tmp_path):
    cfg = tmp_path / "config.toml"
    cfg.write_text("\n[nvidia-container-cli]\nload-kmods = 'yes'\n")
    res = run("config", "-c", str(cfg), tmp=tmp_path)
    assert_one_line_error(res, f"{cfg}: line 3: nvidia-container-cli.load-kmods: expected a boolean")
    # fixing it with --set works
    res = run("config", "-c", str(cfg), "--set", "nvidia-container-cli.load-kmods=false", tmp=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "load-kmods = false" in res.stdout


def test_umbrella_command_reaches_config(tmp_path):
    nct = shutil.which("nct")
    if nct is None:
        pytest.skip("nct console script not installed")
    res = subprocess.run([nct, "ctk", "config", "default"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert res.stdout == _expected_default()
