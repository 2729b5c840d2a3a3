"""nct.record: the model base behaves like the dataclasses it replaces, and is cheap to import."""

from __future__ import annotations

import copy
import pickle
import subprocess
import sys
from typing import ClassVar

import pytest

from nct.record import MISSING, Record, asdict, field, fields, is_record


class Point(Record):
    x: int
    y: int = 0
    tags: tuple[str, ...] = ()


class Bag(Record, frozen=False):
    name: str
    items: list[int] = field(default_factory=list)
    note: str = field(default="", compare=False, repr=False)


class Derived(Point):
    z: int = 5


class Late(Record, frozen=False):
    raw: str
    upper: str = field(init=False)
    seen: list[str] = field(default_factory=list, init=False)

    def __post_init__(self) -> None:
        self.upper = self.raw.upper()


class Checked(Record):
    n: int

    def __post_init__(self) -> None:
        if self.n < 0:
            raise ValueError("n must be >= 0")


def test_init_positional_keyword_and_defaults():
    assert (Point(1).x, Point(1).y, Point(1).tags) == (1, 0, ())
    p = Point(1, tags=("a",), y=2)
    assert (p.x, p.y, p.tags) == (1, 2, ("a",))
    with pytest.raises(TypeError, match=r"missing required argument: 'x'"):
        Point(y=1)
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'w'"):
        Point(1, w=2)
    with pytest.raises(TypeError, match=r"multiple values for argument 'x'"):
        Point(1, x=2)
    with pytest.raises(TypeError, match=r"takes 3 positional arguments but 4"):
        Point(1, 2, (), 4)


def test_factories_are_fresh_per_instance():
    a, b = Bag("a"), Bag("b")
    a.items.append(1)
    assert b.items == [] and a.items == [1]


def test_equality_hash_and_compare_false():
    assert Point(1, 2) == Point(1, 2) and Point(1, 2) != Point(2, 1)
    assert hash(Point(1, 2)) == hash(Point(1, 2))
    assert len({Point(1), Point(1), Point(2)}) == 2
    assert Point(1) != Derived(1)  # same fields, other class: not equal (as dataclasses)
    assert Bag("a", note="x") == Bag("a", note="y")  # compare=False


def test_frozen_and_mutable():
    p = Point(1)
    with pytest.raises(AttributeError, match="immutable"):
        p.x = 2
    with pytest.raises(AttributeError, match="immutable"):
        del p.y
    b = Bag("a")
    b.name = "b"
    assert b.name == "b"
    with pytest.raises(TypeError, match="unhashable"):
        hash(b)


def test_repr_like_dataclasses():
    assert repr(Point(1, 2)) == "Point(x=1, y=2, tags=())"
    assert repr(Bag("a", [1], note="hidden")) == "Bag(name='a', items=[1])"


def test_inheritance_order_and_defaults():
    d = Derived(1, 2, ("t",), 3)
    assert [f.name for f in fields(Derived)] == ["x", "y", "tags", "z"]
    assert (d.x, d.y, d.tags, d.z) == (1, 2, ("t",), 3)
    assert Derived(1).z == 5


def test_field_without_default_after_default_is_an_error():
    with pytest.raises(TypeError, match="'b' without a default follows 'a'"):
        class Bad(Record):
            a: int = 0
            b: int


def test_classvar_is_not_a_field():
    class WithConst(Record):
        KIND: ClassVar[str] = "k"
        v: int = 1

    assert [f.name for f in fields(WithConst)] == ["v"]
    assert WithConst().KIND == "k"


def test_init_false_and_post_init():
    late = Late("abc")
    assert (late.upper, late.seen) == ("ABC", [])
    with pytest.raises(TypeError, match="unexpected keyword argument 'upper'"):
        Late("abc", upper="x")
    with pytest.raises(ValueError, match="n must be >= 0"):
        Checked(-1)
    assert late.replace(raw="x").upper == "X"


def test_replace():
    p = Point(1, 2)
    q = p.replace(y=3)
    assert (q.x, q.y) == (1, 3) and p.y == 2
    with pytest.raises(TypeError, match="Point has no field 'w'"):
        p.replace(w=1)
    with pytest.raises(ValueError):
        Checked(1).replace(n=-1)  # __post_init__ runs again


def test_fields_asdict_is_record():
    f = fields(Bag)
    assert [(x.name, x.type) for x in f] == [("name", "str"), ("items", "list[int]"), ("note", "str")]
    assert f[0].default is MISSING and f[1].default_factory is list and f[2].compare is False
    nested = Bag("n", [1, 2])
    assert asdict(Point(1, 2, ("a",))) == {"x": 1, "y": 2, "tags": ("a",)}
    out = asdict(Late("a"))
    assert out == {"raw": "a", "upper": "A", "seen": []}
    d = asdict(nested)
    d["items"].append(3)
    assert nested.items == [1, 2]  # a copy
    assert is_record(Point) and is_record(Point(1)) and not is_record(dict) and not is_record(1)


def test_copy_and_pickle_round_trip():
    p = Point(1, 2, ("a",))
    assert copy.copy(p) == p and copy.deepcopy(p) == p
    assert pickle.loads(pickle.dumps(p)) == p
    b = Bag("a", [1])
    c = copy.deepcopy(b)
    c.items.append(2)
    assert b.items == [1]


def test_importing_records_pulls_in_no_typing_or_dataclasses():
    """The reason this module exists (docs/bench.md): it must stay cheap to import."""
    code = ("import sys, nct.record, nct.driver.model, nct.edits.model, nct.config.model, nct.request.model; "
            "print(sorted(m for m in ('typing', 'dataclasses', 'inspect', 'enum') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


def test_frozen_below_mutable_is_frozen_and_mutable_defaults_are_refused():
    class Base(Record, frozen=False):
        x: int = 0

    class Fixed(Base):
        y: int = 1

    f = Fixed()
    with pytest.raises(AttributeError, match="immutable"):
        f.x = 5
    assert hash(f) == hash(Fixed())
    with pytest.raises(TypeError, match="mutable default list"):
        class Shared(Record):
            items: list = []
