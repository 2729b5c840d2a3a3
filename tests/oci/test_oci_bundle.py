"""config.json I/O: clear errors, unknown fields preserved, atomic replacement."""

from __future__ import annotations

import json
import os
import stat

import pytest

from nct.errors import SpecError
from nct.oci.bundle import check_spec_types, read_spec_file, unknown_fields
from nct.runtime.bundle import read_spec, write_spec


def config_path(bundle: str) -> str:
    return os.path.join(bundle, "config.json")


def load_bundle_spec(bundle: str, *, strict: bool = False) -> dict:
    return read_spec(config_path(bundle), strict=strict)


def write_bundle_spec(bundle: str, spec: dict) -> None:
    write_spec(config_path(bundle), spec)

MINIMAL = {"ociVersion": "1.2.0", "root": {"path": "rootfs"},
           "process": {"cwd": "/", "args": ["sh"], "env": ["PATH=/bin"], "user": {"uid": 0, "gid": 0}}}


def write(path, text):
    path.write_text(text)
    return path


def test_missing_config_names_the_file(tmp_path):
    with pytest.raises(SpecError) as e:
        load_bundle_spec(str(tmp_path))
    assert str(tmp_path / "config.json") in str(e.value)
    assert "\n" not in str(e.value)


def test_bad_json_reports_line_and_column(tmp_path):
    write(tmp_path / "config.json", '{\n  "ociVersion": "1.2.0",\n  "root": {"path": }\n}\n')
    with pytest.raises(SpecError) as e:
        load_bundle_spec(str(tmp_path))
    msg = str(e.value)
    assert "line 3" in msg and "column" in msg and "config.json" in msg


def test_non_object_rejected(tmp_path):
    write(tmp_path / "config.json", "[1, 2]")
    with pytest.raises(SpecError, match="must be a JSON object"):
        load_bundle_spec(str(tmp_path))


@pytest.mark.parametrize("mutate, key", [
    (lambda s: s["process"].__setitem__("env", "PATH=/bin"), "process.env"),
    (lambda s: s["process"].__setitem__("env", ["A=1", 3]), "process.env[1]"),
    (lambda s: s.__setitem__("mounts", [{"destination": 5}]), "mounts[0].destination"),
    (lambda s: s["root"].__setitem__("path", ["x"]), "root.path"),
    (lambda s: s.__setitem__("hooks", {"prestart": {"path": "/x"}}), "hooks.prestart"),
    (lambda s: s.__setitem__("linux", {"devices": [{"path": 1}]}), "linux.devices[0].path"),
    (lambda s: s["process"]["user"].__setitem__("uid", "0"), "process.user.uid"),
    (lambda s: s["process"]["user"].__setitem__("additionalGids", [True]), "process.user.additionalGids[0]"),
    (lambda s: s.__setitem__("annotations", {"a": 1}), "annotations.a"),
])
def test_wrong_types_name_the_key(tmp_path, mutate, key):
    spec = json.loads(json.dumps(MINIMAL))
    mutate(spec)
    write(tmp_path / "config.json", json.dumps(spec))
    with pytest.raises(SpecError) as e:
        load_bundle_spec(str(tmp_path))
    assert key in str(e.value)


def test_round_trip_preserves_unknown_fields(tmp_path):
    spec = dict(MINIMAL, x_vendor={"nested": [1, 2.5, None, True, "é"]}, linux={"weird": {"a": "b"}})
    spec["process"] = dict(spec["process"], futureField={"k": "v"})
    write(tmp_path / "config.json", json.dumps(spec, indent=4))
    loaded = load_bundle_spec(str(tmp_path))
    write_bundle_spec(str(tmp_path), loaded)
    assert json.loads((tmp_path / "config.json").read_text("utf-8")) == spec
    raw = (tmp_path / "config.json").read_bytes()
    assert b"\n" not in raw and b": " not in raw  # compact, as upstream writes it
    assert "é".encode() in raw


def test_strict_mode_rejects_unknown_fields(tmp_path):
    spec = dict(MINIMAL, bogus=1)
    spec["process"] = dict(spec["process"], alsoBogus=2)
    write(tmp_path / "config.json", json.dumps(spec))
    assert unknown_fields(spec) == ["process.alsoBogus", "bogus"]  # document order
    with pytest.raises(SpecError, match="unknown field 'process.alsoBogus'"):
        load_bundle_spec(str(tmp_path), strict=True)
    assert load_bundle_spec(str(tmp_path))["bogus"] == 1


def test_unknown_field_error_is_short(tmp_path):
    """Review finding: the first unknown key was printed whole: a 1 MiB key name made a 1 MiB
    "one-line" error (shim and bundle reader alike). It is cut to 80 characters."""
    spec = dict(MINIMAL, **{"k" * (1 << 20): 1})
    write(tmp_path / "config.json", json.dumps(spec))
    with pytest.raises(SpecError, match=r"unknown field 'kkkk") as e:
        read_spec(str(tmp_path / "config.json"))
    assert len(str(e.value)) < 400 and "\n" not in str(e.value)


def test_good_samples_have_no_unknown_fields():
    here = os.path.join(os.path.dirname(__file__), "data", "good")
    for name in ("minimal.json", "spec-example.json", "minimal-for-start.json"):
        spec = read_spec_file(os.path.join(here, name))
        check_spec_types(spec, name)
        # the example predates v1.0: linux.resources.oomScoreAdj is no longer a spec field,
        # and upstream's strict decode refuses it as well
        assert unknown_fields(spec) == (["linux.resources.oomScoreAdj"] if name == "spec-example.json" else []), name


def test_write_keeps_mode_and_leaves_no_temp_file(tmp_path):
    cfg = write(tmp_path / "config.json", json.dumps(MINIMAL))
    os.chmod(cfg, 0o600)
    ino = cfg.stat().st_ino
    spec = load_bundle_spec(str(tmp_path))
    spec["process"]["env"].append("X=1")
    write_bundle_spec(str(tmp_path), spec)
    st = cfg.stat()
    assert stat.S_IMODE(st.st_mode) == 0o600
    assert st.st_ino != ino  # replaced by rename, not rewritten in place
    assert sorted(os.listdir(tmp_path)) == ["config.json"]
    assert load_bundle_spec(str(tmp_path))["process"]["env"][-1] == "X=1"


def test_failed_write_leaves_original_untouched(tmp_path, monkeypatch):
    cfg = write(tmp_path / "config.json", json.dumps(MINIMAL))
    before = cfg.read_bytes()

    def boom(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(SpecError, match="cannot write"):
        write_bundle_spec(str(tmp_path), dict(MINIMAL, changed=True))
    assert cfg.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["config.json"]


def test_unserialisable_spec_leaves_original(tmp_path):
    cfg = write(tmp_path / "config.json", json.dumps(MINIMAL))
    before = cfg.read_bytes()
    with pytest.raises(TypeError):
        write_bundle_spec(str(tmp_path), dict(MINIMAL, bad={1, 2}))
    assert cfg.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["config.json"]


def test_lone_surrogate_survives(tmp_path):
    write(tmp_path / "config.json", '{"ociVersion":"1.2.0","annotations":{"a":"\\ud800"}}')
    spec = load_bundle_spec(str(tmp_path))
    write_bundle_spec(str(tmp_path), spec)
    assert load_bundle_spec(str(tmp_path)) == spec


# issue 12 #13: upstream's strict decode refuses an unknown field at any depth
@pytest.mark.parametrize("extra, where", [
    ({"linux": {"resources": {"memory": {"limit": 1, "bogus": 2}}}}, "linux.resources.memory.bogus"),
    ({"linux": {"resources": {"devices": [{"allow": False}, {"allow": True, "acess": "rwm"}]}}},
     "linux.resources.devices[1].acess"),
    ({"linux": {"seccomp": {"defaultAction": "SCMP_ACT_ALLOW",
                            "syscalls": [{"names": ["read"], "action": "SCMP_ACT_ALLOW",
                                          "args": [{"index": 0, "value": 1, "op": "SCMP_CMP_EQ", "x": 1}]}]}}},
     "linux.seccomp.syscalls[0].args[0].x"),
    ({"linux": {"netDevices": {"eth0": {"name": "e", "mtu": 9000}}}}, "linux.netDevices.eth0.mtu"),
    ({"linux": {"timeOffsets": {"monotonic": {"secs": 1, "nanos": 2}}}}, "linux.timeOffsets.monotonic.nanos"),
    ({"mounts": [{"destination": "/a", "uidMappings": [{"containerID": 0, "hostID": 1, "size": 1, "q": 0}]}]},
     "mounts[0].uidMappings[0].q"),
    ({"hooks": {"createRuntime": [{"path": "/bin/true", "timeOut": 3}]}}, "hooks.createRuntime[0].timeOut"),
    ({"hooks": {"preStart": []}}, "hooks.preStart"),
    ({"process": {"cwd": "/", "user": {"uid": 0, "gid": 0, "groups": []}}}, "process.user.groups"),
    ({"process": {"cwd": "/", "rlimits": [{"type": "RLIMIT_NOFILE", "hard": 1, "soft": 1, "max": 1}]}},
     "process.rlimits[0].max"),
    ({"process": {"cwd": "/", "consoleSize": {"height": 1, "width": 1, "depth": 1}}}, "process.consoleSize.depth"),
    ({"root": {"path": "r", "readOnly": True}}, "root.readOnly"),
    ({"vm": {"hypervisor": {"path": "/h", "args": []}}}, "vm.hypervisor.args"),
])
def test_unknown_fields_at_any_depth(extra, where):
    spec = dict(MINIMAL, **extra)
    assert unknown_fields(spec) == [where]


@pytest.mark.parametrize("extra", [
    {"annotations": {"any.key/at=all": "v"}},
    {"linux": {"sysctl": {"net.ipv4.ip_forward": "1"}, "resources": {"unified": {"memory.high": "1"}}}},
    {"linux": {"resources": {"rdma": {"mlx5_0": {"hcaHandles": 1, "hcaObjects": 2}}}}},
    {"linux": {"intelRdt": {"closID": "a", "schemata": ["L3:0=f"], "enableMonitoring": True},
               "memoryPolicy": {"mode": "MPOL_BIND", "nodes": "0", "flags": []},
               "personality": {"domain": "LINUX", "flags": []}}},
    {"process": {"cwd": "/", "scheduler": {"policy": "SCHED_OTHER", "nice": 1},
                 "ioPriority": {"class": "IOPRIO_CLASS_BE", "priority": 1},
                 "execCPUAffinity": {"initial": "0", "final": "1"}}},
])
def test_known_deep_fields_and_free_maps_accepted(extra):
    assert unknown_fields(dict(MINIMAL, **extra)) == []


def test_field_tree_matches_bundled_schema():
    """nct.oci.specfields is the bundled runtime-spec schema, walked: regenerate and compare."""
    import subprocess
    import sys

    from nct.oci import specfields

    gen = os.path.join(os.path.dirname(__file__), "data", "specfields_gen.py")
    schema = os.path.join(os.path.dirname(__file__), os.pardir, "schemas", "oci")
    out = subprocess.run([sys.executable, gen, schema], capture_output=True, text=True, check=True).stdout
    assert eval(out) == specfields.FIELDS  # noqa: S307 - our own generator's repr
