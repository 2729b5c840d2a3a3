"""`Record`: the one base for nct's data models, declared like dataclasses.

    class MountEdit(Record):
        host_path: str
        container_path: str
        options: tuple[str, ...] = RO_MOUNT

    class ContainerEdits(Record, frozen=False):
        mounts: list[MountEdit] = field(default_factory=list)

Why not `@dataclass`: the prestart hook starts a fresh interpreter for every container, and
there `import dataclasses` (which pulls in inspect, ast, dis and tokenize) plus exec-compiling
the generated methods of the models it loads cost about 25 ms of a ~60 ms hook
(bench/hook_bench.py, docs/bench.md). A Record gets the same behaviour from generic methods
defined once here, so declaring a class costs almost nothing:

- fields are the class's annotations in order (a base's first), `ClassVar`s excepted;
  a default is the class attribute, or `field(default=..., default_factory=...,
  compare=..., repr=...)`; a field without a default after one with a default is an error;
- `__init__` takes fields positionally or by keyword (`init=False` ones excepted), fills
  defaults, then calls `__post_init__` when the class has one;
- value `__eq__` over compared fields, `__repr__` like a dataclass, `replace(**changes)`;
- immutable and hashable by default; `frozen=False` gives a mutable, unhashable record;
- `fields()` and `asdict()` here for the few generic consumers (config schema, dumps).
"""

from __future__ import annotations

TYPE_CHECKING = False  # not `typing`: importing it costs the hook ~9 ms
if TYPE_CHECKING:
    from typing import Any, Callable, ClassVar, dataclass_transform

MISSING: Any = type("_Missing", (), {"__repr__": lambda self: "MISSING"})()


class Field:
    """One declared field (what `fields()` returns)."""

    __slots__ = ("name", "type", "default", "default_factory", "init", "compare", "repr")

    def __init__(self, default: Any = MISSING, default_factory: Callable[[], Any] | None = None,
                 init: bool = True, compare: bool = True, repr: bool = True) -> None:
        if default is not MISSING and default_factory is not None:
            raise ValueError("field(): cannot give both default and default_factory")
        self.name = ""
        self.type: str = ""
        self.default = default
        self.default_factory = default_factory
        self.init = init
        self.compare = compare
        self.repr = repr

    def __repr__(self) -> str:
        return f"Field(name={self.name!r}, type={self.type!r}, default={self.default!r})"


def field(*, default: Any = MISSING, default_factory: Callable[[], Any] | None = None,
          init: bool = True, compare: bool = True, repr: bool = True) -> Any:
    """A field with a factory default, not taken by __init__ (set from its default or by
    __post_init__), or left out of equality/hash (compare) or repr."""
    return Field(default, default_factory, init, compare, repr)


def _constant(value: Any) -> Callable[[], Any]:
    return lambda: value


def _is_classvar(annotation: object) -> bool:
    text = annotation if isinstance(annotation, str) else repr(annotation)
    return text.startswith(("ClassVar", "typing.ClassVar"))


if not TYPE_CHECKING:
    def dataclass_transform(**_kwargs: object):  # at run time: nothing (no `typing` import)
        return lambda cls: cls


# Type checkers see a Record subclass as the dataclass it behaves like, so they check its
# constructor calls, field types and immutability (PEP 681).
@dataclass_transform(frozen_default=True, field_specifiers=(field, Field))
class Record:
    """Base of every model; see the module docstring."""

    _fields: ClassVar[tuple[Field, ...]] = ()
    _names: ClassVar[tuple[str, ...]] = ()  # names of the fields __init__ takes, in order
    _name_set: ClassVar[frozenset[str]] = frozenset()
    _compared: ClassVar[tuple[str, ...]] = ()
    _shown: ClassVar[tuple[str, ...]] = ()
    _defaults: ClassVar[dict[str, Any]] = {}
    _factories: ClassVar[dict[str, Callable[[], Any]]] = {}
    _late: ClassVar[tuple[tuple[str, Callable[[], Any]], ...]] = ()  # init=False fields with a default
    _post_init: ClassVar[Callable[[Any], None] | None] = None

    def __init_subclass__(cls, frozen: bool = True, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        by_name = {f.name: f for f in cls._fields}
        for name, annotation in cls.__dict__.get("__annotations__", {}).items():
            if _is_classvar(annotation):
                continue
            value = cls.__dict__.get(name, MISSING)
            if isinstance(value, (list, dict, set)):
                raise TypeError(f"{cls.__name__}.{name}: mutable default {type(value).__name__} is shared by "
                                "every instance: use field(default_factory=...)")
            f = value if isinstance(value, Field) else Field(value)
            f.name, f.type = name, annotation if isinstance(annotation, str) else repr(annotation)
            if isinstance(value, Field):
                if f.default is MISSING:
                    delattr(cls, name)
                else:
                    setattr(cls, name, f.default)
            by_name[name] = f
        fields = tuple(by_name.values())
        seen_default = None
        for f in fields:
            if not f.init:
                continue
            has_default = f.default is not MISSING or f.default_factory is not None
            if seen_default and not has_default:
                raise TypeError(f"{cls.__name__}: field {f.name!r} without a default follows "
                                f"{seen_default!r}, which has one")
            seen_default = f.name if has_default else seen_default
        cls._fields = fields
        cls._names = tuple(f.name for f in fields if f.init)
        cls._name_set = frozenset(cls._names)
        cls._compared = tuple(f.name for f in fields if f.compare)
        cls._shown = tuple(f.name for f in fields if f.repr)
        cls._defaults = {f.name: f.default for f in fields if f.init and f.default is not MISSING}
        cls._factories = {f.name: f.default_factory for f in fields if f.init and f.default_factory is not None}
        cls._late = tuple((f.name, f.default_factory or _constant(f.default)) for f in fields
                          if not f.init and (f.default is not MISSING or f.default_factory is not None))
        cls._post_init = getattr(cls, "__post_init__", None)
        if not frozen:
            # (a class attribute set on purpose: the checker sees a method being replaced)
            cls.__setattr__ = object.__setattr__  # type: ignore[method-assign,assignment]
            cls.__delattr__ = object.__delattr__  # type: ignore[method-assign]
            cls.__hash__ = None  # type: ignore[assignment]  # mutable: unhashable, as dataclasses
        else:  # also below a mutable base: a frozen record is frozen
            for name in ("__setattr__", "__delattr__", "__hash__"):
                if name not in cls.__dict__:
                    setattr(cls, name, Record.__dict__[name])

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        cls = self.__class__
        names = cls._names
        values = self.__dict__
        if args:
            if len(args) > len(names):
                raise TypeError(f"{cls.__name__}() takes {len(names)} positional arguments but {len(args)} were given")
            values.update(zip(names, args))
        if kwargs:
            for name in kwargs:
                if name in values:
                    raise TypeError(f"{cls.__name__}() got multiple values for argument {name!r}")
                if name not in cls._name_set:
                    raise TypeError(f"{cls.__name__}() got an unexpected keyword argument {name!r}")
            values.update(kwargs)
        if len(values) < len(names):
            for name in names:
                if name in values:
                    continue
                if name in cls._defaults:
                    values[name] = cls._defaults[name]
                elif name in cls._factories:
                    values[name] = cls._factories[name]()
                else:
                    raise TypeError(f"{cls.__name__}() missing required argument: {name!r}")
        for name, make in cls._late:
            values[name] = make()
        if cls._post_init is not None:
            cls._post_init(self)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        names = self._compared
        return tuple([getattr(self, k) for k in names]) == tuple([getattr(other, k) for k in names])

    def __hash__(self) -> int:
        return hash(tuple([getattr(self, k) for k in self._compared]))

    def __repr__(self) -> str:
        return f"{type(self).__qualname__}(" + ", ".join(f"{k}={getattr(self, k)!r}" for k in self._shown) + ")"

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"cannot assign to field {name!r}: {type(self).__name__} is immutable")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"cannot delete field {name!r}: {type(self).__name__} is immutable")

    def replace(self, **changes: Any) -> Any:
        """A copy with some fields changed (what dataclasses.replace does)."""
        for name in changes:
            if name not in self._names:
                raise TypeError(f"{type(self).__name__} has no field {name!r}")
        return type(self)(**{**{k: getattr(self, k) for k in self._names}, **changes})


def fields(record: Record | type[Record]) -> tuple[Field, ...]:
    """The declared fields of a record or record class, in order."""
    return record._fields


def is_record(obj: object) -> bool:
    """Whether obj is a Record class or instance."""
    return isinstance(obj, Record) or (isinstance(obj, type) and issubclass(obj, Record))


def asdict(record: Record) -> dict[str, Any]:
    """Fields as a dict, recursively through records, lists, tuples and dicts (copies)."""
    return {f.name: _plain(getattr(record, f.name)) for f in record._fields}


def _plain(value: Any) -> Any:
    if isinstance(value, Record):
        return asdict(value)
    if isinstance(value, (list, tuple)):
        return type(value)(_plain(v) for v in value)
    if isinstance(value, dict):
        return {_plain(k): _plain(v) for k, v in value.items()}
    return value
