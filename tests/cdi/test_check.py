"""`nct cdi check`: a default generated spec (cdiVersion 0.5.0, no annotations) matches its
node; a driver upgrade, GPUs removed/added/reordered, a MIG layout change, a missing host
file or a node without driver make it stale (exit 1, one line each), all read from the
spec's content. Specs from older nct versions (annotated) are still checked."""

from __future__ import annotations

import json
import os

import pytest
import yaml

from e2e_cdi.simnodes import VENV_BIN, ctk, make_node, node_env, world_rw_dri
from nct.cdi.check import (DRIVER_VERSION_ANNOTATION, FINGERPRINT_ANNOTATION, check_spec, is_nvidia_spec,
                           node_fingerprint, referenced_host_paths, spec_driver_versions, spec_gpu_devices)
from schema_check import schema_errors

HOOK = str(VENV_BIN / "nvidia-cdi-hook")


def node_record(node) -> dict[str, str]:
    """The annotations older nct versions wrote on a spec (generate no longer does)."""
    fp = node_fingerprint(node)
    return {DRIVER_VERSION_ANNOTATION: node.driver_version,
            FINGERPRINT_ANNOTATION: ",".join(f"{k}:{v}" for k, v in fp.items())}


@pytest.fixture(scope="module")
def nodes(tmp_path_factory):
    """a: 3 GPUs, GPU 1 with 2 MIG devices, every device node world rw (the spec is made
    here); the others are `a` changed in one way each (same seed: same UUIDs)."""
    base = tmp_path_factory.mktemp("check")

    def mk(name, **kw):
        return make_node(base / name, **{"gpus": 3, "mig": "1:2", "seed": "alpha", **kw})

    made = {
        "a": mk("a"),
        "upgraded": mk("upgraded", driver_version="555.42.02"),
        "other": mk("other", seed="beta"),
        "fewer": mk("fewer", gpus=2),
        "more": mk("more", gpus=4),
        "reordered": mk("reordered", minor_order="reverse"),
        "mig3": mk("mig3", mig="1:3"),
        "mig_off": mk("mig_off", mig=None),
    }
    world_rw_dri(os.path.join(made["a"].root, "dev"))
    return made


@pytest.fixture(scope="module")
def spec_file(nodes, tmp_path_factory):
    out = tmp_path_factory.mktemp("specs") / "nvidia.yaml"
    r = ctk(nodes["a"], "cdi", "generate", "--output", str(out), "--nvidia-cdi-hook-path", HOOK)
    assert r.returncode == 0, r.stderr
    return out


def check(node, *args: str, env: dict | None = None):
    return ctk(node, "cdi", "check", "--driver-root", node.root, *args, prog="nct", root=False, env=env)


def stale_line(r, spec_file) -> str:
    assert r.returncode == 1, r.stdout + r.stderr
    prefix = f"{spec_file}: stale: "
    assert r.stdout.startswith(prefix) and r.stdout.count("\n") == 1, r.stdout
    return r.stdout[len(prefix):-1]


def test_default_spec_is_podman_readable_and_fresh(nodes, spec_file):
    raw = yaml.safe_load(spec_file.read_text())
    assert raw["cdiVersion"] == "0.5.0" and "annotations" not in raw
    assert schema_errors(raw) == []
    r = check(nodes["a"], str(spec_file))
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout == ""
    assert "checked 1 NVIDIA CDI spec(s), 0 stale" in r.stderr


def test_driver_upgrade_is_stale(nodes, spec_file):
    assert stale_line(check(nodes["upgraded"], str(spec_file)), spec_file) == \
        "driver version changed (550.54.15 -> 555.42.02)"


def test_gpu_removed(nodes, spec_file):
    g2 = nodes["a"].gpus[2]
    assert stale_line(check(nodes["fewer"], str(spec_file)), spec_file) == \
        f"GPU set changed (GPU 2 gone; {g2.uuid} gone)"


def test_gpu_added(nodes, spec_file):
    g3 = nodes["more"].gpus[3]
    assert stale_line(check(nodes["more"], str(spec_file)), spec_file) == \
        f"GPU set changed (no device for GPU 3 / {g3.uuid})"


def test_gpus_reordered(nodes, spec_file):
    """Same GPUs, minors in reverse bus order: index 0 is /dev/nvidia2 now."""
    g0, g2 = nodes["a"].gpus[0], nodes["a"].gpus[2]
    assert stale_line(check(nodes["reordered"], str(spec_file)), spec_file) == (
        f"GPU set changed (GPU 0 now /dev/nvidia2, was /dev/nvidia0; {g0.uuid} now /dev/nvidia2, was /dev/nvidia0; "
        f"GPU 2 now /dev/nvidia0, was /dev/nvidia2; {g2.uuid} now /dev/nvidia0, was /dev/nvidia2)")


def test_other_gpus(nodes, spec_file):
    """Same indices and minors, other UUIDs (GPU and MIG, the latter through NVML)."""
    g = nodes["a"].gpus
    assert stale_line(check(nodes["other"], str(spec_file)), spec_file) == (
        f"GPU set changed ({g[0].uuid} gone; {g[2].uuid} gone; {g[1].migs[0].uuid} gone; {g[1].migs[1].uuid} gone)")


def test_mig_layout_changed(nodes, spec_file):
    """2 -> 3 MIG devices on GPU 1: other GPU instances, so other access nodes."""
    line = stale_line(check(nodes["mig3"], str(spec_file)), spec_file)
    m0 = nodes["a"].gpus[1].migs[0]
    assert line.startswith(f"GPU set changed (MIG 1:0 now GI 3 CI 0 on other device nodes; {m0.uuid} gone; "
                           "MIG 1:1 now GI 4 CI 0 on other device nodes; ")
    assert line.endswith(f"{nodes['a'].gpus[1].migs[1].uuid} gone; and 1 more)")  # no device for the new 1:2


def test_mig_disabled(nodes, spec_file):
    a = nodes["a"].gpus[1]
    line = stale_line(check(nodes["mig_off"], str(spec_file)), spec_file)
    assert line == (f"GPU set changed (MIG 1:0 gone; {a.migs[0].uuid} gone; MIG 1:1 gone; {a.migs[1].uuid} gone; "
                    "and 1 more)")


def test_mig_uuid_looked_up_with_nvml(nodes, spec_file, tmp_path):
    """A MIG UUID the node does not have, on the right access nodes (MIG device recreated):
    NVML (simulated, in the driver root) tells."""
    raw = yaml.safe_load(spec_file.read_text())
    m0 = nodes["a"].gpus[1].migs[0]
    bogus = "MIG-00000000-1111-2222-3333-444444444444"
    for d in raw["devices"]:
        if d["name"] == m0.uuid:
            d["name"] = bogus
    out = tmp_path / "recreated.yaml"
    out.write_text(yaml.safe_dump(raw))
    assert stale_line(check(nodes["a"], str(out)), out) == f"GPU set changed ({bogus} gone)"


def test_missing_host_file_is_stale(tmp_path):
    n = make_node(tmp_path / "n", gpus=1)
    out = tmp_path / "nvidia.json"
    assert ctk(n, "cdi", "generate", "--output", str(out), "--nvidia-cdi-hook-path", HOOK).returncode == 0
    fw = next(p for p in referenced_host_paths(json.loads(out.read_text())) if p.endswith(".bin"))
    os.unlink(fw)
    assert stale_line(check(n, str(out)), out) == f"missing host path: {fw}"


def test_node_without_driver_is_stale(nodes, spec_file, tmp_path):
    env = node_env(nodes["a"])
    env["NCT_PROC_ROOT"] = str(tmp_path / "proc")
    line = stale_line(check(nodes["a"], str(spec_file), env=env), spec_file)
    assert line.startswith("node not discoverable: NVIDIA driver not loaded")


def test_management_spec(nodes, tmp_path):
    out = tmp_path / "management.yaml"
    r = ctk(nodes["a"], "cdi", "generate", "--mode", "management", "--output", str(out), "--nvidia-cdi-hook-path", HOOK)
    assert r.returncode == 0, r.stderr
    assert check(nodes["a"], str(out)).returncode == 0
    assert stale_line(check(nodes["more"], str(out)), out) == "GPU set changed (device all lacks /dev/nvidia3)"


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
    # another vendor name, but GPU nodes and driver libraries: NVIDIA's (and fresh)
    r = ctk(nodes["a"], "cdi", "generate", "--output", str(d1 / "custom.yaml"), "--nvidia-cdi-hook-path", HOOK,
            "--vendor", "example.com", "--class", "accel")
    assert r.returncode == 0, r.stderr
    # a hand-written nvidia.com spec with no GPU entry: host paths only
    upstream = {"cdiVersion": "0.5.0", "kind": "nvidia.com/gpu", "devices": [
        {"name": "uvm", "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia-uvm", "hostPath": str(tmp_path / "gone")}]}}]}
    (d2 / "upstream.json").write_text(json.dumps(upstream))
    r = check(nodes["a"], "--spec-dir", str(d1), "--spec-dir", str(d2))
    assert r.returncode == 1
    assert r.stdout == f"{d2 / 'upstream.json'}: stale: missing host path: {tmp_path / 'gone'}\n"
    assert "broken.json: invalid JSON" in r.stderr and "checked 3 NVIDIA CDI spec(s), 1 stale" in r.stderr
    # the env var lists the dirs when no flag or file is given
    env = node_env(nodes["a"])
    env["NVIDIA_CTK_CDI_SPEC_DIRS"] = str(d1)
    r = check(nodes["a"], env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "checked 2 NVIDIA CDI spec(s), 0 stale" in r.stderr


def test_old_annotated_spec_still_checked(nodes, spec_file, tmp_path):
    """Specs older nct versions wrote (cdiVersion 0.6.0, node record annotations)."""
    from nct.driver.discover import discover_node

    a = discover_node(nodes["a"].roots(), use_nvml=False)
    raw = yaml.safe_load(spec_file.read_text())
    raw.update(cdiVersion="0.6.0", annotations=node_record(a))
    old = tmp_path / "old.yaml"
    old.write_text(yaml.safe_dump(raw))
    assert check(nodes["a"], str(old)).returncode == 0
    assert stale_line(check(nodes["upgraded"], str(old)), old) == "driver version changed (550.54.15 -> 555.42.02)"
    assert stale_line(check(nodes["fewer"], str(old)), old).startswith("GPU set changed (GPU 2 gone; ")
    # the annotation wins over the libraries' suffix
    raw["annotations"][DRIVER_VERSION_ANNOTATION] = "535.104.05"
    old.write_text(yaml.safe_dump(raw))
    assert stale_line(check(nodes["a"], str(old)), old) == "driver version changed (535.104.05 -> 550.54.15)"
    # a fingerprint of another node, content matching: the fingerprint still tells
    other = discover_node(nodes["other"].roots(), use_nvml=False)
    raw["annotations"] = {DRIVER_VERSION_ANNOTATION: "550.54.15",
                          FINGERPRINT_ANNOTATION: node_record(other)[FINGERPRINT_ANNOTATION].replace(
                              "files:", "files:0")}
    old.write_text(yaml.safe_dump(raw))
    assert stale_line(check(nodes["a"], str(old)), old) == \
        "GPU set changed (UUIDs, minors or MIG devices); driver files changed"


def test_unreadable_file_is_an_error(nodes, tmp_path):
    r = check(nodes["a"], str(tmp_path / "missing.yaml"))
    assert r.returncode == 1
    assert r.stderr == f"nct: {tmp_path / 'missing.yaml'}: cannot read: No such file or directory\n"


# --- pure parts --------------------------------------------------------------------------------

def _dev(name, *paths, **edits):
    return {"name": name, "containerEdits": {"deviceNodes": [{"path": p} for p in paths], **edits}}


def test_driver_version_from_content():
    lib = "/usr/lib/x86_64-linux-gnu/"
    raw = {"kind": "nvidia.com/gpu", "devices": [_dev("0", "/dev/nvidia0")], "containerEdits": {"mounts": [
        {"hostPath": "/run/nvidia/driver" + lib + "libnvidia-egl-wayland.so.1.1.13", "containerPath": "/x"},
        {"hostPath": lib + "libnvidia-ml.so.550.54.15", "containerPath": lib + "libnvidia-ml.so.550.54.15"},
        {"hostPath": lib + "libcuda.so.550.54.15", "containerPath": lib + "libcuda.so.550.54.15"}]}}
    assert spec_driver_versions(raw) == ["550.54.15"]
    hooks = [{"hookName": "createContainer", "path": "/usr/bin/nvidia-cdi-hook",
              "args": ["nvidia-cdi-hook", "enable-cuda-compat", "--host-driver-version=535.104.05"]}]
    assert spec_driver_versions({"devices": [], "containerEdits": {"hooks": hooks}}) == ["535.104.05"]
    assert spec_driver_versions({"devices": [], "containerEdits": {"mounts": raw["containerEdits"]["mounts"][:1]}}) == []


def test_gpu_devices_from_names_and_nodes():
    raw = {"kind": "nvidia.com/gpu", "devices": [
        _dev("0", "/dev/nvidia0", "/dev/dri/card0"), _dev("gpu1", "/dev/nvidia1"), _dev("GPU-abc", "/dev/nvidia0"),
        _dev("1:0", "/dev/nvidia1", "/dev/nvidia-caps/nvidia-cap147", "/dev/nvidia-caps/nvidia-cap148"),
        _dev("mig1:0", "/dev/nvidia1"), _dev("MIG-def", "/dev/nvidia1"), _dev("all", "/dev/nvidia0", "/dev/nvidia1"),
        _dev("custom", "/dev/nvidia0"), _dev("2", "/dev/nvidia-caps-imex-channels/channel2"), _dev("none", env=["A="]),
    ]}
    got = [(d.name, d.kind, d.key, sorted(d.gpu_nodes), sorted(d.cap_nodes)) for d in spec_gpu_devices(raw)]
    assert got == [
        ("0", "gpu-index", 0, ["/dev/nvidia0"], []),
        ("gpu1", "gpu-index", 1, ["/dev/nvidia1"], []),
        ("GPU-abc", "gpu-uuid", "gpu-abc", ["/dev/nvidia0"], []),
        ("1:0", "mig-index", (1, 0), ["/dev/nvidia1"], ["/dev/nvidia-caps/nvidia-cap147", "/dev/nvidia-caps/nvidia-cap148"]),
        ("mig1:0", "mig-index", (1, 0), ["/dev/nvidia1"], []),
        ("MIG-def", "mig-uuid", "mig-def", ["/dev/nvidia1"], []),
        ("all", "all", None, ["/dev/nvidia0", "/dev/nvidia1"], []),
    ]
    # ours by vendor, by the old record, or by content; not a spec of other devices
    assert is_nvidia_spec({"kind": "nvidia.com/imex-channel", "devices": []})
    assert is_nvidia_spec({"kind": "example.com/gpu", "devices": [_dev("x", "/dev/nvidia3")]})
    assert is_nvidia_spec({"kind": "example.com/gpu", "annotations": {DRIVER_VERSION_ANNOTATION: "1"}, "devices": []})
    assert not is_nvidia_spec({"kind": "example.com/net", "devices": [_dev("x", "/dev/net/tun")]})


class _Nodes:
    """A node cache that has a given node."""

    def __init__(self, node):
        self.node, self.error = node, None

    def get(self):
        return self.node

    def with_nvml(self):
        return None


def test_check_spec_lists_every_reason(nodes):
    from nct.driver.discover import discover_node

    up = discover_node(nodes["upgraded"].roots(), use_nvml=False)
    up = up.replace(gpus=up.gpus[:1])
    lib = "/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15"
    raw = {"kind": "nvidia.com/gpu", "devices": [
        {"name": "0", "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia0"}],
                                         "mounts": [{"hostPath": f"/nonexistent/{i}", "containerPath": "/x"}
                                                    for i in range(5)]}},
        _dev("1", "/dev/nvidia1")],
        "containerEdits": {"mounts": [{"hostPath": lib, "containerPath": lib}]}}
    reasons = check_spec(raw, _Nodes(up))
    assert reasons[:2] == ["driver version changed (550.54.15 -> 555.42.02)", "GPU set changed (GPU 1 gone)"]
    assert reasons[2] == f"missing host paths: {lib}, /dev/nvidia0, /nonexistent/0 (and 5 more)"
    assert len(reasons) == 3


def test_all_device_alone(nodes):
    """A spec with only `all` (e.g. hand-trimmed): its GPU and MIG access nodes against the node's."""
    from nct.driver.discover import discover_node

    a = discover_node(nodes["a"].roots(), use_nvml=False)
    mig_nodes = [p for m in a.gpus[1].migs for p in (m.gi_access.path, m.ci_access.path)]
    raw = {"kind": "nvidia.com/gpu", "devices": [_dev("all", "/dev/nvidia0", "/dev/nvidia1", "/dev/nvidia2", *mig_nodes)]}
    from nct.cdi.check import gpu_set_changes

    assert gpu_set_changes(raw, a) == []
    fewer = a.replace(gpus=a.gpus[:2])
    assert gpu_set_changes(raw, fewer) == ["device all has /dev/nvidia2, no longer on the node"]
    raw["devices"][0]["containerEdits"]["deviceNodes"].pop(0)
    assert gpu_set_changes(raw, a) == ["device all lacks /dev/nvidia0"]
