"""`nct install` run from the toolkit (as the installer image runs it) copies that toolkit:
launchers hard-linked in the root, the config.toml the launchers find, an in-place upgrade,
a clean uninstall, and a one-line error for a tree that is not a toolkit."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}


def install(toolkit: Path, root: Path, tmp: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(toolkit / "nct"), "install", "--toolkit-root", str(root), "--runtime", "docker",
                           "--config", str(tmp / "daemon.json"), "--restart-mode", "none", "--no-daemon",
                           "--toolkit-pid-file", str(tmp / "toolkit.pid"), *extra],
                          capture_output=True, text=True, env=ENV)


def test_install_upgrade_uninstall(toolkit, tmp_path):
    root = tmp_path / "host/toolkit"
    r = install(toolkit, root, tmp_path)
    assert r.returncode == 0, r.stderr
    names = json.loads((toolkit / "python/NCT-TOOLKIT").read_text())["commands"]
    assert len({(root / n).stat().st_ino for n in names}) == 1
    assert sorted(p.name for p in root.iterdir()) == sorted([*names, "python", ".config", ".nct-install.json"])
    # the launchers read the toolkit's own config.toml (XDG_CONFIG_HOME=root/.config)
    r = subprocess.run([str(root / "nvidia-ctk"), "config"], capture_output=True, text=True, env=ENV)
    assert f'path = "{root}/nvidia-container-runtime-hook"' in r.stdout, r.stdout + r.stderr
    daemon = json.loads((tmp_path / "daemon.json").read_text())
    assert daemon["runtimes"]["nvidia-legacy"]["path"] == str(root / "nvidia-container-runtime.legacy")

    r = install(toolkit, root, tmp_path)  # again, over the running install: an upgrade
    assert r.returncode == 0, r.stderr
    assert not list(root.glob(".python.*")) and not list(root.glob(".*.new"))
    assert subprocess.run([str(root / "nvidia-container-runtime"), "--version"], capture_output=True,
                          env=ENV).returncode == 0

    r = subprocess.run([str(toolkit / "nct"), "install", "--toolkit-root", str(root), "--runtime", "docker",
                        "--config", str(tmp_path / "daemon.json"), "--uninstall"], capture_output=True, text=True,
                       env=ENV)
    assert r.returncode == 0, r.stderr
    assert not root.exists()


def test_install_refuses_a_tree_that_is_not_a_toolkit(toolkit, tmp_path):
    bogus = tmp_path / "bogus"
    bogus.mkdir()
    root = tmp_path / "host/toolkit"
    r = install(toolkit, root, tmp_path, "--toolkit", str(bogus))
    assert r.returncode == 1 and r.stderr.count("\n") == 1, r.stderr
    assert f"{bogus}: not an nct toolkit" in r.stderr
    assert not root.exists() and not (tmp_path / "daemon.json").exists()
