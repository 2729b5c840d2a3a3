"""Read config.toml into the typed model (hot path: stdlib tomllib only, no click/tomlkit).

Errors are one line naming the file, the line and the dotted key. tomllib reports no
positions for values, so a bad value's line is found by scanning the text for its key.
"""

from __future__ import annotations

import os

from nct.config import model, schema
from nct.config.paths import read_config_text, resolve_config_path
from nct.config.tomlscan import find_key_line
from nct.errors import ConfigError

DEFAULT_LDCONFIG = "@/sbin/ldconfig"
LDCONFIG_REAL = "/sbin/ldconfig.real"


def _ldconfig_real_exists() -> bool:
    """Whether the host has Debian/Ubuntu's real ldconfig binary (tests patch this)."""
    return os.path.exists(LDCONFIG_REAL)


def effective_ldconfig(value: str) -> str:
    """Upstream's normalisation: the default "@/sbin/ldconfig" means "@/sbin/ldconfig.real"
    on hosts where /sbin/ldconfig is a wrapper script around the real binary."""
    if value == DEFAULT_LDCONFIG and _ldconfig_real_exists():
        return "@" + LDCONFIG_REAL
    return value


def default_config() -> model.Config:
    """The built-in defaults, with the host-dependent ldconfig path applied."""
    return config_from_mapping({}, None)


def load_config(path: str | None = None, *, required: bool | None = None) -> model.Config:
    """Load the config. path None = upstream resolution (NVIDIA_CTK_CONFIG_FILE_PATH, then
    $XDG_CONFIG_HOME/..., then /etc/...). A missing file gives the defaults unless it is
    `required` (default: only when `path` was given explicitly)."""
    if path is None:
        path, _ = resolve_config_path()
        must_exist = bool(required)
    else:
        must_exist = True if required is None else required
    text = read_config_text(path, must_exist)
    if text is None:
        return default_config()
    return parse_config(text, path)


# Patterns of tomllib's messages, compiled (and cached by `re`) only when a file is bad.
_POS = r"\s*\(at line (\d+), column (\d+)\)\s*$"
_END = r"\s*\(at end of document\)\s*$"


def parse_config(text: str, source: str | None = None) -> model.Config:
    """Parse config.toml text; `source` names the file in error messages. Plain files
    (upstream's layout) are read without tomllib, whose import costs ~15 ms of every hook
    and `create` (nct.config.tomlscan); anything else goes to tomllib."""
    from nct.config.tomlscan import parse_simple

    data = parse_simple(text)
    if data is not None:
        return config_from_mapping(data, source, text)
    import re
    import tomllib  # here, not at the top: a plain config.toml never pays for it

    name = source or "<config>"
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        msg = str(e)
        m = re.search(_POS, msg)
        if m:
            where = f"line {m.group(1)}, column {m.group(2)}"
            msg = msg[: m.start()]
        else:
            where = f"line {max(1, len(text.splitlines()))}"
            msg = re.sub(_END, "", msg)
        raise ConfigError(f"{name}: {where}: invalid TOML: {msg}") from None
    return config_from_mapping(data, source, text)


# ---------------------------------------------------------------------------------------
# mapping -> model


def _toml_type(value: object) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "table"
    return "date/time"


def _show(value: object) -> str:
    s = repr(value) if not isinstance(value, str) else '"' + value + '"'
    return s if len(s) <= 60 else s[:57] + "..."


class _Ctx:
    """Error reporting context: file name and text for line lookup."""

    def __init__(self, source: str | None, text: str | None):
        self.source = source
        self.text = text

    def error(self, key: str, message: str) -> ConfigError:
        parts = [self.source or "<config>"]
        if self.text is not None:
            line = find_key_line(self.text, key)
            if line is not None:
                parts.append(f"line {line}")
        parts.append(key)
        parts.append(message)
        return ConfigError(": ".join(parts))


def _coerce(ctx: _Ctx, key: schema.Key, value: object) -> object:
    kind = key.kind
    if kind == "bool":
        if isinstance(value, bool):
            return value
        raise ctx.error(key.path, f"expected a boolean, got {_toml_type(value)} {_show(value)}")
    if kind in ("str", "optstr"):
        if isinstance(value, str):
            return value
        raise ctx.error(key.path, f"expected a string, got {_toml_type(value)} {_show(value)}")
    # list of strings: a TOML array, or a comma-separated string
    if isinstance(value, str):
        return tuple(p for p in (s.strip() for s in value.split(",")) if p)
    if isinstance(value, list):
        for i, item in enumerate(value):
            if not isinstance(item, str):
                raise ctx.error(
                    key.path, f"expected an array of strings, item {i} is {_toml_type(item)} {_show(item)}"
                )
        return tuple(value)
    raise ctx.error(key.path, f"expected an array of strings, got {_toml_type(value)} {_show(value)}")


def _build(ctx: _Ctx, cls: type, prefix: str, data: dict) -> object:
    kwargs = {}
    for name, value in data.items():
        path = f"{prefix}.{name}" if prefix else name
        attr = name.replace("-", "_")
        if path in schema.SECTIONS:
            if not isinstance(value, dict):
                raise ctx.error(path, f"expected a table, got {_toml_type(value)} {_show(value)}")
            kwargs[attr] = _build(ctx, schema.SECTIONS[path], path, value)
        elif path in schema.KEYS:
            kwargs[attr] = _coerce(ctx, schema.KEYS[path], value)
        # anything else is an unknown key: kept in Config.raw only
    return cls(**kwargs)


def config_from_mapping(data: dict, source: str | None = None, text: str | None = None) -> model.Config:
    """Build and validate a Config from parsed TOML (unknown keys stay in `raw`)."""
    ctx = _Ctx(source, text)
    cfg = _build(ctx, model.Config, "", data)
    assert isinstance(cfg, model.Config)
    _validate(ctx, cfg)
    cli = cfg.nvidia_container_cli
    ldconfig = effective_ldconfig(cli.ldconfig)
    changes: dict = {"source_path": source, "raw": data}
    if ldconfig != cli.ldconfig:
        changes["nvidia_container_cli"] = cli.replace(ldconfig=ldconfig)
    return cfg.replace(**changes)


def _validate(ctx: _Ctx, cfg: model.Config) -> None:
    ldconfig = cfg.nvidia_container_cli.ldconfig
    if not ldconfig.startswith("@") and not cfg.features.allow_ldconfig_from_container:
        raise ctx.error(
            "nvidia-container-cli.ldconfig",
            f"{_show(ldconfig)} must be a host path starting with '@' "
            "(or set features.allow-ldconfig-from-container = true)",
        )
    rt = cfg.nvidia_container_runtime
    if rt.mode not in schema.RUNTIME_MODES:
        raise ctx.error(
            "nvidia-container-runtime.mode",
            f"unknown mode {_show(rt.mode)} (expected one of: {', '.join(schema.RUNTIME_MODES)})",
        )
    if rt.log_level.lower() not in schema.LOG_LEVELS:
        raise ctx.error(
            "nvidia-container-runtime.log-level",
            f"unknown log level {_show(rt.log_level)} (expected one of: {', '.join(schema.LOG_LEVELS)})",
        )
    compat = rt.modes.legacy.cuda_compat_mode
    if compat not in schema.CUDA_COMPAT_MODES:
        raise ctx.error(
            "nvidia-container-runtime.modes.legacy.cuda-compat-mode",
            f"unknown mode {_show(compat)} (expected one of: {', '.join(schema.CUDA_COMPAT_MODES)})",
        )


def check_supported_capabilities(cfg: model.Config) -> None:
    """The prestart hook's check (upstream's hook refuses to start): supported-driver-capabilities
    is `all` or a comma list of known capability names. Other commands accept any value."""
    value = cfg.supported_driver_capabilities
    if value == "all":
        return
    from nct.driver.model import ALL_CAPABILITIES

    unknown = [c for c in (p.strip() for p in value.split(",")) if c and c not in ALL_CAPABILITIES]
    if not unknown:
        return
    text = None
    if cfg.source_path:
        try:
            with open(cfg.source_path, encoding="utf-8", errors="replace") as f:
                text = f.read(1 << 20)
        except OSError:
            pass
    raise _Ctx(cfg.source_path, text).error(
        "supported-driver-capabilities",
        f"unknown capability {', '.join(_show(c) for c in unknown)} "
        f"(use 'all' or a comma list of: {','.join(sorted(ALL_CAPABILITIES))})")


# ---------------------------------------------------------------------------------------
# key -> line number
