"""`nvidia-ctk cdi generate` and the jit-cdi runtime write byte-identical specs for the
simulated nodes of tests/golden/specgen.py (1, 8, 64 GPUs, MIG; device classes, IMEX,
management, name strategies, capabilities, gated devices): refactoring the planner must
not change a byte. A change meant to change the output regenerates the data
(`python tests/golden/specgen.py`) and says why in its commit."""

from __future__ import annotations

import os
import pytest

from . import specgen

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the simulated nodes' device nodes need root (mknod)")


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    try:
        return specgen.produce(tmp_path_factory.mktemp("golden"))
    except FileNotFoundError as e:
        pytest.skip(str(e))


def test_every_case_has_golden_data():
    stored = {p.name for p in specgen.DATA.iterdir()}
    expected = {specgen.stored_name(name) for name, *_ in specgen.cases()}
    assert stored == expected


@pytest.mark.parametrize("name", [c[0] for c in specgen.cases()])
def test_byte_identical(outputs, name, tmp_path_factory):
    data = outputs[name]
    want = (specgen.DATA / specgen.stored_name(name)).read_bytes()
    got = specgen.stored_form(name, data)
    if got != want:
        keep = tmp_path_factory.mktemp("golden-actual") / name
        keep.write_bytes(data)
        pytest.fail(f"{name} differs from tests/golden/data (actual output kept at {keep})")


def test_specs_for_other_engines_keep_upstreams_separate_hooks(outputs):
    """`nvidia-ctk cdi generate` writes specs other engines (podman, containerd, CRI-O) run
    with any nvidia-cdi-hook: never nct's own `nct-steps` hook, only upstream's hooks, one
    each; only the runtime's in-memory jit-cdi specs combine them (a regenerated golden file
    cannot quietly change that)."""
    generated = {n: d for n, d in outputs.items() if n.startswith("generate-")}
    assert generated
    for name, data in generated.items():
        assert b"nct-steps" not in data, name
    assert any(b"update-ldcache" in d and b"create-symlinks" in d for d in generated.values())
    assert any(b"nct-steps" in d for n, d in outputs.items() if n.startswith("runtime-") and "jit-cdi" in n)
