"""procfs parsers on captured file contents, and garbage in each file."""

from __future__ import annotations

from pathlib import Path

import pytest

from nct.driver import procfs
from nct.errors import DiscoveryError

FIX = Path(__file__).parent / "fixtures"


def fx(name: str) -> str:
    return (FIX / name).read_text()


@pytest.mark.parametrize("name,version,open_module", [
    ("version.proprietary", "550.54.15", False),
    ("version.open", "570.124.06", True),
    ("version.aarch64", "535.129.03", False),
])
def test_version_formats(name, version, open_module):
    v = procfs.parse_version(fx(name))
    assert (v.version, v.open_module) == (version, open_module)


def test_two_component_version():
    assert procfs.parse_version("NVRM version: NVIDIA UNIX x86_64 Kernel Module  418.39  Sat Feb  9 2019\n").version == "418.39"


@pytest.mark.parametrize("text,what", [
    ("", "no 'NVRM version:' line"),
    ("hello world\n", "no 'NVRM version:' line"),
    ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  banana\n", ":1: no driver version"),
])
def test_version_garbage(text, what):
    with pytest.raises(DiscoveryError) as e:
        procfs.parse_version(text, "/proc/driver/nvidia/version")
    assert "/proc/driver/nvidia/version" in str(e.value) and what in str(e.value)
    assert "\n" not in str(e.value)


def test_information_tab_layout():
    g = procfs.parse_gpu_information(fx("information.a100"))
    assert g.model == "NVIDIA A100-SXM4-40GB"
    assert g.uuid == "GPU-2b4a0c5e-8f3d-4c1a-9e7b-6d5f4a3b2c1d"
    assert g.bus_id == "00000000:07:00.0"
    assert (g.minor, g.excluded, g.irq, g.bus_type) == (0, False, 142, "PCIe")


def test_information_space_layout_with_firmware_and_excluded():
    g = procfs.parse_gpu_information(fx("information.h100"))
    assert (g.model, g.minor, g.excluded, g.firmware) == ("NVIDIA H100 80GB HBM3", 5, True, "535.129.03")
    assert g.bus_id == "00000000:62:00.0"


@pytest.mark.parametrize("mutate,what", [
    (lambda t: t.replace("Device Minor: \t 0", "Device Minor: \t zero"), "information:9: Device Minor is not a number"),
    (lambda t: t.replace("Bus Location: \t 0000:07:00.0", "Bus Location: \t somewhere"), "information:8: bad Bus Location"),
    (lambda t: t.replace("GPU UUID: \t GPU-2b4a0c5e-8f3d-4c1a-9e7b-6d5f4a3b2c1d\n", ""), "missing 'GPU UUID'"),
    (lambda t: t + "this line has no colon\n", "information:11: expected 'Key: value'"),
    (lambda t: t.replace("Device Minor: \t 0", "Device Minor: \t 999"), "Device Minor out of range"),
    (lambda t: "\x00\x01garbage", "expected 'Key: value'"),
])
def test_information_garbage(mutate, what):
    with pytest.raises(DiscoveryError, match="information") as e:
        procfs.parse_gpu_information(mutate(fx("information.a100")), "information")
    assert what in str(e.value)


def test_devices_frontend_and_plain_nvidia():
    m = procfs.parse_devices(fx("devices.frontend"))
    assert m["nvidia-frontend"] == 195 and m["nvidia-caps"] == 235 and m["nvidia-uvm"] == 505
    assert m["nvidia-caps-imex-channels"] == 234 and "loop" not in m
    m2 = procfs.parse_devices(fx("devices.nvidia"))
    assert m2["nvidia"] == 195 and m2["nvidia-uvm"] == 510 and "blkext" not in m2


@pytest.mark.parametrize("text,what", [
    ("195 nvidia\n", "devices:1: expected 'Character devices:'"),
    ("Character devices:\n195\n", "devices:2: expected 'MAJOR name'"),
    ("Character devices:\nabc nvidia\n", "devices:2: expected 'MAJOR name'"),
    ("", "no 'Character devices:' section"),
])
def test_devices_garbage(text, what):
    with pytest.raises(DiscoveryError) as e:
        procfs.parse_devices(text, "devices")
    assert what in str(e.value)


def test_capability_and_mig_minors():
    c = procfs.parse_capability(fx("cap.config"), "config")
    assert (c.minor, c.mode, c.modify) == (1, 0o400, True)
    m = procfs.parse_mig_minors(fx("mig-minors"))
    assert m["config"] == 1 and m["gpu0/gi1/ci0/access"] == 13
    with pytest.raises(DiscoveryError, match=r"mig-minors:2: expected 'NAME MINOR'"):
        procfs.parse_mig_minors("config 1\ngpu0/gi0/access three\n", "mig-minors")
    with pytest.raises(DiscoveryError, match="access: missing 'DeviceFileMinor'"):
        procfs.parse_capability("DeviceFileMode: 256\n", "access")
    with pytest.raises(DiscoveryError, match=r"access:1: DeviceFileMinor is not a number"):
        procfs.parse_capability("DeviceFileMinor: x\n", "access")


def _full_mig_minors() -> tuple[str, dict[str, int]]:
    """The file a real driver writes: every GPU slot (32), 15 GIs, 8 CIs each, in its order."""
    lines, want, minor = ["config 1", "monitor 2"], {"config": 1, "monitor": 2}, 3
    for gpu in range(32):
        for gi in range(15):
            for name in [f"gpu{gpu}/gi{gi}/access"] + [f"gpu{gpu}/gi{gi}/ci{ci}/access" for ci in range(8)]:
                lines.append(f"{name} {minor}")
                want[name] = minor
                minor += 1
    return "\n".join(lines) + "\n", want


def test_full_size_mig_minors_parse_and_garbage_anywhere_is_one_line():
    """A real driver's mig-minors (4322 lines) is read on every discovery: parsed (and only
    checked, check_mig_minors) by whole-text operations, its garbage still reported with
    the file and line, whatever the layout around it."""
    text, want = _full_mig_minors()
    assert len(text.splitlines()) == 4322
    assert procfs.parse_mig_minors(text) == want
    procfs.check_mig_minors(text)
    lines = text.splitlines()
    for bad, lineno in [("gpu31/gi14/ci7/access x", 4322), ("gpu31/gi14/ci7/access", 4322),
                        ("gpu31/gi14/ci7/access 4321 9", 4322), ("gpu31/gi14/ci7/access \u0663", 4322)]:
        garbage = "\n".join(lines[:-1] + [bad]) + "\n"
        for parse in (procfs.parse_mig_minors, procfs.check_mig_minors):
            with pytest.raises(DiscoveryError, match=rf"^mig-minors:{lineno}: expected 'NAME MINOR'"):
                parse(garbage, "mig-minors")
    # a name and its minor on two lines each look right word by word: still line 4321's garbage
    split = "\n".join(lines[:-2] + ["gpu31/gi14/ci6/access", "4321 gpu31/gi14/ci7/access 4322"]) + "\n"
    with pytest.raises(DiscoveryError, match=r"^mig-minors:4321: expected 'NAME MINOR'"):
        procfs.check_mig_minors(split, "mig-minors")
    # other layouts (blank lines, tabs, no final newline, CRLF) go line by line, same result
    loose = "\n" + text.replace(" ", "\t").replace("\n", "\r\n").rstrip("\r\n")
    assert procfs.parse_mig_minors(loose) == want
    procfs.check_mig_minors(loose)
    assert procfs.parse_mig_minors("") == {}


def test_scan_mig_caps(tmp_path):
    base = tmp_path / "capabilities"
    for rel, minor in (("gpu2/mig/gi3/access", 30), ("gpu2/mig/gi3/ci0/access", 31), ("gpu2/mig/gi3/ci1/access", 32),
                       ("gpu2/mig/gi11/access", 102), ("gpu2/mig/gi11/ci0/access", 103)):
        f = base / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(f"DeviceFileMinor: {minor}\nDeviceFileMode: 292\nDeviceFileModify: 1\n")
    (base / "gpu2/mig/gi3/notaci").mkdir()
    migs = procfs.scan_mig_caps(str(base), 2)
    assert [(m.gi, m.ci, m.gi_access.minor, m.ci_access.minor) for m in migs] == [
        (3, 0, 30, 31), (3, 1, 30, 32), (11, 0, 102, 103)]
    assert migs[0].ci_access_path.endswith("gpu2/mig/gi3/ci0/access")
    assert procfs.scan_mig_caps(str(base), 0) == []


@pytest.mark.parametrize("raw,norm", [
    ("0000:07:00.0", "00000000:07:00.0"), ("00000000:B7:00.0", "00000000:b7:00.0"),
    ("1:2:3.0", "00000001:02:03.0"), ("nope", None),
])
def test_bus_ids(raw, norm):
    assert procfs.normalise_bus_id(raw) == norm


@pytest.mark.parametrize("raw,norm", [
    # procfs "Bus Location" (4-digit domain), NVML (8 digits, upper-case hex), both callers
    ("0000:07:00.0", "00000000:07:00.0"), ("0000:b7:00.0", "00000000:b7:00.0"),
    ("00000000:B7:00.0", "00000000:b7:00.0"), ("00000001:3B:1F.0", "00000001:3b:1f.0"),
    (" 0000:62:00.0 ", "00000000:62:00.0"),
    # requests (NVIDIA_VISIBLE_DEVICES, --device): upstream's sscanf("%x:%02x:%02x.0")
    ("1:2:3", "00000001:02:03.0"), ("0:1:0.3", "00000000:01:00.0"),
    ("01:00.0", None), ("GPU-1", None), ("0000:01:00.9", None), ("0000:001:00.0", None), ("", None),
])
def test_one_bus_id_rule_for_procfs_nvml_and_requests(raw, norm):
    from nct.edits.select import normalise_bus_id as used_by_selection

    assert procfs.normalise_bus_id(raw) == norm
    assert used_by_selection is procfs.normalise_bus_id


def test_a_bus_location_without_its_function_is_refused():
    text = fx("information.a100").replace("0000:07:00.0", "0000:07:00")
    with pytest.raises(DiscoveryError, match="bad Bus Location"):
        procfs.parse_gpu_information(text, "information")
