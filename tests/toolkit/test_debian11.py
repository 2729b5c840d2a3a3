"""The toolkit inside a debootstrapped Debian 11 root (glibc 2.31, the baseline) that has
its own python3.9: the toolkit runs there, installs itself as the installer does, writes
engine configs and a CDI spec for a simulated node, runs GPU containers through the root's
own runc (jit-cdi shim and legacy hook), and never runs the root's Python (python3.9 is
wrapped by a trap that logs every use).  The root is cached under
$NCT_CACHE/debootstrap (debootstrap needs network the first time); each test works on an
overlay of it, so the cache stays pristine."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from toolkit_build import CACHE

SUITE = "bullseye"
MIRROR = os.environ.get("NCT_DEBIAN_MIRROR", "http://deb.debian.org/debian")

TRAP = """#!/bin/sh
echo "python3.9 $*" >> /trap.log
exec /usr/bin/python3.9.real "$@"
"""


def debian11_root(*include: str) -> Path:
    """The cached bullseye root with python3 and `include` (each set of packages has its own
    cache name, so a root made without them is never reused)."""
    pkgs = ("python3", *include)
    root = CACHE / "debootstrap" / f"{SUITE}-{'-'.join(pkgs)}"
    if (root / "usr/bin/python3.9").exists():
        return root
    if os.geteuid() != 0 or not shutil.which("debootstrap"):
        pytest.skip("needs root and debootstrap (to make a Debian 11 root)")
    tmp = root.with_name(root.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.parent.mkdir(parents=True, exist_ok=True)
    r = subprocess.run(["debootstrap", "--variant=minbase", f"--include={','.join(pkgs)}", SUITE, str(tmp), MIRROR],
                       capture_output=True, text=True)
    if r.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        pytest.skip(f"debootstrap {SUITE} failed (no network?): {r.stdout.strip().splitlines()[-1:]}")
    os.rename(tmp, root)
    return root


def run_in_root(lower: Path, toolkit: Path, node: Path, tmp_path: Path, inner: str,
                extra: str = "") -> subprocess.CompletedProcess:
    """`inner` (sh) run in an overlay of `lower` with the toolkit at /opt/nct, the node at /node
    and python3.9 wrapped by the trap, in a private mount namespace (nothing is left mounted)
    whose root it becomes: pivot_root, the host's root detached, so every process runs on the
    root's own files and libc.  Not a chroot: a hook entering a container's mount namespace
    lands at that namespace's real root, which must be this root.  `extra`: more setup lines
    run before the pivot, `{m}` = the merged root."""
    for d in ("upper", "work", "merged"):
        (tmp_path / d).mkdir()
    m = tmp_path / "merged"
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
{extra.format(m=m)}cd {m} && mkdir -p .oldroot && pivot_root . .oldroot && cd /
exec /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin PYTHONHOME=/usr PYTHONPATH=/usr/lib/python3.9 \
    /bin/sh -c 'umount -l /.oldroot && rmdir /.oldroot && exec /bin/sh /inner.sh'
"""
    return subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", outer],
                          capture_output=True, text=True, timeout=300)


def test_toolkit_in_debian11_root_ignores_its_python39(toolkit, tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root (mount namespace, overlayfs, pivot_root)")
    lower = debian11_root()
    node = tmp_path / "node"
    subprocess.run([str(Path(sys.executable).parent / "nct"), "sim", "create", str(node), "--gpus", "2"],
                   check=True, capture_output=True)
    inner = r"""set -eu
ldd --version | head -1
python3 -c 'import sys; print("root python", sys.version.split()[0])'
: > /trap.log
/opt/nct/nct --version
/opt/nct/nvidia-ctk --version | head -1
/opt/nct/nct install --toolkit-root /usr/local/nvidia/toolkit --runtime containerd \
    --config /etc/containerd/config.toml --restart-mode none --no-daemon --toolkit-pid-file /run/toolkit.pid \
    --driver-root / --driver-root-ctr-path / --config-source file
T=/usr/local/nvidia/toolkit
$T/nvidia-ctk runtime configure --runtime=docker --config=/etc/docker/daemon.json
grep -c nvidia-container-runtime /etc/docker/daemon.json /etc/containerd/config.toml
NCT_PROC_ROOT=/node/root/proc $T/nvidia-ctk cdi generate --driver-root /node/root --output /etc/cdi/nvidia.yaml
grep -c 'name:' /etc/cdi/nvidia.yaml
$T/python/bin/python3 -I -S -c 'import ctypes, zlib, hashlib, decimal, yaml, nct.driver.nvml; print("C extensions load:", yaml.__with_libyaml__)'
/opt/nct/nct install --toolkit-root /usr/local/nvidia/toolkit --runtime containerd \
    --config /etc/containerd/config.toml --uninstall
echo "trap log: $(wc -l < /trap.log) lines"
"""
    r = run_in_root(lower, toolkit, node, tmp_path, inner)
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


# Runs in the Debian 11 root, inside the installed toolkit's own `nct sim run /node` (the node at the
# real paths): one container through the shim in jit-cdi mode, one through the root's runc with
# the legacy prestart hook in its spec (the hook refuses to run unless the mode is legacy, as
# upstream's does).  Each prints SCRIPT's sections to /out/CASE.out.
GPU_SH = r"""set -u
T=/usr/local/nvidia/toolkit
run() {  # runtime bundle id out
  "$1" --root /run/nct-runc create --bundle "$2" "$3" </dev/null >"$4" 2>"$4.err" || { cat "$4.err"; return 1; }
  "$1" --root /run/nct-runc start "$3" || return 1
  i=0; while [ $i -lt 600 ]; do
    "$1" --root /run/nct-runc state "$3" | grep -q '"status": "stopped"' && break
    sleep 0.1; i=$((i+1)); done
  "$1" --root /run/nct-runc delete "$3"
}
mode() { $T/nvidia-ctk config --in-place --set nvidia-container-runtime.mode=$1; }
mode jit-cdi && run $T/nvidia-container-runtime /b/jit nct-deb11-jit /out/jit.out || echo "FAILED jit"
mode legacy && run /usr/sbin/runc /b/legacy nct-deb11-legacy /out/legacy.out || echo "FAILED legacy"
echo "trap log: $(wc -l < /trap.log) lines"
"""


def test_gpu_containers_run_in_debian11_root_through_installed_toolkit(toolkit, tmp_path):
    """Everything runs in bullseye (glibc 2.31): the toolkit's own `nct sim run`, bullseye's
    runc 1.0.0~rc93, the shim (jit-cdi, low-level runtime = that runc) and the legacy hook."""
    if os.geteuid() != 0:
        pytest.skip("needs root (mount namespace, overlayfs, pivot_root, runc)")
    from e2e import rootfs as R
    from e2e.harness import mounts_under
    from e2e.test_runc_hook import SCRIPT, assert_driver, gpu_nodes, sections, smi_line

    if not os.path.exists(R.BUSYBOX) or not shutil.which("runc"):
        pytest.skip("needs busybox-static and runc (`runc spec` writes the bundles)")
    lower = debian11_root("runc")
    node = tmp_path / "node"
    subprocess.run([str(Path(sys.executable).parent / "nct"), "sim", "create", str(node), "--gpus", "2"],
                   check=True, capture_output=True)
    info = json.loads((node / "node.json").read_text())
    template = R.make_rootfs(tmp_path / "tpl", probe=R.build_probe(tmp_path / "cuda-probe"))
    hook = {"path": "/usr/local/nvidia/toolkit/nvidia-container-runtime-hook",
            "args": ["nvidia-container-runtime-hook", "prestart"]}
    cases = {"jit": ("1", None), "legacy": (info["gpus"][0]["uuid"], {"prestart": [hook]})}
    for case, (visible, hooks) in cases.items():
        rootfs = tmp_path / "b" / case / "rootfs"
        shutil.copytree(template, rootfs, symlinks=True)
        bundle = R.make_bundle(rootfs.parent, rootfs, ["sh", "-c", SCRIPT], [f"NVIDIA_VISIBLE_DEVICES={visible}"],
                               hooks=hooks)
        cfg = json.loads((bundle / "config.json").read_text())
        cfg["root"]["path"] = f"/b/{case}/rootfs"  # the path inside the Debian 11 root
        (bundle / "config.json").write_text(json.dumps(cfg, indent=2))
    (tmp_path / "out").mkdir()
    (tmp_path / "gpu.sh").write_text(GPU_SH)
    inner = r"""set -eu
ldd --version | head -1
ldd /usr/sbin/runc | grep -o ' /lib/x86_64-linux-gnu/libc.so.6'
runc --version | head -1
: > /trap.log
/opt/nct/nct install --toolkit-root /usr/local/nvidia/toolkit --runtime docker \
    --config /etc/docker/daemon.json --restart-mode none --no-daemon --toolkit-pid-file /run/toolkit.pid \
    --driver-root / --driver-root-ctr-path /
T=/usr/local/nvidia/toolkit
$T/nvidia-ctk config --in-place --set nvidia-container-runtime.runtimes=/usr/sbin/runc
exec $T/nct sim run /node -- /bin/sh /gpu.sh
"""
    extra = f"""mount --rbind /sys {{m}}/sys
mount --rbind /dev {{m}}/dev
mkdir -p {{m}}/b {{m}}/out
mount --bind {tmp_path}/b {{m}}/b
mount --bind {tmp_path}/out {{m}}/out
cp {tmp_path}/gpu.sh {{m}}/gpu.sh
"""
    t0 = time.monotonic()
    r = run_in_root(lower, toolkit, node, tmp_path, inner, extra)
    took = time.monotonic() - t0
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].endswith(" 2.31"), lines[0]  # glibc 2.31 ...
    assert lines[1] == " /lib/x86_64-linux-gnu/libc.so.6"  # ... and the runc linked against it
    assert lines[2].startswith("runc version 1.0.0~rc93"), lines[2]
    assert not [l for l in lines if l.startswith("FAILED ")], r.stdout + r.stderr + "".join(
        p.read_text() for p in (tmp_path / "out").glob("*.err"))

    jit = sections((tmp_path / "out/jit.out").read_text())
    assert gpu_nodes(jit) == {"nvidia1"}, jit
    assert {"nvidiactl", "nvidia-uvm"} <= set(jit["nodes"])  # (jit-cdi adds nvidia-modeset too)
    assert jit["probe"] == ["cuDriverGetVersion=12040"]  # libcuda through the container's ld cache
    assert jit["smi"] == [smi_line(info["gpus"][1], 0)]
    legacy = sections((tmp_path / "out/legacy.out").read_text())
    assert gpu_nodes(legacy) == {"nvidia0"}, legacy
    assert_driver(legacy)
    assert legacy["smi"] == [smi_line(info["gpus"][0], 0)]
    assert lines[-1] == "trap log: 0 lines", r.stdout  # the root's python3.9 never ran
    assert not mounts_under(tmp_path)  # everything was mounted in the private namespace only
    print(f"debian11 gpu containers: {took:.1f}s")
