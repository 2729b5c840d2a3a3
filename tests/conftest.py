"""Suite-wide setup: the commands of the venv running pytest come first on PATH, so tests
(and the runc/docker hooks they configure) run this checkout's nct, wherever the venv is."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

VENV_BIN = Path(sys.executable).parent
os.environ["PATH"] = f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}"
REPO = Path(__file__).resolve().parent.parent


def venv_bin(name: str) -> str:
    """Absolute path of a console script of this venv (hooks need absolute paths)."""
    return str(VENV_BIN / name)


@pytest.fixture
def settled_caches(monkeypatch):
    """Files made by a test are seconds old, and nct.hostcache skips files changed in the last
    RACY_SECONDS (a ctime cannot be backdated): let the caches look from a minute later.
    Tests of the racy window itself put the real clock back (hostcache.time = time)."""
    import time
    import types

    from nct import hostcache

    monkeypatch.setattr(hostcache, "time", types.SimpleNamespace(time=lambda: time.time() + 60))


@pytest.fixture
def nct_bin():
    return venv_bin
