"""The self-contained toolkit tree (packaging/toolkit/assemble.py builds it): launchers
under the command names next to `python/`, a private CPython with nct inside.  `nct
install` run from such a tree copies that tree; this module finds and copies it."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

from nct.engines.bundle import Installed
from nct.errors import EngineConfigError

MARKER = "python/NCT-TOOLKIT"


def running_toolkit() -> Path | None:
    """The toolkit tree this interpreter belongs to, or None (a venv or system Python)."""
    root = Path(sys.prefix).parent
    return root if (root / MARKER).is_file() else None


def toolkit_commands(src: Path) -> list[str]:
    """The launcher names a toolkit tree provides (from its marker file)."""
    try:
        names = json.loads((src / MARKER).read_text())["commands"]
    except (OSError, ValueError, KeyError, TypeError):
        raise EngineConfigError(f"{src}: not an nct toolkit (no readable {MARKER}; build one with "
                                "packaging/toolkit/assemble.py)") from None
    if not isinstance(names, list) or not all(isinstance(n, str) and n and "/" not in n for n in names):
        raise EngineConfigError(f"{src / MARKER}: bad command list")
    return names


def without_passthrough_cache(python_dir: Path):
    """A copytree `ignore` that leaves out the launcher's pass-through cache of the tree
    being copied (python/.passthrough-cache): it is that tree's own, keyed by its files'
    identities; the copy writes its own on first use."""
    from nct.runtime.passthrough import NAME

    top = os.path.realpath(python_dir)

    def ignore(directory: str, names: list[str]) -> set[str]:
        return {NAME} if NAME in names and os.path.realpath(directory) == top else set()
    return ignore


def copy_toolkit(src: Path, root: Path, installed: Installed) -> list[Path]:
    """Copy the tree at `src` into `root` (root/python replaced whole; launchers hard-linked
    to one copy where the filesystem allows).  Returns the launcher paths."""
    names = toolkit_commands(src)
    src, root = src.resolve(), root.resolve()
    if src == root:
        return [root / n for n in names]
    installed.mkdir(root)
    tmp = root / ".python.new"
    if tmp.is_symlink():
        tmp.unlink()
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(src / "python", tmp, symlinks=True, ignore=without_passthrough_cache(src / "python"))
    dest = root / "python"
    if dest.exists():
        old = root / ".python.old"
        shutil.rmtree(old, ignore_errors=True)
        os.rename(dest, old)
        os.rename(tmp, dest)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.rename(tmp, dest)
    installed.trees.append(str(dest))
    made: list[Path] = []
    for name in names:
        path, new = root / name, root / f".{name}.new"
        if new.is_symlink() or new.exists():  # a planted link is removed, never written through
            new.unlink()
        try:
            if not made:
                raise OSError
            os.link(made[0], new)
        except OSError:
            shutil.copy2(src / name, new)
        os.replace(new, path)
        installed.add_file(path)
        made.append(path)
    return made
