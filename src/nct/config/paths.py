"""Where config.toml lives: upstream's resolution order, shared by every component."""

from __future__ import annotations

import os

ENV_CONFIG_FILE = "NVIDIA_CTK_CONFIG_FILE_PATH"
ENV_XDG = "XDG_CONFIG_HOME"
RELATIVE_PATH = "nvidia-container-runtime/config.toml"
SYSTEM_PATH = "/etc/" + RELATIVE_PATH


def resolve_config_path(environ: "os._Environ[str] | dict[str, str] | None" = None) -> tuple[str, bool]:
    """Return (path, explicit). `explicit` is True when the path came from
    NVIDIA_CTK_CONFIG_FILE_PATH: the user named that file, so a missing one is an error.
    Otherwise $XDG_CONFIG_HOME/nvidia-container-runtime/config.toml, then /etc/...;
    a missing file there just means built-in defaults."""
    env = os.environ if environ is None else environ
    explicit = env.get(ENV_CONFIG_FILE, "")
    if explicit:
        return explicit, True
    xdg = env.get(ENV_XDG, "")
    if xdg:
        return os.path.join(xdg, RELATIVE_PATH), False
    return SYSTEM_PATH, False


def config_file_path(environ: "dict[str, str] | None" = None) -> str:
    """The config file path components read by default (see resolve_config_path)."""
    return resolve_config_path(environ)[0]


def read_config_text(path: str, must_exist: bool) -> str | None:
    """The text of config.toml at `path`; None when it is missing and need not exist.
    Errors are one ConfigError line naming the file (and the line of bad UTF-8). Shared by
    the full loader and the runtime shim's pass-through read."""
    return read_config_file(path, must_exist)[0]


def read_config_file(path: str, must_exist: bool) -> tuple[str | None, os.stat_result | None]:
    """read_config_text, plus the file's fstat taken before and after the read when both
    agree (None when the file changed while it was read): the pass-through cache keys on it."""
    from nct.errors import ConfigError

    try:
        with open(path, "rb") as f:
            before = os.fstat(f.fileno())
            data = f.read()
            after = os.fstat(f.fileno())
    except FileNotFoundError:
        if must_exist:
            raise ConfigError(f"{path}: config file not found") from None
        return None, None
    except OSError as e:
        raise ConfigError(f"{path}: cannot read config file: {e.strerror or e}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise ConfigError(f"{path}: line {line}: invalid TOML: not valid UTF-8") from None
    same = (before.st_dev, before.st_ino, before.st_size, before.st_mtime_ns, before.st_ctime_ns) == \
        (after.st_dev, after.st_ino, after.st_size, after.st_mtime_ns, after.st_ctime_ns)
    return text, (after if same else None)
