#!/usr/bin/env python3
"""How long do CDI generation, injection and checking take as nodes grow?

On simulated nodes with 1, 8 and 64 GPUs and 8 GPUs x 7 MIG devices (made under a temp
dir, read without a namespace) it times, as medians in milliseconds:
  discover   discover_node() on the node (procfs, /dev, ld.so.cache, ELF checks, NVML), a full
             pass (the node snapshot of nct.driver.snapshot left out); discover_snap: the same
             with a valid snapshot (what every discovery after the first does on a quiet node);
             discover_nonvml, discover_nonvml_snap: both without NVML, as the prestart hook
             and the runtime's create discover
  generate   generate_spec() from an already discovered node (planner + render + checks)
  cli        `nvidia-ctk cdi generate --output FILE` end to end (a fresh process)
  inject     Registry load of the spec + injecting `all` into a runc-made OCI spec
and, for spec dirs of 1, 50 and 200 files (8-GPU specs, half JSON, half YAML; results
specdir1, specdir50, specdir200):
  registry   Registry() over the dir (strict load of every file)
  check      `nct cdi check --spec-dir DIR` end to end
Results go to bench/results/cdi.json (a list; the newest last) and are compared with the
previous entry (ratio = now / before). Needs root and gcc (nct sim); runc for `inject`.

    python bench/cdi_bench.py [--runs 15] [--no-save]
"""

from __future__ import annotations

import argparse
import copy
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

import resultlog  # bench/resultlog.py

HERE = os.path.dirname(os.path.abspath(__file__))
VENV_BIN = os.path.dirname(sys.executable)
SHAPES = {"1gpu": dict(gpus=1), "8gpu": dict(gpus=8), "64gpu": dict(gpus=64), "8gpu-7mig": dict(gpus=8, mig="7")}


def median_ms(fn, runs: int) -> float:
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1000.0)
    return round(statistics.median(out), 2)


class no_snapshot:
    """`with no_snapshot():` discovery makes its full pass every time (nct.driver.snapshot)."""

    def __enter__(self) -> None:
        from nct.driver import snapshot

        self._real = snapshot.tree_files
        snapshot.tree_files = lambda *args: args[-1]()  # compute(): the full pass

    def __exit__(self, *exc) -> None:
        from nct.driver import snapshot

        snapshot.tree_files = self._real


def node_env(node) -> dict:
    env = dict(os.environ, NCT_PROC_ROOT=os.path.join(node.root, "proc"),
               NVIDIA_CTK_CONFIG_FILE_PATH=os.path.join(node.dir, "no-config.toml"))
    for k in ("NCT_SIM_ROOT", "NVIDIA_CTK_DRIVER_ROOT", "NVIDIA_CTK_DEV_ROOT", "NVIDIA_CTK_CDI_OUTPUT_FILE_PATH",
              "PYTHONDONTWRITEBYTECODE"):  # commands run as installed: .pyc files written and used
        env.pop(k, None)
    return env


def bench_shape(node, base: str, runs: int, oci: dict | None) -> tuple[dict, dict]:
    from nct.cdi.generate import GenerateOptions, discover_for_generate, generate_spec, roots_for
    from nct.cdi.registry import Registry
    from nct.config.model import Config

    os.environ.update(node_env(node))
    os.environ.pop("NCT_SIM_ROOT", None)
    roots = roots_for(node.root, None)
    hook = os.path.join(VENV_BIN, "nvidia-cdi-hook")
    discovered = discover_for_generate(roots)
    opts = GenerateOptions(driver_root=node.root, hook_path=hook)
    spec = generate_spec(opts, node=discovered, cfg=Config())
    out: dict = {"devices": len(spec["devices"])}
    from nct.driver.discover import discover_node

    for name, fn in (("discover", lambda: discover_for_generate(roots)),
                     ("discover_nonvml", lambda: discover_node(roots, use_nvml=False))):
        with no_snapshot():
            out[f"{name}_ms"] = median_ms(fn, runs)
        fn()  # (the snapshot is made)
        out[f"{name}_snap_ms"] = median_ms(fn, runs)
    out["generate_ms"] = median_ms(lambda: generate_spec(opts, node=discovered, cfg=Config()), runs)
    target = os.path.join(base, f"spec-{len(spec['devices'])}.json")
    cli = [os.path.join(VENV_BIN, "nvidia-ctk"), "--quiet", "cdi", "generate", "--driver-root", node.root,
           "--nvidia-cdi-hook-path", hook, "--output", target]
    env = node_env(node)
    out["cli_ms"] = median_ms(lambda: subprocess.run(cli, env=env, check=True), max(3, runs // 3))
    out["spec_bytes"] = os.path.getsize(target)
    if oci is not None:
        spec_dir = os.path.join(base, f"dir-{len(spec['devices'])}")
        os.makedirs(spec_dir)
        shutil.copy2(target, spec_dir)
        out["inject_ms"] = median_ms(lambda: Registry([spec_dir]).inject(copy.deepcopy(oci), ["nvidia.com/gpu=all"]),
                                     runs)
    return out, spec


def bench_dir(node, spec: dict, base: str, runs: int, files: int = 200) -> dict:
    from nct.cdi.registry import Registry
    from nct.cdi.spec import dump_spec

    d = os.path.join(base, f"dir{files}")
    os.makedirs(d)
    for i in range(files):
        fmt = "json" if i % 2 else "yaml"
        with open(os.path.join(d, f"node{i:03d}.{fmt}"), "w") as f:
            f.write(dump_spec(dict(spec, kind=f"node{i:03d}.nvidia.com/gpu"), fmt))
    reg = Registry([d])
    assert not reg.errors and len(reg.specs) == files, reg.errors[:3]
    check = [os.path.join(VENV_BIN, "nct"), "cdi", "check", "--spec-dir", d, "--driver-root", node.root]
    env = node_env(node)
    return {
        "files": files,
        "registry_ms": median_ms(lambda: Registry([d]), max(3, runs // 3)),
        "check_ms": median_ms(lambda: subprocess.run(check, env=env, check=True, stderr=subprocess.DEVNULL), max(3, runs // 5)),
    }


def runc_spec(base: str) -> dict | None:
    if shutil.which("runc") is None:
        return None
    d = os.path.join(base, "oci")
    os.makedirs(d)
    subprocess.run(["runc", "spec", "--bundle", d], check=True)
    with open(os.path.join(d, "config.json")) as f:
        return json.load(f)


def compare(prev: dict, now: dict, prefix: str = "") -> list[str]:
    lines = []
    for k, v in now.items():
        if isinstance(v, dict):
            lines += compare(prev.get(k) or {}, v, f"{prefix}{k}.")
        elif k.endswith("_ms") and isinstance(prev.get(k), (int, float)) and prev[k] > 0:
            lines.append(f"  {prefix}{k}: {prev[k]} -> {v} ms (ratio {v / prev[k]:.2f})")
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--no-save", action="store_true")
    opts = ap.parse_args()
    if os.geteuid() != 0 or shutil.which("gcc") is None:
        print("needs root and gcc (simulated nodes)", file=sys.stderr)
        return 2
    sys.path.insert(0, os.path.join(HERE, "..", "src"))
    from nct.sim.node import create_node

    base = tempfile.mkdtemp(prefix="nct-cdi-bench-")
    results: dict = {}
    try:
        oci = runc_spec(base)
        eight = None
        for name, kw in SHAPES.items():
            node = create_node(os.path.join(base, name), **kw)
            time.sleep(2.5)  # past the host caches' "racily new" window (nct.hostcache), as on a node
            results[name], spec = bench_shape(node, base, opts.runs, oci)
            if name == "8gpu":
                eight = (node, spec)
            print(f"{name:10s} " + "  ".join(f"{k}={v}" for k, v in results[name].items()), flush=True)
        for files in (1, 50, 200):
            key = f"specdir{files}"
            results[key] = bench_dir(eight[0], eight[1], base, opts.runs, files)
            print(f"{key:10s} " + "  ".join(f"{k}={v}" for k, v in results[key].items()), flush=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    entry = {"when": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
             "host": platform.node(), "cpus": os.cpu_count(), "python": platform.python_version(),
             "runs": opts.runs, "results": results}
    history = resultlog.load("cdi")
    if history:
        print(f"compared with {history[-1].get('when')}:")
        print("\n".join(compare(history[-1].get("results", {}), results)) or "  (nothing comparable)")
    if not opts.no_save:
        print(f"saved to {os.path.relpath(resultlog.append('cdi', entry))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
