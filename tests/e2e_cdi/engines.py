"""Running the engines for CDI end-to-end tests: what a test needs on the machine, and
`inside()`, which runs inner.py in the simulated node's namespace."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from e2e import rootfs as R

HERE = Path(__file__).resolve().parent
INNER = HERE / "inner.py"
VENV_BIN = Path(sys.executable).parent


def why_not(*tools: str) -> str | None:
    if os.geteuid() != 0:
        return "needs root (mount namespaces, mknod, runc)"
    for tool in ("runc", "gcc", *tools):
        if shutil.which(tool) is None:
            return f"needs {tool}"
    if not os.path.exists(R.BUSYBOX):
        return "needs busybox-static"
    return None


def inside(node, *args: str, timeout: int = 240) -> subprocess.CompletedProcess:
    """`nct sim run NODE -- python inner.py ARGS...` (see inner.py)."""
    env = dict(os.environ)
    for k in ("NCT_PROC_ROOT", "NCT_SIM_ROOT", "NVIDIA_CTK_DRIVER_ROOT", "NVIDIA_CTK_DEV_ROOT",
              "NVIDIA_CTK_CDI_OUTPUT_FILE_PATH"):
        env.pop(k, None)
    env["NVIDIA_CTK_CONFIG_FILE_PATH"] = "/nonexistent/nct-e2e-config.toml"
    return subprocess.run([str(VENV_BIN / "nct"), "sim", "run", node.dir, "--", sys.executable, str(INNER), *args],
                          capture_output=True, text=True, timeout=timeout, env=env)
