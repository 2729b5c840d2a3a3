"""`nvidia-ctk cdi list|transform root|generate|check` through click and the real binary."""

from __future__ import annotations

import json
import subprocess

from click.testing import CliRunner

from nct.cli.cdi import cdi_group
from nct.cli.ctk import ctk
from .test_cdi_registry import node, write_spec


def test_list_prints_names_and_warns(tmp_path):
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    write_spec(a, "x.json", devices={"0": node(0), "all": node(0)})
    write_spec(b, "y.yaml", kind="example.com/net", devices={"eth": {"env": ["A=1"]}})
    (tmp_path / "a" / "bad.json").write_text("[]")
    r = CliRunner().invoke(ctk, ["cdi", "list", "--spec-dir", a, "--spec-dir", b])
    assert r.exit_code == 0, r.output
    assert r.stdout.splitlines() == ["example.com/net=eth", "nvidia.com/gpu=0", "nvidia.com/gpu=all"]
    assert "warning:" in r.stderr and "bad.json" in r.stderr
    r = CliRunner(env={"NVIDIA_CTK_CDI_SPEC_DIRS": f"{b}"}).invoke(ctk, ["cdi", "list"])
    assert r.stdout.splitlines() == ["example.com/net=eth"]


def test_list_real_binary(tmp_path, nct_bin):
    write_spec(str(tmp_path), "x.json", devices={"0": node(0)})
    out = subprocess.run([nct_bin("nvidia-ctk"), "cdi", "list", "--spec-dir", str(tmp_path)],
                         capture_output=True, text=True, check=True)
    assert out.stdout == "nvidia.com/gpu=0\n"


def test_transform_root(tmp_path):
    src = {"cdiVersion": "0.5.0", "kind": "nvidia.com/gpu",
           "devices": [{"name": "0", "containerEdits": {"deviceNodes": [
               {"path": "/dev/nvidia0", "hostPath": "/run/nvidia/driver/dev/nvidia0"}]}}],
           "containerEdits": {"mounts": [
               {"hostPath": "/run/nvidia/driver/usr/lib/libcuda.so.1", "containerPath": "/usr/lib/libcuda.so.1"},
               {"hostPath": "/run/nvidia/driver2/x", "containerPath": "/x"}],
               "hooks": [{"hookName": "createContainer", "path": "/run/nvidia/driver/usr/bin/nvidia-cdi-hook",
                          "args": ["nvidia-cdi-hook", "create-symlinks", "--link",
                                   "/run/nvidia/driver/a::/run/nvidia/driver/b"]}]}}
    inp = tmp_path / "in.json"
    inp.write_text(json.dumps(src))
    r = CliRunner().invoke(cdi_group, ["transform", "root", "--from", "/run/nvidia/driver", "--to", "/host",
                                       "--input", str(inp), "--output", str(tmp_path / "out.json")])
    assert r.exit_code == 0, r.output
    out = json.loads((tmp_path / "out.json").read_text())
    assert out["devices"][0]["containerEdits"]["deviceNodes"][0]["hostPath"] == "/host/dev/nvidia0"
    mounts = out["containerEdits"]["mounts"]
    assert [m["hostPath"] for m in mounts] == ["/host/usr/lib/libcuda.so.1", "/run/nvidia/driver2/x"]
    hook = out["containerEdits"]["hooks"][0]
    assert hook["path"] == "/host/usr/bin/nvidia-cdi-hook"
    assert hook["args"][-1] == "/run/nvidia/driver/a::/run/nvidia/driver/b"  # container-side args
    r = CliRunner().invoke(cdi_group, ["transform", "root", "--from", "/run/nvidia/driver", "--to", "/",
                                       "--relative-to", "container"], input=json.dumps(src))
    assert r.exit_code == 0
    out = json.loads(r.stdout)
    assert out["containerEdits"]["hooks"][0]["args"][-1] == "/a::/b"  # createContainer args are container paths
    out["containerEdits"]["hooks"][0]["args"][-1] = "/run/nvidia/driver/a::/run/nvidia/driver/b"
    assert out == src  # nothing else under that root on the container side


def _hooks_spec() -> dict:
    return {"cdiVersion": "0.6.0", "kind": "nvidia.com/gpu",
            "devices": [{"name": "0", "containerEdits": {"deviceNodes": [{"path": "/cr/dev/nvidia0"}]}}],
            "containerEdits": {"hooks": [
                {"hookName": "createContainer", "path": "/hr/usr/bin/nvidia-cdi-hook",
                 "args": ["nvidia-cdi-hook", "create-symlinks", "--link", "libcuda.so.1::/cr/lib/libcuda.so",
                          "--link", "/cr/a::/cr/b::c"]},
                {"hookName": "createContainer", "path": "/hr/usr/bin/nvidia-cdi-hook",
                 "args": ["nvidia-cdi-hook", "update-ldcache", "--folder", "/cr/lib", "--folder", "/crx/lib"]},
                {"hookName": "startContainer", "path": "/cr/bin/start", "args": ["start", "/cr/x"]},
                {"hookName": "createRuntime", "path": "/hr/bin/rt", "args": ["rt", "/hr/y", "/hr/a::/hr/b"]},
                {"hookName": "poststop", "path": "/cr/bin/stop"}]}}


def test_transform_root_hooks_container(tmp_path, nct_bin):
    """--relative-to container (upstream's rules, through the real nvidia-ctk): createContainer
    and startContainer arguments are container paths (--link TARGET::LINK both sides, the
    values after --folder), the startContainer path resolves in the container; host-side
    hook paths and createRuntime arguments stay."""
    inp = tmp_path / "in.json"
    inp.write_text(json.dumps(_hooks_spec()))
    res = subprocess.run([nct_bin("nvidia-ctk"), "cdi", "transform", "root", "--from", "/cr", "--to", "/new",
                          "--relative-to", "container", "--input", str(inp)], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    hooks = out["containerEdits"]["hooks"]
    assert hooks[0]["path"] == "/hr/usr/bin/nvidia-cdi-hook"
    assert hooks[0]["args"] == ["nvidia-cdi-hook", "create-symlinks", "--link", "libcuda.so.1::/new/lib/libcuda.so",
                                "--link", "/new/a::/new/b::c"]  # split at the first ::
    assert hooks[1]["args"] == ["nvidia-cdi-hook", "update-ldcache", "--folder", "/new/lib", "--folder", "/crx/lib"]
    assert hooks[2] == {"hookName": "startContainer", "path": "/new/bin/start", "args": ["start", "/new/x"]}
    assert hooks[3]["args"] == ["rt", "/hr/y", "/hr/a::/hr/b"] and hooks[4]["path"] == "/cr/bin/stop"
    assert out["devices"][0]["containerEdits"]["deviceNodes"][0] == {"path": "/new/dev/nvidia0"}


def test_transform_root_hooks_host(tmp_path, nct_bin):
    """--relative-to host: every hook path but startContainer's, arguments of hooks that run
    in the host's namespaces only; a device node without hostPath gets one."""
    spec = _hooks_spec()
    spec["containerEdits"]["hooks"][2]["path"] = "/hr/bin/start"
    inp = tmp_path / "in.json"
    inp.write_text(json.dumps(spec))
    res = subprocess.run([nct_bin("nvidia-ctk"), "cdi", "transform", "root", "--from", "/hr", "--to", "/",
                          "--input", str(inp)], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    hooks = out["containerEdits"]["hooks"]
    assert [h["path"] for h in hooks] == ["/usr/bin/nvidia-cdi-hook", "/usr/bin/nvidia-cdi-hook", "/hr/bin/start",
                                          "/bin/rt", "/cr/bin/stop"]
    assert hooks[0]["args"] == spec["containerEdits"]["hooks"][0]["args"]
    assert hooks[3]["args"] == ["rt", "/y", "/a::/b"]
    assert out["devices"][0]["containerEdits"]["deviceNodes"][0] == {"path": "/cr/dev/nvidia0",
                                                                    "hostPath": "/cr/dev/nvidia0"}


def test_transform_bad_input_is_one_line_error():
    r = CliRunner().invoke(ctk, ["cdi", "transform", "root"], input="cdiVersion: 0.3.0\nkind: bad\ndevices: []\n")
    assert r.exit_code == 1
    assert r.stderr.startswith("ctk: <stdin>: invalid kind 'bad'") or "invalid kind 'bad'" in r.stderr
    assert "Traceback" not in r.output and len(r.stderr.strip().splitlines()) == 1


