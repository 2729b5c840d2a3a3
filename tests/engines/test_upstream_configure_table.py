"""Upstream's `nvidia-ctk runtime configure` lifecycle expectations (its configure table),
restated as our own table: the real nvidia-ctk on files under a temporary root."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

CTK = str(Path(sys.executable).parent / "nvidia-ctk")
CRI = 'plugins."io.containerd.grpc.v1.cri".containerd'

RUNC_V2 = f'''version = 2

[plugins]
  [plugins."io.containerd.grpc.v1.cri"]
    [{CRI}]
      default_runtime_name = "runc"

      [{CRI}.runtimes]
        [{CRI}.runtimes.runc]
          runtime_type = "io.containerd.runc.v2"

          [{CRI}.runtimes.runc.options]
            BinaryName = "/usr/bin/runc"
'''
CRIO_WITH_NVIDIA = '''[crio]
[crio.runtime]
default_runtime = "runc"

[crio.runtime.runtimes.runc]
runtime_path = "/usr/bin/runc"
runtime_type = "oci"

[crio.runtime.runtimes.nvidia]
runtime_path = "/old/path/nvidia-container-runtime"
runtime_type = "oci"
'''
CTD = ["--runtime", "containerd", "--config", "{r}/etc/containerd/config.toml",
       "--drop-in-config", "{r}/etc/containerd/conf.d/99-nvidia.toml"]
CRIO = ["--runtime", "crio", "--config", "{r}/etc/crio/crio.conf", "--drop-in-config", "{r}/etc/crio/conf.d/99-nvidia.toml"]
DOCKER = ["--runtime", "docker", "--config", "{r}/etc/docker/daemon.json"]

ROWS = [
    # description, args, files before, files after: path -> substrings (None: must not exist)
    ("containerd: imports kept, drop-in glob added", CTD,
     {"etc/containerd/config.toml": 'version = 2\nimports = ["/foo/bar/*.toml"]\n'},
     {"etc/containerd/config.toml": ['"/foo/bar/*.toml"', '"{r}/etc/containerd/conf.d/*.toml"', "version = 2"]}),
    ("containerd: no config yet", CTD, {},
     {"etc/containerd/config.toml": ["imports", "version = 2"],
      "etc/containerd/conf.d/99-nvidia.toml": [f"[{CRI}.runtimes.nvidia]",
                                                'BinaryName = "/usr/bin/nvidia-container-runtime"']}),
    ("containerd: set as default", CTD + ["--nvidia-set-as-default"], {"etc/containerd/config.toml": RUNC_V2},
     {"etc/containerd/config.toml": ["imports"],
      "etc/containerd/conf.d/99-nvidia.toml": ['default_runtime_name = "nvidia"', f"[{CRI}.runtimes.nvidia]"]}),
    ("containerd: enable CDI", CTD + ["--cdi.enabled"], {},
     {"etc/containerd/conf.d/99-nvidia.toml": ["enable_cdi = true"]}),
    ("containerd: custom name and path", CTD + ["--nvidia-runtime-name", "gpu", "--nvidia-runtime-path",
                                                "/custom/path/nvidia-container-runtime"], {},
     {"etc/containerd/conf.d/99-nvidia.toml": [f"[{CRI}.runtimes.gpu]",
                                                'BinaryName = "/custom/path/nvidia-container-runtime"']}),
    ("crio: drop-in only", CRIO, {},
     {"etc/crio/crio.conf": None,
      "etc/crio/conf.d/99-nvidia.toml": ["[crio.runtime.runtimes.nvidia]",
                                         'runtime_path = "/usr/bin/nvidia-container-runtime"']}),
    ("crio: main config left, drop-in overrides", CRIO + ["--nvidia-set-as-default"],
     {"etc/crio/crio.conf": CRIO_WITH_NVIDIA},
     {"etc/crio/crio.conf": ["/old/path/nvidia-container-runtime"],
      "etc/crio/conf.d/99-nvidia.toml": ['default_runtime = "nvidia"',
                                         'runtime_path = "/usr/bin/nvidia-container-runtime"']}),
    ("docker: new file", DOCKER, {}, {"etc/docker/daemon.json": ['"nvidia"']}),
    ("docker: invalid config-mode is config-file", DOCKER + ["--config-mode", "invalid"], {},
     {"etc/docker/daemon.json": ['"nvidia"']}),
    ("oci-hook: hook file", ["--config-mode", "oci-hook", "--oci-hook-path",
                             "{r}/etc/containers/oci/hooks.d/99-nvidia.json"], {},
     {"etc/containers/oci/hooks.d/99-nvidia.json": ['"1.0.0"', '"prestart"', '"/usr/bin/nvidia-container-runtime-hook"',
                                                    '"always": true']}),
    ("dry-run: nothing written", ["--dry-run"] + CTD, {},
     {"etc/containerd/config.toml": None, "etc/containerd/conf.d/99-nvidia.toml": None}),
]


@pytest.mark.parametrize("description, args, before, after", ROWS, ids=[r[0] for r in ROWS])
def test_configure_lifecycle_table(tmp_path, description, args, before, after):
    r = str(tmp_path)
    for rel, text in before.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    res = subprocess.run([CTK, "runtime", "configure", *[a.format(r=r) for a in args]], capture_output=True,
                         text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    for rel, needles in after.items():
        path = tmp_path / rel
        if needles is None:
            assert not path.exists(), rel
            continue
        text = path.read_text()
        for n in needles:
            assert n.format(r=r) in text, (rel, n, text)
        assert "nvidia-cdi" not in text and "nvidia-legacy" not in text  # only the one runtime


def test_set_as_default_docker_keeps_other_keys(tmp_path):
    cfg = tmp_path / "daemon.json"
    cfg.write_text(json.dumps({"log-driver": "json-file", "log-opts": {"max-size": "100m"},
                               "storage-driver": "overlay2"}, indent=4))
    res = subprocess.run([CTK, "runtime", "configure", "--runtime", "docker", "--config", str(cfg),
                          "--nvidia-set-as-default"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    got = json.loads(cfg.read_text())
    assert (got["log-driver"], got["storage-driver"], got["default-runtime"]) == ("json-file", "overlay2", "nvidia")
    assert "nvidia" in got["runtimes"]


def test_invalid_runtime_is_an_error(tmp_path):
    res = subprocess.run([CTK, "runtime", "configure", "--runtime", "invalid"], capture_output=True, text=True,
                         timeout=60)
    assert res.returncode != 0 and "invalid" in res.stderr
