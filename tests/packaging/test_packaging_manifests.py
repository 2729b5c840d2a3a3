"""Kubernetes manifests validated against the Kubernetes OpenAPI schemas (offline, with
kubernetes-validate), and the container image definition checked for what it copies."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
K8S = REPO / "packaging/kubernetes"
kv = pytest.importorskip("kubernetes_validate", reason="pip install kubernetes-validate")

VERSIONS = ("1.29", "1.33")


def documents() -> list[tuple[str, dict]]:
    out = []
    for f in sorted(K8S.glob("*.yaml")):
        out += [(f.name, d) for d in yaml.safe_load_all(f.read_text()) if d]
    return out


@pytest.mark.parametrize("version", VERSIONS)
def test_manifests_validate_strictly(version):
    docs = documents()
    assert {d["kind"] for _, d in docs} == {"Namespace", "ServiceAccount", "DaemonSet", "RuntimeClass"}
    for name, doc in docs:
        kv.validate(doc, version, strict=True)  # raises ValidationError with the path at fault


def test_validator_rejects_a_broken_manifest():
    ds = next(d for _, d in documents() if d["kind"] == "DaemonSet")
    ds["spec"]["template"]["spec"]["containers"][0]["volumeMounts"][0]["mountPath"] = 7
    with pytest.raises(kv.ValidationError):
        kv.validate(ds, VERSIONS[-1], strict=True)


def test_daemonset_mounts_and_args_fit_nct_install():
    ds = next(d for _, d in documents() if d["kind"] == "DaemonSet")
    pod = ds["spec"]["template"]["spec"]
    paths = {v["hostPath"]["path"] for v in pod["volumes"]}
    assert {"/run/nvidia", "/usr/local/nvidia", "/etc/containerd", "/run/containerd/containerd.sock"} <= paths
    mounts = {m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
    assert paths == mounts  # host paths at the same paths in the pod
    handlers = {d["handler"] for _, d in documents() if d["kind"] == "RuntimeClass"}
    assert handlers == {"nvidia", "nvidia-cdi", "nvidia-legacy"}
    # every arg is an option `nct install` knows
    help_text = subprocess.run([str(Path(sys.executable).parent / "nct"), "install", "--help"],
                               capture_output=True, text=True, check=True).stdout
    for arg in pod["containers"][0]["args"]:
        assert arg.split("=")[0] in help_text, arg


def test_containerfile_copies_the_assembled_toolkit_only():
    """Its build context is the assembly output dir (build/ with build/toolkit): no pip, no
    Python in the base (tests/packaging/test_installer_image.py builds and runs it)."""
    text = (REPO / "packaging/container/Containerfile").read_text()
    assert re.search(r"^FROM \S+", text, re.M)
    assert re.findall(r"^COPY (\S+) ", text, re.M) == ["toolkit"]
    assert not re.search(r"^RUN .*pip", text, re.M) and 'ENTRYPOINT ["/opt/nct/nct", "install"]' in text
