"""The self-contained toolkit tree (packaging/toolkit/assemble.py): its launchers match the
commands nct declares, nothing in it needs glibc > 2.31, it runs from any directory and
reads nothing of the host's Python (PYTHON* variables, cwd, site-packages)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tomllib
from pathlib import Path

from toolkit_build import REPO, TOOLKIT_DIR

COMMANDS = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]


def test_launcher_table_matches_pyproject_scripts():
    src = (TOOLKIT_DIR / "launcher.c").read_text()
    table = {name: f"{mod}:{fn}" for name, mod, fn in
             re.findall(r'\{"([^"]+)", RUN\("([\w.]+)", "(\w+)"\)\}', src)}
    assert table == COMMANDS


def test_tree_layout_and_marker(toolkit):
    marker = json.loads((toolkit / "python/NCT-TOOLKIT").read_text())
    assert marker["commands"] == sorted(COMMANDS) and marker["glibc_min"] == "2.31"
    inodes = {(toolkit / name).stat().st_ino for name in COMMANDS}
    assert len(inodes) == 1  # one launcher, hard-linked under every name
    lib = toolkit / "python/lib/python3.11"
    for pkg in ("nct", "click", "tomlkit", "elftools", "yaml"):
        assert (lib / pkg).exists(), pkg
    for pkg in ("jsonschema", "referencing", "nct/oci/schema", "nct/cdi/schema"):  # tests only
        assert not (lib / pkg).exists(), pkg
    assert not (lib / "test").exists() and not (lib / "site-packages").exists()
    assert not list(lib.glob("nct/**/*.pyc")) or all("__pycache__" in p.parts for p in lib.glob("nct/**/*.pyc"))
    assert list((lib / "nct/__pycache__").glob("__init__.cpython-311.pyc"))


def elfcheck(python: Path, tree: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(python), "-I", "-S", str(TOOLKIT_DIR / "elfcheck.py"), str(tree)],
                          capture_output=True, text=True, env={})


def test_no_elf_file_needs_glibc_newer_than_2_31(toolkit, tmp_path):
    python = toolkit / "python/bin/python3"
    r = elfcheck(python, toolkit)
    assert r.returncode == 0, r.stderr
    count = int(re.search(r"elfcheck: (\d+) ELF files", r.stdout).group(1))
    assert count > 50  # the interpreter, the extension modules, the carried libraries, the launchers
    # the check catches a file built against this machine's newer glibc
    bad = tmp_path / "tree"
    shutil.copytree(toolkit, bad, symlinks=True)
    (tmp_path / "x.c").write_text("#include <stdio.h>\nint main(void){puts(\"x\");return 0;}\n")
    subprocess.run(["gcc", "-o", str(bad / "python/lib/newer.so"), str(tmp_path / "x.c")], check=True)
    r = elfcheck(python, bad)
    assert r.returncode == 1 and "newer.so: needs GLIBC_2.3" in r.stderr, r.stdout + r.stderr


def trap_dir(tmp_path: Path) -> Path:
    """A directory that breaks any Python that reads it: modules that shadow nct's imports."""
    d = tmp_path / "trap"
    d.mkdir()
    for mod in ("nct", "click", "os_trap", "sitecustomize", "usercustomize", "encodings"):
        (d / mod).mkdir()
        (d / mod / "__init__.py").write_text("raise SystemExit('host python path was read')\n")
    (d / "startup.py").write_text("raise SystemExit('PYTHONSTARTUP was read')\n")
    return d


def test_relocatable_and_isolated(toolkit, tmp_path):
    trap = trap_dir(tmp_path)
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(trap), "PYTHONHOME": str(trap), "PYTHONSTARTUP":
           str(trap / "startup.py"), "PYTHONUSERBASE": str(trap), "PYTHONSAFEPATH": "", "PYTHONNOUSERSITE": ""}
    first = tmp_path / "a" / "toolkit"
    second = tmp_path / "b" / "deeper" / "elsewhere"
    shutil.copytree(toolkit, first, symlinks=True)
    shutil.copytree(first, second, symlinks=True)
    moved = tmp_path / "c"
    os.rename(first, moved)  # the first copy is gone: nothing may point at it
    for tree in (moved, second):
        for cmd, args, want in (("nvidia-ctk", ["--version"], "NVIDIA Container Toolkit CLI version"),
                                ("nct", ["--version"], "nct, version"),
                                ("nvidia-container-runtime", ["--version"], "NVIDIA Container Runtime version"),
                                ("nvidia-container-cli", ["--version"], "cli-version")):
            r = subprocess.run([str(tree / cmd), *args], capture_output=True, text=True, env=env, cwd=trap)
            assert r.returncode == 0 and want in r.stdout, (cmd, r.stdout, r.stderr)
        # through a symlink elsewhere (as /usr/bin -> /usr/lib/nct in the .deb): the name is kept
        link = tmp_path / f"bin-{tree.name}" / "nvidia-ctk"
        link.parent.mkdir()
        link.symlink_to(tree / "nvidia-ctk")
        r = subprocess.run([str(link), "--version"], capture_output=True, text=True, env=env, cwd=trap)
        assert r.returncode == 0 and "NVIDIA Container Toolkit CLI" in r.stdout, r.stderr
        code = "import sys, os; print(sys.path); print(os.path.dirname(__import__('nct').__file__))"
        r = subprocess.run([str(tree / "python/bin/python3"), "-I", "-S", "-c", code], capture_output=True,
                           text=True, env=env, cwd=trap)
        paths = [Path(p) for p in eval(r.stdout.splitlines()[0])]
        assert all(p.is_relative_to(tree) for p in paths), paths
        assert Path(r.stdout.splitlines()[1]).is_relative_to(tree)


def test_launcher_refuses_unknown_name_and_missing_runtime(toolkit, tmp_path):
    shutil.copy2(toolkit / "nct", tmp_path / "not-a-command")
    r = subprocess.run([str(tmp_path / "not-a-command")], capture_output=True, text=True)
    assert r.returncode == 127 and r.stderr.count("\n") == 1 and "unknown command name not-a-command" in r.stderr
    shutil.copy2(toolkit / "nct", tmp_path / "nct")
    r = subprocess.run([str(tmp_path / "nct"), "--version"], capture_output=True, text=True)
    assert r.returncode == 127 and r.stderr.count("\n") == 1
    assert f"cannot execute {tmp_path}/python/bin/python3" in r.stderr


def test_config_home_only_for_installed_toolkit_roots(toolkit, tmp_path):
    """A tree with .config (what `nct install` writes) reads its config.toml there; a tree
    without it (the .deb's /usr/lib/nct) uses the standard lookup."""
    tree = tmp_path / "tk"
    shutil.copytree(toolkit, tree, symlinks=True)
    env = {"PATH": "/usr/bin:/bin"}
    show = [str(tree / "nvidia-ctk"), "config"]
    r = subprocess.run(show, capture_output=True, text=True, env={**env, "XDG_CONFIG_HOME": str(tmp_path / "x")})
    assert 'root = "/custom"' not in r.stdout
    conf = tree / ".config/nvidia-container-runtime/config.toml"
    conf.parent.mkdir(parents=True)
    conf.write_text('[nvidia-container-cli]\nroot = "/custom"\n')
    r = subprocess.run(show, capture_output=True, text=True, env=env)
    assert r.returncode == 0 and 'root = "/custom"' in r.stdout, r.stderr


def test_runtime_build_refuses_bad_pgo_mode_before_any_work():
    """PGO is 0, 1 (from the committed profile) or train; anything else is one line, exit 1,
    before debootstrap or a download."""
    r = subprocess.run([str(TOOLKIT_DIR / "build_runtime.sh")], env={**os.environ, "PGO": "yes"},
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr == "build_runtime.sh: PGO must be 0, 1 or train, not 'yes'\n"


def test_committed_runtime_and_profile_match_their_sha256():
    """The default build reads the committed PGO profile (sha256-checked), so it is reproducible."""
    prebuilt = TOOLKIT_DIR / "prebuilt"
    sums = sorted(prebuilt.glob("*.sha256"))
    assert {p.name for p in sums} == {"cpython-3.11.2-x86_64-glibc2.31.tar.xz.sha256",
                                      "cpython-3.11.2-pgo-profile.tar.xz.sha256"}
    for p in sums:
        subprocess.run(["sha256sum", "-c", "--quiet", p.name], cwd=prebuilt, check=True)


def test_installed_toolkit_root_takes_a_long_path(toolkit, tmp_path):
    """An `nct install` root (with .config) puts its own directory first on PATH: a PATH of
    any length the kernel accepts still works (it used to die "path too long" past ~8 KiB,
    for every command)."""
    tree = tmp_path / "tk"
    shutil.copytree(toolkit, tree, symlinks=True)
    (tree / ".config").mkdir()
    long_path = ":".join(f"/nonexistent/{i:05d}" for i in range(5000)) + ":/usr/bin:/bin"
    r = subprocess.run([str(tree / "nct"), "--version"], capture_output=True, text=True, env={"PATH": long_path})
    assert r.returncode == 0 and "launcher" not in r.stderr, r.stderr
