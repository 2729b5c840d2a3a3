"""Upstream's containerd expectations (its config v2 tables), restated as our own tables: the
new runtime takes its settings from the default runtime (default_runtime_name), else from
runc, with its own BinaryName; both are left as they were."""

from __future__ import annotations

import tomllib

import pytest

from nct.engines.configure import apply, plan_configure
from nct.engines.model import EngineRequest, RuntimeEntry

CRI = 'plugins."io.containerd.grpc.v1.cri".containerd'


def runtime(name: str, priv: bool, engine: str, root: str, rtype: str, binary: str, systemd: bool) -> str:
    return (f'[{CRI}.runtimes.{name}]\nprivileged_without_host_devices = {str(priv).lower()}\n'
            f'runtime_engine = "{engine}"\nruntime_root = "{root}"\nruntime_type = "{rtype}"\n'
            f'[{CRI}.runtimes.{name}.options]\nBinaryName = "{binary}"\nSystemdCgroup = {str(systemd).lower()}\n')


RUNC = runtime("runc", True, "engine", "root", "type", "/usr/bin/runc", True)
DEFAULT = runtime("default", False, "defaultengine", "defaultroot", "defaulttype", "/usr/bin/default", False)
DEFAULT_ON = runtime("default", True, "engine", "root", "type", "/usr/bin/default", True)


def configure(tmp_path, text: str) -> dict:
    path = tmp_path / "config.toml"
    path.write_text(text)
    apply(plan_configure(EngineRequest(engine="containerd", config=str(path),
                                       runtimes=(RuntimeEntry("test", "/usr/bin/test"),))))
    return tomllib.loads(path.read_text())


def runtimes(cfg: dict) -> dict:
    return cfg["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["runtimes"]


@pytest.mark.parametrize("body, source", [
    (RUNC, "runc"),
    (f'[{CRI}]\ndefault_runtime_name = "default"\n' + DEFAULT_ON, "default"),
    (f'[{CRI}]\ndefault_runtime_name = "default"\n' + RUNC + DEFAULT, "default"),  # default beats runc
])
def test_new_runtime_copies_its_template(tmp_path, body, source):
    before = tomllib.loads("version = 2\n" + body)
    cfg = configure(tmp_path, "version = 2\n" + body)
    got = runtimes(cfg)
    want = dict(runtimes(before)[source])
    want["options"] = {**want["options"], "BinaryName": "/usr/bin/test"}
    assert got["test"] == want
    for name, entry in runtimes(before).items():  # the others are untouched
        assert got[name] == entry


def test_empty_config_gets_a_runc_v2_runtime(tmp_path):
    got = runtimes(configure(tmp_path, ""))["test"]
    assert got["options"]["BinaryName"] == "/usr/bin/test"
    assert got["runtime_type"] == "io.containerd.runc.v2"


@pytest.mark.parametrize("before, want", [
    ("", ["{d}/*.toml"]),
    ('imports = ["/foo/bar/*.toml"]\nversion = 2\n', ["/foo/bar/*.toml", "{d}/*.toml"]),
    ('version = 2\nimports = ["/foo/bar/*.toml", "{d}/*.toml"]\n', ["/foo/bar/*.toml", "{d}/*.toml"]),  # once
])
def test_drop_in_import_table(tmp_path, before, want):
    d = str(tmp_path / "conf.d")
    top = tmp_path / "config.toml"
    top.write_text(before.format(d=d))
    apply(plan_configure(EngineRequest(engine="containerd", config=str(top), drop_in=f"{d}/99-nvidia.toml",
                                       runtimes=(RuntimeEntry("nvidia", "/usr/bin/nvidia-container-runtime"),))))
    assert tomllib.loads(top.read_text())["imports"] == [w.format(d=d) for w in want]
