#!/usr/bin/env python3
"""What does a GPU container start cost end to end in jit-cdi mode, and how many can start
at once?  On a simulated node (default 8 GPUs), inside `nct sim run NODE`, it times the
engine-style sequence `create --bundle B ID; start ID; state ID until stopped; delete ID`
of a busybox+glibc bundle running `true`:
  plain    plain runc, no GPU
  jitcdi   through the runtime shim (mode = "jit-cdi", NVIDIA_VISIBLE_DEVICES=all,
           compute,utility): the shim's create, the CDI hooks in the spec, and every other
           step through the shim's pass-through
alternating, medians; then N (default 32) jit-cdi starts at once (threads), each its own
bundle and rootfs: whether all succeeded, the wall time and the throughput. The shim is the
assembled toolkit's with --toolkit DIR (as users install it), else this venv's.
Results go to bench/results/start.json (newest last) and are compared with the previous
entry. Needs root, runc, gcc (nct sim) and busybox-static.
    python bench/start_bench.py [--runs 10] [--gpus 8] [--concurrent 32] [--toolkit DIR] [--no-save]
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
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import resultlog  # bench/resultlog.py

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
BIN = os.path.dirname(sys.executable)
GPU_ENV = ["NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_DRIVER_CAPABILITIES=compute,utility"]


def sequence(runtime: str, root: str, bundle: str, env: dict) -> float:
    """One engine-style container life; milliseconds. Raises on any failure."""
    cid = "nct-start-" + uuid.uuid4().hex[:10]
    t0 = time.perf_counter()

    def step(*args: str) -> str:
        r = subprocess.run([runtime, "--root", root, *args], env=env, capture_output=True, text=True,
                           stdin=subprocess.DEVNULL)
        if r.returncode != 0:
            raise RuntimeError(f"{os.path.basename(runtime)} {args[0]} failed: {r.stderr.strip()[-400:]}")
        return r.stdout

    # create's stdio stays with the container: files, not pipes
    with open(os.path.join(bundle, "create.log"), "w") as log:
        r = subprocess.run([runtime, "--root", root, "create", "--bundle", bundle, cid], env=env,
                           stdin=subprocess.DEVNULL, stdout=log, stderr=log)
    if r.returncode != 0:
        raise RuntimeError(f"create failed: {open(os.path.join(bundle, 'create.log')).read()[-400:]}")
    step("start", cid)
    while '"stopped"' not in step("state", cid):
        time.sleep(0.002)
    step("delete", cid)
    return (time.perf_counter() - t0) * 1000.0


def inner(plan: dict) -> dict:
    """Inside the node's namespace."""
    env = dict(os.environ)
    env.update(plan["env"])
    root = plan["root"]
    out: dict = {"plain": [], "jitcdi": []}
    template = Path(plan["jit_config"]).read_text()
    for i in range(plan["runs"] + 1):  # the first round warms caches and is dropped
        for name in (("plain", "jitcdi") if i % 2 else ("jitcdi", "plain")):
            if name == "jitcdi":
                Path(plan["jit_bundle"], "config.json").write_text(template)  # the shim rewrote it
                ms = sequence(plan["shim"], root, plan["jit_bundle"], env)
            else:
                ms = sequence("runc", root, plan["plain_bundle"], env)
            if i:
                out[name].append(ms)
    failures: list[str] = []

    def one(bundle: str) -> float | None:
        try:
            return sequence(plan["shim"], root, bundle, env)
        except Exception as e:  # counted, reported
            failures.append(str(e))
            return None

    t0 = time.perf_counter()
    with ThreadPoolExecutor(len(plan["many"])) as pool:
        each = list(pool.map(one, plan["many"]))
    wall = time.perf_counter() - t0
    out["concurrent"] = {"n": len(plan["many"]), "ok": sum(1 for x in each if x is not None),
                         "wall_s": round(wall, 3), "wall_ms": round(wall * 1000, 1), "per_s": round(len(plan["many"]) / wall, 2),
                         "median_each_ms": round(statistics.median([x for x in each if x is not None] or [0]), 1),
                         "failures": failures[:3]}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--concurrent", type=int, default=32)
    ap.add_argument("--toolkit", help="an assembled toolkit tree: its shim and hooks are timed")
    ap.add_argument("--no-save", action="store_true")
    ap.add_argument("--inner", help=argparse.SUPPRESS)
    opts = ap.parse_args()
    if opts.inner:
        print(json.dumps(inner(json.loads(opts.inner))))
        return 0
    if os.geteuid() != 0 or not shutil.which("runc") or not shutil.which("gcc"):
        print("start_bench: needs root, runc and gcc", file=sys.stderr)
        return 2
    sys.path.insert(0, os.path.join(REPO, "tests"))
    from e2e import rootfs as R

    bindir = os.path.abspath(opts.toolkit) if opts.toolkit else BIN
    base = Path(tempfile.mkdtemp(prefix="nct-start-bench-"))
    try:
        node = base / "node"
        subprocess.run([os.path.join(BIN, "nct"), "sim", "create", str(node), "--gpus", str(opts.gpus)], check=True,
                       capture_output=True)
        time.sleep(2.5)  # past the host caches' "racily new" window (nct.hostcache)
        config = base / "config.toml"
        config.write_text('[nvidia-container-runtime]\nmode = "jit-cdi"\nruntimes = ["runc"]\n')
        plain = R.make_bundle(base / "plain", R.make_rootfs(base / "plain/rootfs"), ["true"])
        jit = R.make_bundle(base / "jit", R.make_rootfs(base / "jit/rootfs"), ["true"], GPU_ENV)
        many = [str(R.make_bundle(base / f"many{i}", R.make_rootfs(base / f"many{i}/rootfs"), ["true"], GPU_ENV))
                for i in range(opts.concurrent)]
        plan = {"runs": opts.runs, "root": str(base / "runc-root"), "shim": os.path.join(bindir, "nvidia-container-runtime"),
                "plain_bundle": str(plain), "jit_bundle": str(jit), "jit_config": str(base / "jit.json"),
                "many": many,
                "env": {"NVIDIA_CTK_CONFIG_FILE_PATH": str(config), "PATH": f"{bindir}:/usr/sbin:/usr/bin:/sbin:/bin",
                        "XDG_RUNTIME_DIR": str(base)}}
        shutil.copy(jit / "config.json", base / "jit.json")
        r = subprocess.run([os.path.join(BIN, "nct"), "sim", "run", str(node), "--", sys.executable, __file__,
                            "--inner", json.dumps(plan)], capture_output=True, text=True)
        if r.returncode != 0:
            print(r.stderr.strip()[-2000:], file=sys.stderr)
            return 1
        times = json.loads(r.stdout)
    finally:
        subprocess.run(["umount", "-R", str(base)], capture_output=True)
        shutil.rmtree(base, ignore_errors=True)
    p, j = statistics.median(times["plain"]), statistics.median(times["jitcdi"])
    now = {"plain_ms": round(p, 1), "jitcdi_ms": round(j, 1), "added_ms": round(j - p, 1), "ratio": round(j / p, 2),
           "concurrent": times["concurrent"]}
    c = now["concurrent"]
    print(f"container start, {opts.gpus} GPUs, {opts.runs} runs each (medians, {os.path.basename(bindir)} shim):")
    print(f"  plain runc        {p:8.1f} ms")
    print(f"  jit-cdi, all GPUs {j:8.1f} ms   added {j - p:.1f} ms  ratio {j / p:.2f}")
    print(f"  {c['n']} at once: {c['ok']}/{c['n']} succeeded in {c['wall_s']} s ({c['per_s']}/s, "
          f"median {c['median_each_ms']} ms each)" + (f"; first failure: {c['failures'][0]}" if c["failures"] else ""))
    history = resultlog.load("start")
    if history:
        prev = history[-1]["results"]
        print(f"vs previous ({history[-1]['date']}): added {prev['added_ms']} -> {now['added_ms']} ms")
    if not opts.no_save:
        resultlog.append("start", {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                                   "host": platform.node(), "cpus": os.cpu_count(), "gpus": opts.gpus,
                                   "runs": opts.runs, "toolkit": bool(opts.toolkit), "results": now})
    return 0 if c["ok"] == c["n"] else 1


if __name__ == "__main__":
    sys.exit(main())
