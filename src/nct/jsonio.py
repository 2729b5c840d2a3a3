"""JSON reading for the start-up paths (prestart hook, runtime `create`) without `import
json`, which pulls in `re` and `enum` (~6 ms per container together with the modules that
needed `re`). The C scanner behind the json module (`_json.make_scanner`) parses exactly
as `json.loads` does; anything it does not accept, and any input it cannot take (other
encodings, a BOM), is handed to `json.loads`, which then gives the standard answer or the
standard error. `dumps_compact` writes through the C encoder the same way (the runtime writes
config.json on every GPU `create`); anything unusual goes to `json.dumps`.
"""

from __future__ import annotations

_WS = " \t\n\r"
_scanner = None


class _Context:
    """What the C scanner reads from a JSONDecoder: json.loads' defaults."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = float  # "NaN", "Infinity", "-Infinity"
    memo: dict = {}


def loads(data: bytes | bytearray | str, max_depth: int | None = None) -> object:
    """json.loads(data), faster to start; ValueError (one line) for a document nested
    deeper than `max_depth` levels (default nct.limits.MAX_NESTING_DEPTH) instead of a
    RecursionError."""
    from nct.limits import MAX_NESTING_DEPTH, too_deep, without_gc

    limit = MAX_NESTING_DEPTH if max_depth is None else max_depth
    try:
        value, deep = without_gc(_loads_checked, data, limit, too_deep)
    except RecursionError:
        deep = True
    if deep:
        raise ValueError(f"nested deeper than {limit} levels")
    return value


def _loads_checked(data, limit: int, too_deep) -> tuple[object, bool]:
    value = _loads(data)
    return value, too_deep(value, limit)


def _loads(data: bytes | bytearray | str) -> object:
    global _scanner
    try:
        if _scanner is None:
            import _json

            # typeshed types the context as a scanner; any object with its attributes works
            _scanner = _json.make_scanner(_Context())  # type: ignore[arg-type]
        text = data.decode("utf-8") if isinstance(data, (bytes, bytearray)) else data
        start = len(text) - len(text.lstrip(_WS))
        value, end = _scanner(text, start)
        if text[end:].strip(_WS):
            raise ValueError("extra data")
        return value
    except RecursionError:
        raise
    # SystemError: the C scanner reports a syntax error with json.decoder's exception class,
    # and returns NULL without an exception when json.decoder is not imported yet
    except (ImportError, AttributeError, ValueError, StopIteration, SystemError):
        import json

        return json.loads(data)


def dumps_compact(obj: object, ensure_ascii: bool = False, sort_keys: bool = False) -> str:
    """json.dumps(obj, separators=(",", ":"), ensure_ascii=..., sort_keys=...), without
    importing json: the C encoder behind it (`_json.make_encoder`), with json.dumps' other
    defaults. A value it cannot encode (or an interpreter without it) goes to json.dumps: the
    same answer, or the same error."""
    try:
        import _json

        quote = _json.encode_basestring_ascii if ensure_ascii else _json.encode_basestring
        # a fresh circular-reference memo per call, as json.dumps makes one
        enc = _json.make_encoder({}, _no_default, quote, None, ":", ",", sort_keys, False, True)
        return "".join(enc(obj, 0))
    except RecursionError:
        raise
    except (ImportError, AttributeError, TypeError, ValueError):
        import json

        return json.dumps(obj, separators=(",", ":"), ensure_ascii=ensure_ascii, sort_keys=sort_keys)


def _no_default(o: object) -> object:
    raise TypeError(f"Object of type {type(o).__name__} is not JSON serializable")


def type_name(value: object) -> str:
    """A JSON value's type as error messages name it ("an array", "a string", ...)."""
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean", int: "an integer",
            float: "a number", type(None): "null"}.get(type(value), type(value).__name__)


def read_object(path: str | None, error: type[Exception], *, where: str | None = None,
                missing: str | None = None, cannot_read: str = "{}",
                not_object: str = "expected a JSON object") -> dict:
    """The JSON object in file `path` (stdin when None): the one reader of a JSON document
    for the prestart hook, the CDI hooks and OCI bundles, so they fail alike. Each problem is
    one `error` line "<where>: <what>", `where` defaulting to `path`; what differs between
    the callers is the wording: `cannot_read` ({} the strerror) for an unreadable file,
    `missing` (when given) for one that does not exist, `not_object` ({} the JSON type) for
    a document that is not an object. Too large, not UTF-8, invalid JSON (line and column
    when known) and too deep read the same everywhere."""
    from nct.limits import read_document

    name = where or path or "stdin"
    try:
        if path is None:
            import sys

            data = read_document(sys.stdin.buffer)
        else:
            with open(path, "rb") as f:
                data = read_document(f)
    except FileNotFoundError as e:
        raise error(f"{name}: {missing or cannot_read.format(e.strerror)}") from None
    except OSError as e:
        raise error(f"{name}: {cannot_read.format(e.strerror or e)}") from None
    except ValueError as e:  # over the size limit
        raise error(f"{name}: {e}") from None
    try:
        value = loads(data)
    except UnicodeDecodeError as e:
        raise error(f"{name}: not UTF-8 text at byte {e.start}") from None
    except ValueError as e:
        lineno = getattr(e, "lineno", None)  # json.JSONDecodeError, without importing json
        what = f"at line {lineno} column {getattr(e, 'colno', '?')}: {getattr(e, 'msg', e)}" if lineno else f": {e}"
        raise error(f"{name}: invalid JSON{' ' if lineno else ''}{what}") from None
    if not isinstance(value, dict):
        raise error(f"{name}: {not_object.format(type_name(value))}")
    return value
