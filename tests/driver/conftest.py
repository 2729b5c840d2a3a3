"""Fixtures for discovery tests: a session-wide library farm and tiny driver trees."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import treebuilder  # noqa: E402


def _need_root_tools() -> str | None:
    if os.geteuid() != 0:
        return "needs root (mknod, ldconfig -r)"
    if not treebuilder.have_gcc():
        return "needs gcc to build ELF libraries"
    if shutil.which("ldconfig") is None and not os.path.exists("/sbin/ldconfig"):
        return "needs ldconfig"
    return None


@pytest.fixture(scope="session")
def farm(tmp_path_factory):
    reason = _need_root_tools()
    if reason:
        pytest.skip(reason)
    return treebuilder.LibFarm(tmp_path_factory.mktemp("libfarm"), m32=treebuilder.gcc_m32())


@pytest.fixture
def make_tree(tmp_path, farm):
    """make_tree(gpus=N, mig={...}, ...) -> treebuilder.Tree under a fresh tmp dir."""
    count = [0]

    def make(**kw):
        count[0] += 1
        return treebuilder.build_tree(tmp_path / f"node{count[0]}", farm, **kw)

    return make
