"""Finding executables the way upstream's runtime does: the low-level runtime from the
`runtimes` list, and the hook / nvidia-ctk paths written into specs."""

from __future__ import annotations

import os
import stat

# Searched after $PATH: engines often run the shim with a minimal environment.
FALLBACK_DIRS = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")


class RuntimeNotFound(LookupError):
    """No candidate in the runtimes list resolves to an executable file."""


def _executable(path: str) -> os.stat_result | None:
    """stat of path if it is (after symlinks) a regular file with an exec bit."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    if stat.S_ISREG(st.st_mode) and st.st_mode & 0o111:
        return st
    return None


def _search_dirs(env_path: str | None) -> list[str]:
    dirs = [d for d in (env_path or "").split(os.pathsep) if d]
    return dirs + [d for d in FALLBACK_DIRS if d not in dirs]


def locate(name: str, env_path: str | None = None, *, exclude: tuple[int, int] | None = None) -> str | None:
    """Absolute name: checked directly; bare name: $PATH then the fallback dirs.

    `exclude` is a (st_dev, st_ino) to skip, so the shim never finds itself (installed as
    `runc`, say) and loops forever.
    """
    if not name:
        return None
    if "/" in name:
        candidates = [name if os.path.isabs(name) else os.path.abspath(name)]
    else:
        candidates = [os.path.join(d, name) for d in _search_dirs(env_path)]
    for path in candidates:
        st = _executable(path)
        if st is not None and (exclude is None or (st.st_dev, st.st_ino) != exclude):
            return path
    return None


def find_runtime(candidates: tuple[str, ...] | list[str], env_path: str | None = None,
                 self_path: str | None = None) -> str:
    """The first runtime in `candidates` that resolves to an executable file."""
    if not candidates:
        raise RuntimeNotFound("nvidia-container-runtime.runtimes: at least one runtime candidate must be specified")
    exclude = None
    if self_path:
        try:
            st = os.stat(self_path)
            exclude = (st.st_dev, st.st_ino)
        except OSError:
            pass
    for name in candidates:
        found = locate(name, env_path, exclude=exclude)
        if found:
            return found
    raise RuntimeNotFound(
        "no low-level runtime found from nvidia-container-runtime.runtimes " + repr(list(candidates))
    )


def resolve_tool(configured: str, default_name: str, env_path: str | None = None) -> str:
    """Absolute path for a tool named in config (hook, nvidia-ctk): absolute as is, else
    looked up, else /usr/bin/<default_name>, as upstream does."""
    name = configured or default_name
    if os.path.isabs(name):
        return name
    found = locate(name, env_path)
    if found:
        return found
    return "/usr/bin/" + default_name
