"""Fixtures for the simulated node tests: nodes are built once per session (creation is
cached and cheap) in a private temp dir and removed afterwards."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

VENV_BIN = Path(sys.executable).parent
NCT = str(VENV_BIN / "nct")

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (mknod, mount namespaces)")
needs_gcc = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc to compile the simulated driver")
needs_runc = pytest.mark.skipif(shutil.which("runc") is None, reason="needs runc")
needs_busybox = pytest.mark.skipif(
    shutil.which("busybox") is None and not os.path.exists("/bin/busybox"), reason="needs busybox-static")


def nct(*args: str, check: bool = False, env: dict | None = None, **kw) -> subprocess.CompletedProcess:
    r = subprocess.run([NCT, *args], capture_output=True, text=True, env=env, **kw)
    if check and r.returncode != 0:
        raise AssertionError(f"nct {' '.join(args)} failed ({r.returncode}): {r.stderr}{r.stdout}")
    return r


def sim_run(node_dir, *cmd: str, check: bool = True, **kw) -> subprocess.CompletedProcess:
    return nct("sim", "run", str(node_dir), "--", *cmd, check=check, **kw)


@pytest.fixture(scope="session")
def sim_tmp(tmp_path_factory):
    return tmp_path_factory.mktemp("sim")


def _make(sim_tmp, name, **kw):
    if os.geteuid() != 0 or shutil.which("gcc") is None:
        pytest.skip("needs root and gcc to create a simulated node")
    from nct.sim.node import create_node

    return create_node(sim_tmp / name, **kw)


@pytest.fixture(scope="session")
def node8(sim_tmp):
    """8 GPUs, GPU 1 MIG-enabled with 3 devices, GPU 2 MIG-enabled with 7."""
    return _make(sim_tmp, "node8", gpus=8, mig="1:3,2:7")


@pytest.fixture(scope="session")
def node1(sim_tmp):
    return _make(sim_tmp, "node1", gpus=1)


@pytest.fixture(scope="session")
def node0(sim_tmp):
    return _make(sim_tmp, "node0", gpus=0)
