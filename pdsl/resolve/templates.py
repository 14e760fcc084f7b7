"""Index templates for large sums (issue 18): ``sum(body for j in a..b)`` evaluated once, instantiated per term.

A structural sum (``Evaluator.fast``: the N-body sums of a large model) used to evaluate its body's AST once
per term: Cucker–Smale with N = 100 walks ~600,000 AST nodes. Here the body is evaluated ONCE by a
:class:`TemplateEvaluator`, with a symbol ``J`` for the summation index and one placeholder symbol per
array element whose index depends on it (``x[j]``, ``x[N - j + 1]``, ``c[p[j]]``). The result (the template)
is compiled into a short program over its placeholder-dependent nodes; each term then runs the program:

- the loop index is the integer i, each element placeholder is looked up with its index computed exactly
  (``ArrayRef.at``: a missing index is an error, see below);
- every node that depends on a placeholder is rebuilt the way the evaluator's structural mode builds it:
  ``Add``/``Mul``/``Pow``/functions with ``evaluate=False`` (``_from_args``, no sympification, no
  assumption queries), and number-only nodes folded exactly (``Add(2, -1)`` -> 1) — as the evaluator folds
  arithmetic on numbers, so integer index arithmetic stays exact;
- comparisons and ``and``/``or``/``not`` are rebuilt with evaluation (as the evaluator builds them), and an
  ``if`` whose condition or branches depend on the index is decided per term as ``_IfExpr`` decides it.

Anything the program cannot reproduce exactly falls back to the evaluator, which then reports the error at
its span or computes the value:

- the whole sum, when the body is not template-safe (:class:`NotTemplate`): bounds of an inner sum that
  depend on the index, functions other than the scalar table (``der``, networks, ``dot``…), vectors or
  bodies indexed by the index, a value that is not a scalar, or any error while building the template;
- one term, when its instantiation meets anything unusual (:class:`Fallback`, or any exception): an index
  out of range or not an integer, a division by zero, a non-finite or non-real number, a power outside the
  range of doubles. The evaluator then evaluates that term and raises the located ``BadIndex``,
  ``DivisionByZero``… error exactly as before.

The instantiated terms equal the per-term evaluation in value (tests/resolve/test_templates.py compares
them at random points); they may differ in structure only where the evaluator would have kept an
unevaluated number-only subtree (the template folds it).
"""

from __future__ import annotations

import sympy as sp
from sympy.core.basic import Basic

from ..diagnostics import PdslError
from ..parse import ast as A
from . import expressions as X


class NotTemplate(Exception):
    """This body is evaluated term by term (it is not template-safe)."""


class Fallback(Exception):
    """This term is evaluated by the evaluator (its structural instantiation might differ, or it is an error)."""


class TemplateIf(sp.Expr):
    """``if c then a else b`` (args a, c, b) whose condition or branches depend on the loop index: decided per
    term, as :meth:`Evaluator._if_value` decides it. Lives only inside a template, never in a result."""

    is_commutative = True
    is_number = False


class _State:
    """The placeholders of one template: the loop index and the array elements it indexes."""

    def __init__(self, index: sp.Dummy):
        self.index = index
        self.count = 1  # the terms of the sum this template stands for (inner sums expand once for each)
        self.symbols = {index}
        self.elements: list[tuple] = []  # (symbol, base, index values, span), in creation order
        self.produced: list = []  # every value the body's evaluation made (also those a folded `if` discards)
        self._by_key: dict = {}
        self._scalar_arrays: dict[int, bool] = {}

    def element(self, base, values: tuple, span) -> sp.Dummy:
        key = (id(base), values)
        sym = self._by_key.get(key)
        if sym is None:
            sym = sp.Dummy("e")
            self._by_key[key] = sym
            self.elements.append((sym, base, values, span))
            self.symbols.add(sym)
        return sym

    def scalar_items(self, base: X.ArrayRef) -> bool:
        ok = self._scalar_arrays.get(id(base))
        if ok is None:
            ok = self._scalar_arrays[id(base)] = all(X._is_scalar(v) for v in base.items)
        return ok


class TemplateEvaluator(X.Evaluator):
    """The evaluator in structural mode, with placeholders for the loop index and the elements it indexes."""

    def __init__(self, scope, nn_inputs, state: _State):
        super().__init__(scope, nn_inputs)
        self.state = state
        self.fast = True

    def with_names(self, extra):
        ev = TemplateEvaluator(self.scope.child(extra), self.nn_inputs, self.state)
        if self._absent:
            ev._absent = self._absent - extra.keys()
        return ev

    def eval(self, e: A.Expr):
        v = getattr(self, "_" + type(e).__name__)(e)
        if isinstance(v, Basic):
            # each term runs the operations of every value, not only of those the result keeps: the evaluator
            # evaluates `1/(j - 7)` in `if 1 > 2 then 1/(j - 7) else 0` too (and reports the division by zero)
            self.state.produced.append(v)
        return v

    def _depends(self, v) -> bool:
        return isinstance(v, Basic) and not self.state.symbols.isdisjoint(v.free_symbols)

    def _independent(self, v):
        if self._depends(v):
            raise NotTemplate
        return v

    # ------------------------------------------------------------ what changes with symbolic indices
    def _Index(self, e: A.Index):
        base = self.eval(e.base)
        raw = [self.eval(i) for i in e.indices]
        if not any(self._depends(v) for v in raw):
            idx = [X.int_value(v, i.span, "an index") for v, i in zip(raw, e.indices)]
            return self._index_into(base, idx, e)
        values = tuple(X.as_scalar(v, i.span, "an index") for v, i in zip(raw, e.indices))
        if isinstance(base, X.ArrayRef):
            if len(values) != 1 or not self.state.scalar_items(base):
                raise NotTemplate
        else:
            base = X.as_number(base, e.span)
            if not isinstance(base, sp.MatrixBase) or self._depends(base):
                raise NotTemplate
            shape = base.shape if base.shape[1] > 1 else (base.shape[0],)
            if len(values) != len(shape):
                raise NotTemplate
        return self.state.element(base, values, e.span)

    def _Generator(self, e: A.Generator):
        """An inner sum: term by term (its bounds must not depend on the outer index)."""
        if not (isinstance(e.func, A.Name) and e.func.id == "sum") or e.var in self.scope.names or e.var in X.CONSTANTS:
            raise NotTemplate
        lo = X.int_value(self._independent(self.eval(e.lo)), e.lo.span, "a loop bound")
        hi = X.int_value(self._independent(self.eval(e.hi)), e.hi.span, "a loop bound")
        if hi - lo > 100_000:
            raise NotTemplate
        X.spend_sum_terms(e, max(hi - lo + 1, 0) * self.state.count)  # the template stands for every outer term
        terms = [self.with_names({e.var: sp.Integer(i)}).number(e.body) for i in range(lo, hi + 1)]
        return X._add_all(terms, e.span, structural=True)

    def _Call(self, e: A.Call):
        if isinstance(e.func, A.Name) and e.func.id in X._SCALAR_FUNCS and e.func.id != "smoothstep":
            return super()._Call(e)  # a model name that shadows the function is handled (and refused) there
        return self._independent(super()._Call(e))  # der, networks, dot, norm, sum(array), smoothstep, .at

    def _Vector(self, e: A.Vector):
        return self._independent(super()._Vector(e))

    def _Attr(self, e: A.Attr):
        return self._independent(super()._Attr(e))

    def _if_value(self, c, a, b, e: A.IfExpr):
        if not (self._depends(c) or self._depends(a) or self._depends(b)):
            return super()._if_value(c, a, b, e)
        if not (X._is_scalar(a) and X._is_scalar(b)):
            raise NotTemplate
        if c == sp.true:
            return a
        if c == sp.false:
            return b
        return Basic.__new__(TemplateIf, a, c, b)


# ---------------------------------------------------------------------------------------------- the program

def _const_value(a):
    """The number an index-free subtree stands for, or None. The evaluator builds ``x - 5`` as
    ``Add(x, Mul(-1, 5))`` (unevaluated): in a term where x is a number, it folds the whole operation exactly
    (``j - 5`` at j = 5 is 0, not ``5 - 1·5``), so the template folds such constant pieces with it."""
    if a.is_Number:
        return a
    if a.__class__ in (sp.Add, sp.Mul, sp.Pow):
        vals = [_const_value(x) for x in a.args]
        if all(v is not None for v in vals):
            v = a.func(*vals)
            return v if v.is_Number else None
    return None


_NOT_FINITE = (sp.S.NaN, sp.S.ComplexInfinity, sp.S.Infinity, sp.S.NegativeInfinity)


def _finite(r):
    if any(r is z for z in _NOT_FINITE):  # singletons (zoo is no Number)
        raise Fallback
    return r


def _real_number(r):
    if r.is_number and r.is_extended_real is False:
        raise Fallback
    return _finite(r)


_new = Basic.__new__


def _assoc_builder(cls, commutative, consts: list | None, dep: list[int]):
    """``cls._from_args(args)`` (Add, Mul) or, when the arguments that depend on the index are numbers and the
    others are constant (``consts``: their values, None where an argument depends on the index), the
    evaluated number — as the evaluator folds an operation on numbers."""

    def build(args):
        obj = _new(cls, *args)
        obj.is_commutative = commutative
        return obj

    if consts is None:  # an argument that does not depend on the index is not a number (`x[i] - x[j]`)
        return build

    def build_or_fold(args):
        for k in dep:
            if not args[k].is_Number:
                obj = _new(cls, *args)
                obj.is_commutative = commutative
                return obj
        vals = consts.copy()
        for k in dep:
            vals[k] = args[k]
        return _finite(cls(*vals))

    return build_or_fold


def _pow_builder(check_base: bool, check_exp: bool):
    """An unevaluated power with the evaluator's checks (``_power_checks``), evaluated when both are numbers.
    ``check_base``/``check_exp``: that side depends on the index and can become a number (a side that keeps
    a symbol of the model cannot)."""

    def build(args):
        b, x = args
        if b.is_Number and x.is_Number:
            X._power_checks(b, x, None)
            return _real_number(b**x)
        if (check_base and b.is_number) or (check_exp and x.is_number):
            X._power_checks(b, x, None)  # the evaluator's checks on a structural power
        obj = _new(sp.Pow, b, x)
        obj.is_commutative = True
        return obj

    return build


_FAST_FUNCTIONS = frozenset(
    (sp.exp, sp.Abs, sp.sign, sp.sin, sp.cos, sp.tan, sp.asin, sp.acos, sp.atan, sp.log, sp.tanh, sp.sinh, sp.cosh,
     sp.atan2)
)


def _function_builder(node):
    cls = node.func
    nargs = node.nargs if cls in _FAST_FUNCTIONS else None

    def build(args):
        for a in args:
            if not a.is_Number:
                break
        else:
            return _real_number(cls(*args))  # the evaluator evaluates a function of numbers (and checks it)
        if nargs is None:
            return cls(*args, evaluate=False)
        obj = Basic.__new__(cls, *args)  # cls(*args, evaluate=False) without the argument checks and caches
        obj.nargs = nargs
        return obj

    return build


def _evaluated_builder(cls):
    def build(args):
        return cls(*args)

    return build


def _if_builder(args):
    a, c, b = args
    if c == sp.true:
        return a
    if c == sp.false:
        return b
    return sp.Piecewise((a, c), (b, True))


def _element_builder(base, span):
    if isinstance(base, X.ArrayRef):
        def build(idx):
            i = idx[0]
            if not isinstance(i, sp.Integer):
                raise Fallback
            return base.at(int(i), span)  # a missing index: the per-term evaluation reports it at its span
        return build
    rows, cols = base.shape

    def build_matrix(idx):
        for i in idx:
            if not isinstance(i, sp.Integer):
                raise Fallback
        if len(idx) == 1:
            i = int(idx[0])
            if not 1 <= i <= rows:
                raise Fallback
            return base[i - 1, 0]
        i, j = int(idx[0]), int(idx[1])
        if not (1 <= i <= rows and 1 <= j <= cols):
            raise Fallback
        return base[i - 1, j - 1]

    return build_matrix


def _builder_for(node, changes, placeholders):
    cls = node.__class__
    if cls is sp.Add or cls is sp.Mul:
        consts = [None if c else _const_value(a) for a, c in zip(node.args, changes)]
        can_fold = all(c or v is not None for v, c in zip(consts, changes))
        dep = [k for k, c in enumerate(changes) if c]
        return _assoc_builder(cls, node.is_commutative, consts if can_fold else None, dep)
    if cls is sp.Pow:
        return _pow_builder(*(c and not _keeps_symbol(a, placeholders) for a, c in zip(node.args, changes)))
    if cls is TemplateIf:
        return _if_builder
    if isinstance(node, (sp.core.relational.Relational, sp.And, sp.Or, sp.Not)):
        return _evaluated_builder(node.func)
    if cls in _FAST_FUNCTIONS or cls is sp.Min or cls is sp.Max:  # the scalar functions of the language
        return _function_builder(node)
    raise NotTemplate  # anything else (a network's output, a Piecewise built elsewhere): evaluated per term


def _keeps_symbol(node, placeholders) -> bool:
    """Every instantiation of ``node`` holds a symbol of the model (so it is never a number): a free symbol that
    is no placeholder, outside any ``if`` (the only node whose instantiation can drop an argument)."""
    stack = [node]
    while stack:
        e = stack.pop()
        if isinstance(e, sp.Symbol):
            if e not in placeholders:
                return True
        elif not isinstance(e, TemplateIf):
            stack.extend(e.args)
    return False


class Program:
    """A template compiled to straight-line code over its placeholder-dependent nodes."""

    def __init__(self, value, state: _State):
        self.slots = 1  # slot 0: the loop index
        self.ops: list[tuple] = []
        self._memo: dict[int, int | None] = {id(state.index): 0}
        self._keep = [value]  # the objects whose ids are memo keys stay alive
        self._shared: dict = {}  # equal dependent subtrees share one slot (x[i] - x[j] written four times)
        self._placeholders = state.symbols
        for sym, base, values, span in state.elements:
            index_slots = [self._visit(v) for v in values]
            slot = self._new_slot()
            self.ops.append((_element_builder(base, span), list(values),
                             [(k, s) for k, s in enumerate(index_slots) if s is not None], slot))
            self._memo[id(sym)] = slot
            self._keep.append(sym)
        for v in state.produced:
            self._visit(v)
        self.root = self._visit(value)
        self.value = value
        del self._memo, self._shared, self._placeholders

    def _new_slot(self) -> int:
        self.slots += 1
        return self.slots - 1

    def _visit(self, node) -> int | None:
        key = id(node)
        if key in self._memo:
            return self._memo[key]
        self._keep.append(node)
        args = node.args if isinstance(node, Basic) else ()
        slot = None
        if args:
            subs = [self._visit(a) for a in args]
            if any(s is not None for s in subs):
                slot = self._shared.get(node)
                if slot is None:
                    builder = _builder_for(node, [s is not None for s in subs], self._placeholders)
                    slot = self._new_slot()
                    self.ops.append((builder, list(args), [(k, s) for k, s in enumerate(subs) if s is not None], slot))
                    self._shared[node] = slot
        elif node in self._placeholders:  # (cannot happen: every placeholder has its slot before the body)
            raise NotTemplate
        self._memo[key] = slot
        return slot

    def run(self, i: int):
        """Term i. Every operation runs, also those of a branch the result does not keep (the evaluator evaluates
        both branches of an ``if``, and an index out of range there is an error too)."""
        if not self.ops:
            return self.value
        vals = [None] * self.slots
        vals[0] = sp.Integer(i)
        for build, args, positions, slot in self.ops:
            a = args.copy()
            for k, s in positions:
                a[k] = vals[s]
            vals[slot] = build(a)
        return self.value if self.root is None else vals[self.root]


def template_terms(base: X.Evaluator, e: A.Generator, lo: int, hi: int) -> list | None:
    """The terms of ``sum(e.body for e.var in lo..hi)`` through a template, or None if the body is not
    template-safe. ``base`` is the evaluator the sum evaluates its terms with (structural mode)."""
    index = sp.Dummy(e.var)
    state = _State(index)
    state.count = max(hi - lo + 1, 1)
    tev = TemplateEvaluator(base.scope.child({e.var: index}), base.nn_inputs, state)
    if base._absent:
        tev._absent = base._absent - {e.var}
    try:
        value = tev.number(e.body)
        if not X._is_scalar(value):
            return None
        program = Program(value, state)
    except (NotTemplate, PdslError):
        return None
    except Exception:  # noqa: BLE001 - whatever went wrong, the evaluator does it term by term (and reports it)
        return None
    terms = []
    for i in range(lo, hi + 1):
        try:
            terms.append(program.run(i))
        except Exception:  # noqa: BLE001 - Fallback, a located error, an arithmetic corner: evaluate this term
            ev = base.with_names({e.var: sp.Integer(i)})
            ev.fast = True
            terms.append(ev.number(e.body))
    return terms


X.use_sum_templates(template_terms)  # the evaluator's long sums use the templates from now on
