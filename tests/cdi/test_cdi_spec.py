"""Strict CDI spec loading, the official schema, minimum cdiVersion, atomic saving."""

from __future__ import annotations

import copy
import json
import os
import stat

import pytest

from nct.cdi import names
from nct.cdi.spec import (dump_spec, format_for_path, load_spec, save_spec,
                          spec_from_data, validate_spec)
from schema_check import check_schema, schema_errors
from nct.cdi.version import minimum_version
from nct.errors import SpecError

DATA = os.path.join(os.path.dirname(__file__), "data")

SPEC = {
    "cdiVersion": "0.5.0",
    "kind": "nvidia.com/gpu",
    "devices": [{"name": "0", "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia0"}]}}],
    "containerEdits": {"env": ["NVIDIA_VISIBLE_DEVICES=void"]},
}


def spec(**changes) -> dict:
    s = copy.deepcopy(SPEC)
    s.update(changes)
    return s


@pytest.mark.parametrize("name", sorted(os.listdir(os.path.join(DATA, "good"))))
def test_official_good_samples_load_and_validate(name):
    path = os.path.join(DATA, "good", name)
    with open(path) as f:
        assert schema_errors(json.load(f)) == []
    s = load_spec(path, check=check_schema)
    assert s.vendor == "vendor.com" and s.cls == "device"
    assert s.qualified_names() == ["vendor.com/device=myDevice"]


@pytest.mark.parametrize("name", sorted(os.listdir(os.path.join(DATA, "bad"))))
def test_official_bad_samples_rejected(name):
    path = os.path.join(DATA, "bad", name)
    with pytest.raises(SpecError) as e:
        load_spec(path, check=check_schema)
    assert path in str(e.value)
    with pytest.raises(SpecError):
        load_spec(path)  # the strict checks alone catch it too


@pytest.mark.parametrize("doc, message", [
    (spec(extra=1), "unknown field 'extra'"),
    (spec(devices=[{"name": "0", "containerEdits": {"deviceNodes": [{"path": "/dev/x", "hostpath": "/x"}]}}]),
     "devices[0].containerEdits.deviceNodes[0]: unknown field 'hostpath'"),
    (spec(kind="nvidia.com"), "invalid kind 'nvidia.com'"),
    (spec(kind="vendor.com/foo/"), "invalid kind"),
    (spec(kind="vendor.com/foo/bar"), "invalid kind"),
    (spec(kind="1vendor/gpu"), "should start with a letter"),
    (spec(kind="vendor/" + "c" * 64), "longer than 63"),
    (spec(devices=[{"name": "-bad", "containerEdits": {"env": ["A=1"]}}]), "invalid device name '-bad'"),
    (spec(devices=[{"name": "a/b", "containerEdits": {"env": ["A=1"]}}]), "invalid character '/'"),
    (spec(devices=[{"name": "0", "containerEdits": {"env": ["A=1"]}},
                   {"name": "0", "containerEdits": {"env": ["B=1"]}}]), "duplicate device name '0'"),
    (spec(devices=[]), "no devices"),
    (spec(devices=[{"name": "x", "containerEdits": {}}]), "device 'x' has no containerEdits"),
    (spec(devices=[{"name": "x"}]), "device 'x' has no containerEdits"),
    (spec(cdiVersion="0.3.0"), "must be at least v0.5.0"),
    (spec(cdiVersion="0.9.0"), "invalid cdiVersion"),
    (spec(containerEdits={"env": ["=x"]}), "invalid environment variable '=x'"),
    (spec(containerEdits={"env": "A=1"}), "containerEdits.env: must be a list"),
    (spec(containerEdits={"hooks": [{"hookName": "preStart", "path": "/x"}]}), "invalid hook name 'preStart'"),
    (spec(containerEdits={"hooks": [{"hookName": "prestart"}]}), "has no path"),
    (spec(containerEdits={"hooks": [{"hookName": "prestart", "path": "/x", "timeout": 0}]}), "timeout"),
    (spec(containerEdits={"deviceNodes": [{"path": "/dev/x", "type": "x"}]}), "invalid type 'x'"),
    (spec(containerEdits={"deviceNodes": [{"path": "/dev/x", "permissions": "rwx"}]}), "invalid permissions"),
    (spec(containerEdits={"deviceNodes": [{"path": "/dev/x", "major": "1"}]}), "must be an integer"),
    (spec(containerEdits={"deviceNodes": [{"path": "/dev/x", "uid": -1}]}), "out of range"),
    (spec(containerEdits={"mounts": [{"hostPath": "/a"}]}), "missing containerPath"),
    (spec(containerEdits={"additionalGids": [1, "x"]}), "must be an integer"),
    ({"kind": "a/b", "devices": []}, "missing required field 'cdiVersion'"),
])
def test_strict_loading_rejects(doc, message):
    with pytest.raises(SpecError) as e:
        validate_spec(doc, "/etc/cdi/x.json")
    msg = str(e.value)
    assert message in msg and msg.startswith("/etc/cdi/x.json: ") and "\n" not in msg


def test_versions_required_by_content():
    base = {"cdiVersion": "0.3.0", "kind": "v.com/c", "devices": [{"name": "d", "containerEdits": {"env": ["A=1"]}}]}
    assert minimum_version(base) == "0.3.0"

    def with_edits(**e):
        s = copy.deepcopy(base)
        s["devices"][0]["containerEdits"].update(e)
        return s

    assert minimum_version(with_edits(mounts=[{"hostPath": "/a", "containerPath": "/a", "type": "bind"}])) == "0.4.0"
    assert minimum_version(with_edits(deviceNodes=[{"path": "/a", "hostPath": "/b"}])) == "0.5.0"
    assert minimum_version(dict(base, devices=[{"name": "0", "containerEdits": {"env": ["A=1"]}}])) == "0.5.0"
    assert minimum_version(dict(base, annotations={"a": "b"})) == "0.6.0"
    assert minimum_version(dict(base, kind="v.com/c.d")) == "0.6.0"
    assert minimum_version(with_edits(additionalGids=[5])) == "0.7.0"
    assert minimum_version(with_edits(intelRdt={"closID": "x"})) == "0.7.0"
    assert minimum_version(with_edits(intelRdt={"schemata": ["L3:0=f"]})) == "1.1.0"
    assert minimum_version(with_edits(netDevices=[{"hostInterfaceName": "e", "name": "n"}])) == "1.1.0"


def test_leading_v_version_accepted():
    s = spec_from_data(json.dumps(spec(cdiVersion="v0.6.0")), "x.json")
    assert s.version == "0.6.0"


def test_yaml_scalars_typed_by_field():
    text = """
cdiVersion: 0.5.0
kind: nvidia.com/gpu
devices:
- name: 0
  containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
      major: 195
      minor: 0
      fileMode: 0666
      permissions: rw
- name: yes
  containerEdits:
    env: [A=1]
containerEdits:
  intelRdt: {closID: x, enableMonitoring: true}
  hooks:
  - {hookName: createContainer, path: /bin/h, timeout: 10}
"""
    with pytest.raises(SpecError, match="at least v1.1.0"):
        spec_from_data(text, "x.yaml")
    s = spec_from_data(text.replace("0.5.0", "1.1.0"), "x.yaml")
    dev0 = s.devices["0"]["containerEdits"]["deviceNodes"][0]
    assert dev0 == {"path": "/dev/nvidia0", "major": 195, "minor": 0, "fileMode": 0o666, "permissions": "rw"}
    assert "yes" in s.devices
    assert s.edits["intelRdt"]["enableMonitoring"] is True
    assert s.edits["hooks"][0]["timeout"] == 10


def test_yaml_errors_are_one_line_with_position():
    with pytest.raises(SpecError) as e:
        spec_from_data("cdiVersion: 0.5.0\nkind: [unclosed\n", "/etc/cdi/bad.yaml")
    assert "invalid YAML at line" in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(SpecError, match="invalid JSON at line 1 column"):
        spec_from_data("{bad", "/etc/cdi/bad.json")
    with pytest.raises(SpecError, match="empty CDI spec"):
        spec_from_data("", "/etc/cdi/empty.yaml")


def parse_qualified_name(qualified: str) -> tuple[str, str, str]:
    """`vendor/class=name` checked part by part with the rules a spec's kind and device
    names are loaded under; SpecError when malformed."""
    vendor, slash, rest = qualified.partition("/")
    cls, eq, name = rest.partition("=")
    if not (slash and eq):
        raise SpecError(f"unqualified CDI device name {qualified!r}")
    names.parse_kind(f"{vendor}/{cls}")
    err = names.device_name_error(name)
    if err:
        raise SpecError(err)
    return vendor, cls, name


def test_names():
    assert parse_qualified_name("nvidia.com/gpu=all") == ("nvidia.com", "gpu", "all")
    assert parse_qualified_name("nvidia.com/gpu=1:0") == ("nvidia.com", "gpu", "1:0")
    assert parse_qualified_name("nvidia.com/mig.gpu=GPU-1234-abcd") == ("nvidia.com", "mig.gpu", "GPU-1234-abcd")
    for bad in ("nvidia.com/gpu", "gpu=0", "nvidia.com/gpu=", "nvidia.com/gpu=0:", "nvidia.com/-x=0"):
        with pytest.raises(SpecError):
            parse_qualified_name(bad)


# --- saving -------------------------------------------------------------------------------

def test_save_json_and_yaml_by_extension_with_minimum_version(tmp_path):
    doc = spec(cdiVersion="1.1.0")
    p = save_spec(doc, str(tmp_path / "nvidia.json"))
    assert p.endswith("nvidia.json")
    data = json.loads(open(p).read())
    assert data["cdiVersion"] == "0.5.0" and list(data)[0] == "cdiVersion"
    assert stat.S_IMODE(os.stat(p).st_mode) == 0o644
    assert schema_errors(data) == []
    y = save_spec(doc, str(tmp_path / "nvidia.yaml"))
    text = open(y).read()
    assert text.startswith("---\n") and "name: '0'" in text
    assert load_spec(y).raw == load_spec(p).raw
    assert save_spec(doc, str(tmp_path / "noext"), fmt="json").endswith("noext.json")
    assert save_spec(doc, str(tmp_path / "noext2")).endswith("noext2.yaml")
    assert sorted(os.listdir(tmp_path)) == ["noext.json", "noext2.yaml", "nvidia.json", "nvidia.yaml"]


def test_save_keeps_original_on_error(tmp_path, monkeypatch):
    path = tmp_path / "nvidia.yaml"
    path.write_text("original\n")
    with pytest.raises(SpecError):
        save_spec(spec(kind="bad"), str(path))
    assert path.read_text() == "original\n"

    def boom(src, dst):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(SpecError, match="cannot write"):
        save_spec(spec(), str(path))
    assert path.read_text() == "original\n"
    assert os.listdir(tmp_path) == ["nvidia.yaml"]


def test_format_for_path():
    assert format_for_path("/x/a.yml") == ("/x/a.yml", "yaml")
    assert format_for_path("/x/a.JSON") == ("/x/a.JSON", "json")
    with pytest.raises(SpecError, match="invalid format"):
        format_for_path("/x/a", "toml")


def test_dump_has_no_yaml_aliases():
    shared = {"path": "/dev/nvidia0"}
    doc = spec(devices=[{"name": "a", "containerEdits": {"deviceNodes": [shared]}},
                        {"name": "b", "containerEdits": {"deviceNodes": [shared]}}])
    text = dump_spec(doc, "yaml")
    assert "&" not in text and "*" not in text
    check_schema(doc)
