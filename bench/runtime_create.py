#!/usr/bin/env python3
"""How long does `nvidia-container-runtime create` take in jit-cdi mode?

For simulated nodes of 1, 8 and 64 GPUs (`nct sim create`), times the shim rewriting a
bundle's config.json for NVIDIA_VISIBLE_DEVICES=all and =0 (the low-level runtime is
/bin/true, so only the shim's own work is measured: config, discovery, planning,
injection, atomic write). Medians; appended to bench/results/runtime.json under
"runtime_create" and compared with the previous entry. Stdlib only.

    python bench/runtime_create.py [--runs 10] [--gpus 1,8,64]
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

HERE = os.path.dirname(os.path.abspath(__file__))
BIN = os.path.dirname(sys.executable)


def spec(devices: str) -> dict:
    return {"ociVersion": "1.0.2", "root": {"path": "rootfs"},
            "process": {"args": ["sh"], "cwd": "/", "env": ["PATH=/bin", f"NVIDIA_VISIBLE_DEVICES={devices}"]},
            "mounts": [], "linux": {}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--gpus", default="1,8,64")
    ap.add_argument("--no-save", action="store_true")
    opts = ap.parse_args()
    shim = os.path.join(BIN, "nvidia-container-runtime")
    base = tempfile.mkdtemp(prefix="nct-bench-create-")
    results: dict = {}
    try:
        for n in [int(x) for x in opts.gpus.split(",")]:
            node = os.path.join(base, f"node{n}")
            subprocess.run([os.path.join(BIN, "nct"), "sim", "create", node, "--gpus", str(n)],
                           check=True, stdout=subprocess.DEVNULL)
            time.sleep(2.5)  # past the host caches' "racily new" window (nct.hostcache), as on a node
            cfg = os.path.join(base, f"config{n}.toml")
            with open(cfg, "w") as f:
                f.write(f'[nvidia-container-cli]\nroot = "{node}/root"\n'
                        '[nvidia-container-runtime]\nruntimes = ["/bin/true"]\n')
            env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
            env.update(NVIDIA_CTK_CONFIG_FILE_PATH=cfg, NCT_PROC_ROOT=os.path.join(node, "root", "proc"))
            for devices in ("all", "0"):
                bundle = os.path.join(base, f"bundle{n}-{devices}")
                os.makedirs(bundle)
                original = json.dumps(spec(devices))
                times = []
                for i in range(opts.runs + 1):
                    with open(os.path.join(bundle, "config.json"), "w") as f:
                        f.write(original)
                    t0 = time.perf_counter()
                    subprocess.run([shim, "create", "--bundle", bundle, "x"], env=env, check=True)
                    if i:  # the first run writes .pyc files
                        times.append((time.perf_counter() - t0) * 1000.0)
                results[f"gpus{n}_{devices}"] = {"median_ms": round(statistics.median(times), 1),
                                                 "runs": len(times)}
    finally:
        shutil.rmtree(base, ignore_errors=True)

    history = resultlog.load("runtime", "runtime_create")
    previous = history[-1]["results"] if history else {}
    for case, r in results.items():
        line = f"create {case:12s} {r['median_ms']:8.1f} ms"
        if case in previous:
            line += f"  (previous {previous[case]['median_ms']:.1f} ms)"
        print(line)
    if not opts.no_save:
        resultlog.append("runtime", {"time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                                        "results": results}, "runtime_create", keep=20)
    return 0


if __name__ == "__main__":
    sys.exit(main())
