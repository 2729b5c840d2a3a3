"""Inside `nct sim run`, runc still works, and the simulated NVML in a container sees only
the GPUs the container was given: device nodes present AND allowed by the device cgroup.
The container's fresh procfs has no /proc/driver/nvidia, so this also covers the library's
fallback to the node description appended to it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from pathlib import Path


from .conftest import needs_busybox, needs_gcc, needs_root, needs_runc, sim_run

pytestmark = [needs_root, needs_gcc, needs_runc, needs_busybox]

LIBDIR = "/usr/lib/x86_64-linux-gnu"


def make_rootfs(path: Path) -> None:
    busybox = shutil.which("busybox") or "/bin/busybox"
    for d in ("bin", "dev", "proc", "sys", "tmp", "etc", "lib64", "usr/bin", LIBDIR.lstrip("/"),
              "lib/x86_64-linux-gnu"):
        (path / d).mkdir(parents=True, exist_ok=True)
    shutil.copy2(busybox, path / "bin/busybox")
    os.symlink("busybox", path / "bin/sh")
    for f in ("/lib64/ld-linux-x86-64.so.2", "/lib/x86_64-linux-gnu/libc.so.6"):
        shutil.copy2(os.path.realpath(f), path / f.lstrip("/"))


def bundle(tmp: Path, node, devices: list[int], allow: bool) -> Path:
    make_rootfs(tmp / "rootfs")
    subprocess.run(["runc", "spec", "--bundle", str(tmp)], check=True)
    cfg = json.loads((tmp / "config.json").read_text())
    cfg["root"] = {"path": str(tmp / "rootfs"), "readonly": False}
    cfg["process"].update(terminal=False, args=["/usr/bin/nvidia-smi", "-L"],
                          env=["PATH=/usr/bin:/bin", f"LD_LIBRARY_PATH={LIBDIR}"])
    v = node.driver_version
    cfg["mounts"] += [
        {"destination": "/usr/bin/nvidia-smi", "source": "/usr/bin/nvidia-smi", "type": "bind", "options": ["rbind", "ro"]},
        {"destination": f"{LIBDIR}/libnvidia-ml.so.1", "source": f"{LIBDIR}/libnvidia-ml.so.{v}",
         "type": "bind", "options": ["rbind", "ro"]},
    ]
    nodes = [("/dev/nvidiactl", 255)] + [(f"/dev/nvidia{m}", m) for m in devices]
    cfg["linux"]["devices"] = [
        {"path": p, "type": "c", "major": 195, "minor": m, "fileMode": 0o666, "uid": 0, "gid": 0} for p, m in nodes
    ]
    rules = cfg["linux"].setdefault("resources", {}).setdefault("devices", [{"allow": False, "access": "rwm"}])
    if allow:
        rules += [{"allow": True, "type": "c", "major": 195, "minor": m, "access": "rw"} for _, m in nodes]
    (tmp / "config.json").write_text(json.dumps(cfg))
    return tmp


def run_container(node, b: Path) -> subprocess.CompletedProcess:
    cid = f"nct-sim-{uuid.uuid4().hex[:10]}"
    try:
        return sim_run(node.dir, "runc", "run", "--bundle", str(b), cid, check=False, timeout=120)
    finally:
        subprocess.run(["runc", "delete", "--force", cid], capture_output=True)


def test_container_sees_only_its_gpu(node8, tmp_path):
    r = run_container(node8, bundle(tmp_path, node8, devices=[node8.gpus[3].minor], allow=True))
    assert r.returncode == 0, r.stderr
    assert r.stdout == f"GPU 0: {node8.gpus[3].model} (UUID: {node8.gpus[3].uuid})\n"


def test_device_cgroup_denial_hides_gpus(node8, tmp_path):
    r = run_container(node8, bundle(tmp_path, node8, devices=[0, 1], allow=False))
    assert r.returncode == 9, r.stderr
    assert "couldn't communicate with the NVIDIA driver" in r.stdout
