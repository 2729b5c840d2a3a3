"""Scale: generation on nodes with 1, 8 and 64 GPUs and 8 GPUs x 7 MIG devices, injection
of big specs into a runc spec, and a spec dir of 200 files (registry and `cdi check`).
Correctness only; the timings are in bench/cdi_bench.py."""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess

import pytest

from e2e_cdi.simnodes import VENV_BIN, make_node, node_env, set_node_env
from nct.cdi.generate import GenerateOptions, discover_for_generate, generate_spec, roots_for
from nct.cdi.registry import Registry
from nct.cdi.spec import dump_spec
from schema_check import schema_errors
from nct.config.model import Config

HOOK = str(VENV_BIN / "nvidia-cdi-hook")
SHAPES = {"1": dict(gpus=1), "8": dict(gpus=8), "64": dict(gpus=64), "8x7mig": dict(gpus=8, mig="7")}


@pytest.fixture(scope="module")
def nodes(tmp_path_factory):
    base = tmp_path_factory.mktemp("scale")
    return {k: make_node(base / k, **kw) for k, kw in SHAPES.items()}


def spec_for(n, monkeypatch, **kw) -> dict:
    set_node_env(monkeypatch, n)
    node = discover_for_generate(roots_for(n.root, None))
    return generate_spec(GenerateOptions(driver_root=n.root, hook_path=HOOK, **kw), node=node, cfg=Config())


@pytest.mark.parametrize("shape,entries", [("1", 3), ("8", 17), ("64", 129), ("8x7mig", 113)])
def test_generation_counts_and_schema(nodes, monkeypatch, shape, entries):
    n = nodes[shape]
    spec = spec_for(n, monkeypatch)
    assert schema_errors(spec) == []
    names = [d["name"] for d in spec["devices"]]
    assert len(names) == entries == len(set(names))
    migs = [m for g in n.gpus for m in g.migs]
    full = [g for g in n.gpus if not g.migs]
    assert len(names) == 2 * (len(full) + len(migs)) + 1
    all_nodes = [d["path"] for d in spec["devices"][-1]["containerEdits"]["deviceNodes"]]
    assert sum(p.startswith("/dev/nvidia") and p[11:].isdigit() for p in all_nodes) == len(n.gpus)
    assert sum(p.startswith("/dev/nvidia-caps/") for p in all_nodes) == 2 * len(migs)


def _runc_spec(tmp_path) -> dict:
    if shutil.which("runc") is None:
        pytest.skip("runc not installed")
    subprocess.run(["runc", "spec", "--bundle", str(tmp_path)], check=True)
    return json.loads((tmp_path / "config.json").read_text())


@pytest.mark.parametrize("shape", ["64", "8x7mig"])
def test_injection_of_big_specs(nodes, monkeypatch, tmp_path, shape):
    from schema_check import oci_schema_errors

    n = nodes[shape]
    spec = spec_for(n, monkeypatch)
    d = tmp_path / "cdi"
    d.mkdir()
    (d / "nvidia.json").write_text(json.dumps(spec))
    reg = Registry([str(d)])
    assert reg.errors == []
    base = _runc_spec(tmp_path)
    out = reg.inject(copy.deepcopy(base), ["nvidia.com/gpu=all"])
    assert oci_schema_errors(out) == []
    paths = [x["path"] for x in out["linux"]["devices"]]
    assert len(paths) == len(set(paths))
    assert sum(p.startswith("/dev/nvidia") and p[11:].isdigit() for p in paths) == len(n.gpus)
    allow = [r for r in out["linux"]["resources"]["devices"] if r.get("allow")]
    assert len(allow) >= len(paths)
    one = reg.inject(base, [f"nvidia.com/gpu={spec['devices'][-2]['name']}"])
    assert len(one["linux"]["devices"]) < len(paths)


def test_spec_dir_of_200_files(nodes, monkeypatch, tmp_path):
    n = nodes["8"]
    spec = spec_for(n, monkeypatch)
    d = tmp_path / "cdi"
    d.mkdir()
    for i in range(200):
        doc = dict(spec, kind=f"node{i:03d}.nvidia.com/gpu")
        fmt = "json" if i % 2 else "yaml"
        (d / f"node{i:03d}.{fmt}").write_text(dump_spec(doc, fmt))
    reg = Registry([str(d)])
    assert reg.errors == []
    assert len(reg.specs) == 200
    assert len(reg.device_names()) == 200 * len(spec["devices"])
    r = subprocess.run([str(VENV_BIN / "nct"), "cdi", "check", "--spec-dir", str(d), "--driver-root", n.root],
                       capture_output=True, text=True, env=node_env(n))
    assert r.returncode == 0, r.stdout[:2000] + r.stderr
    assert "checked 200 NVIDIA CDI spec(s), 0 stale" in r.stderr
    smi = os.path.join(n.root, "usr/bin/nvidia-smi")
    os.rename(smi, smi + ".away")
    try:
        r = subprocess.run([str(VENV_BIN / "nct"), "cdi", "check", "--spec-dir", str(d), "--driver-root", n.root],
                           capture_output=True, text=True, env=node_env(n))
    finally:
        os.rename(smi + ".away", smi)
    assert r.returncode == 1
    assert len(r.stdout.splitlines()) == 200
    assert all("usr/bin/nvidia-smi" in line for line in r.stdout.splitlines())
