"""`create` handling with a fake backend: modifiers per mode and their order, the
untouched-when-no-GPU rule, errors leave config.json alone."""

import json
import os

import pytest

from nct.config.model import Config, FeaturesConfig, LegacyModeConfig
from nct.errors import ConfigError, DiscoveryError, RequestError, SpecError
from nct.runtime.create import Backend, handle_create, modify_spec
from nct.runtime.log import Logger
from nct.runtime.settings import read_settings

NVHOOK = {"path": "/usr/bin/nvidia-container-runtime-hook", "args": ["nvidia-container-runtime-hook", "prestart"]}


@pytest.fixture(autouse=True)
def _no_installed_tools(monkeypatch, tmp_path):
    """Tool look-ups see an empty fallback PATH, whatever this machine has installed in
    /usr/local/bin or /usr/bin, so the hook path is upstream's last resort, /usr/bin/..."""
    from nct.runtime import lookup

    monkeypatch.setattr(lookup, "FALLBACK_DIRS", (str(tmp_path / "empty"),))


class FakeBackend(Backend):
    """Real request parsing; everything touching the node or spec dirs is recorded."""

    def __init__(self, fail: Exception | None = None):
        self.calls = []
        self.fail = fail

    def tegra(self, cfg):
        return False

    def node(self, cfg):
        class N:
            driver_version = "550.54.15"
        return N()

    def _rec(self, name, spec, *args):
        if self.fail:
            raise self.fail
        self.calls.append((name,) + args)
        spec.setdefault("annotations", {})[f"test/{name}"] = "1"
        return spec

    def jit_inject(self, spec, cfg, request, hook_path, log):
        return self._rec("jit", spec, request.devices, os.path.basename(hook_path))

    def gated_inject(self, spec, cfg, request, hook_path, log):
        return self._rec("gated", spec, request.gated_modes)

    def graphics_inject(self, spec, cfg, request, hook_path, log):
        return self._rec("graphics", spec, request.devices)

    def inject_cdi(self, spec, names, spec_dirs, log):
        return self._rec("cdi", spec, tuple(names), tuple(spec_dirs))


def _spec(env=(), annotations=None, hooks=None):
    spec = {"ociVersion": "1.0.2", "process": {"env": ["PATH=/bin", *env], "args": ["sh"]},
            "root": {"path": "rootfs"}}
    if annotations:
        spec["annotations"] = annotations
    if hooks:
        spec["hooks"] = hooks
    return spec


def _cfg(mode="auto", **kw):
    cfg = Config()
    rt = cfg.nvidia_container_runtime.replace(mode=mode)
    return cfg.replace(nvidia_container_runtime=rt, **kw)


LOG = Logger()


@pytest.mark.parametrize("mode", ["auto", "legacy", "cdi", "jit-cdi", "csv"])
@pytest.mark.parametrize("env", [(), ("NVIDIA_VISIBLE_DEVICES=void",), ("NVIDIA_VISIBLE_DEVICES=",)])
def test_no_devices_no_changes(mode, env):
    b = FakeBackend()
    assert modify_spec(_spec(env, hooks={"prestart": [{"path": "/bin/true"}]}), _cfg(mode), mode, LOG, b) is None
    assert b.calls == []


STALE_HOOKS = [
    {"path": "/usr/bin/nvidia-container-runtime-hook", "args": ["nvidia-container-runtime-hook", "prestart"]},
    {"path": "/gone/nvidia-container-toolkit", "args": ["nvidia-container-toolkit", "prestart"]},
    {"path": "/bin/true"},
    {"path": "/usr/bin/nvidia-container-runtime-hook.real"},  # another basename: kept
]


@pytest.mark.parametrize("mode, removed", [
    ("auto", True), ("jit-cdi", True), ("cdi", True), ("csv", True), ("legacy", False)])
@pytest.mark.parametrize("env", [(), ("NVIDIA_VISIBLE_DEVICES=void",)])
def test_no_devices_stale_nvidia_hooks_removed(mode, removed, env):
    """issue 12 #9: upstream's hook remover runs in cdi, jit-cdi and csv modes whatever the
    container asks for; legacy mode keeps an existing hook."""
    b = FakeBackend()
    out = modify_spec(_spec(env, hooks={"prestart": list(STALE_HOOKS), "poststop": [NVHOOK]}),
                      _cfg(mode), mode, LOG, b)
    assert b.calls == []
    if not removed:
        assert out is None
        return
    assert out["hooks"]["prestart"] == STALE_HOOKS[2:]
    assert out["hooks"]["poststop"] == [NVHOOK]  # only prestart hooks are looked at
    only = modify_spec(_spec(env, hooks={"prestart": STALE_HOOKS[:1]}), _cfg(mode), mode, LOG, b)
    assert only["hooks"] == {}  # the emptied list goes (Go's omitempty)


def test_auto_env_devices_is_jit_cdi_and_removes_nvidia_hooks():
    b = FakeBackend()
    other = {"path": "/bin/true"}
    out = modify_spec(_spec(["NVIDIA_VISIBLE_DEVICES=0,GPU-x"], hooks={"prestart": [NVHOOK, other]}),
                      _cfg(), "auto", LOG, b)
    assert b.calls == [("jit", ("0", "GPU-x"), "nvidia-ctk")]
    assert out["hooks"]["prestart"] == [other]


def test_none_means_driver_only():
    b = FakeBackend()
    modify_spec(_spec(["NVIDIA_VISIBLE_DEVICES=none"]), _cfg(), "jit-cdi", LOG, b)
    assert b.calls == [("jit", (), "nvidia-ctk")]


def test_auto_all_cdi_names_is_cdi_mode():
    b = FakeBackend()
    modify_spec(_spec(["NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=1"]), _cfg(), "auto", LOG, b)
    assert b.calls == [("cdi", ("nvidia.com/gpu=1",), ("/etc/cdi", "/var/run/cdi"))]


def test_annotations_count_in_cdi_and_auto_only():
    ann = {"cdi.k8s.io/vendor_dev": "nvidia.com/gpu=0,nvidia.com/gpu=1"}
    for mode in ("auto", "cdi"):
        b = FakeBackend()
        modify_spec(_spec(annotations=ann), _cfg(mode), mode, LOG, b)
        assert b.calls == [("cdi", ("nvidia.com/gpu=0", "nvidia.com/gpu=1"), ("/etc/cdi", "/var/run/cdi"))]
    for mode in ("legacy", "jit-cdi"):
        b = FakeBackend()
        assert modify_spec(_spec(annotations=ann), _cfg(mode), mode, LOG, b) is None


def test_cdi_mode_default_kind_and_jit_names():
    b = FakeBackend()
    modify_spec(_spec(["NVIDIA_VISIBLE_DEVICES=0,1,0"]), _cfg("cdi"), "cdi", LOG, b)
    assert b.calls == [("cdi", ("nvidia.com/gpu=0", "nvidia.com/gpu=1"), ("/etc/cdi", "/var/run/cdi"))]
    b = FakeBackend()
    modify_spec(_spec(["NVIDIA_VISIBLE_DEVICES=runtime.nvidia.com/gpu=all"]), _cfg("cdi"), "cdi", LOG, b)
    assert b.calls == [("jit", ("all",), "nvidia-ctk")]
    with pytest.raises(RequestError, match="runtime.nvidia.com"):
        modify_spec(_spec(["NVIDIA_VISIBLE_DEVICES=runtime.nvidia.com/gpu=0,nvidia.com/gpu=1"]),
                    _cfg("cdi"), "cdi", LOG, FakeBackend())


def test_jit_cdi_with_foreign_cdi_names_uses_spec_dirs():
    b = FakeBackend()
    modify_spec(_spec(["NVIDIA_VISIBLE_DEVICES=example.com/net=a"]), _cfg("jit-cdi"), "jit-cdi", LOG, b)
    assert b.calls == [("cdi", ("example.com/net=a",), ("/etc/cdi", "/var/run/cdi"))]


def test_legacy_order_feature_gated_graphics_then_hook(monkeypatch):
    b = FakeBackend()
    cfg = _cfg("legacy")
    rt = cfg.nvidia_container_runtime
    cfg = cfg.replace(nvidia_container_runtime=rt.replace(
        modes=rt.modes.replace(legacy=LegacyModeConfig(cuda_compat_mode="hook"))))
    spec = _spec(["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DRIVER_CAPABILITIES=graphics,utility", "NVIDIA_GDS=enabled"],
                 hooks={"prestart": [{"path": "/bin/true"}]})
    out = modify_spec(spec, cfg, "legacy", LOG, b, env_path="/nonexistent")
    assert [c[0] for c in b.calls] == ["gated", "graphics"]
    assert b.calls[0][1] == ("gds",)
    assert out["hooks"]["prestart"] == [{"path": "/bin/true"}, NVHOOK]
    compat = out["hooks"]["createContainer"]
    assert [h["args"][2] for h in compat] == ["enable-cuda-compat", "update-ldcache"]
    assert compat[0]["args"] == ["nvidia-ctk", "hook", "enable-cuda-compat", "--host-driver-version=550.54.15"]
    assert all(h["env"] == ["NVIDIA_CTK_DEBUG=false"] for h in compat)


def test_legacy_plain_just_adds_hook_and_keeps_existing():
    b = FakeBackend()
    out = modify_spec(_spec(["NVIDIA_VISIBLE_DEVICES=all"]), _cfg("legacy"), "legacy", LOG, b, "/nonexistent")
    assert b.calls == [] and out["hooks"] == {"prestart": [NVHOOK]}
    spec = _spec(["NVIDIA_VISIBLE_DEVICES=all"], hooks={"prestart": [{"path": "/x/nvidia-container-toolkit"}]})
    out = modify_spec(spec, _cfg("legacy"), "legacy", LOG, b)
    assert out["hooks"]["prestart"] == [{"path": "/x/nvidia-container-toolkit"}]


def test_legacy_compat_hook_can_be_disabled():
    cfg = _cfg("legacy", features=FeaturesConfig(disable_cuda_compat_lib_hook=True))
    rt = cfg.nvidia_container_runtime
    cfg = cfg.replace(nvidia_container_runtime=rt.replace(
        modes=rt.modes.replace(legacy=LegacyModeConfig(cuda_compat_mode="hook"))))
    out = modify_spec(_spec(["NVIDIA_VISIBLE_DEVICES=0"]), cfg, "legacy", LOG, FakeBackend())
    assert "createContainer" not in out["hooks"]


def test_csv_is_a_clear_error():
    with pytest.raises(ConfigError, match="csv mode .* not supported"):
        modify_spec(_spec(["NVIDIA_VISIBLE_DEVICES=0"]), _cfg("csv"), "csv", LOG, FakeBackend())


# --- handle_create: the file on disk ----------------------------------------------------

def _bundle(tmp_path, spec, config="", extra=None):
    b = tmp_path / "bundle"
    b.mkdir()
    (b / "config.json").write_text(json.dumps(spec, indent=2))
    cfgp = tmp_path / "config.toml"
    cfgp.write_text(config)
    settings = read_settings({"NVIDIA_CTK_CONFIG_FILE_PATH": str(cfgp)})
    return b, settings


def _snapshot(path):
    st = os.stat(path)
    return (st.st_ino, st.st_mtime_ns, path.read_bytes())


def test_untouched_file_when_nothing_requested(tmp_path):
    b, settings = _bundle(tmp_path, _spec())
    before = _snapshot(b / "config.json")
    assert handle_create(["create", "--bundle", str(b), "id"], settings, None, LOG, {}, FakeBackend()) is False
    assert _snapshot(b / "config.json") == before


def test_rewrites_compactly_when_modified(tmp_path):
    b, settings = _bundle(tmp_path, _spec(["NVIDIA_VISIBLE_DEVICES=0"]))
    assert handle_create(["create", f"--bundle={b}", "id"], settings, None, LOG, {}, FakeBackend())
    text = (b / "config.json").read_text()
    assert "\n" not in text and json.loads(text)["annotations"] == {"test/jit": "1"}


def test_bundle_defaults_to_cwd(tmp_path, monkeypatch):
    b, settings = _bundle(tmp_path, _spec(["NVIDIA_VISIBLE_DEVICES=0"]))
    monkeypatch.chdir(b)
    assert handle_create(["create", "id"], settings, "legacy", LOG, {"PATH": ""}, FakeBackend())
    assert json.loads((b / "config.json").read_text())["hooks"]["prestart"][0]["args"][1] == "prestart"


@pytest.mark.parametrize("error", [DiscoveryError("no NVIDIA driver"), SpecError("unresolvable CDI devices x")])
def test_backend_error_leaves_file(tmp_path, error):
    b, settings = _bundle(tmp_path, _spec(["NVIDIA_VISIBLE_DEVICES=0"]))
    before = _snapshot(b / "config.json")
    with pytest.raises(type(error)):
        handle_create(["create", "-b", str(b), "id"], settings, None, LOG, {}, FakeBackend(fail=error))
    assert _snapshot(b / "config.json") == before


def test_invalid_mode_fails_even_without_devices(tmp_path):
    b, settings = _bundle(tmp_path, _spec(), '[nvidia-container-runtime]\nmode = "bogus"\n')
    with pytest.raises(ConfigError, match=r"mode.*bogus"):
        handle_create(["create", "-b", str(b), "id"], settings, None, LOG, {}, FakeBackend())


def test_unknown_fields_strict_and_lenient(tmp_path):
    spec = _spec(["NVIDIA_VISIBLE_DEVICES=0"])
    spec["futureField"] = {"x": 1}
    b, settings = _bundle(tmp_path, spec)
    with pytest.raises(SpecError, match="futureField"):
        handle_create(["create", "-b", str(b), "id"], settings, None, LOG, {}, FakeBackend())
    (tmp_path / "config.toml").write_text("[features]\nallow-unknown-oci-spec-fields = true\n")
    assert handle_create(["create", "-b", str(b), "id"], settings, None, LOG, {}, FakeBackend())
    assert json.loads((b / "config.json").read_text())["futureField"] == {"x": 1}


def test_forced_mode_overrides_config(tmp_path):
    b, settings = _bundle(tmp_path, _spec(["NVIDIA_VISIBLE_DEVICES=0"]), '[nvidia-container-runtime]\nmode = "legacy"\n')
    fb = FakeBackend()
    handle_create(["create", "-b", str(b), "id"], settings, "cdi", LOG, {}, fb)
    assert fb.calls == [("cdi", ("nvidia.com/gpu=0",), ("/etc/cdi", "/var/run/cdi"))]


def test_unknown_deep_field_strict_and_lenient(tmp_path):
    """issue 12 #13: as upstream, an unknown field at any depth fails `create` (file untouched)."""
    spec = _spec(["NVIDIA_VISIBLE_DEVICES=0"])
    spec["linux"] = {"resources": {"devices": [{"allow": False, "access": "rwm", "future": 1}]}}
    b, settings = _bundle(tmp_path, spec)
    before = _snapshot(b / "config.json")
    with pytest.raises(SpecError, match=r"linux\.resources\.devices\[0\]\.future"):
        handle_create(["create", "-b", str(b), "id"], settings, None, LOG, {}, FakeBackend())
    assert _snapshot(b / "config.json") == before
    (tmp_path / "config.toml").write_text("[features]\nallow-unknown-oci-spec-fields = true\n")
    assert handle_create(["create", "-b", str(b), "id"], settings, None, LOG, {}, FakeBackend())
    assert json.loads((b / "config.json").read_text())["linux"]["resources"]["devices"][0]["future"] == 1
