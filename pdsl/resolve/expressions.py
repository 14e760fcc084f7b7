"""Expression AST -> sympy, through a fixed table of functions (never ``eval``/``sympify``).

Values are sympy scalars, column vectors / matrices (``ImmutableMatrix``), or
references (:class:`Ref` subclasses) to things that are not numbers: a body,
a neural network, an array. References turn into numbers when arithmetic
needs them.
"""

from __future__ import annotations

import difflib
import math
import re
import sys
from collections import ChainMap
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Callable, Mapping

import sympy as sp

from ..diagnostics import PdslError, Span
from ..parse import ast as A
from ..records import record
from .model import PointRef

Value = object  # sympy.Expr | sympy.ImmutableMatrix | Ref


class Ref:
    """Something a name can denote that is not (yet) a number."""

    kind = "reference"


@record(kw_only=False, slots=False)
class ArrayRef(Ref):
    name: str
    lo: int
    items: tuple  # of sympy values
    kind = "array"

    def at(self, i: int, span: Span):
        if not self.lo <= i < self.lo + len(self.items):
            raise PdslError.at(
                "BadIndex",
                f"index {i} is outside `{self.name}[{self.lo}..{self.lo + len(self.items) - 1}]`",
                span,
            )
        return self.items[i - self.lo]

    def as_value(self):
        if all(isinstance(v, BodyRef) for v in self.items):
            return sp.ImmutableMatrix.vstack(*[v.as_value() for v in self.items])
        return sp.ImmutableMatrix([[v] for v in self.items])


@record(kw_only=False, slots=False)
class IndexedArray(ArrayRef):
    """An array made by indexed declarations (``flow_store cap[i](q[i]) ... for i in 1..N``): its indices are
    the ones the statements declared, in any order and possibly with gaps. ``items[k]`` has index ``indices[k]``."""

    indices: tuple[int, ...] = ()
    what: str = "array"  # how to name it in messages

    def at(self, i: int, span: Span):
        if i in self.indices:
            return self.items[self.indices.index(i)]
        raise PdslError.at(
            "BadIndex", f"`{self.name}[{i}]` is not declared: the {self.what} `{self.name}` has indices {_index_text(self.indices)}",
            span,
        )

    def contiguous(self) -> bool:
        if not self.indices:  # an empty array (e.g. `for k in 1..0`): the empty vector
            return True
        return self.indices == tuple(range(min(self.indices), min(self.indices) + len(self.indices)))

    def as_value(self):
        return self.usable_value(None)

    def usable_value(self, span: Span | None):
        """The array as a vector in arithmetic (``sum(q)``): only arrays of numbers without gaps."""
        if any(isinstance(v, Ref) for v in self.items):
            raise PdslError.at(
                "TypeMismatch", f"`{self.name}` is an array of {self.what}s; it can only appear in a junction, one element "
                f"at a time (`{self.name}[{min(self.indices)}]`)", span,
            )
        if not self.contiguous():
            raise PdslError.at(
                "TypeMismatch", f"`{self.name}` has indices {_index_text(self.indices)} (with gaps), so it is not a vector",
                span, f"index it, as `{self.name}[{min(self.indices)}]`",
            )
        order = sorted(range(len(self.items)), key=lambda k: self.indices[k])
        return sp.ImmutableMatrix([[self.items[k]] for k in order])


def _index_text(indices) -> str:
    """1..4, 6, 9..10"""
    if not indices:
        return "none (no statement declares an entry)"
    runs, out = [], []
    for i in sorted(indices):
        if runs and i == runs[-1][1] + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    for a, b in runs:
        out.append(f"{a}" if a == b else (f"{a}, {b}" if b == a + 1 else f"{a}..{b}"))
    return ", ".join(out)


@record(kw_only=False, slots=False)
class BodyRef(Ref):
    """A body (or ``ground``); as a value it is the position of its centre."""

    name: str | None  # None for ground
    nodes: tuple  # tuple of position tuples; nodes[0] = centre
    node_names: tuple
    space: int
    owner: str | None = None  # for an axis point such as ``r.a1``: the rigid body it belongs to
    local: tuple | None = None  # and its body-fixed coordinates
    kind = "body"

    @property
    def text(self) -> str:
        return self.name or "ground"

    def as_value(self):
        if self.name is None:
            return sp.zeros(self.space, 1).as_immutable()
        return sp.ImmutableMatrix(self.nodes[0])

    def point(self, span: Span) -> PointRef:
        body = self.owner or self.name
        return PointRef(body=body, local=self.local, position=self.as_value(), text=self.text, span=span)

    def axis_point(self, k: int) -> "BodyRef":
        """``r.a1``: the k-th principal-axis point, at body coordinates e_k (BENCHMARKS A2.4)."""
        local = tuple(sp.Integer(1 if j == k else 0) for j in range(1, len(self.nodes)))
        return BodyRef(
            f"{self.name}.{self.node_names[k]}", (self.nodes[k],), (self.node_names[k],), self.space, owner=self.name, local=local
        )

    def at(self, local, span: Span) -> PointRef:
        """World position of a body-fixed point: X c~ with c~ = [1 - sum c, c] (BENCHMARKS A2.4)."""
        coords = _as_list(local, span, "the body-fixed point")
        if self.name is None:  # ground.at(world point)
            if len(coords) != self.space:
                raise PdslError.at(
                    "WrongArity", f"`ground.at` needs {self.space} coordinates, got {len(coords)}", span
                )
            return PointRef(body=None, local=tuple(coords), position=sp.ImmutableMatrix(coords), text="ground.at(...)", span=span)
        d = len(self.nodes) - 1
        if d == 0:
            raise PdslError.at(
                "NotARigidBody",
                f"`{self.name}` is a point mass: it has no body-fixed points",
                span,
                "declare it `rigid(dim = ..., ...)` to attach things away from its centre",
            )
        if len(coords) != d:
            raise PdslError.at(
                "WrongArity", f"`{self.name}.at` needs {d} body coordinates (its dim), got {len(coords)}", span
            )
        ctilde = [1 - sum(coords)] + list(coords)
        X = sp.Matrix([[node[k] for node in self.nodes] for k in range(self.space)])
        pos = (X * sp.Matrix(ctilde)).applyfunc(sp.expand).as_immutable()
        return PointRef(body=self.name, local=tuple(coords), position=pos, text=f"{self.name}.at(...)", span=span)


@record(kw_only=False, slots=False)
class JointRef(Ref):
    """A named joint or hinge (``joint pivot: A, B``): in 2-D ``pivot.angle`` and ``pivot.rate``."""

    name: str
    angle: object  # sympy expression, or None where the joint has no angle (3-D, point masses)
    rate: object
    why: str = ""  # why there is no angle
    kind = "joint"


@record(kw_only=False, slots=False)
class SliderRef(Ref):
    """A named slider (``slider s: A, B, axis = u``): ``s.position`` = (B − A)·û and ``s.rate`` = its derivative."""

    name: str
    position: object  # sympy expression
    rate: object
    kind = "slider"


@record(kw_only=False, slots=False)
class PortRef(Ref):
    """A kinematic port (``port axle: rotational = pivot.rate``): the target of ``force … on axle``."""

    name: str
    across: object  # sympy expression, linear in the mechanics' der(...) symbols
    kind = "kinematic port"


@record(kw_only=False, slots=False)
class NeuralRef(Ref):
    name: str
    fn: object
    n_out: int
    kind = "neural network"


@record(kw_only=False, slots=False)
class ElementRef(Ref):
    name: str
    element_kind: str
    ports: tuple[str, ...] = ()  # the two ports of a transformer or gyrator
    port: object = None  # a power port of the model (``p: thermal``): its values (pdsl.resolve.model.PowerPort)
    kind = "element"


# the names of a power port's values besides `across` and `through` (LANGUAGE.md §9)
PORT_VALUE_NAMES = {"electrical": ("v", "i"), "translational": ("v", "f"), "rotational": ("w", "tau"),
                    "hydraulic": ("p", "Q"), "thermal": ("T", "Q_flow")}


def _as_list(v, span, what):
    if isinstance(v, sp.MatrixBase) and v.shape[1] == 1:
        return list(v)
    raise PdslError.at("TypeMismatch", f"{what} must be a vector like [a, b, c]", span)


_AXES = ("x", "y", "z")
_VELOCITY_AXES = ("vx", "vy", "vz")

# name -> (sympy function, arity) for scalar functions
_SCALAR_FUNCS: Mapping[str, tuple[Callable, int]] = {
    "sin": (sp.sin, 1),
    "cos": (sp.cos, 1),
    "tan": (sp.tan, 1),
    "asin": (sp.asin, 1),
    "acos": (sp.acos, 1),
    "atan": (sp.atan, 1),
    "exp": (sp.exp, 1),
    "log": (sp.log, 1),
    "sqrt": (sp.sqrt, 1),
    "abs": (sp.Abs, 1),
    "tanh": (sp.tanh, 1),
    "sinh": (sp.sinh, 1),
    "cosh": (sp.cosh, 1),
    "sign": (sp.sign, 1),
    "atan2": (sp.atan2, 2),
    "min": (sp.Min, 2),
    "max": (sp.Max, 2),
    "smoothstep": (lambda x, w: (1 + sp.tanh(x / w)) / 2, 2),  # a differentiable step of width ~w
}
BUILTIN_FUNCTIONS = frozenset(_SCALAR_FUNCS) | {"dot", "norm", "cross", "sum", "der"}
CONSTANTS = {"pi": sp.pi}


@record(kw_only=False, slots=False)
class Unusable:
    """Why a name that exists in the model cannot be used at this place."""

    code: str
    message: str
    hint: str | None = None


class Scope:
    """Name lookup for expressions; the resolver fills it."""

    def __init__(self, names: Mapping[str, Value], *, der_of: Callable | None = None, known: Mapping[str, Unusable] | None = None):
        # A plain dict is copied (its owner may go on changing it); any other mapping (a ChainMap,
        # a read-only view) is shared as given: the resolver makes a scope per statement, and a
        # copy of every name of the model each time made resolving quadratic in the model size.
        self.names = dict(names) if type(names) is dict else names
        self.der_of = der_of  # callable(value, span) -> value, or None where der() is not allowed
        self.known = dict(known) if type(known) is dict else (known if known is not None else {})  # names that exist but are not usable here -> why

        self._parent: Scope | None = None  # the scope this one extends (child), sharing its names
        self._extra: tuple[str, ...] = ()  # the names ``child`` added on top of the parent's
        self._by_initial: dict[str, list[str]] | None = None  # names by first character, built on demand
        self._suggest_budget = _SUGGEST_BUDGET  # comparisons left for "did you mean" (large models)

    def child(self, extra: Mapping[str, Value]) -> "Scope":
        """This scope with ``extra`` on top (loop variables): O(len(extra)), the parent is shared."""
        # one level of maps (a ChainMap of ChainMaps makes every lookup recurse once per level of nesting)
        maps = self.names.maps if type(self.names) is ChainMap else [self.names]
        s = Scope(ChainMap(dict(extra), *maps), der_of=self.der_of, known=self.known)
        s._parent, s._extra = self, tuple(extra)
        return s

    def suggestion_pool(self, name: str) -> list[str]:
        """Names to compare an unknown ``name`` with. A large model compares only with names of its
        initial and about its length: a difflib scan of every name per error was quadratic
        (2,000 unknown names in a 4,000-name model took 13 s to report)."""
        root, extra = self, []
        while root._parent is not None:
            extra.extend(root._extra)
            root = root._parent
        if root._by_initial is None:
            root._by_initial = {}
            for n in root.names:
                root._by_initial.setdefault(n[:1], []).append(n)
            root._suggest_budget = _SUGGEST_BUDGET
        total = sum(len(v) for v in root._by_initial.values())
        if total <= _SUGGEST_ALL:
            pool = [n for v in root._by_initial.values() for n in v]
        else:
            pool = [n for n in root._by_initial.get(name[:1], ()) if abs(len(n) - len(name)) <= 2]
            if len(pool) > root._suggest_budget:  # thousands of similar names and errors: stop suggesting
                return extra
            root._suggest_budget -= len(pool)
        return extra + pool


_MISSING = object()
_SUGGEST_ALL = 500  # up to this many names, an unknown name is compared with all of them
_SUGGEST_BUDGET = 200_000  # difflib comparisons per scope in a large model (about 0.3 s), then no "did you mean"


def _is_scalar(v) -> bool:
    return isinstance(v, sp.Expr) and not isinstance(v, sp.MatrixBase)


def is_condition(v) -> bool:
    """A truth value (comparison, and/or/not, true/false); a sympy Symbol is a Boolean too, but a number here."""
    return isinstance(v, sp.logic.boolalg.Boolean) and not isinstance(v, sp.Expr)


def as_number(v, span: Span, what: str = "this"):
    """A value used in arithmetic: references become their numeric value."""
    if is_condition(v):
        raise PdslError.at(
            "TypeMismatch", "this is a condition (true or false), not a number", span,
            "use it in `if ... then ... else ...`, e.g. `if t < 1 then 0 else 2`",
        )
    if isinstance(v, IndexedArray):
        return v.usable_value(span)
    if isinstance(v, BodyRef | ArrayRef):
        return v.as_value()
    if isinstance(v, PointRef):
        return v.position
    if isinstance(v, NeuralRef):
        raise PdslError.at("TypeMismatch", f"neural network `{v.name}` must be called, as `{v.name}(...)`", span)
    if isinstance(v, ElementRef):
        raise PdslError.at(
            "TypeMismatch", f"`{v.name}` is a {v.element_kind} element; it can only appear in a junction", span
        )
    if isinstance(v, JointRef):
        raise PdslError.at("TypeMismatch", f"`{v.name}` is a named joint: use `{v.name}.angle` or `{v.name}.rate`", span)
    if isinstance(v, SliderRef):
        raise PdslError.at("TypeMismatch", f"`{v.name}` is a named slider: use `{v.name}.position` or `{v.name}.rate`", span)
    if isinstance(v, PortRef):
        raise PdslError.at("TypeMismatch", f"`{v.name}` is a kinematic port: it is connected (`connect`) or driven "
                           f"(`force … on {v.name}`), not used as a number", span)
    if isinstance(v, Ref):
        raise PdslError.at("TypeMismatch", f"this is a {v.kind}, not a number", span)
    return v


def as_scalar(v, span: Span, what: str = "this expression"):
    v = as_number(v, span)
    if isinstance(v, sp.MatrixBase):
        if v.shape == (1, 1):
            return v[0, 0]
        raise PdslError.at(
            "TypeMismatch", f"{what} must be a scalar, but it is a {v.shape[0]}x{v.shape[1]} array", span
        )
    return v


def int_value(v, span: Span, what: str) -> int:
    v = as_scalar(v, span, what)
    if isinstance(v, sp.Integer) or (isinstance(v, sp.Number) and v.is_integer):
        return int(v)
    if isinstance(v, sp.Float) and float(v).is_integer():
        return int(v)
    if v.free_symbols:
        names = ", ".join(sorted(f"`{s}`" for s in v.free_symbols))
        raise PdslError.at(
            "NotConstant",
            f"{what} must be an integer known when the model is compiled, but it depends on {names}",
            span,
            "use a `const` (and `--const NAME=VALUE` to change it), not a `param`",
        )
    raise PdslError.at("NotInteger", f"{what} must be an integer, got {v}", span)


def float_value(v, span: Span, what: str) -> float:
    v = as_scalar(v, span, what)
    if v.free_symbols:
        names = ", ".join(sorted(f"`{s}`" for s in v.free_symbols))
        raise PdslError.at("NotConstant", f"{what} must be a number, but it depends on {names}", span)
    try:
        x = float(v)
    except (TypeError, ValueError):
        raise PdslError.at("NotANumber", f"{what} is not a real number ({v})", span) from None
    if x != x or x in (float("inf"), float("-inf")):
        raise PdslError.at("NotANumber", f"{what} is not finite ({v})", span)
    return x


class Evaluator:
    """Evaluates expression ASTs in a :class:`Scope`; records NN input sizes on the way."""

    def __init__(self, scope: Scope, nn_inputs: dict[str, tuple[int, Span]] | None = None):
        self.scope = scope
        self.nn_inputs = nn_inputs if nn_inputs is not None else {}

    # Structural construction (``fast``): sums over large arrays (Cucker–Smale with N = 100 has 9,900 pair terms)
    # build each term with ``evaluate=False`` — no canonicalisation, no assumption queries (sympy spends ~5 ms a
    # term on them) — while arithmetic on numbers (indices, bounds) stays exact. The expressions are equal in
    # value, only not in sympy's canonical form; models whose sums touch arrays smaller than FAST_ARRAY_SIZE keep
    # the canonical form (and so their `show` output).
    fast = False
    _absent: frozenset = frozenset()  # names known not to be in the scope (a sum's body: looked up once)

    def with_names(self, extra: Mapping[str, Value]) -> "Evaluator":
        ev = Evaluator(self.scope.child(extra), self.nn_inputs)
        ev.fast = self.fast
        if self._absent:
            ev._absent = self._absent - extra.keys()
        return ev

    # ------------------------------------------------------------ dispatch
    def eval(self, e: A.Expr) -> Value:
        method = getattr(self, "_" + type(e).__name__)
        return method(e)

    def scalar(self, e: A.Expr, what: str = "this expression") -> sp.Expr:
        return as_scalar(self.eval(e), e.span, what)

    def number(self, e: A.Expr):
        return as_number(self.eval(e), e.span)

    # ------------------------------------------------------------ atoms
    def _Num(self, e: A.Num):
        return number_value(e.text, e.span)

    def _Name(self, e: A.Name):
        if e.id not in self._absent:
            try:  # one lookup (a ChainMap's `in` and `[]` each walk its maps)
                return self.scope.names[e.id]
            except KeyError:
                pass
        if e.id in CONSTANTS:
            return CONSTANTS[e.id]
        if e.id in self.scope.known:
            why = self.scope.known[e.id]
            raise PdslError.at(why.code, why.message, e.span, why.hint)
        if e.id in BUILTIN_FUNCTIONS:
            raise PdslError.at("TypeMismatch", f"`{e.id}` is a function; call it as `{e.id}(...)`", e.span)
        raise PdslError.at("UnknownName", f"unknown name `{e.id}`", e.span, self._suggest(e.id))

    def _suggest(self, name: str) -> str:
        pool = self.scope.suggestion_pool(name) + list(CONSTANTS)
        close = difflib.get_close_matches(name, pool, n=1)
        if close:
            return f"did you mean `{close[0]}`?"
        return "declare it first (param, var, coord, momentum, input, const, body, nn)"

    def _Vector(self, e: A.Vector):
        items = [self.number(i) for i in e.items]
        if not items:
            raise PdslError.at("TypeMismatch", "an empty vector `[]` has no meaning here", e.span)
        if all(_is_scalar(i) for i in items):
            return sp.ImmutableMatrix([[i] for i in items])
        if all(isinstance(i, sp.MatrixBase) and i.shape[1] == 1 for i in items):
            n = items[0].shape[0]
            if any(i.shape[0] != n for i in items):
                raise PdslError.at("TypeMismatch", "the rows of a matrix must all have the same length", e.span)
            return sp.ImmutableMatrix([list(i) for i in items])
        raise PdslError.at("TypeMismatch", "a vector's entries must all be scalars (or all rows)", e.span)

    # ------------------------------------------------------------ operators
    def _Neg(self, e: A.Neg):
        v = self.number(e.operand)
        if self.fast and _is_scalar(v) and not isinstance(v, sp.Number):
            return _mul(sp.S.NegativeOne, v)
        return -v

    # ------------------------------------------------------------ conditionals
    def condition(self, e: A.Expr):
        """A condition: a comparison, ``and``/``or``/``not`` of conditions (sympy Boolean)."""
        v = self.eval(e)
        if not is_condition(v):
            raise PdslError.at(
                "TypeMismatch", f"{_describe(e)} is a number, not a condition", e.span,
                "a condition compares numbers: `x < 1`, `t >= 2 and t < 3`, `not (v == 0)`",
            )
        return v

    def _Compare(self, e: A.Compare):
        a = self.scalar(e.left, f"the left side of `{e.op}`")
        b = self.scalar(e.right, f"the right side of `{e.op}`")
        try:
            return _RELATIONS[e.op](a, b)
        except TypeError:
            raise PdslError.at("TypeMismatch", f"these sides cannot be compared with `{e.op}`", e.span) from None

    def _BoolOp(self, e: A.BoolOp):
        a, b = self.condition(e.left), self.condition(e.right)
        return sp.And(a, b) if e.op == "and" else sp.Or(a, b)

    def _Not(self, e: A.Not):
        return sp.Not(self.condition(e.operand))

    def _IfExpr(self, e: A.IfExpr):
        """``if c then a else b`` -> Piecewise((a, c), (b, True)), entry by entry for arrays of one shape."""
        c = self.condition(e.cond)
        a, b = self.number(e.then), self.number(e.orelse)
        return self._if_value(c, a, b, e)

    def _if_value(self, c, a, b, e: A.IfExpr):
        va, vb = isinstance(a, sp.MatrixBase), isinstance(b, sp.MatrixBase)
        if va != vb or (va and a.shape != b.shape):
            raise PdslError.at(
                "TypeMismatch", f"the branches of this `if` differ in shape: {_shape(a)} after `then`, {_shape(b)} after `else`",
                e.span,
            )
        if c == sp.true:
            return a
        if c == sp.false:
            return b
        if va:
            return sp.ImmutableMatrix(a.shape[0], a.shape[1], lambda i, j: sp.Piecewise((a[i, j], c), (b[i, j], True)))
        return sp.Piecewise((a, c), (b, True))

    def _Text(self, e: A.Text):
        raise PdslError.at("TypeMismatch", f'the text "{e.value}" is not a number', e.span,
                           'text is only an attribute value, as in `{unit = "kg"}`')

    def _BinOp(self, e: A.BinOp):
        """Left-to-right over a chain ``a + b - c`` without recursing once per operator."""
        start, steps = _left_chain(e)
        operands = [self.number(start)] + [self.number(node.right) for node in steps]
        if steps[0].op in "+-" and all(_is_scalar(v) for v in operands):
            # one Add of n terms: pairwise additions would cost O(n^2) on long sums
            if self.fast and not all(isinstance(v, sp.Number) for v in operands):
                return _add(operands[0], *(v if node.op == "+" else _mul(sp.S.NegativeOne, v)
                                           for node, v in zip(steps, operands[1:])))
            return sp.Add(operands[0], *(v if node.op == "+" else -v for node, v in zip(steps, operands[1:])))
        value = operands[0]
        for node, v in zip(steps, operands[1:]):
            value = self._apply(node, value, v)
        return value

    def _apply(self, e: A.BinOp, a, b):
        va, vb = isinstance(a, sp.MatrixBase), isinstance(b, sp.MatrixBase)
        op = e.op
        if self.fast and not (va or vb) and not (isinstance(a, sp.Number) and isinstance(b, sp.Number)):
            return self._apply_structural(e, a, b)
        if op in "+-":
            if va != vb or (va and a.shape != b.shape):
                raise PdslError.at(
                    "TypeMismatch", f"cannot {'add' if op == '+' else 'subtract'} {_shape(a)} and {_shape(b)}", e.span
                )
            return a + b if op == "+" else a - b
        if op == "*":
            if va and vb:
                raise PdslError.at(
                    "TypeMismatch",
                    f"`*` between two arrays ({_shape(a)} and {_shape(b)}) is ambiguous",
                    e.span,
                    "use dot(a, b) for the scalar product or cross(a, b) for the vector product",
                )
            return a * b
        if op == "/":
            if vb:
                raise PdslError.at("TypeMismatch", "cannot divide by an array", e.span)
            if b == 0:
                raise PdslError.at("DivisionByZero", "division by zero", e.right.span)
            return a / b
        if op == "^":
            if va or vb:
                raise PdslError.at("TypeMismatch", "`^` needs scalars on both sides", e.span)
            return _power(a, b, e.span)
        raise AssertionError(op)

    def _apply_structural(self, e: A.BinOp, a, b):
        """``a op b`` of scalars, not both numbers, built with ``evaluate=False`` (the checks of :meth:`_apply`)."""
        op = e.op
        if op == "+":
            return _add(a, b)
        if op == "-":
            return _add(a, _mul(sp.S.NegativeOne, b))
        if op == "*":
            return _mul(a, b)
        if op == "/":
            if b == 0:
                raise PdslError.at("DivisionByZero", "division by zero", e.right.span)
            return _mul(a, sp.Pow(b, sp.S.NegativeOne, evaluate=False))
        if op == "^":
            _power_checks(a, b, e.span)
            return sp.Pow(a, b, evaluate=False)
        raise AssertionError(op)

    def _fast_sum(self, e: A.Generator, n_terms: int) -> bool:
        """Build this sum's terms structurally: it has many terms, or its body indexes an array of
        FAST_ARRAY_SIZE or more elements (one of the sums of an N-body model)."""
        if n_terms >= FAST_ARRAY_SIZE:
            return True
        stack = [e.body]
        while stack:
            node = stack.pop()
            if isinstance(node, A.Index) and isinstance(node.base, A.Name):
                v = self.scope.names.get(node.base.id) if node.base.id in self.scope.names else None
                size = len(v.items) if isinstance(v, ArrayRef) else (v.shape[0] if isinstance(v, sp.MatrixBase) else 0)
                if size >= FAST_ARRAY_SIZE:
                    return True
            for child in _fields(node):
                if isinstance(child, A.Expr):
                    stack.append(child)
                elif isinstance(child, (list, tuple)):
                    stack.extend(c for c in child if isinstance(c, A.Expr))
        return False

    # ------------------------------------------------------------ postfix
    def _Index(self, e: A.Index):
        base = self.eval(e.base)
        idx = [int_value(self.eval(i), i.span, "an index") for i in e.indices]
        return self._index_into(base, idx, e)

    def _index_into(self, base, idx: list[int], e: A.Index):
        if isinstance(base, ArrayRef):
            if len(idx) != 1:
                raise PdslError.at("WrongArity", f"`{base.name}` has one index, got {len(idx)}", e.span)
            return base.at(idx[0], e.span)
        base = as_number(base, e.span)
        if isinstance(base, sp.MatrixBase):
            shape = base.shape if base.shape[1] > 1 else (base.shape[0],)
            if len(idx) != len(shape):
                raise PdslError.at("WrongArity", f"this array needs {len(shape)} indices, got {len(idx)}", e.span)
            for i, n in zip(idx, shape):
                if not 1 <= i <= n:
                    raise PdslError.at("BadIndex", f"index {i} is outside 1..{n}", e.span)
            return base[idx[0] - 1, 0] if len(idx) == 1 else base[idx[0] - 1, idx[1] - 1]
        raise PdslError.at("TypeMismatch", f"{_describe(e.base)} is not an array, so it cannot be indexed", e.span)

    def _Attr(self, e: A.Attr):
        base = self.eval(e.base)
        if isinstance(base, JointRef):
            if e.name not in ("angle", "rate"):
                raise PdslError.at("UnknownName", f"joint `{base.name}` has no attribute `{e.name}`", e.span,
                                   "a named joint has .angle and .rate")
            if base.angle is None:
                raise PdslError.at("NotYetSupported", f"`{base.name}.{e.name}`: {base.why}", e.span)
            return base.angle if e.name == "angle" else base.rate
        if isinstance(base, SliderRef):
            if e.name not in ("position", "rate"):
                raise PdslError.at("UnknownName", f"slider `{base.name}` has no attribute `{e.name}`", e.span,
                                   "a named slider has .position and .rate")
            return base.position if e.name == "position" else base.rate
        if isinstance(base, ElementRef) and base.port is not None:  # a power port's values (LANGUAGE.md §9)
            port = base.port
            across, through = PORT_VALUE_NAMES.get(port.domain, ("", ""))
            if e.name in ("across", across):
                return port.across
            if e.name in ("through", through):
                return port.through
            raise PdslError.at("UnknownName", f"{port.domain} port `{port.name}` has no value `{e.name}`", e.span,
                               f"its values: across (= {across}), through (= {through})")
        if isinstance(base, PointRef):  # r.at([…]).y, ground.at([…]).x: the components of any point
            if e.name in _AXES[: len(base.position)]:
                return base.position[_AXES.index(e.name)]
            if e.name in _VELOCITY_AXES[: len(base.position)]:
                return self._velocity_of(base.position[_VELOCITY_AXES.index(e.name)], e)
            if e.name == "pos":
                return base.position
            raise PdslError.at("UnknownName", f"the point `{base.text}` has no attribute `{e.name}`", e.span,
                               f"a point has {', '.join(_AXES[: len(base.position)])}, "
                               f"{', '.join(_VELOCITY_AXES[: len(base.position)])} and pos")
        if isinstance(base, BodyRef):
            if base.name is not None:
                if e.name in _AXES[: base.space]:
                    return base.nodes[0][_AXES.index(e.name)]
                if e.name in _VELOCITY_AXES[: base.space]:
                    return self._velocity_of(base.nodes[0][_VELOCITY_AXES.index(e.name)], e)
                if e.name == "pos":
                    return base.as_value()
                if e.name in base.node_names[1:]:
                    return base.axis_point(base.node_names.index(e.name))
                if e.name == "nodes":
                    return sp.ImmutableMatrix([c for node in base.nodes for c in node])
            raise PdslError.at(
                "UnknownName",
                f"`{base.text}` has no attribute `{e.name}`",
                e.span,
                f"a body has {', '.join(_AXES[:base.space])}, {', '.join(_VELOCITY_AXES[:base.space])}, pos, nodes"
                + (", " + ", ".join(base.node_names[1:]) if len(base.node_names) > 1 else "")
                + " and .at([...])",
            )
        raise PdslError.at(
            "UnknownName",
            f"{_describe(e.base)} has no attribute `{e.name}`",
            e.span,
            "only bodies have attributes (b.x, b.pos, b.at([...]))",
        )

    def _Call(self, e: A.Call):
        if isinstance(e.func, A.Attr) and e.func.name == "at":
            base = self.eval(e.func.base)
            if not isinstance(base, BodyRef):
                raise PdslError.at("TypeMismatch", "`.at(...)` applies to a body or `ground`", e.func.span)
            if len(e.args) != 1 or e.kwargs:
                raise PdslError.at("WrongArity", "`.at` takes one vector argument", e.span)
            return base.at(self.number(e.args[0]), e.span)
        if not isinstance(e.func, A.Name):
            raise PdslError.at("TypeMismatch", "only named functions can be called", e.func.span)
        name = e.func.id
        if e.kwargs:
            raise PdslError.at("UnknownArgument", f"`{name}` takes no keyword arguments", e.kwargs[0].span)
        target = _MISSING
        if name in self._absent:
            pass
        elif name in _SCALAR_FUNCS or name in ("dot", "cross", "norm", "sum", "der"):
            try:  # a model name shadows a builtin function
                target = self.scope.names[name]
            except KeyError:
                pass
        elif name in self.scope.names:
            target = self.scope.names[name]
        if target is not _MISSING:
            if isinstance(target, NeuralRef):
                return self._call_nn(target, e)
            raise PdslError.at("TypeMismatch", f"`{name}` is not a function", e.func.span)
        if name == "der":
            return self._der(e)
        if name in _SCALAR_FUNCS:
            fn, arity = _SCALAR_FUNCS[name]
            self._arity(e, name, arity)
            args = [self.scalar(a, f"the argument of {name}") for a in e.args]
            if name == "smoothstep" and args[1] == 0:
                raise PdslError.at("DivisionByZero", "the width of `smoothstep(x, w)` is zero", e.args[1].span,
                                   "use `if x < 0 then 0 else 1` for a sharp step")
            if self.fast and name != "smoothstep" and not all(isinstance(a, sp.Number) for a in args):
                return fn(*args, evaluate=False)
            return _real(fn(*args), e.span, f"`{name}(...)` here")
        if name in ("dot", "cross"):
            self._arity(e, name, 2)
            a, b = (self.number(x) for x in e.args)
            for v, x in ((a, e.args[0]), (b, e.args[1])):
                if not (isinstance(v, sp.MatrixBase) and v.shape[1] == 1):
                    raise PdslError.at("TypeMismatch", f"`{name}` takes vectors", x.span)
            if a.shape != b.shape:
                raise PdslError.at("TypeMismatch", f"`{name}` of vectors of lengths {a.shape[0]} and {b.shape[0]}", e.span)
            if name == "dot":
                return sum((a[i] * b[i] for i in range(a.shape[0])), sp.Integer(0))
            if a.shape[0] != 3:
                raise PdslError.at("TypeMismatch", "`cross` needs 3-vectors", e.span)
            return a.cross(b).as_immutable()
        if name == "norm":
            self._arity(e, name, 1)
            a = self.number(e.args[0])
            if _is_scalar(a):
                return sp.Abs(a)
            return sp.sqrt(sum((x**2 for x in a), sp.Integer(0)))
        if name == "sum":
            self._arity(e, name, 1)
            a = self.number(e.args[0])
            return sum(a, sp.Integer(0)) if isinstance(a, sp.MatrixBase) else a
        raise PdslError.at("UnknownFunction", f"unknown function `{name}`", e.func.span, self._fn_hint(name))

    def _fn_hint(self, name):
        close = difflib.get_close_matches(name, sorted(BUILTIN_FUNCTIONS), n=1)
        listing = "functions: " + ", ".join(sorted(BUILTIN_FUNCTIONS))
        return f"did you mean `{close[0]}`? ({listing})" if close else listing

    def _arity(self, e: A.Call, name: str, n: int):
        if len(e.args) != n:
            raise PdslError.at(
                "WrongArity", f"`{name}` takes {n} argument{'s' if n > 1 else ''}, got {len(e.args)}", e.span
            )

    def _velocity_of(self, coordinate, e: A.Attr):
        """``b.vx`` = ``der(b.x)`` (and of a point's component: the chain rule of its linear expression)."""
        if self.scope.der_of is None:
            raise PdslError.at("NotAllowedHere", f"`.{e.name}` (a velocity, `der(...)`) cannot be used here", e.span)
        return self.scope.der_of(coordinate, e.span)

    def _der(self, e: A.Call):
        self._arity(e, "der", 1)
        if self.scope.der_of is None:
            raise PdslError.at("NotAllowedHere", "`der(...)` cannot be used here", e.span)
        return self.scope.der_of(self.eval(e.args[0]), e.args[0].span)

    def _call_nn(self, nn: NeuralRef, e: A.Call):
        flat: list = []
        for a in e.args:
            v = self.number(a)
            flat.extend(list(v) if isinstance(v, sp.MatrixBase) else [v])
        if not flat:
            raise PdslError.at("WrongArity", f"neural network `{nn.name}` needs at least one input", e.span)
        seen = self.nn_inputs.get(nn.name)
        if seen is None:
            self.nn_inputs[nn.name] = (len(flat), e.span)
        elif seen[0] != len(flat):
            raise PdslError.at(
                "WrongArity",
                f"`{nn.name}` is called with {len(flat)} inputs here but with {seen[0]} at {seen[1]}",
                e.span,
                "a network has one input size; its input size is inferred from its calls",
            )
        outs = [nn.fn(sp.Integer(k), *flat) for k in range(nn.n_out)]
        return outs[0] if nn.n_out == 1 else sp.ImmutableMatrix([[o] for o in outs])

    def _Generator(self, e: A.Generator):
        if not (isinstance(e.func, A.Name) and e.func.id == "sum"):
            raise PdslError.at("UnknownFunction", "only `sum(... for i in a..b)` takes a generator", e.func.span)
        if e.var in self.scope.names or e.var in CONSTANTS:
            raise PdslError.at(
                "DuplicateDefinition",
                f"the summation index `{e.var}` is already a name here",
                e.span,
                "choose an index name that the model does not use, such as `j` or `k`",
            )
        lo = int_value(self.eval(e.lo), e.lo.span, "a loop bound")
        hi = int_value(self.eval(e.hi), e.hi.span, "a loop bound")
        if hi - lo > 100_000:
            raise PdslError.at("BadArrayBounds", f"the range {lo}..{hi} is too long", e.span)
        budget = _SUM_BUDGET.get()
        if budget is None or not budget.active:  # an outermost sum: its nested sums estimated before any is expanded
            used = budget.used if budget is not None else 0
            total = _estimate_terms(Evaluator(self.scope), e, lo, hi, MAX_SUM_TERMS - used + 1)
            if used + total > MAX_SUM_TERMS:
                _too_many_terms(e, max(hi - lo + 1, 0), nested=total > hi - lo + 1)
        with _expanding(e, max(hi - lo + 1, 0)):
            return self._expand_sum(e, lo, hi)

    def _expand_sum(self, e: A.Generator, lo: int, hi: int):
        fast = self.fast or self._fast_sum(e, hi - lo + 1)
        # the expression around a structural sum goes on structurally: `(sum(...) + sum(...))/N` would otherwise
        # be canonicalised (sorted, and 1/N distributed over every term) in one costly pass
        self.fast = fast
        # the names of the body, looked up once for all terms (a term's scope is then {var: i} over these)
        snapshot, absent = {}, set()
        for name in _names_in(e.body):
            if name != e.var and name not in self._absent:
                try:
                    snapshot[name] = self.scope.names[name]
                except KeyError:
                    absent.add(name)
        base = self
        if type(self) is Evaluator and (snapshot or absent):
            base = Evaluator(self.scope.child(snapshot), self.nn_inputs)
            base._absent = self._absent | absent
        terms = None
        if fast and hi - lo + 1 >= TEMPLATE_MIN_TERMS and type(self) is Evaluator:
            # an index template: the body evaluated once with symbolic indices, each term instantiated structurally
            # (terms it cannot instantiate exactly are evaluated one by one below, errors included)
            terms = _SUM_TEMPLATES[0](base, e, lo, hi) if _SUM_TEMPLATES else None
        if terms is None:
            terms = []
            for i in range(lo, hi + 1):
                ev = base.with_names({e.var: sp.Integer(i)})
                ev.fast = fast
                terms.append(ev.number(e.body))
        return _add_all(terms, e.span, structural=fast)


# ------------------------------------------------------------------ the term budget of sums
MAX_SUM_TERMS = 100_000  # terms all `sum(... for i in a..b)` of one model expand to, nested sums multiplied out


class _SumBudget:
    """Terms spent so far and the sums being expanded (outermost first)."""

    def __init__(self):
        self.used = 0
        self.active: list[tuple[A.Generator, int]] = []


_SUM_BUDGET: ContextVar[_SumBudget | None] = ContextVar("pdsl_sum_budget", default=None)


@contextmanager
def sum_budget():
    """One budget of :data:`MAX_SUM_TERMS` for everything evaluated inside (a model's resolution).
    Outside one, each outermost sum has a budget of its own."""
    token = _SUM_BUDGET.set(_SumBudget())
    try:
        yield
    finally:
        _SUM_BUDGET.reset(token)


def spend_sum_terms(e: A.Generator, n: int) -> None:
    """Count ``n`` terms of ``e`` against the budget before they are expanded; past it, a located
    ``TooManyTerms`` at the outermost sum being expanded (the one the user can make smaller)."""
    budget = _SUM_BUDGET.get()
    if budget is None:
        return
    if budget.used + n > MAX_SUM_TERMS:
        outer, outer_n = budget.active[0] if budget.active else (e, n)
        _too_many_terms(outer, outer_n, nested=bool(budget.active) and outer is not e)
    budget.used += n


def _too_many_terms(e: A.Generator, n: int, nested: bool):
    inside = ", with the sums inside it" if nested else ""
    raise PdslError.at(
        "TooManyTerms",
        f"expanding this sum ({n:,} terms{inside}) takes the sums of the model past "
        f"{MAX_SUM_TERMS:,} terms, the most they may expand to in all",
        e.span,
        "use smaller bounds (`--const N=...`), or fewer nested sums",
    )


def _inner_sums(body: A.Expr) -> list[A.Generator]:
    """The sums directly inside ``body`` (not those inside them)."""
    out, stack = [], [body]
    while stack:
        x = stack.pop()
        if isinstance(x, A.Generator):
            out.append(x)
        elif isinstance(x, tuple):
            stack.extend(x)
        elif isinstance(x, A.Expr | A.KwArg):
            stack.extend(getattr(x, f) for f in x.__dataclass_fields__ if f != "span")
    return out


def _estimate_terms(ev: "Evaluator", e: A.Generator, lo: int, hi: int, cap: int) -> int:
    """The terms ``e`` expands to with its nested sums multiplied out (an inner sum whose bounds depend on
    the index counted at the larger of its sizes at the first and the last index), or more than ``cap``.
    Bounds that cannot be evaluated count as nothing: the expansion reports them, and counts as it goes."""
    n = max(hi - lo + 1, 0)
    inner = _inner_sums(e.body) if n else []
    per = 0
    for g in inner:
        best = None
        for k in dict.fromkeys((lo, hi)):
            sub = ev.with_names({e.var: sp.Integer(k)})
            try:
                g_lo = int_value(sub.eval(g.lo), g.lo.span, "a loop bound")
                g_hi = int_value(sub.eval(g.hi), g.hi.span, "a loop bound")
            except Exception:  # noqa: BLE001 - an estimate; the expansion itself reports a bad bound
                continue
            if best is None or g_hi - g_lo > best[2] - best[1]:
                best = (sub, g_lo, g_hi)
        if best is not None and best[2] >= best[1]:
            per += _estimate_terms(best[0], g, best[1], best[2], cap // n + 1)
        if n + n * per > cap:
            break
    return n + n * per


@contextmanager
def _expanding(e: A.Generator, n: int):
    """Spend ``n`` terms of ``e`` and mark it as being expanded (a budget of its own when none is set)."""
    token = _SUM_BUDGET.set(_SumBudget()) if _SUM_BUDGET.get() is None else None
    budget = _SUM_BUDGET.get()
    spend_sum_terms(e, n)
    budget.active.append((e, n))
    try:
        yield
    finally:
        budget.active.pop()
        if token is not None:
            _SUM_BUDGET.reset(token)


_RELATIONS: Mapping[str, Callable] = {"<": sp.Lt, "<=": sp.Le, ">": sp.Gt, ">=": sp.Ge, "==": sp.Eq, "!=": sp.Ne}

# Sums whose body indexes an array of this many elements (or with this many terms) are built structurally.
FAST_ARRAY_SIZE = 32
# Structural sums of at least this many terms go through an index template (pdsl/resolve/templates.py).
TEMPLATE_MIN_TERMS = 4

# Index templates (pdsl.resolve.templates) evaluate a long sum's body once with symbolic indices and instantiate
# each term structurally. They are built on this module's Evaluator (templates imports this module), so they plug
# in here instead of being imported: `use_sum_templates` is called when pdsl.resolve.templates is imported (the
# resolver imports it). Without them every term is evaluated one by one: the same values, more slowly.
_SUM_TEMPLATES: list = []


def use_sum_templates(fn: Callable) -> None:
    """Install ``fn(evaluator, generator, lo, hi) -> list of terms | None`` as the evaluator of long sums."""
    _SUM_TEMPLATES[:] = [fn]

# Decimal exponents beyond this are outside double precision (and would take sympy forever).
MAX_EXPONENT = 308
# The largest exponent allowed on a non-constant base (sympy's polynomial passes are dense in the degree).
MAX_SYMBOLIC_EXPONENT = 10_000
_CHAIN_OPS = {"+": "+-", "-": "+-", "*": "*/", "/": "*/"}


def _left_chain(e: A.BinOp) -> tuple[A.Expr, list[A.BinOp]]:
    """``a + b - c`` -> (a, [the ``+`` node, the ``-`` node]): the operators in evaluation order."""
    family = _CHAIN_OPS.get(e.op, "")
    steps = [e]
    x = e.left
    while isinstance(x, A.BinOp) and x.op in family:
        steps.append(x)
        x = x.left
    steps.reverse()
    return x, steps


_RANGE_HINT = "numbers must lie between 1e-308 and 1e308 in magnitude"


def number_value(text: str, span: Span) -> sp.Expr:
    """A literal, kept exact (``0.1`` is 1/10) but only if a double can hold it."""
    mantissa = re.split("[eE]", text)[0]
    if not any(c in "123456789" for c in mantissa):
        return sp.Integer(0)
    value = float(text)  # float() of a literal never raises; it saturates to 0 or inf
    if value == math.inf:
        raise PdslError.at("BadNumber", f"`{text}` is outside the range of floating-point numbers", span, _RANGE_HINT)
    if value < sys.float_info.min:  # 0.0 or a subnormal double: digits lost, 1/x overflows
        raise PdslError.at("BadNumber", f"`{text}` is outside the range of normal floating-point numbers (below {sys.float_info.min:.4g})",
                           span, _RANGE_HINT)
    return sp.Rational(text) if any(c in text for c in ".eE") else sp.Integer(text)


def _power(a, b, span: Span):
    """``a^b``, refusing numbers that no floating-point format can hold (sympy would try)."""
    _power_checks(a, b, span)
    return _real(a**b, span, "this power")


def _power_checks(a, b, span: Span) -> None:
    if a == 0 and b.is_number and b.is_negative:
        raise PdslError.at("DivisionByZero", "zero raised to a negative power", span)
    if a.is_number and b.is_number and a != 0:
        size = _decimal_exponent(a, b)
        if not abs(size) <= MAX_EXPONENT:
            raise PdslError.at(
                "BadNumber", f"this power is about 10^{size:.3g}, outside the range of floating-point numbers", span, _RANGE_HINT
            )
    elif b.is_number and not abs(complex(b.evalf(15))) <= MAX_SYMBOLIC_EXPONENT:
        # x^1e308 overflows for every |x| ≠ 1, and sympy's polynomial algebra would build a dense degree-1e308 object
        raise PdslError.at("BadNumber", f"an exponent of {complex(b.evalf(4)).real:.4g} on an expression: "
                           f"exponents beyond ±{MAX_SYMBOLIC_EXPONENT} are refused", span,
                           "write the physics with moderate powers (x^4, x^-2)")


def _real(v: sp.Expr, span: Span, what: str) -> sp.Expr:
    """Model quantities are real: a constant that is not (sqrt(-1), log(-2), asin(2)) is an error."""
    if v.is_number and v.is_extended_real is False:
        raise PdslError.at(
            "NotReal", f"{what} is not a real number (it evaluates to {v})", span, "model quantities are real; check the sign or the domain of the function"
        )
    return v


def _decimal_exponent(a: sp.Expr, b: sp.Expr) -> float:
    """log10 |a^b| for numeric a and b, from 15-digit approximations."""
    magnitude = abs(complex(a.evalf(15)))
    if magnitude in (0.0, math.inf):
        return math.inf
    return float(sp.re(b.evalf(15))) * math.log10(magnitude)


def _names_in(expr: A.Expr) -> set[str]:
    """Every name an expression mentions (function names too)."""
    out, stack = set(), [expr]
    while stack:
        node = stack.pop()
        if isinstance(node, A.Name):
            out.add(node.id)
            continue
        for child in _fields(node):
            if isinstance(child, A.Expr):
                stack.append(child)
            elif isinstance(child, (list, tuple)):
                stack.extend(c for c in child if hasattr(c, "span"))
    return out


def _add(*args):
    """``Add(*args, evaluate=False)`` without sympy's argument cache and sympification (the arguments are sympy
    expressions already): the structural sums of large models build ~10^5 of them."""
    return sp.Add._from_args(args)


def _mul(*args):
    """``Mul(*args, evaluate=False)``, as :func:`_add`."""
    return sp.Mul._from_args(args)


def _fields(node) -> list:
    """The field values of an AST node (frozen dataclasses with slots)."""
    import dataclasses

    return [getattr(node, f.name) for f in dataclasses.fields(node)]


def _add_all(terms: list, span: Span, structural: bool = False):
    """The sum of scalars (one sympy Add, not n pairwise ones) or of equal-shaped arrays."""
    if not terms:
        return sp.Integer(0)
    if all(_is_scalar(t) for t in terms):
        if structural and len(terms) > 1 and not all(isinstance(t, sp.Number) for t in terms):
            return _add(*terms)
        return sp.Add(*terms)
    first = terms[0]
    if not all(isinstance(t, sp.MatrixBase) and t.shape == first.shape for t in terms):
        raise PdslError.at("TypeMismatch", "the terms of this sum do not all have the same shape", span)
    return sp.ImmutableMatrix(first.shape[0], first.shape[1], lambda i, j: sp.Add(*(t[i, j] for t in terms)))


def _describe(e: A.Expr) -> str:
    """How to name an expression in a message: `x` for a name, "this expression" otherwise."""
    return f"`{e.id}`" if isinstance(e, A.Name) else "this expression"


def _shape(v) -> str:
    if isinstance(v, sp.MatrixBase):
        return f"a {v.shape[0]}x{v.shape[1]} array" if v.shape[1] > 1 else f"a vector of length {v.shape[0]}"
    return "a scalar"
