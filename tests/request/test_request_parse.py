"""The env-variable contract, one table per rule: request_from_spec on OCI spec dicts."""

from __future__ import annotations

import logging

import pytest

from nct.config.model import (
    CdiModeConfig, Config, FeaturesConfig, LegacyModeConfig, ModesConfig, RuntimeConfig,
)
from nct.driver.model import ALL_CAPABILITIES
from nct.errors import RequestError
from nct.request.model import is_qualified_cdi_name
from nct.request.parse import go_parse_bool, go_semver_compare, legacy_cuda_requirement, request_from_spec

DEFAULT = Config()
ALL_CAPS = frozenset(ALL_CAPABILITIES)
PRIV_CAPS = {"bounding": ["CAP_CHOWN", "CAP_SYS_ADMIN"], "effective": ["CAP_SYS_ADMIN"]}
UNPRIV_CAPS = {"bounding": ["CAP_CHOWN", "CAP_NET_BIND_SERVICE"]}
UNSET = object()


def spec(env: dict | None = None, *, caps=UNPRIV_CAPS, mounts=None, annotations=None, version="1.2.0") -> dict:
    s: dict = {"ociVersion": version, "process": {"env": [f"{k}={v}" for k, v in (env or {}).items()],
                                                  "capabilities": caps}, "root": {"path": "rootfs"}}
    if mounts is not None:
        s["mounts"] = mounts
    if annotations is not None:
        s["annotations"] = annotations
    return s


def cfg(**kw) -> Config:
    features = kw.pop("features", None)
    compat = kw.pop("cuda_compat_mode", None)
    prefixes = kw.pop("annotation_prefixes", None)
    c = DEFAULT.replace(**kw)
    if features:
        c = c.replace(features=FeaturesConfig(**features))
    if compat is not None or prefixes is not None:
        modes = ModesConfig(legacy=LegacyModeConfig(cuda_compat_mode=compat or "ldconfig"),
                            cdi=CdiModeConfig(annotation_prefixes=prefixes if prefixes is not None
                                              else ("cdi.k8s.io/",)))
        c = c.replace(nvidia_container_runtime=RuntimeConfig(modes=modes))
    return c


def devices(env, config=DEFAULT, **kw):
    r = request_from_spec(spec(env, **kw), config)
    return None if r is None else r.devices


# --- NVIDIA_VISIBLE_DEVICES ----------------------------------------------------------------------

@pytest.mark.parametrize("value, want", [
    (UNSET, None),
    ("", None),
    ("void", None),
    (" , ", None),
    ("all", ("all",)),
    ("none", ()),
    ("0", ("0",)),
    ("0,1", ("0", "1")),
    (" 0 , 1 ,", ("0", "1")),
    ("1,1,0", ("1", "0")),
    ("GPU-8e8a3d6e-1111-2222-3333-444444444444", ("GPU-8e8a3d6e-1111-2222-3333-444444444444",)),
    ("0000:01:00.0", ("0000:01:00.0",)),
    ("0:1,1:0", ("0:1", "1:0")),
    ("MIG-5e8a3d6e-aaaa-bbbb-cccc-dddddddddddd", ("MIG-5e8a3d6e-aaaa-bbbb-cccc-dddddddddddd",)),
    ("nvidia.com/gpu=0,nvidia.com/gpu=1", ("nvidia.com/gpu=0", "nvidia.com/gpu=1")),
    ("0,GPU-abc,1:0,nvidia.com/gpu=all", ("0", "GPU-abc", "1:0", "nvidia.com/gpu=all")),
    # special values win over ids, with precedence void > none > all
    ("0,void", None),
    ("all,void", None),
    ("0,none", ()),
    ("all,none", ()),
    ("none,all", ()),
    ("1,all", ("all",)),
    ("ALL", ("ALL",)),  # not the special value; device selection accepts it in any case
])
def test_visible_devices_values(value, want):
    env = {} if value is UNSET else {"NVIDIA_VISIBLE_DEVICES": value}
    assert devices(env) == want


def test_request_fields():
    r = request_from_spec(spec({"NVIDIA_VISIBLE_DEVICES": "0", "FOO": "a=b"}), DEFAULT)
    assert r.source == "env" and not r.privileged and r.env["FOO"] == "a=b"
    assert r.capabilities == frozenset({"compute", "utility"})
    assert r.requirements == () and r.mig_config is None and r.imex_channels == () and r.gated_modes == ()
    assert not any(is_qualified_cdi_name(d) for d in r.devices)


# --- privilege ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("caps, version, accept, want", [
    (UNPRIV_CAPS, "1.2.0", True, ("0",)),
    (UNPRIV_CAPS, "1.2.0", False, None),
    (PRIV_CAPS, "1.2.0", False, ("0",)),
    ({"effective": ["CAP_SYS_ADMIN"]}, "1.2.0", False, None),  # only the bounding set counts
    (None, "1.2.0", False, None),
    (["CAP_SYS_ADMIN"], "1.0.0-rc4", False, ("0",)),  # flat list of OCI 1.0.0-rc1 <= v < rc5
    (["CAP_CHOWN"], "1.0.0-rc1", False, None),
    (["CAP_SYS_ADMIN"], "1.0.0-rc2-dev", False, ("0",)),  # old docker runc: compared as semver
    (["CAP_CHOWN"], "1.0.0-rc2-dev", False, None),
    (["CAP_SYS_ADMIN"], "1.0.0-rc1.dev", False, ("0",)),
    (PRIV_CAPS, "1.0.0-rc5-dev", False, ("0",)),          # rc5-dev sorts after rc5: sets
    (PRIV_CAPS, "1.0.0-rc2-dev", False, ("0",)),          # an object is read as sets whatever the version
])
def test_privilege_rules(caps, version, accept, want, caplog):
    c = cfg(accept_nvidia_visible_devices_envvar_when_unprivileged=accept)
    with caplog.at_level(logging.WARNING, logger="nct.request"):
        got = devices({"NVIDIA_VISIBLE_DEVICES": "0"}, c, caps=caps, version=version)
    assert got == want
    if want is None:
        assert "unprivileged" in caplog.text


@pytest.mark.parametrize("version", ["1.0.0-rc5", "1.0.0-rc5-dev", "1.0.0", "1.0.2", "1.0.0-rc", "", "junk"])
def test_flat_capabilities_outside_rc1_to_rc5_is_an_error(version):
    with pytest.raises(RequestError, match="process.capabilities must be an object"):
        devices({"NVIDIA_VISIBLE_DEVICES": "0"}, cfg(accept_nvidia_visible_devices_envvar_when_unprivileged=False),
                caps=["CAP_SYS_ADMIN"], version=version)


@pytest.mark.parametrize("a, b, want", [
    ("1.0.0-rc2-dev", "1.0.0-rc1", 1), ("1.0.0-rc2-dev", "1.0.0-rc5", -1), ("1.0.0-rc10", "1.0.0-rc5", -1),
    ("1.0.0-alpha", "1.0.0-alpha.1", -1), ("1.0.0-alpha.1", "1.0.0-alpha.beta", -1),
    ("1.0.0-beta.2", "1.0.0-beta.11", -1), ("1.0.0-rc.1", "1.0.0", -1), ("1.2", "1.2.0", 0),
    ("1", "1.0.0", 0), ("01.2.3", "1.0.0", -1), ("x", "y", 0), ("1.0.0+b", "1.0.0", 0),
    # numbers of any length compare as Go's do (int() refuses more than 4300 digits)
    ("1" + "0" * 5000, "1.0.0", 1), ("9" * 5000, "1" + "0" * 5000, -1),
    ("1.0.0-" + "9" * 5000, "1.0.0-10", 1), ("1.0.0-rc1." + "9" * 5000, "1.0.0-rc1." + "8" * 5000, 1),
])
def test_go_semver_compare(a, b, want):
    """golang.org/x/mod/semver's order (invalid versions sort first, all equal)."""
    assert go_semver_compare(a, b) == want
    assert go_semver_compare(b, a) == -want


def test_huge_oci_version_is_a_short_request_error():
    """Review finding: an ociVersion with a 5001-digit major and a flat capabilities list ended
    the hook with Python's "Exceeds the limit (4300 digits) for integer string conversion"
    (naming neither the input nor the problem); now the usual error, the version cut short."""
    with pytest.raises(RequestError, match=r"process.capabilities must be an object") as e:
        request_from_spec(spec({"NVIDIA_VISIBLE_DEVICES": "all"}, caps=["CAP_SYS_ADMIN"], version="1" + "0" * 5000),
                          DEFAULT)
    assert len(str(e.value)) < 300


def test_privileged_flag():
    assert request_from_spec(spec({"NVIDIA_VISIBLE_DEVICES": "all"}, caps=PRIV_CAPS), DEFAULT).privileged


# --- volume mounts -------------------------------------------------------------------------------------

def null_mount(dest: str, source: str = "/dev/null") -> dict:
    return {"source": source, "destination": dest, "type": "bind", "options": ["bind"]}


MOUNT_CFG = cfg(accept_nvidia_visible_devices_as_volume_mounts=True)
ROOT = "/var/run/nvidia-container-devices"


@pytest.mark.parametrize("dests, want", [
    ([f"{ROOT}/0", f"{ROOT}/1"], ("0", "1")),
    ([f"{ROOT}/all"], ("all",)),
    ([f"{ROOT}/GPU-abc", f"{ROOT}/GPU-abc/"], ("GPU-abc",)),  # same destination once
    ([f"{ROOT}/cdi/nvidia.com/gpu/0"], ("nvidia.com/gpu=0",)),
    ([f"{ROOT}/cdi/nvidia.com/gpu=1"], ("nvidia.com/gpu=1",)),
    ([f"{ROOT}/cdi/bad", f"{ROOT}/2"], ("2",)),  # an invalid CDI mount is skipped
    ([f"{ROOT}/imex/3"], ("env",)),  # IMEX is not a GPU: falls back to the env
    ([f"{ROOT}"], ("env",)),
    (["/var/run/other/0"], ("env",)),
])
def test_mounts(dests, want):
    mounts = [null_mount(d) for d in dests]
    r = request_from_spec(spec({"NVIDIA_VISIBLE_DEVICES": "env"}, mounts=mounts), MOUNT_CFG)
    assert r.devices == want
    assert r.source == ("env" if want == ("env",) else "mounts")


def test_mounts_need_dev_null_and_config():
    mounts = [null_mount(f"{ROOT}/0", source="/tmp/x")]
    assert devices({"NVIDIA_VISIBLE_DEVICES": "1"}, MOUNT_CFG, mounts=mounts) == ("1",)
    mounts = [null_mount(f"{ROOT}/0")]
    assert devices({"NVIDIA_VISIBLE_DEVICES": "1"}, DEFAULT, mounts=mounts) == ("1",)
    assert devices({}, MOUNT_CFG, mounts=mounts) == ("0",)


def test_mount_requests_ignore_privilege_rule():
    c = MOUNT_CFG.replace(accept_nvidia_visible_devices_envvar_when_unprivileged=False)
    assert devices({}, c, mounts=[null_mount(f"{ROOT}/1")]) == ("1",)
    assert devices({"NVIDIA_VISIBLE_DEVICES": "1"}, c) is None


# --- swarm resources -------------------------------------------------------------------------------------

@pytest.mark.parametrize("swarm, env, want", [
    ("DOCKER_RESOURCE_GPU", {"DOCKER_RESOURCE_GPU": "1", "NVIDIA_VISIBLE_DEVICES": "all"}, ("1",)),
    ("DOCKER_RESOURCE_GPU", {"NVIDIA_VISIBLE_DEVICES": "all"}, ("all",)),
    ("DOCKER_RESOURCE_GPU", {"DOCKER_RESOURCE_GPU": ""}, None),  # present but empty: void
    ("A, B", {"A": "0", "B": "GPU-x", "NVIDIA_VISIBLE_DEVICES": "none"}, ("0", "GPU-x")),
    ("A,B", {"B": "2"}, ("2",)),
    ("", {"DOCKER_RESOURCE_GPU": "1", "NVIDIA_VISIBLE_DEVICES": "0"}, ("0",)),
])
def test_swarm_resource(swarm, env, want):
    assert devices(env, cfg(swarm_resource=swarm)) == want


# --- capabilities -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("value, supported, want", [
    (UNSET, None, {"compute", "utility"}),
    ("", None, {"compute", "utility"}),
    ("all", None, ALL_CAPS),
    ("compute,all", None, ALL_CAPS),
    ("graphics, video", None, {"graphics", "video"}),
    ("utility", None, {"utility"}),
    (",compute,,", None, {"compute"}),
    (UNSET, "compute,graphics", {"compute"}),  # default ∩ supported
    ("all", "compute,graphics", {"compute", "graphics"}),
    ("graphics", "all", {"graphics"}),
])
def test_capabilities(value, supported, want):
    env = {"NVIDIA_VISIBLE_DEVICES": "0"}
    if value is not UNSET:
        env["NVIDIA_DRIVER_CAPABILITIES"] = value
    c = cfg(supported_driver_capabilities=supported) if supported else DEFAULT
    assert request_from_spec(spec(env), c).capabilities == frozenset(want)


@pytest.mark.parametrize("value, supported, bad", [
    ("compute,foo", None, "foo"),
    ("Compute", None, "Compute"),
    ("graphics,compute", "compute,utility", "graphics"),
])
def test_unsupported_capabilities(value, supported, bad):
    env = {"NVIDIA_VISIBLE_DEVICES": "0", "NVIDIA_DRIVER_CAPABILITIES": value}
    c = cfg(supported_driver_capabilities=supported) if supported else DEFAULT
    with pytest.raises(RequestError, match=f"^unsupported capabilities: {bad} "):
        request_from_spec(spec(env), c)
    # the runtime does not check capabilities: it keeps the supported ones
    assert request_from_spec(spec(env), c, runtime=True) is not None


def test_bad_capabilities_ignored_when_no_gpu_requested():
    assert request_from_spec(spec({"NVIDIA_DRIVER_CAPABILITIES": "foo"}), DEFAULT) is None


# --- requirements ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("env, want", [
    ({"NVIDIA_REQUIRE_CUDA": "cuda>=12.0 brand=tesla,driver>=470"}, ("cuda>=12.0 brand=tesla,driver>=470",)),
    ({"NVIDIA_REQUIRE_B": "arch>=8.0", "NVIDIA_REQUIRE_A": "driver>=500"}, ("driver>=500", "arch>=8.0")),
    ({"NVIDIA_REQUIRE_JETPACK": "csv-mounts=all", "NVIDIA_REQUIRE_JETPACK_HOST_MOUNTS": "x"}, ()),
    ({"NVIDIA_REQUIRE_CUDA": ""}, ()),
    ({"NVIDIA_REQUIRE_CUDA": "cuda>=12", "NVIDIA_DISABLE_REQUIRE": "true"}, ()),
    ({"NVIDIA_REQUIRE_CUDA": "cuda>=12", "NVIDIA_DISABLE_REQUIRE": "yes"}, ("cuda>=12",)),
    ({"NVIDIA_REQUIRE_CUDA": "cuda>=12", "NVIDIA_DISABLE_REQUIRE": "0"}, ("cuda>=12",)),
    ({"NVIDIA_REQUIRE_CUDA": "cuda>=12", "CUDA_VERSION": "11.0"}, ("cuda>=12",)),  # not legacy
])
def test_requirements(env, want):
    env = {"NVIDIA_VISIBLE_DEVICES": "0", **env}
    assert request_from_spec(spec(env), DEFAULT).requirements == want


def test_config_disable_require():
    env = {"NVIDIA_VISIBLE_DEVICES": "0", "NVIDIA_REQUIRE_CUDA": "cuda>=99", "CUDA_VERSION": "9.0"}
    assert request_from_spec(spec(env), cfg(disable_require=True)).requirements == ()


@pytest.mark.parametrize("value, want", [
    ("1", True), ("t", True), ("T", True), ("TRUE", True), ("true", True), ("True", True),
    ("0", False), ("f", False), ("false", False), ("yes", False), ("on", False), ("", False), ("tRUE", False),
])
def test_go_parse_bool(value, want):
    assert go_parse_bool(value) is want


# --- legacy CUDA images ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("version, want", [
    ("11.0", "cuda>=11.0"), ("10.1.243", "cuda>=10.1"), ("v9.2", "cuda>=9.2"), ("12", "cuda>=12.0"),
    ("12.4.1-rc1", "cuda>=12.4"),
])
def test_legacy_requirement(version, want):
    assert legacy_cuda_requirement(version) == want


def test_legacy_image_defaults():
    r = request_from_spec(spec({"CUDA_VERSION": "10.1.243"}), DEFAULT)
    assert r.devices == ("all",)
    assert r.capabilities == ALL_CAPS
    assert r.requirements == ("cuda>=10.1",)
    c = cfg(supported_driver_capabilities="compute,utility,video")
    assert request_from_spec(spec({"CUDA_VERSION": "10.1"}), c).capabilities == {"compute", "utility", "video"}
    # explicit values still win
    r = request_from_spec(spec({"CUDA_VERSION": "10.1", "NVIDIA_VISIBLE_DEVICES": "void"}), DEFAULT)
    assert r is None
    r = request_from_spec(spec({"CUDA_VERSION": "10.1", "NVIDIA_DRIVER_CAPABILITIES": ""}), DEFAULT)
    assert r.capabilities == {"compute", "utility"}


@pytest.mark.parametrize("version", ["abc", "1.2.3.4", "01.2", "", "1..2"])
def test_legacy_bad_version(version):
    if version == "":
        assert request_from_spec(spec({"CUDA_VERSION": version}), DEFAULT) is None  # empty: not legacy
        return
    with pytest.raises(RequestError, match="invalid CUDA_VERSION"):
        request_from_spec(spec({"CUDA_VERSION": version}), DEFAULT)
    r = request_from_spec(spec({"CUDA_VERSION": version}), DEFAULT, runtime=True)
    assert r.requirements == ()


# --- MIG config / monitor -----------------------------------------------------------------------------------

@pytest.mark.parametrize("var, field", [("NVIDIA_MIG_CONFIG_DEVICES", "mig_config"),
                                        ("NVIDIA_MIG_MONITOR_DEVICES", "mig_monitor")])
def test_mig_config_monitor(var, field):
    env = {"NVIDIA_VISIBLE_DEVICES": "all", var: "all"}
    assert getattr(request_from_spec(spec(env, caps=PRIV_CAPS), DEFAULT), field) == "all"
    with pytest.raises(RequestError, match=f"cannot set {var} in non-privileged container"):
        request_from_spec(spec(env), DEFAULT)
    assert getattr(request_from_spec(spec(env), DEFAULT, runtime=True), field) is None
    env[var] = ""
    assert getattr(request_from_spec(spec(env), DEFAULT), field) is None


# --- IMEX -------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("value, want", [
    ("0,1", ("0", "1")), ("channel3", ("3",)), ("all", ()), ("", ()), ("void", ()), ("none", ()),
    ("2, 2", ("2",)), ("1048575", ("1048575",)),
])
def test_imex_env(value, want):
    env = {"NVIDIA_VISIBLE_DEVICES": "0", "NVIDIA_IMEX_CHANNELS": value}
    assert request_from_spec(spec(env), DEFAULT).imex_channels == want


@pytest.mark.parametrize("value", ["abc", "1048576", "-1", "channel"])
def test_imex_bad(value):
    env = {"NVIDIA_VISIBLE_DEVICES": "0", "NVIDIA_IMEX_CHANNELS": value}
    with pytest.raises(RequestError, match="invalid IMEX channel"):
        request_from_spec(spec(env), DEFAULT)


def test_imex_sources_and_rules():
    env = {"NVIDIA_VISIBLE_DEVICES": "0", "NVIDIA_IMEX_CHANNELS": "1"}
    mounts = [null_mount(f"{ROOT}/imex/5"), null_mount(f"{ROOT}/0")]
    r = request_from_spec(spec(env, mounts=mounts), MOUNT_CFG)
    assert r.imex_channels == ("5",) and r.devices == ("0",)
    assert request_from_spec(spec(env), cfg(features={"ignore_imex_channel_requests": True})).imex_channels == ()
    c = cfg(accept_nvidia_visible_devices_envvar_when_unprivileged=False)
    assert request_from_spec(spec(env, caps=PRIV_CAPS), c).imex_channels == ("1",)


# --- CUDA compat mode -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("mode, allow, hook, runtime", [
    ("ldconfig", False, "ldconfig", "ldconfig"),
    ("mount", False, "mount", "mount"),
    ("hook", False, "disabled", "hook"),
    ("disabled", False, "disabled", "disabled"),
    ("bogus", False, "disabled", "disabled"),
    ("bogus", True, "mount", "mount"),
])
def test_cuda_compat_mode(mode, allow, hook, runtime):
    c = cfg(cuda_compat_mode=mode, features={"allow_cuda_compat_libs_from_container": allow})
    s = spec({"NVIDIA_VISIBLE_DEVICES": "0"})
    assert request_from_spec(s, c).cuda_compat_mode == hook
    assert request_from_spec(s, c, runtime=True).cuda_compat_mode == runtime


# --- runtime-only sources -----------------------------------------------------------------------------------------

def test_annotations():
    ann = {"cdi.k8s.io/b": "nvidia.com/gpu=1", "cdi.k8s.io/a": "nvidia.com/gpu=0,vendor.com/x=y",
           "other/x": "nvidia.com/gpu=9"}
    s = spec({"NVIDIA_VISIBLE_DEVICES": "all"}, annotations=ann, mounts=[null_mount(f"{ROOT}/3")])
    r = request_from_spec(s, MOUNT_CFG, runtime=True)
    assert r.devices == ("nvidia.com/gpu=0", "vendor.com/x=y", "nvidia.com/gpu=1")
    assert r.source == "annotations"
    assert all(is_qualified_cdi_name(d) for d in r.devices)
    assert request_from_spec(s, MOUNT_CFG).devices == ("3",)  # the hook ignores annotations
    assert request_from_spec(s, MOUNT_CFG, runtime=True, annotations=False).devices == ("3",)
    assert request_from_spec(s, cfg(annotation_prefixes=()), runtime=True).devices == ("all",)
    assert request_from_spec(s, cfg(annotation_prefixes=("other/",)), runtime=True).devices == ("nvidia.com/gpu=9",)


def test_gated_modes():
    env = {"NVIDIA_VISIBLE_DEVICES": "0", "NVIDIA_GDS": "enabled", "NVIDIA_MOFED": "enabled",
           "NVIDIA_GDRCOPY": "true", "NVIDIA_NVSWITCH": "enabled"}
    assert request_from_spec(spec(env), DEFAULT, runtime=True).gated_modes == ("gds", "mofed", "nvswitch")
    assert request_from_spec(spec(env), DEFAULT).gated_modes == ()
    assert request_from_spec(spec({"NVIDIA_GDS": "enabled"}), DEFAULT, runtime=True) is None


# --- malformed specs ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("bad, message", [
    ([], "expected a JSON object"),
    ({"process": "x"}, "process must be an object"),
    ({"process": {"env": "A=B"}}, "process.env must be a list"),
    ({"process": {"env": ["NVIDIA_VISIBLE_DEVICES"]}}, "'NVIDIA_VISIBLE_DEVICES' is not KEY=VALUE"),
    ({"process": {"env": ["=x"]}}, "is not KEY=VALUE"),
    ({"process": {"env": [1]}}, "entry 1 is not a string"),
    ({"process": {"env": ["NVIDIA_VISIBLE_DEVICES=0"], "capabilities": "x"}}, "capabilities must be an object"),
    ({"ociVersion": "1.2.0", "process": {"env": [], "capabilities": ["CAP_SYS_ADMIN"]}},
     "capabilities must be an object for ociVersion '1.2.0'"),
    ({"process": {"env": [], "capabilities": {"bounding": "CAP_SYS_ADMIN"}}}, "bounding must be a list"),
])
def test_malformed(bad, message):
    with pytest.raises(RequestError) as exc:
        request_from_spec(bad, DEFAULT)
    assert message in str(exc.value) and "\n" not in str(exc.value)


@pytest.mark.parametrize("extra, message", [
    ({"mounts": "x"}, "mounts must be a list"),
    ({"mounts": ["x"]}, "mounts entries must be objects"),
    ({"mounts": [{"source": 1, "destination": "/x"}]}, "must be strings"),
])
def test_malformed_mounts(extra, message):
    s = {**spec({"NVIDIA_VISIBLE_DEVICES": "0"}), **extra}
    with pytest.raises(RequestError, match=message):
        request_from_spec(s, MOUNT_CFG)


def test_malformed_annotations():
    s = spec({"NVIDIA_VISIBLE_DEVICES": "0"}, annotations={"cdi.k8s.io/x": 3})
    with pytest.raises(RequestError, match="annotation 'cdi.k8s.io/x' must be a string"):
        request_from_spec(s, DEFAULT, runtime=True)


def test_no_process_is_not_a_gpu_container():
    assert request_from_spec({"ociVersion": "1.2.0"}, DEFAULT) is None
