"""pdsl.records.record against the dataclass it stands for: dataclass(frozen=True, slots=True, kw_only=True)."""

from __future__ import annotations

import copy
import dataclasses
import pickle
from dataclasses import dataclass, field
from typing import ClassVar  # noqa: F401 - dataclass resolves the string annotation "ClassVar[str]" through it

import pytest

from pdsl.records import record


def _pair(body):
    """The same class body under @record and under the frozen dataclass."""
    return record(type("R", (), dict(body))), dataclass(frozen=True, slots=True, kw_only=True)(type("D", (), dict(body)))


BODY = {
    "__annotations__": {"a": "int", "b": "str", "c": "tuple", "d": "int", "kind": "ClassVar[str]"},
    "b": "x",
    "c": field(default_factory=tuple),
    "d": field(default=0, compare=False, repr=False),
    "kind": "store",
}


def test_fields_init_defaults_and_classvar_as_dataclass():
    R, D = _pair(BODY)
    assert [f.name for f in dataclasses.fields(R)] == [f.name for f in dataclasses.fields(D)] == ["a", "b", "c", "d"]
    assert dataclasses.is_dataclass(R)
    r = R(a=1)
    assert (r.a, r.b, r.c, r.d, R.kind) == (1, "x", (), 0, "store")
    with pytest.raises(TypeError):
        R(1)  # keyword-only, as kw_only=True
    with pytest.raises(TypeError):
        R(b="y")  # a is required
    with pytest.raises(TypeError):
        R(a=1, e=2)
    assert R.__match_args__ == D.__match_args__ == ()
    assert R.__slots__ == D.__slots__


def test_frozen_eq_hash_repr_as_dataclass():
    R, D = _pair(BODY)
    r, s = R(a=1, d=5), R(a=1, d=7)
    dr, ds = D(a=1, d=5), D(a=1, d=7)
    assert (r == s) == (dr == ds) is True  # d has compare=False
    assert hash(r) == hash(s) and hash(dr) == hash(ds)
    assert r != R(a=2) and r != dr  # another class never compares equal
    assert r.__eq__(dr) is NotImplemented
    assert repr(r) == repr(dr).replace("D(", "R(")  # d has repr=False
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.a = 3
    with pytest.raises(dataclasses.FrozenInstanceError):
        del r.a
    with pytest.raises(AttributeError):
        object.__setattr__(r, "undeclared", 1)  # slots: nothing else to set
    assert {r, s} == {r}


def test_replace_asdict_pickle_copy():
    R, _ = _pair(BODY)
    globals()["R"] = R  # pickle finds classes by module and name
    R.__qualname__ = R.__name__ = "R"
    r = R(a=1, b="y", c=(1, 2), d=4)
    assert dataclasses.replace(r, a=9) == R(a=9, b="y", c=(1, 2), d=4)
    assert dataclasses.asdict(r) == {"a": 1, "b": "y", "c": (1, 2), "d": 4}
    for other in (pickle.loads(pickle.dumps(r)), copy.copy(r), copy.deepcopy(r)):
        assert other == r and other.d == 4 and type(other) is R


def test_inheritance_post_init_and_own_methods():
    @record
    class Base:
        span: int

    @record
    class Child(Base):
        value: float
        text: str = ""

        def __post_init__(self):
            object.__setattr__(self, "text", self.text or str(self.value))

    @record
    class Custom:
        x: int

        def __eq__(self, other):
            return isinstance(other, Custom)

        def __repr__(self):
            return "custom"

    c = Child(span=1, value=2.5)
    assert (c.span, c.value, c.text) == (1, 2.5, "2.5")
    assert [f.name for f in dataclasses.fields(Child)] == ["span", "value", "text"]
    assert isinstance(c, Base) and c != Base(span=1)
    assert Custom(x=1) == Custom(x=2) and repr(Custom(x=1)) == "custom"
    assert hash(Custom(x=1)) == hash(Custom(x=1))  # __eq__ defined, so the field hash is added, as dataclass does
    assert Child.__init__.__qualname__.endswith("Child.__init__")


def test_recursive_repr_does_not_loop():
    @record
    class Box:
        items: list

    b = Box(items=[])
    b.items.append(b)
    assert repr(b) == "test_recursive_repr_does_not_loop.<locals>.Box(items=[...])"


def test_pdsl_representations_are_records():
    """The AST, the model and the IR keep what the pipeline relies on: fields, replace, equality, pickling."""
    from pdsl.diagnostics import Span
    from pdsl.parse import ast as A

    span = Span(path="m.phm", line=1, col=1, end_line=1, end_col=2)
    n = A.Num(span=span, value=1.0, text="1")
    assert n == A.Num(span=span, value=1.0, text="1") and hash(n) == hash(A.Num(span=span, value=1.0, text="1"))
    assert dataclasses.replace(n, text="1.0").text == "1.0"
    assert pickle.loads(pickle.dumps(n)) == n
    assert isinstance(n, A.Expr)


@record(kw_only=False, slots=False)
class Positional:
    a: int
    b: tuple = ()

    @property
    def n(self):
        return len(self.b)


def test_positional_and_dict_variants_as_dataclass():
    from functools import cached_property

    @record(kw_only=False, slots=False)
    class Cached:
        x: int

        @cached_property
        def doubled(self):
            return 2 * self.x

    p = Positional(1, (2, 3))
    assert p == Positional(a=1, b=(2, 3)) and p.n == 2 and hash(p) == hash(Positional(1, (2, 3)))
    assert Positional.__match_args__ == ("a", "b")
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.a = 2
    q = pickle.loads(pickle.dumps(p))
    assert q == p and q.__dict__ == {"a": 1, "b": (2, 3)}
    c = Cached(3)
    assert c.doubled == 6 and c.doubled == 6  # cached_property writes the instance __dict__ itself
    with pytest.raises(TypeError):
        Positional()

    @record(kw_only=False)
    class Mixed:
        a: int
        b: int = dataclasses.field(default=0, kw_only=True)

    with pytest.raises(TypeError):
        Mixed(1, 2)
    assert Mixed(1, b=2).b == 2


def test_only_plain_identifiers_reach_the_generated_init():
    """The one exec of record sees field names only; a name that is not a plain identifier is refused."""
    bad = type("Bad", (), {"__annotations__": {"__secret": "int"}})
    with pytest.raises(TypeError, match="not a plain identifier"):
        record(bad)
