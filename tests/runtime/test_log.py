"""The shim's log files: config debug file + engine --log, text or JSON, levels."""

import json
import os
import stat

from nct.runtime.argv import log_args
from nct.runtime.log import Logger, parse_level


def _lines(p):
    return p.read_text().splitlines()


def test_both_files_written_in_json(tmp_path):
    debug, engine = tmp_path / "deep" / "dir" / "debug.log", tmp_path / "runc.json"
    log = Logger.setup(str(debug), "info", log_args(["--log", str(engine), "--log-format", "json", "create"]))
    log.info('hello "world"\n2')
    log.debug("hidden")
    log.close()
    for p in (debug, engine):
        (line,) = _lines(p)
        rec = json.loads(line)
        assert list(rec) == ["level", "msg", "time"]
        assert rec["level"] == "info" and rec["msg"] == 'hello "world"\n2'
        assert stat.S_IMODE(os.stat(p).st_mode) == 0o644
    assert stat.S_IMODE(os.stat(debug.parent).st_mode) == 0o755


def test_text_format_and_append(tmp_path):
    f = tmp_path / "x.log"
    f.write_text("old\n")
    log = Logger.setup(str(f), "debug", log_args(["state"]))
    log.debug("a b")
    log.close()
    old, line = _lines(f)
    assert old == "old"
    assert line.startswith('time="') and line.endswith(' level=debug msg="a b"')


def test_debug_flag_raises_level_and_trace_stays_hidden(tmp_path):
    f = tmp_path / "x.log"
    log = Logger.setup("/dev/null", "error", log_args(["--debug", "--log", str(f), "state"]))
    log.debug("shown")
    log.trace("hidden")
    log.close()
    assert _lines(f)[0].endswith('msg="shown"')
    assert len(_lines(f)) == 1


def test_invalid_level_falls_back_to_info_with_warning(tmp_path):
    f = tmp_path / "x.log"
    log = Logger.setup(str(f), "loud", log_args([]))
    log.info("i")
    log.close()
    lines = _lines(f)
    assert "level=warning" in lines[0] and "invalid log-level" in lines[0]
    assert "level=info" in lines[1]
    assert parse_level("WARN") == "warning" and parse_level("Trace") == "trace" and parse_level("x") is None


def test_version_opens_no_files(tmp_path):
    f, g = tmp_path / "a.log", tmp_path / "b.log"
    log = Logger.setup(str(f), "info", log_args(["--version", "--log", str(g)]))
    log.error("x")
    log.close()
    assert not f.exists() and not g.exists()


def test_dev_null_and_empty_open_nothing():
    log = Logger.setup("/dev/null", "info", log_args(["state"]))
    assert log.fds == []
    log.error("discarded")


def test_unwritable_log_is_a_warning_not_an_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    good = tmp_path / "good.log"
    log = Logger.setup(str(blocker / "sub" / "x.log"), "info", log_args(["--log", str(good)]))
    log.close()
    assert "failed to open log file" in good.read_text()
