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
