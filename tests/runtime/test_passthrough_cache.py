"""nct.runtime.passthrough.remember: which pass-throughs may leave a cache for the launcher.
Real files: a stand-in toolkit prefix (python/ with its NCT-TOOLKIT marker)."""

from __future__ import annotations

import os
import sys

from nct.runtime import passthrough
from nct.runtime.argv import LogArgs
from nct.runtime.log import Logger
from nct.runtime.settings import read_settings


def _prefix(tmp_path, monkeypatch):
    prefix = tmp_path / "python"
    prefix.mkdir()
    (prefix / passthrough.MARKER).write_text("nct\n")
    monkeypatch.setattr(sys, "prefix", str(prefix))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("NVIDIA_CTK_CONFIG_FILE_PATH", raising=False)
    return prefix / passthrough.NAME


def test_quiet_call_leaves_a_cache(tmp_path, monkeypatch):
    cache = _prefix(tmp_path, monkeypatch)
    log_file = tmp_path / "engine.log"
    log = Logger.setup("/dev/null", "info", LogArgs(file=str(log_file)))
    passthrough.remember(read_settings(), log, LogArgs(file=str(log_file)))
    assert cache.read_bytes().startswith(b"nct-passthrough 2\0") and oct(cache.stat().st_mode & 0o777) == "0o644"


def test_no_cache_after_a_call_that_wrote_a_record(tmp_path, monkeypatch):
    """A record at info (or any level the logger let through) is one the launcher would not
    write: such a call never leaves a cache, whatever its level."""
    cache = _prefix(tmp_path, monkeypatch)
    log_file = tmp_path / "engine.log"
    log = Logger.setup("/dev/null", "info", LogArgs(file=str(log_file)))
    log.info("Running with config")
    assert log_file.read_text()
    passthrough.remember(read_settings(), log, LogArgs(file=str(log_file)))
    assert not cache.exists()
    log.close()
    assert os.listdir(cache.parent) == [passthrough.MARKER]
