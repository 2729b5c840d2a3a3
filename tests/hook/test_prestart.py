"""The prestart hook's front half, without a container: OCI state and bundle decoding, the
not-a-GPU-container fast path, the legacy-mode assertion, one-line errors, the image's
library dirs (looked up inside the rootfs), and how much discovery a request needs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from nct.config.model import Config, HookConfig, RuntimeConfig
from nct.errors import NctError, RequestError, SpecError
from nct.hook import core, prestart
from nct.request.model import ContainerRequest

HOOK = str(Path(sys.executable).parent / "nvidia-container-runtime-hook")


def write_bundle(tmp_path: Path, env: list[str] | None = None, *, spec: dict | None = None) -> Path:
    bundle = tmp_path / "bundle"
    (bundle / "rootfs").mkdir(parents=True, exist_ok=True)
    if spec is None:
        spec = {"ociVersion": "1.0.2", "process": {"env": env or [], "args": ["true"]}, "root": {"path": "rootfs"}}
    (bundle / "config.json").write_text(json.dumps(spec))
    return bundle


def run_hook(state: bytes | str, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    full = dict(os.environ)
    full.update({"NVIDIA_CTK_CONFIG_FILE_PATH": "", "XDG_CONFIG_HOME": "/nonexistent"})
    full.update(env or {})
    if isinstance(state, str):
        state = state.encode()
    return subprocess.run([HOOK, *args], input=state, capture_output=True, env=full)


def state(bundle: Path, key: str = "bundle", pid: int = 4242) -> str:
    return json.dumps({"ociVersion": "1.0.2", "id": "x", "status": "creating", "pid": pid, key: str(bundle)})


# --- the process: exit codes and one-line messages -------------------------------------------

def test_not_a_gpu_container_exits_0_without_a_driver(tmp_path):
    """void/unset: nothing is discovered (no driver here: NCT_PROC_ROOT is empty)."""
    empty = tmp_path / "proc"
    empty.mkdir()
    for env in ([], ["NVIDIA_VISIBLE_DEVICES=void"], ["NVIDIA_VISIBLE_DEVICES="]):
        bundle = write_bundle(tmp_path, env)
        res = run_hook(state(bundle), "prestart", env={"NCT_PROC_ROOT": str(empty)})
        assert res.returncode == 0, res.stderr
        assert res.stderr == b""
    assert os.listdir(bundle / "rootfs") == []


def test_gpu_container_without_driver_fails_in_one_line(tmp_path):
    empty = tmp_path / "proc"
    empty.mkdir()
    bundle = write_bundle(tmp_path, ["NVIDIA_VISIBLE_DEVICES=all"])
    res = run_hook(state(bundle), "prestart", env={"NCT_PROC_ROOT": str(empty)})
    assert res.returncode == 1
    err = res.stderr.decode()
    assert err.count("\n") == 1 and err.startswith("nvidia-container-runtime-hook: ")
    assert "NVIDIA driver not loaded" in err and str(empty) in err


def test_old_docker_runc_spec_is_read(tmp_path):
    """ociVersion 1.0.0-rc2-dev (old docker runc) with a flat capability list: the hook reads it
    (and goes on to look for the driver) instead of refusing the spec."""
    empty = tmp_path / "proc"
    empty.mkdir()
    cfg = tmp_path / "config.toml"
    cfg.write_text("accept-nvidia-visible-devices-envvar-when-unprivileged = false\n")
    spec = {"ociVersion": "1.0.0-rc2-dev", "root": {"path": "rootfs"},
            "process": {"env": ["NVIDIA_VISIBLE_DEVICES=all"], "args": ["true"],
                        "capabilities": ["CAP_CHOWN", "CAP_SYS_ADMIN"]}}
    bundle = write_bundle(tmp_path, spec=spec)
    res = run_hook(state(bundle), "-config", str(cfg), "prestart", env={"NCT_PROC_ROOT": str(empty)})
    err = res.stderr.decode()
    assert res.returncode == 1 and "NVIDIA driver not loaded" in err, err  # privileged: GPUs wanted
    spec["process"]["capabilities"] = ["CAP_CHOWN"]
    bundle = write_bundle(tmp_path, spec=spec)
    res = run_hook(state(bundle), "-config", str(cfg), "prestart", env={"NCT_PROC_ROOT": str(empty)})
    assert res.returncode == 0, res.stderr  # unprivileged, env not accepted: nothing to do


@pytest.mark.parametrize("stdin, message", [
    ("", "invalid OCI state on stdin"),
    ("{not json", "invalid OCI state on stdin"),
    ("[]", "expected a JSON object"),
    ('{"bundle": "/x"}', "pid must be a positive integer"),
    ('{"pid": 12}', "no bundle (or bundlePath)"),
    ('{"pid": 12, "bundle": "/nonexistent-bundle"}', "/nonexistent-bundle/config.json: No such file"),
])
def test_bad_state(stdin, message):
    res = run_hook(stdin, "prestart")
    assert res.returncode == 1
    err = res.stderr.decode()
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.parametrize("spec, message", [
    ("{bad", "config.json: invalid JSON"),
    ({"process": {}, "root": {"path": "r"}}, "config.json: missing ociVersion"),
    ({"ociVersion": "1.0.2", "root": {"path": "r"}}, "config.json: missing process"),
    ({"ociVersion": "1.0.2", "process": {}}, "config.json: missing root"),
    ({"ociVersion": "1.0.2", "process": {}, "root": {"path": 7}}, "config.json: root.path must be a string"),
    ({"ociVersion": "1.0.2", "process": {"env": "X=1"}, "root": {"path": "r"}}, "process.env must be a list"),
    # issue 9 §4: "internal error: RecursionError" before
    ('{"ociVersion": "1.0.2", "x": ' + "[" * 100000 + "]" * 100000 + "}",
     "config.json: invalid JSON: nested deeper than 64 levels"),
])
def test_bad_bundle_config(tmp_path, spec, message):
    bundle = tmp_path / "b"
    bundle.mkdir()
    (bundle / "config.json").write_text(spec if isinstance(spec, str) else json.dumps(spec))
    res = run_hook(state(bundle), "prestart")
    assert res.returncode == 1
    err = res.stderr.decode()
    assert message in err and err.count("\n") == 1


def test_bundle_path_fallback_and_relative_root(tmp_path):
    bundle = write_bundle(tmp_path)
    pid, b = prestart.read_state(state(bundle, key="bundlePath").encode())
    assert (pid, b) == (4242, str(bundle))
    spec, rootfs = prestart.load_spec(b)
    assert rootfs == str(bundle / "rootfs")


@pytest.mark.parametrize("root, expect", [
    ({"path": "rootfs"}, "rootfs"),      # relative: below the bundle
    ({"path": "./a/../rootfs"}, "rootfs"),
    ({"path": ""}, ""),                  # empty: the bundle itself (upstream: the hook's cwd)
    ({}, ""),                            # no path at all: the same
    ({"readonly": True}, ""),
])
def test_root_path_relative_to_bundle(tmp_path, root, expect):
    """issue 12 #8: upstream takes a relative or missing root.path relative to the bundle."""
    bundle = write_bundle(tmp_path, spec={"ociVersion": "1.0.2", "process": {}, "root": root})
    _, rootfs = prestart.load_spec(str(bundle))
    assert rootfs == os.path.normpath(str(bundle / expect))


def test_bad_config_file(tmp_path):
    cfg = tmp_path / "config.toml"
    cfg.write_text("[nvidia-container-runtime\n")
    bundle = write_bundle(tmp_path, ["NVIDIA_VISIBLE_DEVICES=all"])
    res = run_hook(state(bundle), "-config", str(cfg), "prestart")
    assert res.returncode == 1 and str(cfg) in res.stderr.decode()
    res = run_hook(state(bundle), "-config", str(tmp_path / "missing.toml"), "prestart")
    assert res.returncode == 1 and "missing.toml" in res.stderr.decode()


@pytest.mark.parametrize("value, ok", [
    ("compute,bogus", False), ("compute,all", False), ("Compute", False),
    ("all", True), (" compute , utility ,", True), ("", True),
])
def test_supported_driver_capabilities_checked(tmp_path, value, ok):
    """Upstream's hook refuses a supported-driver-capabilities entry that is not a capability
    name (`all` only as the whole value), for every container; nct says so in one line."""
    cfg = tmp_path / "config.toml"
    cfg.write_text(f'disable-require = false\nsupported-driver-capabilities = "{value}"\n')
    bundle = write_bundle(tmp_path, [])
    res = run_hook(state(bundle), "-config", str(cfg), "prestart")
    err = res.stderr.decode()
    if ok:
        assert res.returncode == 0, err
        return
    assert res.returncode == 1 and err.count("\n") == 1
    assert f"{cfg}: line 2: supported-driver-capabilities: unknown capability" in err


@pytest.mark.parametrize("args, rc", [(["poststart"], 0), (["poststop"], 0), ([], 2), (["bogus"], 2)])
def test_commands(args, rc):
    assert run_hook("", *args).returncode == rc


def test_version():
    res = run_hook("", "-version")
    assert res.returncode == 0 and b"NVIDIA Container Runtime Hook version" in res.stdout


# --- mode assertion ---------------------------------------------------------------------------

def _cfg(mode: str = "auto", skip: bool = False) -> Config:
    return Config(nvidia_container_runtime=RuntimeConfig(mode=mode),
                  nvidia_container_runtime_hook=HookConfig(skip_mode_detection=skip))


@pytest.mark.parametrize("mode, devices, ok", [
    ("auto", ("0",), True),
    ("auto", ("all",), True),
    ("auto", (), True),
    ("legacy", ("nvidia.com/gpu=0",), True),
    ("auto", ("nvidia.com/gpu=0",), False),
    ("auto", ("nvidia.com/gpu=0", "1"), True),
    ("cdi", ("0",), False),
    ("jit-cdi", ("0",), False),
    ("csv", ("0",), False),
])
def test_mode_assertion(mode, devices, ok):
    req = ContainerRequest(devices=devices)
    if ok:
        prestart.assert_legacy_mode(_cfg(mode), req)
    else:
        with pytest.raises(RequestError, match="invoking the NVIDIA Container Runtime Hook directly"):
            prestart.assert_legacy_mode(_cfg(mode), req)
    prestart.assert_legacy_mode(_cfg(mode, skip=True), req)  # skip-mode-detection: never


# --- the image's library dirs -----------------------------------------------------------------

def test_image_lib_dirs(tmp_path):
    root = tmp_path / "r"
    (root / "etc").mkdir(parents=True)
    assert core.image_lib_dirs(str(root), "x86_64") == ("/usr/lib64", "/usr/lib")
    (root / "usr/lib32").mkdir(parents=True)
    assert core.image_lib_dirs(str(root), "x86_64") == ("/usr/lib64", "/usr/lib32")
    (root / "etc/debian_version").write_text("12\n")
    assert core.image_lib_dirs(str(root), "x86_64") == ("/usr/lib/x86_64-linux-gnu", "/usr/lib/i386-linux-gnu")


def test_image_lib_dirs_never_follow_links_out_of_the_root(tmp_path):
    """/etc -> a host dir holding debian_version: inside the root, /etc/debian_version is
    absent, so the image is not Debian (the host's view would say it is)."""
    host = tmp_path / "hostetc"
    host.mkdir()
    (host / "debian_version").write_text("12\n")
    root = tmp_path / "r"
    root.mkdir()
    os.symlink(str(host), root / "etc")
    os.symlink("/../../../../" + str(tmp_path / "lib32host").lstrip("/"), root / "usr32")
    assert core.image_lib_dirs(str(root), "x86_64")[0] == "/usr/lib64"


def test_check_rootfs():
    assert core.check_rootfs("/a/b/") == "/a/b"
    for bad in ("", "rel/ative", "/", "//", "/a/.."):
        with pytest.raises(NctError):
            core.check_rootfs(bad)


# --- sizing discovery to the request ----------------------------------------------------------

@pytest.mark.parametrize("devices, reqs, nvml, cuda", [
    (("0",), (), False, False),
    (("MIG-1234",), (), True, False),
    (("mig-1234",), (), True, False),
    (("GPU-0000",), (), False, False),  # the GPU's UUID, which procfs knows
    (("GPU-1234",), (), True, False),  # a UUID procfs does not know
    (("0",), ("cuda>=12.0",), False, True),
    (("0",), ("CUDA>=12.0 brand=tesla",), True, True),
    (("0",), ("driver>=500,arch>=8.0",), True, False),
    (("0",), ("garbage",), False, False),
])
def test_needs(devices, reqs, nvml, cuda):
    from nct.driver.model import DeviceNode, Gpu, Node

    gpu = Gpu(index=0, minor=0, uuid="GPU-0000", model="m", bus_id="00000000:07:00.0", proc_dir="/p",
              device=DeviceNode(path="/dev/nvidia0", host_path="/dev/nvidia0", major=195, minor=0))
    node = Node(roots=core.Roots(), driver_version="550.54.15", cuda_version=None, gpus=(gpu,), control_devices=())
    req = ContainerRequest(devices=devices, requirements=reqs)
    assert core.needs_nvml(req, node) is nvml
    assert not core.needs_nvml(req, node.replace(nvml=True))  # asked already
    assert core.needs_cuda_version(req) is cuda


def test_spec_errors_are_spec_errors(tmp_path):
    with pytest.raises(SpecError):
        prestart.load_spec(str(tmp_path))
