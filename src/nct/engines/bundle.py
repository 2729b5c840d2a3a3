"""A self-contained copy of nct: the package and its pure-Python (and compiled) runtime
dependencies under one directory, plus one small wrapper script per command that puts
that directory first on sys.path.  The copy works without the venv it came from."""

from __future__ import annotations

import os
import re
import shutil
import sys
from nct.record import Record, field
from importlib import metadata
from pathlib import Path

import nct

SKIP_DIRS = {"__pycache__"}


class Installed(Record, frozen=False):
    """What an install created, so it can be removed again (deepest first)."""

    files: list[str] = field(default_factory=list)
    dirs: list[str] = field(default_factory=list)
    trees: list[str] = field(default_factory=list)

    def mkdir(self, path: Path) -> None:
        missing = []
        p = path
        while not p.exists():
            missing.append(p)
            p = p.parent
        for d in reversed(missing):
            d.mkdir(mode=0o755)
            self.dirs.append(str(d))

    def add_file(self, path: Path) -> None:
        self.files.append(str(path))

    def remove(self, base: str) -> None:
        """Remove what was made; below `base` (the toolkit dir) never through a symlink, and
        no file or tree outside it (a tampered manifest cannot name host files)."""
        from nct.engines.files import remove_beneath

        for f in reversed(self.files):
            remove_beneath(base, f, "file")
        for t in self.trees:
            remove_beneath(base, t, "tree")
        for d in sorted(self.dirs, key=len, reverse=True):
            rel = os.path.relpath(os.path.abspath(d), os.path.abspath(base))
            if rel == os.pardir or rel.startswith(os.pardir + os.sep):
                try:
                    os.rmdir(d)  # only when empty: never what someone else put there
                except OSError:
                    pass
            else:
                remove_beneath(base, d, "dir")


def base_python() -> str:
    """The interpreter behind this one, not the venv's symlink to it."""
    return os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)


def _requirement_name(req: str) -> str | None:
    if ";" in req and "extra" in req.split(";", 1)[1]:
        return None
    m = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", req)
    return m.group(1) if m else None


def dependency_closure(root: str = "nct") -> list[metadata.Distribution]:
    """Installed distributions `root` needs at run time (extras excluded; requirements
    that are not installed, e.g. for other Python versions, are skipped)."""
    seen: dict[str, metadata.Distribution] = {}
    todo = [root]
    while todo:
        name = todo.pop()
        key = re.sub(r"[-_.]+", "-", name).lower()
        if key in seen:
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        seen[key] = dist
        for req in dist.requires or ():
            dep = _requirement_name(req)
            if dep:
                todo.append(dep)
    seen.pop("nct", None)
    return list(seen.values())


def copy_library(dest: Path, installed: Installed) -> None:
    """nct itself (from its source tree: it may be an editable install) and its deps,
    byte-compiled so the first runs of the runtime shim are as fast as later ones."""
    from nct.engines.files import remove_beneath, unlink_links

    unlink_links(str(dest.parent.parent), str(dest))  # dest is root/lib/python
    remove_beneath(str(dest.parent.parent), str(dest), "tree")
    installed.mkdir(dest)
    installed.trees.append(str(dest))
    pkg = Path(nct.__file__).resolve().parent
    _copy_tree(pkg, dest / "nct", installed)
    for dist in dependency_closure():
        for rel in dist.files or ():
            parts = Path(rel).parts
            if not parts or parts[0] in ("..", "/") or ".." in parts or any(p in SKIP_DIRS for p in parts):
                continue
            if parts[0].endswith((".dist-info", ".data")) and not str(rel).endswith("METADATA"):
                continue
            src = Path(str(dist.locate_file(rel)))
            if not src.is_file():
                continue
            target = dest / rel
            installed.mkdir(target.parent)
            shutil.copy2(src, target)
            installed.add_file(target)
    import compileall

    compileall.compile_dir(str(dest), quiet=1, workers=0 if (os.cpu_count() or 1) > 1 else 1)


def _copy_tree(src: Path, dst: Path, installed: Installed) -> None:
    installed.mkdir(dst)
    for entry in sorted(src.iterdir()):
        if entry.name in SKIP_DIRS or entry.suffix == ".pyc":
            continue
        if entry.is_dir():
            _copy_tree(entry, dst / entry.name, installed)
        elif entry.is_file():
            shutil.copy2(entry, dst / entry.name)
            installed.add_file(dst / entry.name)


def console_scripts() -> dict[str, str]:
    """Command name -> "module:function", from nct's own entry points."""
    eps = metadata.distribution("nct").entry_points
    return {ep.name: ep.value for ep in eps if ep.group == "console_scripts"}


WRAPPER = '''#!{python} -IS
# {name}: installed by `nct install`; runs nct from {lib}
import os
import sys

sys.path.insert(0, {lib!r})
{env}from {module} import {func}

sys.exit({func}())
'''


def write_wrappers(bin_dir: Path, lib: Path, python: str, installed: Installed,
                   config_home: Path | None = None) -> list[Path]:
    """One executable per console script.  With `config_home`, the commands find the
    toolkit's config.toml there (XDG_CONFIG_HOME) and each other first on PATH."""
    installed.mkdir(bin_dir)
    env = ""
    if config_home is not None:
        env = (f"os.environ['XDG_CONFIG_HOME'] = {str(config_home)!r}\n"
               f"os.environ['PATH'] = {str(bin_dir)!r} + os.pathsep + os.environ.get('PATH', '/usr/sbin:/usr/bin:/sbin:/bin')\n")
    made = []
    for name, target in sorted(console_scripts().items()):
        module, _, func = target.partition(":")
        path = bin_dir / name
        tmp = bin_dir / f".{name}.tmp"
        text = WRAPPER.format(python=python, name=name, lib=str(lib), env=env, module=module, func=func)
        if tmp.is_symlink():  # never written through
            tmp.unlink()
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o755)
        with os.fdopen(fd, "w") as f:
            f.write(text)
            os.fchmod(f.fileno(), 0o755)
        os.replace(tmp, path)
        installed.add_file(path)
        made.append(path)
    return made
