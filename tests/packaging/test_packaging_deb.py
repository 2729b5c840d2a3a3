"""The Debian package: built with dpkg-deb, installed with apt-get, run, purged.  The
install touches /usr/bin and /etc, so it is purged in every case (finally)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from toolkit_build import toolkit_tree

REPO = Path(__file__).resolve().parents[2]
COMMANDS = ("nct", "nvidia-ctk", "nvidia-container-runtime", "nvidia-container-runtime-hook",
            "nvidia-container-toolkit", "nvidia-container-cli", "nvidia-cdi-hook")


@pytest.fixture(scope="module")
def deb(tmp_path_factory) -> Path:
    if not shutil.which("dpkg-deb"):
        pytest.skip("needs dpkg-deb")
    out = tmp_path_factory.mktemp("deb")
    r = subprocess.run([sys.executable, str(REPO / "packaging/build_deb.py"), "--out", str(out),
                        "--toolkit", str(toolkit_tree())],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return Path(r.stdout.strip())


def test_package_metadata_and_contents(deb):
    info = subprocess.run(["dpkg-deb", "-f", str(deb)], capture_output=True, text=True, check=True).stdout
    assert "Package: nct\n" in info and "Depends:" not in info  # self-contained: no host Python
    conffiles = subprocess.run(["dpkg-deb", "-e", str(deb), str(deb.parent / "ctrl")], check=True)
    assert conffiles.returncode == 0
    assert (deb.parent / "ctrl/conffiles").read_text().splitlines()[0] == "/etc/nvidia-container-runtime/config.toml"
    assert "nvidia-ctk --quiet config --config-file=/etc/nvidia-container-runtime/config.toml --in-place" in \
        (deb.parent / "ctrl/postinst").read_text()
    listing = subprocess.run(["dpkg-deb", "-c", str(deb)], capture_output=True, text=True, check=True).stdout
    for cmd in COMMANDS:
        assert f" ./usr/bin/{cmd} -> ../lib/nct/{cmd}\n" in listing
        assert f" ./usr/lib/nct/{cmd}" in listing
    for path in ("./usr/lib/nct/python/lib/python3.11/nct/__init__.py",
                 "./usr/lib/nct/python/lib/python3.11/click/__init__.py", "./usr/lib/nct/python/bin/python3.11",
                 "./usr/lib/systemd/system/nvidia-cdi-refresh.service",
                 "./usr/lib/systemd/system/nvidia-cdi-refresh.path"):
        assert f" {path}\n" in listing


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("apt-get"), reason="needs root and apt-get")
def test_apt_install_run_purge(deb, tmp_path):
    if subprocess.run(["dpkg", "-s", "nct"], capture_output=True).returncode == 0:
        pytest.skip("an nct package is already installed on this machine; not touching it")
    clash = [c for c in COMMANDS if os.path.exists(f"/usr/bin/{c}")]
    if clash or os.path.exists("/etc/nvidia-container-runtime/config.toml"):
        pytest.skip(f"files the package would own already exist: {clash or 'config.toml'}")
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "DEBIAN_FRONTEND": "noninteractive"}
    try:
        r = subprocess.run(["apt-get", "install", "-y", "--no-install-recommends", str(deb)],
                           capture_output=True, text=True, env=env)
        assert r.returncode == 0, r.stdout + r.stderr
        status = subprocess.run(["dpkg-query", "-W", "-f=${Status}", "nct"], capture_output=True, text=True).stdout
        assert status == "install ok installed"
        for cmd, args in (("nvidia-ctk", ["--version"]), ("nvidia-container-runtime", ["--version"]),
                          ("nct", ["--version"])):
            res = subprocess.run([f"/usr/bin/{cmd}", *args], capture_output=True, text=True, env={}, cwd="/")
            assert res.returncode == 0, res.stderr
        assert os.readlink("/usr/bin/nct") == "../lib/nct/nct"
        assert Path("/usr/lib/nct/nct").read_bytes()[:4] == b"\x7fELF"  # the static launcher
        conf = tomllib.loads(Path("/etc/nvidia-container-runtime/config.toml").read_text())
        assert conf["nvidia-container-runtime"]["mode"] == "auto"
        # the installed nvidia-ctk edits an engine config like the venv's
        cfg = tmp_path / "daemon.json"
        res = subprocess.run(["/usr/bin/nvidia-ctk", "runtime", "configure", f"--config={cfg}"],
                             capture_output=True, text=True, env={})
        assert res.returncode == 0 and '"nvidia-container-runtime"' in cfg.read_text(), res.stderr
        if shutil.which("systemd-analyze"):
            v = subprocess.run(["systemd-analyze", "verify", "--man=no",
                                "/usr/lib/systemd/system/nvidia-cdi-refresh.service",
                                "/usr/lib/systemd/system/nvidia-cdi-refresh.path"], capture_output=True, text=True)
            assert v.returncode == 0 and "nvidia-cdi-refresh" not in v.stderr, v.stderr
    finally:
        subprocess.run(["apt-get", "purge", "-y", "nct"], capture_output=True, text=True, env=env)
    assert subprocess.run(["dpkg", "-s", "nct"], capture_output=True).returncode != 0
    for cmd in COMMANDS:
        assert not os.path.exists(f"/usr/bin/{cmd}")
    assert not os.path.exists("/etc/nvidia-container-runtime") and not os.path.exists("/usr/lib/nct")
    # the venv's commands are untouched
    assert subprocess.run([str(Path(sys.executable).parent / "nvidia-ctk"), "--version"]).returncode == 0
