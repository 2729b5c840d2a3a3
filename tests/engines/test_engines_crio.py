"""CRI-O: drop-in under crio.conf.d copying the default runtime's table; main-file mode."""

from __future__ import annotations

import difflib
import tomllib

from nct.engines.configure import apply, plan_configure, plan_unconfigure
from nct.engines.model import EngineRequest, RuntimeEntry

RT = "/usr/bin/nvidia-container-runtime"
CRIO = """# CRI-O configuration (operator)
[crio]
  log_dir = "/var/log/crio/pods"

[crio.runtime]
  default_runtime = "crun"
  # conmon settings below
  conmon_cgroup = "pod"

[crio.runtime.runtimes.crun]
  runtime_path = "/usr/bin/crun"
  runtime_root = "/run/crun"
  monitor_path = "/usr/libexec/crio/conmon"
  allowed_annotations = ["io.containers.trace-syscall"]

[crio.runtime.runtimes.runc]
  runtime_path = "/usr/sbin/runc"

[crio.image]
  pause_image = "registry.k8s.io/pause:3.9"
"""


def req(config, drop_in=None, **kw) -> EngineRequest:
    kw.setdefault("runtimes", (RuntimeEntry("nvidia", RT),))
    return EngineRequest(engine="crio", config=str(config), drop_in=drop_in and str(drop_in), **kw)


def test_drop_in_copies_default_runtime(tmp_path):
    f = tmp_path / "crio.conf"
    f.write_text(CRIO)
    drop = tmp_path / "crio.conf.d" / "99-nvidia.toml"
    apply(plan_configure(req(f, drop, set_as_default=True)))
    assert f.read_text() == CRIO
    d = tomllib.loads(drop.read_text())
    assert d == {"crio": {"runtime": {"default_runtime": "nvidia", "runtimes": {"nvidia": {
        "runtime_path": RT, "runtime_root": "/run/crun", "monitor_path": "/usr/libexec/crio/conmon",
        "allowed_annotations": ["io.containers.trace-syscall"], "runtime_type": "oci"}}}}}
    assert apply(plan_configure(req(f, drop, set_as_default=True))) == []
    apply(plan_unconfigure(req(f, drop)))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["crio.conf"]


def test_empty_drop_in_edits_main_file_keeping_the_rest(tmp_path):
    f = tmp_path / "crio.conf"
    f.write_text(CRIO)
    apply(plan_configure(req(f, "", set_as_default=True)))
    new = f.read_text()
    removed = [l for l in difflib.ndiff(CRIO.splitlines(), new.splitlines()) if l.startswith("- ")]
    assert removed == ['-   default_runtime = "crun"']
    cfg = tomllib.loads(new)
    assert cfg["crio"]["image"]["pause_image"] == "registry.k8s.io/pause:3.9"
    assert cfg["crio"]["runtime"]["runtimes"]["nvidia"]["runtime_path"] == RT
    assert '\n[crio.runtime.runtimes.nvidia]\n  runtime_path = "/usr/bin/nvidia-container-runtime"\n' in new
    apply(plan_unconfigure(req(f, "")))
    assert f.read_text() == CRIO


def test_no_source_runtime_gives_minimal_table(tmp_path):
    f = tmp_path / "crio.conf"
    drop = tmp_path / "crio.conf.d" / "99-nvidia.toml"
    apply(plan_configure(req(f, drop)))
    assert tomllib.loads(drop.read_text()) == {"crio": {"runtime": {"runtimes": {"nvidia": {
        "runtime_path": RT, "runtime_type": "oci"}}}}}
    assert not f.exists()


def test_nvidia_default_is_not_copied(tmp_path):
    f = tmp_path / "crio.conf"
    f.write_text('[crio.runtime]\ndefault_runtime = "nvidia"\n[crio.runtime.runtimes.nvidia]\nruntime_path = "/x"\n'
                 '[crio.runtime.runtimes.runc]\nruntime_path = "/usr/sbin/runc"\nruntime_root = "/run/runc"\n')
    drop = tmp_path / "d" / "99-nvidia.toml"
    apply(plan_configure(req(f, drop)))
    assert tomllib.loads(drop.read_text())["crio"]["runtime"]["runtimes"]["nvidia"] == {
        "runtime_path": RT, "runtime_root": "/run/runc", "runtime_type": "oci"}
