#!/usr/bin/env bash
# Every benchmark, then one table of all their newest results against plain runc and against
# each one's previous saved result (bench/table.py; docs/bench.md explains how to read it).
# Each benchmark also prints its own detail and appends to bench/results/*.json. Root, runc,
# gcc, busybox-static needed; run on a quiet machine, from the venv nct is installed in.
# BENCH_ONLY="passthrough cdi ..." runs a subset (names: passthrough hook create cdi nvml
# limits ldconf startup start scale); the table then shows the older results of the others, with dates.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
only=" ${BENCH_ONLY:-passthrough hook create cdi nvml limits ldconf startup start scale} "
want() { [[ "$only" == *" $1 "* ]]; }
tk=$(mktemp -d /tmp/nct-bench-toolkit.XXXXXX)
trap 'rm -rf "$tk"' EXIT
# the self-contained toolkit, as users install it: its launcher's pass-through fast path and
# its hook are timed too
"$PY" packaging/toolkit/assemble.py --out "$tk/tree" >/dev/null
want passthrough && "$PY" bench/runtime_passthrough.py --toolkit "$tk/tree" "$@"
want hook && "$PY" bench/hook_bench.py --toolkit "$tk/tree"
want create && "$PY" bench/runtime_create.py
want cdi && "$PY" bench/cdi_bench.py
want nvml && "$PY" bench/nvml_bench.py
want limits && "$PY" bench/limits_bench.py
want ldconf && "$PY" bench/ldconf_bench.py
want startup && "$PY" bench/toolkit_startup.py --toolkit "$tk/tree"
want start && "$PY" bench/start_bench.py --toolkit "$tk/tree"
want scale && "$PY" bench/scale_bench.py --toolkit "$tk/tree"
echo
"$PY" bench/table.py
