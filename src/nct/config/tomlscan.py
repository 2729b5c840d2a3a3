"""Quote-aware scanning of single TOML lines, for the two places that read config.toml
text without a parser: the runtime shim's fast path (nct.runtime.settings) and error line
numbers (nct.config.load). Kept import-free: the shim loads it on every engine call."""

from __future__ import annotations


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
