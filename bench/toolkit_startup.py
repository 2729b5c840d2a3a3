#!/usr/bin/env python3
"""Start-up of the self-contained toolkit's launchers against `python -IS` launchers and runc.

Times, alternating in batches (medians): `runc state ID` on a live busybox container; the
same through the toolkit's `nvidia-container-runtime` (static launcher -> own CPython -I -S)
and through a `python -IS` launcher of the Python running this script (what `nct install`
wrote before the toolkit); the prestart hook on a container that asks for no GPU (its
start-up and spec read, nothing else) through both launchers; a bare `-c pass` of each
interpreter.  Results are printed (and appended to bench/results/toolkit.json unless
--no-save).  Root, runc, busybox-static and an assembled toolkit needed:

    python packaging/toolkit/assemble.py --out /tmp/tk
    python bench/toolkit_startup.py --toolkit /tmp/tk [--runs 200]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import resultlog  # bench/resultlog.py
from runtime_passthrough import make_bundle, time_runs

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)


def python_launcher(base: str, name: str, module: str, python: str) -> str:
    """`#!python -IS` wrapper around this checkout's nct (nct.engines.bundle.WRAPPER's shape)."""
    path = os.path.join(base, "pyIS", name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    site = [p for p in sys.path if p.endswith("site-packages")]
    with open(path, "w") as f:
        f.write(f"#!{python} -IS\nimport sys\nsys.path[:0] = {[os.path.join(REPO, 'src'), *site]!r}\n"
                f"from {module} import main\nsys.exit(main())\n")
    os.chmod(path, 0o755)
    return path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--toolkit", required=True, help="an assembled toolkit tree")
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--python", default=sys.executable,
                    help="interpreter of the python -IS launchers (default: this one; e.g. /usr/bin/python3.11)")
    ap.add_argument("--no-save", action="store_true")
    opts = ap.parse_args()
    runc = shutil.which("runc")
    tk = os.path.abspath(opts.toolkit)
    if os.geteuid() != 0 or not runc or not os.path.exists(os.path.join(tk, "python/NCT-TOOLKIT")):
        print("needs root, runc and an assembled toolkit (--toolkit)", file=sys.stderr)
        return 2
    base = tempfile.mkdtemp(prefix="nct-tkbench-")
    root = os.path.join(base, "runc-root")
    cid = f"nct-tkbench-{os.getpid()}"
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "XDG_CONFIG_HOME": os.path.join(base, "xdg")}
    os.makedirs(os.path.join(base, "xdg", "nvidia-container-runtime"))
    shutil.copy(os.path.join(REPO, "config", "config.toml"),
                os.path.join(base, "xdg", "nvidia-container-runtime", "config.toml"))
    samples: dict[str, list[float]] = {}
    try:
        bundle = make_bundle(base)
        subprocess.run([runc, "--root", root, "create", "--bundle", bundle, cid], check=True,
                       stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        state = json.dumps({"ociVersion": "1.0.2", "id": cid, "pid": os.getpid(), "bundle": bundle,
                            "status": "creating"})
        cmds = {
            "runc_state": [runc, "--root", root, "state", cid],
            "toolkit_state": [os.path.join(tk, "nvidia-container-runtime"), "--root", root, "state", cid],
            "pyIS_state": [python_launcher(base, "nvidia-container-runtime", "nct.runtime.main", opts.python),
                           "--root", root, "state", cid],
            "toolkit_hook": [os.path.join(tk, "nvidia-container-runtime-hook"), "prestart"],
            "pyIS_hook": [python_launcher(base, "nvidia-container-runtime-hook", "nct.hook.main", opts.python),
                          "prestart"],
            "toolkit_python": [os.path.join(tk, "python/bin/python3"), "-I", "-S", "-c", "pass"],
            "launcher_python": [opts.python, "-I", "-S", "-c", "pass"],
        }
        for name, cmd in cmds.items():  # warm up (page cache, any bytecode writes)
            for _ in range(3):
                subprocess.run(cmd, env=env, input=state.encode() if "hook" in name else None,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        for _ in range(max(1, opts.runs // 10)):
            for name, cmd in cmds.items():
                if "hook" in name:
                    for _ in range(10):
                        t0 = time.perf_counter()
                        subprocess.run(cmd, env=env, input=state.encode(), stdout=subprocess.DEVNULL, check=True)
                        samples.setdefault(name, []).append((time.perf_counter() - t0) * 1000.0)
                else:
                    samples.setdefault(name, []).extend(time_runs(cmd, env, 10))
    finally:
        subprocess.run([runc, "--root", root, "delete", "--force", cid],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        shutil.rmtree(base, ignore_errors=True)
    results = {k: round(statistics.median(v), 3) for k, v in samples.items()}
    for k, v in results.items():
        print(f"{k:16s} {v:7.2f} ms")
    print(f"pass-through added over runc: toolkit {results['toolkit_state'] - results['runc_state']:.2f} ms, "
          f"python -IS {results['pyIS_state'] - results['runc_state']:.2f} ms")
    if not opts.no_save:
        resultlog.append("toolkit", {"time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                                     "runs": opts.runs, "python": opts.python, "results_ms": results}, "toolkit_startup", keep=20)
    return 0


if __name__ == "__main__":
    sys.exit(main())
