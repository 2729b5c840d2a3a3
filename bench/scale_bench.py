#!/usr/bin/env python3
"""Does a GPU container start cost stay linear (or better) in what the node has?

Engine-style starts (`create --bundle B ID; start ID; state ID until stopped; delete ID` of a
busybox+glibc bundle running `true`) through the runtime shim in jit-cdi mode, against plain
runc, alternating, medians, on simulated nodes (inside `nct sim run NODE`):
  gpus1, gpus8, gpus64   NVIDIA_VISIBLE_DEVICES=all, compute,utility on 1, 8 and 64 GPUs
  mig8x7                 the 56 MIG devices of 8 GPUs x 7 (NVIDIA_VISIBLE_DEVICES=i:j,...)
and the shim's `create` in cdi mode (low-level runtime /bin/true) with a spec dir of 1, 50
and 200 files (8-GPU specs; one device of one file requested): specdir1/50/200. Then N
(default 32) jit-cdi starts at once on the 8-GPU node: all must succeed; wall time and
throughput. Results go to bench/results/scale.json (a list, newest last), compared with
the previous entry; each case has `ms`, and, against plain runc, `runc_ms`, `added_ms`,
`ratio`. Needs root, runc, gcc (nct sim) and busybox-static.

    python bench/scale_bench.py [--runs 8] [--concurrent 32] [--toolkit DIR] [--no-save]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import resultlog  # bench/resultlog.py
from start_bench import sequence  # one engine-style container life (bench/start_bench.py)

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
BIN = os.path.dirname(sys.executable)
CAPS = "NVIDIA_DRIVER_CAPABILITIES=compute,utility"
NODES = {"gpus1": (1, None), "gpus8": (8, None), "gpus64": (64, None), "mig8x7": (8, "7")}


def inner(plan: dict) -> dict:
    """Inside the node's namespace: alternate plain and GPU starts; then the concurrent ones."""
    env = dict(os.environ, **plan["env"])
    out: dict = {"plain": [], "gpu": []}
    for i in range(plan["runs"] + 1):  # the first round warms caches and is dropped
        for name in (("plain", "gpu") if i % 2 else ("gpu", "plain")):
            if name == "gpu":
                Path(plan["gpu_bundle"], "config.json").write_text(plan["gpu_config"])  # the shim rewrote it
                ms = sequence(plan["shim"], plan["root"], plan["gpu_bundle"], env)
            else:
                ms = sequence("runc", plan["root"], plan["plain_bundle"], env)
            if i:
                out[name].append(ms)
    if plan["many"]:
        failures: list[str] = []

        def one(bundle: str) -> float | None:
            try:
                return sequence(plan["shim"], plan["root"], bundle, env)
            except Exception as e:  # counted and reported
                failures.append(str(e))
                return None

        t0 = time.perf_counter()
        with ThreadPoolExecutor(len(plan["many"])) as pool:
            each = list(pool.map(one, plan["many"]))
        wall = time.perf_counter() - t0
        done = [x for x in each if x is not None]
        out["concurrent"] = {"n": len(each), "ok": len(done), "wall_ms": round(wall * 1000, 1),
                             "per_s": round(len(each) / wall, 2),
                             "median_each_ms": round(statistics.median(done or [0]), 1), "failures": failures[:3]}
    return out


def mig_devices(node: Path) -> str:
    doc = json.loads((node / "node.json").read_text())
    return ",".join(f"{g['index']}:{m['index']}" for g in doc["gpus"] for m in g.get("migs") or [])


def start_case(base: Path, name: str, gpus: int, mig: str | None, opts, bindir: str, many: int) -> dict:
    sys.path.insert(0, os.path.join(REPO, "tests"))
    from e2e import rootfs as R

    node = base / name / "node"
    node.parent.mkdir(parents=True)
    cmd = [os.path.join(BIN, "nct"), "sim", "create", str(node), "--gpus", str(gpus), "--no-lib32"]
    subprocess.run(cmd + (["--mig", mig] if mig else []), check=True, capture_output=True)
    time.sleep(2.5)  # past the host caches' "racily new" window (nct.hostcache)
    devices = mig_devices(node) if mig else "all"
    config = base / name / "config.toml"
    config.write_text('[nvidia-container-runtime]\nmode = "jit-cdi"\nruntimes = ["runc"]\n')
    env = [f"NVIDIA_VISIBLE_DEVICES={devices}", CAPS]
    plain = R.make_bundle(base / name / "plain", R.make_rootfs(base / name / "plain/rootfs"), ["true"])
    gpu = R.make_bundle(base / name / "gpu", R.make_rootfs(base / name / "gpu/rootfs"), ["true"], env)
    bundles = [str(R.make_bundle(base / name / f"many{i}", R.make_rootfs(base / name / f"many{i}/rootfs"),
                                 ["true"], env)) for i in range(many)]
    plan = {"runs": opts.runs, "root": str(base / name / "runc-root"),
            "shim": os.path.join(bindir, "nvidia-container-runtime"),
            "plain_bundle": str(plain), "gpu_bundle": str(gpu), "gpu_config": (gpu / "config.json").read_text(),
            "many": bundles,
            "env": {"NVIDIA_CTK_CONFIG_FILE_PATH": str(config), "PATH": f"{bindir}:/usr/sbin:/usr/bin:/sbin:/bin",
                    "XDG_RUNTIME_DIR": str(base)}}
    r = subprocess.run([os.path.join(BIN, "nct"), "sim", "run", str(node), "--", sys.executable, __file__,
                        "--inner", json.dumps(plan)], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"{name}: {r.stderr.strip()[-2000:]}")
    times = json.loads(r.stdout)
    p, g = statistics.median(times["plain"]), statistics.median(times["gpu"])
    res = {"ms": round(g, 1), "runc_ms": round(p, 1), "added_ms": round(g - p, 1), "ratio": round(g / p, 2),
           "spread_ms": [round(min(times["gpu"]), 1), round(max(times["gpu"]), 1)], "runs": len(times["gpu"]),
           "devices": len(devices.split(",")) if mig else gpus}
    if "concurrent" in times:
        res["concurrent"] = times["concurrent"]
    return res


def specdir_case(base: Path, files: int, runs: int) -> dict:
    """The shim's create in cdi mode over a spec dir of `files` 8-GPU specs (runtime /bin/true)."""
    from nct.cdi.spec import dump_spec

    node = base / "specdir-node"
    if not node.exists():
        subprocess.run([os.path.join(BIN, "nct"), "sim", "create", str(node), "--gpus", "8", "--no-lib32"],
                       check=True, capture_output=True)
    env = dict(os.environ, NCT_PROC_ROOT=str(node / "root/proc"))
    one = base / "specdir-one.json"
    if not one.exists():
        subprocess.run([os.path.join(BIN, "nvidia-ctk"), "cdi", "generate", "--driver-root", str(node / "root"),
                        "--output", str(one)], env=env, check=True, capture_output=True)
    spec = json.loads(one.read_text())
    d = base / f"specdir{files}"
    d.mkdir()
    for i in range(files):
        fmt = "json" if i % 2 else "yaml"
        (d / f"node{i:03d}.{fmt}").write_text(dump_spec(dict(spec, kind=f"node{i:03d}.nvidia.com/gpu"), fmt))
    cache = base / f"specdir{files}-cache"
    cache.mkdir(mode=0o700)
    config = base / f"specdir{files}.toml"
    config.write_text(f'[nvidia-container-runtime]\nmode = "cdi"\nruntimes = ["/bin/true"]\n'
                      f'[nvidia-container-runtime.modes.cdi]\nspec-dirs = ["{d}"]\n')
    env.update(NVIDIA_CTK_CONFIG_FILE_PATH=str(config), NCT_CACHE_DIR=str(cache))
    bundle = base / f"specdir{files}-bundle"
    bundle.mkdir()
    original = json.dumps({"ociVersion": "1.0.2", "root": {"path": "rootfs"},
                           "process": {"args": ["sh"], "cwd": "/",
                                       "env": ["PATH=/bin", "NVIDIA_VISIBLE_DEVICES=node000.nvidia.com/gpu=0"]},
                           "mounts": [], "linux": {}})
    time.sleep(2.5)  # the spec files past the racy window: the cache may keep them
    times = []
    for i in range(runs + 2):  # the first runs fill the cache
        (bundle / "config.json").write_text(original)
        t0 = time.perf_counter()
        subprocess.run([os.path.join(BIN, "nvidia-container-runtime"), "create", "--bundle", str(bundle), "x"],
                       env=env, check=True, stdout=subprocess.DEVNULL)
        if i >= 2:
            times.append((time.perf_counter() - t0) * 1000.0)
    return {"ms": round(statistics.median(times), 1), "files": files,
            "spread_ms": [round(min(times), 1), round(max(times), 1)], "runs": len(times)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=8)
    ap.add_argument("--concurrent", type=int, default=32)
    ap.add_argument("--cases", default="gpus1,gpus8,gpus64,mig8x7,specdir")
    ap.add_argument("--toolkit", help="an assembled toolkit tree: its shim and hooks are timed")
    ap.add_argument("--no-save", action="store_true")
    ap.add_argument("--inner", help=argparse.SUPPRESS)
    opts = ap.parse_args()
    if opts.inner:
        print(json.dumps(inner(json.loads(opts.inner))))
        return 0
    if os.geteuid() != 0 or not shutil.which("runc") or not shutil.which("gcc"):
        print("scale_bench: needs root, runc and gcc", file=sys.stderr)
        return 2
    bindir = os.path.abspath(opts.toolkit) if opts.toolkit else BIN
    cases = opts.cases.split(",")
    base = Path(tempfile.mkdtemp(prefix="nct-scale-bench-"))
    results: dict = {}
    try:
        for name in [c for c in cases if c in NODES]:
            gpus, mig = NODES[name]
            results[name] = start_case(base, name, gpus, mig, opts, bindir, opts.concurrent if name == "gpus8" else 0)
            r = results[name]
            print(f"{name:8s} start {r['ms']:8.1f} ms  runc {r['runc_ms']:6.1f}  added {r['added_ms']:7.1f}  "
                  f"ratio {r['ratio']:.2f}  ({r['devices']} devices, spread {r['spread_ms']})", flush=True)
        if "specdir" in cases:
            for files in (1, 50, 200):
                r = results[f"specdir{files}"] = specdir_case(base, files, opts.runs)
                print(f"specdir{files:<4d} cdi-mode create {r['ms']:8.1f} ms  ({files} spec files, spread {r['spread_ms']})",
                      flush=True)
    finally:
        subprocess.run(["umount", "-R", str(base)], capture_output=True)
        shutil.rmtree(base, ignore_errors=True)
    c = results.get("gpus8", {}).get("concurrent")
    if c:
        print(f"{c['n']} at once (8 GPUs): {c['ok']}/{c['n']} succeeded in {c['wall_ms']:.0f} ms "
              f"({c['per_s']}/s, median {c['median_each_ms']} ms each)"
              + (f"; first failure: {c['failures'][0]}" if c["failures"] else ""))
    history = resultlog.load("scale")
    if history:
        prev = history[-1]["results"]
        for k, r in results.items():
            if k in prev and prev[k].get("ms"):
                print(f"  {k}: {prev[k]['ms']} -> {r['ms']} ms (x{r['ms'] / prev[k]['ms']:.2f})")
    if not opts.no_save:
        resultlog.append("scale", {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                                   "host": platform.node(), "cpus": os.cpu_count(), "runs": opts.runs,
                                   "toolkit": bool(opts.toolkit), "results": results})
    return 0 if not c or c["ok"] == c["n"] else 1


if __name__ == "__main__":
    sys.exit(main())
