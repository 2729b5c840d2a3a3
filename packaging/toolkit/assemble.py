#!/usr/bin/env python3
"""Assemble the self-contained nct toolkit (fast path, a minute or so):
    python3 packaging/toolkit/assemble.py --out DIR

DIR gets the prebuilt Python runtime (packaging/toolkit/prebuilt, made by build_runtime.sh
in a Debian 11 root: glibc >= 2.31 is all it needs), nct from this checkout and its pinned
dependency wheels (requirements.lock, from PyPI, hash-checked) inside that runtime's own
lib/python3.11, everything byte-compiled, and one static launcher under each command name:

    DIR/nvidia-container-runtime ... DIR/nct     launchers (hard links of one static binary)
    DIR/python/                                  the runtime (bin/python3, lib/python3.11/...)
    DIR/python/NCT-TOOLKIT                       marker: what this tree is (JSON)

The tree is relocatable (launchers find it from /proc/self/exe) and reads nothing of the
host's Python.  Needs: a Python >= 3.11 with pip (to fetch wheels; cached in
$NCT_CACHE/wheels), gcc and libc6-dev (static launcher), tar and xz.  The result is checked:
every ELF file must need glibc <= 2.31 (elfcheck.py)."""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
PYVER = "3.11.2"
RUNTIME = HERE / "prebuilt" / f"cpython-{PYVER}-x86_64-glibc2.31.tar.xz"
LOCK = HERE / "requirements.lock"
STDLIB = "python/lib/python3.11"
MARKER = "python/NCT-TOOLKIT"
SOURCE_DATE_EPOCH = 1700000000


def commands() -> dict[str, str]:
    """Command name -> "module:function", from pyproject's [project.scripts]."""
    return dict(tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"])


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def check_lock() -> None:
    """Every dependency pyproject lists must be pinned in the lock."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    wanted = list(project.get("dependencies", []))
    pinned = {_norm(line.split("==")[0]) for line in LOCK.read_text().splitlines() if "==" in line}
    missing = sorted({_norm(re.match(r"[A-Za-z0-9._-]+", req).group(0)) for req in wanted} - pinned)
    if missing:
        sys.exit(f"assemble: {', '.join(missing)} not pinned in {LOCK}: add them with --hash lines (see docs/toolkit.md)")


def fetch_wheels(cache: Path) -> list[Path]:
    """Download (or reuse from cache) the locked wheels for CPython 3.11 x86_64, hash-checked by pip."""
    cache.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check", "--no-deps",
           "--require-hashes", "--only-binary=:all:", "--python-version", "3.11", "--implementation", "cp",
           "--abi", "cp311", "--abi", "abi3", "--abi", "none", "-d", str(cache), "-r", str(LOCK)]
    for plat in ("manylinux2014_x86_64", "manylinux_2_17_x86_64", "manylinux_2_28_x86_64", "any"):
        cmd += ["--platform", plat]
    subprocess.run(cmd, check=True)
    hashes = {}
    for line in LOCK.read_text().splitlines():
        if "--hash=sha256:" in line:
            hashes[_norm(line.split("==")[0])] = line.split("--hash=sha256:")[1].split()[0]
    wheels = []
    for whl in sorted(cache.glob("*.whl")):
        digest = hashlib.sha256(whl.read_bytes()).hexdigest()
        if hashes.get(_norm(whl.name.split("-")[0])) == digest:
            wheels.append(whl)
    if len(wheels) != len(hashes):
        sys.exit(f"assemble: {cache}: expected {len(hashes)} locked wheels, found {len(wheels)}")
    return wheels


def install_wheel(whl: Path, site: Path) -> None:
    """Unpack a wheel into `site` (purelib/platlib .data folded in; scripts and headers dropped)."""
    with zipfile.ZipFile(whl) as z:
        for info in z.infolist():
            parts = info.filename.split("/")
            if info.is_dir() or ".." in parts:
                continue
            if parts[0].endswith(".data"):
                if len(parts) < 3 or parts[1] not in ("purelib", "platlib"):
                    continue
                parts = parts[2:]
            target = site.joinpath(*parts)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(z.read(info))
            if (info.external_attr >> 16) & 0o111:
                target.chmod(0o755)


def install_nct(site: Path) -> None:
    """nct from this checkout (source only) plus the dist-info its metadata users read."""
    src = REPO / "src" / "nct"
    shutil.copytree(src, site / "nct", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    sys.path.insert(0, str(REPO / "src"))
    from nct import __version__

    info = site / f"nct-{__version__}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: nct\nVersion: {__version__}\n"
                                   f"Summary: {project['description']}\n")
    (info / "entry_points.txt").write_text(
        "[console_scripts]\n" + "".join(f"{k} = {v}\n" for k, v in sorted(commands().items())))


def build_launcher(out: Path) -> None:
    """One static launcher (no libc), hard-linked under every command name."""
    first = None
    for name in sorted(commands()):
        path = out / name
        if first is None:
            subprocess.run(["gcc", "-static", "-nostdlib", "-ffreestanding", "-fno-stack-protector", "-fno-builtin",
                            "-fno-asynchronous-unwind-tables", "-Os", "-s", "-Wall", "-o", str(path),
                            str(HERE / "launcher.c")], check=True)
            first = path
        else:
            os.link(first, path)


def assemble(out: Path, cache: Path) -> Path:
    check_lock()
    if out.exists() and any(out.iterdir()):
        sys.exit(f"assemble: {out} exists and is not empty: remove it or pick another --out")
    want = (RUNTIME.parent / (RUNTIME.name + ".sha256")).read_text().split()[0]
    if hashlib.sha256(RUNTIME.read_bytes()).hexdigest() != want:
        sys.exit(f"assemble: {RUNTIME}: sha256 mismatch: rebuild it with packaging/toolkit/build_runtime.sh")
    wheels = fetch_wheels(cache)
    out.parent.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    stage.chmod(0o755)
    try:
        subprocess.run(["tar", "-xJf", str(RUNTIME), "-C", str(stage)], check=True)
        site = stage / STDLIB
        stdlib = {p.name for p in site.iterdir()}
        for whl in wheels:
            install_wheel(whl, site)
        install_nct(site)
        python = stage / "python/bin/python3"
        # Same bytes every time: a fixed hash seed (set constants are marshalled in hash order;
        # so no -I here, the environment is this one) and one process; the runtime's own
        # stdlib is compiled already.
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONHASHSEED": "0"}
        added = sorted({p.name for p in site.iterdir()} - stdlib)
        # -s/-p: the recorded file names must not carry the random staging dir (the import
        # system puts the real path back when it loads a .pyc)
        subprocess.run([str(python), "-B", "-S", "-m", "compileall", "-f", "-q", "-j1", "--invalidation-mode",
                        "unchecked-hash", "-s", str(stage), "-p", "/nct-toolkit", *[str(site / n) for n in added if n.endswith(".py") or (site / n).is_dir()]],
                       check=True, env=env)
        build_launcher(stage)
        from nct import __version__

        (stage / MARKER).write_text(json.dumps({
            "nct": __version__, "python": PYVER, "runtime": RUNTIME.name, "platform": "x86_64-linux-gnu",
            "glibc_min": "2.31", "commands": sorted(commands()),
            "wheels": [w.name for w in wheels]}, indent=1) + "\n")
        bad = subprocess.run([str(python), "-I", "-S", str(HERE / "elfcheck.py"), str(stage)], env=env)
        if bad.returncode:
            sys.exit("assemble: the toolkit has ELF files that need a glibc newer than 2.31 (listed above)")
        for p in [stage, *stage.rglob("*")]:
            if not p.is_symlink():
                os.utime(p, (SOURCE_DATE_EPOCH, SOURCE_DATE_EPOCH))
        if out.exists():
            out.rmdir()
        os.rename(stage, out)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="toolkit directory to create (must not exist or be empty)")
    ap.add_argument("--cache", default=os.path.join(os.environ.get("NCT_CACHE", "/var/cache/nct"), "wheels"),
                    help="wheel cache (default: $NCT_CACHE/wheels, NCT_CACHE=/var/cache/nct)")
    args = ap.parse_args()
    print(assemble(Path(args.out).resolve(), Path(args.cache)))


if __name__ == "__main__":
    main()
