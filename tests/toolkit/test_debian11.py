"""The toolkit inside a debootstrapped Debian 11 root (glibc 2.31, the baseline) that has
its own python3.9: the toolkit runs there, installs itself as the installer does, writes
engine configs and a CDI spec for a simulated node, and never runs the root's Python
(python3.9 is wrapped by a trap that logs every use).  The root is cached under
$NCT_CACHE/debootstrap (debootstrap needs network the first time); each test works on an
overlay of it, so the cache stays pristine."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from toolkit_build import CACHE

SUITE = "bullseye"
MIRROR = os.environ.get("NCT_DEBIAN_MIRROR", "http://deb.debian.org/debian")

TRAP = """#!/bin/sh
echo "python3.9 $*" >> /trap.log
exec /usr/bin/python3.9.real "$@"
"""


def debian11_root() -> Path:
    root = CACHE / "debootstrap" / f"{SUITE}-python3"
    if (root / "usr/bin/python3.9").exists():
        return root
    if os.geteuid() != 0 or not shutil.which("debootstrap"):
        pytest.skip("needs root and debootstrap (to make a Debian 11 root)")
    tmp = root.with_name(root.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.parent.mkdir(parents=True, exist_ok=True)
    r = subprocess.run(["debootstrap", "--variant=minbase", "--include=python3", SUITE, str(tmp), MIRROR],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"debootstrap {SUITE} failed (no network?): {r.stdout.strip().splitlines()[-1:]}")
    os.rename(tmp, root)
    return root


def test_toolkit_in_debian11_root_ignores_its_python39(toolkit, tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root (mount namespace, overlayfs, chroot)")
    lower = debian11_root()
    node = tmp_path / "node"
    subprocess.run([str(Path(sys.executable).parent / "nct"), "sim", "create", str(node), "--gpus", "2"],
                   check=True, capture_output=True)
    for d in ("upper", "work", "merged"):
        (tmp_path / d).mkdir()
    m = tmp_path / "merged"
    inner = r"""set -eu
ldd --version | head -1
python3 -c 'import sys; print("root python", sys.version.split()[0])'
: > /trap.log
/opt/nct/nct --version
/opt/nct/nvidia-ctk --version | head -1
/opt/nct/nct install --toolkit-root /usr/local/nvidia/toolkit --runtime containerd \
    --config /etc/containerd/config.toml --restart-mode none --no-daemon --toolkit-pid-file /run/toolkit.pid
T=/usr/local/nvidia/toolkit
$T/nvidia-ctk runtime configure --runtime=docker --config=/etc/docker/daemon.json
grep -c nvidia-container-runtime /etc/docker/daemon.json /etc/containerd/config.toml
NCT_PROC_ROOT=/node/root/proc $T/nvidia-ctk cdi generate --driver-root /node/root --output /etc/cdi/nvidia.yaml
grep -c 'name:' /etc/cdi/nvidia.yaml
$T/python/bin/python3 -I -S -c 'import ctypes, zlib, hashlib, decimal, yaml, rpds, nct.driver.nvml; print("C extensions load:", yaml.__with_libyaml__)'
/opt/nct/nct install --toolkit-root /usr/local/nvidia/toolkit --runtime containerd \
    --config /etc/containerd/config.toml --uninstall
echo "trap log: $(wc -l < /trap.log) lines"
"""
    (tmp_path / "inner.sh").write_text(inner)
    outer = f"""set -eu
mount -t overlay overlay -o lowerdir={lower},upperdir={tmp_path}/upper,workdir={tmp_path}/work {m}
mount -t proc proc {m}/proc
cp -a {toolkit} {m}/opt/nct
mkdir -p {m}/node && mount --bind {node} {m}/node
mv {m}/usr/bin/python3.9 {m}/usr/bin/python3.9.real
cat > {m}/usr/bin/python3.9 <<'EOF'
{TRAP}EOF
chmod 755 {m}/usr/bin/python3.9
cp {tmp_path}/inner.sh {m}/inner.sh
chroot {m} /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin PYTHONHOME=/usr PYTHONPATH=/usr/lib/python3.9 \
    /bin/sh /inner.sh
"""
    r = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", outer],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].endswith(" 2.31"), lines[0]  # glibc 2.31
    assert lines[1] == "root python 3.9.2"  # the root's own Python works (through the trap) ...
    assert "nct, version" in r.stdout and "NVIDIA Container Toolkit CLI version" in r.stdout
    assert "/etc/docker/daemon.json:1" in r.stdout and "/etc/containerd/config.toml:" in r.stdout
    assert "C extensions load: True" in r.stdout
    assert lines[-1] == "trap log: 0 lines", r.stdout  # ... and the toolkit never ran it
    spec = (tmp_path / "upper/etc/cdi/nvidia.yaml").read_text()
    assert "kind: nvidia.com/gpu" in spec and "name: all" in spec
    assert not (tmp_path / "upper/usr/local/nvidia/toolkit/python").exists()  # --uninstall removed it
