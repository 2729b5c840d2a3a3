"""A CDI-injected spec run by real runc: env, device node + cgroup allow rule, bind mount,
and only the requested device present."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import uuid

import pytest

from nct.cdi.registry import Registry
from nct.runtime.bundle import read_spec, write_spec

BUSYBOX = shutil.which("busybox")

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="runc and mknod need root"),
    pytest.mark.skipif(shutil.which("runc") is None, reason="runc not installed"),
    pytest.mark.skipif(BUSYBOX is None, reason="busybox-static not installed"),
]


def make_rootfs(root):
    for d in ("bin", "dev", "proc", "sys", "usr/lib", "tmp"):
        (root / d).mkdir(parents=True, exist_ok=True)
    shutil.copy2(BUSYBOX, root / "bin/busybox")
    for applet in ("sh", "cat", "ls", "echo", "env", "stat", "test"):
        os.symlink("busybox", root / "bin" / applet)


def test_runc_runs_injected_spec(tmp_path):
    host = tmp_path / "host"
    host.mkdir()
    # Real NVIDIA numbers (195:N) without an NVIDIA driver loaded: an open that the device
    # cgroup lets through fails with ENXIO, one it refuses fails with EPERM.
    for i in (0, 1):
        os.mknod(host / f"nvidia{i}", 0o666 | stat.S_IFCHR, os.makedev(195, i))
        os.chmod(host / f"nvidia{i}", 0o666)
    (host / "libfake.so.1").write_text("fake library\n")
    specdir = tmp_path / "cdi"
    specdir.mkdir()
    (specdir / "test.json").write_text(json.dumps({
        "cdiVersion": "0.5.0", "kind": "test.example.com/gpu",
        "containerEdits": {
            "env": ["FOO=cdi"],
            "mounts": [{"hostPath": str(host / "libfake.so.1"), "containerPath": "/usr/lib/libfake.so.1",
                        "options": ["ro", "nosuid", "nodev", "rbind", "rprivate"]}],
        },
        "devices": [{"name": str(i), "containerEdits": {"deviceNodes": [
            {"path": f"/dev/nvidia{i}", "hostPath": str(host / f"nvidia{i}")}]}} for i in (0, 1)],
    }))
    rootfs = tmp_path / "rootfs"
    make_rootfs(rootfs)
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    subprocess.run(["runc", "spec", "--bundle", str(bundle)], check=True)
    spec = read_spec(str(bundle / "config.json"), strict=False)
    spec["root"] = {"path": str(rootfs)}
    spec["process"]["terminal"] = False
    spec["process"]["env"].append("FOO=image")
    spec["process"]["args"] = ["sh", "-c",
                               "echo env=$FOO; cat /usr/lib/libfake.so.1; stat -c 'node=%F %t:%T' /dev/nvidia0;"
                               " test -e /dev/nvidia1 || echo no-nvidia1;"
                               " echo x > /dev/nvidia0 || echo write-failed"]
    injected = Registry([str(specdir)]).inject(spec, ["test.example.com/gpu=0"])
    write_spec(str(bundle / "config.json"), injected)
    out = run(tmp_path, bundle)
    assert "env=cdi" in out
    assert "fake library" in out
    assert "node=character special file c3:0" in out
    assert "no-nvidia1" in out
    # the cgroup allow rule let the open through to the (absent) driver: ENXIO, not EPERM
    assert "No such device or address" in out and "Operation not permitted" not in out, out

    # control: without our allow rule the same open is refused by the device cgroup
    rules = injected["linux"]["resources"]["devices"]
    injected["linux"]["resources"]["devices"] = [r for r in rules if r.get("major") != 195]
    write_spec(str(bundle / "config.json"), injected)
    assert "Operation not permitted" in run(tmp_path, bundle)


def run(tmp_path, bundle) -> str:
    cid = f"nct-cdi-{uuid.uuid4().hex[:8]}"
    root = tmp_path / "runc-state"
    try:
        p = subprocess.run(["runc", "--root", str(root), "run", "--bundle", str(bundle), cid],
                           capture_output=True, text=True, timeout=60)
    finally:
        subprocess.run(["runc", "--root", str(root), "delete", "-f", cid], capture_output=True)
    return p.stdout + p.stderr
