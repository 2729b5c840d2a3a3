"""daemon.json editing: order and unrelated keys kept, features merged, reversible."""

from __future__ import annotations

import json

import pytest

from nct.engines.configure import apply, plan_configure, plan_unconfigure
from nct.engines.model import EngineRequest, RuntimeEntry
from nct.errors import EngineConfigError

ORIGINAL = """{
    "log-level": "warn",
    "features": {
        "buildkit": true
    },
    "storage-driver": "overlay2",
    "runtimes": {
        "crun": {
            "path": "/usr/bin/crun"
        }
    }
}
"""


def req(path, **kw) -> EngineRequest:
    kw.setdefault("runtimes", (RuntimeEntry("nvidia", "/usr/bin/nvidia-container-runtime"),))
    return EngineRequest(engine="docker", config=str(path), **kw)


def configure(path, **kw):
    return apply(plan_configure(req(path, **kw)))


def test_order_and_unrelated_keys_kept_and_cdi_merged(tmp_path):
    f = tmp_path / "daemon.json"
    f.write_text(ORIGINAL)
    assert configure(f, set_as_default=True, cdi_enabled=True) == [str(f)]
    cfg = json.loads(f.read_text())
    assert list(cfg) == ["log-level", "features", "storage-driver", "runtimes", "default-runtime"]
    assert cfg["features"] == {"buildkit": True, "cdi": True}
    assert cfg["runtimes"] == {"crun": {"path": "/usr/bin/crun"},
                               "nvidia": {"path": "/usr/bin/nvidia-container-runtime", "args": []}}
    assert cfg["default-runtime"] == "nvidia"
    assert f.read_text().startswith('{\n    "log-level"')  # 4-space indent as the original
    assert (tmp_path / "daemon.json.bak").read_text() == ORIGINAL


@pytest.mark.parametrize("content", [None, "", "  \n"])
def test_missing_or_empty_file_is_an_empty_config(tmp_path, content):
    f = tmp_path / "daemon.json"
    if content is not None:
        f.write_text(content)
    configure(f)
    assert json.loads(f.read_text()) == {"runtimes": {"nvidia": {"path": "/usr/bin/nvidia-container-runtime",
                                                                 "args": []}}}
    apply(plan_unconfigure(req(f)))
    assert (f.read_text() if f.exists() else None) == content
    assert not (tmp_path / "daemon.json.bak").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ([] if content is None else ["daemon.json"])


def test_idempotent_second_run_writes_nothing(tmp_path):
    f = tmp_path / "daemon.json"
    f.write_text(ORIGINAL)
    configure(f, cdi_enabled=True)
    first = f.read_bytes()
    mtime = f.stat().st_mtime_ns
    assert configure(f, cdi_enabled=True) == []
    assert f.read_bytes() == first and f.stat().st_mtime_ns == mtime


def test_two_space_indent_is_kept(tmp_path):
    f = tmp_path / "daemon.json"
    f.write_text('{\n  "a": 1\n}\n')
    configure(f)
    assert f.read_text().startswith('{\n  "a": 1,\n  "runtimes": {\n    "nvidia"')


def test_unconfigure_gives_back_original_bytes(tmp_path):
    f = tmp_path / "daemon.json"
    f.write_text(ORIGINAL)
    configure(f, set_as_default=True, cdi_enabled=True)
    configure(f, set_as_default=True, cdi_enabled=True)
    apply(plan_unconfigure(req(f)))
    assert f.read_text() == ORIGINAL
    assert sorted(p.name for p in tmp_path.iterdir()) == ["daemon.json"]


def test_unconfigure_after_operator_edit_removes_only_ours(tmp_path):
    f = tmp_path / "daemon.json"
    f.write_text('{"default-runtime": "crun", "features": {"buildkit": true}}')
    configure(f, set_as_default=True, cdi_enabled=True)
    cfg = json.loads(f.read_text())
    cfg["debug"] = True  # the operator changes something after us
    f.write_text(json.dumps(cfg, indent=4))
    apply(plan_unconfigure(req(f)))
    assert json.loads(f.read_text()) == {"default-runtime": "crun", "features": {"buildkit": True}, "debug": True}


def test_cdi_already_true_is_not_removed(tmp_path):
    f = tmp_path / "daemon.json"
    f.write_text('{"features": {"cdi": true}}')
    configure(f, cdi_enabled=True)
    f.write_text(f.read_text() + " ")  # force the logical path
    apply(plan_unconfigure(req(f)))
    assert json.loads(f.read_text()) == {"features": {"cdi": True}}


def test_unconfigure_without_state_removes_named_runtime(tmp_path):
    f = tmp_path / "daemon.json"
    f.write_text('{"runtimes": {"nvidia": {"path": "x"}, "crun": {"path": "c"}}, "default-runtime": "nvidia"}')
    apply(plan_unconfigure(req(f)))
    assert json.loads(f.read_text()) == {"runtimes": {"crun": {"path": "c"}}}


@pytest.mark.parametrize("text,needle", [
    ('{"a": 1,\n "b": }', "line 2"),
    ("[1, 2]", "not a JSON object"),
    ('{"runtimes": []}', "'runtimes' is not a JSON object"),
    ('{"features": "x"}', "'features' is not a JSON object"),
])
def test_bad_file_is_one_line_error_and_nothing_written(tmp_path, text, needle):
    f = tmp_path / "daemon.json"
    f.write_text(text)
    with pytest.raises(EngineConfigError) as e:
        configure(f, cdi_enabled=True)
    assert str(f) in str(e.value) and needle in str(e.value) and "\n" not in str(e.value)
    assert f.read_text() == text
    assert sorted(p.name for p in tmp_path.iterdir()) == ["daemon.json"]


def test_drop_in_rejected_for_docker(tmp_path):
    with pytest.raises(EngineConfigError, match="drop-in"):
        plan_configure(req(tmp_path / "d.json", drop_in="/etc/docker/x.json"))


def test_file_mode_kept_also_for_backup(tmp_path):
    f = tmp_path / "daemon.json"
    f.write_text("{}")
    f.chmod(0o600)
    configure(f)
    assert f.stat().st_mode & 0o777 == 0o600
    assert (tmp_path / "daemon.json.bak").stat().st_mode & 0o777 == 0o600


def test_symlinked_config_is_written_through_the_link(tmp_path):
    real = tmp_path / "configmap" / "daemon.json"
    real.parent.mkdir()
    real.write_text("{}")
    link = tmp_path / "daemon.json"
    link.symlink_to(real)
    configure(link)
    assert link.is_symlink() and "nvidia" in json.loads(real.read_text())["runtimes"]
    apply(plan_unconfigure(req(link)))
    assert link.is_symlink() and real.read_text() == "{}"
