"""CDI end to end on a simulated node (3 GPUs; GPU 2 with 2 MIG devices): a spec made by
`nvidia-ctk cdi generate` inside `nct sim run`, used by runc (injected with the CDI merge
rules), podman 4.3 (--device nvidia.com/gpu=..., from a default spec: cdiVersion 0.5.0), and containerd through our runtime shim
(jit-cdi). In each container: only the requested GPU's nodes, an allowed node opens with
ENXIO (no driver behind it) while a denied one gives EPERM, libcuda.so.1 loads through the
container's ld cache (update-ldcache hook), and nvidia-smi -L shows the right UUIDs."""

from __future__ import annotations

import os
import shutil
import stat
import uuid

import pytest

from e2e import rootfs as R
from e2e_cdi.engines import inside, why_not

SCRIPT = ("ls /dev /dev/nvidia-caps 2>/dev/null | tr '\\n' ' '; echo; for n in /dev/nvidia0 /dev/nvidia2 /tmp/nv1; do "
          "[ -e $n ] && cat $n; done 2>&1; cuda-probe; nvidia-smi -L; echo env=$NVIDIA_VISIBLE_DEVICES")


def runc_case(node, rootfs, tmp_path, device: str, *, shim_mode: str | None = None) -> str:
    """Inject `device` from the generated spec (or, with `shim_mode`, let our runtime shim
    do it from NVIDIA_VISIBLE_DEVICES) and run the container with runc."""
    bundle = rootfs.parent
    env = ["LD_PRELOAD=/nonexistent/evil.so"] + ([f"NVIDIA_VISIBLE_DEVICES={device}"] if shim_mode else [])
    # the host's /dev/nvidia1 bound at /tmp/nv1: reachable by path, refused by the device cgroup
    R.make_bundle(bundle, rootfs, ["sh", "-c", SCRIPT], env,
                  mounts=[{"source": "/dev/nvidia1", "destination": "/tmp/nv1", "type": "bind", "options": ["bind"]}])
    spec_dir = tmp_path / "cdi"
    spec_dir.mkdir()
    if shim_mode:
        r = inside(node, "shim", shim_mode, str(spec_dir), str(bundle))
    else:
        r = inside(node, "runc", str(spec_dir), str(bundle), device)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


@pytest.fixture
def rootfs(tmp_path, cdi_rootfs_template):
    dst = tmp_path / "bundle" / "rootfs"
    shutil.copytree(cdi_rootfs_template, dst, symlinks=True)
    return dst


def smi_lines(out: str) -> list[str]:
    return [line.strip() for line in out.splitlines() if line.strip().startswith(("GPU ", "MIG "))]


def test_runc_gpu_by_index(cdi_node, rootfs, tmp_path):
    out = runc_case(cdi_node, rootfs, tmp_path, "nvidia.com/gpu=0")
    devs = out.splitlines()[0].split()
    assert "nvidia0" in devs and "nvidiactl" in devs and "nvidia-uvm" in devs
    assert "nvidia1" not in devs and "nvidia2" not in devs
    assert "can't open '/dev/nvidia0': No such device or address" in out
    assert "can't open '/tmp/nv1': Operation not permitted" in out
    assert "cuDriverGetVersion=12040" in out
    g0 = cdi_node.gpus[0]
    assert smi_lines(out) == [f"GPU 0: {g0.model} (UUID: {g0.uuid})"]
    assert "env=void" in out


@pytest.mark.parametrize("mode,device", [("cdi", "nvidia.com/gpu=0"), ("cdi", "0"), ("jit-cdi", "0")])
def test_runc_through_the_shim(cdi_node, rootfs, tmp_path, mode, device):
    """cdi mode reads our generated spec from the configured spec dir; jit-cdi plans the
    same edits in memory: the container sees the same."""
    out = runc_case(cdi_node, rootfs, tmp_path, device, shim_mode=mode)
    devs = out.splitlines()[0].split()
    assert "nvidia0" in devs and "nvidia1" not in devs and "nvidia2" not in devs, out
    assert "can't open '/dev/nvidia0': No such device or address" in out
    assert "can't open '/tmp/nv1': Operation not permitted" in out
    assert "cuDriverGetVersion=12040" in out
    g0 = cdi_node.gpus[0]
    assert smi_lines(out) == [f"GPU 0: {g0.model} (UUID: {g0.uuid})"]


def test_runc_mig_by_uuid(cdi_node, rootfs, tmp_path):
    gpu = cdi_node.gpus[2]
    mig = gpu.migs[1]
    out = runc_case(cdi_node, rootfs, tmp_path, f"nvidia.com/gpu={mig.uuid}")
    devs = out.splitlines()[0].split()
    assert "nvidia2" in devs and "nvidia0" not in devs
    assert f"nvidia-cap{mig.gi_minor}" in devs and f"nvidia-cap{mig.ci_minor}" in devs
    assert f"nvidia-cap{gpu.migs[0].gi_minor}" not in devs
    lines = smi_lines(out)
    assert lines[0] == f"GPU 0: {gpu.model} (UUID: {gpu.uuid})"
    assert len(lines) == 2 and lines[1].endswith(f"(UUID: {mig.uuid})")
    assert "cuDriverGetVersion=12040" in out


def test_runc_all(cdi_node, rootfs, tmp_path):
    out = runc_case(cdi_node, rootfs, tmp_path, "nvidia.com/gpu=all")
    uuids = [line.rsplit("UUID: ", 1)[1].rstrip(")") for line in smi_lines(out)]
    g = cdi_node.gpus
    assert uuids == [g[0].uuid, g[1].uuid, g[2].uuid, g[2].migs[0].uuid, g[2].migs[1].uuid]
    # /tmp/nv1 is the host's /dev/nvidia1, which "all" allows: now ENXIO
    assert "can't open '/tmp/nv1': No such device or address" in out


@pytest.mark.skipif(why_not("podman") is not None, reason=why_not("podman") or "")
def test_podman_device_from_generated_spec(cdi_node, image_tars, tmp_path):
    spec = f"/var/run/cdi/nct-test-{uuid.uuid4().hex[:8]}.yaml"
    work = tmp_path / "podman"
    work.mkdir()
    try:
        r = inside(cdi_node, "podman", spec, str(work), str(image_tars[0]), "nvidia.com/gpu=1", "--",
                   "sh", "-c", SCRIPT)
    finally:
        if os.path.exists(spec):  # written inside the node's namespace: normally never here
            os.unlink(spec)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "with cdiVersion 0.5.0" in r.stderr  # a default spec, no --max-cdi-version
    # the DRM nodes were made world rw in the namespace's /dev only
    assert stat.S_IMODE(os.stat(os.path.join(cdi_node.root, "dev/dri/card1")).st_mode) == 0o660
    out = r.stdout
    devs = out.splitlines()[0].split()
    assert "nvidia1" in devs and "nvidia0" not in devs and "nvidia2" not in devs
    assert "cuDriverGetVersion=12040" in out
    g1 = cdi_node.gpus[1]
    assert smi_lines(out) == [f"GPU 0: {g1.model} (UUID: {g1.uuid})"]
    assert "env=void" in out


@pytest.mark.skipif(why_not("containerd", "ctr") is not None, reason=why_not("containerd", "ctr") or "")
def test_containerd_through_the_shim_jit_cdi(cdi_node, image_tars, tmp_path):
    work = tmp_path / "containerd"
    work.mkdir()
    config = tmp_path / "config.toml"
    config.write_text('[nvidia-container-runtime]\nmode = "jit-cdi"\nruntimes = ["runc"]\n')
    r = inside(cdi_node, "containerd", str(work), str(image_tars[1]), str(config), "--", "sh", "-c", SCRIPT)
    assert r.returncode == 0, r.stdout + r.stderr + _log(work)
    out = r.stdout
    devs = out.splitlines()[0].split()
    assert "nvidia0" in devs and "nvidia1" not in devs and "nvidia2" not in devs
    assert "can't open '/dev/nvidia0': No such device or address" in out
    assert "cuDriverGetVersion=12040" in out
    g0 = cdi_node.gpus[0]
    assert smi_lines(out) == [f"GPU 0: {g0.model} (UUID: {g0.uuid})"]


def _log(work) -> str:
    try:
        return (work / "containerd.log").read_text()[-3000:]
    except OSError:
        return ""


@pytest.mark.parametrize("cgroups_path,linked", [("system.slice:docker:nct-test", True), ("/docker/nct-test", False)])
def test_systemd_cgroup_driver_gets_dev_char_links(cdi_node, rootfs, cgroups_path, linked):
    """With runc's systemd cgroup driver (cgroupsPath "slice:prefix:name"), jit-cdi `create`
    links /dev/char/M:m to each NVIDIA node it injects (systemd resolves the container's
    DeviceAllow through them; without, `systemctl daemon-reload` takes the GPU away). The
    node's /dev is an overlay inside `nct sim run`: the host's /dev/char is untouched."""
    bundle = rootfs.parent
    R.make_bundle(bundle, rootfs, ["true"], ["NVIDIA_VISIBLE_DEVICES=0"])
    r = inside(cdi_node, "devchar", str(bundle), cgroups_path)
    assert r.returncode == 0, r.stdout + r.stderr
    links = dict(line.split()[1::2] for line in r.stdout.splitlines() if line.startswith("LINK "))
    if not linked:
        assert links == {}, links
        return
    g0 = cdi_node.gpus[0]
    assert links.get(f"195:{g0.minor}") == f"/dev/nvidia{g0.minor}", links
    assert links.get("195:255") == "/dev/nvidiactl", links
    assert any(t == "/dev/nvidia-uvm" for t in links.values()), links
    assert f"/dev/nvidia{cdi_node.gpus[1].minor}" not in links.values()  # only what was injected
