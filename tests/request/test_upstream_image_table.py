"""Upstream's image-env expectations (its hook and image-package test tables), restated as
tables of our own: what a container's env, mounts and privileges request, for the prestart
hook (strict) and the runtime shim (lenient). Each row: inputs -> devices / capabilities /
requirements, or the error."""

from __future__ import annotations

import pytest

from nct.config.model import Config
from nct.errors import NctError
from nct.request.parse import request_from_spec

ALL = frozenset({"compat32", "compute", "display", "graphics", "ngx", "utility", "video"})
DEFAULT = frozenset({"compute", "utility"})
ROOT = "/var/run/nvidia-container-devices"
ERROR = "error"


def spec(env: dict[str, str], *, privileged: bool = False, mounts: list[tuple[str, str]] = ()) -> dict:
    bounding = ["CAP_SYS_ADMIN", "CAP_CHOWN"] if privileged else ["CAP_CHOWN", "CAP_KILL"]
    return {
        "ociVersion": "1.2.0",
        "process": {"env": [f"{k}={v}" for k, v in env.items()], "args": ["sh"],
                    "capabilities": {"bounding": bounding}},
        "root": {"path": "rootfs"},
        "mounts": [{"source": s, "destination": d, "type": "bind"} for s, d in mounts],
    }


def parse(env, *, privileged=False, mounts=(), runtime=False, **cfg):
    return request_from_spec(spec(env, privileged=privileged, mounts=mounts), Config(**cfg), runtime=runtime)


# --- the whole request: legacy (CUDA_VERSION) and modern images ---------------------------------
LEGACY = {"CUDA_VERSION": "9.0"}
MODERN = {"NVIDIA_REQUIRE_CUDA": "cuda>=9.0"}
R2 = {"NVIDIA_REQUIRE_R0": "r0=1", "NVIDIA_REQUIRE_R1": "r1=0"}

REQUEST_ROWS = [
    # env, privileged, devices, capabilities, requirements
    ({}, False, None, None, None),
    ({}, True, None, None, None),
    (LEGACY, False, ("all",), ALL, ("cuda>=9.0",)),
    ({**LEGACY, "NVIDIA_VISIBLE_DEVICES": "all"}, False, ("all",), ALL, ("cuda>=9.0",)),
    ({**LEGACY, "NVIDIA_VISIBLE_DEVICES": ""}, False, None, None, None),
    ({**LEGACY, "NVIDIA_VISIBLE_DEVICES": "void"}, False, None, None, None),
    ({**LEGACY, "NVIDIA_VISIBLE_DEVICES": "none"}, False, (), ALL, ("cuda>=9.0",)),
    ({**LEGACY, "NVIDIA_VISIBLE_DEVICES": "gpu0,gpu1"}, False, ("gpu0", "gpu1"), ALL, ("cuda>=9.0",)),
    ({**LEGACY, "NVIDIA_VISIBLE_DEVICES": "gpu0,gpu1", "NVIDIA_DRIVER_CAPABILITIES": ""}, False,
     ("gpu0", "gpu1"), DEFAULT, ("cuda>=9.0",)),
    ({**LEGACY, "NVIDIA_VISIBLE_DEVICES": "gpu0", "NVIDIA_DRIVER_CAPABILITIES": "all"}, False,
     ("gpu0",), ALL, ("cuda>=9.0",)),
    ({**LEGACY, "NVIDIA_VISIBLE_DEVICES": "gpu0", "NVIDIA_DRIVER_CAPABILITIES": "video,display"}, False,
     ("gpu0",), frozenset({"video", "display"}), ("cuda>=9.0",)),
    ({**LEGACY, **R2, "NVIDIA_VISIBLE_DEVICES": "gpu0"}, False, ("gpu0",), ALL, ("cuda>=9.0", "r0=1", "r1=0")),
    ({**LEGACY, **R2, "NVIDIA_VISIBLE_DEVICES": "gpu0", "NVIDIA_DISABLE_REQUIRE": "true"}, False,
     ("gpu0",), ALL, ()),
    (MODERN, False, None, None, None),
    ({**MODERN, **LEGACY}, False, None, None, None),  # NVIDIA_REQUIRE_CUDA: not a legacy image
    ({**MODERN, "NVIDIA_VISIBLE_DEVICES": "all"}, False, ("all",), DEFAULT, ("cuda>=9.0",)),
    ({**MODERN, "NVIDIA_VISIBLE_DEVICES": ""}, False, None, None, None),
    ({**MODERN, "NVIDIA_VISIBLE_DEVICES": "void"}, False, None, None, None),
    ({**MODERN, "NVIDIA_VISIBLE_DEVICES": "none"}, False, (), DEFAULT, ("cuda>=9.0",)),
    ({**MODERN, "NVIDIA_VISIBLE_DEVICES": "gpu0,gpu1"}, False, ("gpu0", "gpu1"), DEFAULT, ("cuda>=9.0",)),
    ({**MODERN, "NVIDIA_VISIBLE_DEVICES": "gpu0", "NVIDIA_DRIVER_CAPABILITIES": ""}, False,
     ("gpu0",), DEFAULT, ("cuda>=9.0",)),
    ({**MODERN, "NVIDIA_VISIBLE_DEVICES": "gpu0", "NVIDIA_DRIVER_CAPABILITIES": "all"}, False,
     ("gpu0",), ALL, ("cuda>=9.0",)),
    ({**MODERN, **R2, "NVIDIA_VISIBLE_DEVICES": "gpu0", "NVIDIA_DRIVER_CAPABILITIES": "video,display"}, False,
     ("gpu0",), frozenset({"video", "display"}), ("cuda>=9.0", "r0=1", "r1=0")),
    ({**MODERN, **R2, "NVIDIA_VISIBLE_DEVICES": "gpu0", "NVIDIA_DISABLE_REQUIRE": "1"}, False,
     ("gpu0",), DEFAULT, ()),
    ({"NVIDIA_VISIBLE_DEVICES": "all"}, False, ("all",), DEFAULT, ()),
    ({"NVIDIA_REQUIRE_JETPACK": "csv-mounts=all", "NVIDIA_VISIBLE_DEVICES": "0"}, False, ("0",), DEFAULT, ()),
    ({"NVIDIA_REQUIRE_JETPACK_HOST_MOUNTS": "base-only", "NVIDIA_VISIBLE_DEVICES": "0"}, False, ("0",), DEFAULT,
     ()),  # every NVIDIA_REQUIRE_JETPACK* variable is a Tegra mount option, not a requirement
    ({"CUDA_VERSION": "11.6", "NVIDIA_REQUIRE_BRAND": "brand=tesla", "NVIDIA_VISIBLE_DEVICES": "0"}, False,
     ("0",), ALL, ("cuda>=11.6", "brand=tesla")),
    ({"CUDA_VERSION": "11.6", "NVIDIA_REQUIRE_BRAND": "brand=tesla", "NVIDIA_DISABLE_REQUIRE": "true",
      "NVIDIA_VISIBLE_DEVICES": "0"}, False, ("0",), ALL, ()),
]


@pytest.mark.parametrize("runtime", [False, True], ids=["hook", "runtime"])
@pytest.mark.parametrize("env, privileged, devices, caps, reqs", REQUEST_ROWS)
def test_request_table(env, privileged, devices, caps, reqs, runtime):
    req = parse(env, privileged=privileged, runtime=runtime)
    if devices is None:
        assert req is None
        return
    assert req.devices == devices
    assert req.capabilities == caps
    assert sorted(req.requirements) == sorted(reqs)


# --- MIG config / monitor: privileged only (the hook); passed through verbatim ----------------
@pytest.mark.parametrize("var, field", [("NVIDIA_MIG_CONFIG_DEVICES", "mig_config"),
                                        ("NVIDIA_MIG_MONITOR_DEVICES", "mig_monitor")])
@pytest.mark.parametrize("privileged, want", [(True, "mig0,mig1"), (False, ERROR)])
def test_mig_admin_table(var, field, privileged, want):
    env = {**MODERN, "NVIDIA_VISIBLE_DEVICES": "all", var: "mig0,mig1"}
    if want is ERROR:
        with pytest.raises(NctError):
            parse(env, privileged=privileged)
        return
    assert getattr(parse(env, privileged=privileged), field) == want


# --- capabilities against supported-driver-capabilities ----------------------------------------
SUPPORTED = "compute,utility,display,video"
CAPS_ROWS = [
    # env value (None = unset), legacy, supported, expected
    ("display,video", True, SUPPORTED, {"display", "video"}),
    ("all", True, SUPPORTED, {"compute", "utility", "display", "video"}),
    ("", True, SUPPORTED, DEFAULT),
    (None, True, SUPPORTED, {"compute", "utility", "display", "video"}),
    ("display,video", False, SUPPORTED, {"display", "video"}),
    (None, False, SUPPORTED, DEFAULT),
    ("all", False, SUPPORTED, {"compute", "utility", "display", "video"}),
    ("", False, SUPPORTED, DEFAULT),
    (None, False, "compute", {"compute"}),  # the default is cut to what is supported
    ("all", False, "video,display", {"video", "display"}),
    ("video,display", False, "video,display,compute,utility", {"video", "display"}),
    (None, False, "video,display,utility,compute", DEFAULT),
    (",compute,,utility,", False, SUPPORTED, DEFAULT),  # empty items are skipped
    ("compute,compat32,graphics,utility,video,display", False, ",".join(sorted(ALL)),
     {"compute", "compat32", "graphics", "utility", "video", "display"}),
]


@pytest.mark.parametrize("value, legacy, supported, want", CAPS_ROWS)
def test_capabilities_table(value, legacy, supported, want):
    env = {"NVIDIA_VISIBLE_DEVICES": "0", **(LEGACY if legacy else {})}
    if value is not None:
        env["NVIDIA_DRIVER_CAPABILITIES"] = value
    for runtime in (False, True):
        assert parse(env, supported_driver_capabilities=supported, runtime=runtime).capabilities == want


@pytest.mark.parametrize("value, supported", [
    ("compute,utility", "compute"),
    ("compute,utility,ngx", "compute,compat32,graphics,utility,video,display"),
])
def test_unsupported_capability_hook_refuses_runtime_intersects(value, supported):
    env = {"NVIDIA_VISIBLE_DEVICES": "0", "NVIDIA_DRIVER_CAPABILITIES": value}
    with pytest.raises(NctError, match="unsupported capabilities"):
        parse(env, supported_driver_capabilities=supported)
    got = parse(env, supported_driver_capabilities=supported, runtime=True).capabilities
    assert got == frozenset(value.split(",")) & frozenset(supported.split(","))


# --- device lists as volume mounts -------------------------------------------------------------
MOUNT_ROWS = [
    ([], None),
    ([("/not/dev/null", f"{ROOT}/GPU0")], None),
    ([("/dev/null", "/other/prefix/GPU0")], None),
    ([("/dev/null", ROOT)], None),
    ([("/dev/null", f"{ROOT}/GPU0"), ("/dev/null", f"{ROOT}/GPU1")], ("GPU0", "GPU1")),
    ([("/dev/null", f"{ROOT}/GPU0-MIG0/0/1"), ("/dev/null", f"{ROOT}/GPU1-MIG0/0/1")],
     ("GPU0-MIG0/0/1", "GPU1-MIG0/0/1")),
    ([("/dev/null", f"{ROOT}/GPU0"), ("/dev/null", f"{ROOT}/GPU0")], ("GPU0",)),
    ([("/dev/null", f"{ROOT}/cdi/nvidia.com/gpu/0")], ("nvidia.com/gpu=0",)),
    ([("/dev/null", f"{ROOT}/cdi/nvidia.com/gpu=1")], ("nvidia.com/gpu=1",)),
    ([("/dev/null", f"{ROOT}/all")], ("all",)),
]


@pytest.mark.parametrize("mounts, want", MOUNT_ROWS)
def test_devices_from_mounts_table(mounts, want):
    """accept-nvidia-visible-devices-as-volume-mounts; NVIDIA_VISIBLE_DEVICES unset."""
    req = parse({}, mounts=mounts, accept_nvidia_visible_devices_as_volume_mounts=True)
    assert (req.devices if req is not None else None) == want


MOUNTS = [("/dev/null", f"{ROOT}/GPU0"), ("/dev/null", f"{ROOT}/GPU1")]
PRIORITY_ROWS = [
    # mounts, env value, privileged, accept env unprivileged, accept mounts, expected
    (MOUNTS, "GPU2,GPU3", False, False, True, ("GPU0", "GPU1")),
    ([], "GPU0,GPU1", False, False, True, None),
    ([], "GPU0,GPU1", True, False, True, ("GPU0", "GPU1")),
    ([], "GPU0,GPU1", False, True, True, ("GPU0", "GPU1")),
    (MOUNTS, "GPU2,GPU3", False, True, False, ("GPU2", "GPU3")),
    (MOUNTS, "GPU2,GPU3", False, False, False, None),
    (MOUNTS, "GPU2,GPU3", True, False, True, ("GPU0", "GPU1")),  # mounts win when accepted
]


@pytest.mark.parametrize("mounts, value, privileged, accept_env, accept_mounts, want", PRIORITY_ROWS)
def test_device_source_priority_table(mounts, value, privileged, accept_env, accept_mounts, want):
    for runtime in (False, True):
        req = parse({"NVIDIA_VISIBLE_DEVICES": value}, privileged=privileged, mounts=mounts, runtime=runtime,
                    accept_nvidia_visible_devices_envvar_when_unprivileged=accept_env,
                    accept_nvidia_visible_devices_as_volume_mounts=accept_mounts)
        assert (req.devices if req is not None else None) == want


# --- NVIDIA_VISIBLE_DEVICES vs the swarm-resource variables -------------------------------------
SWARM = "DOCKER_RESOURCE_GPUS"
ENV_ROWS = [
    # swarm-resource, env, legacy, expected devices
    ("", {}, False, None),
    ("", {"NVIDIA_VISIBLE_DEVICES": ""}, False, None),
    ("", {"NVIDIA_VISIBLE_DEVICES": "void"}, False, None),
    ("", {"NVIDIA_VISIBLE_DEVICES": "none"}, False, ()),
    ("", {"NVIDIA_VISIBLE_DEVICES": "GPU-1234"}, False, ("GPU-1234",)),
    ("", {"NVIDIA_VISIBLE_DEVICES": "GPU-1234"}, True, ("GPU-1234",)),
    ("", {}, True, ("all",)),
    ("", {SWARM: "GPU-5678"}, False, None),  # not configured: ignored
    ("", {"NVIDIA_VISIBLE_DEVICES": "", SWARM: "GPU-5678"}, False, None),
    ("", {"NVIDIA_VISIBLE_DEVICES": "void", SWARM: "GPU-5678"}, False, None),
    ("", {"NVIDIA_VISIBLE_DEVICES": "none", SWARM: "GPU-5678"}, False, ()),
    ("", {"NVIDIA_VISIBLE_DEVICES": "GPU-1234", SWARM: "GPU-5678"}, False, ("GPU-1234",)),
    ("", {"NVIDIA_VISIBLE_DEVICES": "GPU-1234", SWARM: "GPU-5678"}, True, ("GPU-1234",)),
    ("", {SWARM: "GPU-5678"}, True, ("all",)),
    (SWARM, {}, False, None),
    (SWARM, {SWARM: ""}, False, None),
    (SWARM, {SWARM: "void"}, False, None),
    (SWARM, {SWARM: "none"}, False, ()),
    (SWARM, {SWARM: "GPU-1234"}, False, ("GPU-1234",)),
    (SWARM, {SWARM: "GPU-1234"}, True, ("GPU-1234",)),
    (SWARM, {SWARM: "GPU-5678"}, False, ("GPU-5678",)),
    (SWARM, {"NVIDIA_VISIBLE_DEVICES": "GPU-1234", SWARM: "GPU-5678"}, False, ("GPU-5678",)),
    (SWARM, {"NVIDIA_VISIBLE_DEVICES": "GPU-1234"}, False, ("GPU-1234",)),  # swarm var absent
]


@pytest.mark.parametrize("swarm, env, legacy, want", ENV_ROWS)
def test_devices_from_env_table(swarm, env, legacy, want):
    full = {**env, **(LEGACY if legacy else {})}
    for runtime in (False, True):
        req = parse(full, swarm_resource=swarm, runtime=runtime)
        assert (req.devices if req is not None else None) == want


# --- privileged: CAP_SYS_ADMIN in the bounding set ---------------------------------------------
@pytest.mark.parametrize("bounding, privileged", [
    (["CAP_SYS_ADMIN"], True), (["CAP_SYS_FOO"], False), ([], False), (["CAP_CHOWN", "CAP_SYS_ADMIN"], True),
])
def test_privileged_table(bounding, privileged):
    s = spec({"NVIDIA_VISIBLE_DEVICES": "0"})
    s["process"]["capabilities"] = {"bounding": bounding, "effective": ["CAP_SYS_ADMIN"]}
    cfg = Config(accept_nvidia_visible_devices_envvar_when_unprivileged=False)
    req = request_from_spec(s, cfg)
    assert (req is not None) == privileged


# --- CDI device requests in annotations (the runtime's cdi/auto modes) --------------------------
ANNOTATION_ROWS = [
    # prefixes, annotations, qualified devices (None: not a GPU container)
    ((), {"prefix/foo": "example.com/device=bar"}, None),
    (("not-prefix/",), {"prefix/foo": "example.com/device=bar"}, None),
    (("prefix/",), {"prefix/foo": "example.com/device=bar"}, ["example.com/device=bar"]),
    (("prefix/", "another-prefix/"), {"prefix/foo": "example.com/device=bar", "another-prefix/bar": "example.com/device=baz"},
     ["example.com/device=baz", "example.com/device=bar"]),  # keys sorted
    (("prefix/", "another-prefix/"), {"prefix/foo": "example.com/device=bar", "another-prefix/bar": "example.com/device=bar"},
     ["example.com/device=bar"]),  # duplicates once
    (("prefix/",), {"prefix/foo": "example.com/device=a,example.com/device=b"},
     ["example.com/device=a", "example.com/device=b"]),
]


@pytest.mark.parametrize("prefixes, annotations, want", ANNOTATION_ROWS)
def test_annotation_devices_table(prefixes, annotations, want):
    from nct.config.model import CdiModeConfig, ModesConfig, RuntimeConfig
    from nct.runtime.modes import qualify

    cfg = Config(nvidia_container_runtime=RuntimeConfig(modes=ModesConfig(cdi=CdiModeConfig(
        annotation_prefixes=tuple(prefixes)))))
    s = spec({})
    s["annotations"] = annotations
    req = request_from_spec(s, cfg, runtime=True)
    if want is None:
        assert req is None
        return
    assert qualify(req.devices, "nvidia.com/gpu") == want


@pytest.mark.parametrize("swarm, env, want", [
    ("DOCKER_SWARM_RESOURCE", {"NVIDIA_VISIBLE_DEVICES": "all", "DOCKER_SWARM_RESOURCE": "GPU1,GPU2"}, ("GPU1", "GPU2")),
    ("NOT_DOCKER_SWARM_RESOURCE,DOCKER_SWARM_RESOURCE",
     {"NVIDIA_VISIBLE_DEVICES": "all", "DOCKER_SWARM_RESOURCE": "GPU1,GPU2"}, ("GPU1", "GPU2")),
    ("NOT_SET , DOCKER_SWARM_RESOURCE ",  # names are trimmed
     {"NVIDIA_VISIBLE_DEVICES": "all", "DOCKER_SWARM_RESOURCE": "GPU1"}, ("GPU1",)),
    (" ", {"NVIDIA_VISIBLE_DEVICES": "all", "DOCKER_SWARM_RESOURCE": "GPU1"}, ("all",)),  # blank: none
])
def test_swarm_resource_list_table(swarm, env, want):
    assert parse(env, privileged=True, swarm_resource=swarm).devices == want


@pytest.mark.parametrize("supported, want", [
    ("all", ALL),
    ("compute,utility", DEFAULT),
    ("", frozenset()),
])
def test_supported_capabilities_setting_table(supported, want):
    """supported-driver-capabilities as the hook reads it; `all` in the image then grants them."""
    env = {"NVIDIA_VISIBLE_DEVICES": "0", "NVIDIA_DRIVER_CAPABILITIES": "all"}
    assert parse(env, supported_driver_capabilities=supported).capabilities == want
