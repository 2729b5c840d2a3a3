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
from nct.oci.bundle import load_bundle_spec, write_bundle_spec

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
    # Stand-ins for /dev/nvidia0 and /dev/nvidia1: /dev/full's numbers (1:7), so a write
    # reaching the driver fails with ENOSPC, while one the device cgroup refuses fails EPERM.
    for i in (0, 1):
        os.mknod(host / f"nvidia{i}", 0o666 | stat.S_IFCHR, os.makedev(1, 7))
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
    spec = load_bundle_spec(str(bundle))
    spec["root"] = {"path": str(rootfs)}
    spec["process"]["terminal"] = False
    spec["process"]["env"].append("FOO=image")
    spec["process"]["args"] = ["sh", "-c",
                               "echo env=$FOO; cat /usr/lib/libfake.so.1; stat -c 'node=%F %t:%T' /dev/nvidia0;"
                               " test -e /dev/nvidia1 || echo no-nvidia1;"
                               " echo x > /dev/nvidia0 || echo write-failed"]
    write_bundle_spec(str(bundle), Registry([str(specdir)]).inject(spec, ["test.example.com/gpu=0"]))

    cid = f"nct-cdi-{uuid.uuid4().hex[:8]}"
    root = tmp_path / "runc-state"
    try:
        p = subprocess.run(["runc", "--root", str(root), "run", "--bundle", str(bundle), cid],
                           capture_output=True, text=True, timeout=60)
    finally:
        subprocess.run(["runc", "--root", str(root), "delete", "-f", cid], capture_output=True)
    out = p.stdout + p.stderr
    assert "env=cdi" in out
    assert "fake library" in out
    assert "node=character special file 1:7" in out
    assert "no-nvidia1" in out
    # the cgroup let the write through to the "driver" (ENOSPC), rather than EPERM
    assert "No space left on device" in out and "Operation not permitted" not in out, out
