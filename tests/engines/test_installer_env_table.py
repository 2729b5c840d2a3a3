"""Upstream's documented installer settings (cmd/nvidia-ctk-installer main_test.go,
toolkit_test.go, the containerd / CRI-O runtime tests, the GPU Operator's env), as a table:
each row runs the real `nvidia-ctk-installer --no-daemon` with environment variables only,
in temp dirs, and compares the engine files it wrote (text) and the toolkit's config.toml
(values) with what upstream's installer writes for the same settings."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent
TK = "{root}/install/toolkit"


def _docker(name: str = "nvidia", default: bool = True, cdi: bool = False, extra: dict | None = None) -> dict:
    doc: dict = dict(extra or {})
    doc["runtimes"] = {**doc.get("runtimes", {}),
                       **{name + s: {"path": f"{TK}/{b}", "args": []} for s, b in
                          (("", "nvidia-container-runtime"), ("-cdi", "nvidia-container-runtime.cdi"),
                           ("-legacy", "nvidia-container-runtime.legacy"))}}
    if default:
        doc["default-runtime"] = name
    if cdi:
        doc["features"] = {"cdi": True}
    return doc


def _ctd_runtime(name: str, binary: str, runtime_type: str = "io.containerd.runc.v2", extra: str = "",
                 options: str = "", version: int = 2) -> str:
    """One runtime table as nct lays it out (upstream's template keys; options after)."""
    cri = {1: "cri", 2: '"io.containerd.grpc.v1.cri"'}[version]
    runtime = f"BinaryName = \"{TK}/{binary}\"\n" + (f"Runtime = \"{TK}/{binary}\"\n" if version == 1 else "")
    return (f"\n[plugins.{cri}.containerd.runtimes.{name}]\nruntime_type = \"{runtime_type}\"\nruntime_root = \"\"\n"
            f"runtime_engine = \"\"\nprivileged_without_host_devices = false\n{extra}\n"
            f"[plugins.{cri}.containerd.runtimes.{name}.options]\n{options}{runtime}")


def _ctd_runtimes(**kw) -> str:
    return "".join(_ctd_runtime(n, b, **kw) for n, b in (
        ("nvidia", "nvidia-container-runtime"), ("nvidia-cdi", "nvidia-container-runtime.cdi"),
        ("nvidia-legacy", "nvidia-container-runtime.legacy")))


HOOK_JSON = {
    "version": "1.0.0",
    "hook": {"path": f"{TK}/nvidia-container-runtime-hook", "args": ["nvidia-container-runtime-hook", "prestart"],
             "env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:" + TK]},
    "when": {"always": True, "commands": [".*"]},
    "stages": ["prestart"],
}
CRIO_RUNC = '[crio.runtime]\ndefault_runtime = "runc"\n\n[crio.runtime.runtimes.runc]\nruntime_path = "/usr/libexec/crio/runc"\nruntime_type = "oci"\nmonitor_path = "/usr/libexec/crio/conmon"\n'

# (id, env, files before, expected engine files: path -> text / JSON dict / None = absent,
#  expected config.toml values: dotted key -> value (absent key: its default), expected exit)
CASES = [
    ("docker-defaults", {}, {}, {"etc/docker/daemon.json": _docker()},
     {"nvidia-container-cli.root": "/run/nvidia/driver", "nvidia-container-cli.ldconfig": "@/run/nvidia/driver/sbin/ldconfig",
      "nvidia-container-cli.path": f"{TK}/nvidia-container-cli", "nvidia-ctk.path": f"{TK}/nvidia-ctk",
      "nvidia-container-runtime-hook.path": f"{TK}/nvidia-container-runtime-hook",
      "nvidia-container-runtime-hook.skip-mode-detection": True, "nvidia-container-runtime.runtimes": ["runc", "crun"],
      "nvidia-container-runtime.mode": "auto", "nvidia-container-runtime.log-level": "info",
      "accept-nvidia-visible-devices-envvar-when-unprivileged": True,
      "accept-nvidia-visible-devices-as-volume-mounts": False}),
    ("docker-cdi-enabled", {"CDI_ENABLED": "true", "CREATE_DEVICE_NODES": "none", "USE_SIM": "1"}, {},
     {"etc/docker/daemon.json": _docker(cdi=True)}, {}),
    ("docker-enable-cdi-in-runtime-false-wins", {"ENABLE_CDI": "1", "RUNTIME_ENABLE_CDI": "false",
                                                 "CREATE_DEVICE_NODES": "none", "USE_SIM": "1"}, {},
     {"etc/docker/daemon.json": _docker()}, {}),
    ("docker-cdi-no-output-dir-disables-cdi", {"CDI_ENABLED": "true", "CDI_OUTPUT_DIR": ""}, {},
     {"etc/docker/daemon.json": _docker()}, {}),
    ("docker-name-and-not-default", {"DOCKER_RUNTIME_NAME": "gpu", "DOCKER_SET_AS_DEFAULT": "false"}, {},
     {"etc/docker/daemon.json": _docker("gpu", default=False)}, {}),
    ("docker-first-env-wins", {"NVIDIA_RUNTIME_NAME": "first", "CONTAINERD_RUNTIME_CLASS": "second",
                               "DOCKER_RUNTIME_NAME": "third"}, {},
     {"etc/docker/daemon.json": _docker("first")}, {}),
    ("docker-low-level-runtimes-from-config",
     {}, {"etc/docker/daemon.json": '{"default-runtime": "crun", "runtimes": {"crun": {"path": "/opt/crun"}}}'},
     {"etc/docker/daemon.json": _docker(extra={"runtimes": {"crun": {"path": "/opt/crun"}}})},
     {"nvidia-container-runtime.runtimes": ["/opt/crun", "runc", "crun"]}),
    ("docker-config-toml-settings",
     {"NVIDIA_CONTAINER_RUNTIME_DEBUG": "/var/log/ncr.log", "NVIDIA_CONTAINER_RUNTIME_LOG_LEVEL": "debug",
      "NVIDIA_CONTAINER_RUNTIME_MODE": "cdi", "NVIDIA_CONTAINER_RUNTIME_MODES_CDI_DEFAULT_KIND": "management.nvidia.com/gpu",
      "NVIDIA_CONTAINER_RUNTIME_MODES_CDI_ANNOTATION_PREFIXES": "cdi.k8s.io/,nvidia.cdi.k8s.io/",
      "NVIDIA_CONTAINER_RUNTIME_RUNTIMES": "/usr/sbin/runc,crun", "NVIDIA_CONTAINER_CLI_DEBUG": "/var/log/nvc.log",
      "ACCEPT_NVIDIA_VISIBLE_DEVICES_ENVVAR_WHEN_UNPRIVILEGED": "false",
      "ACCEPT_NVIDIA_VISIBLE_DEVICES_AS_VOLUME_MOUNTS": "true", "NVIDIA_CONTAINER_RUNTIME_HOOK_SKIP_MODE_DETECTION": "0",
      "NVIDIA_CONTAINER_TOOLKIT_OPT_IN_FEATURES": "disable-imex-channel-creation", "DRIVER_ROOT": "/",
      "NVIDIA_DRIVER_ROOT": "/host-driver"}, {}, {"etc/docker/daemon.json": _docker()},
     {"nvidia-container-runtime.debug": "/var/log/ncr.log", "nvidia-container-runtime.log-level": "debug",
      "nvidia-container-runtime.mode": "cdi", "nvidia-container-runtime.modes.cdi.default-kind": "management.nvidia.com/gpu",
      "nvidia-container-runtime.modes.cdi.annotation-prefixes": ["cdi.k8s.io/", "nvidia.cdi.k8s.io/"],
      "nvidia-container-runtime.runtimes": ["/usr/sbin/runc", "crun"], "nvidia-container-cli.debug": "/var/log/nvc.log",
      "accept-nvidia-visible-devices-envvar-when-unprivileged": False,
      "accept-nvidia-visible-devices-as-volume-mounts": True,
      "nvidia-container-runtime-hook.skip-mode-detection": False,
      "features.disable-imex-channel-creation": True, "nvidia-container-cli.root": "/host-driver",
      "nvidia-container-cli.ldconfig": "@/host-driver/sbin/ldconfig"}),
    ("containerd-drop-in-host-path",
     {"RUNTIME": "containerd", "RUNTIME_DROP_IN_CONFIG": "{root}/pod/conf.d/99-nvidia.toml",
      "RUNTIME_DROP_IN_CONFIG_HOST_PATH": "/etc/containerd/conf.d/99-nvidia.toml", "CDI_ENABLED": "true",
      "CREATE_DEVICE_NODES": "none", "USE_SIM": "1"},
     {"etc/containerd/config.toml": "version = 2\n"},
     {"etc/containerd/config.toml": 'version = 2\nimports = ["/etc/containerd/conf.d/*.toml"]\n',
      "pod/conf.d/99-nvidia.toml": 'version = 2\n\n[plugins."io.containerd.grpc.v1.cri"]\nenable_cdi = true\n\n'
      '[plugins."io.containerd.grpc.v1.cri".containerd]\ndefault_runtime_name = "nvidia"\n'
      + _ctd_runtimes()}, {}),
    ("containerd-no-drop-in-runtime-type-annotations-override",
     {"RUNTIME": "containerd", "RUNTIME_DROP_IN_CONFIG": "", "CONTAINERD_RUNTIME_TYPE": "io.containerd.runc.v1",
      "NVIDIA_CONTAINER_RUNTIME_MODES_CDI_ANNOTATION_PREFIXES": "cdi.k8s.io/",
      "RUNTIME_CONFIG_OVERRIDE": '{"options": {"SystemdCgroup": true}}', "CONTAINERD_SET_AS_DEFAULT": "false"},
     {}, {"etc/containerd/config.toml": "version = 2\n" + _ctd_runtimes(
         runtime_type="io.containerd.runc.v1", extra='container_annotations = ["cdi.k8s.io/*"]\n',
         options="SystemdCgroup = true\n"),
         "etc/containerd/conf.d/99-nvidia.toml": None}, {}),
    ("containerd-legacy-config", {"RUNTIME": "containerd", "CONTAINERD_USE_LEGACY_CONFIG": "true"}, {},
     {"etc/containerd/config.toml": 'version = 1\n' + _ctd_runtimes(version=1) +
      '\n[plugins.cri.containerd.default_runtime]\nruntime_type = "io.containerd.runc.v2"\nruntime_root = ""\n'
      'runtime_engine = ""\nprivileged_without_host_devices = false\n\n[plugins.cri.containerd.default_runtime.options]\n'
      f'BinaryName = "{TK}/nvidia-container-runtime"\nRuntime = "{TK}/nvidia-container-runtime"\n',
      "etc/containerd/conf.d/99-nvidia.toml": None},
     {}),
    ("crio-config-drop-in", {"RUNTIME": "crio", "RUNTIME_CONFIG": "{root}/etc/crio/crio.conf",
                             "RUNTIME_DROP_IN_CONFIG": "{root}/etc/crio/crio.conf.d/99-nvidia.toml"},
     {"etc/crio/crio.conf": CRIO_RUNC},
     {"etc/crio/crio.conf": CRIO_RUNC, "etc/crio/crio.conf.d/99-nvidia.toml": "\n".join(
         f'[crio.runtime.runtimes.{n}]\nruntime_path = "{TK}/{b}"\nruntime_type = "oci"\n'
         'monitor_path = "/usr/libexec/crio/conmon"\n' for n, b in (
             ("nvidia", "nvidia-container-runtime"), ("nvidia-cdi", "nvidia-container-runtime.cdi"),
             ("nvidia-legacy", "nvidia-container-runtime.legacy"))).replace(
         "[crio.runtime.runtimes.nvidia]", '[crio.runtime]\ndefault_runtime = "nvidia"\n\n[crio.runtime.runtimes.nvidia]')},
     {"nvidia-container-runtime.runtimes": ["/usr/libexec/crio/runc", "runc", "crun"]}),
    ("crio-hook-mode", {"RUNTIME": "crio", "CRIO_CONFIG_MODE": "hook", "CRIO_HOOKS_DIR": "{root}/hooks.d",
                        "CRIO_HOOK_FILENAME": "nvidia.json"}, {},
     {"hooks.d/nvidia.json": HOOK_JSON, "etc/crio/crio.conf": None, "etc/crio/crio.conf.d/99-nvidia.toml": None}, {}),
    ("containerd-config-source-file-path",
     {"RUNTIME": "containerd", "RUNTIME_DROP_IN_CONFIG": "", "RUNTIME_CONFIG_SOURCES": "command,file={root}/dump.toml",
      "RUNTIME_EXECUTABLE_PATH": "/nonexistent/containerd"},
     {"dump.toml": 'version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd]\ndefault_runtime_name = "runc"\n'
      '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]\nruntime_type = "io.containerd.runc.v2"\n'
      '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]\nSystemdCgroup = true\n'
      'BinaryName = "/opt/runc"\n'},
     {"etc/containerd/config.toml": 'version = 2\n\n[plugins."io.containerd.grpc.v1.cri".containerd]\n'
      'default_runtime_name = "nvidia"\n' + "".join(
          f'\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.{n}]\nruntime_type = "io.containerd.runc.v2"\n\n'
          f'[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.{n}.options]\nSystemdCgroup = true\n'
          f'BinaryName = "{TK}/{b}"\n' for n, b in (
              ("nvidia", "nvidia-container-runtime"), ("nvidia-cdi", "nvidia-container-runtime.cdi"),
              ("nvidia-legacy", "nvidia-container-runtime.legacy")))},
     {"nvidia-container-runtime.runtimes": ["/opt/runc", "runc", "crun"]}),
    ("no-runtime-config", {"RUNTIME": "containerd", "NO_RUNTIME_CONFIG": "true"}, {},
     {"etc/containerd/config.toml": None, "etc/containerd/conf.d/99-nvidia.toml": None}, {}),
]


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    node = tmp_path_factory.mktemp("sim") / "node"
    r = subprocess.run([str(BIN / "nct"), "sim", "create", str(node), "--gpus", "2"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return node


def run_installer(tmp: Path, env: dict[str, str], *args: str, sim: Path | None = None) -> subprocess.CompletedProcess:
    """The installer with upstream's test settings: no daemon, no restart, everything under tmp
    (the engine config at its runtime-specific default path, moved under tmp)."""
    runtime = env.get("RUNTIME", "docker")
    config = {"docker": "etc/docker/daemon.json", "containerd": "etc/containerd/config.toml",
              "crio": "etc/crio/crio.conf"}.get(runtime, "etc/config")
    base = {"PATH": os.environ["PATH"], "TOOLKIT_INSTALL_DIR": f"{tmp}/install", "PID_FILE": f"{tmp}/run/toolkit.pid",
            "RUNTIME_RESTART_MODE": "none", "NO_DAEMON": "true", "CDI_OUTPUT_DIR": f"{tmp}/cdi",
            "RUNTIME_CONFIG": f"{tmp}/{config}", "DRIVER_ROOT_CTR_PATH": f"{tmp}/no-driver",
            "HOST_ROOT_MOUNT": f"{tmp}/no-host"}
    if runtime in ("containerd", "crio"):
        base["RUNTIME_DROP_IN_CONFIG"] = f"{tmp}/{os.path.dirname(config)}/" + (
            "conf.d/99-nvidia.toml" if runtime == "containerd" else "crio.conf.d/99-nvidia.toml")
    if env.pop("USE_SIM", None):
        base.update(DRIVER_ROOT_CTR_PATH=f"{sim}/root", NCT_PROC_ROOT=f"{sim}/root/proc")
    base.update({k: v.replace("{root}", str(tmp)) for k, v in env.items()})
    return subprocess.run([str(BIN / "nvidia-ctk-installer"), *args], capture_output=True, text=True, env=base)


# keys nct writes as upstream's commented suggestion when they hold the default
DEFAULTS = {"accept-nvidia-visible-devices-envvar-when-unprivileged": True,
            "accept-nvidia-visible-devices-as-volume-mounts": False}


def effective(config: dict, key: str):
    node = config
    for part in key.split("."):
        if part not in node and key in DEFAULTS:
            return DEFAULTS[key]
        node = node[part]
    return node


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_upstream_env_combinations(case, tmp_path, sim):
    _, env, before, expected, values = case
    for rel, text in before.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    r = run_installer(tmp_path, dict(env), sim=sim)
    assert r.returncode == 0, r.stderr
    for rel, want in expected.items():
        path = tmp_path / rel
        if want is None:
            assert not path.exists(), rel
        elif isinstance(want, dict):
            assert json.loads(path.read_text()) == json.loads(json.dumps(want).replace("{root}", str(tmp_path))), rel
        else:
            assert path.read_text() == want.replace("{root}", str(tmp_path)), rel
    config = tomllib.loads((tmp_path / "install/toolkit/.config/nvidia-container-runtime/config.toml").read_text())
    for key, want in values.items():
        want = json.loads(json.dumps(want).replace("{root}", str(tmp_path)))
        assert effective(config, key) == want, key
    if "CDI_ENABLED" in env or "ENABLE_CDI" in env:
        spec = tmp_path / "cdi/management.nvidia.com-gpu.yaml"
        assert spec.exists() == (env.get("CDI_OUTPUT_DIR") != ""), r.stderr
    unset = ("nvidia-container-runtime.debug", "nvidia-container-cli.debug")
    for key in unset:
        if key not in values:
            with pytest.raises(KeyError):
                effective(config, key)


def test_flag_beats_env_and_env_order(tmp_path):
    """The command line wins over every env var; of the env vars, the first one listed."""
    r = run_installer(tmp_path, {"RUNTIME": "containerd", "ROOT": f"{tmp_path}/second",
                                 "TOOLKIT_INSTALL_DIR": f"{tmp_path}/first", "RUNTIME_DROP_IN_CONFIG": "",
                                 "RUNTIME_CONFIG": f"{tmp_path}/etc/docker/daemon.json",
                                 "CONTAINERD_CONFIG": f"{tmp_path}/second.json"},
                      "--runtime=docker", "--runtime-name", "flag")
    assert r.returncode == 0, r.stderr
    daemon = json.loads((tmp_path / "etc/docker/daemon.json").read_text())  # RUNTIME_CONFIG beats CONTAINERD_CONFIG
    assert daemon["runtimes"]["flag"]["path"] == f"{tmp_path}/first/toolkit/nvidia-container-runtime"
    assert not (tmp_path / "second").exists() and not (tmp_path / "second.json").exists()


@pytest.mark.parametrize("env,message", [
    ({"PID_FILE": "{root}/run/installer.pid"}, "invalid toolkit.pid path"),
    ({"CDI_KIND": "nvidia.com"}, "--cdi-kind: invalid kind"),
    ({"NO_DAEMON": "maybe"}, "could not parse 'maybe' as a bool value from environment variable NO_DAEMON"),
    ({"RUNTIME": "podman"}, "unknown runtime 'podman'"),
    ({"RUNTIME_RESTART_MODE": "auto"}, "invalid restart mode 'auto'"),
    ({"CREATE_DEVICE_NODES": "all", "CDI_ENABLED": "true"}, "invalid --create-device-nodes value"),
    ({"CRIO_CONFIG_MODE": "oci", "RUNTIME": "crio"}, "invalid cri-o config mode"),
    ({"TOOLKIT_INSTALL_DIR": ""}, "must be an absolute path"),
])
def test_bad_settings_are_one_line_errors_and_change_nothing(tmp_path, env, message):
    r = run_installer(tmp_path, env)
    assert r.returncode == 1 and message in r.stderr.strip().splitlines()[-1], r.stderr
    assert not any(p.is_file() for p in tmp_path.rglob("*")), list(tmp_path.rglob("*"))
