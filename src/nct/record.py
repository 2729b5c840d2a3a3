"""`Record`: a base for small module-private records on the prestart hook's start-up path.

The hook starts a fresh interpreter per container, and every `@dataclass` costs ~0.6 ms to
create there (generated methods are compiled with exec at import). The shared models
(nct.*.model) stay dataclasses; parse records and option bags that never leave their
module's API use this instead: `__slots__` lists the fields in order, each subclass writes
its own `__init__` (assigning through `object.__setattr__`), and gets value equality,
hashing, a dataclass-like repr, `replace()` and immutability from here.
"""

from __future__ import annotations

_set = object.__setattr__


class Record:
    __slots__ = ()

    def _values(self) -> tuple:
        return tuple([getattr(self, k) for k in self.__slots__])

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._values() == other._values()  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash(self._values())

    def __repr__(self) -> str:
        return f"{type(self).__qualname__}(" + ", ".join(f"{k}={getattr(self, k)!r}" for k in self.__slots__) + ")"

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"cannot assign to field {name!r}: {type(self).__name__} is immutable")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"cannot delete field {name!r}: {type(self).__name__} is immutable")

    def __reduce__(self):  # copy/pickle go through __init__, not setattr
        return (type(self), self._values())

    def replace(self, **changes: object):
        """A copy with some fields changed (dataclasses.replace for records)."""
        values = {k: getattr(self, k) for k in self.__slots__}
        for k in changes:
            if k not in values:
                raise TypeError(f"{type(self).__name__} has no field {k!r}")
        values.update(changes)
        return type(self)(**values)
