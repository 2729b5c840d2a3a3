"""Stale docs are a defect: every dotted `nct.x.y` name in README.md and docs/*.md must be
a module of the package or an attribute of one (a renamed or moved module fails here;
annotation keys such as nct.nvidia.com/... are not names)."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NAME = re.compile(r"(?<![\w./-])nct(?:\.[A-Za-z_]\w*)+")


def doc_names() -> dict[str, str]:
    """Each dotted name -> the first file naming it."""
    found: dict[str, str] = {}
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = doc.read_text()
        for m in NAME.finditer(text):
            if text[m.end():m.end() + 1] != "/":  # nct.nvidia.com/...: an annotation key
                found.setdefault(m.group(), doc.name)
    return found


def resolves(name: str) -> bool:
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


FROM_IMPORT = re.compile(r"^\s*from (nct(?:\.\w+)*) import ([\w, ]+)$", re.M)


def test_every_imported_name_exists():
    """`from nct.x import a, b` in the docs' examples: each name is in that module."""
    stale = []
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for module, names in FROM_IMPORT.findall(doc.read_text()):
            stale += [f"{doc.name}: {module}.{n.strip()}" for n in names.split(",")
                      if n.strip() and not resolves(f"{module}.{n.strip()}")]
    assert stale == []


def test_every_named_module_exists():
    names = doc_names()
    assert len(names) > 20  # the pattern still finds the names
    stale = sorted(f"{doc}: {name}" for name, doc in names.items() if not resolves(name))
    assert stale == []


FILE = re.compile(r"`((?:[\w.-]+/)*[\w.-]+\.(?:py|sh))`")
TREES = ("src", "tests", "bench", "scripts", "packaging", ".ci")


def test_every_named_source_file_exists():
    """`driver/rootpath.py`, `tests/golden/specgen.py`, `run_all.sh`: a file the docs name in
    backticks is in the tree, as a path from the repository, from src/nct, or a file name."""
    files = [p.relative_to(ROOT).as_posix() for tree in TREES for p in (ROOT / tree).rglob("*")
             if p.suffix in (".py", ".sh")]
    names = {f.rsplit("/", 1)[-1] for f in files}
    stale = []
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for path in FILE.findall(doc.read_text()):
            if not (path in names or any(f == path or f.endswith("/" + path) for f in files)):
                stale.append(f"{doc.name}: {path}")
    assert sorted(set(stale)) == []
