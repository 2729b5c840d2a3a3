"""The OCI runtime-spec schema check accepts the official good samples and rejects the bad."""

from __future__ import annotations

import json
import os

import pytest

from nct.errors import SpecError
from nct.oci.bundle import read_spec_file
from schema_check import oci_schema_errors, validate_oci_spec

DATA = os.path.join(os.path.dirname(__file__), "data")
GOOD = sorted(os.listdir(os.path.join(DATA, "good")))
BAD = sorted(os.listdir(os.path.join(DATA, "bad")))


@pytest.mark.parametrize("name", GOOD)
def test_good_samples_validate(name):
    spec = read_spec_file(os.path.join(DATA, "good", name))
    assert oci_schema_errors(spec) == []
    validate_oci_spec(spec)


@pytest.mark.parametrize("name", BAD)
def test_bad_samples_rejected(name):
    path = os.path.join(DATA, "bad", name)
    try:
        spec = read_spec_file(path)
    except SpecError as e:  # invalid-json.json
        assert "invalid JSON" in str(e) or "must be a JSON object" in str(e)
        return
    assert oci_schema_errors(spec)
    with pytest.raises(SpecError, match="not a valid OCI spec"):
        validate_oci_spec(spec, name)


def test_error_names_the_field():
    spec = read_spec_file(os.path.join(DATA, "good", "minimal.json"))
    spec["mounts"] = [{"destination": 7}]
    errors = oci_schema_errors(spec)
    assert any(e.startswith("$.mounts[0].destination") for e in errors), errors


def test_runc_generated_spec_validates(tmp_path):
    import shutil
    import subprocess
    if not shutil.which("runc"):
        pytest.skip("runc not installed")
    subprocess.run(["runc", "spec", "--bundle", str(tmp_path)], check=True)
    spec = json.loads((tmp_path / "config.json").read_text())
    assert oci_schema_errors(spec) == []
