"""Pure planning of a simulated node: MIG specs, GPU facts, procfs texts (no root needed)."""

from __future__ import annotations

import re

import pytest

from nct.sim import layout
from nct.sim.model import SimError


@pytest.mark.parametrize("spec,gpus,want", [
    (None, 4, {}),
    ("", 4, {}),
    ("7", 3, {0: 7, 1: 7, 2: 7}),
    ("0", 2, {0: 0, 1: 0}),
    ("0:3,1:2", 4, {0: 3, 1: 2}),
    (" 2 : 1 ", 3, {2: 1}),
])
def test_mig_spec(spec, gpus, want):
    assert layout.parse_mig_spec(spec, gpus) == want


@pytest.mark.parametrize("spec,msg", [
    ("8", "at most 7"),
    ("a", "expected N or GPU:N"),
    ("0:3,", "expected N or GPU:N"),
    ("5:1", "GPU 5 does not exist"),
    ("0:1,0:2", "given twice"),
    ("-1", "expected N or GPU:N"),
])
def test_bad_mig_spec(spec, msg):
    with pytest.raises(SimError) as e:
        layout.parse_mig_spec(spec, 2)
    assert msg in str(e.value) and "\n" not in str(e.value)


def test_plan_is_deterministic_and_seeded():
    a = layout.plan_gpus(4, {1: 3}, "seed")
    assert a == layout.plan_gpus(4, {1: 3}, "seed")
    assert a[0].uuid != layout.plan_gpus(4, {1: 3}, "other")[0].uuid
    assert len({g.uuid for g in a}) == 4
    assert all(re.fullmatch(r"GPU-[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}", g.uuid) for g in a)
    # bus ids sort in index order, both spellings agree
    assert sorted(a, key=lambda g: g.bus_id) == list(a)
    assert [g.proc_bus for g in a] == ["0000:07:00.0", "0000:0f:00.0", "0000:47:00.0", "0000:4e:00.0"]
    assert a[0].bus_id == "00000000:07:00.0"


def test_plan_64_gpus_unique_buses():
    gpus = layout.plan_gpus(64, {}, "s")
    assert len({g.bus_id for g in gpus}) == 64
    assert sorted(gpus, key=lambda g: g.bus_id) == list(gpus)
    assert [g.minor for g in gpus] == list(range(64))


@pytest.mark.parametrize("n", [-1, 65])
def test_gpu_count_bounds(n):
    with pytest.raises(SimError, match="must be 0..64"):
        layout.plan_gpus(n, {}, "s")


def test_mig_layout_and_minors():
    g = layout.plan_gpus(2, {1: 3}, "s")[1]
    assert g.mig_enabled and [m.gi for m in g.migs] == [3, 4, 5] and {m.ci for m in g.migs} == {0}
    assert {m.profile for m in g.migs} == {"2g.10gb"}
    # minors as the driver numbers them: config 1, monitor 2, gpu0/gi0/access 3, ...
    assert layout.gi_minor(0, 0) == 3 and layout.ci_minor(0, 0, 0) == 4
    assert layout.gi_minor(0, 1) == 12 and layout.ci_minor(0, 1, 0) == 13
    text = layout.mig_minors_text([0, 1])
    table = dict(line.rsplit(" ", 1) for line in text.splitlines())
    assert table["config"] == "1" and table["monitor"] == "2"
    assert table["gpu0/gi1/access"] == "12" and table["gpu0/gi1/ci0/access"] == "13"
    for m in g.migs:
        assert table[f"gpu1/gi{m.gi}/access"] == str(m.gi_minor)
        assert table[f"gpu1/gi{m.gi}/ci{m.ci}/access"] == str(m.ci_minor)
    assert len(set(table.values())) == len(table)


def test_information_format():
    g = layout.plan_gpus(1, {}, "s")[0]
    text = layout.information_text(g)
    fields = {k.strip(): v.strip() for k, v in (line.split(":", 1) for line in text.splitlines())}
    assert list(fields) == ["Model", "IRQ", "GPU UUID", "Video BIOS", "Bus Type", "DMA Size", "DMA Mask",
                            "Bus Location", "Device Minor", "GPU Excluded"]
    assert fields["GPU UUID"] == g.uuid and fields["Bus Location"] == "0000:07:00.0"
    assert fields["Device Minor"] == "0" and fields["GPU Excluded"] == "No"
    assert text.startswith("Model: \t\t NVIDIA A100-SXM4-40GB\n")


def test_version_and_params():
    v = layout.version_text("550.54.15")
    assert re.match(r"NVRM version: NVIDIA UNIX x86_64 Kernel Module  550\.54\.15  \w", v)
    assert v.splitlines()[1].startswith("GCC version:")
    params = dict(line.split(": ", 1) for line in layout.params_text().splitlines())
    assert params["ModifyDeviceFiles"] == "1" and params["DeviceFileMode"] == "438"


def test_majors_avoid_host_and_devices_text():
    host = layout.parse_proc_devices("Character devices:\n  1 mem\n511 foo\n510 bar\n\nBlock devices:\n  8 sd\n")
    assert host == {1, 511, 510, 8}
    majors = layout.choose_majors(host)
    assert majors["nvidia-frontend"] == 195 and majors["nvidia-uvm"] == 509
    assert len(set(majors.values())) == len(majors)
    text = layout.devices_text(majors)
    chars = text.split("\n\n")[0].splitlines()
    assert chars[0] == "Character devices:"
    assert "195 nvidia-frontend" in chars and f"{majors['nvidia-caps']} nvidia-caps" in chars
    assert "Block devices:" in text


def test_trailer_roundtrip_format():
    gpus = layout.plan_gpus(2, {0: 2}, "s")
    t = layout.trailer(gpus)
    assert t.endswith(b"\n") and t[-17:-11] == b"NCTSIM"
    length = int(t[-11:-1])
    body = t[-17 - length:-17].decode()
    assert body.count("%%") == 2 and gpus[1].uuid in body and gpus[0].migs[1].uuid in body
