"""Declared initial-state distributions for ``simulate --random-init`` (BENCHMARKS A3.x samplers).

A sampler is a list of statements in the expression language of the models (parsed by the
model parser and evaluated through its fixed function table: never ``eval``/``sympify``)::

    q[1..N] = normal(0, 1)                                  # N independent draws
    w[i] = 0.3*normal(0, 1) for i in 1..N                   # the same, element by element
    s = choice(-1, 1)                                       # a random sign
    r3 = [sin(ph)*sin(th), -cos(ph)*sin(th), cos(th)]       # a derived (vector) value
    b[i].x = sum(l[k]*sin(q[k]) for k in 1..i) + 0.2*normal(0, 1) for i in 1..N
    top.a1 = l*r3 + r1                                      # a vector sets .x .y [.z]
    top.a1.v = l*d3 + d1                                    # ... and .vx .vy [.vz]

* ``TARGET = EXPR`` with TARGET a state or a shown column (``b[1].x``, ``b.vx``, ``der(q)``)
  sets that value of each draw; a vector sets the components of a point (``P.x``, ``P.y`` …
  or, for ``P.v``, ``P.vx`` …).
* ``NAME = EXPR`` / ``NAME[a..b] = EXPR`` / ``NAME[i] = EXPR for i in a..b`` define values
  used by later statements; a definition nothing uses is an error (a misspelt state name).
* ``normal(mu, sigma)``, ``uniform(a, b)`` and ``choice(v1, …, vk)`` are fresh independent
  draws at every evaluation (so ``q[1..N] = normal(0, 1)`` is N draws); their arguments may
  depend on parameters and earlier draws (``normal`` and ``uniform`` are mu + sigma·ξ and
  a + (b − a)·υ with standard variates ξ, υ; ``choice`` takes constants).
* Names: the model's parameters (their values, after ``--param``), its ``const``s, earlier
  definitions, loop variables and ``pi``. A trailing ``for i in a..b[, j in c..d]`` repeats
  a statement.

Each draw starts from the model's initial state (with ``--init``), takes the sampled values
(shown columns such as velocities are converted to the state, e.g. momenta) and is then
projected onto the constraints Φ = 0, Φ̇ = 0 (pdsl.sim.initial), as the A3 protocols do.
"""

from __future__ import annotations

import difflib
import itertools
import re
from dataclasses import dataclass
from pathlib import Path

import casadi as ca
import numpy as np
import sympy as sp

from ..backend.functions import NumericSystem
from ..backend.sympy_to_casadi import Converter
from ..diagnostics import PdslError, Span, register_source, source_text
from ..limits import read_text
from ..parse import ast as A
from ..parse.parser import parse_expression
from ..resolve.expressions import ArrayRef, Evaluator, Scope, Unusable, int_value

__all__ = ["Statement", "Sampler", "statements_from_file", "statements_from_options", "build_sampler", "DISTRIBUTIONS"]

DISTRIBUTIONS = ("normal", "uniform", "choice")
_AXES = ("x", "y", "z")
_RANGE_LHS = re.compile(r"^\s*([A-Za-z_]\w*)\s*\[(.*)\]\s*$")
_FOR = re.compile(r"\bfor\b")
_LOOP = re.compile(r"^\s*([A-Za-z_]\w*)\s+in\s+(.*)$")


@dataclass(frozen=True)
class Statement:
    """One sampling statement; ``line``/``col`` (1-based) locate ``text`` in ``path``."""

    text: str
    path: str
    line: int
    col: int


@dataclass(frozen=True)
class Draw:
    symbol: sp.Symbol
    kind: str  # normal (standard normal ξ), uniform (standard uniform υ), choice (one of values)
    values: tuple[float, ...] = ()
    span: Span | None = None


@dataclass(frozen=True)
class Sampler:
    """Targets (state or shown-column names) as expressions of independent random variates."""

    source: str
    draws: tuple[Draw, ...]
    targets: tuple[tuple[str, sp.Expr, Span], ...]

    def sample(self, n: int, seed: int) -> dict[str, np.ndarray]:
        """``n`` draws (seeded): target name -> values."""
        rng = np.random.default_rng(seed)
        cols = []
        for d in self.draws:
            if d.kind == "normal":
                cols.append(rng.standard_normal(n))
            elif d.kind == "uniform":
                cols.append(rng.random(n))
            else:
                cols.append(rng.choice(np.asarray(d.values, dtype=float), n))
        xi = ca.SX.sym("xi", len(self.draws))
        conv = Converter({d.symbol: xi[k] for k, d in enumerate(self.draws)})
        f = ca.Function("sampler", [xi], [ca.vertcat(*[conv(e) for _, e, _ in self.targets])])
        values = np.asarray(f.map(n)(np.array(cols).reshape(len(self.draws), n))).reshape(len(self.targets), n)
        for (name, _, span), row in zip(self.targets, values):
            if not np.all(np.isfinite(row)):
                raise PdslError.at("BadSample", f"`{name}` is not finite for some draws (NaN or inf)", span,
                                   "check divisions and square roots of sampled values")
        return {name: row for (name, _, _), row in zip(self.targets, values)}


# ------------------------------------------------------------------------------------------ sources
def statements_from_file(path: str | Path) -> list[Statement]:
    """One statement per line; ``#`` starts a comment; a line may continue inside brackets."""
    p = Path(path)
    try:
        text = read_text(p, what="sampling file")
    except FileNotFoundError:
        raise PdslError.at("FileNotFound", f"no such file: {p}", hint="--sample-file names a sampling file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise PdslError.at("FileUnreadable", f"cannot read {p}: {exc}") from None
    register_source(str(p), text)
    out: list[Statement] = []
    pending: list[str] = []
    start = (0, 0)
    depth = 0
    for k, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].rstrip()
        if not line.strip() and not pending:
            continue
        if not pending:
            start = (k, len(line) - len(line.lstrip()) + 1)
        pending.append(line if not pending else " " + line.strip())
        depth += sum(line.count(c) for c in "([") - sum(line.count(c) for c in ")]")
        if depth <= 0:
            out.append(Statement(text="".join(pending).strip(), path=str(p), line=start[0], col=start[1]))
            pending, depth = [], 0
    if pending:
        out.append(Statement(text="".join(pending).strip(), path=str(p), line=start[0], col=start[1]))
    return out


def statements_from_options(texts: list[str]) -> list[Statement]:
    """``--sample STATEMENT`` options; each is its own one-line source for diagnostics."""
    out = []
    for k, text in enumerate(texts, start=1):
        origin = f"--sample #{k}"
        register_source(origin, text)
        out.append(Statement(text=text.strip(), path=origin, line=1, col=len(text) - len(text.lstrip()) + 1))
    return out


# ------------------------------------------------------------------------------------------ parsing
def _top_level(text: str):
    """Indices of characters outside brackets."""
    depth = 0
    for i, ch in enumerate(text):
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        elif depth == 0:
            yield i


def _split_statement(st: Statement):
    """(lhs, lhs offset, rhs, rhs offset, [(var, bounds text, offset)]) with offsets into st.text."""
    text = st.text
    eq = next((i for i in _top_level(text) if text[i] == "="), None)
    if eq is None:
        raise PdslError.at("BadSample", "a sampling statement reads TARGET = EXPRESSION", _span(st, 0, len(text)),
                           "for example: q[1..N] = normal(0, 1)   or   b[1].x = l[1]*sin(q[1])")
    top = set(_top_level(text))
    m = next((m for m in _FOR.finditer(text, eq) if m.start() in top), None)
    rhs_end = m.start() if m else len(text)
    loops = []
    if m:
        pos = m.end()
        pieces, last = [], pos
        for i in _top_level(text[pos:]):
            if text[pos + i] == ",":
                pieces.append((last, pos + i))
                last = pos + i + 1
        pieces.append((last, len(text)))
        for a, b in pieces:
            lm = _LOOP.match(text[a:b])
            if not lm or ".." not in lm.group(2):
                raise PdslError.at("BadSample", "a loop reads `for i in a..b`", _span(st, a, b))
            off = a + lm.start(2)
            lo, hi = lm.group(2).split("..", 1)
            loops.append((lm.group(1), lo, off, hi, off + len(lo) + 2))
    return text[:eq], text[eq + 1 : rhs_end], eq + 1, loops


def _span(st: Statement, a: int, b: int) -> Span:
    return Span(st.path, st.line, st.col + a, st.line, st.col + max(b, a + 1))


def _parse(st: Statement, piece: str, offset: int) -> A.Expr:
    """Parse ``piece`` (at ``offset`` in the statement) with spans in the statement's source."""
    original = source_text(st.path)
    padded = "\n" * (st.line - 1) + " " * (st.col - 1 + offset) + piece
    try:
        return parse_expression(padded, st.path)
    finally:
        if original is not None:
            register_source(st.path, original)


def _names_in(node) -> set[str]:
    """Every Name id in an AST (generator variables included: harmless)."""
    out, stack = set(), [node]
    while stack:
        n = stack.pop()
        if isinstance(n, A.Name):
            out.add(n.id)
        if isinstance(n, A.Generator):
            out.add(n.var)
        if isinstance(n, (list, tuple)):
            stack.extend(n)
        elif hasattr(n, "__dataclass_fields__"):
            stack.extend(getattr(n, f) for f in n.__dataclass_fields__ if f != "span")
    return out


def _index_names(node) -> set[str]:
    """Names inside the indices of a left side (``b[i + 1].x`` -> {i}); the rest are targets."""
    if isinstance(node, A.Index):
        return _index_names(node.base) | set().union(*(_names_in(i) for i in node.indices))
    if isinstance(node, A.Attr):
        return _index_names(node.base)
    if isinstance(node, A.Call):
        return set().union(*(_index_names(a) for a in node.args)) if node.args else set()
    return set()


# ------------------------------------------------------------------------------------------ evaluation
class _SamplingEvaluator(Evaluator):
    """The model evaluator plus the distributions; every call is a fresh draw."""

    def __init__(self, scope: Scope, draws: list[Draw]):
        super().__init__(scope)
        self.draws = draws

    def with_names(self, extra):
        return _SamplingEvaluator(self.scope.child(extra), self.draws)

    def _suggest(self, name: str) -> str:
        close = difflib.get_close_matches(name, list(self.scope.names) + ["pi"], n=1)
        if close:
            return f"did you mean `{close[0]}`?"
        return ("a sampling statement may use the model's parameters and consts, values defined by earlier "
                "statements, loop variables and pi (states are set on the left side only)")

    def _Call(self, e: A.Call):
        if isinstance(e.func, A.Name) and e.func.id in DISTRIBUTIONS and e.func.id not in self.scope.names:
            return self._distribution(e.func.id, e)
        return super()._Call(e)

    def _new(self, kind: str, span: Span, values=()) -> sp.Symbol:
        sym = sp.Symbol(f"_draw{len(self.draws)}", real=True)
        self.draws.append(Draw(symbol=sym, kind=kind, values=tuple(values), span=span))
        return sym

    def _distribution(self, name: str, e: A.Call):
        if e.kwargs:
            raise PdslError.at("UnknownArgument", f"`{name}` takes no keyword arguments", e.kwargs[0].span)
        if name == "choice":
            if not e.args:
                raise PdslError.at("WrongArity", "`choice` needs at least one value", e.span, "choice(-1, 1)")
            values = []
            for a in e.args:
                v = self.scalar(a, "a value of choice(...)")
                if v.free_symbols:
                    raise PdslError.at("NotConstant", "the values of `choice` must be constants", a.span)
                values.append(float(v))
            return self._new("choice", e.span, values)
        if len(e.args) != 2:
            raise PdslError.at("WrongArity", f"`{name}` takes 2 arguments, got {len(e.args)}", e.span,
                               "normal(mean, standard deviation), uniform(low, high)")
        a, b = (self.scalar(x, f"an argument of {name}(...)") for x in e.args)
        if name == "normal":
            if not b.free_symbols and float(b) < 0:
                raise PdslError.at("BadSample", f"normal(mean, sigma) with sigma = {float(b):g} < 0", e.args[1].span)
            return a + b * self._new("normal", e.span)
        if not (a.free_symbols or b.free_symbols) and float(b) < float(a):
            raise PdslError.at("BadSample", f"uniform(low, high) with high = {float(b):g} < low = {float(a):g}", e.span)
        return a + (b - a) * self._new("uniform", e.span)


def _param_names(num: NumericSystem, p: np.ndarray) -> dict[str, object]:
    """Parameters by value; ``l[1]``, ``l[2]`` … also as the array ``l``."""
    names: dict[str, object] = {}
    arrays: dict[str, dict[int, sp.Expr]] = {}
    for name, value in zip(num.p_names, p):
        if "." in name:  # network weights, Baumgarte gains
            continue
        m = re.fullmatch(r"(\w+)\[(\d+)\]", name)
        if m:
            arrays.setdefault(m.group(1), {})[int(m.group(2))] = sp.Float(float(value))
        else:
            names[name] = sp.Float(float(value))
    for name, items in arrays.items():
        lo, hi = min(items), max(items)
        if sorted(items) == list(range(lo, hi + 1)):
            names[name] = ArrayRef(name, lo, tuple(items[i] for i in range(lo, hi + 1)))
    return names


def build_sampler(statements: list[Statement], num: NumericSystem, p: np.ndarray, consts=None, source: str = "") -> Sampler:
    """Evaluate sampling statements against a compiled model (parameter vector ``p``)."""
    if not statements:
        raise PdslError.at("BadSample", f"{source or 'the sampler'} has no statements",
                           hint="one statement per line: q = normal(0, 1), b.x = l*sin(q), ...")
    states = set(num.x_names) | set(num.report_names)
    draws: list[Draw] = []
    names: dict[str, object] = {k: sp.Integer(v) for k, v in dict(consts or {}).items()}
    names.update(_param_names(num, p))
    reserved = set(names)
    known = {s: Unusable("NotAllowedHere", f"`{s}` is being sampled: it cannot be used on the right side",
                         "define the value first (e.g. q = normal(0, 1)) and use that name") for s in states}
    defined: dict[str, tuple[Span, int]] = {}  # definition -> (span, index of its statement)
    used: set[str] = set()
    targets: dict[str, tuple[sp.Expr, Span]] = {}
    for index, st in enumerate(statements):
        lhs, rhs, rhs_off, loops = _split_statement(st)
        rhs_ast = _parse(st, rhs, rhs_off)
        used |= _names_in(rhs_ast)
        bounds = []
        ev0 = _SamplingEvaluator(Scope(names, known=known), draws)
        for var, lo, lo_off, hi, hi_off in loops:
            if var in names or var in states:
                raise PdslError.at("DuplicateDefinition", f"the loop variable `{var}` is already a name here",
                                   _span(st, lo_off - 1, lo_off), "choose another index name, such as `i` or `k`")
            lo_ast, hi_ast = _parse(st, lo, lo_off), _parse(st, hi, hi_off)
            used |= _names_in(lo_ast) | _names_in(hi_ast)
            a = int_value(ev0.eval(lo_ast), lo_ast.span, "a loop bound")
            b = int_value(ev0.eval(hi_ast), hi_ast.span, "a loop bound")
            if b - a > 100_000:
                raise PdslError.at("BadSample", f"the range {a}..{b} is too long", lo_ast.span)
            bounds.append((var, range(a, b + 1)))
        lhs_span = _span(st, 0, len(lhs.rstrip()))
        array = _RANGE_LHS.match(lhs)
        if array and ".." in array.group(2):  # NAME[a..b] = EXPR: b − a + 1 evaluations
            if loops:
                raise PdslError.at("BadSample", "`NAME[a..b] = ...` cannot have a `for` clause", lhs_span,
                                   "write NAME[i] = ... for i in a..b")
            name = array.group(1)
            lo, hi = array.group(2).split("..", 1)
            inner = lhs.index("[") + 1
            lo_ast, hi_ast = _parse(st, lo, inner), _parse(st, hi, inner + len(lo) + 2)
            used |= _names_in(lo_ast) | _names_in(hi_ast)
            a, b = (int_value(ev0.eval(x), x.span, "an array bound") for x in (lo_ast, hi_ast))
            if b < a:
                raise PdslError.at("BadSample", f"the range {a}..{b} is empty", lhs_span)
            _check_new(name, names, reserved, states, defined, lhs_span)
            items = tuple(ev0.number(rhs_ast) for _ in range(a, b + 1))
            names[name] = ArrayRef(name, a, items)
            defined[name] = (lhs_span, index)
            continue
        lhs_ast = _parse(st, lhs, 0)
        used |= _index_names(lhs_ast)
        elements: dict[int, object] = {}
        element_name = None
        for combo in itertools.product(*(r for _, r in bounds)) if bounds else [()]:
            local = {var: sp.Integer(v) for (var, _), v in zip(bounds, combo)}
            ev = _SamplingEvaluator(Scope({**names, **local}, known=known), draws)
            target = _canonical(lhs_ast, ev, st)
            components = _components(target, states, num)
            if target in states or components:
                value = ev.number(rhs_ast)
                assignments = [(target, value)] if target in states else _split_vector(value, components, target, lhs_ast.span)
                for name, v in assignments:
                    if isinstance(v, sp.MatrixBase):
                        raise PdslError.at("TypeMismatch", f"`{name}` is a scalar, but the right side is an array",
                                           rhs_ast.span)
                    if name in targets:
                        raise PdslError.at("DuplicateDefinition", f"`{name}` is sampled twice (first at "
                                           f"{targets[name][1]})", lhs_ast.span)
                    targets[name] = (v, lhs_ast.span)
                continue
            if isinstance(lhs_ast, A.Name) and not bounds:
                _check_new(lhs_ast.id, names, reserved, states, defined, lhs_ast.span, num)
                names[lhs_ast.id] = ev.number(rhs_ast)
                defined[lhs_ast.id] = (lhs_ast.span, index)
            elif isinstance(lhs_ast, A.Index) and isinstance(lhs_ast.base, A.Name) and bounds:
                if element_name is None:
                    element_name = lhs_ast.base.id
                    _check_new(element_name, names, reserved, states, defined, lhs_ast.span, num)
                k = int_value(ev.eval(lhs_ast.indices[0]), lhs_ast.indices[0].span, "an index")
                if k in elements or len(lhs_ast.indices) != 1:
                    raise PdslError.at("DuplicateDefinition", f"`{element_name}[{k}]` is defined twice", lhs_ast.span)
                elements[k] = ev.number(rhs_ast)
            else:
                raise _not_a_target(target, lhs_ast.span, states, num)
        if element_name is not None:
            lo, hi = min(elements), max(elements)
            if sorted(elements) != list(range(lo, hi + 1)):
                raise PdslError.at("BadSample", f"`{element_name}` gets the indices {sorted(elements)}: not a range",
                                   lhs_ast.span)
            names[element_name] = ArrayRef(element_name, lo, tuple(elements[i] for i in range(lo, hi + 1)))
            defined[element_name] = (lhs_ast.span, index)
    for name, (span, _) in defined.items():
        if name not in used:
            raise PdslError.at("BadSample", f"`{name}` is defined but never used", span,
                               _not_a_target_hint(name, states) or "use it in a later statement, or remove it")
    if not targets:
        raise PdslError.at("BadSample", f"{source or 'the sampler'} sets no state",
                           hint="states and shown columns: " + ", ".join(sorted(states)[:12]))
    return Sampler(source=source, draws=tuple(draws), targets=tuple((n, e, s) for n, (e, s) in targets.items()))


def _check_new(name, names, reserved, states, defined, span, num=None) -> None:
    if name in DISTRIBUTIONS:
        raise PdslError.at("DuplicateDefinition", f"`{name}` is a distribution; choose another name", span)
    if name in reserved:
        raise PdslError.at("DuplicateDefinition", f"`{name}` is a parameter or const of the model", span,
                           "choose another name for the sampled value")
    if name in defined:
        raise PdslError.at("DuplicateDefinition", f"`{name}` is defined twice (first at {defined[name][0]})", span)


def _canonical(e: A.Expr, ev: Evaluator, st: Statement) -> str:
    """``b[i].x`` -> ``b[2].x``, ``der(q)``, ``top.a1.v`` (indices evaluated)."""
    if isinstance(e, A.Name):
        return e.id
    if isinstance(e, A.Index) and len(e.indices) == 1:
        return f"{_canonical(e.base, ev, st)}[{int_value(ev.eval(e.indices[0]), e.indices[0].span, 'an index')}]"
    if isinstance(e, A.Attr):
        return f"{_canonical(e.base, ev, st)}.{e.name}"
    if isinstance(e, A.Call) and isinstance(e.func, A.Name) and e.func.id == "der" and len(e.args) == 1 and not e.kwargs:
        return f"der({_canonical(e.args[0], ev, st)})"
    raise PdslError.at("BadSample", "the left side must name a state (b[1].x, b.vx, der(q)) or a value to define "
                       "(q, q[1..N], q[i] ... for i in 1..N)", e.span)


def _components(target: str, states: set[str], num: NumericSystem) -> list[str]:
    """State names a vector assigned to ``target`` sets: P.x, P.y, … or, for P.v / P.p, P.vx …"""
    head, _, last = target.rpartition(".")
    if head and last in ("v", "p"):
        names = [f"{target}{a}" for a in _AXES]
    else:
        names = [f"{target}.{a}" for a in _AXES]
    present = [n for n in names if n in states]
    return present if present and present == names[: len(present)] else []


def _split_vector(value, components, target, span):
    if not (isinstance(value, sp.MatrixBase) and value.shape == (len(components), 1)):
        raise PdslError.at("TypeMismatch", f"`{target}` is a point: the right side must be a vector of length "
                           f"{len(components)}", span, f"it sets {', '.join(components)}")
    return list(zip(components, list(value)))


def _not_a_target_hint(name: str, states: set[str]) -> str | None:
    close = difflib.get_close_matches(name, sorted(states), n=1, cutoff=0.75)
    return f"did you mean the state `{close[0]}`?" if close else None


def _not_a_target(target: str, span: Span, states: set[str], num: NumericSystem) -> PdslError:
    hint = _not_a_target_hint(target, states) or ("states and shown columns: " + ", ".join(sorted(states)[:12])
                                                  + (" …" if len(states) > 12 else ""))
    return PdslError.at("UnknownName", f"`{target}` is not a state or shown column of {num.system.name}", span, hint)
