#!/usr/bin/env python3
"""How much does the nvidia-container-runtime shim add to a pass-through runc call?

Creates one real busybox container with runc (own --root under a temp dir), then times
`runc state ID` directly and through the shim, alternating, many runs each; reports
medians, the added milliseconds and the ratio, for: no config.toml (built-in defaults),
the default config.toml present (what packages install), and the same through a
`python -IS` launcher instead of pip's console-script wrapper. A bare interpreter start
is timed alongside, to show how much of the cost is Python itself.

With --toolkit DIR (an assembled self-contained toolkit) it also times that toolkit's
launcher, whose fast path execs the low-level runtime without Python (issue 14), against
the same launcher with the fast path blocked (its cache replaced by a directory: what every
call cost before), both in front of real runc and of a `#!/bin/sh` stand-in that only exits
(so the shim's own cost is not hidden in runc's). Results are appended to
bench/results/runtime.json and compared with the previous entry. Stdlib only; root, runc and
busybox-static needed.

    python bench/runtime_passthrough.py [--runs 200] [--shim PATH] [--toolkit DIR] [--no-save]
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
DEFAULT_CONFIG = os.path.join(HERE, "..", "src", "nct", "config", "default.toml")


def make_bundle(base: str) -> str:
    rootfs = os.path.join(base, "rootfs")
    for d in ("bin", "proc", "sys", "dev", "tmp", "etc"):
        os.makedirs(os.path.join(rootfs, d), exist_ok=True)
    busybox = shutil.which("busybox") or "/bin/busybox"
    shutil.copy2(busybox, os.path.join(rootfs, "bin/busybox"))
    for applet in ("sh", "sleep"):
        os.symlink("busybox", os.path.join(rootfs, "bin", applet))
    bundle = os.path.join(base, "bundle")
    os.makedirs(bundle)
    subprocess.run(["runc", "spec", "--bundle", bundle], check=True)
    path = os.path.join(bundle, "config.json")
    with open(path) as f:
        spec = json.load(f)
    spec["root"] = {"path": rootfs, "readonly": True}
    spec["process"]["terminal"] = False
    spec["process"]["args"] = ["/bin/sleep", "600"]
    with open(path, "w") as f:
        json.dump(spec, f)
    return bundle


def time_runs(cmd: list[str], env: dict, runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        out.append((time.perf_counter() - t0) * 1000.0)
    return out


def interpreter(script: str) -> list[str]:
    """The shim script's #! line as argv (to time a bare interpreter start)."""
    with open(script, "rb") as f:
        first = f.readline().decode(errors="replace").strip()
    return first[2:].split() if first.startswith("#!") else [sys.executable]


def make_fast_launcher(shim: str, base: str) -> str:
    """What a packaged launcher could be: `python -IS` (no site, no user paths, no `re`
    import as in pip's console-script wrapper) calling the same entry point."""
    interp = interpreter(shim)[0]
    where = subprocess.run([interp, "-c", "import nct, os; print(os.path.dirname(os.path.dirname(nct.__file__)))"],
                           capture_output=True, text=True, check=True).stdout.strip()
    path = os.path.join(base, "nvidia-container-runtime")
    with open(path, "w") as f:
        f.write(f"#!{interp} -IS\nimport sys\nsys.path.insert(0, {where!r})\n"
                "from nct.runtime.main import main\nsys.exit(main())\n")
    os.chmod(path, 0o755)
    return path


def measure(runc: str, shim: str, root: str, cid: str, env: dict, runs: int) -> dict:
    plain: list[float] = []
    shimmed: list[float] = []
    bare: list[float] = []
    python = interpreter(shim) + ["-c", "pass"]
    # alternate in small batches so drift on the machine hits every side equally
    for _ in range(max(1, runs // 10)):
        plain += time_runs([runc, "--root", root, "state", cid], env, 10)
        shimmed += time_runs([shim, "--root", root, "state", cid], env, 10)
        bare += time_runs(python, env, 10)
    p, s, b = statistics.median(plain), statistics.median(shimmed), statistics.median(bare)
    return {"runc_ms": round(p, 3), "shim_ms": round(s, 3), "added_ms": round(s - p, 3),
            "ratio": round(s / p, 3), "python_start_ms": round(b, 3),
            "shim_own_ms": round(s - p - b, 3), "runs": len(plain)}


def measure_pair(direct: list[str], shim: list[str], env: dict, runs: int) -> tuple[float, float, int]:
    """Medians of `direct` and `shim`, alternated in batches of 10."""
    a: list[float] = []
    b: list[float] = []
    for _ in range(max(1, runs // 10)):
        a += time_runs(direct, env, 10)
        b += time_runs(shim, env, 10)
    return statistics.median(a), statistics.median(b), len(a)


def measure_toolkit(tree: str, runc: str, root: str, cid: str, base: str, runs: int) -> dict:
    """The toolkit launcher's pass-through: fast path and (blocked) Python path, in front of
    real runc and of a #!/bin/sh stand-in."""
    shim = os.path.join(tree, "nvidia-container-runtime")
    cache = os.path.join(tree, "python", ".passthrough-cache")
    standin = os.path.join(base, "standin", "runc")
    os.makedirs(os.path.dirname(standin))
    with open(standin, "w") as f:
        f.write("#!/bin/sh\nexit 0\n")
    os.chmod(standin, 0o755)
    with open(DEFAULT_CONFIG) as f:
        default = f.read()
    out = {}
    for label, runtime in (("sh_standin", standin), ("runc", runc)):
        xdg = os.path.join(base, "xdg-" + label)
        os.makedirs(os.path.join(xdg, "nvidia-container-runtime"))
        with open(os.path.join(xdg, "nvidia-container-runtime", "config.toml"), "w") as f:
            f.write(default.replace('runtimes = ["runc", "crun"]', f'runtimes = ["{runtime}"]'))
        env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "XDG_CONFIG_HOME": xdg}
        args = ["--root", root, "state", cid]
        if os.path.isdir(cache):
            os.rmdir(cache)
        time_runs([shim, *args], env, 3)  # Python's pass-through writes the cache
        if not os.path.isfile(cache):
            raise SystemExit(f"{tree}: the shim wrote no pass-through cache")
        d, fast, n = measure_pair([runtime, *args], [shim, *args], env, runs)
        os.unlink(cache)
        os.mkdir(cache)  # blocks the fast path: Python cannot replace a directory
        try:
            d2, slow, _ = measure_pair([runtime, *args], [shim, *args], env, runs)
        finally:
            os.rmdir(cache)
        out["toolkit_" + label] = {
            "direct_ms": round(d, 3), "fast_ms": round(fast, 3), "fast_added_ms": round(fast - d, 3),
            "fast_ratio": round(fast / d, 3), "python_direct_ms": round(d2, 3), "python_ms": round(slow, 3),
            "python_added_ms": round(slow - d2, 3), "python_ratio": round(slow / d2, 3), "runs": n,
            # the common keys the other cases have (runc_ms/shim_ms/added_ms/ratio): the fast path
            "runc_ms": round(d, 3), "shim_ms": round(fast, 3), "added_ms": round(fast - d, 3),
            "ratio": round(fast / d, 3)}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=200)
    here = os.path.join(os.path.dirname(sys.executable), "nvidia-container-runtime")
    ap.add_argument("--shim", default=here if os.path.exists(here) else shutil.which("nvidia-container-runtime"),
                    help="the shim to time (default: the one of the Python running this script)")
    ap.add_argument("--toolkit", help="also time this self-contained toolkit's launcher (fast and Python paths)")
    ap.add_argument("--no-save", action="store_true")
    opts = ap.parse_args()
    runc = shutil.which("runc")
    if os.geteuid() != 0 or not runc or not os.path.exists(opts.shim):
        print("needs root, runc and the installed shim", file=sys.stderr)
        return 2
    base = tempfile.mkdtemp(prefix="nct-bench-")
    root = os.path.join(base, "runc-root")
    cid = f"nct-bench-{os.getpid()}"
    results: dict = {}
    try:
        bundle = make_bundle(base)
        subprocess.run([runc, "--root", root, "create", "--bundle", bundle, cid], check=True,
                       stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        xdg = os.path.join(base, "xdg")
        os.makedirs(os.path.join(xdg, "nvidia-container-runtime"))
        # bytecode caching on, as in an installed package (first run writes the .pyc files)
        env = {k: v for k, v in os.environ.items()
               if k not in ("NVIDIA_CTK_CONFIG_FILE_PATH", "PYTHONDONTWRITEBYTECODE")}
        env["XDG_CONFIG_HOME"] = xdg
        time_runs([opts.shim, "--root", root, "state", cid], env, 3)
        results["no_config"] = measure(runc, opts.shim, root, cid, env, opts.runs)
        shutil.copy(DEFAULT_CONFIG, os.path.join(xdg, "nvidia-container-runtime", "config.toml"))
        results["default_config"] = measure(runc, opts.shim, root, cid, env, opts.runs)
        launcher = make_fast_launcher(opts.shim, base)
        time_runs([launcher, "--root", root, "state", cid], env, 3)
        results["default_config_isolated_launcher"] = measure(runc, launcher, root, cid, env, opts.runs)
        if opts.toolkit:
            results.update(measure_toolkit(os.path.abspath(opts.toolkit), runc, root, cid, base, opts.runs))
    finally:
        subprocess.run([runc, "--root", root, "delete", "--force", cid],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        shutil.rmtree(base, ignore_errors=True)

    history = resultlog.load("runtime", "runtime_passthrough")
    previous = history[-1] if history else None
    for case, r in results.items():
        if case.startswith("toolkit_"):
            line = (f"{case:33s} direct {r['direct_ms']:6.2f} ms  fast path {r['fast_ms']:6.2f} ms "
                    f"({r['fast_added_ms']:+.2f}, {r['fast_ratio']:.2f}x)  python path {r['python_ms']:6.2f} ms "
                    f"({r['python_added_ms']:+.2f}, {r['python_ratio']:.2f}x)")
            if previous and case in previous.get("results", {}):
                line += f"  (previous fast +{previous['results'][case]['fast_added_ms']:.2f} ms)"
            print(line)
            continue
        line = (f"{case:33s} runc {r['runc_ms']:7.2f} ms  shim {r['shim_ms']:7.2f} ms  "
                f"added {r['added_ms']:6.2f} ms  ratio {r['ratio']:.2f}x  "
                f"[python start {r['python_start_ms']:.2f} ms, shim code {r['shim_own_ms']:.2f} ms]")
        if previous and case in previous.get("results", {}):
            prev = previous["results"][case]
            line += f"  (previous ratio {prev['ratio']:.2f}x, now {r['ratio'] / prev['ratio']:.2f} of it)"
        print(line)
    if not opts.no_save:
        entry = {"time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "python": sys.version.split()[0],
                 "shim": opts.shim, "results": results}
        resultlog.append("runtime", entry, "runtime_passthrough", keep=20)
    return 0


if __name__ == "__main__":
    sys.exit(main())
