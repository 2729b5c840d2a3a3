"""The few config keys every shim invocation needs, read without the full config loader.

`state`, `start`, `kill` and `delete` only need `[nvidia-container-runtime]` `runtimes`,
`debug` and `log-level`. Importing the typed config model costs more than runc itself,
so pass-through reads just these keys with tomllib (and reads nothing at all when there
is no config file). `create` loads and validates the whole file with
`nct.config.load.load_config`. A mistake elsewhere in config.toml therefore never stops
`runc delete` of running containers; it is reported on the next `create`.
"""

from __future__ import annotations

import os
import stat

from nct.config.paths import resolve_config_path
from nct.config.tomlscan import first_unquoted, parse_value

DEFAULT_RUNTIMES = ("runc", "crun")


class ShimSettings:
    __slots__ = ("path", "explicit", "exists", "runtimes", "debug", "log_level", "mode", "config_key")

    def __init__(self, path: str, explicit: bool) -> None:
        self.path = path
        self.explicit = explicit
        self.exists = False
        self.runtimes: tuple[str, ...] = DEFAULT_RUNTIMES
        self.debug = "/dev/null"
        self.log_level = "info"
        self.mode = "auto"
        # what the content read was: "-" for no file, a stat key, None when it changed under us
        self.config_key: str | None = "-"


def _error(msg: str) -> Exception:
    from nct.errors import ConfigError

    return ConfigError(msg)


def read_settings(environ=None) -> ShimSettings:
    """Resolve config.toml as upstream does and read the shim's keys from it."""
    path, explicit = resolve_config_path(environ)
    s = ShimSettings(path, explicit)
    try:
        with open(path, "rb") as f:
            before = os.fstat(f.fileno())
            data = f.read()
            after = os.fstat(f.fileno())
    except FileNotFoundError:
        if explicit:
            raise _error(f"{path}: config file not found") from None
        return s
    except OSError as e:
        raise _error(f"{path}: cannot read config file: {e.strerror}") from None
    s.exists = True
    from nct.runtime.passthrough import stat_key

    key = stat_key(before)
    s.config_key = key if key == stat_key(after) and stat.S_ISREG(after.st_mode) else None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise _error(f"{path}: invalid TOML: not valid UTF-8") from None
    section = scan_runtime_section(text)
    if section is None:  # not a plain file: let the real TOML parser read it
        section = _tomllib_section(text, path)
    runtimes = section.get("runtimes", DEFAULT_RUNTIMES)
    if isinstance(runtimes, str):  # upstream also accepts a comma-separated string
        runtimes = [r.strip() for r in runtimes.split(",") if r.strip()]
    if not isinstance(runtimes, (list, tuple)) or not all(isinstance(r, str) for r in runtimes):
        raise _error(f"{path}: nvidia-container-runtime.runtimes: expected an array of strings")
    s.runtimes = tuple(runtimes)
    for key, attr in (("debug", "debug"), ("log-level", "log_level"), ("mode", "mode")):
        if key in section:
            value = section[key]
            if not isinstance(value, str):
                raise _error(f"{path}: nvidia-container-runtime.{key}: expected a string")
            setattr(s, attr, value)
    return s


def _tomllib_section(text: str, path: str) -> dict:
    import tomllib

    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise _error(f"{path}: invalid TOML: {e}") from None
    section = doc.get("nvidia-container-runtime", {})
    if not isinstance(section, dict):
        raise _error(f"{path}: nvidia-container-runtime: expected a table")
    return section


_SECTION = "nvidia-container-runtime"
_WANTED = ("runtimes", "debug", "log-level", "mode")


def _strip_comment(line: str) -> str | None:
    """The line without a trailing comment; None when it holds escapes (leave to tomllib)."""
    if "#" not in line:
        return line.strip()
    if "\\" in line:
        return None
    i = first_unquoted(line, "#")
    return (line[:i] if i >= 0 else line).strip()


def scan_runtime_section(text: str) -> dict | None:
    """Read runtimes/debug/log-level/mode of [nvidia-container-runtime] from a plain
    config.toml without a TOML parser (the import alone costs more than runc `state`).

    Conservative: returns None (use tomllib) on anything but simple one-line
    `key = "string"` / `key = ["a", "b"]` entries in that section, multi-line strings
    anywhere, or dotted keys reaching into the section from elsewhere.
    """
    if '"""' in text or "'''" in text:
        return None
    out: dict = {}
    current = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] == "#":
            continue
        if line[0] == "[":
            header = _strip_comment(line)
            if header is None or not header.endswith("]") or header.startswith("[["):
                if line.startswith("[[") and _SECTION not in line:
                    current = "\0array"
                    continue
                return None
            current = header[1:-1].strip()
            if current.strip("\"'") == _SECTION and current != _SECTION:
                return None  # quoted header: leave to tomllib
            continue
        if current != _SECTION:
            if current == "" and line.lstrip("\"'").startswith(_SECTION):
                return None  # dotted key or inline table for the section
            continue
        body = _strip_comment(line)
        if body is None:
            return None
        key, eq, value = body.partition("=")
        key, value = key.strip(), value.strip()
        if not eq or not key:
            return None
        if key not in _WANTED:
            if key[0] in "\"'" or key.split(".", 1)[0].strip() in _WANTED:
                return None  # quoted or dotted variants of a key we need
            continue
        if key in out:
            return None
        item = parse_value(value)
        if not isinstance(item, (str, list)):  # anything else: tomllib and its errors
            return None
        out[key] = item
    return out


def load_full_config(settings: ShimSettings):
    """The whole validated Config for `create` (same file the fast read used)."""
    from nct.config.load import load_config

    if not settings.exists and not settings.explicit:
        from nct.config.load import default_config

        return default_config()
    return load_config(settings.path)
