#!/usr/bin/env python3
"""What do NVML facts cost, and why nct has its own binding rather than nvidia-ml-py?

On a simulated 8-GPU node with 10 MIG devices (GPU 1: 3, GPU 2: 7; the sim's gcc-built
libnvidia-ml.so.1, read without a namespace), as medians in milliseconds:
  query-ctypes   nct.driver.nvml.query(): fork, chroot, ctypes binding, every fact, JSON back
  query-pynvml   the same child doing the same calls through pynvml (when installed), which it
                 must import in every child: what nct did before its own binding
  import-ctypes  `import ctypes` in a fresh interpreter (-X importtime, cumulative)
  import-pynvml  `import pynvml` likewise
and the size of pynvml.py. Results go to bench/results/nvml.json (newest last), compared
with the previous entry (ratio = now / before). Needs root and gcc (nct sim).

    python bench/nvml_bench.py [--runs 15] [--no-save]
"""

from __future__ import annotations

import argparse
import datetime
import glob
import importlib.util
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

import resultlog  # bench/resultlog.py

PYNVML_CHILD = '''
def child(nvml_lib, cuda_lib, root):
    import ctypes
    import pynvml as N
    from nct.driver.nvml import BRANDS, _enter_root, cuda_version_string
    nvml_lib, cuda_lib = _enter_root(root, [nvml_lib, cuda_lib])
    N.nvmlLib = ctypes.CDLL(nvml_lib)
    N.nvmlInit()
    out = {"nvml": True, "gpus": [], "driver_version": N.nvmlSystemGetDriverVersion(),
           "cuda_version": cuda_version_string(N.nvmlSystemGetCudaDriverVersion())}
    for i in range(N.nvmlDeviceGetCount()):
        h = N.nvmlDeviceGetHandleByIndex(i)
        g = {"bus_id": N.nvmlDeviceGetPciInfo(h).busId, "uuid": N.nvmlDeviceGetUUID(h),
             "name": N.nvmlDeviceGetName(h), "minor": N.nvmlDeviceGetMinorNumber(h),
             "brand": BRANDS[N.nvmlDeviceGetBrand(h)],
             "architecture": "%d.%d" % N.nvmlDeviceGetCudaComputeCapability(h), "migs": []}
        current, pending = N.nvmlDeviceGetMigMode(h)
        if current == 1:
            for j in range(N.nvmlDeviceGetMaxMigDeviceCount(h)):
                try:
                    mh = N.nvmlDeviceGetMigDeviceHandleByIndex(h, j)
                except N.NVMLError:
                    continue
                g["migs"].append({"index": j, "gi": N.nvmlDeviceGetGpuInstanceId(mh),
                                  "ci": N.nvmlDeviceGetComputeInstanceId(mh), "uuid": N.nvmlDeviceGetUUID(mh),
                                  "name": N.nvmlDeviceGetName(mh)})
        out["gpus"].append(g)
    N.nvmlShutdown()
    return out
'''


def median_ms(fn, runs: int) -> float:
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1000)
    return round(statistics.median(times), 2)


def import_ms(module: str, runs: int) -> float:
    out = []
    for _ in range(runs):
        err = subprocess.run([sys.executable, "-X", "importtime", "-c", f"import {module}"],
                             capture_output=True, text=True).stderr
        line = [l for l in err.splitlines() if l.rstrip().endswith(f"| {module}")][-1]
        out.append(int(line.split("|")[1]) / 1000)
    return round(statistics.median(out), 2)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--no-save", action="store_true")
    args = ap.parse_args()
    from nct.driver import nvml
    from nct.sim.node import create_node

    with tempfile.TemporaryDirectory(prefix="nct-nvml-bench-") as tmp:
        node = create_node(os.path.join(tmp, "node"), gpus=8, mig="1:3,2:7")
        lib = os.path.join(node.root, "usr/lib/x86_64-linux-gnu")
        ml = glob.glob(os.path.join(lib, "libnvidia-ml.so.*.*"))[0]
        cu = glob.glob(os.path.join(lib, "libcuda.so.*.*"))[0]
        facts = nvml.query(ml, cu, root=node.root)
        assert facts.nvml and sum(len(g.migs) for g in facts.gpus) == 10, facts
        result = {"query-ctypes": median_ms(lambda: nvml.query(ml, cu, root=node.root), args.runs),
                  "import-ctypes": import_ms("ctypes", args.runs)}
        if importlib.util.find_spec("pynvml") is not None:
            scope: dict = {}
            exec(PYNVML_CHILD, scope)
            child = scope["child"]
            raw, why = nvml._run_forked(child, ml, cu, node.root, timeout=20)
            assert raw and sum(len(g["migs"]) for g in raw["gpus"]) == 10, why
            result["query-pynvml"] = median_ms(lambda: nvml._run_forked(child, ml, cu, node.root, timeout=20),
                                               args.runs)
            result["import-pynvml"] = import_ms("pynvml", args.runs)
            result["pynvml-bytes"] = os.path.getsize(importlib.util.find_spec("pynvml").origin)
    before = (resultlog.load("nvml") or [None])[-1]
    for key, value in result.items():
        ratio = f"  (now/before {value / before[key]:.2f})" if before and before.get(key) else ""
        unit = "" if key.endswith("bytes") else " ms"
        print(f"{key:15} {value}{unit}{ratio}")
    if not args.no_save:
        entry = {"when": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                 "host": platform.node(), "runs": args.runs, **result}
        print("saved to", resultlog.append("nvml", entry))
    return 0


if __name__ == "__main__":
    sys.exit(main())
