"""Kubernetes manifests validated against the Kubernetes OpenAPI schemas (offline, with
kubernetes-validate), and the container image definition checked for what it copies."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

import gpu_operator as G

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


def test_daemonset_is_the_operators_toolkit_pod():
    """The same env (names and values), volumes and mounts as the GPU Operator renders for
    containerd (tests/packaging/gpu_operator.py), hostPID, privileged, the image's own
    entrypoint, no args; plus the driver roots its validator would export for a host driver."""
    ds = next(d for _, d in documents() if d["kind"] == "DaemonSet")
    pod = ds["spec"]["template"]["spec"]
    ctr = pod["containers"][0]
    assert pod["hostPID"] is True and ctr["securityContext"]["privileged"] is True
    assert "args" not in ctr and "command" not in ctr  # env-only, as the operator configures it
    env = {e["name"]: e["value"] for e in ctr["env"]}
    expected = G.operator_pod("containerd")
    ready = dict(line.split("=", 1) for line in G.HOST_DRIVER_READY.split())
    del ready["IS_HOST_DRIVER"]
    assert env == {**expected.env, **ready}
    host = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"]}
    mounts = {(host[m["name"]], m["mountPath"], m.get("readOnly", False),
               "rslave" if m.get("mountPropagation") == "HostToContainer" else "") for m in ctr["volumeMounts"]}
    assert mounts == {(m.host, m.pod, m.read_only, m.propagation) for m in expected.mounts}
    handlers = {d["handler"] for _, d in documents() if d["kind"] == "RuntimeClass"}
    assert handlers == {"nvidia", "nvidia-cdi", "nvidia-legacy"}


def test_daemonset_env_is_the_installers():
    """Every variable it sets is one nvidia-ctk-installer reads (NVIDIA_VISIBLE_DEVICES=void
    keeps the installer's own container GPU-less)."""
    from nct.cli.installer import FLAGS

    known = {e for f in FLAGS for e in f.envs}
    ds = next(d for _, d in documents() if d["kind"] == "DaemonSet")
    names = {e["name"] for e in ds["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert names - known == {"NVIDIA_VISIBLE_DEVICES"}


def test_containerfile_copies_the_assembled_toolkit_only():
    """Its build context is the assembly output dir (build/ with build/toolkit): no pip, no
    Python in the base (tests/packaging/test_installer_image.py builds and runs it)."""
    text = (REPO / "packaging/container/Containerfile").read_text()
    assert re.search(r"^FROM \S+", text, re.M)
    assert re.findall(r"^COPY (\S+) ", text, re.M) == ["toolkit"]
    assert not re.search(r"^RUN .*pip", text, re.M)
    assert re.findall(r"^ENTRYPOINT (.*)$", text, re.M) == ['["/opt/nct/nvidia-ctk-installer"]']  # as upstream's
