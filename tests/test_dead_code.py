"""No dead code in src/ (issue 13): vulture finds no unused function, class, variable or
import, apart from the names tests/vulture_whitelist.py explains. Code only tests use belongs
in tests/. vulture comes with the `test` extra."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def test_no_dead_code_in_src():
    pytest.importorskip("vulture", reason="vulture is in the test extra: pip install -e '.[test]'")
    res = subprocess.run([sys.executable, "-m", "vulture", "src/", "tests/vulture_whitelist.py"],
                         cwd=REPO, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, (
        "unused code in src/ (delete it, move test-only code to tests/, or add the name with its reason "
        "to tests/vulture_whitelist.py):\n" + res.stdout[-6000:] + res.stderr[-2000:])


def test_vulture_sees_dead_code(tmp_path):
    """The check is live: an unused function in a module is reported."""
    pytest.importorskip("vulture", reason="vulture is in the test extra: pip install -e '.[test]'")
    (tmp_path / "m.py").write_text("def used():\n    return 1\n\n\ndef unused_helper():\n    return 2\n\n\nused()\n")
    res = subprocess.run([sys.executable, "-m", "vulture", str(tmp_path / "m.py")], capture_output=True, text=True,
                         timeout=60)
    assert res.returncode != 0 and "unused_helper" in res.stdout and "'used'" not in res.stdout, res.stdout
