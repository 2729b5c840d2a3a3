"""Plan and apply engine edits: read the files (or the engine's own config dump), ask the
engine module for new contents, then write them atomically with a `.bak` and a state
record; and the reverse, which gives back the pre-nct bytes when nobody edited the file
since, and otherwise removes just what we added."""

from __future__ import annotations

import os
from nct.record import Record, field

from nct.engines import containerd, crio, docker
from nct.engines.files import (
    atomic_write, digest, load_state, made_dirs, merge_changes, read_text, remove_file,
    save_state, state_path, unified_diff,
)
from nct.engines.model import Edit, EngineRequest
from nct.engines.reload import run_tool
from nct.errors import EngineConfigError

MODULES = {"docker": docker, "containerd": containerd, "crio": crio}


class Plan(Record, frozen=False):
    """Files to change (path -> new text, None = delete) and housekeeping for apply()."""

    request: EngineRequest
    files: dict[str, str | None]
    primary: str | None = None
    changes: dict = field(default_factory=dict)
    remove: bool = False
    drop_backups: list[str] = field(default_factory=list)
    drop_dirs: list[str] = field(default_factory=list)

    def changed(self) -> dict[str, str | None]:
        return {p: t for p, t in self.files.items() if read_text(p) != t}

    def diff(self) -> str:
        return "".join(unified_diff(p, read_text(p), t) for p, t in self.changed().items())


def check_request(req: EngineRequest) -> None:
    if req.engine not in MODULES:
        raise EngineConfigError(f"unsupported runtime {req.engine!r} (want docker, containerd or crio)")
    if req.engine == "docker" and req.drop_in:
        raise EngineConfigError("docker does not support drop-in config files (--drop-in-config)")
    if req.drop_in and not os.path.isabs(req.drop_in):
        raise EngineConfigError(f"--drop-in-config {req.drop_in}: must be an absolute path")
    if req.config_source not in ("file", "command"):
        raise EngineConfigError(f"--config-source {req.config_source}: want file or command")
    for rt in req.runtimes:
        if req.engine != "docker" and not os.path.isabs(rt.path):
            raise EngineConfigError(f"--nvidia-runtime-path {rt.path}: must be an absolute path for {req.engine}")
        if not rt.name:
            raise EngineConfigError("--nvidia-runtime-name must not be empty")


def source_text(req: EngineRequest) -> str | None:
    """The engine's effective config for `--config-source command` (None = use the file)."""
    if req.config_source != "command" or req.engine == "docker":
        return None
    if req.engine == "containerd":
        exe = req.executable_path or "containerd"
        cmd = [exe] + (["--config", req.config] if os.path.exists(req.config) else []) + ["config", "dump"]
        return _run(cmd)
    exe = req.executable_path or "crio"
    try:
        return _run([exe, "status", "config"])
    except FileNotFoundError:
        if req.executable_path:
            raise EngineConfigError(f"{exe}: not found") from None
        return _run(["crio-status", "config"])


def _run(cmd: list[str]) -> str:
    return run_tool(cmd, env=_host_env(), timeout=60,
                    needed_by=None if cmd[0].startswith("crio") else "--config-source command")


def _host_env() -> dict[str, str]:
    keep = ("PATH", "HOME", "LANG", "LC_ALL", "XDG_RUNTIME_DIR", "CONTAINER_RUNTIME_ENDPOINT")
    return {k: os.environ[k] for k in keep if k in os.environ}


def plan_configure(req: EngineRequest, source: str | None = None) -> Plan:
    """`source`: the engine's effective config when the caller read it already (the
    installer's config sources); None = as `req.config_source` says."""
    check_request(req)
    main = read_text(req.config)
    if req.engine == "docker":
        edit: Edit = docker.configure(req, main)
    else:
        module = MODULES[req.engine]
        drop = read_text(req.drop_in) if req.drop_in else None
        edit = module.configure(req, main, source if source is not None else source_text(req), drop)
    return Plan(req, edit.files, edit.primary, edit.changes)


def plan_unconfigure(req: EngineRequest) -> Plan:
    check_request(req)
    module = MODULES[req.engine]
    state = load_state(req.config)
    plan = Plan(req, {}, remove=True)
    if state is None:
        for path in filter(None, (req.drop_in, req.config)):
            text = read_text(path)
            if text is not None:
                plan.files[path] = module.remove(req, path, text, {})
        return plan
    changes = state.get("changes", {})
    file_dirs, dirs = _state_bounds(req)
    for path, entry in (state.get("files") or {}).items():
        if not isinstance(path, str) or not isinstance(entry, dict) or os.path.dirname(path) not in file_dirs:
            continue  # a state file is a host file: it may name only the engine's own config dirs
        current = read_text(path)
        if digest(current) == entry.get("written"):
            original = entry.get("original")
            plan.files[path] = original if isinstance(original, str) else None
            if entry.get("backup") == path + ".bak":
                plan.drop_backups.append(path + ".bak")
        else:
            plan.files[path] = module.remove(req, path, current, changes)
    plan.drop_dirs = [d for d in reversed(state.get("dirs") or []) if isinstance(d, str) and d in dirs]
    return plan


def _state_bounds(req: EngineRequest) -> tuple[set[str], set[str]]:
    """What an unconfigure may touch: files in the config's and the drop-in's dirs, and those
    dirs and their parents (the dirs a configure made); whatever else a state file lists is
    ignored, so a planted state cannot make the undo write or remove other host files."""
    files: set[str] = set()
    dirs: set[str] = set()
    for path in filter(None, (req.config, req.drop_in)):
        d = os.path.dirname(os.path.abspath(path))
        files.add(d)
        while d not in dirs and d != os.path.dirname(d):
            dirs.add(d)
            d = os.path.dirname(d)
    return files, dirs


def apply(plan: Plan) -> list[str]:
    """Write the plan; return the paths that changed.  State is saved before the files
    so an interrupted run can still be undone."""
    req = plan.request
    changed = plan.changed()
    if plan.remove:
        for path, text in _ordered(changed, req):
            if text is None:
                remove_file(path)
            else:
                atomic_write(path, text)
        for bak in plan.drop_backups:
            remove_file(bak)
        remove_file(state_path(req.config))
        for d in plan.drop_dirs:
            try:
                os.rmdir(d)
            except OSError:
                pass
        return list(changed)
    if not changed:
        return []
    state = load_state(req.config) or {"engine": req.engine, "files": {}, "changes": {}, "dirs": []}
    dirs = made_dirs(state_path(req.config))
    for path, text in changed.items():
        entry = state["files"].get(path)
        if entry is None:
            before = read_text(path)
            entry = state["files"][path] = {"original": before, "backup": None}
            bak = path + ".bak"
            if path == req.config and before is not None and (os.path.islink(bak) or not os.path.exists(bak)):
                atomic_write(bak, before, os.stat(path).st_mode & 0o7777, follow=False)
                entry["backup"] = bak
        entry["written"] = digest(text)
    state["changes"] = merge_changes(state.get("changes", {}), plan.changes)
    for path, text in _ordered(changed, req):
        if text is not None:
            dirs += made_dirs(path)
    state["dirs"] = state.get("dirs", []) + [d for d in dirs if d not in state.get("dirs", [])]
    save_state(req.config, state)
    for path, text in _ordered(changed, req):
        if text is None:
            remove_file(path)
        else:
            atomic_write(path, text)
    return list(changed)


def _ordered(files: dict[str, str | None], req: EngineRequest):
    """Drop-ins before the top-level file, so an import never points at a half state."""
    return sorted(files.items(), key=lambda kv: kv[0] == req.config)
