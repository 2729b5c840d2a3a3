"""Upstream's `cdi transform root` expectations (its host-root and container-root tables),
restated as our own tables over nct.cdi.transform.transform_root."""

from __future__ import annotations

import pytest

from nct.cdi.transform import transform_root

OLD, NEW, OTHER = "/drv", "/new-root", "/elsewhere"


def spec(edits: dict) -> dict:
    return {"cdiVersion": "0.5.0", "kind": "nvidia.com/gpu", "devices": [], "containerEdits": edits}


def nodes(*paths):
    return {"deviceNodes": [{"hostPath": p, "path": p} for p in paths]}


def mounts(*paths):
    return {"mounts": [{"hostPath": p, "containerPath": p} for p in paths]}


def hook(name: str | None, root: str, *, folder: bool = False) -> dict:
    h = {"path": f"{root}/usr/bin/nvidia-cdi-hook",
         "args": (["nvidia-cdi-hook", "update-ldcache", "--folder", f"{root}/lib"] if folder
                  else ["--link", f"{root}/target::{root}/link"])}
    if name:
        h["hookName"] = name
    return h


def swap(h: dict, *, path: bool, args: bool) -> dict:
    out = dict(h)
    if path:
        out["path"] = h["path"].replace(OLD, NEW, 1)
    if args:
        out["args"] = [a.replace(OLD, NEW) for a in h["args"]]
    return out


HOST_ROWS = [
    ({}, {}),
    (nodes(f"{OLD}/dev/nvidia0", f"{NEW}/dev/nvidia1", f"{OTHER}/dev/nvidia2"),
     {"deviceNodes": [{"hostPath": f"{NEW}/dev/nvidia0", "path": f"{OLD}/dev/nvidia0"},
                      {"hostPath": f"{NEW}/dev/nvidia1", "path": f"{NEW}/dev/nvidia1"},
                      {"hostPath": f"{OTHER}/dev/nvidia2", "path": f"{OTHER}/dev/nvidia2"}]}),
    (mounts(f"{OLD}/lib/a.so", f"{NEW}/lib/b.so", f"{OTHER}/lib/c.so"),
     {"mounts": [{"hostPath": f"{NEW}/lib/a.so", "containerPath": f"{OLD}/lib/a.so"},
                 {"hostPath": f"{NEW}/lib/b.so", "containerPath": f"{NEW}/lib/b.so"},
                 {"hostPath": f"{OTHER}/lib/c.so", "containerPath": f"{OTHER}/lib/c.so"}]}),
    ({"hooks": [hook(None, OLD), hook(None, NEW), hook(None, OTHER)]},
     {"hooks": [swap(hook(None, OLD), path=True, args=True), hook(None, NEW), hook(None, OTHER)]}),
    ({"hooks": [hook("createContainer", OLD)]}, {"hooks": [swap(hook("createContainer", OLD), path=True, args=False)]}),
    ({"hooks": [hook("startContainer", OLD)]}, {"hooks": [hook("startContainer", OLD)]}),
    ({"hooks": [hook("createRuntime", OLD)]}, {"hooks": [swap(hook("createRuntime", OLD), path=True, args=True)]}),
]


@pytest.mark.parametrize("before, after", HOST_ROWS)
def test_transform_relative_to_host_table(before, after):
    assert transform_root(spec(before), OLD, NEW, "host") == spec(after)


CONTAINER_ROWS = [
    ({}, {}),
    (nodes(f"{OLD}/dev/nvidia0", f"{NEW}/dev/nvidia1", f"{OTHER}/dev/nvidia2"),
     {"deviceNodes": [{"hostPath": f"{OLD}/dev/nvidia0", "path": f"{NEW}/dev/nvidia0"},
                      {"hostPath": f"{NEW}/dev/nvidia1", "path": f"{NEW}/dev/nvidia1"},
                      {"hostPath": f"{OTHER}/dev/nvidia2", "path": f"{OTHER}/dev/nvidia2"}]}),
    (mounts(f"{OLD}/lib/a.so", f"{NEW}/lib/b.so", f"{OTHER}/lib/c.so"),
     {"mounts": [{"hostPath": f"{OLD}/lib/a.so", "containerPath": f"{NEW}/lib/a.so"},
                 {"hostPath": f"{NEW}/lib/b.so", "containerPath": f"{NEW}/lib/b.so"},
                 {"hostPath": f"{OTHER}/lib/c.so", "containerPath": f"{OTHER}/lib/c.so"}]}),
    pytest.param({"hooks": [hook("createContainer", r) for r in (OLD, NEW, OTHER)]},
                 {"hooks": [swap(hook("createContainer", OLD), path=False, args=True),
                            hook("createContainer", NEW), hook("createContainer", OTHER)]}),
    pytest.param({"hooks": [hook("createContainer", OLD, folder=True)]},
                 {"hooks": [swap(hook("createContainer", OLD, folder=True), path=False, args=True)]}),
    pytest.param({"hooks": [hook("startContainer", OLD)]},
                 {"hooks": [swap(hook("startContainer", OLD), path=True, args=True)]}),
    ({"hooks": [hook("createRuntime", OLD)]}, {"hooks": [hook("createRuntime", OLD)]}),
]


@pytest.mark.parametrize("before, after", CONTAINER_ROWS)
def test_transform_relative_to_container_table(before, after):
    assert transform_root(spec(before), OLD, NEW, "container") == spec(after)
