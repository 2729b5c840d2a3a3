"""`nct cdi check`: a generated spec matches its node; a driver upgrade, a different GPU
set, a missing host file or a node without driver make it stale (exit 1, one line each)."""

from __future__ import annotations

import json
import os

import pytest

from e2e_cdi.simnodes import VENV_BIN, ctk, make_node, node_env
from nct.cdi.check import check_spec, referenced_host_paths

HOOK = str(VENV_BIN / "nvidia-cdi-hook")


@pytest.fixture(scope="module")
def nodes(tmp_path_factory):
    """a: the node the spec is made on; upgraded: same GPUs, newer driver; other: same
    driver, other GPUs (another seed)."""
    base = tmp_path_factory.mktemp("check")
    return {
        "a": make_node(base / "a", gpus=2, seed="alpha"),
        "upgraded": make_node(base / "upgraded", gpus=2, seed="alpha", driver_version="555.42.02"),
        "other": make_node(base / "other", gpus=2, seed="beta"),
    }


@pytest.fixture(scope="module")
def spec_file(nodes, tmp_path_factory):
    out = tmp_path_factory.mktemp("specs") / "nvidia.yaml"
    r = ctk(nodes["a"], "cdi", "generate", "--output", str(out), "--nvidia-cdi-hook-path", HOOK)
    assert r.returncode == 0, r.stderr
    return out


def check(node, *args: str, env: dict | None = None):
    return ctk(node, "cdi", "check", "--driver-root", node.root, *args, prog="nct", root=False, env=env)


def test_fresh_spec_matches(nodes, spec_file):
    r = check(nodes["a"], str(spec_file))
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout == ""
    assert "checked 1 NVIDIA CDI spec(s), 0 stale" in r.stderr


def test_driver_upgrade_is_stale(nodes, spec_file):
    r = check(nodes["upgraded"], str(spec_file))
    assert r.returncode == 1
    assert r.stdout == f"{spec_file}: stale: driver version changed (550.54.15 -> 555.42.02)\n"


def test_other_gpus_are_stale(nodes, spec_file):
    r = check(nodes["other"], str(spec_file))
    assert r.returncode == 1
    assert r.stdout == f"{spec_file}: stale: GPU set changed (UUIDs, minors or MIG devices)\n"


def test_missing_host_file_is_stale(tmp_path):
    n = make_node(tmp_path / "n", gpus=1)
    out = tmp_path / "nvidia.json"
    assert ctk(n, "cdi", "generate", "--output", str(out), "--nvidia-cdi-hook-path", HOOK).returncode == 0
    fw = next(p for p in referenced_host_paths(json.loads(out.read_text())) if p.endswith(".bin"))
    os.unlink(fw)
    r = check(n, str(out))
    assert r.returncode == 1
    assert r.stdout == f"{out}: stale: driver files changed; missing host path: {fw}\n"


def test_node_without_driver_is_stale(nodes, spec_file, tmp_path):
    env = node_env(nodes["a"])
    env["NCT_PROC_ROOT"] = str(tmp_path / "proc")
    r = check(nodes["a"], str(spec_file), env=env)
    assert r.returncode == 1
    assert r.stdout.startswith(f"{spec_file}: stale: node not discoverable: NVIDIA driver not loaded")
    assert r.stdout.count("\n") == 1


def test_spec_dirs_only_nvidia_specs(nodes, spec_file, tmp_path):
    d1, d2 = tmp_path / "etc-cdi", tmp_path / "run-cdi"
    d1.mkdir()
    d2.mkdir()
    (d1 / "nvidia.yaml").write_bytes(spec_file.read_bytes())
    # not NVIDIA's: never checked, even with a missing path
    (d1 / "other.json").write_text(json.dumps({
        "cdiVersion": "0.5.0", "kind": "example.com/net",
        "devices": [{"name": "x", "containerEdits": {"deviceNodes": [{"path": "/dev/nonexistent-x"}]}}]}))
    (d1 / "broken.json").write_text("{not json")
    # an upstream-made spec (no node record): host paths only
    upstream = {"cdiVersion": "0.5.0", "kind": "nvidia.com/gpu", "devices": [
        {"name": "0", "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia0", "hostPath": str(tmp_path / "gone")}]}}]}
    (d2 / "upstream.json").write_text(json.dumps(upstream))
    r = check(nodes["a"], "--spec-dir", str(d1), "--spec-dir", str(d2))
    assert r.returncode == 1
    assert r.stdout == f"{d2 / 'upstream.json'}: stale: missing host path: {tmp_path / 'gone'}\n"
    assert "broken.json: invalid JSON" in r.stderr and "checked 2 NVIDIA CDI spec(s), 1 stale" in r.stderr
    # the env var lists the dirs when no flag or file is given
    env = node_env(nodes["a"])
    env["NVIDIA_CTK_CDI_SPEC_DIRS"] = str(d1)
    r = check(nodes["a"], env=env)
    assert r.returncode == 0, r.stdout + r.stderr


def test_spec_without_record_for_old_consumers(nodes, tmp_path):
    out = tmp_path / "nvidia.yaml"
    r = ctk(nodes["a"], "cdi", "generate", "--output", str(out), "--nvidia-cdi-hook-path", HOOK,
            "--max-cdi-version", "0.5.0")
    assert r.returncode == 0, r.stderr
    assert check(nodes["upgraded"], str(out)).returncode == 0  # nothing recorded, every path still there


def test_unreadable_file_is_an_error(nodes, tmp_path):
    r = check(nodes["a"], str(tmp_path / "missing.yaml"))
    assert r.returncode == 1
    assert r.stderr == f"nct: {tmp_path / 'missing.yaml'}: cannot read: No such file or directory\n"


def test_check_spec_lists_every_reason(nodes):
    class Nodes:  # a node cache that has the upgraded node
        def __init__(self, node):
            self.node, self.error = node, None

        def get(self):
            return self.node

    from nct.driver.discover import discover_node
    from nct.cdi.generate import node_record

    a = discover_node(nodes["a"].roots(), use_nvml=False)
    other = discover_node(nodes["upgraded"].roots(), use_nvml=False)
    other = type(other)(**{**other.__dict__, "gpus": other.gpus[:1]})
    raw = {"kind": "nvidia.com/gpu", "annotations": node_record(a), "devices": [
        {"name": "0", "containerEdits": {"mounts": [{"hostPath": f"/nonexistent/{i}", "containerPath": "/x"}
                                                    for i in range(5)]}}]}
    assert check_spec(raw, Nodes(other)) == [
        "driver version changed (550.54.15 -> 555.42.02)",
        "GPU set changed (UUIDs, minors or MIG devices)",
        "missing host paths: /nonexistent/0, /nonexistent/1, /nonexistent/2 (and 2 more)",
    ]
