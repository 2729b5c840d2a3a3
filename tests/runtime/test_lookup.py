"""Finding the low-level runtime and the tools written into specs."""

import os

import pytest

from nct.runtime import lookup
from nct.runtime.lookup import RuntimeNotFound, find_runtime, resolve_tool


def _exe(path, mode=0o755):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(mode)
    return str(path)


@pytest.fixture
def no_fallback(monkeypatch, tmp_path):
    fb = tmp_path / "fallback"
    fb.mkdir()
    monkeypatch.setattr(lookup, "FALLBACK_DIRS", (str(fb),))
    return fb


def test_first_candidate_that_exists_wins(tmp_path, no_fallback):
    a, b = tmp_path / "a", tmp_path / "b"
    _exe(b / "crun")
    _exe(a / "crun")
    assert find_runtime(["runc", "crun"], f"{a}:{b}") == str(a / "crun")
    _exe(b / "runc")
    assert find_runtime(["runc", "crun"], f"{a}:{b}") == str(b / "runc")


def test_absolute_candidate_checked_directly(tmp_path, no_fallback):
    rt = _exe(tmp_path / "x" / "my-runc")
    assert find_runtime(["/nonexistent/runc", rt], "") == rt


def test_fallback_dirs_after_path(tmp_path, no_fallback):
    rt = _exe(no_fallback / "runc")
    assert find_runtime(["runc"], str(tmp_path / "empty")) == rt
    assert find_runtime(["runc"], None) == rt


def test_not_executable_or_not_regular_is_skipped(tmp_path, no_fallback):
    d = tmp_path / "bin"
    _exe(d / "runc", mode=0o644)
    (d / "crun").mkdir()
    with pytest.raises(RuntimeNotFound, match=r"no low-level runtime found .*\['runc', 'crun'\]"):
        find_runtime(["runc", "crun"], str(d))


def test_symlink_to_executable_is_accepted(tmp_path, no_fallback):
    target = _exe(tmp_path / "real" / "runc-1.1")
    d = tmp_path / "bin"
    d.mkdir()
    os.symlink(target, d / "runc")
    assert find_runtime(["runc"], str(d)) == str(d / "runc")


def test_empty_list_is_an_error():
    with pytest.raises(RuntimeNotFound, match="at least one runtime"):
        find_runtime([], "")


def test_never_finds_itself(tmp_path, no_fallback):
    shim = _exe(tmp_path / "bin" / "runc")
    other = _exe(tmp_path / "other" / "runc")
    assert find_runtime(["runc"], f"{tmp_path / 'bin'}:{tmp_path / 'other'}", self_path=shim) == other
    os.unlink(other)
    with pytest.raises(RuntimeNotFound):
        find_runtime(["runc"], str(tmp_path / "bin"), self_path=shim)


def test_resolve_tool(tmp_path, no_fallback):
    hook = _exe(tmp_path / "bin" / "nvidia-container-runtime-hook")
    path = str(tmp_path / "bin")
    assert resolve_tool("nvidia-container-runtime-hook", "nvidia-container-runtime-hook", path) == hook
    assert resolve_tool("/opt/x/hook", "nvidia-container-runtime-hook", path) == "/opt/x/hook"
    assert resolve_tool("nvidia-ctk", "nvidia-ctk", path) == "/usr/bin/nvidia-ctk"
    assert resolve_tool("", "nvidia-ctk", path) == "/usr/bin/nvidia-ctk"
