"""A private dockerd runs containers through the self-contained toolkit's
nvidia-container-runtime, and every runtime call after the first pass-through skips Python
(the launcher's fast path, issue 14): python3 is wrapped to record each start, and only
`create` (plus the one pass-through that writes the cache) may appear there."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from toolkit_build import toolkit_tree

from .conftest import needs_docker


@needs_docker
def test_dockerd_through_toolkit_fast_path(tmp_path, dockerd_factory, busybox_image):
    tree = tmp_path / "tk"
    shutil.copytree(toolkit_tree(), tree, symlinks=True)
    python = tree / "python/bin/python3"
    os.rename(python, python.with_name("python3.real"))
    starts = tmp_path / "python-starts"
    python.write_text(f'#!/bin/sh\necho "$@" >> {starts}\nexec "$0.real" "$@"\n')
    python.chmod(0o755)
    xdg = tmp_path / "xdg"
    (xdg / "nvidia-container-runtime").mkdir(parents=True)
    cfg = tmp_path / "daemon.json"
    cfg.write_text(json.dumps({"runtimes": {"nvidia": {"path": str(tree / "nvidia-container-runtime")}}}) + "\n")
    d = dockerd_factory(cfg)
    image = busybox_image(d)
    # a first container: Python does its create and the first pass-throughs (and writes the cache)
    r = d.docker("run", "--rm", "--network=none", "--runtime=nvidia", image, "/bin/echo", "first")
    assert r.stdout == "first\n", r.stderr
    assert (tree / "python/.passthrough-cache").is_file()
    starts.write_text("")
    r = d.docker("run", "-d", "--network=none", "--runtime=nvidia", image, "/bin/busybox", "sleep", "600")
    cid = r.stdout.strip()
    assert d.docker("exec", cid, "/bin/busybox", "echo", "in-exec").stdout == "in-exec\n"
    assert d.docker("top", cid).returncode == 0
    d.docker("rm", "-f", cid)
    calls = starts.read_text().splitlines()  # python3's argv: -I -S -c CODE argv0 ARGS...
    assert calls and all(" create " in f" {c} " for c in calls), calls
