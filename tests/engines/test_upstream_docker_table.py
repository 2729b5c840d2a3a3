"""Upstream's daemon.json expectations (its docker engine tables), restated as our own tables:
configure through nct.engines on real files, then read the JSON back."""

from __future__ import annotations

import json

import pytest

from nct.engines.configure import apply, plan_configure, plan_unconfigure
from nct.engines.model import EngineRequest, RuntimeEntry


def run(tmp_path, before: dict | str | None, runtimes: dict[str, str], *, default=False, cdi=False,
        remove=False) -> dict:
    path = tmp_path / "daemon.json"
    if before is not None:
        path.write_text(before if isinstance(before, str) else json.dumps(before))
    req = EngineRequest(engine="docker", config=str(path),
                        runtimes=tuple(RuntimeEntry(n, p) for n, p in runtimes.items()),
                        set_as_default=default, cdi_enabled=cdi)
    apply(plan_unconfigure(req) if remove else plan_configure(req))
    return json.loads(path.read_text()) if path.exists() and path.read_text().strip() else {}


@pytest.mark.parametrize("before, default, want", [
    ({}, False, None),
    ({}, True, "NAME"),
    ({"default-runtime": "ALREADY_SET"}, False, "ALREADY_SET"),
    ({"default-runtime": "ALREADY_SET"}, True, "NAME"),
])
def test_default_runtime_table(tmp_path, before, default, want):
    assert run(tmp_path, before, {"NAME": "/x/nct"}, default=default).get("default-runtime") == want


OTHER = {"exec-opts": ["native.cgroupdriver=systemd"], "log-driver": "json-file",
         "log-opts": {"max-size": "100m"}, "storage-driver": "overlay2"}


@pytest.mark.parametrize("before, runtimes, want", [
    ({}, {"runtime1": "/rt/runtime1", "runtime2": "/rt/runtime2"},
     {"runtimes": {"runtime1": {"path": "/rt/runtime1", "args": []},
                   "runtime2": {"path": "/rt/runtime2", "args": []}}}),
    ({"runtimes": {"runtime1": {"path": "runtime1", "args": []}}},  # an existing entry is replaced
     {"runtime1": "/rt/runtime1", "runtime2": "/rt/runtime2"},
     {"runtimes": {"runtime1": {"path": "/rt/runtime1", "args": []},
                   "runtime2": {"path": "/rt/runtime2", "args": []}}}),
    ({"runtimes": {"not-nvidia": {"path": "some-other-path", "args": []}}}, {"runtime1": "/rt/runtime1"},
     {"runtimes": {"not-nvidia": {"path": "some-other-path", "args": []},
                   "runtime1": {"path": "/rt/runtime1", "args": []}}}),
    (OTHER, {"runtime1": "/rt/runtime1"}, {**OTHER, "runtimes": {"runtime1": {"path": "/rt/runtime1", "args": []}}}),
    ({"runtimes": {"nvidia": {"path": "/old", "runtimeArgs": ["--debug"]}}}, {"nvidia": "/new"},
     {"runtimes": {"nvidia": {"path": "/new", "args": []}}}),
])
def test_runtimes_table(tmp_path, before, runtimes, want):
    assert run(tmp_path, before, runtimes) == want


@pytest.mark.parametrize("action", ["add", "remove"])
def test_null_runtimes_in_file(tmp_path, action):
    """`"runtimes": null` is an absent table; unrelated keys stay."""
    got = run(tmp_path, '{"runtimes":null,"log-driver":"json-file"}', {"nvidia": "/usr/bin/nvidia-container-runtime"},
              remove=action == "remove")
    assert got["log-driver"] == "json-file"
    if action == "add":
        assert got["runtimes"]["nvidia"]["path"] == "/usr/bin/nvidia-container-runtime"
    else:
        assert not (got.get("runtimes") or {}).get("nvidia")


@pytest.mark.parametrize("before, want", [
    ("{}", {"cdi": True}),
    ('{"features":{}}', {"cdi": True}),
    ('{"features":{"containerd-snapshotter":true,"buildkit":false},"debug":true}',
     {"cdi": True, "containerd-snapshotter": True, "buildkit": False}),
    ('{"features":{"cdi":false,"containerd-snapshotter":true}}', {"cdi": True, "containerd-snapshotter": True}),
    ('{"features":{"cdi":true,"containerd-snapshotter":true}}', {"cdi": True, "containerd-snapshotter": True}),
])
def test_enable_cdi_keeps_features_table(tmp_path, before, want):
    got = run(tmp_path, before, {"nvidia": "/usr/bin/nvidia-container-runtime"}, cdi=True)
    assert got["features"] == want
    if '"debug":true' in before:
        assert got["debug"] is True
