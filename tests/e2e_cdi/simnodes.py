"""Simulated nodes for the CDI generation tests, read without a namespace: discovery gets
the node's roots through --driver-root and NCT_PROC_ROOT (NVML is queried chrooted into
the driver root, so the simulated NVML sees the node at the real paths), and config.toml
is pinned to a missing file (built-in defaults)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

VENV_BIN = Path(sys.executable).parent


def why_no_sim() -> str | None:
    if os.geteuid() != 0:
        return "simulated nodes need root (mknod)"
    if shutil.which("gcc") is None:
        return "simulated nodes need gcc"
    return None


def make_node(directory: Path, **kw):
    why = why_no_sim()
    if why:
        pytest.skip(why)
    from nct.sim.node import create_node

    return create_node(str(directory), **kw)


def world_rw_dri(dev_dir: str) -> None:
    """chmod 0666 the DRM card/render nodes under `dev_dir` (a node's dev/, or /dev inside
    its namespace): a host where every GPU node is world read-write, for which upstream's
    minimum cdiVersion is 0.5.0 (no additionalGids). The simulated default, like Debian's
    udev, is card nodes 0660 group video, which need additionalGids (0.7.0)."""
    import stat

    dri = os.path.join(dev_dir, "dri")
    for name in os.listdir(dri):
        path = os.path.join(dri, name)
        if stat.S_ISCHR(os.lstat(path).st_mode):
            os.chmod(path, 0o666)


def node_env(node, base: dict | None = None) -> dict:
    env = dict(os.environ if base is None else base)
    env.update(NCT_PROC_ROOT=os.path.join(node.root, "proc"),
               NVIDIA_CTK_CONFIG_FILE_PATH=os.path.join(node.dir, "no-config.toml"))
    env.pop("NCT_SIM_ROOT", None)
    env.pop("NVIDIA_CTK_DRIVER_ROOT", None)
    env.pop("NVIDIA_CTK_DEV_ROOT", None)
    env.pop("NVIDIA_CTK_CDI_OUTPUT_FILE_PATH", None)
    return env


def set_node_env(monkeypatch, node) -> None:
    for k, v in node_env(node, {}).items():
        monkeypatch.setenv(k, v)
    for k in ("NCT_SIM_ROOT", "NVIDIA_CTK_DRIVER_ROOT", "NVIDIA_CTK_DEV_ROOT", "NVIDIA_CTK_CDI_OUTPUT_FILE_PATH"):
        monkeypatch.delenv(k, raising=False)


def ctk(node, *args: str, prog: str = "nvidia-ctk", root: bool = True, env: dict | None = None,
        timeout: int = 120) -> subprocess.CompletedProcess:
    """`nvidia-ctk ARGS...` (cdi generate gets --driver-root NODE/root unless root=False)."""
    argv = [str(VENV_BIN / prog), *args]
    if root and len(args) >= 2 and args[:2] == ("cdi", "generate"):
        argv += ["--driver-root", node.root]
    return subprocess.run(argv, capture_output=True, text=True, env=env or node_env(node), timeout=timeout)
