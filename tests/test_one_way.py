"""One way for each thing (issue 13): the repeated pieces live in one module each, and
what only tests need stays out of the shipped package. Checked on the source text with
`ast` (imports and string constants), so a second copy cannot creep back in unnoticed."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "nct"


def _modules() -> dict[str, ast.Module]:
    return {str(p.relative_to(SRC)): ast.parse(p.read_text(), str(p)) for p in sorted(SRC.rglob("*.py"))}


MODULES = _modules()


def _importers(top: str) -> set[str]:
    """Modules that import package `top` (or one of its submodules) anywhere."""
    found = set()
    for name, tree in MODULES.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.Import) and any(a.name.split(".")[0] == top for a in node.names):
                found.add(name)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == top:
                found.add(name)
    return found


def _mentions(text: str) -> set[str]:
    """Modules holding `text` as a string constant (not in a docstring)."""
    found = set()
    for name, tree in MODULES.items():
        docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                      if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef)) and ast.get_docstring(n) is not None}
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and node.value == text and id(node) not in docstrings:
                found.add(name)
    return found


def test_nothing_shipped_imports_jsonschema():
    assert _importers("jsonschema") == set() and _importers("referencing") == set()
    assert not list(SRC.rglob("*.json")), "the OCI/CDI schemas belong to tests/schemas"


def test_one_tomlkit_layer():
    assert _importers("tomlkit") == {"tomledit.py"}


@pytest.mark.parametrize("module, allowed", [
    ("tomllib", {"config/load.py", "runtime/settings.py"}),  # only past nct.config.tomlscan's subset
])
def test_one_toml_reader_on_the_start_up_paths(module, allowed):
    assert _importers(module) <= allowed


def test_nct_proc_root_is_read_in_one_place():
    readers = _mentions("NCT_PROC_ROOT")
    assert readers <= {"driver/rootpath.py", "engines/installer.py"}  # installer: passed on, not read
    assert "driver/rootpath.py" in readers


def test_click_front_ends_live_in_nct_cli():
    """Domain packages never import a front end: the click commands are in nct.cli (the
    installer's command moves there with issue 11)."""
    outside = {m for m in _importers("click") if not m.startswith("cli/")}
    assert outside <= {"engines/installer.py"}, outside
