"""containerd `config.toml` (config versions 1, 2 and 3): a runtime table copied from the
default runtime with our BinaryName, the default runtime name, enable_cdi, and for v2/v3
a drop-in file plus an `imports` entry.  Edited with tomlkit so the operator's comments,
order and layout survive outside the keys we set."""

from __future__ import annotations

import copy
import json
import os
from typing import Any

from nct import tomledit as te
from nct.engines.model import Edit, EngineRequest, previous
from nct.errors import EngineConfigError

CRI = {
    1: ("plugins", "cri"),
    2: ("plugins", "io.containerd.grpc.v1.cri"),
    3: ("plugins", "io.containerd.cri.v1.runtime"),
}
TEMPLATE = {
    "runtime_type": "io.containerd.runc.v2",
    "runtime_root": "",
    "runtime_engine": "",
    "privileged_without_host_devices": False,
}


def version_of(doc: Any, path: str) -> int | None:
    """The file's config version: its `version` key, 1 for a non-empty file without one,
    None for an empty file (the caller picks)."""
    if len(doc) == 0:
        return None
    v = te.plain(doc.get("version", 1))
    if v not in CRI:
        raise EngineConfigError(f"{path}: unsupported containerd config version {v!r}")
    return v


def _paths(version: int) -> dict[str, tuple[str, ...]]:
    cri = CRI[version]
    return {
        "cri": cri,
        "containerd": cri + ("containerd",),
        "runtimes": cri + ("containerd", "runtimes"),
        "default": cri + ("containerd", "default_runtime_name"),
        "cdi": cri + (("containerd", "enable_cdi") if version == 1 else ("enable_cdi",)),
    }


def import_glob(drop_in: str) -> str:
    return os.path.join(os.path.dirname(drop_in), "*.toml")


def _base_runtime(source: Any, version: int, where: str, runtime_type: str = "io.containerd.runc.v2"
                  ) -> tuple[str | None, dict]:
    """The runtime our entry copies: the default one (unless it is an nvidia one), else
    runc, else crun, else a template (with `runtime_type`)."""
    p = _paths(version)
    runtimes = te.get(source, p["runtimes"], where)
    default = te.plain(te.get(source, p["default"], where))
    for name in (default, "runc", "crun"):
        if not name or not isinstance(name, str) or name.startswith("nvidia"):
            continue
        if runtimes is not None and name in runtimes and isinstance(te.plain(runtimes[name]), dict):
            return name, copy.deepcopy(te.plain(runtimes[name]))
    return None, {**copy.deepcopy(TEMPLATE), "runtime_type": runtime_type}


def _override(req: EngineRequest) -> dict:
    """RUNTIME_CONFIG_OVERRIDE: a JSON object merged into each runtime table."""
    if not req.runtime_config_override:
        return {}
    try:
        value = json.loads(req.runtime_config_override)
    except ValueError as e:
        raise EngineConfigError(f"--runtime-config-override: not JSON: {e}") from None
    if not isinstance(value, dict):
        raise EngineConfigError("--runtime-config-override: want a JSON object")
    return value


def _merge(into: dict, extra: dict) -> None:
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = copy.deepcopy(value)


def _apply(doc: Any, version: int, source: Any, req: EngineRequest, where: str, src_where: str) -> dict:
    p = _paths(version)
    changes: dict[str, Any] = {"runtimes": {}}
    base_name, base = _base_runtime(source, version, src_where, req.runtime_type)
    override = _override(req)
    if not base.get("runtime_type"):
        base["runtime_type"] = TEMPLATE["runtime_type"]
    runtimes = te.ensure_table(doc, p["runtimes"], where)
    like = runtimes[base_name] if base_name and base_name in runtimes else None
    for rt in req.runtimes:
        data = copy.deepcopy(base)
        if req.container_annotations:
            old = data.get("container_annotations")
            old = [a for a in old if a not in req.container_annotations] if isinstance(old, list) else []
            data["container_annotations"] = list(req.container_annotations) + old
        _merge(data, override)
        options = data.get("options")
        if not isinstance(options, dict):
            options = data["options"] = {}
        options["BinaryName"] = rt.path
        if version == 1:
            options["Runtime"] = rt.path
        current = te.plain(runtimes[rt.name]) if rt.name in runtimes else None
        if current != data:
            changes["runtimes"][rt.name] = current
            te.put_table(runtimes, rt.name, data, like=like)
    current_default = te.plain(te.get(doc, p["default"], where))
    if req.set_as_default and version == 1 and req.legacy_config:
        _set_legacy_default(doc, req, where, changes)
    elif req.set_as_default:
        if current_default != req.default_name:
            changes["default"] = previous(current_default)
            te.set_key(te.ensure_table(doc, p["containerd"], where), "default_runtime_name", req.default_name)
    elif current_default in req.names:  # upstream: not asked to be default -> stop being it
        changes["default"] = previous(current_default)
        te.delete_key(doc, p["default"])
    if req.cdi_enabled:
        current = te.plain(te.get(doc, p["cdi"], where))
        if current is not True:
            changes["cdi"] = previous(current)
            te.set_key(te.ensure_table(doc, p["cdi"][:-1], where), "enable_cdi", True)
    return changes


def _set_legacy_default(doc: Any, req: EngineRequest, where: str, changes: dict) -> None:
    """--use-legacy-config on a version 1 config: the default is the pre-1.3
    `containerd.default_runtime` table (runtime_type from --runtime-type when the table is
    new) running our binary, and default_runtime_name is left alone, as upstream."""
    path = CRI[1] + ("containerd", "default_runtime")
    current = te.plain(te.get(doc, path, where))
    data = copy.deepcopy(current) if isinstance(current, dict) else {**copy.deepcopy(TEMPLATE),
                                                                      "runtime_type": req.runtime_type}
    options = data.get("options")
    if not isinstance(options, dict):
        options = data["options"] = {}
    binary = req.runtimes[0].path
    options["BinaryName"] = binary
    options["Runtime"] = binary
    if current != data:
        changes["default_runtime"] = previous(current)
        parent = te.ensure_table(doc, path[:-1], where)
        runtimes = parent.get("runtimes")
        te.put_table(parent, "default_runtime", data, like=runtimes)


def configure(req: EngineRequest, main_text: str | None, source_text: str | None,
              drop_in_text: str | None) -> Edit:
    """Plan the edit.  `source_text` is the config we copy from (file or `config dump`)."""
    main_path = req.config
    main = te.parse(main_text or "", main_path)
    src_where = f"{req.executable_path or 'containerd'} config dump" if source_text is not None else main_path
    source = te.parse(source_text, src_where) if source_text is not None else main
    version = version_of(main, main_path) or version_of(source, src_where) or (1 if req.legacy_config else 2)
    if not req.drop_in or version == 1:
        if len(main) == 0:
            main.add("version", version)
        changes = _apply(main, version, source, req, main_path, src_where)
        new = _keep(main_text, te.dumps_like(main, main_text), changes)
        return Edit(files={main_path: new}, primary=main_path, changes=changes)

    drop_path = req.drop_in
    drop = te.parse(drop_in_text or "", drop_path)
    if len(drop) == 0:
        drop.add("version", version)
        section = te.plain(te.get(source, CRI[version], src_where)) or {}
        if section:
            te.put_table(te.ensure_table(drop, CRI[version][:-1]), CRI[version][-1], section)
    changes = _apply(drop, version, source, req, drop_path, src_where)
    new_drop = _keep(drop_in_text, te.dumps_like(drop, drop_in_text), changes)

    glob = import_glob(req.drop_in_host_path or drop_path)  # the engine reads it by its host path
    if len(main) == 0:
        main.add("version", version)
    imports = main.get("imports")
    if imports is None:
        main.add("imports", [glob])
        changes["imports"] = {"glob": glob, "created": True}
    elif not isinstance(te.plain(imports), list):
        raise EngineConfigError(f"{main_path}: key 'imports' is not an array")
    elif glob not in te.plain(imports):
        imports.append(glob)
        changes["imports"] = {"glob": glob, "created": False}
    new_main = te.dumps_like(main, main_text) if "imports" in changes or not main_text else main_text
    return Edit(files={drop_path: new_drop, main_path: new_main}, primary=drop_path, changes=changes)


def _keep(old: str | None, new: str, changes: dict) -> str:
    """Unchanged content keeps its exact bytes (idempotence)."""
    if old is not None and not changes["runtimes"] and len(changes) == 1:
        return old
    return new


def remove(req: EngineRequest, path: str, text: str | None, changes: dict) -> str | None:
    """Undo `changes` (or, without a record, remove the named runtimes) in one file."""
    if text is None:
        return None
    doc = te.parse(text, path)
    version = version_of(doc, path) or 2
    p = _paths(version)
    ours = dict(changes.get("runtimes") or {name: None for name in req.names})
    touched = te.restore_tables(doc, p["runtimes"], ours, path)
    if te.plain(te.get(doc, p["default"], path)) in ours:
        touched = True
        _restore(doc, p["default"], changes.get("default"), path)
    legacy = p["containerd"] + ("default_runtime",)
    if version == 1 and _legacy_default_is_ours(te.plain(te.get(doc, legacy, path)), req, changes):
        touched = True
        prev = (changes.get("default_runtime") or {}).get("previous")
        parent = te.get(doc, p["containerd"], path)
        if isinstance(prev, dict):
            te.put_table(parent, "default_runtime", prev)
        else:
            te.remove_table(parent, "default_runtime")
    if "cdi" in changes and te.get(doc, p["cdi"], path) is not None:
        touched = True
        _restore(doc, p["cdi"], changes["cdi"], path)
    imp = changes.get("imports")
    if imp and "imports" in doc and imp["glob"] in te.plain(doc["imports"]):
        touched = True
        arr = doc["imports"]
        arr.remove(imp["glob"])
        if imp.get("created") and len(arr) == 0:
            del doc["imports"]
    return te.dumps_like(doc, text) if touched else text


def _legacy_default_is_ours(table: Any, req: EngineRequest, changes: dict) -> bool:
    """Whether the legacy default_runtime table runs one of our binaries (upstream: its
    BinaryName, else Runtime, is the removed runtime's); with a record, whether we set it."""
    if not isinstance(table, dict):
        return False
    if "default_runtime" in changes:
        return True
    options = table.get("options")
    if not isinstance(options, dict):
        return False
    binary = options.get("BinaryName") or options.get("Runtime")
    return bool(binary) and binary in {r.path for r in req.runtimes}


def _restore(doc: Any, path: tuple[str, ...], prev: dict | None, where: str) -> None:
    if prev and prev.get("had"):
        te.set_key(te.ensure_table(doc, path[:-1], where), path[-1], prev["previous"])
    else:
        te.delete_key(doc, path)
