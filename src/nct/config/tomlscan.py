"""Reading plain config.toml files without a TOML parser.

`import tomllib` costs ~15 ms (it pulls in `typing` and `re`), more than the prestart
hook's whole discovery, and the hook and the runtime shim read config.toml on every
container start. The files they read are nearly always upstream's layout: `[table]`
headers, bare keys, one-line strings, booleans, integers and one-line string arrays, with
comments. That subset is read here, exactly as tomllib reads it; anything else (escapes,
multi-line values, dotted or quoted keys, inline tables, floats, dates, duplicates) makes
the functions return None and the caller uses tomllib, which then also reports errors.
`tests/config/test_tomlscan.py` checks the two agree. Kept import-free.

The one hand-written TOML reader: `parse_simple` (the whole file: the hook, `create`),
`read_table_keys` (one table: the runtime shim's pass-through) and `find_key_line` (the
line of a key, for error messages). Editing files that keep their comments is tomlkit's
job (nct.tomledit).
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
    return _scan(text, None, ())


def read_table_keys(text: str, table: str, keys: tuple[str, ...]) -> dict | None:
    """The string or string-array values of `keys` in top-level `[table]`, as tomllib
    reads them, when that table is in the subset; None otherwise.

    Only that table is read: other tables (even ones outside the subset, such as `[[x]]`
    or dotted keys) are skipped, so a mistake elsewhere in the file does not stop the
    caller (the runtime shim's pass-through). Declines (None) anything that could make
    tomllib read the table differently: the table named by a dotted key, an inline table,
    a quoted header, or a quoted or dotted variant of a wanted key."""
    return _scan(text, table, keys)


def _scan(text: str, only: str | None, keys: tuple[str, ...]) -> dict | None:
    """parse_simple (only=None) or read_table_keys (only=table): one line walker."""
    if '"""' in text or "'''" in text or "\ufeff" in text or text.endswith("\r"):
        return None  # (a CR is only valid before a LF)
    if only is None and "\\" in text:
        return None
    doc: dict = {}
    table = doc
    inside = only is None  # whether the lines under the current header are read
    at_root = True
    defined: set[tuple[str, ...]] = set()  # tables given a [header]
    for raw in text.split("\n"):
        line = raw[:-1] if raw.endswith("\r") else raw
        if "\r" in line:
            return None
        body = _body(line)
        if body is None:
            if inside:
                return None
            continue  # a line of a table we skip
        if inside and "\\" in body:
            return None
        if not body:
            continue
        if body[0] == "[":
            at_root = False
            if only is not None and (body.startswith("[[") or not _bare_header(body)):
                if only in body:
                    return None  # the table as an array or quoted: leave it to tomllib
                inside = False
                continue
            if body.startswith("[[") or not body.endswith("]"):
                return None
            parts = tuple(p.strip(" \t") for p in body[1:-1].split("."))
            if not all(p and set(p) <= _BARE for p in parts):
                return None
            if only is not None:
                inside = parts == (only,)
                if inside and parts in defined:
                    return None
                defined.add(parts)
                continue
            if parts in defined:
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
        if only is not None:
            if not inside:
                if at_root and key.lstrip("\"'").startswith(only):
                    return None  # a dotted key or inline table for the table
                continue
            if not eq or not key:
                return None
            if key not in keys:
                if key[0] in "\"'" or key.split(".", 1)[0].strip(" \t") in keys:
                    return None  # quoted or dotted variants of a key we read
                if parse_value(value) is _MISSING:
                    return None  # a value we cannot see the end of (an array over lines, say)
                continue
        if not eq or not key or not set(key) <= _BARE or key in table:
            return None
        parsed = parse_value(value)
        if parsed is _MISSING or (only is not None and not isinstance(parsed, (str, list))):
            return None
        table[key] = parsed
    return doc


def _bare_header(body: str) -> bool:
    """A `[a.b]` header of bare keys."""
    return body.endswith("]") and all(
        p.strip(" \t") and set(p.strip(" \t")) <= _BARE for p in body[1:-1].split("."))


# Where a key is defined, for error messages about a file that may be outside the subset
# (read by tomllib): a line locator, not a parser.


def _split_key(s: str) -> list[str]:
    """Split a TOML (dotted, possibly quoted) key into its parts."""
    parts, cur, quote = [], [], ""
    for ch in s:
        if quote:
            if ch == quote:
                quote = ""
            else:
                cur.append(ch)
        elif ch in "\"'":
            quote = ch
        elif ch == ".":
            parts.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur).strip())
    return parts


def _key_part(line: str) -> str | None:
    """The key of a `key = value` line (None when the line has no key)."""
    i = first_unquoted(line, "=#")
    return line[:i] if i >= 0 and line[i] == "=" else None


def find_key_line(text: str, dotted: str) -> int | None:
    """1-based line of the line that defines `dotted` (or, for a value inside an inline
    table, of its closest enclosing key); None if it cannot be found."""
    target = _split_key(dotted) if '"' in dotted or "'" in dotted else dotted.split(".")
    best: tuple[int, int] | None = None  # (matched parts, line)
    table: list[str] = []
    in_multiline = ""
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if in_multiline:
            if in_multiline in line:
                in_multiline = ""
            continue
        if not line or line.startswith("#"):
            continue
        if line.startswith("["):
            inner = line[2:] if line.startswith("[[") else line[1:]
            end = inner.find("]")
            if end < 0:
                continue
            table = _split_key(inner[:end])
            path = table
        else:
            key = _key_part(line)
            if key is None:
                continue
            path = table + _split_key(key)
            rest = line[len(key) + 1 :]
            for q in ('"""', "'''"):
                if rest.count(q) == 1:
                    in_multiline = q
        k = len(path)
        if path == target[:k] and (best is None or k > best[0]):
            best = (k, n)
            if k == len(target):
                return n
    if best is not None and best[0] > 0 and len(target) > best[0]:
        # only a value inside an inline table / array of tables can land here
        return best[1] if _is_leafish(text, best[1]) else None
    return None


def _is_leafish(text: str, line: int) -> bool:
    """True when the line is a key/value (not a table header): the closest key we found
    holds the target inside an inline value."""
    return not text.splitlines()[line - 1].lstrip().startswith("[")
