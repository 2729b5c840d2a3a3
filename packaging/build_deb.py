#!/usr/bin/env python3
"""Build the nct Debian package with dpkg-deb from this checkout:
    python3 packaging/build_deb.py --out DIR [--toolkit TREE]

Layout: /usr/lib/nct (the self-contained toolkit of packaging/toolkit/assemble.py: its own
Python, nct and its dependencies, static launchers; needs no host Python), /usr/bin/<commands>
(symlinks to those launchers), /etc/nvidia-container-runtime/config.toml (conffile), the
nvidia-cdi-refresh systemd units and udev rule, docs.  --toolkit reuses an assembled tree."""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
LIB = Path("/usr/lib/nct")


def build(out: Path, toolkit: Path | None = None) -> Path:
    sys.path.insert(0, str(REPO / "src"))
    sys.path.insert(0, str(HERE / "toolkit"))
    from assemble import assemble, commands
    from nct import __version__
    from nct.config.edit import default_text
    from nct.engines.toolkit import without_passthrough_cache

    arch = subprocess.run(["dpkg", "--print-architecture"], capture_output=True, text=True,
                          check=True).stdout.strip()
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="nct-deb-") as tmp:
        stage = Path(tmp) / "root"
        tree = stage / LIB.relative_to("/")
        if toolkit is None:
            assemble(tree, Path("/var/cache/nct/wheels"))
        else:
            tree.parent.mkdir(parents=True)
            shutil.copytree(toolkit, tree, symlinks=True, ignore=without_passthrough_cache(Path(toolkit) / "python"))
        (stage / "usr/bin").mkdir(parents=True)
        for name in sorted(commands()):
            if name in ("nvidia-ctk-installer", "nvidia-toolkit"):  # the installer image's, as upstream
                continue
            (stage / "usr/bin" / name).symlink_to(f"../lib/nct/{name}")
        conf = stage / "etc/nvidia-container-runtime/config.toml"
        conf.parent.mkdir(parents=True)
        conf.write_text(default_text())
        units = stage / "usr/lib/systemd/system"
        units.mkdir(parents=True)
        for unit in ("nvidia-cdi-refresh.service", "nvidia-cdi-refresh.path"):
            shutil.copy2(HERE / "systemd" / unit, units / unit)
        env = stage / "etc/nvidia-container-toolkit/nvidia-cdi-refresh.env"
        env.parent.mkdir(parents=True)
        shutil.copy2(HERE / "systemd/nvidia-cdi-refresh.env", env)
        rules = stage / "usr/lib/udev/rules.d"
        rules.mkdir(parents=True)
        shutil.copy2(HERE / "systemd/60-nvidia-cdi-refresh.rules", rules)
        docs = stage / "usr/share/doc/nct"
        docs.mkdir(parents=True)
        for doc in ("engines.md", "install.md"):
            if (REPO / "docs" / doc).exists():
                shutil.copy2(REPO / "docs" / doc, docs / doc)

        debian = stage / "DEBIAN"
        debian.mkdir()
        size_kib = sum(p.stat().st_size for p in stage.rglob("*") if p.is_file()) // 1024 + 1
        control = (HERE / "debian/control.in").read_text()
        control = control.replace("@VERSION@", __version__).replace("@ARCH@", arch).replace("@SIZE@", str(size_kib))
        (debian / "control").write_text(control)
        conffiles = ["/etc/nvidia-container-runtime/config.toml",
                     "/etc/nvidia-container-toolkit/nvidia-cdi-refresh.env"]
        (debian / "conffiles").write_text("".join(c + "\n" for c in conffiles))
        for script in ("postinst", "postrm"):
            shutil.copy2(HERE / "debian" / script, debian / script)
            (debian / script).chmod(0o755)
        for p in stage.rglob("*"):
            if not p.is_symlink():
                p.chmod(0o755 if p.is_dir() or p.stat().st_mode & 0o111 else 0o644)
        deb = out / f"nct_{__version__}_{arch}.deb"
        subprocess.run(["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", str(stage), str(deb)],
                       check=True, capture_output=True)
    return deb


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="dist", help="output directory (default: dist)")
    ap.add_argument("--toolkit", default=None, help="an assembled toolkit tree (default: assemble one)")
    args = ap.parse_args()
    print(build(Path(args.out).resolve(), Path(args.toolkit).resolve() if args.toolkit else None))


if __name__ == "__main__":
    main()
