"""Upstream's update-application-profile expectations (its minor-selection and profile
tables), restated as our own table: real char-device nodes in a container's /dev, the real
nvidia-cdi-hook, and the EGLVisibleDGPUDevices mask it writes (or no file at all)."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys

import pytest

from hookforms import hook_argv  # noqa: E402

pytestmark = pytest.mark.usefixtures("hook_form")  # alone and as an nct-steps step
HOOK = os.path.join(os.path.dirname(sys.executable), "nvidia-cdi-hook")
PROFILE = "etc/nvidia/nvidia-application-profiles-rc.d/10-container.conf"
CHAR, DIR, FILE = "c", "d", "f"


@pytest.mark.parametrize("nodes, mask", [
    ([("nvidia0", CHAR, 0)], 0x1),
    ([("nvidia0", CHAR, 1), ("nvidia1", CHAR, 0)], 0x3),       # minors, not names, count
    ([("nvidia10", CHAR, 10)], 0x400),
    ([("nvidia0", CHAR, 0), ("nvidiactl", CHAR, 255), ("nvidia-modeset", CHAR, 254),
      ("nvidia-uvm", CHAR, 511), ("nvidia-uvm-tools", CHAR, 510)], 0x1),
    ([("nvidia-caps", DIR, 0), ("nvidia-caps-imex-channels", DIR, 0), ("nvidia1", CHAR, 1)], 0x2),
    ([("nvidia0", FILE, 0)], None),                            # not a char device
    ([("null", CHAR, 3), ("zero", CHAR, 5)], None),
    ([], None),
    ([("nvidia8", CHAR, 8), ("nvidia0", CHAR, 0), ("nvidia15", CHAR, 15)], 0x8101),
    ([("nvidia64", CHAR, 64)], None),                          # minors past 63 are dropped
])
def test_application_profile_table(tmp_path, nodes, mask):
    if os.geteuid() != 0:
        pytest.skip("needs root (mknod)")
    bundle = tmp_path / "bundle"
    dev = bundle / "rootfs" / "dev"
    dev.mkdir(parents=True)
    for name, kind, minor in nodes:
        p = dev / name
        if kind == CHAR:
            os.mknod(p, stat.S_IFCHR | 0o666, os.makedev(195, minor))
        elif kind == DIR:
            p.mkdir()
        else:
            p.write_text("")
    (bundle / "config.json").write_text(json.dumps({"ociVersion": "1.2.0", "root": {"path": "rootfs"}}))
    state = json.dumps({"ociVersion": "1.2.0", "id": "c", "status": "creating", "pid": os.getpid(),
                        "bundle": str(bundle)})
    res = subprocess.run(hook_argv([HOOK, "update-application-profile"]), input=state, capture_output=True, text=True,
                         env={"PATH": "/usr/bin:/bin"}, timeout=60)
    assert res.returncode == 0, res.stderr
    path = bundle / "rootfs" / PROFILE
    if mask is None:
        assert not path.exists()
        return
    text = path.read_text()
    m = re.search(r'"EGLVisibleDGPUDevices"\s*,\s*(0x[0-9a-f]+)', text)
    assert m and int(m.group(1), 16) == mask, text
    assert re.search(r'"rules"\s*:\s*\[\s*\{\s*"pattern"\s*:\s*\[\s*\]\s*,\s*"profile"\s*:\s*"_container_"', text)
    assert stat.S_IMODE(path.stat().st_mode) == 0o444
