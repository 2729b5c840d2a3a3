"""Spec dirs: priorities, conflicts, invalid files, 200 files, resolution and injection."""

from __future__ import annotations

import json
import os

import pytest

from nct.cdi.registry import Registry, inject, spec_files
from nct.errors import SpecError
from schema_check import oci_schema_errors


def write_spec(directory, fname, kind="nvidia.com/gpu", devices=None, common=None, version="0.5.0"):
    os.makedirs(directory, exist_ok=True)
    doc = {"cdiVersion": version, "kind": kind,
           "devices": [{"name": n, "containerEdits": e} for n, e in (devices or {}).items()]}
    if common:
        doc["containerEdits"] = common
    path = os.path.join(directory, fname)
    with open(path, "w") as f:
        if fname.endswith(".json"):
            json.dump(doc, f)
        else:
            import yaml
            yaml.safe_dump(doc, f)
    return path


def node(i):
    return {"deviceNodes": [{"path": f"/dev/nvidia{i}", "type": "c", "major": 195, "minor": i}]}


def oci_spec():
    return {"ociVersion": "1.2.0", "root": {"path": "rootfs"},
            "process": {"cwd": "/", "args": ["sh"], "env": ["PATH=/bin", "NVIDIA_VISIBLE_DEVICES=all"],
                        "user": {"uid": 0, "gid": 0}}}


def test_later_dir_wins_and_equal_priority_conflicts(tmp_path):
    etc, run = str(tmp_path / "etc"), str(tmp_path / "run")
    write_spec(etc, "a.yaml", devices={"0": node(0), "1": node(1), "2": node(2)})
    write_spec(run, "b.json", devices={"1": node(11)})
    write_spec(etc, "c.json", devices={"2": node(22)})  # same priority as a.yaml -> conflict
    write_spec(etc, "d.json", devices={"3": node(3)})
    write_spec(run, "e.json", devices={"3": node(33)})
    write_spec(run, "f.json", devices={"3": node(34)})  # two higher-priority files -> conflict
    write_spec(etc, "g.json", devices={"4": node(4)})
    write_spec(etc, "h.json", devices={"4": node(44)})  # conflict at low priority...
    write_spec(run, "i.json", devices={"4": node(444)})  # ...settled by a higher one
    reg = Registry([etc, run])
    assert reg.device_names() == ["nvidia.com/gpu=0", "nvidia.com/gpu=1", "nvidia.com/gpu=4"]
    assert reg.devices["nvidia.com/gpu=4"][1]["containerEdits"] == node(444)
    assert reg.devices["nvidia.com/gpu=1"][1]["containerEdits"] == node(11)
    joined = "\n".join(reg.errors)
    assert "conflicting device nvidia.com/gpu=2" in joined and "c.json" in joined and "a.yaml" in joined
    assert "conflicting device nvidia.com/gpu=3" in joined


def test_invalid_files_reported_and_skipped(tmp_path):
    d = tmp_path / "cdi"
    write_spec(str(d), "good.json", devices={"0": node(0)})
    (d / "broken.json").write_text("{nope")
    (d / "unknown.yaml").write_text("cdiVersion: 0.5.0\nkind: a.com/b\nfoo: 1\ndevices: []\n")
    (d / "ignored.txt").write_text("not a spec")
    (d / "sub.json").mkdir()
    write_spec(str(d / "sub.json"), "nested.json", devices={"9": node(9)})
    reg = Registry([str(d), str(tmp_path / "missing")])
    assert reg.device_names() == ["nvidia.com/gpu=0"]
    assert len(reg.errors) == 2
    assert any("broken.json: invalid JSON" in e for e in reg.errors)
    assert any("unknown.yaml: unknown field 'foo'" in e for e in reg.errors)
    assert [os.path.basename(p) for p in spec_files(str(d))] == ["broken.json", "good.json", "unknown.yaml"]


def test_two_hundred_spec_files(tmp_path):
    d = str(tmp_path / "cdi")
    for i in range(200):
        write_spec(d, f"vendor{i:03d}.{'json' if i % 2 else 'yaml'}", kind=f"vendor{i}.com/dev",
                   devices={"a": node(i), "b": node(i + 1000)}, common={"env": [f"V{i}=1"]})
    reg = Registry([d])
    assert reg.errors == []
    assert len(reg.specs) == 200 and len(reg.device_names()) == 400
    out = reg.inject(oci_spec(), ["vendor7.com/dev=a", "vendor199.com/dev=b"])
    assert "V7=1" in out["process"]["env"] and "V199=1" in out["process"]["env"]
    assert [dev["minor"] for dev in out["linux"]["devices"]] == [7, 1199]


def test_inject_applies_spec_edits_once_plus_each_device(tmp_path):
    d = str(tmp_path / "cdi")
    common = {"env": ["NVIDIA_VISIBLE_DEVICES=void"],
              "deviceNodes": [{"path": "/dev/nvidiactl", "type": "c", "major": 195, "minor": 255}],
              "mounts": [{"hostPath": "/drv/libcuda.so.1", "containerPath": "/usr/lib/libcuda.so.1",
                          "options": ["ro", "nosuid", "nodev", "rbind", "rprivate"]}],
              "hooks": [{"hookName": "createContainer", "path": "/usr/bin/nvidia-cdi-hook",
                         "args": ["nvidia-cdi-hook", "update-ldcache", "--folder", "/usr/lib"],
                         "env": ["NVIDIA_CTK_DEBUG=false"]}]}
    write_spec(d, "nvidia.yaml", devices={"0": node(0), "1": node(1)}, common=common)
    write_spec(d, "other.json", kind="example.com/net", devices={"x": {"env": ["X=1"]}})
    out = inject(oci_spec(), ["nvidia.com/gpu=0", "nvidia.com/gpu=1", "nvidia.com/gpu=0", "example.com/net=x"], [d])
    assert out["process"]["env"] == ["PATH=/bin", "NVIDIA_VISIBLE_DEVICES=void", "X=1"]
    assert [x["path"] for x in out["linux"]["devices"]] == ["/dev/nvidiactl", "/dev/nvidia0", "/dev/nvidia1"]
    assert len(out["hooks"]["createContainer"]) == 1  # spec-level edits applied once
    assert [r["minor"] for r in out["linux"]["resources"]["devices"]] == [255, 0, 1]
    assert oci_schema_errors(out) == []


def test_unresolvable_names_are_named(tmp_path):
    d = str(tmp_path / "cdi")
    write_spec(d, "nvidia.yaml", devices={"0": node(0)})
    spec = oci_spec()
    with pytest.raises(SpecError) as e:
        Registry([d]).inject(spec, ["nvidia.com/gpu=0", "nvidia.com/gpu=7", "nvidia.com/gpu=all"])
    assert str(e.value) == "unresolvable CDI devices nvidia.com/gpu=7, nvidia.com/gpu=all"
    assert spec == oci_spec()  # nothing applied


def test_injection_failure_is_a_spec_error(tmp_path):
    d = str(tmp_path / "cdi")
    write_spec(d, "x.json", devices={"0": {"deviceNodes": [{"path": "/nonexistent/dev/nvidia0"}]}})
    with pytest.raises(SpecError, match="failed to inject CDI devices: .*nonexistent"):
        Registry([d]).inject(oci_spec(), ["nvidia.com/gpu=0"])
