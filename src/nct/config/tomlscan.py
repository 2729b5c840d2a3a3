"""Reading plain config.toml files without a TOML parser.

`import tomllib` costs ~15 ms (it pulls in `typing` and `re`), more than the prestart
hook's whole discovery, and the hook and the runtime shim read config.toml on every
container start. The files they read are nearly always upstream's layout: `[table]`
headers, bare keys, one-line strings, booleans, integers and one-line string arrays, with
comments. That subset is read here, exactly as tomllib reads it; anything else (escapes,
multi-line values, dotted or quoted keys, inline tables, floats, dates, duplicates) makes
the functions return None and the caller uses tomllib, which then also reports errors.
`tests/config/test_tomlscan.py` checks the two agree. Kept import-free.
"""

from __future__ import annotations

_BARE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
_DIGITS = frozenset("0123456789")
_MISSING = object()


def first_unquoted(line: str, chars: str) -> int:
    """Index of the first character of `chars` outside a quoted string; -1 when none.
    Backslash escapes are not interpreted (callers avoid lines that hold them)."""
    quote = ""
    for i, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = ""
        elif ch in "\"'":
            quote = ch
        elif ch in chars:
            return i
    return -1


def _plain_text(s: str) -> bool:
    """No character TOML forbids in a string or comment (controls other than tab)."""
    return all(ch == "\t" or (" " <= ch and ch != "\x7f") for ch in s)


def _string(v: str) -> str | None:
    """A one-line basic or literal string without escapes ("..." / '...'), else None."""
    if len(v) < 2 or v[0] not in "\"'" or v[-1] != v[0] or v[0] in v[1:-1] or "\\" in v:
        return None
    if v[:3] in ('"""', "'''"):
        return None
    return v[1:-1] if _plain_text(v[1:-1]) else None


def parse_value(v: str) -> object:
    """A value of the subset (the text after `=`, comment removed), or _MISSING."""
    if v in ("true", "false"):
        return v == "true"
    if v and v[0] in "\"'":
        s = _string(v)
        return _MISSING if s is None else s
    if v and set(v.lstrip("+-")) <= _DIGITS and v.lstrip("+-") and len(v) - len(v.lstrip("+-")) <= 1:
        digits = v.lstrip("+-")
        if len(digits) > 1 and digits[0] == "0":
            return _MISSING  # leading zeros are an error in TOML: leave it to tomllib
        return int(v)
    if len(v) >= 2 and v[0] == "[" and v[-1] == "]":
        inner = v[1:-1].strip(" \t")
        if inner.startswith(","):
            return _MISSING
        if inner.endswith(","):
            inner = inner[:-1].rstrip(" \t")
        items = []
        for part in inner.split(",") if inner else []:
            s = _string(part.strip(" \t"))
            if s is None:
                return _MISSING
            items.append(s)
        return items
    return _MISSING


def _body(line: str) -> str | None:
    """The line without its comment and surrounding blanks; None when the comment holds
    characters TOML forbids."""
    i = first_unquoted(line, "#")
    if i < 0:
        return line.strip(" \t")
    return line[:i].strip(" \t") if _plain_text(line[i + 1:]) else None


def parse_simple(text: str) -> dict | None:
    """The document as tomllib.loads(text) would return it, when `text` uses only the
    subset above; None otherwise."""
    if "\\" in text or '"""' in text or "'''" in text or "\ufeff" in text or text.endswith("\r"):
        return None  # (a CR is only valid before a LF)
    doc: dict = {}
    table = doc
    defined: set[tuple[str, ...]] = set()  # tables given a [header]
    for raw in text.split("\n"):
        line = raw[:-1] if raw.endswith("\r") else raw
        if "\r" in line:
            return None
        body = _body(line)
        if body is None:
            return None
        if not body:
            continue
        if body[0] == "[":
            if body.startswith("[[") or not body.endswith("]"):
                return None
            parts = tuple(p.strip(" \t") for p in body[1:-1].split("."))
            if not all(p and set(p) <= _BARE for p in parts) or parts in defined:
                return None
            defined.add(parts)
            table = doc
            for p in parts:
                nxt = table.setdefault(p, {})
                if not isinstance(nxt, dict):
                    return None  # a key already holds a value
                table = nxt
            continue
        key, eq, value = body.partition("=")
        key, value = key.strip(" \t"), value.strip(" \t")
        if not eq or not key or not set(key) <= _BARE or key in table:
            return None
        parsed = parse_value(value)
        if parsed is _MISSING:
            return None
        table[key] = parsed
    return doc
