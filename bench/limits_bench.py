#!/usr/bin/env python3
"""Does input handling stay linear up to, and past, the limits of nct.limits?

For each bounded input it times (medians, milliseconds) the work at 1x and at 10x the
limit, in process (no container, no root), and prints the ratio 10x / 1x. At 10x the input
is refused: the time shown is what refusing costs, which must not be more than ~10x the
time of accepting an input at the limit (a ratio near or below 10 = linear or better):
  visible     request_from_spec with NVIDIA_VISIBLE_DEVICES of N distinct-looking ids
  imex        request_from_spec with NVIDIA_IMEX_CHANNELS of N ids
  select      select_devices of N MIG UUIDs (repeating) on a 64-GPU node with 7 MIG
              devices each (one index look-up per id); not bounded past the list limit
  merge       ContainerEdits.merge of two plans of N device nodes / mounts each, and
              device_rules() over them (the 61 s of issue 9 at 8000 IMEX ids); not
              bounded: 1x and 10x both run
  qualify     the shim's CDI-name dedupe of N names; not bounded either
  json-depth  jsonio.loads of a document nested N levels (N = MAX_NESTING_DEPTH)
  yaml-depth  CDI spec parse of a YAML document nested N levels
  spec-size   CDI spec parse of a JSON spec of N bytes (N = MAX_DOCUMENT_BYTES / 16, and
              10x that: the size limit itself is a read of limit + 1 bytes)
Results go to bench/results/limits.json (a list; newest last) and are compared with the
previous entry (ratio = now / before).

    python bench/limits_bench.py [--runs 7] [--no-save]
"""

from __future__ import annotations

import argparse
import datetime
import platform
import statistics
import time

import resultlog  # bench/resultlog.py

from nct import jsonio, limits
from nct.cdi.spec import parse_spec_data
from nct.config.model import Config
from nct.container.apply import device_rules
from nct.driver.model import DeviceNode, Gpu, MigDevice, Node, Roots
from nct.edits.model import ContainerEdits, DeviceNodeEdit, MountEdit
from nct.edits.select import select_devices
from nct.errors import NctError
from nct.request.parse import request_from_spec
from nct.runtime.modes import qualify


def median_ms(fn, runs: int) -> float:
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        try:
            fn()
        except (NctError, ValueError):
            pass  # past a limit: refusing is what is timed
        out.append((time.perf_counter() - t0) * 1000.0)
    return round(statistics.median(out), 3)


def _spec(env: dict) -> dict:
    return {"ociVersion": "1.2.0", "process": {"env": [f"{k}={v}" for k, v in env.items()],
                                               "capabilities": {"bounding": ["CAP_SYS_ADMIN"]}},
            "root": {"path": "rootfs"}}


def _edits(n: int, tag: str) -> ContainerEdits:
    return ContainerEdits(
        device_nodes=[DeviceNodeEdit(f"/dev/x{tag}{i}", f"/dev/x{tag}{i}", 236, i) for i in range(n)],
        mounts=[MountEdit(f"/h/{tag}{i}", f"/c/{tag}{i}") for i in range(n)])


def big_node(gpus: int = 64, migs: int = 7) -> Node:
    """A node model (no files) with `gpus` GPUs of `migs` MIG devices each."""
    def dev(path: str, major: int, minor: int) -> DeviceNode:
        return DeviceNode(path, path, major, minor)

    out = []
    for i in range(gpus):
        m = tuple(MigDevice(i, j + 1, 0, dev(f"/dev/nvidia-caps/nvidia-cap{2 * (i * 8 + j)}", 235, 2 * (i * 8 + j)),
                            dev(f"/dev/nvidia-caps/nvidia-cap{2 * (i * 8 + j) + 1}", 235, 2 * (i * 8 + j) + 1),
                            "/p/gi", "/p/ci", uuid=f"MIG-{i:04d}{j:04d}-aaaa-bbbb-cccc-dddddddddddd", ordinal=j)
                  for j in range(migs))
        out.append(Gpu(i, i, f"GPU-{i:08x}-1111-2222-3333-444444444444", "NVIDIA H100", f"00000000:{i + 1:02x}:00.0",
                       f"/proc/driver/nvidia/gpus/0000:{i + 1:02x}:00.0", dev(f"/dev/nvidia{i}", 195, i),
                       mig_enabled=True, migs=m))
    return Node(Roots(), "550.54.15", "12.4", tuple(out), (dev("/dev/nvidiactl", 195, 255),))


def cases() -> dict:
    cfg = Config()
    n_list, depth, size = limits.MAX_LIST_ENTRIES, limits.MAX_NESTING_DEPTH, limits.MAX_DOCUMENT_BYTES // 16

    def visible(n):
        s = _spec({"NVIDIA_VISIBLE_DEVICES": ",".join(f"GPU-{i:08d}" for i in range(n))})
        return lambda: request_from_spec(s, cfg)

    def imex(n):
        s = _spec({"NVIDIA_VISIBLE_DEVICES": "0", "NVIDIA_IMEX_CHANNELS": ",".join(str(i % 2048) for i in range(n))})
        return lambda: request_from_spec(s, cfg)

    node = big_node()
    uuids = [m.uuid for g in node.gpus for m in g.migs]

    def select(n):
        ids = [uuids[i % len(uuids)] for i in range(n)]
        return lambda: select_devices(node, ids)

    def merge(n):
        a, b = _edits(n, "a"), _edits(n, "b")
        return lambda: device_rules(a.merge(b).merge(a))

    def qual(n):
        names = tuple(f"vendor.com/dev={i}" for i in range(n)) * 2
        return lambda: qualify(names, "nvidia.com/gpu")

    def json_depth(n):
        text = "[" * n + "]" * n
        return lambda: jsonio.loads(text)

    def yaml_depth(n):
        text = "cdiVersion: 0.6.0\nkind: x.com/y\ndevices: " + "[" * n + "]" * n + "\n"
        return lambda: parse_spec_data(text, "s.yaml")

    def spec_size(n):
        head = '{"cdiVersion": "0.6.0", "kind": "x.com/y", "devices": ['
        dev = '{"name": "d%d", "containerEdits": {"env": ["A=1"]}},'
        parts, total, i = [head], len(head), 0
        while total < n:
            parts.append(dev % i)
            total += len(parts[-1])
            i += 1
        text = "".join(parts).rstrip(",") + "]}"
        return lambda: parse_spec_data(text, "s.json")

    return {"visible": (visible, n_list), "imex": (imex, n_list), "select": (select, n_list), "merge": (merge, n_list),
            "qualify": (qual, n_list), "json-depth": (json_depth, depth), "yaml-depth": (yaml_depth, depth),
            "spec-size": (spec_size, size)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--no-save", action="store_true")
    args = ap.parse_args()
    results: dict[str, dict] = {}
    for name, (make, n) in cases().items():
        one, ten = median_ms(make(n), args.runs), median_ms(make(10 * n), args.runs)
        results[name] = {"n": n, "1x_ms": one, "10x_ms": ten, "ratio": round(ten / one, 2) if one else None}
    prev = resultlog.load("limits")
    before = prev[-1]["results"] if prev else {}
    print(f"{'case':<12}{'N':>9}{'1x ms':>10}{'10x ms':>10}{'10x/1x':>8}{'vs before':>11}")
    for name, r in results.items():
        old = before.get(name, {}).get("1x_ms")
        vs = f"{r['1x_ms'] / old:.2f}" if old else "-"
        print(f"{name:<12}{r['n']:>9}{r['1x_ms']:>10}{r['10x_ms']:>10}{r['ratio']!s:>8}{vs:>11}")
    if not args.no_save:
        entry = {"when": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                 "host": platform.node(), "runs": args.runs, "results": results}
        print("saved", resultlog.append("limits", entry))


if __name__ == "__main__":
    main()
