"""Edit config.toml in place of a user: tomlkit keeps comments, order and formatting, so
only the keys asked for change. Used by `nvidia-ctk config` (and the installer).

`--set` parsing follows upstream: `key` alone means true for a boolean, lists split on
',' (or ':' when there is no ','), values are checked against the model's type, unknown
keys are refused. A value equal to a key's built-in default is written the way upstream
writes it in the default file: as the commented suggestion ("#no-cgroups = false").
"""

from __future__ import annotations

import os
from importlib import resources

from nct import tomledit as te
from nct.config import schema
from nct.config.load import DEFAULT_LDCONFIG, effective_ldconfig, parse_config
from nct.errors import ConfigError


class _Delete:
    """Sentinel value: remove the key (upstream's `nil` for unset-able keys)."""

    def __repr__(self) -> str:
        return "DELETE"


DELETE = _Delete()
_MISSING = object()

_TRUE = {"1", "t", "T", "TRUE", "true", "True"}
_FALSE = {"0", "f", "F", "FALSE", "false", "False"}


def default_text() -> str:
    """`nvidia-ctk config default`: the packaged default file, with the host's ldconfig."""
    text = resources.files("nct.config").joinpath("default.toml").read_text(encoding="utf-8")
    ldconfig = effective_ldconfig(DEFAULT_LDCONFIG)
    if ldconfig != DEFAULT_LDCONFIG:
        text = text.replace(f'ldconfig = "{DEFAULT_LDCONFIG}"', f'ldconfig = "{ldconfig}"', 1)
    return text


def parse_document(text: str, source: str | None = None) -> te.TOMLDocument:
    """Parse TOML for editing; syntax errors name the file and line."""
    try:
        return te.parse_raw(text)
    except te.ParseError as e:
        msg = str(e).split(" at line ")[0]
        raise ConfigError(f"{source or '<config>'}: line {e.line}, column {e.col + 1}: invalid TOML: {msg}") from None


def load_document(path: str) -> tuple[te.TOMLDocument, bool]:
    """(document, existed). A missing file yields the default document, as upstream's
    `nvidia-ctk config` does (so `--in-place` creates a complete file)."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        return parse_document(default_text(), "<default>"), False
    except (OSError, UnicodeDecodeError) as e:
        detail = getattr(e, "strerror", None) or str(e)
        raise ConfigError(f"{path}: cannot read config file: {detail}") from None
    return parse_document(text, path), True


# ---------------------------------------------------------------------------------------
# --set parsing


def lookup_key(key: str) -> schema.Key:
    """The schema entry for a dotted key; unknown keys are a one-line error."""
    entry = schema.KEYS.get(key)
    if entry is None:
        if key in schema.SECTIONS:
            raise ConfigError(f"invalid config option {key}: a section, not a key")
        raise ConfigError(f"invalid config option {key}: unknown key")
    return entry


def split_list(value: str, separator: str | None = None) -> list[str]:
    """A --set list value: split on `separator`, else on ',' (or ':' without any ',')."""
    if value == "":
        return []
    if separator is None:
        separator = "," if ("," in value or ":" not in value) else ":"
    return [p for p in value.split(separator) if p != ""]


def parse_value(key: str, value: str | None, *, list_separator: str | None = None) -> object:
    """Typed value for `--set key[=value]` (None = no '=' given)."""
    entry = lookup_key(key)
    if value is None:
        if entry.kind == "bool":
            return True
        raise ConfigError(f"invalid --set option {key}: expected {key}=VALUE")
    if value == "nil" and key in schema.OPTIONAL_KEYS:
        return DELETE
    if entry.kind == "bool":
        if value in _TRUE:
            return True
        if value in _FALSE:
            return False
        raise ConfigError(f"invalid --set option {key}={value}: expected a boolean (true/false)")
    if entry.kind == "list":
        sep = "," if key == "nvidia-container-cli.environment" and list_separator is None else list_separator
        return split_list(value, sep)
    return value


def parse_set(flag: str, *, list_separator: str | None = None) -> tuple[str, object]:
    """`key[=value]` -> (key, typed value or DELETE)."""
    key, eq, value = flag.partition("=")
    key = key.strip()
    if not key:
        raise ConfigError(f"invalid --set option {flag!r}: empty key")
    return key, parse_value(key, value if eq else None, list_separator=list_separator)


# ---------------------------------------------------------------------------------------
# document edits


def _not_a_table(path: str) -> ConfigError:
    return ConfigError(f"cannot set keys under {path}: it is a value, not a table")


def _get_table(doc: te.TOMLDocument, section: list[str], create: bool):
    return te.table_at(doc, section, create, _not_a_table)


def set_value(doc: te.TOMLDocument, key: str, value: object) -> None:
    """Set one dotted key, checked against the model. `value` may be typed (bool, str,
    list) or the raw --set string; DELETE removes the key."""
    entry = lookup_key(key)
    if isinstance(value, str) and entry.kind != "str" and entry.kind != "optstr":
        value = parse_value(key, value)
    _check_type(entry, value)
    parts = key.split(".")
    section, name = parts[:-1], parts[-1]

    if value is DELETE:
        table = _get_table(doc, section, create=False)
        if table is not None and name in table:
            del table[name]
        return

    suggestion = schema.COMMENTED_SUGGESTIONS.get(key, _MISSING)
    is_default = value == _as_toml(entry.default) or (
        key == "nvidia-container-runtime.debug" and value == "/dev/null"
    )
    if suggestion is not _MISSING and is_default:
        # Written as upstream writes defaults: the commented suggestion, no active key.
        table = _get_table(doc, section, create=False)
        if table is not None:
            te.comment_out(table, name, suggestion)
        return

    created = _get_table(doc, section, create=False) is None
    table = _get_table(doc, section, create=True)
    te.set_in_place(table, name, value)
    if created and section:
        te.separate_new_table(doc, section)


def _as_toml(default: object) -> object:
    return list(default) if isinstance(default, tuple) else default


def _check_type(entry: schema.Key, value: object) -> None:
    if value is DELETE:
        if entry.path not in schema.OPTIONAL_KEYS:
            raise ConfigError(f"invalid config option {entry.path}: cannot be unset (nil)")
        return
    ok = {
        "bool": lambda v: isinstance(v, bool),
        "str": lambda v: isinstance(v, str),
        "optstr": lambda v: isinstance(v, str),
        "list": lambda v: isinstance(v, (list, tuple)) and all(isinstance(i, str) for i in v),
    }[entry.kind](value)
    if not ok:
        raise ConfigError(f"invalid value for {entry.path}: expected {entry.kind}, got {type(value).__name__}")


def apply_sets(doc: te.TOMLDocument, flags: list[str], *, list_separator: str | None = None) -> None:
    """Apply repeated `--set key[=value]` flags in order."""
    for flag in flags:
        key, value = parse_set(flag, list_separator=list_separator)
        set_value(doc, key, value)


def render(doc: te.TOMLDocument, source: str | None = None) -> str:
    """The document as text, validated by the same loader the runtime uses."""
    text = te.dumps(doc)
    parse_config(text, source)
    return text


def write_atomic(path: str, text: str) -> None:
    """Replace `path` atomically (nct.fileio); keeps the old file's permission bits, 0644
    for a new file; the original is untouched on error."""
    from nct.fileio import atomic_write

    try:
        os.makedirs(os.path.dirname(os.path.abspath(path)), mode=0o755, exist_ok=True)
        atomic_write(path, text.encode("utf-8"))
    except OSError as e:
        raise ConfigError(f"{path}: cannot write config file: {e.strerror or e}") from None
