"""The installed shim end to end with a fake low-level runtime: pass-through identity,
--version, errors (one line, exit 1, runtime not started, config.json untouched),
logging, and `create` in each mode."""

import json
import os
import subprocess

import pytest

from schema_check import oci_schema_errors

from .conftest import entry_point, oci_spec


@pytest.mark.parametrize("args", [
    ["state", "ctr-1"],
    ["--root", "/run/runc", "--log", "/dev/null", "--log-format", "json", "kill", "ctr-1", "9"],
    ["delete", "--force", "ctr"],
    ["exec", "ctr", "sh", "-c", "echo 'a b' \"c\"", "", "ünïcode"],
    ["run", "--bundle", "create", "x"],
    [],
])
def test_pass_through_identical_argv_and_env(shim, fake_runtime, args):
    env = shim.env(SOME_VAR="with spaces = and ;", LD_PRELOAD="")
    r = shim.run(args, env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "fake runtime ran\n" and r.stderr == ""
    (call,) = fake_runtime.calls()
    assert call["argv"] == [str(fake_runtime.path), *args]
    assert call["env"] == env


def test_pass_through_never_reads_a_bundle(shim, fake_runtime, make_bundle):
    b = make_bundle(oci_spec(["NVIDIA_VISIBLE_DEVICES=all"]))
    (b / "config.json").write_text("not json")  # would fail a create
    r = shim.run(["start", "--bundle", str(b), "id"], cwd=str(b))
    assert r.returncode == 0, r.stderr
    assert (b / "config.json").read_text() == "not json"


def test_version(shim, fake_runtime):
    r = shim.run(["--version"])
    assert r.returncode == 0
    assert r.stdout.startswith("NVIDIA Container Runtime version 1.20.0 (nct ")
    assert r.stdout.split("\n")[1].startswith("spec: ")
    assert r.stdout.endswith("\n\nfake runtime ran\n")
    assert fake_runtime.calls()[0]["argv"][1:] == ["--version"]


def test_version_opens_no_log_files(shim, fake_runtime, tmp_path):
    shim.write_config(f'[nvidia-container-runtime]\ndebug = "{tmp_path}/d/debug.log"\n')
    r = shim.run(["--log", str(tmp_path / "engine.log"), "-version"])
    assert r.returncode == 0
    assert not (tmp_path / "d").exists() and not (tmp_path / "engine.log").exists()


def _assert_failed(r, fake_runtime, *needles):
    assert r.returncode == 1
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("nvidia-container-runtime: "), r.stderr
    for n in needles:
        assert n in lines[0], lines[0]
    assert "Traceback" not in r.stderr
    assert fake_runtime.calls() == []


@pytest.mark.parametrize("runtimes, needle", [
    (["/nonexistent/runc", "no-such-runtime-xyz"], "no low-level runtime found"),
    ([], "at least one runtime candidate"),
])
def test_missing_runtime(shim, fake_runtime, runtimes, needle):
    shim.write_config(runtimes=runtimes)
    _assert_failed(shim.run(["state", "x"]), fake_runtime, needle)


def test_bad_config_toml(shim, fake_runtime):
    shim.config.write_text("[nvidia-container-runtime\n")
    _assert_failed(shim.run(["state", "x"]), fake_runtime, "config.toml", "invalid TOML")


def test_bundle_flag_without_value(shim, fake_runtime):
    _assert_failed(shim.run(["create", "id", "--bundle"]), fake_runtime, "bundle option requires an argument")


@pytest.mark.parametrize("content, needle", [
    ("{not json", "invalid JSON"),
    (json.dumps({"ociVersion": "1.0.2", "bogus": 1}), "unknown field 'bogus'"),
    (None, "no such file"),
])
def test_bad_spec_fails_before_runtime(shim, fake_runtime, tmp_path, content, needle):
    b = tmp_path / "b"
    b.mkdir()
    if content is not None:
        (b / "config.json").write_text(content)
    _assert_failed(shim.run(["create", "--bundle", str(b), "id"]), fake_runtime, needle, "config.json")
    if content is not None:
        assert (b / "config.json").read_text() == content


def test_no_gpu_request_leaves_spec_untouched(shim, fake_runtime, make_bundle):
    b = make_bundle(oci_spec())
    before = (os.stat(b / "config.json").st_mtime_ns, (b / "config.json").read_bytes())
    r = shim.run(["create", "--bundle", str(b), "id"])
    assert r.returncode == 0, r.stderr
    assert (os.stat(b / "config.json").st_mtime_ns, (b / "config.json").read_bytes()) == before
    assert fake_runtime.calls()[0]["argv"][1:] == ["create", "--bundle", str(b), "id"]


def test_logging_to_debug_file_and_engine_log(shim, fake_runtime, make_bundle, tmp_path):
    shim.write_config(f'[nvidia-container-runtime]\ndebug = "{tmp_path}/logs/debug.log"\nmode = "legacy"\n')
    b = make_bundle(oci_spec(["NVIDIA_VISIBLE_DEVICES=all"]))
    engine = tmp_path / "runc-log.json"
    r = shim.run(["--log", str(engine), "--log-format", "json", "create", "--bundle", str(b), "id"])
    assert r.returncode == 0, r.stderr
    records = [json.loads(x) for x in engine.read_text().splitlines()]
    assert {"level", "msg", "time"} == set(records[0])
    assert any("legacy" in x["msg"] for x in records)
    assert all(x["level"] != "debug" for x in records)
    # one formatter for both outputs, as upstream: the debug file is JSON too here
    debug = [json.loads(x) for x in (tmp_path / "logs/debug.log").read_text().splitlines()]
    assert debug == records
    r = shim.run(["create", "--bundle", str(b), "id"])
    assert r.returncode == 0, r.stderr
    text = (tmp_path / "logs/debug.log").read_text().splitlines()[len(records):]
    assert any(line.startswith('time="') and 'level=info msg="Using legacy mode' in line for line in text)


def test_errors_are_logged_too(shim, fake_runtime, tmp_path):
    shim.write_config(runtimes=["/nonexistent"])
    log = tmp_path / "e.json"
    r = shim.run(["--log", str(log), "--log-format", "json", "state", "x"])
    assert r.returncode == 1
    (rec,) = [json.loads(x) for x in log.read_text().splitlines()]
    assert rec["level"] == "error" and "no low-level runtime" in rec["msg"]


def test_debug_flag_logs_pass_through(shim, fake_runtime, tmp_path):
    log = tmp_path / "e.log"
    assert shim.run(["--debug", "--log", str(log), "state", "x"]).returncode == 0
    assert f"Using low-level runtime {fake_runtime.path}" in log.read_text()


# --- create in each mode ------------------------------------------------------------------

def _spec(b):
    return json.loads((b / "config.json").read_text())


@pytest.mark.parametrize("name, config", [
    ("nvidia-container-runtime", '[nvidia-container-runtime]\nmode = "legacy"\n'),
    ("nvidia-container-runtime.legacy", '[nvidia-container-runtime]\nmode = "cdi"\n'),
])
def test_legacy_mode_adds_prestart_hook(shim, fake_runtime, make_bundle, tmp_path, name, config):
    hookdir = tmp_path / "hookbin"
    hookdir.mkdir()
    hook = hookdir / "nvidia-container-runtime-hook"
    hook.write_text("#!/bin/sh\n")
    hook.chmod(0o755)
    shim.write_config(config)
    b = make_bundle(oci_spec(["NVIDIA_VISIBLE_DEVICES=0"],
                             hooks={"prestart": [{"path": "/bin/true"}]}, futureish=None))
    spec = _spec(b)
    del spec["futureish"]
    (b / "config.json").write_text(json.dumps(spec))
    env = shim.env()
    env["PATH"] = f"{hookdir}:{env['PATH']}"
    r = shim.run(["create", "-b", str(b), "id"], name=name, env=env)
    assert r.returncode == 0, r.stderr
    out = _spec(b)
    assert out["hooks"]["prestart"] == [
        {"path": "/bin/true"}, {"path": str(hook), "args": ["nvidia-container-runtime-hook", "prestart"]}]
    assert oci_schema_errors(out) == []
    assert len(fake_runtime.calls()) == 1


def _write_cdi_spec(d, kind="vendor.example/net", devices=("a", "b")):
    d.mkdir(parents=True, exist_ok=True)
    spec = {"cdiVersion": "0.5.0", "kind": kind,
            "devices": [{"name": n, "containerEdits": {"env": [f"DEV_{n.upper()}=1"]}} for n in devices],
            "containerEdits": {"env": ["COMMON=1"],
                               "mounts": [{"hostPath": "/etc/hostname", "containerPath": "/etc/cdi-test",
                                           "options": ["ro", "bind"]}]}}
    (d / "test.json").write_text(json.dumps(spec))


def test_cdi_mode_injects_from_spec_dirs(shim, fake_runtime, make_bundle, tmp_path):
    _write_cdi_spec(tmp_path / "cdi")
    shim.write_config(f'[nvidia-container-runtime]\nmode = "cdi"\n'
                      f'[nvidia-container-runtime.modes.cdi]\nspec-dirs = ["{tmp_path}/cdi"]\n'
                      f'default-kind = "vendor.example/net"\n')
    b = make_bundle(oci_spec(["NVIDIA_VISIBLE_DEVICES=b"],
                             hooks={"prestart": [{"path": "/usr/bin/nvidia-container-runtime-hook"}]}))
    r = shim.run(["create", "--bundle", str(b), "id"])
    assert r.returncode == 0, r.stderr
    out = _spec(b)
    assert "DEV_B=1" in out["process"]["env"] and "COMMON=1" in out["process"]["env"]
    assert "DEV_A=1" not in out["process"]["env"]
    assert any(m["destination"] == "/etc/cdi-test" for m in out["mounts"])
    assert "prestart" not in out.get("hooks", {})  # the legacy hook was removed
    assert oci_schema_errors(out) == []


def test_auto_mode_annotations_select_cdi(shim, fake_runtime, make_bundle, tmp_path):
    _write_cdi_spec(tmp_path / "cdi")
    shim.write_config(f'[nvidia-container-runtime.modes.cdi]\nspec-dirs = ["{tmp_path}/cdi"]\n')
    b = make_bundle(oci_spec(annotations={"cdi.k8s.io/net": "vendor.example/net=a"}))
    r = shim.run(["create", "--bundle", str(b), "id"], name="nvidia-container-runtime")
    assert r.returncode == 0, r.stderr
    assert "DEV_A=1" in _spec(b)["process"]["env"]


def test_unresolvable_cdi_device(shim, fake_runtime, make_bundle, tmp_path):
    _write_cdi_spec(tmp_path / "cdi")
    shim.write_config(f'[nvidia-container-runtime.modes.cdi]\nspec-dirs = ["{tmp_path}/cdi"]\n')
    b = make_bundle(oci_spec(["NVIDIA_VISIBLE_DEVICES=vendor.example/net=zzz"]))
    before = (b / "config.json").read_bytes()
    _assert_failed(shim.run(["create", "--bundle", str(b), "id"], name="nvidia-container-runtime.cdi"),
                   fake_runtime, "vendor.example/net=zzz")
    assert (b / "config.json").read_bytes() == before


def _sim_env(shim, sim_node):
    return shim.env(NCT_PROC_ROOT=str(sim_node / "root" / "proc"))


def _sim_config(shim, sim_node, extra="", top=""):
    shim.write_config(f'{top}[nvidia-container-cli]\nroot = "{sim_node}/root"\n{extra}')


def test_jit_cdi_on_simulated_node(shim, fake_runtime, make_bundle, sim_node):
    _sim_config(shim, sim_node)
    b = make_bundle(oci_spec(["NVIDIA_VISIBLE_DEVICES=1,3"],
                             hooks={"prestart": [{"path": "/usr/bin/nvidia-container-toolkit"}]}))
    r = shim.run(["create", "--bundle", str(b), "id"], env=_sim_env(shim, sim_node))
    assert r.returncode == 0, r.stderr
    out = _spec(b)
    assert oci_schema_errors(out) == []
    nodes = sorted(d["path"] for d in out["linux"]["devices"])
    assert "/dev/nvidia1" in nodes and "/dev/nvidia3" in nodes and "/dev/nvidiactl" in nodes
    assert "/dev/nvidia0" not in nodes and "/dev/nvidia2" not in nodes
    env = out["process"]["env"]
    assert "NVIDIA_VISIBLE_DEVICES=void" in env and "NVIDIA_VISIBLE_DEVICES=1,3" not in env
    mounts = {m["destination"]: m["source"] for m in out["mounts"]}
    libcuda = [d for d in mounts if "/libcuda.so." in d and "x86_64" in d]
    assert libcuda and mounts[libcuda[0]].startswith(str(sim_node / "root"))
    hooks = out["hooks"]
    assert "prestart" not in hooks
    # one hook process for all in-container steps (nct.cdi.hooks.steps_hook)
    (steps,) = hooks["createContainer"]
    assert steps["args"][:3] == ["nvidia-ctk", "hook", "nct-steps"]
    assert "create-symlinks" in steps["args"] and "update-ldcache" in steps["args"]
    assert steps["path"].endswith("/nvidia-ctk") and steps["env"] == ["NVIDIA_CTK_DEBUG=false"]
    allow = [(d["major"], d["minor"]) for d in out["linux"]["resources"]["devices"] if d.get("allow")]
    assert (195, 1) in allow and (195, 0) not in allow


def test_jit_cdi_unknown_device(shim, fake_runtime, make_bundle, sim_node):
    _sim_config(shim, sim_node)
    b = make_bundle(oci_spec(["NVIDIA_VISIBLE_DEVICES=7"]))
    _assert_failed(shim.run(["create", "--bundle", str(b), "id"], env=_sim_env(shim, sim_node)),
                   fake_runtime, "unknown device", "7")


def test_jit_cdi_without_driver(shim, fake_runtime, make_bundle, tmp_path):
    empty = tmp_path / "nodriver"
    (empty / "proc").mkdir(parents=True)
    shim.write_config(f'[nvidia-container-cli]\nroot = "{empty}"\n')
    b = make_bundle(oci_spec(["NVIDIA_VISIBLE_DEVICES=all"]))
    before = (b / "config.json").read_bytes()
    r = shim.run(["create", "--bundle", str(b), "id"], env=shim.env(NCT_PROC_ROOT=str(empty / "proc")))
    _assert_failed(r, fake_runtime)
    assert (b / "config.json").read_bytes() == before


def test_cdi_mode_runtime_nvidia_com_names_are_jit(shim, fake_runtime, make_bundle, sim_node):
    _sim_config(shim, sim_node)
    b = make_bundle(oci_spec(["NVIDIA_VISIBLE_DEVICES=runtime.nvidia.com/gpu=2"]))
    r = shim.run(["create", "--bundle", str(b), "id"], name="nvidia-container-runtime.cdi",
                 env=_sim_env(shim, sim_node))
    assert r.returncode == 0, r.stderr
    nodes = {d["path"] for d in _spec(b)["linux"]["devices"]}
    assert "/dev/nvidia2" in nodes and "/dev/nvidia1" not in nodes


def test_legacy_graphics_modifier_on_simulated_node(shim, fake_runtime, make_bundle, sim_node):
    _sim_config(shim, sim_node, '[nvidia-container-runtime]\nmode = "legacy"\n')
    b = make_bundle(oci_spec(["NVIDIA_VISIBLE_DEVICES=1", "NVIDIA_DRIVER_CAPABILITIES=graphics,utility"]))
    r = shim.run(["create", "--bundle", str(b), "id"], env=_sim_env(shim, sim_node))
    assert r.returncode == 0, r.stderr
    out = _spec(b)
    assert oci_schema_errors(out) == []
    gpu1 = json.loads((sim_node / "node.json").read_text())["gpus"][1]
    nodes = {d["path"] for d in out["linux"]["devices"]}
    assert all(p.startswith("/dev/dri/") for p in nodes) and nodes, nodes
    assert f"/dev/dri/card{gpu1['card_minor']}" in nodes and len(nodes) == 2
    links = out["hooks"]["createContainer"][0]["args"]
    assert links[:3] == ["nvidia-ctk", "hook", "create-symlinks"]
    assert any("/dev/dri/by-path/pci-" in a for a in links)
    dests = {m["destination"] for m in out["mounts"]}
    assert "/etc/vulkan/icd.d/nvidia_icd.json" in dests
    assert not any(".so" in d for d in dests)  # the legacy hook brings the libraries
    assert out["hooks"]["prestart"][0]["args"] == ["nvidia-container-runtime-hook", "prestart"]


def test_legacy_without_graphics_caps_touches_no_devices(shim, fake_runtime, make_bundle, sim_node):
    _sim_config(shim, sim_node, '[nvidia-container-runtime]\nmode = "legacy"\n')
    b = make_bundle(oci_spec(["NVIDIA_VISIBLE_DEVICES=1"]))
    r = shim.run(["create", "--bundle", str(b), "id"], env=_sim_env(shim, sim_node))
    assert r.returncode == 0, r.stderr
    out = _spec(b)
    assert "devices" not in out["linux"] and set(out["hooks"]) == {"prestart"}


def test_exec_failure_is_one_line(shim, fake_runtime, tmp_path):
    broken = tmp_path / "broken-runc"
    broken.write_text("#!/nonexistent/interpreter\n")
    broken.chmod(0o755)
    shim.write_config(runtimes=[str(broken)])
    _assert_failed(shim.run(["state", "x"]), fake_runtime, "failed to run low-level runtime", str(broken))


def test_jit_cdi_mig_device(shim, fake_runtime, make_bundle, tmp_path):
    node = tmp_path / "mig-node"
    r = subprocess.run([entry_point("nct"), "sim", "create", str(node), "--gpus", "2", "--mig", "1:2"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    _sim_config(shim, node)
    b = make_bundle(oci_spec(["NVIDIA_VISIBLE_DEVICES=1:1"]))
    r = shim.run(["create", "--bundle", str(b), "id"], env=_sim_env(shim, node))
    assert r.returncode == 0, r.stderr
    out = _spec(b)
    assert oci_schema_errors(out) == []
    nodes = {d["path"] for d in out["linux"]["devices"]}
    assert "/dev/nvidia1" in nodes and "/dev/nvidia0" not in nodes
    caps = sorted(p for p in nodes if p.startswith("/dev/nvidia-caps/nvidia-cap"))
    assert len(caps) == 2, nodes  # GI and CI access of the one MIG device


def _gpu_nodes(spec):
    return sorted(d["path"] for d in spec.get("linux", {}).get("devices", [])
                  if d["path"][len("/dev/nvidia"):].isdigit())


@pytest.mark.parametrize("config, spec_kw, expected", [
    # none: the driver, no GPU
    ("", {"env": ["NVIDIA_VISIBLE_DEVICES=none"]}, []),
    # /dev/null volume mounts, when accepted, win over the env var
    ("accept-nvidia-visible-devices-as-volume-mounts = true\n",
     {"env": ["NVIDIA_VISIBLE_DEVICES=0"], "mounts": [
         {"destination": "/var/run/nvidia-container-devices/2", "source": "/dev/null", "type": "bind"}]},
     ["/dev/nvidia2"]),
    # swarm resource variables take precedence over NVIDIA_VISIBLE_DEVICES
    ('swarm-resource = "DOCKER_RESOURCE_GPU"\n',
     {"env": ["NVIDIA_VISIBLE_DEVICES=0", "DOCKER_RESOURCE_GPU=3"]}, ["/dev/nvidia3"]),
    # unprivileged env requests refused by config: untouched
    ("accept-nvidia-visible-devices-envvar-when-unprivileged = false\n",
     {"env": ["NVIDIA_VISIBLE_DEVICES=all"]}, None),
    # ... but a privileged container (CAP_SYS_ADMIN) still gets them
    ("accept-nvidia-visible-devices-envvar-when-unprivileged = false\n",
     {"env": ["NVIDIA_VISIBLE_DEVICES=1"], "caps": ["CAP_SYS_ADMIN"]}, ["/dev/nvidia1"]),
])
def test_device_request_sources(shim, fake_runtime, make_bundle, sim_node, config, spec_kw, expected):
    _sim_config(shim, sim_node, top=config)
    spec = oci_spec(spec_kw["env"])
    if "mounts" in spec_kw:
        spec["mounts"] += spec_kw["mounts"]
    if "caps" in spec_kw:
        spec["process"]["capabilities"]["bounding"] = spec_kw["caps"]
    b = make_bundle(spec)
    before = (b / "config.json").read_bytes()
    r = shim.run(["create", "--bundle", str(b), "id"], env=_sim_env(shim, sim_node))
    assert r.returncode == 0, r.stderr
    if expected is None:
        assert (b / "config.json").read_bytes() == before
        return
    out = _spec(b)
    assert _gpu_nodes(out) == expected
    assert "/dev/nvidiactl" in {d["path"] for d in out["linux"]["devices"]}
    assert oci_schema_errors(out) == []


def test_jit_cdi_imex_channel(shim, fake_runtime, make_bundle, tmp_path):
    node = tmp_path / "imex-node"
    r = subprocess.run([entry_point("nct"), "sim", "create", str(node), "--gpus", "1", "--imex-channels", "3"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    _sim_config(shim, node)
    b = make_bundle(oci_spec(["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_IMEX_CHANNELS=2"]))
    r = shim.run(["create", "--bundle", str(b), "id"], env=_sim_env(shim, node))
    assert r.returncode == 0, r.stderr
    nodes = {d["path"] for d in _spec(b)["linux"]["devices"]}
    assert "/dev/nvidia-caps-imex-channels/channel2" in nodes
    assert "/dev/nvidia-caps-imex-channels/channel0" not in nodes


# --- issue 9 §3/§4: hostile sizes and depths -------------------------------------------------------

@pytest.mark.parametrize("ext", ["yaml", "json"])
def test_a_deeply_nested_spec_does_not_break_other_vendors(shim, fake_runtime, make_bundle, tmp_path, ext):
    """100k levels in one spec file (YAML crashed the shim, JSON raised RecursionError for
    every CDI container): the good vendor's device is injected, the bad file is one warning."""
    _write_cdi_spec(tmp_path / "cdi")
    n = 100000
    body = "[" * n + "]" * n
    (tmp_path / "cdi" / f"0-deep.{ext}").write_text(
        f'{{"cdiVersion": "0.5.0", "kind": "deep.example/x", "devices": {body}}}' if ext == "json"
        else f"cdiVersion: 0.5.0\nkind: deep.example/x\ndevices: {body}\n")
    shim.write_config(f'[nvidia-container-runtime]\nmode = "cdi"\n'
                      f'[nvidia-container-runtime.modes.cdi]\nspec-dirs = ["{tmp_path}/cdi"]\n')
    b = make_bundle(oci_spec(["NVIDIA_VISIBLE_DEVICES=vendor.example/net=a"]))
    r = shim.run(["create", "--bundle", str(b), "id"])
    assert r.returncode == 0, r.stderr
    assert "DEV_A=1" in _spec(b)["process"]["env"]
    assert "Traceback" not in r.stderr and r.stderr.count("nested deeper than 64 levels") <= 1


def test_nested_config_json_is_one_line(shim, fake_runtime, tmp_path):
    b = tmp_path / "b"
    b.mkdir()
    (b / "config.json").write_text('{"ociVersion": "1.0.2", "x": ' + "[" * 100000 + "]" * 100000 + "}")
    _assert_failed(shim.run(["create", "--bundle", str(b), "id"]), fake_runtime, "config.json",
                   "nested deeper than 64 levels")


def test_visible_devices_past_the_list_limit_is_one_line(shim, fake_runtime, make_bundle):
    """100k entries took 48 s per create (a pairwise dedupe); now one line, at once."""
    b = make_bundle(oci_spec(["NVIDIA_VISIBLE_DEVICES=" + ",".join(["0"] * 4097)]))
    _assert_failed(shim.run(["create", "--bundle", str(b), "id"]), fake_runtime,
                   "NVIDIA_VISIBLE_DEVICES: 4097 entries, more than the limit of 4096")
