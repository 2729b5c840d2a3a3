"""config.toml -> hook Settings for load-kmods, and core.init_driver's gate."""

from __future__ import annotations

from nct.config.load import parse_config
from nct.hook import core
from nct.hook.prestart import settings_from_config


def test_defaults_load_kmods_and_create_imex():
    s = settings_from_config(parse_config("", "config.toml"))
    assert s.load_kmods is True and s.no_create_imex_channels is False
    assert core.Settings().load_kmods is False  # the record's own default


def test_config_keys():
    s = settings_from_config(parse_config(
        "[nvidia-container-cli]\nload-kmods = false\n[features]\ndisable-imex-channel-creation = true\n",
        "config.toml"))
    assert s.load_kmods is False and s.no_create_imex_channels is True


def test_init_driver_off_does_nothing(tmp_path):
    """load_kmods off: no procfs read, no node made, even with a tree that lacks them."""
    from nct.driver.model import Roots

    (tmp_path / "proc").mkdir()
    (tmp_path / "proc/devices").write_text("Character devices:\n195 nvidia\n")
    settings = core.Settings(roots=Roots(driver=str(tmp_path), dev=str(tmp_path), proc=str(tmp_path / "proc")))
    assert core.init_driver(settings) is None
    assert not (tmp_path / "dev").exists()
