"""nvidia-cdi-hook: where the container root comes from (issue 12 #8), as upstream's OCI state
helper decides it: root.path of <bundle>/config.json, relative (or absent) = below the bundle;
--container-spec names a state file ("-" = stdin). Real files, the real console script."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from hookforms import hook_argv  # noqa: E402

pytestmark = pytest.mark.usefixtures("hook_form")  # alone and as an nct-steps step
HOOK = os.path.join(os.path.dirname(sys.executable), "nvidia-cdi-hook")
ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}


def run(args: list[str], stdin: str = "") -> subprocess.CompletedProcess:
    return subprocess.run(hook_argv([HOOK, *args]), input=stdin, capture_output=True, text=True, env=ENV, timeout=60)


def bundle_with(tmp_path, root: dict | None) -> str:
    bundle = tmp_path / "bundle"
    (bundle / "rootfs").mkdir(parents=True)
    spec = {"ociVersion": "1.0.2", "process": {"args": ["true"]}}
    if root is not None:
        spec["root"] = root
    (bundle / "config.json").write_text(json.dumps(spec))
    return str(bundle)


def state(bundle: str, **extra) -> str:
    return json.dumps({"ociVersion": "1.0.2", "id": "c", "status": "creating", "pid": os.getpid(),
                       "bundle": bundle, **extra})


@pytest.mark.parametrize("root, where", [
    ({"path": "rootfs"}, "rootfs"),
    ({"path": "rootfs/../rootfs"}, "rootfs"),
    ({"path": ""}, ""),           # upstream: filepath.Join(bundle, "") is the bundle
    ({}, ""),                     # no root.path
    (None, ""),                   # no root object at all
])
def test_root_relative_to_bundle(tmp_path, root, where):
    bundle = bundle_with(tmp_path, root)
    res = run(["create-symlinks", "--link", "target::/made-link"], state(bundle))
    assert res.returncode == 0, res.stderr
    link = os.path.join(bundle, where, "made-link")
    assert os.readlink(link) == "target"


def test_state_root_relative_to_bundle(tmp_path):
    """A `root` in the state itself (crun adds one) that is relative is below the bundle too,
    never below the hook's working directory."""
    bundle = bundle_with(tmp_path, {"path": "elsewhere"})
    cwd = tmp_path / "cwd"
    (cwd / "rootfs").mkdir(parents=True)
    res = subprocess.run(hook_argv([HOOK, "create-symlinks", "--link", "t::/l"]), input=state(bundle, root="rootfs"),
                         capture_output=True, text=True, env=ENV, cwd=cwd, timeout=60)
    assert res.returncode == 0, res.stderr
    assert os.readlink(os.path.join(bundle, "rootfs", "l")) == "t"
    assert not os.path.lexists(cwd / "rootfs" / "l")


@pytest.mark.parametrize("arg", ["file", "-"])
def test_container_spec_is_a_state_file(tmp_path, arg):
    """Upstream's --container-spec names the OCI *state* (empty or "-" = stdin)."""
    bundle = bundle_with(tmp_path, {"path": "rootfs"})
    st = state(bundle)
    path = tmp_path / "state.json"
    path.write_text(st)
    res = run(["create-symlinks", "--link", "t::/l", "--container-spec", str(path) if arg == "file" else "-"],
              st if arg == "-" else "")
    assert res.returncode == 0, res.stderr
    assert os.readlink(os.path.join(bundle, "rootfs", "l")) == "t"


def test_relative_root_reaching_slash_refused(tmp_path):
    """A relative root.path that climbs to / is the host's /: refused, nothing written."""
    bundle = bundle_with(tmp_path, None)
    with open(os.path.join(bundle, "config.json"), "w") as f:
        json.dump({"ociVersion": "1.0.2", "root": {"path": os.path.relpath("/", bundle)}}, f)
    res = run(["create-symlinks", "--link", "t::/nct-must-not-exist"], state(bundle))
    assert res.returncode == 1
    assert "must not be /" in res.stderr and len(res.stderr.strip().splitlines()) == 1
    assert not os.path.lexists("/nct-must-not-exist")


def test_absolute_state_root_is_used_as_is(tmp_path):
    """Upstream's state `root` extension: absolute as is (no config.json needed)."""
    elsewhere = tmp_path / "elsewhere-root"
    elsewhere.mkdir()
    bundle = tmp_path / "no-config-bundle"
    bundle.mkdir()
    res = run(["create-symlinks", "--link", "t::/l"], state(str(bundle), root=str(elsewhere)))
    assert res.returncode == 0, res.stderr
    assert os.readlink(elsewhere / "l") == "t"


@pytest.mark.parametrize("what", ["missing-state-file", "missing-config"])
def test_state_errors_are_one_line(tmp_path, what):
    if what == "missing-state-file":
        res = run(["create-symlinks", "--link", "t::/l", "--container-spec", str(tmp_path / "nope.json")])
    else:
        res = run(["create-symlinks", "--link", "t::/l"], state(str(tmp_path / "no-bundle")))
    assert res.returncode == 1 and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert "No such file" in res.stderr
