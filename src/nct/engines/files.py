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
    """File contents (newlines untouched), None when it does not exist.  Bounded: only a
    regular file of at most MAX_DOCUMENT_BYTES is read (a config swapped for a FIFO or
    /dev/zero is an error, never a hang or an unbounded read)."""
    import stat

    from nct.limits import read_document

    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise EngineConfigError(f"{path}: cannot read: {e.strerror or e}") from None
    try:
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                raise EngineConfigError(f"{path}: not a regular file; put the engine's config file there")
            return read_document(f).decode("utf-8")
    except (OSError, UnicodeDecodeError, ValueError) as e:
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


def atomic_write(path: str, text: str, mode: int | None = None, follow: bool = True) -> None:
    """nct.fileio.atomic_write for engine files: a symlinked config (e.g. into a ConfigMap
    or /etc/alternatives) is written at its target so the link survives.  These are the
    host's own engine files, never a container's.  nct's own files beside them (`.bak`, the
    state file) pass follow=False: a link planted at such a name is replaced, not written
    through."""
    from nct.fileio import atomic_write as write_bytes

    if follow and os.path.islink(path):
        path = os.path.realpath(path)
    try:
        write_bytes(path, text.encode("utf-8"), mode=mode)
    except OSError as e:
        raise EngineConfigError(f"{path}: cannot write: {e.strerror or e}") from None


def remove_beneath(base: str, path: str, kind: str) -> None:
    """Remove `path` (kind "file", an empty "dir", or a "tree") reached from `base` without
    following a symlink below it: each dir is opened from its parent's fd with O_NOFOLLOW.
    A path that is not below base, is gone, or has a symlink in its way is left alone, so a
    link planted in the toolkit dir while the pod ran cannot turn the undo onto host files."""
    rel = os.path.relpath(os.path.abspath(path), os.path.abspath(base))
    if rel == os.pardir or rel.startswith(os.pardir + os.sep) or (rel == os.curdir and kind != "dir"):
        return
    try:
        fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        if rel == os.curdir:
            os.rmdir(base)
            return
        parts = rel.split(os.sep)
        for part in parts[:-1]:
            sub = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            os.close(fd)
            fd = sub
        if kind == "file":
            os.unlink(parts[-1], dir_fd=fd)
        elif kind == "dir":
            os.rmdir(parts[-1], dir_fd=fd)
        else:
            import shutil

            shutil.rmtree(parts[-1], dir_fd=fd)  # refuses a symlink; never follows one inside
    except OSError:
        pass
    finally:
        os.close(fd)


def unlink_links(base: str, path: str) -> None:
    """Remove the symlinks standing at `path` or at any of its dirs below `base` (our own
    dir: nothing we write there may land outside it through a planted link)."""
    rel = os.path.relpath(os.path.abspath(path), os.path.abspath(base))
    if rel == os.curdir or rel == os.pardir or rel.startswith(os.pardir + os.sep):
        return
    p = base
    for part in rel.split(os.sep):
        p = os.path.join(p, part)
        if not os.path.islink(p):
            if not os.path.isdir(p):
                return
            continue
        os.unlink(p)
        return


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
    atomic_write(state_path(config), json.dumps(state, indent=2, sort_keys=True) + "\n", 0o600, follow=False)


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
