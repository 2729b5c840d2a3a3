#!/usr/bin/env python3
"""The main job's second half: on a simulated node, run a busybox container through runc
with nct's prestart hook and NVIDIA_VISIBLE_DEVICES=1, and show what it got."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile

SCRIPT = "ls /dev/nvidia*; echo; nvidia-smi -L; echo; ls /usr/lib/x86_64-linux-gnu | grep -c nvidia"


def build_rootfs(root: str) -> None:
    for d in ("bin", "etc", "dev", "proc", "sys", "tmp", "usr/bin", "lib64", "lib/x86_64-linux-gnu",
              "usr/lib/x86_64-linux-gnu", "etc/ld.so.conf.d"):
        os.makedirs(os.path.join(root, d), exist_ok=True)
    shutil.copy2(shutil.which("busybox") or "/bin/busybox", f"{root}/bin/busybox")
    for applet in ("sh", "ls", "cat", "grep", "echo"):
        os.symlink("busybox", f"{root}/bin/{applet}")
    for lib in ("/lib64/ld-linux-x86-64.so.2", "/lib/x86_64-linux-gnu/libc.so.6"):
        shutil.copy2(os.path.realpath(lib), root + lib)
    with open(f"{root}/etc/ld.so.conf", "w") as f:
        f.write("include /etc/ld.so.conf.d/*.conf\n")
    with open(f"{root}/etc/debian_version", "w") as f:
        f.write("12.0\n")


def main(node: str) -> int:
    work = tempfile.mkdtemp(prefix="nct-demo-")
    rootfs, bundle = f"{work}/rootfs", f"{work}/bundle"
    build_rootfs(rootfs)
    os.makedirs(bundle)
    subprocess.run(["runc", "spec", "--bundle", bundle], check=True)
    with open(f"{bundle}/config.json") as f:
        spec = json.load(f)
    spec["root"] = {"path": rootfs, "readonly": False}
    spec["process"].update(terminal=False, args=["sh", "-c", SCRIPT])
    spec["process"]["env"] += ["NVIDIA_VISIBLE_DEVICES=1", "NVIDIA_DRIVER_CAPABILITIES=compute,utility"]
    hook = shutil.which("nvidia-container-runtime-hook")
    spec["hooks"] = {"prestart": [{"path": hook, "args": ["nvidia-container-runtime-hook"] + os.environ.get("NCT_DEMO_HOOK_ARGS", "").split() + ["prestart"]}]}
    with open(f"{bundle}/config.json", "w") as f:
        json.dump(spec, f, indent=2)
    print(f"$ runc run (NVIDIA_VISIBLE_DEVICES=1, prestart hook {hook})", flush=True)
    rc = subprocess.run(["nct", "sim", "run", node, "--", "runc", "run", "--bundle", bundle,
                         f"nct-demo-{os.getpid()}"]).returncode
    shutil.rmtree(work, ignore_errors=True)
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
