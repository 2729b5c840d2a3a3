"""Upstream's config.toml expectations (its config tables), restated as our own tables: the
same settings written as dotted keys at the top level or inside sections read the same."""

from __future__ import annotations

import pytest

from nct.config.load import parse_config

INLINE = """
accept-nvidia-visible-devices-envvar-when-unprivileged = false
nvidia-container-cli.root = "/srv/driver"
nvidia-container-cli.load-kmods = false
nvidia-container-cli.ldconfig = "@/srv/ldconfig"
nvidia-container-runtime.debug = "/var/log/nct.log"
nvidia-container-runtime.discover-mode = "not-legacy"
nvidia-container-runtime.log-level = "debug"
nvidia-container-runtime.runtimes = ["/some/runtime",]
nvidia-container-runtime.mode = "cdi"
nvidia-container-runtime.modes.cdi.default-kind = "example.vendor.com/device"
nvidia-container-runtime.modes.cdi.annotation-prefixes = ["cdi.k8s.io/", "example.vendor.com/",]
nvidia-container-runtime.modes.csv.mount-spec-path = "/not/etc/host-files-for-container.d"
nvidia-container-runtime-hook.path = "/opt/nct/nvidia-container-runtime-hook"
nvidia-ctk.path = "/opt/nct/nvidia-ctk"
"""

SECTIONS = """
accept-nvidia-visible-devices-envvar-when-unprivileged = false
[nvidia-container-cli]
root = "/srv/driver"
load-kmods = false
ldconfig = "@/srv/ldconfig"
[nvidia-container-runtime]
debug = "/var/log/nct.log"
discover-mode = "not-legacy"
log-level = "debug"
runtimes = ["/some/runtime",]
mode = "cdi"
[nvidia-container-runtime.modes.cdi]
default-kind = "example.vendor.com/device"
annotation-prefixes = ["cdi.k8s.io/", "example.vendor.com/",]
[nvidia-container-runtime.modes.csv]
mount-spec-path = "/not/etc/host-files-for-container.d"
[nvidia-container-runtime-hook]
path = "/opt/nct/nvidia-container-runtime-hook"
[nvidia-ctk]
path = "/opt/nct/nvidia-ctk"
"""


@pytest.mark.parametrize("text", [INLINE, SECTIONS], ids=["dotted", "sections"])
def test_settings_read_the_same_inline_or_in_sections(text):
    cfg = parse_config(text)
    rt = cfg.nvidia_container_runtime
    assert cfg.accept_nvidia_visible_devices_envvar_when_unprivileged is False
    assert (cfg.nvidia_container_cli.root, cfg.nvidia_container_cli.load_kmods,
            cfg.nvidia_container_cli.ldconfig) == ("/srv/driver", False, "@/srv/ldconfig")
    assert (rt.debug, rt.log_level, rt.runtimes, rt.mode) == ("/var/log/nct.log", "debug", ("/some/runtime",), "cdi")
    assert rt.modes.cdi.default_kind == "example.vendor.com/device"
    assert rt.modes.cdi.annotation_prefixes == ("cdi.k8s.io/", "example.vendor.com/")
    assert rt.modes.csv.mount_spec_path == "/not/etc/host-files-for-container.d"
    assert cfg.nvidia_container_runtime_hook.path == "/opt/nct/nvidia-container-runtime-hook"
    assert cfg.nvidia_ctk.path == "/opt/nct/nvidia-ctk"


def test_empty_config_is_the_default():
    cfg = parse_config("")
    rt = cfg.nvidia_container_runtime
    assert cfg.accept_nvidia_visible_devices_envvar_when_unprivileged is True
    assert cfg.accept_nvidia_visible_devices_as_volume_mounts is False
    assert (cfg.nvidia_container_cli.root, cfg.nvidia_container_cli.load_kmods) == ("", True)
    assert cfg.nvidia_container_cli.ldconfig in ("@/sbin/ldconfig", "@/sbin/ldconfig.real")
    assert (rt.debug, rt.log_level, rt.mode) == ("/dev/null", "info", "auto")
    assert rt.runtimes == ("runc", "crun")  # upstream's current default list
    assert rt.modes.cdi.default_kind == "nvidia.com/gpu"
    assert rt.modes.cdi.annotation_prefixes == ("cdi.k8s.io/",)
    assert rt.modes.csv.mount_spec_path == "/etc/nvidia-container-runtime/host-files-for-container.d"
    assert cfg.nvidia_container_runtime_hook.path == "nvidia-container-runtime-hook"
    assert cfg.nvidia_ctk.path == "nvidia-ctk"


@pytest.mark.parametrize("text", [INLINE, SECTIONS], ids=["dotted", "sections"])
def test_shim_fast_settings_read_dotted_keys_too(tmp_path, text):
    """The runtime shim's pass-through reads its few keys without the full loader."""
    from nct.runtime.settings import read_settings

    path = tmp_path / "config.toml"
    path.write_text(text)
    s = read_settings({"NVIDIA_CTK_CONFIG_FILE_PATH": str(path)})
    assert (s.runtimes, s.debug, s.log_level) == (("/some/runtime",), "/var/log/nct.log", "debug")
