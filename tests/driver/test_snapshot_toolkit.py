"""The node snapshot as users get it: the self-contained toolkit's own CPython and nct copy
(sourceless, relocated) write a snapshot on the first discovery and use it on the next,
with the same answer."""

from __future__ import annotations

import json
import os
import subprocess
import time

import pytest

from nct.driver import snapshot
from nct.hostcache import RACY_SECONDS
from toolkit_build import toolkit_tree

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (the host cache is root's)")


def test_installed_toolkit_writes_and_uses_a_node_snapshot(make_tree, tmp_path):
    tk = toolkit_tree()
    t = make_tree(gpus=2)
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    env = {"PATH": "/usr/bin:/bin", "NCT_CACHE_DIR": str(cache), "NCT_PROC_ROOT": str(t.root / "proc")}
    time.sleep(RACY_SECONDS + 0.2)  # the tree's files are older than the racy window, as on a node

    def listing() -> str:
        r = subprocess.run([str(tk / "nvidia-container-cli"), "--root", str(t.root), "list"], env=env,
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        return r.stdout

    first = listing()
    assert "libcuda.so" in first and "nvidia0" in first
    (snap,) = cache.glob(f"{snapshot.FORMAT}-*.json")
    written = snap.stat().st_mtime_ns
    (key,) = json.loads(snap.read_text())
    assert str(tk) in key  # the toolkit's own nct is the code identity
    assert listing() == first
    assert snap.stat().st_mtime_ns == written, "the second discovery did not use the snapshot"
