"""The installer against a tampered host: it runs as root with the host's dirs mounted, and
what it finds there (the toolkit dir's contents, its manifest, the engine's config, the pid
file, the drop-in) may have been planted by a less-privileged user or a container.  Nothing it
writes or removes may land outside its own files through a symlink, a manifest may not name
host files, and a FIFO or device where a file is read is an error, not a hang."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from nct.engines.bundle import Installed
from nct.engines.toolkit import MARKER, copy_toolkit

BIN = Path(sys.executable).parent
DAEMON_JSON = '{\n  "log-level": "warn"\n}\n'


def install(tmp: Path, *extra: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "nct"), "install", "--toolkit-root", str(tmp / "toolkit"), "--runtime", "docker",
                           "--config", str(tmp / "daemon.json"), "--restart-mode", "none", "--no-daemon",
                           "--toolkit-pid-file", str(tmp / "run/toolkit.pid"), *extra],
                          capture_output=True, text=True, timeout=timeout)


def uninstall(tmp: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "nct"), "install", "--toolkit-root", str(tmp / "toolkit"), "--uninstall"],
                          capture_output=True, text=True, timeout=120)


def victims(tmp: Path) -> dict[str, Path]:
    """Host files outside the toolkit dir that a planted link or manifest points at."""
    host = tmp / "host"
    made = {"config": host / "etc/nvidia-container-runtime/config.toml", "lib": host / "usr/lib/python/keep.py",
            "file": host / "etc/shadow", "spec": host / "etc/other.yaml", "wrapper": host / "etc/cron-job"}
    for p in made.values():
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(f"host file {p.name}\n")
    return made


def intact(v: dict[str, Path]) -> bool:
    return all(p.read_text() == f"host file {p.name}\n" for p in v.values())


def test_undo_never_follows_a_link_planted_in_the_toolkit_dir(tmp_path):
    """While the pod runs, dirs of the toolkit are swapped for links to host dirs: the undo
    removes the links' names at most, never what they point at."""
    (tmp_path / "daemon.json").write_text(DAEMON_JSON)
    r = install(tmp_path)
    assert r.returncode == 0, r.stderr
    root = tmp_path / "toolkit"
    v = victims(tmp_path)
    assert (root / ".config/nvidia-container-runtime/config.toml").is_file() and (root / "lib/python").is_dir()
    os.rename(root / ".config", tmp_path / "config.moved")
    os.symlink(tmp_path / "host/etc", root / ".config")  # .config/nvidia-container-runtime/config.toml -> host's
    os.rename(root / "lib", tmp_path / "lib.moved")
    os.symlink(tmp_path / "host/usr/lib", root / "lib")  # lib/python -> the host's python tree
    r = uninstall(tmp_path)
    assert r.returncode == 0, r.stderr
    assert intact(v)
    assert (tmp_path / "daemon.json").read_text() == DAEMON_JSON


def test_a_tampered_manifest_cannot_name_host_files(tmp_path):
    (tmp_path / "daemon.json").write_text(DAEMON_JSON)
    r = install(tmp_path)
    assert r.returncode == 0, r.stderr
    v = victims(tmp_path)
    manifest = tmp_path / "toolkit/.nct-install.json"
    data = json.loads(manifest.read_text())
    data["options"]["toolkit_dir"] = "/"
    data["installed"]["files"].append(str(v["file"]))
    data["installed"]["trees"].append(str(v["lib"].parent))
    data["cdi_specs"] = [str(v["spec"]), str(v["config"].with_suffix(".txt"))]
    v["config"].with_suffix(".txt").write_text("host file config.txt\n")
    manifest.write_text(json.dumps(data))
    r = uninstall(tmp_path)
    assert r.returncode == 0, r.stderr
    assert intact({k: p for k, p in v.items() if k != "spec"})  # a CDI spec may go (by its type), nothing else
    assert v["config"].with_suffix(".txt").exists()
    assert not (tmp_path / "toolkit").exists()


def test_install_never_writes_through_a_link_planted_in_the_toolkit_dir(tmp_path):
    """An existing toolkit dir (an upgrade) with links at the names the install writes."""
    (tmp_path / "daemon.json").write_text(DAEMON_JSON)
    v = victims(tmp_path)
    root = tmp_path / "toolkit"
    root.mkdir()
    os.symlink(tmp_path / "host/etc", root / ".config")
    os.symlink(tmp_path / "host/usr/lib", root / "lib")
    os.symlink(v["wrapper"], root / ".nvidia-ctk.tmp")  # the wrapper's temp name
    (root / "operator-notes.txt").write_text("mine\n")  # the operator's own file
    r = install(tmp_path)
    assert r.returncode == 0, r.stderr
    assert intact(v)
    assert not (root / ".config").is_symlink() and (root / ".config/nvidia-container-runtime/config.toml").is_file()
    assert not (root / "lib").is_symlink() and (root / "lib/python/nct").is_dir()
    r = uninstall(tmp_path)
    assert r.returncode == 0, r.stderr
    assert intact(v)
    assert sorted(os.listdir(root)) == ["operator-notes.txt"]  # the dir stays: not ours alone


def test_copy_toolkit_never_writes_through_a_planted_temp_link(tmp_path):
    """The self-contained tree's launchers go through `.NAME.new`; a (dangling) link planted
    there must be replaced, not written through."""
    src = tmp_path / "src"
    (src / "python").mkdir(parents=True)
    (src / MARKER).write_text(json.dumps({"commands": ["nvidia-ctk", "nct"]}))
    (src / "nvidia-ctk").write_text("#!/bin/sh\necho launcher\n")
    (src / "nct").write_text("#!/bin/sh\necho launcher\n")
    root = tmp_path / "toolkit"
    root.mkdir()
    target = tmp_path / "host/etc/cron.d/job"  # dangling: the copy would create it
    target.parent.mkdir(parents=True)
    os.symlink(target, root / ".nvidia-ctk.new")
    os.symlink(tmp_path / "host/etc", root / ".python.new")
    copy_toolkit(src, root, Installed())
    assert not target.exists() and os.listdir(tmp_path / "host/etc") == ["cron.d"]
    assert (root / "nvidia-ctk").read_text() == "#!/bin/sh\necho launcher\n"
    assert (root / "python" / "NCT-TOOLKIT").is_file()


def test_copy_toolkit_leaves_the_source_trees_passthrough_cache_behind(tmp_path):
    """python/.passthrough-cache is the source tree's own (the launcher keys it by that tree's
    files): a copy must not carry it (issue 14). Only that file: a same-named file deeper is data."""
    src = tmp_path / "src"
    (src / "python/lib").mkdir(parents=True)
    (src / MARKER).write_text(json.dumps({"commands": ["nct"]}))
    (src / "nct").write_text("#!/bin/sh\n")
    (src / "python/.passthrough-cache").write_text("nct-passthrough 2\nstale\n")
    (src / "python/lib/.passthrough-cache").write_text("data\n")
    root = tmp_path / "toolkit"
    copy_toolkit(src, root, Installed())
    assert not (root / "python/.passthrough-cache").exists()
    assert (root / "python/lib/.passthrough-cache").read_text() == "data\n"
    assert (root / "python/NCT-TOOLKIT").is_file()


def test_engine_config_that_is_a_fifo_is_one_clear_error(tmp_path):
    os.mkfifo(tmp_path / "daemon.json")
    r = install(tmp_path, timeout=60)  # read without a bound, it would block for ever
    assert r.returncode == 1
    assert r.stderr.strip().splitlines()[-1] == f"nct: {tmp_path}/daemon.json: not a regular file; " \
                                                "put the engine's config file there"
    assert sorted(os.listdir(tmp_path)) == ["daemon.json"]


def test_pid_file_that_is_a_fifo_is_one_clear_error(tmp_path):
    (tmp_path / "daemon.json").write_text(DAEMON_JSON)
    (tmp_path / "run").mkdir()
    os.mkfifo(tmp_path / "run/toolkit.pid")
    r = install(tmp_path, timeout=60)
    assert r.returncode == 1, r.stderr
    assert r.stderr.strip().splitlines()[-1] == f"nct: {tmp_path}/run/toolkit.pid: the pid file is not a " \
                                                "regular file; remove it"
    assert not (tmp_path / "toolkit").exists()


def test_drop_in_that_is_a_link_is_refused(tmp_path):
    (tmp_path / "config.toml").write_text("version = 2\n")
    v = victims(tmp_path)
    (tmp_path / "conf.d").mkdir()
    os.symlink(v["file"], tmp_path / "conf.d/99-nvidia.toml")
    r = subprocess.run([str(BIN / "nct"), "install", "--toolkit-root", str(tmp_path / "toolkit"), "--runtime",
                        "containerd", "--config", str(tmp_path / "config.toml"), "--drop-in-config",
                        str(tmp_path / "conf.d/99-nvidia.toml"), "--restart-mode", "none", "--no-daemon",
                        "--toolkit-pid-file", str(tmp_path / "run/toolkit.pid")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 1
    assert r.stderr.strip().splitlines()[-1] == f"nct: {tmp_path}/conf.d/99-nvidia.toml: the drop-in is a " \
                                                "symbolic link; remove it (nct writes a plain file)"
    assert intact(v) and (tmp_path / "config.toml").read_text() == "version = 2\n"
    assert not (tmp_path / "toolkit").exists()


def test_relative_host_root_is_refused(tmp_path):
    (tmp_path / "daemon.json").write_text(DAEMON_JSON)
    r = install(tmp_path, "--host-root", "host", timeout=60)
    assert r.returncode == 1 and r.stderr.strip().splitlines()[-1] == "nct: --host-root host: must be an absolute path"


def test_links_planted_at_the_backup_and_state_names_are_replaced(tmp_path):
    """`daemon.json.bak` and the state file beside it are nct's own: a link planted at either
    name is replaced by the file, never written through (the engine config itself may be a
    link, e.g. into a ConfigMap, and is written at its target)."""
    (tmp_path / "daemon.json").write_text(DAEMON_JSON)
    v = victims(tmp_path)
    os.symlink(v["file"], tmp_path / "daemon.json.nct-state.json")  # read through: not a state file, refused
    r = install(tmp_path)
    assert r.returncode == 1 and r.stderr.strip().splitlines()[-1] == \
        f"nct: {tmp_path}/daemon.json.nct-state.json: corrupt nct state file; remove it to continue"
    assert intact(v) and not (tmp_path / "toolkit").exists() and "keeping" not in r.stderr
    os.unlink(tmp_path / "daemon.json.nct-state.json")
    os.symlink(tmp_path / "host/etc/state", tmp_path / "daemon.json.nct-state.json")  # dangling: would be created
    os.symlink(tmp_path / "host/etc/new-file", tmp_path / "daemon.json.bak")
    r = install(tmp_path)
    assert r.returncode == 0, r.stderr
    assert intact(v) and not (tmp_path / "host/etc/new-file").exists() and not (tmp_path / "host/etc/state").exists()
    assert (tmp_path / "daemon.json.bak").read_text() == DAEMON_JSON and not (tmp_path / "daemon.json.bak").is_symlink()
    assert json.loads((tmp_path / "daemon.json.nct-state.json").read_text())["engine"] == "docker"
    r = uninstall(tmp_path)
    assert r.returncode == 0, r.stderr
    assert intact(v) and (tmp_path / "daemon.json").read_text() == DAEMON_JSON
    assert not os.path.lexists(tmp_path / "daemon.json.bak") and not os.path.lexists(tmp_path / "daemon.json.nct-state.json")


def test_engine_config_nested_too_deeply_is_one_clear_error(tmp_path):
    (tmp_path / "daemon.json").write_text("[" * 100000 + "]" * 100000)
    r = install(tmp_path, timeout=120)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert r.stderr.strip().splitlines()[-1] == f"nct: {tmp_path}/daemon.json: JSON nested too deeply (not a daemon.json)"
    assert sorted(os.listdir(tmp_path)) == ["daemon.json"]


def test_a_planted_state_file_cannot_make_the_undo_write_or_remove_host_files(tmp_path):
    """The state beside the engine config (what the undo restores) is a host file too: the
    paths it lists outside the engine config's dir are ignored."""
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/daemon.json").write_text(DAEMON_JSON)
    v = victims(tmp_path)
    r = install(tmp_path, "--config", str(tmp_path / "etc/daemon.json"))
    assert r.returncode == 0, r.stderr
    state_file = tmp_path / "etc/daemon.json.nct-state.json"
    state = json.loads(state_file.read_text())
    planted = tmp_path / "host/etc/cron.d/job"
    planted.parent.mkdir()
    state["files"][str(planted)] = {"original": "* * * * * root sh /tmp/x\n", "written": None, "backup": None}
    state["files"][str(v["file"])] = {"original": "root::0:0::/:/bin/sh\n",
                                      "written": __import__("hashlib").sha256(b"host file shadow\n").hexdigest(),
                                      "backup": str(v["config"])}
    state["dirs"].append(str(tmp_path / "host/etc/cron.d"))
    state_file.write_text(json.dumps(state))
    r = uninstall(tmp_path)
    assert r.returncode == 0, r.stderr
    assert intact(v) and not planted.exists() and planted.parent.is_dir()
    assert (tmp_path / "etc/daemon.json").read_text() == DAEMON_JSON
    assert sorted(os.listdir(tmp_path / "etc")) == ["daemon.json"]


def _first_format(manifest: dict, **override) -> dict:
    """The manifest as the first `nct install` wrote it (git d7ebf2e, Installation.save)."""
    opts = manifest["options"]
    old = {"options": {"toolkit_root": opts["toolkit_dir"], "engine": opts["runtime"], "driver_root": "/",
                       "set_as_default": opts["set_as_default"], "cdi": False, "cdi_output_dir": "/var/run/cdi",
                       "config": opts["config"], "drop_in": None, "pid_file": None, "socket": None,
                       "restart_mode": "none", "toolkit_pid_file": "/run/nvidia/toolkit.pid",
                       "runtime_name": opts["runtime_name"], "python": None, "toolkit": None},
           "installed": manifest["installed"], "engine_configured": manifest["engine_configured"], "cdi_spec": None}
    old["options"].update(override.pop("options", {}))
    old.update(override)
    return old


def test_uninstall_reads_the_first_releases_manifest(tmp_path):
    """Upgrade path: a toolkit dir left by the previous nct release is removed by
    `--uninstall` (its manifest's format predates the upstream-compatible installer)."""
    (tmp_path / "daemon.json").write_text(DAEMON_JSON)
    r = install(tmp_path)
    assert r.returncode == 0, r.stderr
    path = tmp_path / "toolkit/.nct-install.json"
    path.write_text(json.dumps(_first_format(json.loads(path.read_text())), indent=2) + "\n")
    r = uninstall(tmp_path)
    assert r.returncode == 0, r.stderr
    assert "corrupt" not in r.stderr
    assert not (tmp_path / "toolkit").exists()
    assert (tmp_path / "daemon.json").read_text() == DAEMON_JSON


def test_a_tampered_first_format_manifest_cannot_name_host_files(tmp_path):
    (tmp_path / "daemon.json").write_text(DAEMON_JSON)
    r = install(tmp_path)
    assert r.returncode == 0, r.stderr
    v = victims(tmp_path)
    path = tmp_path / "toolkit/.nct-install.json"
    old = _first_format(json.loads(path.read_text()), cdi_spec=str(v["file"]),
                        options={"toolkit_root": str(tmp_path / "host")},
                        installed={"files": [str(v["config"]), str(v["wrapper"])], "dirs": [str(tmp_path / "host")],
                                   "trees": [str(tmp_path / "host/usr")]})
    path.write_text(json.dumps(old))
    r = uninstall(tmp_path)
    assert r.returncode == 0, r.stderr
    assert intact(v)


def test_a_file_where_the_install_makes_a_dir_is_one_line(tmp_path):
    """`.config` planted as a regular file in the toolkit dir: one line naming it and the fix,
    non-zero exit, nothing written (found by review: it was a NotADirectoryError traceback)."""
    (tmp_path / "daemon.json").write_text(DAEMON_JSON)
    (tmp_path / "toolkit").mkdir()
    (tmp_path / "toolkit/.config").write_text("planted\n")
    r = install(tmp_path)
    assert r.returncode == 1
    assert "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and f"{tmp_path}/toolkit/.config: is not a directory" in lines[0], r.stderr
    assert "remove it" in lines[0]
    assert sorted(p.name for p in (tmp_path / "toolkit").iterdir()) == [".config"]
    assert (tmp_path / "toolkit/.config").read_text() == "planted\n"
    assert (tmp_path / "daemon.json").read_text() == DAEMON_JSON
