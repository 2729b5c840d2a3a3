"""File I/O for engine configs: atomic replace, `.bak` of the original, unified diffs, and
a small state file beside the engine config recording what we changed so `unconfigure`
can give the operator's original bytes back."""

from __future__ import annotations

import difflib
import hashlib
import json
import os

from nct.errors import EngineConfigError

STATE_SUFFIX = ".nct-state.json"


def read_text(path: str) -> str | None:
    """File contents (newlines untouched), None when it does not exist."""
    try:
        with open(path, encoding="utf-8", newline="") as f:
            return f.read()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as e:
        raise EngineConfigError(f"{path}: cannot read: {getattr(e, 'strerror', None) or e}") from None


def digest(text: str | None) -> str | None:
    return None if text is None else hashlib.sha256(text.encode()).hexdigest()


def made_dirs(path: str) -> list[str]:
    """Create the parents of `path`; return the ones created, outermost first."""
    missing = []
    d = os.path.dirname(os.path.abspath(path))
    while d and not os.path.isdir(d):
        missing.append(d)
        d = os.path.dirname(d)
    for d in reversed(missing):
        os.mkdir(d, 0o755)
    return list(reversed(missing))


def atomic_write(path: str, text: str, mode: int | None = None) -> None:
    """nct.fileio.atomic_write for engine files: a symlinked config (e.g. into a ConfigMap
    or /etc/alternatives) is written at its target so the link survives.  These are the
    host's own engine files, never a container's."""
    from nct.fileio import atomic_write as write_bytes

    if os.path.islink(path):
        path = os.path.realpath(path)
    try:
        write_bytes(path, text.encode("utf-8"), mode=mode)
    except OSError as e:
        raise EngineConfigError(f"{path}: cannot write: {e.strerror or e}") from None


def remove_file(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def unified_diff(path: str, before: str | None, after: str | None) -> str:
    return "".join(difflib.unified_diff(
        (before or "").splitlines(keepends=True), (after or "").splitlines(keepends=True),
        fromfile=path if before is not None else "/dev/null",
        tofile=path if after is not None else "/dev/null",
    ))


def state_path(config: str) -> str:
    return config + STATE_SUFFIX


def load_state(config: str) -> dict | None:
    text = read_text(state_path(config))
    if text is None:
        return None
    try:
        state = json.loads(text)
    except json.JSONDecodeError:
        raise EngineConfigError(f"{state_path(config)}: corrupt nct state file; remove it to continue") from None
    return state if isinstance(state, dict) else None


def save_state(config: str, state: dict) -> None:
    atomic_write(state_path(config), json.dumps(state, indent=2, sort_keys=True) + "\n", 0o600)


def merge_changes(old: dict, new: dict) -> dict:
    """Fold a later run's record into the first one: the first recorded previous value of
    a key wins, since that is the pre-nct state."""
    out = dict(old)
    for key, value in new.items():
        if key not in out:
            out[key] = value
        elif isinstance(out[key], dict) and isinstance(value, dict) and key in ("runtimes",):
            out[key] = {**value, **out[key]}
        elif isinstance(out[key], list) and isinstance(value, list):
            out[key] = out[key] + [v for v in value if v not in out[key]]
    return out
