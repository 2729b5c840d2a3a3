"""config.json reading (strict/lenient) and the atomic rewrite."""

import json
import os
import stat

import pytest

from nct.errors import SpecError
from nct.runtime import bundle
from nct.runtime.bundle import read_spec, write_spec


def _write(p, obj):
    p.write_text(json.dumps(obj) if not isinstance(obj, str) else obj)
    return str(p)


def test_strict_rejects_unknown_top_level_field(tmp_path):
    path = _write(tmp_path / "config.json", {"ociVersion": "1.0.2", "bogus": 1})
    with pytest.raises(SpecError, match=r"config.json: unknown field 'bogus'.*allow-unknown-oci-spec-fields"):
        read_spec(path)
    assert read_spec(path, strict=False)["bogus"] == 1


@pytest.mark.parametrize("text, match", [
    ("{", "invalid JSON"),
    ("[]", "must be a JSON object"),
    ('{"ociVersion": "1", "process": []}', "process must be an object"),
    ('{"ociVersion": "1", "mounts": {}}', "mounts must be an array"),
])
def test_bad_json_is_one_line(tmp_path, text, match):
    path = _write(tmp_path / "config.json", text)
    with pytest.raises(SpecError, match=match) as e:
        read_spec(path)
    assert "\n" not in str(e.value) and "config.json" in str(e.value)


def test_missing_file(tmp_path):
    with pytest.raises(SpecError, match="no such file"):
        read_spec(str(tmp_path / "config.json"))


def test_write_is_compact_keeps_order_unknown_fields_and_mode(tmp_path):
    p = tmp_path / "config.json"
    path = _write(p, "{}")
    os.chmod(path, 0o600)
    spec = {"ociVersion": "1.0.2", "zzz": {"b": 1, "a": [1, "é"]}, "process": {"env": []}}
    write_spec(path, spec)
    assert p.read_text(encoding="utf-8") == '{"ociVersion":"1.0.2","zzz":{"b":1,"a":[1,"é"]},"process":{"env":[]}}'
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert [f for f in os.listdir(tmp_path)] == ["config.json"]


def test_failed_write_leaves_original(tmp_path, monkeypatch):
    p = tmp_path / "config.json"
    path = _write(p, '{"ociVersion": "orig"}')
    inode = os.stat(path).st_ino

    def boom(*a):
        raise OSError(28, "No space left on device")

    import nct.fileio
    monkeypatch.setattr(nct.fileio.os, "replace", boom)
    with pytest.raises(SpecError, match="No space left"):
        write_spec(path, {"ociVersion": "new"})
    assert p.read_text() == '{"ociVersion": "orig"}' and os.stat(path).st_ino == inode
    assert os.listdir(tmp_path) == ["config.json"]


def test_write_keeps_owner(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("chown needs root")
    p = tmp_path / "config.json"
    path = _write(p, "{}")
    os.chown(path, 1234, 5678)
    write_spec(path, {"ociVersion": "1.0.2"})
    st = os.stat(path)
    assert (st.st_uid, st.st_gid) == (1234, 5678)
