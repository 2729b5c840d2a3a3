"""`mypy src/` is clean: the models (nct.record.Record, dataclass-like to the checker) are
built with the right fields and types, and the rest of the code agrees with its hints.
The configuration is pyproject's [tool.mypy]; mypy comes with the `test` extra."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def test_mypy_src_is_clean(tmp_path):
    pytest.importorskip("mypy", reason="mypy is in the test extra: pip install -e '.[test]'")
    res = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "cache"), "src/"],
                         cwd=REPO, capture_output=True, text=True)
    assert res.returncode == 0, res.stdout[-6000:] + res.stderr[-2000:]
    assert "Success: no issues found" in res.stdout


def test_a_wrong_model_constructor_is_caught(tmp_path):
    """Record is dataclass-like to the checker: a bad call to a model is an error (this is
    what the dataclass_transform marker buys; without it every call type-checks)."""
    pytest.importorskip("mypy", reason="mypy is in the test extra: pip install -e '.[test]'")
    probe = tmp_path / "probe.py"
    probe.write_text("from nct.edits.model import MountEdit\n"
                     "MountEdit(host_path=1, container_path='/x')\n"
                     "MountEdit('/a')\n"
                     "m = MountEdit('/a', '/b')\n"
                     "m.host_path = '/c'\n")
    res = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "cache"),
                          "--config-file", str(REPO / "pyproject.toml"), str(probe)],
                         cwd=tmp_path, capture_output=True, text=True, env={"MYPYPATH": str(REPO / "src"),
                                                                            "PATH": "/usr/bin:/bin"})
    out = res.stdout
    assert res.returncode == 1, out
    assert 'Argument "host_path" to "MountEdit" has incompatible type "int"' in out, out
    assert 'Missing positional argument "container_path"' in out, out
    assert "read-only" in out or "frozen" in out, out
