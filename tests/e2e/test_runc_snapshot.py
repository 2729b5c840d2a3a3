"""runc + our prestart hook with the node snapshot (nct.driver.snapshot): a steady-state
start uses it, and after a driver library is replaced the next container gets the new one."""

from __future__ import annotations

import subprocess

from e2e.harness import bundle_with_hook, needs_e2e
from e2e import rootfs as R
from nct.driver import snapshot
from nct.hostcache import RACY_SECONDS

pytestmark = needs_e2e

LIBDIR = "/usr/lib/x86_64-linux-gnu"


def test_new_library_after_snapshot(sim_node, rootfs, tmp_path, private_host_cache):
    version = sim_node.info["driver_version"]
    newlib = tmp_path / "libcuda-new.so"
    src = tmp_path / "cuda.c"
    src.write_text("int cuDriverGetVersion(int *v) { *v = 12050; return 0; }\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", str(newlib), str(src)], check=True)
    bundle = bundle_with_hook(rootfs, "cuda-probe", ["NVIDIA_VISIBLE_DEVICES=all"])
    pattern = f"{private_host_cache}/{snapshot.FORMAT}-*.json"
    # One namespace (its overlays give the node's files their st_dev). Its /etc/ld.so.cache
    # is made when it is entered: wait out the racy window, as on a node that has been up.
    # The second start must find the snapshot the first one wrote, and not rewrite it; then
    # libcuda.so.1 is pointed at a new library (a driver update's way: a new file, the link
    # replaced), which the third container must get.
    script = f"""
sleep {RACY_SECONDS + 0.5}
runc run --bundle "$1" "$2" || exit
ls -i {pattern} || exit
runc run --bundle "$1" "$3" || exit
ls -i {pattern} || exit
mkdir {LIBDIR}/nct-new && cp {newlib} {LIBDIR}/nct-new/libcuda.so.{version}
ln -s nct-new/libcuda.so.{version} {LIBDIR}/libcuda.so.1.new && mv -T {LIBDIR}/libcuda.so.1.new {LIBDIR}/libcuda.so.1
exec runc run --bundle "$1" "$4"
"""
    res = sim_node.run(["sh", "-c", script, "sh", str(bundle), R.container_id(), R.container_id(), R.container_id()])
    out = res.stdout.decode().splitlines()
    assert res.returncode == 0, res.stderr.decode()
    assert [l for l in out if l.startswith("cuDriverGetVersion")] == ["cuDriverGetVersion=12040"] * 2 + [
        "cuDriverGetVersion=12050"]
    listed = [l for l in out if snapshot.FORMAT in l]
    assert len(listed) == 2 and listed[0] == listed[1], "the second start did not use the snapshot as it was"
