"""`nct sim run`: the node at the real paths inside a private mount namespace, NVML and
nvidia-smi seeing exactly the GPUs whose nodes exist, and the host left untouched."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path


import importlib.util

import pytest

from .conftest import nct, needs_gcc, needs_root, sim_run

pytestmark = [needs_root, needs_gcc]
needs_pynvml = pytest.mark.skipif(importlib.util.find_spec("pynvml") is None, reason="needs nvidia-ml-py")

PYNVML_LIST = r"""
import json, pynvml as p
p.nvmlInit()
out = {"driver": p.nvmlSystemGetDriverVersion(), "cuda": p.nvmlSystemGetCudaDriverVersion(), "gpus": []}
for i in range(p.nvmlDeviceGetCount()):
    h = p.nvmlDeviceGetHandleByIndex(i)
    g = {"uuid": p.nvmlDeviceGetUUID(h), "minor": p.nvmlDeviceGetMinorNumber(h),
         "bus": p.nvmlDeviceGetPciInfo(h).busId, "name": p.nvmlDeviceGetName(h),
         "cc": list(p.nvmlDeviceGetCudaComputeCapability(h)), "brand": p.nvmlDeviceGetBrand(h),
         "index": p.nvmlDeviceGetIndex(h), "migs": []}
    if p.nvmlDeviceGetMigMode(h)[0]:
        for j in range(p.nvmlDeviceGetMaxMigDeviceCount(h)):
            try:
                m = p.nvmlDeviceGetMigDeviceHandleByIndex(h, j)
            except p.NVMLError_NotFound:
                continue
            parent = p.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(m)
            g["migs"].append({"uuid": p.nvmlDeviceGetUUID(m), "gi": p.nvmlDeviceGetGpuInstanceId(m),
                              "ci": p.nvmlDeviceGetComputeInstanceId(m),
                              "is_mig": p.nvmlDeviceIsMigDeviceHandle(m).value,
                              "parent": p.nvmlDeviceGetUUID(parent)})
    out["gpus"].append(g)
assert p.nvmlDeviceGetUUID(p.nvmlDeviceGetHandleByUUID(out["gpus"][-1]["uuid"])) == out["gpus"][-1]["uuid"] if out["gpus"] else True
p.nvmlShutdown()
print(json.dumps(out))
"""


def pynvml_list(node, prelude: str = "") -> dict:
    r = sim_run(node.dir, "sh", "-c", f'{prelude} exec "$0" -c "$1"', sys.executable, PYNVML_LIST)
    return json.loads(r.stdout)


def expected_smi_lines(gpus) -> list[str]:
    lines = []
    for i, g in enumerate(gpus):
        lines.append(f"GPU {i}: {g.model} (UUID: {g.uuid})")
        lines += [f"  MIG {m.profile:<11} Device {j:2d}: (UUID: {m.uuid})" for j, m in enumerate(g.migs)]
    return lines


def test_nvidia_smi_list(node8):
    r = sim_run(node8.dir, "nvidia-smi", "-L")
    assert r.stdout.splitlines() == expected_smi_lines(node8.gpus)
    assert "  MIG 2g.10gb     Device  0: (UUID: MIG-" in r.stdout
    assert "  MIG 1g.5gb      Device  6: (UUID: MIG-" in r.stdout


def test_nvidia_smi_table_and_query(node1):
    table = sim_run(node1.dir, "nvidia-smi").stdout
    assert "Driver Version: 550.54.15" in table and "CUDA Version: 12.4" in table
    assert "NVIDIA A100-SXM4-40GB" in table and "00000000:07:00.0" in table
    q = sim_run(node1.dir, "nvidia-smi", "--query-gpu=index,uuid,pci.bus_id", "--format=csv,noheader").stdout
    assert q == f"0, {node1.gpus[0].uuid}, 00000000:07:00.0\n"


@needs_pynvml
def test_pynvml_sees_every_gpu(node8):
    out = pynvml_list(node8)
    assert out["driver"] == "550.54.15" and out["cuda"] == 12040
    assert [g["uuid"] for g in out["gpus"]] == [g.uuid for g in node8.gpus]
    assert [g["minor"] for g in out["gpus"]] == [g.minor for g in node8.gpus]
    assert [g["bus"] for g in out["gpus"]] == [g.bus_id.upper() for g in node8.gpus]
    assert out["gpus"][0]["cc"] == [8, 0] and out["gpus"][0]["brand"] == 14
    migs = out["gpus"][1]["migs"]
    assert [(m["uuid"], m["gi"], m["ci"]) for m in migs] == [(m.uuid, m.gi, m.ci) for m in node8.gpus[1].migs]
    assert all(m["is_mig"] == 1 and m["parent"] == node8.gpus[1].uuid for m in migs)


@needs_pynvml
def test_pynvml_lists_only_gpus_whose_nodes_exist(node8):
    # /dev is a private overlay inside `sim run`: removing nodes there hides them from NVML only
    out = pynvml_list(node8, "rm /dev/nvidia1 /dev/nvidia5 &&")
    want = [g for g in node8.gpus if g.minor not in (1, 5)]
    assert [g["uuid"] for g in out["gpus"]] == [g.uuid for g in want]
    assert [g["index"] for g in out["gpus"]] == list(range(6))  # renumbered like real NVML
    assert os.path.exists(Path(node8.root, "dev/nvidia1"))


def test_node_masked_by_another_device_is_not_a_gpu(node8):
    r = sim_run(node8.dir, "sh", "-c", "mount --bind /dev/null /dev/nvidia0 && nvidia-smi -L")
    assert node8.gpus[0].uuid not in r.stdout and node8.gpus[1].uuid in r.stdout


@needs_pynvml
def test_mig_device_hidden_without_its_caps_node(node8):
    m = node8.gpus[2].migs[3]
    out = pynvml_list(node8, f"rm /dev/nvidia-caps/nvidia-cap{m.ci_minor} &&")
    uuids = [x["uuid"] for x in out["gpus"][2]["migs"]]
    assert m.uuid not in uuids and len(uuids) == 6


def test_nvidia_smi_fails_without_driver(node1):
    r = sim_run(node1.dir, "sh", "-c", "rm /dev/nvidiactl && nvidia-smi -L", check=False)
    assert r.returncode == 9
    assert r.stdout.startswith("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.")


def test_zero_gpus(node0):
    r = sim_run(node0.dir, "nvidia-smi", "-L", check=False)
    assert r.returncode == 6 and "No devices were found" in r.stdout


def test_libraries_and_cache_at_real_paths(node8):
    v = node8.driver_version
    script = (
        # Debian's ld.so.conf names /lib/x86_64-linux-gnu (= /usr/lib/... on merged /usr) first
        "ldconfig -p | grep -E 'libnvidia-ml.so.1 \\(libc6,x86-64\\) => (/usr)?/lib/x86_64-linux-gnu/libnvidia-ml.so.1$' && "
        f"test -e /usr/lib/x86_64-linux-gnu/libcuda.so.{v} && test -e /lib/firmware/nvidia/{v}/gsp_ga10x.bin && "
        "test -S /run/nvidia-persistenced/socket && test -e /etc/vulkan/icd.d/nvidia_icd.json && "
        "grep -q '^195 nvidia-frontend$' /proc/devices && cat /proc/driver/nvidia/version && "
        "ls /proc/driver/nvidia/gpus && command -v nvidia-smi"
    )
    r = sim_run(node8.dir, "sh", "-c", script)
    assert f"Kernel Module  {v}" in r.stdout and "/usr/bin/nvidia-smi" in r.stdout
    for g in node8.gpus:
        assert g.proc_bus in r.stdout
    # libcuda by SONAME through the regenerated cache
    code = "import ctypes; v=ctypes.c_int(); ctypes.CDLL('libcuda.so.1').cuDriverGetVersion(ctypes.byref(v)); print(v.value)"
    assert sim_run(node8.dir, sys.executable, "-c", code).stdout.strip() == "12040"
    if node8.lib32:
        r = sim_run(node8.dir, "sh", "-c", "ldconfig -p | grep -F 'libcuda.so.1 (libc6) => /usr/lib/i386-linux-gnu/'")
        assert r.returncode == 0


def test_exit_status_env_and_errors(node1, tmp_path):
    r = sim_run(node1.dir, "sh", "-c", 'echo "$NCT_SIM_TEST_VAR"; exit 7', check=False,
                env={**os.environ, "NCT_SIM_TEST_VAR": "passed-through"})
    assert r.returncode == 7 and r.stdout == "passed-through\n"
    r = sim_run(node1.dir, "/nonexistent/cmd", check=False)
    assert r.returncode == 1 and r.stderr.startswith("nct: /nonexistent/cmd: cannot execute")
    r = nct("sim", "run", str(tmp_path), "--", "true")
    assert r.returncode == 1 and "node.json: not found" in r.stderr and r.stderr.count("\n") == 1


def _snapshot() -> dict:
    def listing(d):
        return sorted(os.listdir(d))
    return {
        "ld.so.cache": hashlib.sha256(Path("/etc/ld.so.cache").read_bytes()).hexdigest(),
        "usr/lib": listing("/usr/lib"), "x86_64": listing("/usr/lib/x86_64-linux-gnu"),
        "usr/bin": listing("/usr/bin"), "dev": listing("/dev"), "etc": listing("/etc"),
        "run": listing("/run"), "proc/driver": listing("/proc/driver"),
        "proc/devices": Path("/proc/devices").read_text(),
        "mounts": sorted(line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()),
    }


def test_host_untouched(node8):
    before = _snapshot()
    script = ("touch /etc/nct-sim-scratch /usr/lib/nct-sim-scratch /dev/nct-sim-scratch /run/nct-sim-scratch && "
              "ldconfig && nvidia-smi -L >/dev/null && ls /dev/nvidia0 /usr/bin/nvidia-smi")
    sim_run(node8.dir, "sh", "-c", script)
    after = _snapshot()
    assert after == before
    assert os.listdir(Path(node8.dir, ".run")) == []


def test_node_dir_with_overlay_separators(sim_tmp):
    from nct.sim.node import create_node

    node = create_node(sim_tmp / "odd:name,here", gpus=1, lib32=False)
    r = sim_run(node.dir, "nvidia-smi", "-L")
    assert r.stdout == f"GPU 0: {node.gpus[0].model} (UUID: {node.gpus[0].uuid})\n"


def test_reverse_minor_order(sim_tmp):
    """Index (bus order) and device minor differ: NVML reports each GPU's own minor, and
    hiding /dev/nvidia0 hides the LAST GPU in bus order."""
    from nct.sim.node import create_node

    node = create_node(sim_tmp / "reversed", gpus=3, mig="0:2", lib32=False, minor_order="reverse")
    assert [g.minor for g in node.gpus] == [2, 1, 0]
    assert Path(node.root, f"proc/driver/nvidia/capabilities/gpu2/mig/gi{node.gpus[0].migs[0].gi}/access").exists()
    q = "--query-gpu=index,minor_number,uuid"
    out = sim_run(node.dir, "nvidia-smi", q, "--format=csv,noheader").stdout.splitlines()
    assert out == [f"{g.index}, {g.minor}, {g.uuid}" for g in node.gpus]
    hidden = sim_run(node.dir, "sh", "-c", "rm /dev/nvidia0 && nvidia-smi -L").stdout
    assert node.gpus[2].uuid not in hidden and node.gpus[0].uuid in hidden and "MIG 3g.20gb" in hidden


PROBE32 = r"""
#include <dlfcn.h>
#include <stdio.h>
int main(void) {
    void *ml = dlopen("libnvidia-ml.so.1", RTLD_NOW), *cu = dlopen("libcuda.so.1", RTLD_NOW);
    if (!ml || !cu) { printf("dlopen: %s\n", dlerror()); return 1; }
    unsigned n = 0; int v = 0;
    int rc = ((int (*)(void))dlsym(ml, "nvmlInit_v2"))();
    ((int (*)(unsigned *))dlsym(ml, "nvmlDeviceGetCount_v2"))(&n);
    ((int (*)(int *))dlsym(cu, "cuDriverGetVersion"))(&v);
    printf("%d %u %d\n", rc, n, v);
    return 0;
}
"""


def test_32bit_process_uses_32bit_libraries(node8, tmp_path):
    if not node8.lib32:
        pytest.skip("gcc -m32 unavailable (install gcc-multilib)")
    (tmp_path / "probe.c").write_text(PROBE32)
    subprocess.run(["gcc", "-m32", "-o", str(tmp_path / "probe"), str(tmp_path / "probe.c")], check=True)
    r = sim_run(node8.dir, "sh", "-c", f"rm /dev/nvidia7 && {tmp_path / 'probe'}")
    assert r.stdout == "0 7 12040\n"
