"""The self-contained toolkit for tests: assembled once per content (nct's source, the
assembly inputs) with packaging/toolkit/assemble.py and kept under $NCT_CACHE/toolkit, so
repeat runs reuse it.  Tests copy it; they never change the cached tree."""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
TOOLKIT_DIR = REPO / "packaging" / "toolkit"
CACHE = Path(os.environ.get("NCT_CACHE", "/var/cache/nct"))


def _key() -> str:
    h = hashlib.sha256()
    files = sorted((REPO / "src" / "nct").rglob("*")) + sorted(TOOLKIT_DIR.glob("*.*")) + \
        sorted((TOOLKIT_DIR / "prebuilt").glob("*.sha256")) + [REPO / "pyproject.toml"]
    for f in files:
        if f.is_file() and "__pycache__" not in f.parts and f.suffix != ".pyc":
            h.update(str(f.relative_to(REPO)).encode() + b"\0" + f.read_bytes())
    return h.hexdigest()[:16]


def toolkit_tree() -> Path:
    """The assembled toolkit for this checkout (skips when it cannot be built here)."""
    if os.uname().machine != "x86_64":
        pytest.skip("the toolkit is x86_64 only")
    if subprocess.run(["sh", "-c", "command -v gcc"], capture_output=True).returncode != 0:
        pytest.skip("needs gcc (static launcher)")
    out = CACHE / "toolkit" / _key()
    if (out / "python" / "NCT-TOOLKIT").is_file():
        os.utime(out)  # in use: kept by the pruning below
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.parent / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (out / "python" / "NCT-TOOLKIT").is_file():
            r = subprocess.run([sys.executable, str(TOOLKIT_DIR / "assemble.py"), "--out", str(out)],
                               capture_output=True, text=True)
            assert r.returncode == 0, r.stdout + r.stderr
            os.utime(out)
        for old in out.parent.iterdir():  # trees of other checkouts, untouched for a day
            if old.is_dir() and old != out and time.time() - old.stat().st_mtime > 86400:
                shutil.rmtree(old, ignore_errors=True)
    return out
