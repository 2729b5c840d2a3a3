"""containerd config.toml v1/v2/v3: runtime copied from the default one, BinaryName,
default name, enable_cdi, drop-ins with imports; the operator's bytes kept elsewhere."""

from __future__ import annotations

import difflib
import tomllib

import pytest

from nct.engines.configure import apply, plan_configure, plan_unconfigure
from nct.engines.model import EngineRequest, RuntimeEntry
from nct.errors import EngineConfigError

RT = "/usr/bin/nvidia-container-runtime"

V1 = """# containerd 1.x, no version key
root = "/var/lib/containerd"

[plugins]
  [plugins.cri]
    [plugins.cri.containerd]
      default_runtime_name = "runc"   # the operator's choice
      [plugins.cri.containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins.cri.containerd.runtimes.runc.options]
          SystemdCgroup = true
"""

V2 = """# Managed by ops. Do not reorder.
version = 2
root = "/var/lib/containerd"   # keep this comment
oom_score = -999

[grpc]
  address = '/run/containerd/containerd.sock'

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.k8s.io/pause:3.9"

  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"

    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"

      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = true
        BinaryName = "/usr/sbin/runc"

# trailing comment
"""

V3 = """version = 3

[plugins]
  [plugins.'io.containerd.cri.v1.runtime']
    [plugins.'io.containerd.cri.v1.runtime'.containerd]
      default_runtime_name = 'crun'
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.crun]
        runtime_type = 'io.containerd.runc.v2'
        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.crun.options]
          BinaryName = '/usr/bin/crun'
          SystemdCgroup = true
"""


def req(config, drop_in=None, **kw) -> EngineRequest:
    kw.setdefault("runtimes", (RuntimeEntry("nvidia", RT),))
    return EngineRequest(engine="containerd", config=str(config), drop_in=drop_in and str(drop_in), **kw)


def removed_lines(before: str, after: str) -> list[str]:
    return [l[1:] for l in difflib.ndiff(before.splitlines(), after.splitlines()) if l.startswith("- ")]


def cri(cfg: dict, version: int) -> dict:
    return cfg["plugins"][{1: "cri", 2: "io.containerd.grpc.v1.cri", 3: "io.containerd.cri.v1.runtime"}[version]]


@pytest.mark.parametrize("text,version,base", [(V1, 1, "runc"), (V2, 2, "runc"), (V3, 3, "crun")])
def test_top_level_edit_per_version(tmp_path, text, version, base):
    f = tmp_path / "config.toml"
    f.write_text(text)
    apply(plan_configure(req(f, set_as_default=True, cdi_enabled=True)))
    new = f.read_text()
    cfg = tomllib.loads(new)
    section = cri(cfg, version)
    nvidia = section["containerd"]["runtimes"]["nvidia"]
    assert nvidia["runtime_type"] == "io.containerd.runc.v2"
    assert nvidia["options"]["SystemdCgroup"] is True  # copied from the default runtime
    assert nvidia["options"]["BinaryName"] == RT
    assert ("Runtime" in nvidia["options"]) == (version == 1)
    assert section["containerd"]["default_runtime_name"] == "nvidia"
    cdi = section["containerd"]["enable_cdi"] if version == 1 else section["enable_cdi"]
    assert cdi is True
    assert section["containerd"]["runtimes"][base] == cri(tomllib.loads(text), version)["containerd"]["runtimes"][base]
    # only the default-runtime line itself was changed; every other original line is still there
    assert [l.strip() for l in removed_lines(text, new)] == [
        l.strip() for l in text.splitlines() if "default_runtime_name" in l]
    assert "# the operator's choice" in new or version != 1


def test_v2_new_runtime_looks_like_its_sibling(tmp_path):
    f = tmp_path / "config.toml"
    f.write_text(V2)
    apply(plan_configure(req(f)))
    new = f.read_text()
    assert ('\n    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]\n'
            '      runtime_type = "io.containerd.runc.v2"\n\n'
            '      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]\n'
            '        SystemdCgroup = true\n'
            f'        BinaryName = "{RT}"\n') in new
    assert removed_lines(V2, new) == []
    assert new.endswith(f'        BinaryName = "{RT}"\n\n# trailing comment\n')


def test_drop_in_and_imports(tmp_path):
    f = tmp_path / "config.toml"
    f.write_text(V2)
    drop = tmp_path / "conf.d" / "99-nvidia.toml"
    plan = plan_configure(req(f, drop, set_as_default=True))
    assert plan.primary == str(drop)
    apply(plan)
    main = f.read_text()
    assert removed_lines(V2, main) == []
    assert tomllib.loads(main)["imports"] == [f"{tmp_path}/conf.d/*.toml"]
    assert main.index("imports") < main.index("[grpc]")
    d = tomllib.loads(drop.read_text())
    assert d["version"] == 2
    section = cri(d, 2)
    assert section["sandbox_image"] == "registry.k8s.io/pause:3.9"  # whole CRI section copied
    assert section["containerd"]["snapshotter"] == "overlayfs"
    assert section["containerd"]["default_runtime_name"] == "nvidia"
    assert section["containerd"]["runtimes"]["nvidia"]["options"]["BinaryName"] == RT
    assert section["containerd"]["runtimes"]["runc"]["options"]["BinaryName"] == "/usr/sbin/runc"
    # idempotent, then undone to the original bytes
    assert apply(plan_configure(req(f, drop, set_as_default=True))) == []
    apply(plan_unconfigure(req(f, drop)))
    assert f.read_text() == V2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.toml"]


def test_comment_above_next_section_stays_above_it(tmp_path):
    text = ('version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]\n'
            '  runtime_type = "io.containerd.runc.v2"\n\n# GRPC settings\n[grpc]\n  uid = 0\n')
    f = tmp_path / "config.toml"
    f.write_text(text)
    apply(plan_configure(req(f, "")))
    new = f.read_text()
    assert removed_lines(text, new) == []
    assert "# GRPC settings\n[grpc]\n" in new
    assert new.index("runtimes.nvidia]") < new.index("# GRPC settings")
    assert tomllib.loads(new)["grpc"] == {"uid": 0}


def test_existing_imports_array_is_appended(tmp_path):
    f = tmp_path / "config.toml"
    f.write_text('version = 2\nimports = ["/etc/containerd/other.toml"]  # ops\n')
    drop = tmp_path / "conf.d" / "99-nvidia.toml"
    apply(plan_configure(req(f, drop)))
    assert f.read_text() == f'version = 2\nimports = ["/etc/containerd/other.toml", "{tmp_path}/conf.d/*.toml"]  # ops\n'


@pytest.mark.parametrize("content", [None, ""])
def test_empty_or_missing_main_gets_version_2(tmp_path, content):
    f = tmp_path / "config.toml"
    if content is not None:
        f.write_text(content)
    drop = tmp_path / "conf.d" / "99-nvidia.toml"
    apply(plan_configure(req(f, drop)))
    assert tomllib.loads(f.read_text()) == {"version": 2, "imports": [f"{tmp_path}/conf.d/*.toml"]}
    nvidia = cri(tomllib.loads(drop.read_text()), 2)["containerd"]["runtimes"]["nvidia"]
    assert nvidia == {"runtime_type": "io.containerd.runc.v2", "runtime_root": "", "runtime_engine": "",
                      "privileged_without_host_devices": False, "options": {"BinaryName": RT}}
    apply(plan_unconfigure(req(f, drop)))
    assert (f.read_text() if f.exists() else None) == content
    assert not drop.parent.exists()


def test_empty_drop_in_path_edits_main_file(tmp_path):
    f = tmp_path / "config.toml"
    f.write_text(V2)
    apply(plan_configure(req(f, "", set_as_default=True)))
    cfg = tomllib.loads(f.read_text())
    assert cri(cfg, 2)["containerd"]["runtimes"]["nvidia"]["options"]["BinaryName"] == RT
    assert "imports" not in cfg
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.toml", "config.toml.bak",
                                                          "config.toml.nct-state.json"]


def test_v1_ignores_drop_in(tmp_path):
    f = tmp_path / "config.toml"
    f.write_text(V1)
    drop = tmp_path / "conf.d" / "99-nvidia.toml"
    apply(plan_configure(req(f, drop)))
    assert not drop.exists()
    assert cri(tomllib.loads(f.read_text()), 1)["containerd"]["runtimes"]["nvidia"]["options"]["Runtime"] == RT


def test_not_setting_default_removes_default_naming_us(tmp_path):
    f = tmp_path / "config.toml"
    f.write_text(V2.replace('default_runtime_name = "runc"', 'default_runtime_name = "nvidia"'))
    apply(plan_configure(req(f, "")))
    assert "default_runtime_name" not in cri(tomllib.loads(f.read_text()), 2)["containerd"]


def test_unconfigure_after_operator_edit(tmp_path):
    f = tmp_path / "config.toml"
    f.write_text(V2)
    apply(plan_configure(req(f, "", set_as_default=True, cdi_enabled=True)))
    f.write_text(f.read_text().replace("oom_score = -999", "oom_score = -500"))
    apply(plan_unconfigure(req(f, "")))
    assert f.read_text() == V2.replace("oom_score = -999", "oom_score = -500")


@pytest.mark.parametrize("text,needle", [
    ('version = 2\n[plugins\n', "line 2"),
    ('version = 7\n', "unsupported containerd config version 7"),
    ('version = 2\nplugins = 3\n', "plugins is not a table"),
])
def test_bad_file_is_one_line_error_and_nothing_written(tmp_path, text, needle):
    f = tmp_path / "config.toml"
    f.write_text(text)
    with pytest.raises(EngineConfigError) as e:
        plan_configure(req(f, tmp_path / "conf.d" / "99-nvidia.toml"))
    assert str(f) in str(e.value) and needle in str(e.value) and "\n" not in str(e.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.toml"]


def test_relative_drop_in_rejected(tmp_path):
    with pytest.raises(EngineConfigError, match="absolute"):
        plan_configure(req(tmp_path / "c.toml", "conf.d/x.toml"))


def test_several_runtimes_first_is_default(tmp_path):
    f = tmp_path / "config.toml"
    f.write_text(V2)
    runtimes = (RuntimeEntry("nvidia", RT), RuntimeEntry("nvidia-cdi", RT + ".cdi"))
    apply(plan_configure(req(f, "", runtimes=runtimes, set_as_default=True)))
    c = cri(tomllib.loads(f.read_text()), 2)["containerd"]
    assert c["default_runtime_name"] == "nvidia"
    assert c["runtimes"]["nvidia-cdi"]["options"]["BinaryName"] == RT + ".cdi"
    apply(plan_unconfigure(req(f, "", runtimes=runtimes)))
    assert f.read_text() == V2


def _containerd_default() -> str | None:
    import shutil
    import subprocess
    if not shutil.which("containerd"):
        return None
    return subprocess.run(["containerd", "config", "default"], capture_output=True, text=True).stdout


@pytest.mark.parametrize("name", ["V1", "V2", "V3", "default"])
@pytest.mark.parametrize("drop_in", [False, True])
def test_logical_undo_round_trips_every_layout(tmp_path, name, drop_in):
    """Even when the byte-for-byte restore cannot be used (the operator touched the file),
    removing our changes gives back the same configuration, and the file stays valid."""
    text = {"V1": V1, "V2": V2, "V3": V3, "default": _containerd_default()}[name]
    if text is None:
        pytest.skip("needs containerd for its default config")
    f = tmp_path / "config.toml"
    f.write_text(text)
    drop = tmp_path / "conf.d" / "99-nvidia.toml" if drop_in else ""
    apply(plan_configure(req(f, drop, set_as_default=True, cdi_enabled=True)))
    for path in [f] + ([drop] if drop_in and drop.exists() else []):
        tomllib.loads(path.read_text())
        path.write_text(path.read_text() + "\n# touched by the operator\n")
    apply(plan_unconfigure(req(f, drop)))
    assert tomllib.loads(f.read_text()) == tomllib.loads(text)
    assert removed_lines(text, f.read_text()) == []
