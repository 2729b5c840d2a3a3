#!/usr/bin/env python3
"""What does GPU injection by our prestart hook add to `runc run`?

On a simulated 8-GPU node, runs the same busybox bundle (`true`) with runc many times,
alternating: without hooks, and with our nvidia-container-runtime-hook as a prestart hook
and NVIDIA_VISIBLE_DEVICES=all (all 8 GPUs, compute+utility: ~40 mounts and an ldconfig
run), reading the default config.toml as on an installed node. Prints the medians, the added milliseconds and the ratio; saves to
bench/results/hook.json (a list, newest last) and prints the ratio to the previous entry.
runc runs inside `nct sim run NODE` (one namespace for all runs), as in the e2e tests.
Needs root, runc, gcc and busybox-static.  --toolkit DIR (repeatable) adds the same GPU
container through an assembled toolkit's hook launcher (packaging/toolkit/assemble.py).

    python bench/hook_bench.py [--runs 30] [--gpus 8] [--toolkit DIR ...] [--no-save]
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
import uuid

import resultlog  # bench/resultlog.py

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
BIN = os.path.dirname(sys.executable)
HOOK = os.path.join(BIN, "nvidia-container-runtime-hook")


def installed_launcher(base: str, python: str) -> str:
    """The hook as `nct install` and the Debian package install it: a `python -IS` wrapper
    (nct.engines.bundle.WRAPPER) instead of pip's console-script wrapper."""
    import sysconfig

    import nct
    from nct.engines.bundle import WRAPPER

    path = os.path.join(base, "nvidia-container-runtime-hook")
    with open(path, "w") as f:
        f.write(WRAPPER.format(python=python, name="nvidia-container-runtime-hook",
                               lib=os.path.dirname(os.path.dirname(nct.__file__)),
                               env=f"sys.path.append({sysconfig.get_paths()['purelib']!r})\n",
                               module="nct.hook.main", func="main"))
    os.chmod(path, 0o755)
    return path


def _bundles(base: str, toolkits: list[str], python: str) -> dict[str, str]:
    sys.path.insert(0, os.path.join(REPO, "tests"))
    from pathlib import Path

    from e2e import rootfs as R

    installed = installed_launcher(base, python)
    # the default config.toml, as on an installed node (/etc/nvidia-container-runtime/config.toml)
    args = ["nvidia-container-runtime-hook", "-config", os.path.join(REPO, "config", "config.toml"), "prestart"]
    out = {}
    for name, hooks, env in (
        ("plain", None, []),
        ("gpu", {"prestart": [{"path": HOOK, "args": args}]}, ["NVIDIA_VISIBLE_DEVICES=all"]),
        ("gpu_installed", {"prestart": [{"path": installed, "args": args}]}, ["NVIDIA_VISIBLE_DEVICES=all"]),
        *((f"gpu_toolkit{i}", {"prestart": [{"path": os.path.join(os.path.abspath(tk), "nvidia-container-runtime-hook"),
                                             "args": args}]}, ["NVIDIA_VISIBLE_DEVICES=all"])
          for i, tk in enumerate(toolkits)),
    ):
        b = Path(base) / name
        rootfs = R.make_rootfs(b / "rootfs")
        R.make_bundle(b, rootfs, ["true"], env, hooks=hooks)
        out[name] = str(b)
    return out


def inner(bundles: dict[str, str], runs: int) -> dict[str, list[float]]:
    """Inside the node's namespace: alternate the bundles, wall time of each `runc run`."""
    times: dict[str, list[float]] = {k: [] for k in bundles}
    # `nct sim run` has just set the node up: its files are too new for the node snapshot
    # for RACY_SECONDS (nct.hostcache); a real node's driver tree is older than that
    time.sleep(2.5)
    names = list(bundles)
    for i in range(runs + 2):  # the first rounds warm caches and are dropped
        # rotate the order each round: a run is a little slower right after a GPU run, and a
        # fixed order would hand that cost to the same bundle every time
        k = i % len(names)
        for name in names[k:] + names[:k]:
            bundle = bundles[name]
            cid = f"nct-bench-{uuid.uuid4().hex[:8]}"
            t0 = time.perf_counter()
            r = subprocess.run(["runc", "run", "--bundle", bundle, cid], capture_output=True)
            dt = (time.perf_counter() - t0) * 1000
            if r.returncode != 0:
                raise SystemExit(f"runc run ({name}) failed: {r.stderr.decode().strip()}")
            if i >= 2:
                times[name].append(dt)
    return times


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--python", default=sys.executable,
                    help="interpreter of the installed (python -IS) hook (default: this one; e.g. /usr/bin/python3.11)")
    ap.add_argument("--toolkit", action="append", default=[], help="an assembled toolkit tree (repeatable)")
    ap.add_argument("--no-save", action="store_true")
    ap.add_argument("--inner", help=argparse.SUPPRESS)
    opts = ap.parse_args()
    if opts.inner:
        print(json.dumps(inner(json.loads(opts.inner), opts.runs)))
        return 0
    if os.geteuid() != 0 or not shutil.which("runc"):
        print("hook_bench: needs root and runc", file=sys.stderr)
        return 2
    base = tempfile.mkdtemp(prefix="nct-hook-bench-")
    try:
        node = os.path.join(base, "node")
        subprocess.run([os.path.join(BIN, "nct"), "sim", "create", node, "--gpus", str(opts.gpus)], check=True,
                       capture_output=True)
        # a node's driver files are not brand new: the host caches skip files modified in
        # the last seconds (nct.hostcache.RACY_SECONDS), so wait that out before timing
        time.sleep(2.5)
        bundles = _bundles(base, opts.toolkit, opts.python)
        r = subprocess.run([os.path.join(BIN, "nct"), "sim", "run", node, "--", sys.executable, __file__,
                            "--runs", str(opts.runs), "--inner", json.dumps(bundles)], capture_output=True, text=True)
        if r.returncode != 0:
            print(r.stderr.strip(), file=sys.stderr)
            return 1
        times = json.loads(r.stdout)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    plain = statistics.median(times["plain"])
    gpu = statistics.median(times["gpu"])
    inst = statistics.median(times["gpu_installed"])
    now = {"plain_ms": round(plain, 1), "gpu_ms": round(gpu, 1), "added_ms": round(gpu - plain, 1),
           "ratio": round(gpu / plain, 2), "installed_gpu_ms": round(inst, 1),
           "installed_added_ms": round(inst - plain, 1), "installed_ratio": round(inst / plain, 2)}
    print(f"runc run, {opts.gpus} GPUs, {opts.runs} runs each (medians):")
    print(f"  without GPUs   {now['plain_ms']:8.1f} ms")
    print(f"  with our hook  {now['gpu_ms']:8.1f} ms   (NVIDIA_VISIBLE_DEVICES=all, pip's console script)")
    print(f"  added          {now['added_ms']:8.1f} ms   ratio {now['ratio']:.2f}")
    print(f"  installed hook {now['installed_gpu_ms']:8.1f} ms   (python -IS wrapper, as nct install / the .deb)")
    print(f"  added          {now['installed_added_ms']:8.1f} ms   ratio {now['installed_ratio']:.2f}")
    for i, tk in enumerate(opts.toolkit):
        med = statistics.median(times[f"gpu_toolkit{i}"])
        now[f"toolkit{i}_gpu_ms"] = round(med, 1)
        print(f"  toolkit hook   {med:8.1f} ms   added {med - plain:.1f} ms  ({tk})")
    history = resultlog.load("hook")
    if history:
        prev = history[-1]["results"]
        print(f"vs previous ({history[-1]['date']}): added {prev['added_ms']} -> {now['added_ms']} ms "
              f"(ratio {now['added_ms'] / prev['added_ms']:.2f})" if prev.get("added_ms") else "vs previous: n/a")
    if not opts.no_save:
        resultlog.append("hook", {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                                  "host": platform.node(), "cpus": os.cpu_count(), "gpus": opts.gpus,
                                  "runs": opts.runs, "results": now})
    return 0


if __name__ == "__main__":
    sys.exit(main())
