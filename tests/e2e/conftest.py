"""Session fixtures for end-to-end tests (helpers live in e2e.harness)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from e2e import rootfs as R
from e2e.harness import _WHY, Node, venv_bin


@pytest.fixture(scope="session")
def sim_node(tmp_path_factory) -> Node:
    if _WHY:
        pytest.skip(_WHY)
    d = tmp_path_factory.mktemp("e2e") / "node"
    subprocess.run([venv_bin("nct"), "sim", "create", str(d), "--gpus", "3", "--mig", "2:2"],
                   check=True, capture_output=True)
    return Node(d, json.loads((d / "node.json").read_text()))


@pytest.fixture(scope="session")
def probe(tmp_path_factory) -> Path:
    if _WHY:
        pytest.skip(_WHY)
    return R.build_probe(tmp_path_factory.mktemp("probe") / "cuda-probe")


@pytest.fixture(scope="session")
def rootfs_template(tmp_path_factory, probe) -> Path:
    return R.make_rootfs(tmp_path_factory.mktemp("tpl") / "rootfs", probe=probe)


@pytest.fixture
def rootfs(tmp_path, rootfs_template) -> Path:
    dst = tmp_path / "bundle" / "rootfs"
    shutil.copytree(rootfs_template, dst, symlinks=True)
    return dst


@pytest.fixture(scope="session")
def oldkernel(tmp_path_factory) -> Path:
    """tests/e2e/oldkernel.py: run a program as on a kernel without the new mount API."""
    if _WHY:
        pytest.skip(_WHY)
    from e2e import oldkernel as K

    return K.build(tmp_path_factory.mktemp("oldkernel") / "oldkernel")


@pytest.fixture
def private_host_cache(tmp_path, monkeypatch) -> Path:
    """A host cache directory (nct.hostcache) of this test's own, for tests that assert on
    a warm cache: the shared /run/nct holds the newest 512 ELF entries of every test and
    every concurrent run on this machine, so a node's entries can be pushed out between a
    warm-up run and the run checked. NCT_CACHE_DIR reaches the hook because runc runs a
    hook whose entry has no `env` with runc's own environment (inherited through
    `nct sim run`); /tmp is the host's inside the sim namespace. Root-owned 0700, as
    hostcache requires."""
    d = tmp_path / "nct-cache"
    d.mkdir(mode=0o700)
    os.chmod(d, 0o700)
    monkeypatch.setenv("NCT_CACHE_DIR", str(d))
    return d
