"""docker `daemon.json`: register runtimes, the default runtime and CDI.  Key order and
every unrelated key are kept; an empty file is an empty config; the indentation the
operator used is kept (4 spaces, as upstream, for a new file)."""

from __future__ import annotations

import json
import re
from typing import Any

from nct.engines.model import Edit, EngineRequest, previous
from nct.errors import EngineConfigError


def load(text: str | None, path: str) -> dict:
    if text is None or not text.strip():
        return {}
    try:
        cfg = json.loads(text)
    except json.JSONDecodeError as e:
        raise EngineConfigError(f"{path}: invalid JSON at line {e.lineno}, column {e.colno}: {e.msg}") from None
    except RecursionError:
        raise EngineConfigError(f"{path}: JSON nested too deeply (not a daemon.json)") from None
    if not isinstance(cfg, dict):
        raise EngineConfigError(f"{path}: top level is not a JSON object")
    return cfg


def dump(cfg: dict, like: str | None) -> str:
    return json.dumps(cfg, indent=_indent_of(like), ensure_ascii=False) + "\n"


def _indent_of(text: str | None) -> int | str:
    m = re.search(r"\n([ \t]+)\S", text or "")
    if not m:
        return 4
    ws = m.group(1)
    return len(ws) if set(ws) == {" "} else ws


def _object(cfg: dict, key: str, path: str, created: list[str]) -> dict:
    value = cfg.get(key)
    if value is None:
        value = cfg[key] = {}
        created.append(key)
    elif not isinstance(value, dict):
        raise EngineConfigError(f"{path}: key {key!r} is not a JSON object")
    return value


def configure(req: EngineRequest, text: str | None) -> Edit:
    path = req.config
    cfg = load(text, path)
    created: list[str] = []
    changes: dict[str, Any] = {"runtimes": {}}
    runtimes = _object(cfg, "runtimes", path, created)
    for rt in req.runtimes:
        want = {"path": rt.path, "args": []}
        if runtimes.get(rt.name) != want:
            changes["runtimes"][rt.name] = runtimes.get(rt.name)
            runtimes[rt.name] = want
    if req.set_as_default and cfg.get("default-runtime") != req.default_name:
        changes["default"] = previous(cfg.get("default-runtime"))
        cfg["default-runtime"] = req.default_name
    if req.cdi_enabled:
        features = _object(cfg, "features", path, created)
        if features.get("cdi") is not True:
            changes["cdi"] = previous(features.get("cdi"))
            features["cdi"] = True
    changes["created"] = created
    new = dump(cfg, text)
    if not changes["runtimes"] and len(changes) == 2 and not created:
        new = text if text is not None else new  # nothing to do: keep the bytes
    return Edit(files={path: new}, primary=path, changes=changes)


def remove(req: EngineRequest, path: str, text: str | None, changes: dict) -> str | None:
    """Undo `changes` (or, without a record, remove the named runtimes) in the current file."""
    if text is None:
        return None
    cfg = load(text, path)
    before = json.dumps(cfg)
    ours = dict(changes.get("runtimes") or {name: None for name in req.names})
    runtimes = cfg.get("runtimes")
    if isinstance(runtimes, dict):
        for name, prev in ours.items():
            if prev is None:
                runtimes.pop(name, None)
            else:
                runtimes[name] = prev
        if not runtimes and "runtimes" in changes.get("created", ()):
            del cfg["runtimes"]
    if cfg.get("default-runtime") in ours:
        _restore(cfg, "default-runtime", changes.get("default"))
    features = cfg.get("features")
    if "cdi" in changes and isinstance(features, dict):
        _restore(features, "cdi", changes["cdi"])
        if not features and "features" in changes.get("created", ()):
            del cfg["features"]
    if json.dumps(cfg) == before:
        return text
    return dump(cfg, text)


def _restore(obj: dict, key: str, prev: dict | None) -> None:
    if prev and prev.get("had"):
        obj[key] = prev["previous"]
    else:
        obj.pop(key, None)
