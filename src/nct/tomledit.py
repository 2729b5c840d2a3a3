"""The one tomlkit layer: helpers that edit an operator's TOML file in place, everything we
do not touch keeps its bytes (comments, order, quoting, indentation). Used by the engine
configurators (containerd, CRI-O) and by `nvidia-ctk config` (nct.config.edit); nothing
else imports tomlkit. Reading config.toml on the start-up paths is nct.config.tomlscan's
job (tomlkit costs ~40 ms to import)."""

from __future__ import annotations

from typing import Any

import tomlkit
from tomlkit.exceptions import ParseError, TOMLKitError
from tomlkit.items import Comment, InlineTable, Null, Table, Trivia, Whitespace
from tomlkit.toml_document import TOMLDocument

from nct.errors import EngineConfigError


def parse(text: str, path: str) -> TOMLDocument:
    """Parse TOML or raise a one-line EngineConfigError naming the file (and line)."""
    try:
        return tomlkit.parse(text)
    except ParseError as e:
        raise EngineConfigError(f"{path}: invalid TOML at line {e.line}, column {e.col}") from None
    except (TOMLKitError, ValueError) as e:
        raise EngineConfigError(f"{path}: invalid TOML: {e}") from None


def dumps(doc: TOMLDocument) -> str:
    return tomlkit.dumps(doc)


def parse_raw(text: str) -> TOMLDocument:
    """tomlkit.parse: a syntax error raises ParseError (with .line and .col) for callers
    that word their own message."""
    return tomlkit.parse(text)


def plain(item: Any) -> Any:
    """A tomlkit item as plain Python data (dicts, lists, scalars)."""
    return item.unwrap() if hasattr(item, "unwrap") else item


def get(container: Any, path: tuple[str, ...], where: str = "") -> Any:
    """The value at `path`, or None when any part is missing.  A part that exists but is
    not a table is an error: we refuse to guess what the operator meant."""
    node = container
    for i, key in enumerate(path):
        if not _is_table(node):
            raise EngineConfigError(f"{where}: {'.'.join(path[:i])} is not a table")
        if key not in node:
            return None
        node = node[key]
    return node


def ensure_table(container: Any, path: tuple[str, ...], where: str = "") -> Any:
    """The table at `path`, creating (super) tables as needed."""
    node = container
    for i, key in enumerate(path):
        if key not in node:
            node.add(key, tomlkit.table(is_super_table=True))
        node = node[key]
        if not _is_table(node):
            raise EngineConfigError(f"{where}: {'.'.join(path[: i + 1])} is not a table")
    return node


def set_key(table: Any, key: str, value: Any) -> bool:
    """Set a scalar key keeping its comment; a new key gets its siblings' indentation.
    Returns True when the file changes."""
    if key in table:
        current = table[key]
        if plain(current) == value:
            return False
        literal = getattr(getattr(current, "type", None), "name", "") == "SLL"
        if literal and isinstance(value, str) and "'" not in value and "\n" not in value:
            value = tomlkit.string(value, literal=True)  # keep the operator's quoting style
        table[key] = value
        return True
    indent = _key_indent(table)
    table.add(key, value)
    if indent:
        item = _items(table).item(key)
        item.trivia.indent = indent
    return True


def delete_key(container: Any, path: tuple[str, ...]) -> bool:
    parent = get(container, path[:-1]) if len(path) > 1 else container
    if parent is None or not _is_table(parent) or path[-1] not in parent:
        return False
    del parent[path[-1]]
    return True


def prune_empty(container: Any, path: tuple[str, ...]) -> None:
    """Remove now-empty tables along `path`, deepest first (only ones with no keys left)."""
    for depth in range(len(path), 0, -1):
        node = get(container, path[:depth])
        if node is None:
            continue
        if not _is_table(node) or len(node) > 0:
            return
        delete_key(container, path[:depth])


def put_table(parent: Any, key: str, data: dict, like: Any = None) -> None:
    """Add (or replace) `parent[key]` as a table built from plain `data`, laid out like the
    existing table `like` (a sibling) so the new block reads as if the operator wrote it:
    same indentation, a blank line before each sub-table and after the block."""
    header, keys = "", ""
    if like is not None and isinstance(like, Table):
        header = like.trivia.indent.split("\n")[-1]
        keys = _key_indent(like) or header
    step = keys[len(header):] if keys.startswith(header) else ""
    table = _build(data)
    if key in parent:
        remove_table(parent, key)
    before = _last_leaf(parent)
    parent.add(key, table)
    added = _items(parent).item(key)
    moved = _take_trailing_comments(before) if before is not None and before is not added else []
    _layout(added, header, keys, step, first=not moved)
    if moved:
        _append_tail(_last_leaf(added) or added, moved)


def remove_table(parent: Any, key: str) -> None:
    """Delete `parent[key]`; comment lines at its end go back to the table before it (the
    reverse of put_table handing them over)."""
    item = parent[key]
    tail = _take_trailing_comments(_last_leaf(item)) if isinstance(item, Table) else []
    body = _items(parent).body
    index = next((i for i, (k, _) in enumerate(body) if k is not None and k.key == key), None)
    receiver = None
    if index is not None:
        for _, prev in reversed(body[:index]):
            if isinstance(prev, Table):
                receiver = _last_leaf(prev) or prev
                break
    del parent[key]
    if tail:
        receiver = receiver or _last_leaf(parent)
        if receiver is not None:
            _append_tail(receiver, tail)


def restore_tables(doc: Any, path: tuple[str, ...], previous: dict, where: str = "") -> bool:
    """Undo tables we added under `path`: each name in `previous` gets its earlier
    content back (a dict) or is removed (None); empty tables left behind go. Returns True
    when one of them was there."""
    parent = get(doc, path, where)
    if parent is None:
        return False
    touched = False
    for name, prev in previous.items():
        if name in parent:
            touched = True
            if prev is None:
                remove_table(parent, name)
            else:
                put_table(parent, name, prev)
    prune_empty(doc, path)
    return touched


def _append_tail(table: Table, tail: list) -> None:
    """End `table` with `tail` (blank lines and comments) instead of its own blank lines."""
    body = table.value.body
    while body and body[-1][0] is None and isinstance(body[-1][1], Whitespace):
        body.pop()
    body.extend(tail)


def _last_leaf(table: Any) -> Table | None:
    """The table whose body ends where a table appended to `table` would start."""
    try:
        body = _items(table).body
    except AttributeError:
        return None
    for _, item in reversed(body):
        if isinstance(item, (Comment, Whitespace)):
            continue
        if isinstance(item, Table):
            return _last_leaf(item) or item
        break
    return table if isinstance(table, Table) else None


def _take_trailing_comments(table: Table | None) -> list:
    """Comment lines ending a table usually introduce what follows it: hand them over so
    they stay right above the section they describe, below our new table."""
    if table is None:
        return []
    body = table.value.body
    i = len(body)
    while i > 0 and body[i - 1][0] is None and isinstance(body[i - 1][1], (Comment, Whitespace)):
        i -= 1
    tail = body[i:]
    if not any(isinstance(item, Comment) for _, item in tail):
        return []
    del body[i:]
    return tail


def _build(data: dict) -> Table:
    table = tomlkit.table()
    for k, v in data.items():
        if not isinstance(v, dict):
            table.add(k, v)
    subtables = [(k, v) for k, v in data.items() if isinstance(v, dict)]
    for k, v in subtables:
        table.add(k, _build(v))
    if not subtables:
        table.add(tomlkit.nl())
    return table


def _layout(table: Table, header: str, keys: str, step: str, first: bool = False) -> None:
    """Set indentation after insertion (tomlkit re-indents items while they are added)."""
    table.trivia.indent = header if first else "\n" + header
    for k, item in table.value.body:
        if k is None:
            continue
        if isinstance(item, Table):
            _layout(item, keys, keys + step, step)
        elif hasattr(item, "trivia"):
            item.trivia.indent = keys


def dumps_like(doc: TOMLDocument, original: str | None) -> str:
    """Dump, without leaving a blank line at the end that the original did not have."""
    text = tomlkit.dumps(doc)
    if text.endswith("\n\n") and not (original or "").endswith("\n\n"):
        text = text.rstrip("\n") + "\n"
    return text


def _is_table(node: Any) -> bool:
    return isinstance(node, (Table, TOMLDocument)) or (hasattr(node, "keys") and hasattr(node, "add"))


def _items(table: Any) -> Any:
    return table if isinstance(table, TOMLDocument) else getattr(table, "value", table)


def _key_indent(table: Any) -> str:
    try:
        body = _items(table).body
    except AttributeError:
        return ""
    for key, item in body:
        if key is not None and not isinstance(item, Table) and hasattr(item, "trivia"):
            return item.trivia.indent
    return ""


# ---------------------------------------------------------------------------------------
# keys written as upstream writes its default file: a default is a commented suggestion
# ("#no-cgroups = false") that setting the key replaces in place


def commented(name: str, value: object) -> Comment:
    """The comment line `#name = value`."""
    rendered = tomlkit.item(value).as_string()
    return Comment(Trivia(comment_ws="", comment=f"#{name} = {rendered}", trail="\n"))


def find_comment(table: Any, name: str) -> int | None:
    """Index in the table's body of a `#name = ...` comment line."""
    for idx, (k, item) in enumerate(_items(table).body):
        if k is None and isinstance(item, Comment):
            text = item.trivia.comment.lstrip("#").strip()
            head, eq, _ = text.partition("=")
            if eq and head.strip() == name:
                return idx
    return None


def find_key(table: Any, name: str) -> int | None:
    """Index in the table's body of key `name`."""
    for idx, (k, _item) in enumerate(_items(table).body):
        if k is not None and k.key == name:
            return idx
    return None


def table_at(doc: TOMLDocument, section: list[str], create: bool, not_a_table: Any) -> Any:
    """Walk to (creating) the table that holds a key; None if absent and not creating.
    A value in the way raises not_a_table(dotted path)."""
    current: Any = doc
    for depth, part in enumerate(section):
        if part in current:
            nxt = current[part]
            if not isinstance(nxt, (Table, InlineTable)):
                raise not_a_table(".".join(section[: depth + 1]))
            current = nxt
            continue
        if not create:
            return None
        new = tomlkit.table(is_super_table=depth < len(section) - 1)
        current.append(part, new)
        current = current[part]
    return current


def comment_out(table: Any, name: str, suggestion: object) -> None:
    """Remove key `name`, leaving `#name = suggestion` in its place (unless such a comment
    is already there); an inline table just loses the key."""
    idx = find_key(table, name)
    if idx is None:
        return
    if isinstance(table, InlineTable):  # no comments inside { ... }
        del table[name]
        return
    container = _items(table)
    has_comment = find_comment(table, name) is not None
    container._remove_at(idx)  # leaves a Null placeholder at idx: indices stay valid
    if not has_comment:
        container.body[idx] = (None, commented(name, suggestion))


def set_in_place(table: Any, name: str, value: object) -> None:
    """Set key `name`: where it is (keeping a trailing comment), else where its
    `#name = ...` suggestion is, else at the end of the table."""
    item = tomlkit.item(value)
    if name in table:
        table[name] = item
        return
    comment_idx = find_comment(table, name)
    if comment_idx is not None:
        container = _items(table)
        container.body[comment_idx] = (None, Null())
        container._insert_at(comment_idx, name, item)
    else:
        table.append(name, item)


def separate_new_table(doc: TOMLDocument, section: list[str]) -> None:
    """A table appended before other tables needs a blank line after it."""
    table: Any = doc
    for part in section:
        table = table[part]
    rendered = tomlkit.dumps(doc)
    block = table.as_string()
    if not block.endswith("\n\n") and not rendered.endswith(block):
        table.add(tomlkit.nl())
