"""Session fixtures for end-to-end tests (helpers live in e2e.harness)."""

from __future__ import annotations

import json
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
