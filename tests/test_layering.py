"""The package-level import graph of src/nct (read statically with ast, function-level and
TYPE_CHECKING imports included): no cycle between packages and no import from a lower
layer up to a higher one. A unit is a subpackage (nct.cdi) or a top-level module
(nct.record); imports inside one unit are not checked.

The flow is discover (driver) -> plan (edits) -> apply/render (container, oci, cdi) ->
front ends; a lower layer never reaches up. Units of one layer may import each other,
never in a cycle. An edge the rules forbid is allowed only when listed in ALLOWED with the
reason and the issue that removes it; an allowance no longer needed fails the test too, so
that it is deleted."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src" / "nct"

# Lowest first.
LAYERS: list[tuple[str, ...]] = [
    ("nct", "record", "errors", "limits", "jsonio", "fileio", "log", "sigreset", "hostcache", "child",
     "tomledit"),
    ("driver",),                      # node facts, read-only
    ("config", "request", "nodeprep"),  # what is asked; what changes the host
    ("edits",),                       # the one planner
    ("cdi", "oci", "container"),      # render / apply edits
    ("runtime", "hook", "engines", "sim"),  # front-end logic
    ("cli",),                         # click commands
]

# (importing file, imported unit) -> why it is allowed for now.
ALLOWED: dict[tuple[str, str], str] = {}


def _unit(name: str) -> str | None:
    """The unit an absolute module name belongs to (None outside nct)."""
    parts = name.split(".")
    if parts[0] != "nct":
        return None
    if len(parts) == 1:
        return "nct"
    head = parts[1]
    if (SRC / head).is_dir() or (SRC / f"{head}.py").is_file():
        return head
    return "nct"  # a name defined in nct/__init__.py (__version__, ...)


def import_edges() -> dict[tuple[str, str], list[str]]:
    """(from unit, to unit) -> the files (relative to src/nct) with such an import."""
    edges: dict[tuple[str, str], list[str]] = defaultdict(list)
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC)
        src = rel.parts[0][:-3] if len(rel.parts) == 1 else rel.parts[0]
        if src == "__init__":
            src = "nct"
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                assert node.level == 0, f"{rel}:{node.lineno}: relative import (nct uses absolute imports)"
                if node.module == "nct":
                    names = [f"nct.{a.name}" for a in node.names]
                elif node.module:
                    names = [node.module]
            for name in names:
                dst = _unit(name)
                if dst is not None and dst != src and str(rel) not in edges[(src, dst)]:
                    edges[(src, dst)].append(str(rel))
    return edges


def _layer_of() -> dict[str, int]:
    return {u: i for i, layer in enumerate(LAYERS) for u in layer}


def test_every_unit_has_a_layer():
    units = {p.name for p in SRC.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    units |= {p.stem for p in SRC.glob("*.py") if p.stem != "__init__"} | {"nct"}
    assert units - set(_layer_of()) == set(), "declare the new package's layer in LAYERS"
    assert set(_layer_of()) - units == set(), "LAYERS names a unit that no longer exists"


def test_no_import_from_a_lower_layer_up():
    layer = _layer_of()
    bad, used = [], set()
    for (src, dst), files in sorted(import_edges().items()):
        if layer[dst] <= layer[src]:
            continue
        for f in files:
            if (f, dst) in ALLOWED:
                used.add((f, dst))
            else:
                bad.append(f"{f} imports nct.{dst} (layer {layer[dst]} > {layer[src]})")
    assert bad == []
    assert set(ALLOWED) - used == set(), "an allowance is no longer needed: delete it from ALLOWED"


def test_no_cycle_between_units():
    graph: dict[str, set[str]] = defaultdict(set)
    for (src, dst), files in import_edges().items():
        if any((f, dst) not in ALLOWED for f in files):
            graph[src].add(dst)
    # Tarjan's strongly connected components
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in sorted(list(graph)):
        if v not in index:
            visit(v)
    assert cycles == [], f"import cycles between packages: {cycles}"


def test_the_graph_is_read():
    """The checks above see real edges (a broken walk would pass them vacuously)."""
    edges = import_edges()
    assert ("edits", "driver") in edges and ("cdi", "edits") in edges and ("runtime", "cdi") in edges
    assert ("cdi", "oci") not in edges or ("oci", "cdi") not in edges
