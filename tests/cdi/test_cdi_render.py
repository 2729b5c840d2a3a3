"""ContainerEdits -> CDI: field simplifications, hooks, dedup against common edits, the
`all` device, minimum version; every spec we build passes the official schema and our
strict loader."""

from __future__ import annotations

import pytest

from nct.cdi.hooks import HookOptions, cdi_hook, hook_argv0
from nct.cdi.render import build_spec, edits_to_cdi, merge_cdi_edits
from nct.cdi.spec import dump_spec, spec_from_data, validate_spec
from schema_check import check_schema, schema_errors
from nct.edits.model import ContainerEdits, DeviceNodeEdit, MountEdit, SymlinkEdit
from nct.errors import SpecError

LIB = "/usr/lib/x86_64-linux-gnu"


def common() -> ContainerEdits:
    return ContainerEdits(
        env=["NVIDIA_VISIBLE_DEVICES=void", f"NVIDIA_CTK_LIBCUDA_DIR={LIB}"],
        device_nodes=[DeviceNodeEdit("/dev/nvidiactl", "/dev/nvidiactl", 195, 255, file_mode=0o20666),
                      DeviceNodeEdit("/dev/nvidia-uvm", "/dev/nvidia-uvm", 511, 0, gid=44)],
        mounts=[MountEdit(f"/drv{LIB}/libcuda.so.550.54.15", f"{LIB}/libcuda.so.550.54.15"),
                MountEdit(f"/drv{LIB}/libcuda.so.550.54.15", f"{LIB}/libcuda.so.550.54.15")],
        symlinks=[SymlinkEdit("libcuda.so.1", f"{LIB}/libcuda.so")],
        ldconfig_folders=[LIB, LIB],
        additional_gids=[44],
        proc_driver_gpus=[],
    )


def gpu(i: int, root: str = "") -> ContainerEdits:
    return ContainerEdits(
        device_nodes=[DeviceNodeEdit(f"/dev/nvidia{i}", f"{root}/dev/nvidia{i}", 195, i),
                      DeviceNodeEdit("/dev/nvidiactl", "/dev/nvidiactl", 195, 255, file_mode=0o20666)],
        proc_driver_gpus=[f"0000:0{i}:00.0"],
    )


def test_edits_to_cdi_simplifications():
    e = edits_to_cdi(common(), HookOptions(driver_version="550.54.15"))
    ctl, uvm = e["deviceNodes"]
    assert ctl == {"path": "/dev/nvidiactl", "major": 195, "minor": 255, "fileMode": 0o666, "permissions": "rwm"}
    assert uvm["gid"] == 44 and "hostPath" not in uvm
    assert len(e["mounts"]) == 1
    assert e["mounts"][0]["options"] == ["ro", "nosuid", "nodev", "rbind", "rprivate"]
    assert [h["args"][1] for h in e["hooks"]] == [
        "create-symlinks", "enable-cuda-compat", "update-ldcache", "disable-device-node-modification"]
    assert e["hooks"][2]["args"] == ["nvidia-cdi-hook", "update-ldcache", "--folder", LIB]
    assert all(h["env"] == ["NVIDIA_CTK_DEBUG=false"] and h["hookName"] == "createContainer" for h in e["hooks"])
    assert e["additionalGids"] == [44]
    assert edits_to_cdi(ContainerEdits()) == {}


def test_build_spec_is_valid_and_minimal():
    spec = build_spec("nvidia.com", "gpu", [("0", gpu(0, "/drv")), ("1", gpu(1)),
                                            ("GPU-11111111-2222", gpu(0, "/drv"))],
                      common(), hook_options=HookOptions(driver_version="550.54.15"), all_device=True)
    assert schema_errors(spec) == []
    validate_spec(spec, "built")
    assert spec["cdiVersion"] == "0.7.0"  # additionalGids
    assert [d["name"] for d in spec["devices"]] == ["0", "1", "GPU-11111111-2222", "all"]
    dev0 = spec["devices"][0]["containerEdits"]
    # nvidiactl and the /proc hook are in the common edits, so not repeated per device
    assert dev0 == {"deviceNodes": [{"path": "/dev/nvidia0", "hostPath": "/drv/dev/nvidia0",
                                     "major": 195, "minor": 0, "permissions": "rwm"}]}
    assert [n["path"] for n in spec["devices"][3]["containerEdits"]["deviceNodes"]] == ["/dev/nvidia0", "/dev/nvidia1"]
    # round trip through both file formats
    for fmt in ("json", "yaml"):
        back = spec_from_data(dump_spec(spec, fmt), f"x.{fmt}", check=check_schema)
        assert back.raw == spec


def test_build_spec_minimum_versions():
    only_nodes = ContainerEdits(device_nodes=[DeviceNodeEdit("/dev/gdrdrv", "/dev/gdrdrv", 240, 0)])
    assert build_spec("nvidia.com", "gdrcopy", [("all", only_nodes)])["cdiVersion"] == "0.3.0"
    assert build_spec("nvidia.com", "gpu", [("0", only_nodes)])["cdiVersion"] == "0.5.0"
    s = build_spec("nvidia.com", "gpu", [("gpu0", only_nodes)], annotations={"nct.io/driver-version": "550"})
    assert s["cdiVersion"] == "0.6.0" and s["annotations"] == {"nct.io/driver-version": "550"}
    s = build_spec("nvidia.com", "gpu", [("gpu0", only_nodes, {"gpu.nvidia.com/coherent": "false"})])
    assert s["devices"][0]["annotations"] == {"gpu.nvidia.com/coherent": "false"}
    assert schema_errors(s) == []


def test_device_equal_to_common_keeps_its_edits():
    c = ContainerEdits(env=["A=1"])
    s = build_spec("v.com", "c", [("d", ContainerEdits(env=["A=1"]))], c)
    assert s["devices"][0]["containerEdits"] == {"env": ["A=1"]}
    validate_spec(s)


def test_empty_device_is_an_error():
    with pytest.raises(SpecError, match="v.com/c=d has no container edits"):
        build_spec("v.com", "c", [("d", ContainerEdits())])


def test_merge_cdi_edits_dedups():
    a = {"env": ["A=1"], "deviceNodes": [{"path": "/dev/x"}]}
    b = {"env": ["A=1", "B=2"], "deviceNodes": [{"path": "/dev/x"}, {"path": "/dev/y"}]}
    assert merge_cdi_edits([a, b]) == {"env": ["A=1", "B=2"], "deviceNodes": [{"path": "/dev/x"}, {"path": "/dev/y"}]}


def test_hook_binary_names_and_ldconfig_path():
    assert hook_argv0("/usr/bin/nvidia-ctk") == ["nvidia-ctk", "hook"]
    assert hook_argv0("/opt/x/nvidia-cdi-hook") == ["nvidia-cdi-hook"]
    h = cdi_hook("noop", (), HookOptions(hook_path="/opt/nvidia-ctk"))
    assert h.args == ("nvidia-ctk", "hook", "noop")
    e = edits_to_cdi(ContainerEdits(ldconfig_folders=["/lib"]), HookOptions(ldconfig_path="@/sbin/ldconfig"))
    assert e["hooks"][0]["args"] == ["nvidia-cdi-hook", "update-ldcache", "--ldconfig-path", "/sbin/ldconfig",
                                     "--folder", "/lib"]


def test_cuda_compat_dir():
    e = edits_to_cdi(ContainerEdits(cuda_compat_dir="/usr/local/cuda-12/compat"),
                     HookOptions(driver_version="550.54.15"))
    assert [h["args"][1:] for h in e["hooks"]] == [
        ["enable-cuda-compat", "--host-driver-version=550.54.15",
         "--cuda-compat-container-root=/usr/local/cuda-12/compat"],
        ["update-ldcache"]]
