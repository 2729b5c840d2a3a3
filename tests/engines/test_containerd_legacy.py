"""--use-legacy-config (CONTAINERD_USE_LEGACY_CONFIG) on containerd config version 1, as
upstream's ConfigV1 (pkg/config/engine/containerd/config_v1.go and the installer's v1
lifecycle tests) does it: the default runtime is the pre-1.3 `containerd.default_runtime`
table running the nvidia binary (BinaryName and Runtime), created from --runtime-type when
absent, default_runtime_name untouched; without the flag a v1 config gets
default_runtime_name.  Undo puts the file back byte for byte.  Our own data, upstream's
expectations."""

from __future__ import annotations

import shutil
import subprocess
import tomllib

import pytest

from nct.engines.configure import apply, plan_configure, plan_unconfigure
from nct.engines.model import EngineRequest, RuntimeEntry

NV = "/opt/tk/nvidia-container-runtime"
RUNTIMES = (RuntimeEntry("nvidia", NV), RuntimeEntry("nvidia-cdi", NV + ".cdi"),
            RuntimeEntry("nvidia-legacy", NV + ".legacy"))
V1_RUNC = ('version = 1\n\n[plugins]\n  [plugins.cri]\n    [plugins.cri.containerd]\n'
           '      default_runtime_name = "runc"\n\n      [plugins.cri.containerd.runtimes]\n'
           '        [plugins.cri.containerd.runtimes.runc]\n          runtime_type = "io.containerd.runtime.v1.linux"\n\n'
           '          [plugins.cri.containerd.runtimes.runc.options]\n            Runtime = "/usr/bin/runc"\n')
V1_OLD_DEFAULT = ('version = 1\n[plugins.cri.containerd.default_runtime]\nruntime_type = "io.containerd.runtime.v1.linux"\n'
                  'runtime_engine = "/usr/bin/runc"\n[plugins.cri.containerd.default_runtime.options]\n'
                  'SystemdCgroup = true\n')
TEMPLATE = {"runtime_root": "", "runtime_engine": "", "privileged_without_host_devices": False}


def _ctd(doc: dict) -> dict:
    return doc["plugins"]["cri"]["containerd"]


# (id, before, legacy, set as default, runtime type,
#  want default_runtime (None: absent), want default_runtime_name (None: absent))
CASES = [
    ("legacy-default-new-table", V1_RUNC, True, True, "io.containerd.runc.v2",
     {"runtime_type": "io.containerd.runc.v2", **TEMPLATE, "options": {"BinaryName": NV, "Runtime": NV}}, "runc"),
    ("legacy-default-runtime-type", V1_RUNC, True, True, "io.containerd.runc.v1",
     {"runtime_type": "io.containerd.runc.v1", **TEMPLATE, "options": {"BinaryName": NV, "Runtime": NV}}, "runc"),
    ("legacy-default-keeps-existing-table", V1_OLD_DEFAULT, True, True, "io.containerd.runc.v2",
     {"runtime_type": "io.containerd.runtime.v1.linux", "runtime_engine": "/usr/bin/runc",
      "options": {"SystemdCgroup": True, "BinaryName": NV, "Runtime": NV}}, None),
    ("legacy-not-default", V1_RUNC, True, False, "io.containerd.runc.v2", None, "runc"),
    ("v1-not-legacy-uses-name", V1_RUNC, False, True, "io.containerd.runc.v2", None, "nvidia"),
    ("legacy-empty-file-is-v1", "", True, True, "io.containerd.runc.v2",
     {"runtime_type": "io.containerd.runc.v2", **TEMPLATE, "options": {"BinaryName": NV, "Runtime": NV}}, None),
]


@pytest.mark.parametrize("before, legacy, default, rtype, want_table, want_name", [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_legacy_config_table(tmp_path, before, legacy, default, rtype, want_table, want_name):
    path = tmp_path / "config.toml"
    path.write_text(before)
    req = EngineRequest(engine="containerd", config=str(path), runtimes=RUNTIMES, set_as_default=default,
                        legacy_config=legacy, runtime_type=rtype)
    apply(plan_configure(req))
    doc = tomllib.loads(path.read_text())
    assert doc["version"] == 1
    ctd = _ctd(doc)
    assert ctd.get("default_runtime") == want_table
    assert ctd.get("default_runtime_name") == want_name
    for r in RUNTIMES:  # version 1: both keys name the binary
        assert ctd["runtimes"][r.name]["options"]["BinaryName"] == r.path
        assert ctd["runtimes"][r.name]["options"]["Runtime"] == r.path
    apply(plan_unconfigure(req))
    assert (path.read_text() if path.exists() else "") == before


def test_unconfigure_without_record_drops_our_legacy_default(tmp_path):
    """Upstream's RemoveRuntime: a default_runtime running the removed runtime's binary goes."""
    path = tmp_path / "config.toml"
    path.write_text(V1_RUNC)
    req = EngineRequest(engine="containerd", config=str(path), runtimes=RUNTIMES, set_as_default=True,
                        legacy_config=True)
    apply(plan_configure(req))
    from nct.engines.containerd import remove

    text = remove(req, str(path), path.read_text(), {})
    assert "default_runtime]" not in text and "nvidia" not in text


@pytest.mark.skipif(not shutil.which("containerd"), reason="containerd not installed")
def test_containerd_reads_the_legacy_default(tmp_path):
    """The real containerd (1.6) loads the v1 file and takes default_runtime as written."""
    path = tmp_path / "config.toml"
    req = EngineRequest(engine="containerd", config=str(path), runtimes=RUNTIMES, set_as_default=True,
                        legacy_config=True)
    apply(plan_configure(req))
    res = subprocess.run(["containerd", "--config", str(path), "config", "dump"], capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 0, res.stderr
    cri = tomllib.loads(res.stdout)["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]
    assert cri["default_runtime"]["options"]["BinaryName"] == NV
    assert cri["default_runtime"]["runtime_type"] == "io.containerd.runc.v2"
    assert cri["runtimes"]["nvidia"]["options"]["BinaryName"] == NV
