"""Runs inside `nct sim run`: runc create -> the real hook, traced, with the container's real
OCI state on stdin -> runc start (only if the hook succeeded) -> wait -> runc delete.

Usage: audit_run.py BUNDLE ROOTFS OUTDIR HOOK [HOOK ARGS...]
Writes OUTDIR/{state.json,trace.json,hook.err,container.out,result.json}."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))


def runc(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(["runc", *args], capture_output=True, text=True, **kw)


def main() -> int:
    bundle, rootfs, out, hook = sys.argv[1:5]
    hook_args = sys.argv[5:]
    cid = "nct-audit-" + uuid.uuid4().hex[:8]
    result: dict = {}
    # The container keeps runc create's stdio: files, never pipes we would wait on.
    with open(os.path.join(out, "container.out"), "wb") as cout:
        r = subprocess.run(["runc", "create", "--bundle", bundle, cid], stdin=subprocess.DEVNULL, stdout=cout,
                           stderr=cout)
    if r.returncode != 0:
        result["create_error"] = open(os.path.join(out, "container.out")).read()
        json.dump(result, open(os.path.join(out, "result.json"), "w"))
        return 1
    try:
        state = runc("state", cid).stdout
        with open(os.path.join(out, "state.json"), "w") as f:
            f.write(state)
        with open(os.path.join(out, "state.json"), "rb") as sin, open(os.path.join(out, "hook.err"), "wb") as herr:
            t = subprocess.run([sys.executable, os.path.join(HERE, "audit_tracer.py"), os.path.join(out, "trace.json"),
                                rootfs, "--", hook, *hook_args, "prestart"], stdin=sin, stderr=herr)
        result["tracer_rc"] = t.returncode
        trace = json.load(open(os.path.join(out, "trace.json")))
        result["hook_rc"] = trace["rc"]
        result["status_after_hook"] = json.loads(runc("state", cid).stdout)["status"]
        if trace["rc"] == 0:
            result["start_rc"] = runc("start", cid).returncode
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                st = runc("state", cid)
                if st.returncode != 0 or json.loads(st.stdout)["status"] == "stopped":
                    break
                time.sleep(0.05)
    finally:
        result["delete_rc"] = runc("delete", "--force", cid).returncode
        json.dump(result, open(os.path.join(out, "result.json"), "w"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
