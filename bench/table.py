#!/usr/bin/env python3
"""One table of the saved benchmark results (bench/results/*.json), newest run of each
against plain runc and against the run before it.  bench/run_all.sh prints it last;
docs/bench.md explains the columns.  Reads only the saved files: run it any time.

    python bench/table.py [--markdown]
"""

from __future__ import annotations

import argparse
import sys

import resultlog  # bench/resultlog.py

# (file, key inside it or None): where each benchmark keeps its runs
PASS = ("runtime", "runtime_passthrough")
CREATE = ("runtime", "runtime_create")
HOOK = ("hook", None)
CDI = ("cdi", None)
START = ("toolkit", "toolkit_startup")
GPU_START = ("start", None)
SCALE = ("scale", None)

# Rows: (section, label, source, path to the value, path to the plain-runc value or None,
# scale group or None).  A path is a tuple of keys into the saved entry.  In a scale group,
# the "scale" column is the value over the group's first row; the label says how much bigger
# the input is, so linear means scale <= that factor.
R = ("results",)
ROWS: list[tuple] = [
    ("pass-through (state)", "toolkit fast path -> runc", PASS, R + ("toolkit_runc", "fast_ms"),
     R + ("toolkit_runc", "direct_ms"), None),
    ("pass-through (state)", "toolkit fast path -> #!/bin/sh stand-in", PASS, R + ("toolkit_sh_standin", "fast_ms"),
     R + ("toolkit_sh_standin", "direct_ms"), None),
    ("pass-through (state)", "toolkit Python path -> runc (before)", PASS, R + ("toolkit_runc", "python_ms"),
     R + ("toolkit_runc", "python_direct_ms"), None),
    ("pass-through (state)", "toolkit Python path -> #!/bin/sh (before)", PASS,
     R + ("toolkit_sh_standin", "python_ms"), R + ("toolkit_sh_standin", "python_direct_ms"), None),
    ("pass-through (state)", "venv shim, default config.toml", PASS, R + ("default_config", "shim_ms"),
     R + ("default_config", "runc_ms"), None),
    ("start-up", "toolkit shim state (toolkit_startup)", START, ("results_ms", "toolkit_state"),
     ("results_ms", "runc_state"), None),
    ("legacy prestart hook, 8 GPUs", "runc run + hook (venv)", HOOK, R + ("gpu_ms",), R + ("plain_ms",), None),
    ("legacy prestart hook, 8 GPUs", "runc run + hook (python -IS launcher)", HOOK, R + ("installed_gpu_ms",),
     R + ("plain_ms",), None),
    ("legacy prestart hook, 8 GPUs", "runc run + hook (toolkit)", HOOK, R + ("toolkit0_gpu_ms",), R + ("plain_ms",),
     None),
    ("jit-cdi shim create (runtime /bin/true)", "1 GPU, all", CREATE, R + ("gpus1_all", "median_ms"), None, "create"),
    ("jit-cdi shim create (runtime /bin/true)", "8 GPUs, all (x8)", CREATE, R + ("gpus8_all", "median_ms"), None,
     "create"),
    ("jit-cdi shim create (runtime /bin/true)", "64 GPUs, all (x64)", CREATE, R + ("gpus64_all", "median_ms"), None,
     "create"),
    ("CDI generate (in process)", "1 GPU", CDI, R + ("1gpu", "generate_ms"), None, "gen"),
    ("CDI generate (in process)", "8 GPUs (x8)", CDI, R + ("8gpu", "generate_ms"), None, "gen"),
    ("CDI generate (in process)", "64 GPUs (x64)", CDI, R + ("64gpu", "generate_ms"), None, "gen"),
    ("CDI generate (in process)", "8 GPUs x 7 MIG (113 devices)", CDI, R + ("8gpu-7mig", "generate_ms"), None, None),
    ("CDI inject (registry + edits)", "1 GPU", CDI, R + ("1gpu", "inject_ms"), None, "inj"),
    ("CDI inject (registry + edits)", "8 GPUs (x8)", CDI, R + ("8gpu", "inject_ms"), None, "inj"),
    ("CDI inject (registry + edits)", "64 GPUs (x64)", CDI, R + ("64gpu", "inject_ms"), None, "inj"),
    ("CDI inject (registry + edits)", "8 GPUs x 7 MIG", CDI, R + ("8gpu-7mig", "inject_ms"), None, None),
    ("CDI spec dir load (Registry)", "1 file", CDI, R + ("specdir1", "registry_ms"), None, "dir"),
    ("CDI spec dir load (Registry)", "50 files (x50)", CDI, R + ("specdir50", "registry_ms"), None, "dir"),
    ("CDI spec dir load (Registry)", "200 files (x200)", CDI, R + ("specdir200", "registry_ms"), None, "dir"),
    ("GPU container start, jit-cdi, 8 GPUs (start_bench)", "create/start/state/delete", GPU_START,
     R + ("jitcdi_ms",), R + ("plain_ms",), None),
    ("GPU container start, jit-cdi, 8 GPUs (start_bench)", "{n} at once: {ok}/{n} ok, {per_s}/s; wall", GPU_START,
     R + ("concurrent", "wall_ms"), None, None),
    ("GPU container start, jit-cdi, 8 GPUs (start_bench)", "{n} at once: median start each", GPU_START,
     R + ("concurrent", "median_each_ms"), None, None),
    ("GPU container start, jit-cdi, by node size (scale_bench)", "1 GPU", SCALE, R + ("gpus1", "ms"),
     R + ("gpus1", "runc_ms"), "start"),
    ("GPU container start, jit-cdi, by node size (scale_bench)", "8 GPUs (x8)", SCALE, R + ("gpus8", "ms"),
     R + ("gpus8", "runc_ms"), "start"),
    ("GPU container start, jit-cdi, by node size (scale_bench)", "64 GPUs (x64)", SCALE, R + ("gpus64", "ms"),
     R + ("gpus64", "runc_ms"), "start"),
    ("GPU container start, jit-cdi, by node size (scale_bench)", "8 GPUs x 7 MIG, all 56 (x56)", SCALE,
     R + ("mig8x7", "ms"), R + ("mig8x7", "runc_ms"), "start"),
    ("GPU container start, jit-cdi, by node size (scale_bench)", "32 at once on 8 GPUs: wall", SCALE,
     R + ("gpus8", "concurrent", "wall_ms"), None, None),
    ("cdi-mode create over a spec dir (scale_bench)", "1 file", SCALE, R + ("specdir1", "ms"), None, "sdir"),
    ("cdi-mode create over a spec dir (scale_bench)", "50 files (x50)", SCALE, R + ("specdir50", "ms"), None, "sdir"),
    ("cdi-mode create over a spec dir (scale_bench)", "200 files (x200)", SCALE, R + ("specdir200", "ms"), None,
     "sdir"),
]


def _get(entry: dict | None, path) -> float | None:
    cur = entry
    for k in path or ():
        if not isinstance(cur, dict):
            return None
        cur = cur.get(k)
    return float(cur) if isinstance(cur, (int, float)) and not isinstance(cur, bool) else None


def _when(entry: dict | None) -> str:
    if not entry:
        return "never run"
    return str(entry.get("time") or entry.get("when") or entry.get("date") or "?")[:19]


def build() -> tuple[list[list[str]], dict[str, str]]:
    """Table rows (strings) and, per source, the date of its newest run."""
    runs: dict = {}
    dates: dict[str, str] = {}
    for row in ROWS:
        src = row[2]
        if src and src not in runs:
            history = resultlog.load(*src)
            runs[src] = (history[-1] if history else None, history[-2] if len(history) > 1 else None)
            dates["/".join(s for s in src if s)] = _when(runs[src][0])
    firsts: dict[str, float | None] = {}
    out = []
    section = None
    for sec, label, src, path, base_path, group in ROWS:
        if sec != section:
            out.append([f"{sec}:", "", "", "", "", "", "", ""])
            section = sec
        now_e, prev_e = runs[src]
        if "{" in label:  # filled from the entry (counts that are not timings)
            facts = (now_e or {}).get("results", {}).get("concurrent") or {}
            try:
                label = label.format(**facts)
            except (KeyError, IndexError, ValueError):
                label = label.split("{")[0] + "?"
        now, base, prev = _get(now_e, path), _get(now_e, base_path), _get(prev_e, path)
        cells = [f"  {label}", "-" if now is None else f"{now:.2f}"]
        if now is not None and base:
            cells += [f"{base:.2f}", f"{now - base:+.2f}", f"{now / base:.2f}x"]
        else:
            cells += ["", "", ""]
        cells.append("" if prev is None else f"{prev:.2f}")
        cells.append(f"{now / prev:.2f}" if now is not None and prev else "")
        if group:
            first = firsts.setdefault(group, now)  # the group's first row, measured or not
            cells.append(f"{now / first:.2f}x" if first and now is not None else "")
        else:
            cells.append("")
        out.append(cells)
    return out, dates


HEAD = ["measurement (medians, ms)", "now", "runc", "added", "x runc", "previous", "now/prev", "scale"]


def render(rows: list[list[str]], markdown: bool) -> str:
    if markdown:
        lines = ["| " + " | ".join(HEAD) + " |", "|" + "---|" * len(HEAD)]
        lines += ["| " + " | ".join(c.replace("|", "/") for c in r) + " |" for r in rows]
        return "\n".join(lines)
    widths = [max(len(r[i]) for r in rows + [HEAD]) if i else max(len(r[0]) for r in rows + [HEAD])
              for i in range(len(HEAD))]
    lines = []
    for r in [HEAD] + rows:
        lines.append("  ".join(c.ljust(widths[0]) if i == 0 else c.rjust(min(widths[i], 9))
                               for i, c in enumerate(r)).rstrip())
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--markdown", action="store_true", help="a Markdown table (for docs/bench.md)")
    opts = ap.parse_args()
    rows, dates = build()
    print(render(rows, opts.markdown))
    print("newest runs: " + ", ".join(f"{k} {v}" for k, v in dates.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
