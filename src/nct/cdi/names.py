"""CDI names: kinds (`vendor/class`), device names and fully-qualified device names
(`vendor/class=name`), with the character rules of the CDI specification."""

from __future__ import annotations

from nct.errors import SpecError

MAX_CLASS_LEN = 63


def _alnum(c: str) -> bool:
    return c.isascii() and c.isalnum()


def _alpha(c: str) -> bool:
    return c.isascii() and c.isalpha()


def vendor_error(vendor: str) -> str | None:
    """Why `vendor` is not a valid CDI vendor name, or None."""
    if not vendor:
        return "empty vendor name"
    if not _alpha(vendor[0]):
        return f"invalid vendor {vendor!r}, should start with a letter"
    if not _alnum(vendor[-1]):
        return f"invalid vendor {vendor!r}, should end with a letter or digit"
    for c in vendor[1:-1]:
        if not (_alnum(c) or c in "-_."):
            return f"invalid character {c!r} in vendor name {vendor!r}"
    return None


def class_error(cls: str) -> str | None:
    """Why `cls` is not a valid CDI class name, or None."""
    if not cls:
        return "empty class name"
    if len(cls) > MAX_CLASS_LEN:
        return f"invalid class {cls!r}, longer than {MAX_CLASS_LEN} characters"
    if not _alpha(cls[0]):
        return f"invalid class {cls!r}, should start with a letter"
    if not _alnum(cls[-1]):
        return f"invalid class {cls!r}, should end with a letter or digit"
    for c in cls[1:-1]:
        if not (_alnum(c) or c in "-_."):
            return f"invalid character {c!r} in class name {cls!r}"
    return None


def device_name_error(name: str) -> str | None:
    """Why `name` is not a valid CDI device name, or None."""
    if not name:
        return "empty device name"
    if not _alnum(name[0]):
        return f"invalid device name {name!r}, should start with a letter or digit"
    if not _alnum(name[-1]):
        return f"invalid device name {name!r}, should end with a letter or digit"
    for c in name[1:-1]:
        if not (_alnum(c) or c in "-_.:"):
            return f"invalid character {c!r} in device name {name!r}"
    return None


def parse_kind(kind: str) -> tuple[str, str]:
    """`vendor/class` -> (vendor, class); SpecError when malformed."""
    if not isinstance(kind, str) or "/" not in kind:
        raise SpecError(f"invalid kind {kind!r}, should be vendor/class")
    vendor, cls = kind.split("/", 1)
    err = vendor_error(vendor) or class_error(cls)
    if err:
        raise SpecError(f"invalid kind {kind!r}: {err}")
    return vendor, cls


def qualified_name(vendor: str, cls: str, name: str) -> str:
    return f"{vendor}/{cls}={name}"
