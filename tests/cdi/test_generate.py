"""`nvidia-ctk cdi generate` on simulated nodes: device entries and names, filters, hooks,
modes, output files; every spec checked against the official CDI schema and the strict
loader."""

from __future__ import annotations

import json
import os
import stat
import subprocess

import pytest
import yaml

from e2e_cdi.simnodes import VENV_BIN, ctk, make_node, node_env, set_node_env, world_rw_dri
from nct.cdi.generate import GenerateOptions, generate_spec
from nct.cdi.spec import load_spec, spec_from_data
from schema_check import check_schema, schema_errors
from nct.config.model import CliConfig, Config
from nct.errors import NctError, RequestError

HOOK = str(VENV_BIN / "nvidia-cdi-hook")


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    """2 GPUs; GPU 1 has MIG enabled with 2 devices; 2 IMEX channels."""
    return make_node(tmp_path_factory.mktemp("gen") / "node", gpus=2, mig="1:2", imex_channels=2)


@pytest.fixture
def gen(node, monkeypatch):
    set_node_env(monkeypatch, node)

    def run(**kw) -> dict:
        kw.setdefault("driver_root", node.root)
        kw.setdefault("hook_path", HOOK)
        spec = generate_spec(GenerateOptions(**kw), cfg=Config())
        assert schema_errors(spec) == [], schema_errors(spec)[:3]
        return spec
    return run


def names(spec: dict) -> list[str]:
    return [d["name"] for d in spec["devices"]]


def device(spec: dict, name: str) -> dict:
    return next(d for d in spec["devices"] if d["name"] == name)["containerEdits"]


def hook_names(edits: dict) -> list[str]:
    return [h["args"][1] for h in edits.get("hooks", [])]


def node_paths(edits: dict) -> list[str]:
    return [n["path"] for n in edits.get("deviceNodes", [])]


# --- device entries -----------------------------------------------------------------------

def test_default_entries_index_and_uuid_plus_all(gen, node):
    spec = gen()
    g0, g1 = node.gpus
    m0, m1 = g1.migs
    # GPU 1 has MIG enabled: no full-GPU entry for it, one per MIG device instead
    assert names(spec) == ["0", g0.uuid, "1:0", m0.uuid, "1:1", m1.uuid, "all"]
    assert spec["kind"] == "nvidia.com/gpu"
    assert spec["cdiVersion"] == "0.7.0"  # additionalGids for the video-group DRM nodes
    assert device(spec, "0") == device(spec, g0.uuid)
    assert node_paths(device(spec, "0"))[:3] == ["/dev/nvidia0", f"/dev/dri/card{g0.card_minor}",
                                                 f"/dev/dri/renderD{g0.render_minor}"]
    mig = node_paths(device(spec, "1:1"))
    assert mig == ["/dev/nvidia1", f"/dev/nvidia-caps/nvidia-cap{m1.gi_minor}",
                   f"/dev/nvidia-caps/nvidia-cap{m1.ci_minor}"]
    # host paths under the driver root, container paths with it stripped
    n0 = device(spec, "0")["deviceNodes"][0]
    assert n0["hostPath"] == os.path.join(node.root, "dev/nvidia0") and n0["permissions"] == "rwm"
    assert set(node_paths(device(spec, "all"))) >= {"/dev/nvidia0", "/dev/nvidia1", *mig[1:]}
    # the by-path links of the GPU's DRM nodes
    links = [a for h in device(spec, "0")["hooks"] for a in h["args"] if "by-path" in a]
    assert links and all(a.startswith("../") for a in links)


def test_common_edits_and_hooks(gen, node):
    spec = gen()
    common = spec["containerEdits"]
    assert common["env"][0] == "NVIDIA_VISIBLE_DEVICES=void"
    assert node_paths(common) == ["/dev/nvidia-modeset", "/dev/nvidia-uvm-tools", "/dev/nvidia-uvm", "/dev/nvidiactl"]
    mounts = {m["containerPath"]: m for m in common["mounts"]}
    lib = f"/usr/lib/x86_64-linux-gnu/libcuda.so.{node.driver_version}"
    assert mounts[lib]["hostPath"] == os.path.join(node.root, lib.lstrip("/"))
    assert mounts[lib]["options"] == ["ro", "nosuid", "nodev", "rbind", "rprivate"]
    assert "/usr/bin/nvidia-smi" in mounts
    assert "noexec" in mounts["/run/nvidia-persistenced/socket"]["options"]
    assert hook_names(common) == ["create-symlinks", "enable-cuda-compat", "update-ldcache",
                                  "disable-device-node-modification", "update-application-profile"]
    for h in common["hooks"]:
        assert h["hookName"] == "createContainer" and h["path"] == HOOK
        assert h["env"] == ["NVIDIA_CTK_DEBUG=false"]
    assert f"--host-driver-version={node.driver_version}" in common["hooks"][1]["args"]
    assert common["hooks"][2]["args"][2:] == ["--folder", "/usr/lib/x86_64-linux-gnu"]
    assert "libcuda.so.1::/usr/lib/x86_64-linux-gnu/libcuda.so" in common["hooks"][0]["args"]


def test_no_i386_libraries_unless_compat32(gen, node):
    """issue 12 #11: upstream's specs carry no 32-bit driver library; --compat32 (nct) adds them."""
    def i386(spec):
        edits = spec["containerEdits"]
        mounts = [m["containerPath"] for m in edits["mounts"] if "i386" in m["containerPath"]]
        links = [a for h in edits["hooks"] for a in h["args"] if "i386" in a]
        return mounts, links
    assert i386(gen()) == ([], [])
    assert i386(gen(mode="management")) == ([], [])
    mounts, links = i386(gen(compat32=True))
    assert f"/usr/lib/i386-linux-gnu/libcuda.so.{node.driver_version}" in mounts
    assert "/usr/lib/i386-linux-gnu" in links  # update-ldcache --folder
    assert i386(gen(mode="management", compat32=True))[0] == mounts
    out = ctk(node, "cdi", "generate", "--compat32", "--nvidia-cdi-hook-path", HOOK)
    assert out.returncode == 0, out.stderr
    assert "/usr/lib/i386-linux-gnu/libcuda.so" in out.stdout
    out = ctk(node, "cdi", "generate", "--nvidia-cdi-hook-path", HOOK)
    assert out.returncode == 0 and "i386" not in out.stdout


def test_no_annotations_minimum_version_as_upstream(gen, tmp_path, monkeypatch):
    """Nothing of nct's own in the spec: its cdiVersion is upstream's minimum for the
    content. Video-group DRM nodes need additionalGids (0.7.0, as upstream); on a node whose
    device nodes are all world rw that is 0.5.0, which podman 4.3 reads."""
    spec = gen()
    assert "annotations" not in spec and spec["cdiVersion"] == "0.7.0"
    n = make_node(tmp_path / "rw", gpus=2, mig="1:2")
    world_rw_dri(os.path.join(n.root, "dev"))
    set_node_env(monkeypatch, n)
    spec = generate_spec(GenerateOptions(driver_root=n.root, hook_path=HOOK), cfg=Config())
    assert spec["cdiVersion"] == "0.5.0" and "annotations" not in spec
    assert not any("additionalGids" in d["containerEdits"] for d in spec["devices"])
    assert schema_errors(spec) == []
    assert spec_from_data(json.dumps(spec), "x.json").version == "0.5.0"  # strict loader agrees


@pytest.mark.parametrize("strategies,expected", [
    (("type-index",), ["gpu0", "mig1:0", "mig1:1", "all"]),
    (("index",), ["0", "1:0", "1:1", "all"]),
    (("uuid", "index"), None),
])
def test_name_strategies(gen, node, strategies, expected):
    spec = gen(device_name_strategies=strategies)
    if expected is None:
        g0, g1 = node.gpus
        expected = [g0.uuid, "0", g1.migs[0].uuid, "1:0", g1.migs[1].uuid, "1:1", "all"]
    assert names(spec) == expected


def test_device_id_filter(gen, node):
    g0, g1 = node.gpus
    assert names(gen(device_ids=("0",))) == ["0", g0.uuid, "all"]
    assert names(gen(device_ids=(g0.uuid.lower(),), device_name_strategies=("index",))) == ["0", "all"]
    assert names(gen(device_ids=(g1.migs[1].uuid,), device_name_strategies=("index",))) == ["1:1", "all"]
    assert names(gen(device_ids=("1:0", "0"), device_name_strategies=("type-index",))) == ["gpu0", "mig1:0", "all"]
    # an explicit index of a MIG-enabled GPU gets its full-GPU entry
    assert names(gen(device_ids=("1",), device_name_strategies=("index",))) == ["1", "all"]
    spec = gen(device_ids=("none",))
    assert names(spec) == ["none"]
    assert device(spec, "none") == {"env": ["NVCT_EMPTY_DEVICE="]}


@pytest.mark.parametrize("bad", ["7", "GPU-nope", "2:0", "0000:07:00.0", "MIG-x"])
def test_unknown_device_id(gen, bad):
    with pytest.raises(RequestError, match=f"unknown device: {bad}"):
        gen(device_ids=(bad,))


def test_no_all_device_vendor_class(gen):
    spec = gen(no_all_device=True, vendor="example.com", cls="accel", device_name_strategies=("index",))
    assert spec["kind"] == "example.com/accel"
    assert "all" not in names(spec)


# --- hooks -----------------------------------------------------------------------------------

def test_disable_enable_hooks(gen):
    common = gen(disable_hooks=("update-ldcache", "enable-cuda-compat"))["containerEdits"]
    assert hook_names(common) == ["create-symlinks", "disable-device-node-modification", "update-application-profile"]
    spec = gen(disable_hooks=("all",))
    assert "hooks" not in spec["containerEdits"]
    assert all("hooks" not in d["containerEdits"] for d in spec["devices"])
    spec = gen(disable_hooks=("all",), enable_hooks=("update-ldcache",))
    assert hook_names(spec["containerEdits"]) == ["update-ldcache"]
    # chmod is off by default; enabled, it goes with each GPU that has DRM nodes
    assert "chmod" not in hook_names(device(gen(), "0"))
    spec = gen(enable_hooks=("chmod",))
    chmod = next(h for h in device(spec, "0")["hooks"] if h["args"][1] == "chmod")
    assert chmod["args"][2:] == ["--mode", "755", "--path", "/dev/dri"]
    assert "chmod" not in hook_names(device(spec, "1:0"))  # MIG profile without gfx


def test_ldconfig_and_nvidia_ctk_hook_path(gen):
    common = gen(ldconfig_path="/sbin/ldconfig.real")["containerEdits"]
    ld = next(h for h in common["hooks"] if h["args"][1] == "update-ldcache")
    assert ld["args"][2:4] == ["--ldconfig-path", "/sbin/ldconfig.real"]
    common = gen(hook_path="/opt/bin/nvidia-ctk")["containerEdits"]
    assert all(h["path"] == "/opt/bin/nvidia-ctk" and h["args"][:2] == ["nvidia-ctk", "hook"] for h in common["hooks"])


def test_hook_path_default_is_path_lookup(node, monkeypatch, tmp_path):
    set_node_env(monkeypatch, node)
    monkeypatch.setenv("PATH", "/nonexistent")
    spec = generate_spec(GenerateOptions(driver_root=node.root), cfg=Config())
    assert {h["path"] for h in spec["containerEdits"]["hooks"]} == {"/usr/bin/nvidia-cdi-hook"}
    monkeypatch.setenv("PATH", str(VENV_BIN))
    spec = generate_spec(GenerateOptions(driver_root=node.root), cfg=Config())
    assert {h["path"] for h in spec["containerEdits"]["hooks"]} == {HOOK}


# --- versions, features, roots -------------------------------------------------------------------

def test_max_cdi_version_for_old_consumers(gen):
    spec = gen(max_cdi_version="0.5.0")
    assert spec["cdiVersion"] == "0.5.0"
    assert "annotations" not in spec
    assert all("additionalGids" not in d["containerEdits"] for d in spec["devices"])
    with pytest.raises(NctError, match="invalid --max-cdi-version"):
        gen(max_cdi_version="0.9.9")
    with pytest.raises(NctError, match="needs cdiVersion 0.5.0, above --max-cdi-version 0.4.0"):
        gen(max_cdi_version="0.4.0")


def test_feature_flags(gen):
    spec = gen(feature_flags=("no-additional-gids-for-device-nodes", "disable-ipc-discoverer"))
    assert spec["cdiVersion"] == "0.5.0"
    assert not any("additionalGids" in d["containerEdits"] for d in spec["devices"])
    assert not any(m["containerPath"].endswith("/socket") for m in spec["containerEdits"]["mounts"])


def test_driver_root_from_config_and_separate_dev_root(node, monkeypatch, tmp_path):
    set_node_env(monkeypatch, node)
    cfg = Config(nvidia_container_cli=CliConfig(root=node.root))
    spec = generate_spec(GenerateOptions(hook_path=HOOK), cfg=cfg)
    assert device(spec, "0")["deviceNodes"][0]["hostPath"] == os.path.join(node.root, "dev/nvidia0")
    # a dev root of its own: device nodes from there, driver files still from the driver root
    dev = tmp_path / "devroot"
    (dev / "dev").mkdir(parents=True)
    for name in ("nvidia0", "nvidia1", "nvidiactl"):
        st = os.stat(os.path.join(node.root, "dev", name))
        os.mknod(dev / "dev" / name, st.st_mode, st.st_rdev)
    spec = generate_spec(GenerateOptions(hook_path=HOOK, dev_root=str(dev), device_ids=("0",)), cfg=cfg)
    assert device(spec, "0")["deviceNodes"][0]["hostPath"] == str(dev / "dev/nvidia0")
    assert node_paths(spec["containerEdits"]) == ["/dev/nvidiactl"]
    assert spec["containerEdits"]["mounts"][0]["hostPath"].startswith(node.root + "/")


def test_library_search_path(tmp_path, monkeypatch):
    """A libcuda the ld cache does not know is found through --library-search-path."""
    n = make_node(tmp_path / "node", gpus=1)
    set_node_env(monkeypatch, n)
    lib = f"libcuda.so.{n.driver_version}"
    src = os.path.join(n.root, "usr/lib/x86_64-linux-gnu", lib)
    os.makedirs(os.path.join(n.root, "opt/nvidia/lib"))
    os.rename(src, os.path.join(n.root, "opt/nvidia/lib", lib))

    def mounts(**kw):
        spec = generate_spec(GenerateOptions(driver_root=n.root, hook_path=HOOK, **kw), cfg=Config())
        return [m["containerPath"] for m in spec["containerEdits"]["mounts"]]
    assert not any(m.endswith("/" + lib) and "i386" not in m for m in mounts())
    found = mounts(library_search_paths=("/opt/nvidia/lib",))
    assert f"/opt/nvidia/lib/{lib}" in found


# --- other modes ------------------------------------------------------------------------------------

def test_management_mode(gen, node):
    spec = gen(mode="management")
    assert spec["kind"] == "management.nvidia.com/gpu"
    assert names(spec) == ["all"]
    paths = set(node_paths(device(spec, "all"))) | set(node_paths(spec["containerEdits"]))
    m = node.gpus[1].migs[0]
    assert {"/dev/nvidia0", "/dev/nvidia1", "/dev/nvidiactl", f"/dev/nvidia-caps/nvidia-cap{m.gi_minor}",
            "/dev/nvidia-caps-imex-channels/channel0", "/dev/nvidia-caps-imex-channels/channel1"} <= paths
    assert not any(p.startswith("/dev/dri") for p in paths)
    assert "disable-device-node-modification" not in hook_names(spec["containerEdits"])
    assert "update-ldcache" in hook_names(spec["containerEdits"])


def test_imex_mode(gen):
    spec = gen(mode="imex")
    assert spec["kind"] == "nvidia.com/imex-channel"
    assert names(spec) == ["0", "1", "all"]
    assert node_paths(device(spec, "1")) == ["/dev/nvidia-caps-imex-channels/channel1"]
    assert names(gen(mode="imex", device_ids=("channel1",), no_all_device=True)) == ["1"]
    with pytest.raises(RequestError, match="unknown IMEX channel: 5"):
        gen(mode="imex", device_ids=("5",))
    with pytest.raises(RequestError, match="invalid IMEX channel"):
        gen(mode="imex", device_ids=(str(2**20),))


def _mknod(root, path, major, minor, mode=0o666):
    p = root / path.lstrip("/")
    p.parent.mkdir(parents=True, exist_ok=True)
    os.mknod(p, stat.S_IFCHR | mode, os.makedev(major, minor))
    os.chmod(p, mode)


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod needs root")
@pytest.mark.parametrize("mode,nodes,mounts", [
    ("gds", ["/dev/nvidia-fs0", "/dev/nvidia-fs1"], ["/etc/cufile.json"]),
    ("mofed", ["/dev/infiniband/uverbs0", "/dev/infiniband/rdma_cm"], []),
    ("gdrcopy", ["/dev/gdrdrv"], []),
    ("nvswitch", ["/dev/nvidia-nvswitchctl", "/dev/nvidia-nvswitch0", "/dev/nvidia-nvswitch1"], []),
])
def test_device_class_modes(tmp_path, monkeypatch, mode, nodes, mounts):
    monkeypatch.setenv("NVIDIA_CTK_CONFIG_FILE_PATH", str(tmp_path / "none.toml"))
    root = tmp_path / "root"
    with pytest.raises(NctError, match=f"{mode} mode: no devices found under {root}/dev"):
        generate_spec(GenerateOptions(mode=mode, driver_root=str(root)), cfg=Config())
    for i, n in enumerate(nodes):
        _mknod(root, n, 240, i)
    (root / "etc").mkdir(exist_ok=True)
    (root / "etc/cufile.json").write_text("{}\n")
    spec = generate_spec(GenerateOptions(mode=mode, driver_root=str(root)), cfg=Config())
    assert schema_errors(spec) == []
    assert spec["kind"] == f"nvidia.com/{mode}" and names(spec) == ["all"]
    assert sorted(node_paths(device(spec, "all"))) == sorted(nodes)
    assert [m["containerPath"] for m in device(spec, "all").get("mounts", [])] == mounts
    assert "annotations" not in spec and "containerEdits" not in spec


@pytest.mark.parametrize("mode", ["csv", "wsl"])
def test_unsupported_modes(gen, mode):
    with pytest.raises(NctError, match=f"discovery mode '{mode}' is not supported"):
        gen(mode=mode)


# --- the command line ----------------------------------------------------------------------------

def test_cli_writes_files_atomically_with_format(node, tmp_path):
    out = tmp_path / "specs" / "nvidia.json"
    r = ctk(node, "cdi", "generate", "--output", str(out), "--nvidia-cdi-hook-path", HOOK)
    assert r.returncode == 0, r.stderr
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o644
    assert json.loads(out.read_text())["kind"] == "nvidia.com/gpu"
    assert load_spec(str(out), check=check_schema).raw["devices"]
    # no extension: the format's is appended (yaml by default, json on request)
    r = ctk(node, "cdi", "generate", "--output", str(tmp_path / "plain"), "--format", "json")
    assert r.returncode == 0, r.stderr
    assert json.loads((tmp_path / "plain.json").read_text())["devices"]
    r = ctk(node, "cdi", "generate", "--output", str(tmp_path / "y"))
    assert r.returncode == 0 and (tmp_path / "y.yaml").read_text().startswith("---\n")
    # env var for the output path (the refresh unit's way)
    env = node_env(node)
    env["NVIDIA_CTK_CDI_OUTPUT_FILE_PATH"] = str(tmp_path / "env.yaml")
    assert ctk(node, "cdi", "generate", env=env).returncode == 0
    assert yaml.safe_load((tmp_path / "env.yaml").read_text())["kind"] == "nvidia.com/gpu"
    # a failing run leaves the existing file alone and prints one line
    before = out.read_bytes()
    r = ctk(node, "cdi", "generate", "--output", str(out), "--device-id", "9")
    assert r.returncode != 0
    assert r.stderr == "nvidia-ctk: unknown device: 9\n"
    assert out.read_bytes() == before
    assert [p.name for p in out.parent.iterdir()] == ["nvidia.json"]  # no temp files left


def test_cli_stdout_yaml_and_json(node):
    r = ctk(node, "cdi", "generate", "--device-name-strategy", "index", "--device-name-strategy", "type-index")
    assert r.returncode == 0, r.stderr
    doc = yaml.safe_load(r.stdout)
    assert [d["name"] for d in doc["devices"]] == ["0", "gpu0", "1:0", "mig1:0", "1:1", "mig1:1", "all"]
    r = ctk(node, "cdi", "generate", "--format", "json", "--no-all-device", "--device-id", "0")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert schema_errors(doc) == []
    assert "all" not in [d["name"] for d in doc["devices"]]


def test_cli_nct_alias_and_env_driver_root(node):
    env = node_env(node)
    env["NVIDIA_CTK_DRIVER_ROOT"] = node.root
    r = ctk(node, "cdi", "generate", "--format", "json", prog="nct", root=False, env=env)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["devices"][0]["containerEdits"]["deviceNodes"][0]["hostPath"].startswith(node.root)


@pytest.mark.parametrize("args,message", [
    (("--disable-hook", "bogus"), "nvidia-ctk: unknown hook name 'bogus'"),
    (("--enable-hook", "all"), "nvidia-ctk: --enable-hook does not accept 'all'"),
    (("--mode", "csv"), "nvidia-ctk: discovery mode 'csv' is not supported by nct"),
    (("--max-cdi-version", "2.0"), "nvidia-ctk: invalid --max-cdi-version '2.0'"),
])
def test_cli_bad_input_one_line(node, args, message):
    r = ctk(node, "cdi", "generate", *args)
    assert r.returncode != 0
    assert r.stderr.startswith(message) and r.stderr.count("\n") == 1, r.stderr
    assert "Traceback" not in r.stderr


def test_cli_no_driver(tmp_path):
    env = dict(os.environ, NCT_PROC_ROOT=str(tmp_path / "proc"),
               NVIDIA_CTK_CONFIG_FILE_PATH=str(tmp_path / "none.toml"))
    r = subprocess.run([str(VENV_BIN / "nvidia-ctk"), "cdi", "generate", "--driver-root", str(tmp_path)],
                       capture_output=True, text=True, env=env)
    assert r.returncode != 0
    assert r.stderr.startswith("nvidia-ctk: NVIDIA driver not loaded") and r.stderr.count("\n") == 1, r.stderr


def test_cli_config_file_gives_driver_root(node, tmp_path):
    cfg = tmp_path / "config.toml"
    cfg.write_text(f'[nvidia-container-cli]\nroot = "{node.root}"\n')
    r = ctk(node, "--config", str(cfg), "cdi", "generate", "--format", "json", root=False)
    assert r.returncode == 0, r.stderr
    first = json.loads(r.stdout)["devices"][0]["containerEdits"]["deviceNodes"][0]
    assert first["hostPath"] == os.path.join(node.root, "dev/nvidia0")
    bad = tmp_path / "bad.toml"
    bad.write_text("[nvidia-container-cli\n")
    r = ctk(node, "--config", str(bad), "cdi", "generate", root=False)
    assert r.returncode != 0 and str(bad) in r.stderr and r.stderr.count("\n") == 1, r.stderr


def test_mig_without_nvml_keeps_index_names_and_warns(node, monkeypatch):
    from nct.driver.discover import discover_node

    set_node_env(monkeypatch, node)
    bare = discover_node(node.roots(), use_nvml=False)  # no NVML: MIG devices have no UUID
    warnings: list[str] = []
    spec = generate_spec(GenerateOptions(driver_root=node.root, hook_path=HOOK), node=bare, cfg=Config(),
                         warnings=warnings)
    assert names(spec) == ["0", node.gpus[0].uuid, "1:0", "1:1", "all"]
    assert warnings == [f"MIG device 1:{j} has no UUID (NVML unavailable): no uuid-named entry for it"
                        for j in (0, 1)]


@pytest.mark.parametrize("flag,value,message", [
    ("--vendor", "bad vendor", "invalid --vendor 'bad vendor': invalid character ' '"),
    ("--class", "-x", "invalid --class '-x': invalid class '-x', should start with a letter"),
])
def test_cli_bad_kind(node, flag, value, message):
    r = ctk(node, "cdi", "generate", flag, value)
    assert r.returncode == 1
    assert r.stderr.startswith(f"nvidia-ctk: {message}") and r.stderr.count("\n") == 1, r.stderr
