"""apply_edits on live runc containers (prestart hook): device nodes + cgroup, library
binds, symlinks, /proc/driver/nvidia view, isolated ldconfig."""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess

import pytest

from realparts import (NV_MAJOR, helper_hook, needs_gcc, needs_root, needs_runc, run_container,
                      write_bundle, write_edits)

pytestmark = [needs_root, needs_runc]

PROBE = ("for d in /dev/nvidia0 /dev/nvidia1 /dev/nvidiactl; do "
         "if [ -e $d ]; then cat $d 2>&1 | sed 's/^/open /'; else echo absent $d; fi; done")


def gpu_edits(host_gpu, minors=(1,), lib=True, ldconfig=True) -> dict:
    nodes = [dict(path="/dev/nvidiactl", host_path=host_gpu["nodes"]["nvidiactl"], major=NV_MAJOR, minor=255)]
    for m in minors:
        nodes.append(dict(path=f"/dev/nvidia{m}", host_path=host_gpu["nodes"][f"nvidia{m}"], major=NV_MAJOR, minor=m))
    edits = {"device_nodes": nodes}
    if lib and host_gpu["lib"]:
        edits["mounts"] = [dict(host_path=host_gpu["lib"],
                                container_path="/usr/lib/x86_64-linux-gnu/libnvfake.so.550.54.15")]
        edits["symlinks"] = [dict(target="libnvfake.so.1", link="/usr/lib/x86_64-linux-gnu/libnvfake.so")]
        if ldconfig:
            edits["ldconfig_folders"] = ["/usr/lib/x86_64-linux-gnu"]
    return edits


def ld_cache_entries(rootfs: str) -> str:
    return subprocess.run(["/sbin/ldconfig", "-p", "-C", os.path.join(rootfs, "etc/ld.so.cache")],
                          capture_output=True, text=True).stdout


@needs_gcc
def test_gpu1_only_enxio_vs_eperm_and_libraries(tmp_path, rootfs, host_gpu):
    bundle = os.path.dirname(rootfs)
    edits = write_edits(str(tmp_path / "edits.json"), gpu_edits(host_gpu))
    script = PROBE + "; ls -l /usr/lib/x86_64-linux-gnu/; mount | grep nvfake"
    write_bundle(bundle, ["sh", "-c", script], hooks=helper_hook(edits))
    res = run_container(bundle)
    assert res.returncode == 0, res.stderr
    out = res.stdout
    assert "absent /dev/nvidia0" in out
    assert "open cat: can't open '/dev/nvidia1': No such device or address" in out
    assert "open cat: can't open '/dev/nvidiactl': No such device or address" in out
    assert "libnvfake.so -> libnvfake.so.1" in out
    assert "libnvfake.so.1 -> libnvfake.so.550.54.15" in out  # made by ldconfig from the SONAME
    assert "(ro,nosuid,nodev" in out.split("libnvfake.so.550.54.15 type")[1]
    assert "libnvfake.so.1 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libnvfake.so.1" in ld_cache_entries(rootfs)


def test_node_not_given_is_eperm(tmp_path, rootfs, host_gpu):
    """A node that exists in the container but was not allowed by us: the cgroup says no."""
    bundle = os.path.dirname(rootfs)
    edits = write_edits(str(tmp_path / "edits.json"), gpu_edits(host_gpu, lib=False),
                        {"no_devbind": True})
    os.mknod(os.path.join(rootfs, "nvidia0-planted"), 0o666 | 0o020000, os.makedev(NV_MAJOR, 0))
    write_bundle(bundle, ["sh", "-c", PROBE + "; cat /nvidia0-planted 2>&1; ls -l /dev/nvidia1"],
                 hooks=helper_hook(edits))
    res = run_container(bundle)
    assert res.returncode == 0, res.stderr
    assert "can't open '/nvidia0-planted': Operation not permitted" in res.stdout
    assert "can't open '/dev/nvidia1': No such device or address" in res.stdout
    assert f"{NV_MAJOR},   1" in res.stdout  # mknod'ed, not bound


def test_proc_driver_view(tmp_path, rootfs, host_gpu):
    proc = tmp_path / "hostproc"
    gpus = proc / "driver/nvidia/gpus"
    for bus in ("00000000:01:00.0", "00000000:02:00.0"):
        (gpus / bus).mkdir(parents=True)
        (gpus / bus / "information").write_text(f"Bus Location: {bus}\n")
    (proc / "driver/nvidia/params").write_text("ResmanDebugLevel: 4294967295\nModifyDeviceFiles: 1\n")
    (proc / "driver/nvidia/version").write_text("NVRM version: 550.54.15\n")
    bundle = os.path.dirname(rootfs)
    edits = write_edits(str(tmp_path / "edits.json"),
                        dict(gpu_edits(host_gpu, lib=False), proc_driver_gpus=["00000000:02:00.0"]),
                        {"proc_root": str(proc)})
    write_bundle(bundle, ["sh", "-c", "ls /proc/driver/nvidia/gpus; cat /proc/driver/nvidia/params; "
                          "cat /proc/driver/nvidia/gpus/*/information; stat -c '%a' /proc/driver/nvidia; "
                          "grep /proc/driver/nvidia /proc/mounts"], hooks=helper_hook(edits))
    res = run_container(bundle)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0] == "00000000:02:00.0"
    assert "ModifyDeviceFiles: 0" in res.stdout and "ModifyDeviceFiles: 1" not in res.stdout
    assert "Bus Location: 00000000:02:00.0" in res.stdout
    assert "555" in lines
    assert any("/proc/driver/nvidia tmpfs" in l and "nosuid,nodev,noexec" in l for l in lines)


def test_hook_failure_stops_container(tmp_path, rootfs, host_gpu):
    bundle = os.path.dirname(rootfs)
    edits = write_edits(str(tmp_path / "edits.json"), {"mounts": [
        dict(host_path=str(tmp_path / "missing.so"), container_path="/usr/lib/missing.so")]})
    marker = os.path.join(rootfs, "ran")
    write_bundle(bundle, ["touch", "/ran"], hooks=helper_hook(edits))
    res = run_container(bundle)
    assert res.returncode != 0
    assert "missing.so" in res.stderr
    assert not os.path.exists(marker)


def _wait_stopped(cid: str) -> None:
    import json as _json
    for _ in range(600):
        st = subprocess.run(["runc", "state", cid], capture_output=True, text=True)
        if st.returncode != 0 or _json.loads(st.stdout)["status"] == "stopped":
            return
        subprocess.run(["sleep", "0.05"])
    raise AssertionError(f"container {cid} did not stop")


@needs_gcc
def test_runc_create_apply_start(tmp_path, rootfs, host_gpu):
    """nvidia-container-cli configure --pid style: the runtime has already pivoted into the
    rootfs (no hook); apply_edits enters the namespace and finds the root at its "/"."""
    import json as _json
    import uuid

    from nct.container.apply import ApplyOptions, apply_edits
    from hookhelper import load

    bundle = os.path.dirname(rootfs)
    write_bundle(bundle, ["sh", "-c", PROBE + f"; ls /usr/lib/x86_64-linux-gnu"])
    edits_file = write_edits(str(tmp_path / "edits.json"), gpu_edits(host_gpu))
    edits, _ = load(edits_file)
    cid = "nct-test-" + uuid.uuid4().hex[:10]
    out = tmp_path / "out.txt"
    try:
        with open(out, "w") as f:
            subprocess.run(["runc", "create", "--bundle", bundle, cid], stdout=f, stderr=f,
                           stdin=subprocess.DEVNULL, check=True, timeout=60)
        pid = _json.loads(subprocess.run(["runc", "state", cid], capture_output=True, text=True,
                                         check=True).stdout)["pid"]
        apply_edits(edits, rootfs, pid, ApplyOptions())
        subprocess.run(["runc", "start", cid], check=True, timeout=60)
        _wait_stopped(cid)
    finally:
        subprocess.run(["runc", "delete", "-f", cid], capture_output=True)
    text = out.read_text()
    assert "can't open '/dev/nvidia1': No such device or address" in text
    assert "absent /dev/nvidia0" in text
    assert "libnvfake.so.1" in text
    assert "libnvfake.so.1 (libc6,x86-64)" in ld_cache_entries(rootfs)


@needs_gcc
def test_cuda_compat_and_mig_caps_under_proc_view(tmp_path, rootfs, host_gpu):
    """Compat libcuda newer than the host -> 00-compat conf + ld cache entry; a MIG access file
    mounted under /proc/driver/nvidia stays visible on top of the tmpfs view."""
    from realparts import build_lib

    compat = os.path.join(rootfs, "usr/local/cuda/compat")
    build_lib(compat, "libcuda.so.560.35.03", "libcuda.so.1")
    proc = tmp_path / "hostproc" / "driver" / "nvidia"
    (proc / "gpus" / "00000000:01:00.0").mkdir(parents=True)
    (proc / "params").write_text("ModifyDeviceFiles: 1\n")
    cap = proc / "capabilities" / "gpu1" / "mig" / "gi1" / "access"
    cap.parent.mkdir(parents=True)
    cap.write_text("DeviceFileMinor: 12\n")
    edits = dict(gpu_edits(host_gpu), proc_driver_gpus=["00000000:01:00.0"],
                 cuda_compat_dir="/usr/local/cuda/compat")
    edits["mounts"].append(dict(host_path=str(cap),
                                container_path="/proc/driver/nvidia/capabilities/gpu1/mig/gi1/access"))
    bundle = os.path.dirname(rootfs)
    write_bundle(bundle, ["sh", "-c", "cat /proc/driver/nvidia/capabilities/gpu1/mig/gi1/access; "
                          "ls /proc/driver/nvidia; cat /etc/ld.so.conf.d/*"],
                 hooks=helper_hook(write_edits(str(tmp_path / "e.json"), edits,
                                               {"proc_root": str(tmp_path / "hostproc"),
                                                "driver_version": "550.54.15"})))
    res = run_container(bundle)
    assert res.returncode == 0, res.stderr
    assert "DeviceFileMinor: 12" in res.stdout
    assert "/usr/local/cuda/compat" in res.stdout
    cache = ld_cache_entries(rootfs)
    assert "libcuda.so.1 (libc6,x86-64) => /usr/local/cuda/compat/libcuda.so.1" in cache


@needs_gcc
@pytest.mark.parametrize("host,used", [("570.211.01", True), ("575.10.10", False)])
def test_legacy_cuda_compat_rule_with_a_real_note(tmp_path, rootfs, host_gpu, host, used):
    """The legacy hook decides as libnvidia-container: the compat lib's major above the host
    driver's, whatever the note of a CUDA 12.9 compat libcuda says (its last list, `Device`,
    is not a list of driver branches)."""
    from realparts import build_lib

    desc = json.dumps({"Format": 1, "CUDA Version": "12.9", "Driver": [535, 550, 560, 565, 570, 575],
                       "Device": [1, 2, 7, 8, 9, 10, 11, 12, 13, 14]}).encode() + b"\0"
    name = b"NVIDIA Corporation\0"
    blob = struct.pack("<III", len(name), len(desc), 1) + name + b"\0" * (-len(name) % 4) + desc
    arr = ",".join(str(b) for b in blob + b"\0" * (-len(blob) % 4))
    build_lib(os.path.join(rootfs, "usr/local/cuda/compat"), "libcuda.so.575.57.08", "libcuda.so.1",
              "int f(void) { return 1; }\n__attribute__((used, section(\".note.cuda.fwd_compatibility\"), "
              f"aligned(4))) static const unsigned char note[] = {{{arr}}};")
    edits = dict(gpu_edits(host_gpu), cuda_compat_dir="/usr/local/cuda/compat")
    bundle = os.path.dirname(rootfs)
    write_bundle(bundle, ["sh", "-c", "cat /etc/ld.so.conf.d/00-compat-* 2>/dev/null; true"],
                 hooks=helper_hook(write_edits(str(tmp_path / "e.json"), edits, {"driver_version": host})))
    res = run_container(bundle)
    assert res.returncode == 0, res.stderr
    assert ("/usr/local/cuda/compat" in res.stdout) is used
    assert ("libcuda.so.1 (libc6,x86-64) => /usr/local/cuda/compat/libcuda.so.1" in ld_cache_entries(rootfs)) is used


@needs_gcc
def test_configure_after_pivot_opens_no_container_node(tmp_path, rootfs, host_gpu):
    """configure --pid after `runc create`: the container is running in its root, and may have
    replaced its /dev/null by any node (here one of a loop device standing for the host's
    disk). ldconfig's stdin must not be that node: nothing host-side opens it."""
    import json as _json
    import stat as _stat
    import uuid

    from e2e.scratchdisk import OpenWatch, ScratchDisk
    from hookhelper import load
    from nct.container.apply import ApplyOptions, apply_edits

    if not shutil.which("losetup"):
        pytest.skip("needs losetup")
    disk = ScratchDisk(tmp_path / "disk.img")
    bundle = os.path.dirname(rootfs)
    write_bundle(bundle, ["sh", "-c", "true"])
    edits, _ = load(write_edits(str(tmp_path / "edits.json"), gpu_edits(host_gpu)))
    cid = "nct-test-" + uuid.uuid4().hex[:10]
    watch = OpenWatch()
    try:
        with open(tmp_path / "out.txt", "w") as f:  # a file: create's stdio stays open until exit
            subprocess.run(["runc", "create", "--bundle", bundle, cid], stdout=f, stderr=f, stdin=subprocess.DEVNULL,
                           check=True, timeout=60)
        pid = _json.loads(subprocess.run(["runc", "state", cid], capture_output=True, text=True,
                                         check=True).stdout)["pid"]
        node = f"/proc/{pid}/root/dev/null"
        os.unlink(node)
        os.mknod(node, _stat.S_IFBLK | 0o666, disk.rdev)
        watch.add(node)
        apply_edits(edits, rootfs, pid, ApplyOptions())
        assert watch.opened() == [], "a host process opened the container's /dev/null node"
    finally:
        watch.close()
        subprocess.run(["runc", "delete", "-f", cid], capture_output=True)
        disk.close()
    assert "libnvfake.so.1 (libc6,x86-64)" in ld_cache_entries(rootfs)
