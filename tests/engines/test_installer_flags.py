"""Every flag of upstream's `nvidia-ctk-installer`, with every alias and environment
variable, is accepted by nct's `nvidia-ctk-installer` under the same names, with the same
variables in the same order (the first one set wins).

The table was taken from upstream NVIDIA/nvidia-container-toolkit as stored in the code
index on 2026-11-24: cmd/nvidia-ctk-installer/main.go (the urfave/cli v3 version with the
NRI plugin flags, the newest), toolkit/toolkit.go (commit 14806f0), container/runtime/
runtime.go (df4c87b), container/runtime/containerd/containerd.go (11d7005), and the crio,
drop-in and config-source flags of the v1.17/v1.18 runtime package.  Upstream has no
`--containerd-drop-in-dir` flag: `containerd-drop-in-config` is the name of a hostPath
volume in the GPU Operator's transforms test, which sets RUNTIME_DROP_IN_CONFIG(_HOST_PATH).
Flags nct does not implement (the NRI plugin) are accepted, checked as upstream checks
them, and warned about (docs/installer.md)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from nct.cli.installer import FLAGS, installer_command, nri_warnings, resolve
from nct.errors import EngineConfigError

BIN = Path(sys.executable).parent

# (command-line names: the name first, then aliases; env vars in priority order; kind; a value)
UPSTREAM = [
    # main.go
    ("--no-daemon -n", "NO_DAEMON", "bool", "true"),
    ("--no-runtime-config", "NO_RUNTIME_CONFIG", "bool", "true"),
    ("--enable-nri-plugin -p", "ENABLE_NRI_PLUGIN", "bool", "true"),
    ("--nri-plugin-index", "NRI_PLUGIN_INDEX", "str", "12"),
    ("--nri-socket", "NRI_SOCKET", "str", "/run/nri/nri.sock"),
    ("--nri-namespace", "NRI_NAMESPACE", "str", "gpu-operator"),
    ("--runtime -r", "RUNTIME", "str", "containerd"),
    ("--toolkit-install-dir --root", "TOOLKIT_INSTALL_DIR ROOT", "str", "/opt/nvidia"),
    ("--toolkit-source-root", "TOOLKIT_SOURCE_ROOT", "str", "/artifacts/deb"),
    ("--toolkit-package-type", "TOOLKIT_PACKAGE_TYPE", "str", "deb"),
    ("--pid-file", "TOOLKIT_PID_FILE PID_FILE", "str", "/run/x/toolkit.pid"),
    ("--debug", "TOOLKIT_DEBUG", "bool", "true"),
    # toolkit/toolkit.go
    ("--driver-root --nvidia-driver-root", "NVIDIA_DRIVER_ROOT DRIVER_ROOT", "str", "/run/nvidia/driver"),
    ("--driver-root-ctr-path", "DRIVER_ROOT_CTR_PATH", "str", "/driver-root"),
    ("--dev-root", "NVIDIA_DEV_ROOT DEV_ROOT", "str", "/"),
    ("--dev-root-ctr-path", "DEV_ROOT_CTR_PATH", "str", "/host"),
    ("--nvidia-container-runtime.debug --nvidia-container-runtime-debug", "NVIDIA_CONTAINER_RUNTIME_DEBUG", "str",
     "/var/log/nvidia-container-runtime.log"),
    ("--nvidia-container-runtime.log-level --nvidia-container-runtime-debug-log-level",
     "NVIDIA_CONTAINER_RUNTIME_LOG_LEVEL", "str", "debug"),
    ("--nvidia-container-runtime.mode --nvidia-container-runtime-mode", "NVIDIA_CONTAINER_RUNTIME_MODE", "str", "cdi"),
    ("--nvidia-container-runtime.modes.cdi.default-kind", "NVIDIA_CONTAINER_RUNTIME_MODES_CDI_DEFAULT_KIND", "str",
     "management.nvidia.com/gpu"),
    ("--nvidia-container-runtime.modes.cdi.annotation-prefixes",
     "NVIDIA_CONTAINER_RUNTIME_MODES_CDI_ANNOTATION_PREFIXES", "list", "cdi.k8s.io/"),
    ("--nvidia-container-runtime.runtimes", "NVIDIA_CONTAINER_RUNTIME_RUNTIMES", "list", "runc,crun"),
    ("--nvidia-container-runtime-hook.skip-mode-detection", "NVIDIA_CONTAINER_RUNTIME_HOOK_SKIP_MODE_DETECTION",
     "bool", "false"),
    ("--nvidia-container-cli.debug --nvidia-container-cli-debug", "NVIDIA_CONTAINER_CLI_DEBUG", "str",
     "/var/log/nvidia-container-cli.log"),
    ("--accept-nvidia-visible-devices-envvar-when-unprivileged",
     "ACCEPT_NVIDIA_VISIBLE_DEVICES_ENVVAR_WHEN_UNPRIVILEGED", "bool", "false"),
    ("--accept-nvidia-visible-devices-as-volume-mounts", "ACCEPT_NVIDIA_VISIBLE_DEVICES_AS_VOLUME_MOUNTS", "bool",
     "true"),
    ("--cdi-enabled --enable-cdi", "CDI_ENABLED ENABLE_CDI", "bool", "true"),
    ("--cdi-output-dir", "CDI_OUTPUT_DIR", "str", "/var/run/cdi"),
    ("--cdi-kind", "CDI_KIND", "str", "example.com/gpu"),
    ("--ignore-errors", "", "bool", "true"),
    ("--create-device-nodes", "CREATE_DEVICE_NODES", "list", "none"),
    ("--opt-in-features", "NVIDIA_CONTAINER_TOOLKIT_OPT_IN_FEATURES", "list", "disable-imex-channel-creation"),
    # container/runtime/runtime.go and the drop-in / config-source options
    ("--config", "RUNTIME_CONFIG CONTAINERD_CONFIG DOCKER_CONFIG", "str", "/etc/containerd/config.toml"),
    ("--socket", "RUNTIME_SOCKET CONTAINERD_SOCKET DOCKER_SOCKET", "str", "/run/containerd/containerd.sock"),
    ("--restart-mode", "RUNTIME_RESTART_MODE", "str", "none"),
    ("--enable-cdi-in-runtime", "RUNTIME_ENABLE_CDI", "bool", "true"),
    ("--host-root", "HOST_ROOT_MOUNT", "str", "/host"),
    ("--runtime-name --nvidia-runtime-name --runtime-class",
     "NVIDIA_RUNTIME_NAME CONTAINERD_RUNTIME_CLASS DOCKER_RUNTIME_NAME", "str", "nvidia"),
    ("--set-as-default", "NVIDIA_RUNTIME_SET_AS_DEFAULT CONTAINERD_SET_AS_DEFAULT DOCKER_SET_AS_DEFAULT", "bool",
     "false"),
    ("--drop-in-config", "RUNTIME_DROP_IN_CONFIG", "str", "/runtime/config-dir.d/99-nvidia.toml"),
    ("--drop-in-config-host-path", "RUNTIME_DROP_IN_CONFIG_HOST_PATH", "str", "/etc/containerd/conf.d/99-nvidia.toml"),
    ("--config-source", "RUNTIME_CONFIG_SOURCES RUNTIME_CONFIG_SOURCE", "list", "command,file"),
    ("--executable-path", "RUNTIME_EXECUTABLE_PATH", "str", "/usr/bin/containerd"),
    # container/runtime/containerd
    ("--use-legacy-config", "CONTAINERD_USE_LEGACY_CONFIG", "bool", "true"),
    ("--runtime-type", "CONTAINERD_RUNTIME_TYPE", "str", "io.containerd.runc.v1"),
    ("--nvidia-container-runtime-modes.cdi.annotation-prefixes",
     "NVIDIA_CONTAINER_RUNTIME_MODES_CDI_ANNOTATION_PREFIXES", "list", "cdi.k8s.io/"),
    ("--runtime-config-override", "RUNTIME_CONFIG_OVERRIDE CONTAINERD_RUNTIME_CONFIG_OVERRIDE", "str",
     '{"SystemdCgroup": true}'),
    # container/runtime/crio
    ("--hooks-dir", "CRIO_HOOKS_DIR", "str", "/usr/share/containers/oci/hooks.d"),
    ("--hook-filename", "CRIO_HOOK_FILENAME", "str", "oci-nvidia-hook.json"),
    ("--config-mode", "CRIO_CONFIG_MODE", "str", "hook"),
]


def _flag(name: str):
    found = [f for f in FLAGS if name in f.names]
    assert found, f"upstream's {name} is not an nct flag"
    return found[0]


@pytest.mark.parametrize("names, envs, kind, value", UPSTREAM, ids=[u[0].split()[0] for u in UPSTREAM])
def test_every_upstream_flag_and_alias_is_accepted(names, envs, kind, value):
    for name in names.split():
        flag = _flag(name)
        assert flag.kind == kind
        args = [f"{name}={value}"] if name.startswith("--") else [name, value]
        ctx = installer_command.make_context("nvidia-ctk-installer", args)
        got = ctx.params[flag.dest]
        assert got not in (None, ()), name
        assert resolve(ctx.params, {}).values[flag.dest] not in (None, "", [])


@pytest.mark.parametrize("names, envs, kind, value", [u for u in UPSTREAM if u[1]],
                         ids=[u[0].split()[0] for u in UPSTREAM if u[1]])
def test_every_upstream_env_var_sets_the_same_flag_in_the_same_order(names, envs, kind, value):
    flag = _flag(names.split()[0])
    assert list(flag.envs) == envs.split()  # the same variables, the same priority
    for env in envs.split():
        r = resolve({}, {env: value})
        assert flag.dest in r.was_set and r.env_of[flag.dest] == env


def test_nri_flags_are_checked_as_upstream_and_warned_about():
    assert nri_warnings(resolve({}, {})) == []
    with pytest.raises(EngineConfigError, match=r"range \[0,99\]"):
        nri_warnings(resolve({}, {"NRI_PLUGIN_INDEX": "100"}))
    with pytest.raises(EngineConfigError, match="NRI namespace must be specified"):
        nri_warnings(resolve({}, {"ENABLE_NRI_PLUGIN": "true"}))
    (w,) = nri_warnings(resolve({}, {"ENABLE_NRI_PLUGIN": "true", "NRI_NAMESPACE": "gpu-operator"}))
    assert "not supported by nct" in w


def test_enable_nri_plugin_runs_with_one_warning(tmp_path):
    """The real command: the NRI plugin asked for, the install goes on with a warning."""
    env = {"PATH": os.environ["PATH"], "NO_DAEMON": "true", "NO_RUNTIME_CONFIG": "true", "ROOT": str(tmp_path),
           "TOOLKIT_PID_FILE": str(tmp_path / "run/toolkit.pid"), "NVIDIA_DRIVER_ROOT": "/",
           "DRIVER_ROOT_CTR_PATH": "/", "ENABLE_NRI_PLUGIN": "true", "NRI_NAMESPACE": "gpu-operator"}
    r = subprocess.run([str(BIN / "nvidia-ctk-installer")], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stderr.count("NRI plugin") == 1 and "warning:" in r.stderr
    assert (tmp_path / "toolkit/nvidia-ctk").exists()
