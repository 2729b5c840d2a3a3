"""The self-contained toolkit, installed the way the installer image installs it (the
toolkit's own `nct install` copying its tree), runs GPU containers through real runc on a
simulated node while every Python on the machine is hidden: interpreters replaced by a
trap that logs and fails, their library dirs, the venv, pyenv and this checkout's src/
covered by empty read-only tmpfs mounts (a private mount namespace of `nct sim run`)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from e2e import rootfs as R
from e2e.harness import needs_e2e, venv_bin
from e2e.test_runc_hook import SCRIPT, assert_driver, gpu_nodes, sections, smi_line
from toolkit_build import REPO, toolkit_tree

pytestmark = needs_e2e

TRAP = """#!/bin/sh
echo "$0 $*" >> {log}
exit 97
"""


def python_paths() -> tuple[list[str], list[str]]:
    """(interpreter files, library/tree dirs) of every Python this machine has."""
    files, dirs = set(), set()
    for pattern_dir in ("/usr/bin", "/usr/local/bin", "/bin"):
        if os.path.isdir(pattern_dir):
            for name in os.listdir(pattern_dir):
                p = os.path.join(pattern_dir, name)
                if name.startswith("python") and os.path.isfile(p):
                    files.add(os.path.realpath(p))
    files.add(os.path.realpath(sys.executable))
    for base in ("/usr/lib", "/usr/local/lib"):
        if os.path.isdir(base):
            dirs.update(os.path.join(base, n) for n in os.listdir(base) if n.startswith("python3"))
    for d in (sys.prefix, sys.base_prefix, sysconfig.get_paths()["stdlib"], str(REPO / "src"),
              os.path.expanduser("~/.pyenv")):
        if os.path.isdir(d) and d not in ("/usr", "/usr/local", "/"):
            dirs.add(os.path.realpath(d))
    return sorted(files), sorted(dirs)


def test_installed_toolkit_runs_gpu_containers_without_any_python(sim_node, rootfs_template, tmp_path):
    toolkit = toolkit_tree()
    root = tmp_path / "host" / "usr/local/nvidia/toolkit"
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
    r = subprocess.run([str(toolkit / "nct"), "install", "--toolkit-root", str(root), "--runtime", "docker",
                        "--config", str(tmp_path / "daemon.json"), "--restart-mode", "none", "--no-daemon",
                        "--toolkit-pid-file", str(tmp_path / "toolkit.pid"), "--driver-root", "/", "--driver-root-ctr-path", "/"],
                       capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    assert (root / "python/NCT-TOOLKIT").is_file() and not (root / "lib/python").exists()
    assert str(root / "nvidia-container-runtime") in (tmp_path / "daemon.json").read_text()

    log = tmp_path / "trap.log"
    trap = tmp_path / "python-trap"
    trap.write_text(TRAP.format(log=log))
    trap.chmod(0o755)
    files, dirs = python_paths()
    mig = sim_node.gpu(2)["migs"][1]
    cases = {"jit": ("nvidia-container-runtime", "1"),
             "legacy": ("nvidia-container-runtime.legacy", sim_node.gpu(0)["uuid"]),
             "mig": ("nvidia-container-runtime", mig["uuid"])}
    lines = ["set -u"]
    lines += [f"mount --bind {trap} {f}" for f in files]
    lines += [f"mount -t tmpfs -o ro,size=4k nct-hidden {d}" for d in dirs]
    lines.append("python3 -c 'hidden?' >/dev/null 2>&1 && { echo 'a python still runs'; exit 3; }")
    lines.append(f"""run() {{
  "{root}/$1" --root {tmp_path}/runc create --bundle "$2" "$3" </dev/null >"$4" 2>"$4.err" || {{ cat "$4.err"; return 1; }}
  "{root}/$1" --root {tmp_path}/runc start "$3" || return 1
  i=0; while [ $i -lt 600 ]; do
    "{root}/$1" --root {tmp_path}/runc state "$3" | grep -q '"status": "stopped"' && break
    sleep 0.1; i=$((i+1)); done
  "{root}/$1" --root {tmp_path}/runc delete "$3"
}}""")
    outs = {}
    for case, (shim, visible) in cases.items():
        rootfs = tmp_path / case / "rootfs"
        shutil.copytree(rootfs_template, rootfs, symlinks=True)
        R.make_bundle(rootfs.parent, rootfs, ["sh", "-c", SCRIPT], [f"NVIDIA_VISIBLE_DEVICES={visible}"])
        outs[case] = tmp_path / f"{case}.out"
        lines.append(f"run {shim} {rootfs.parent} {R.container_id()} {outs[case]} || echo 'FAILED {case}'")
    script = tmp_path / "run.sh"
    script.write_text("\n".join(lines) + "\n")
    res = subprocess.run([venv_bin("nct"), "sim", "run", str(sim_node.dir), "--", "env", "-i",
                          "PATH=/usr/sbin:/usr/bin:/sbin:/bin", "PYTHONHOME=/nonexistent", "PYTHONPATH=/nonexistent",
                          f"XDG_RUNTIME_DIR={tmp_path}", "sh", str(script)], capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout + res.stderr
    # the one trap hit is the script's own check that `python3` is gone
    trapped = log.read_text().splitlines()
    assert len(trapped) == 1 and "hidden?" in trapped[0], trapped
    failed = [line for line in res.stdout.splitlines() if line.startswith("FAILED ")]

    jit = sections(outs["jit"].read_text())
    assert gpu_nodes(jit) == {"nvidia1"}, outs["jit"].read_text() + res.stdout
    assert jit["probe"] == ["cuDriverGetVersion=12040"] and "nvidiactl" in jit["nodes"]
    assert jit["smi"] == [smi_line(sim_node.gpu(1), 0)]
    legacy = sections(outs["legacy"].read_text())
    assert gpu_nodes(legacy) == {"nvidia0"}, outs["legacy"].read_text() + res.stdout
    assert_driver(legacy)
    assert "FAILED jit" not in failed and "FAILED legacy" not in failed
    out = outs["mig"].read_text()
    err = outs["mig"].with_suffix(".out.err")
    assert "FAILED mig" not in failed and "end" in sections(out), (err.read_text() if err.exists() else out)[-300:]
    migout = sections(out)
    caps = {n for n in migout["nodes"] if n.startswith("caps/")}
    assert caps == {f"caps/nvidia-cap{mig['gi_minor']}", f"caps/nvidia-cap{mig['ci_minor']}"}
    assert [l for l in migout["smi"] if "MIG" in l and mig["uuid"] in l]
