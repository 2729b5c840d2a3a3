"""CRI-O: a runtime table under `crio.runtime.runtimes` copied from the default runtime,
with our runtime_path, written to a drop-in under crio.conf.d (or, with an empty drop-in
path, into crio.conf itself, editing only those keys)."""

from __future__ import annotations

import copy
from typing import Any

from nct import tomledit as te
from nct.engines.model import Edit, EngineRequest, previous

RUNTIME = ("crio", "runtime")
RUNTIMES = RUNTIME + ("runtimes",)
DEFAULT = RUNTIME + ("default_runtime",)


def _base_runtime(source: Any, where: str) -> tuple[str | None, dict]:
    default = te.plain(te.get(source, DEFAULT, where))
    runtimes = te.get(source, RUNTIMES, where)
    for name in (default, "runc", "crun"):
        if not name or not isinstance(name, str) or name.startswith("nvidia"):
            continue
        if runtimes is not None and name in runtimes and isinstance(te.plain(runtimes[name]), dict):
            return name, copy.deepcopy(te.plain(runtimes[name]))
    return None, {}


def configure(req: EngineRequest, main_text: str | None, source_text: str | None,
              drop_in_text: str | None) -> Edit:
    source_where = f"{req.executable_path or 'crio'} status config" if source_text is not None else req.config
    source = te.parse(source_text if source_text is not None else (main_text or ""), source_where)
    dest_path = req.drop_in or req.config
    dest_text = drop_in_text if req.drop_in else main_text
    dest = te.parse(dest_text or "", dest_path)
    base_name, base = _base_runtime(source, source_where)
    changes: dict[str, Any] = {"runtimes": {}}
    runtimes = te.ensure_table(dest, RUNTIMES, dest_path)
    like = runtimes[base_name] if base_name and base_name in runtimes else None
    for rt in req.runtimes:
        data = copy.deepcopy(base)
        data["runtime_path"] = rt.path
        data["runtime_type"] = "oci"
        current = te.plain(runtimes[rt.name]) if rt.name in runtimes else None
        if current != data:
            changes["runtimes"][rt.name] = current
            te.put_table(runtimes, rt.name, data, like=like)
    if req.set_as_default:
        current = te.plain(te.get(dest, DEFAULT, dest_path))
        if current != req.default_name:
            changes["default"] = previous(current)
            te.set_key(te.ensure_table(dest, RUNTIME, dest_path), "default_runtime", req.default_name)
    unchanged = not changes["runtimes"] and len(changes) == 1 and dest_text is not None
    new = dest_text if unchanged else te.dumps_like(dest, dest_text)
    return Edit(files={dest_path: new}, primary=dest_path, changes=changes)


def remove(req: EngineRequest, path: str, text: str | None, changes: dict) -> str | None:
    if text is None:
        return None
    doc = te.parse(text, path)
    ours = dict(changes.get("runtimes") or {name: None for name in req.names})
    touched = te.restore_tables(doc, RUNTIMES, ours, path)
    if te.plain(te.get(doc, DEFAULT, path)) in ours:
        touched = True
        prev = changes.get("default")
        if prev and prev.get("had"):
            te.set_key(te.ensure_table(doc, RUNTIME, path), "default_runtime", prev["previous"])
        else:
            te.delete_key(doc, DEFAULT)
            te.prune_empty(doc, RUNTIME)
    return te.dumps_like(doc, text) if touched else text
