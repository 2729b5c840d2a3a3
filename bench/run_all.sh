#!/usr/bin/env bash
# Every benchmark, each printing medians, ratios against plain runc (where there is one)
# and against its previous saved result (bench/results/*.json). Root, runc, gcc,
# busybox-static needed; run on a quiet machine, from the venv nct is installed in.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
"$PY" bench/runtime_passthrough.py "$@"
"$PY" bench/hook_bench.py
"$PY" bench/runtime_create.py
"$PY" bench/cdi_bench.py
"$PY" bench/nvml_bench.py
"$PY" bench/limits_bench.py
"$PY" bench/ldconf_bench.py
tk=$(mktemp -d /tmp/nct-bench-toolkit.XXXXXX)
trap 'rm -rf "$tk"' EXIT
"$PY" packaging/toolkit/assemble.py --out "$tk/tree" >/dev/null
"$PY" bench/toolkit_startup.py --toolkit "$tk/tree"
