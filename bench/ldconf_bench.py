#!/usr/bin/env python3
"""How long does the update-ldcache hook's reading of a hostile image's ld.so.conf take?

Each case builds a rootfs directory in a temp dir (no root needed) and times (median ms)
nct.container.ldconfig.prepare_conf, the hook's reading of /etc/ld.so.conf and its includes:
  backtrack   `include /d/*a*a*...*b` (12 stars) against a 200-character name: hours
              with the old recursive matcher, which tried every split
  plain-run   `include /d/*/x/x/.../x` (2000 plain components after a wildcard over 4000
              dirs): 4.4 s when paths were built component by component
  relist      `include /d/*` 3000 times over a 5000-entry directory: 4.6 s when the names
              budget was not checked before each listing
  long        one 800 KB include pattern of 400k components: 2.3 s before patterns were
              bounded by PATH_MAX
Numbers before the fixes are from the security review (docs/security.md section 7).

    python bench/ldconf_bench.py [--runs 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

from nct.container.ldconfig import prepare_conf
from nct.container.rootfs import Root


def _root(base: str, case: str) -> str:
    r = os.path.join(base, case)
    os.makedirs(os.path.join(r, "etc"))
    os.makedirs(os.path.join(r, "d"))
    if case == "backtrack":
        open(os.path.join(r, "d", "a" * 200), "w").close()
        conf = "include /d/" + "*a" * 12 + "*b\n"
    elif case == "plain-run":
        for i in range(4000):
            os.mkdir(os.path.join(r, "d", str(i)))
        conf = "include /d/*/" + "x/" * 2000 + "\n"
    elif case == "relist":
        for i in range(5000):
            open(os.path.join(r, "d", f"f{i}"), "w").close()
        conf = "include /d/*\n" * 3000
    else:
        conf = "include " + "/a" * 400000 + "\n"
    with open(os.path.join(r, "etc", "ld.so.conf"), "w") as f:
        f.write(conf)
    return r


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as base:
        for case in ("backtrack", "plain-run", "relist", "long"):
            path = _root(base, case)
            times = []
            with Root(path) as root:
                for _ in range(args.runs):
                    t0 = time.perf_counter()
                    prepare_conf(root, ["/opt/nv/lib"])
                    times.append((time.perf_counter() - t0) * 1000.0)
            print(f"{case:10} {statistics.median(times):10.2f} ms")


if __name__ == "__main__":
    main()
