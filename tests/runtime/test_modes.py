"""Mode resolution, CDI name qualification and the hook modifiers."""

import pytest

from nct.errors import ConfigError, RequestError
from nct.runtime import modes


@pytest.mark.parametrize("mode, devices, tegra, expected", [
    ("auto", ("nvidia.com/gpu=0",), False, "cdi"),
    ("auto", ("nvidia.com/gpu=0", "example.com/x=y"), False, "cdi"),
    ("auto", ("nvidia.com/gpu=0", "1"), False, "jit-cdi"),
    ("auto", ("0",), False, "jit-cdi"),
    ("auto", (), False, "jit-cdi"),  # none: no CDI device at all
    ("auto", None, False, "jit-cdi"),
    ("auto", ("0",), True, "csv"),
    ("auto", ("nvidia.com/gpu=0",), True, "cdi"),
    ("legacy", ("nvidia.com/gpu=0",), False, "legacy"),
    ("cdi", ("0",), False, "cdi"),
    ("jit-cdi", ("nvidia.com/gpu=0",), False, "jit-cdi"),
    ("csv", ("0",), False, "csv"),
])
def test_resolve_mode(mode, devices, tegra, expected):
    assert modes.resolve_mode(mode, devices, tegra=tegra) == expected


@pytest.mark.parametrize("mode", ["Auto", "nvml", "", "cdi "])
def test_invalid_mode(mode):
    with pytest.raises(ConfigError, match="invalid mode"):
        modes.resolve_mode(mode, ("0",))


def test_qualify():
    assert modes.qualify(("0", "GPU-abc", "nvidia.com/gpu=0", "0"), "nvidia.com/gpu") == [
        "nvidia.com/gpu=0", "nvidia.com/gpu=GPU-abc"]
    assert modes.qualify((), "nvidia.com/gpu") == ["nvidia.com/gpu=none"]
    assert modes.qualify(("all",), modes.JIT_KIND) == ["runtime.nvidia.com/gpu=all"]
    assert modes.qualify(("a/b=",), "k/c") == ["k/c=a/b="]  # not fully qualified


def test_split_jit():
    assert modes.split_jit(["nvidia.com/gpu=0"]) is None
    assert modes.split_jit(["runtime.nvidia.com/gpu=0", "runtime.nvidia.com/gpu=all"]) == ["0", "all"]
    with pytest.raises(RequestError, match="runtime.nvidia.com.*nvidia.com/gpu=1"):
        modes.split_jit(["runtime.nvidia.com/gpu=0", "nvidia.com/gpu=1"])


def test_hook_remover():
    spec = {"hooks": {"prestart": [
        {"path": "/usr/bin/nvidia-container-runtime-hook", "args": ["x", "prestart"]},
        {"path": "/opt/other-hook"},
        {"path": "/usr/local/bin/nvidia-container-toolkit"},
    ], "poststop": [{"path": "/usr/bin/nvidia-container-runtime-hook"}]}}
    assert modes.remove_nvidia_hooks(spec) == 2
    assert spec["hooks"]["prestart"] == [{"path": "/opt/other-hook"}]
    assert spec["hooks"]["poststop"] == [{"path": "/usr/bin/nvidia-container-runtime-hook"}]
    only = {"hooks": {"prestart": [{"path": "nvidia-container-toolkit"}]}}
    assert modes.remove_nvidia_hooks(only) == 1 and only == {"hooks": {}}
    assert modes.remove_nvidia_hooks({}) == 0


def test_legacy_hook_added_once():
    spec = {"ociVersion": "1.0.2"}
    assert modes.add_legacy_hook(spec, "/usr/bin/nvidia-container-runtime-hook")
    assert spec["hooks"]["prestart"] == [
        {"path": "/usr/bin/nvidia-container-runtime-hook", "args": ["nvidia-container-runtime-hook", "prestart"]}]
    assert not modes.add_legacy_hook(spec, "/other/nvidia-container-runtime-hook")
    existing = {"hooks": {"prestart": [{"path": "/x/nvidia-container-toolkit", "args": ["a"]}]}}
    assert not modes.add_legacy_hook(existing, "/usr/bin/nvidia-container-runtime-hook")
    assert len(existing["hooks"]["prestart"]) == 1


def test_tegra_detection(tmp_path):
    assert not modes.is_tegra(str(tmp_path))
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/nv_tegra_release").write_text("R35\n")
    assert modes.is_tegra(str(tmp_path))
