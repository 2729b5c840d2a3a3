"""The few config keys every shim invocation needs, read without the full config loader.

`state`, `start`, `kill` and `delete` only need `[nvidia-container-runtime]` `runtimes`,
`debug` and `log-level`. Importing the typed config model costs more than runc itself,
so pass-through reads just these keys with nct.config.tomlscan (tomllib only for a file
outside its plain subset; nothing at all when there is no config file). `create` loads and validates the whole file with
`nct.config.load.load_config`. A mistake elsewhere in config.toml therefore never stops
`runc delete` of running containers; it is reported on the next `create`.
"""

from __future__ import annotations

import stat

from nct.config.paths import read_config_file, resolve_config_path
from nct.config.tomlscan import read_table_keys

DEFAULT_RUNTIMES = ("runc", "crun")


class ShimSettings:
    __slots__ = ("path", "explicit", "exists", "runtimes", "debug", "log_level", "mode", "config_key", "config_text")

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
        self.config_text = ""  # what the settings were parsed from (the pass-through cache records it)


def _error(msg: str) -> Exception:
    from nct.errors import ConfigError

    return ConfigError(msg)


def read_settings(environ=None) -> ShimSettings:
    """Resolve config.toml as upstream does and read the shim's keys from it."""
    path, explicit = resolve_config_path(environ)
    s = ShimSettings(path, explicit)
    text, st = read_config_file(path, explicit)
    if text is None:
        return s
    s.exists = True
    s.config_text = text
    from nct.runtime.passthrough import stat_key

    s.config_key = stat_key(st) if st is not None and stat.S_ISREG(st.st_mode) else None
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


def scan_runtime_section(text: str) -> dict | None:
    """runtimes/debug/log-level/mode of [nvidia-container-runtime] from a plain
    config.toml without a TOML parser (the import alone costs more than runc `state`);
    None: leave the file to tomllib (nct.config.tomlscan.read_table_keys)."""
    return read_table_keys(text, _SECTION, _WANTED)


def load_full_config(settings: ShimSettings):
    """The whole validated Config for `create` (same file the fast read used)."""
    from nct.config.load import load_config

    if not settings.exists and not settings.explicit:
        from nct.config.load import default_config

        return default_config()
    return load_config(settings.path)
