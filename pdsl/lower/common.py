"""Checks and helpers shared by every lowering."""

from __future__ import annotations

import sympy as sp

from .. import symbols as S
from ..diagnostics import Collector, PdslError, Span
from ..resolve.model import Model
from .ir import Constraint, State, SymbolicSystem


def rate_symbol(name: str) -> sp.Symbol:
    """The unknown ẋ of state ``name`` (its spelling cannot clash with a model name)."""
    return S.sym(f"dt({name})")


def rate_name(rate: sp.Symbol) -> str:
    """``dt(x)`` -> ``der(x)``: how a rate is shown to users."""
    return "der(" + rate.name[3:-1] + ")"


def make_state(name: str, symbol: sp.Symbol, start: float | None, span: Span) -> State:
    return State(name=name, symbol=symbol, rate=rate_symbol(name), start=start, span=span)


def check_no_unsupported(model: Model, allowed: set[str], formalism: str) -> None:
    """Report statements that this formalism does not use (they would be silently ignored)."""
    diags = Collector()
    groups = {
        "equations": ("a plain equation", [e.span for e in model.equations]),
        "constraints": ("a `constraint`", [c.span for c in model.constraints]),
        "gravity": ("`gravity`", [g.span for g in model.gravity]),
        "potentials": ("`potential`", [p.span for p in model.potentials]),
        "forces": ("`force ... on` a point", [f.span for f in model.forces]),
        "generalized_forces": ("`force ... on` a coordinate", [f.span for f in model.generalized_forces]),
        "connectors": ("a connector", [c.span for c in model.connectors]),
        "lagrangian": ("`lagrangian`", [model.lagrangian.span] if model.lagrangian else []),
        "hamiltonian": ("`hamiltonian`", [model.hamiltonian.span] if model.hamiltonian else []),
    }
    for key, (what, spans) in groups.items():
        if key in allowed:
            continue
        for span in spans:
            diags.error(
                "MixedFormalism",
                f"{what} has no meaning in a {formalism} model",
                span,
                _MIX_HINTS.get((key, formalism)),
            )
    diags.raise_if_any()


_MIX_HINTS = {
    ("equations", "lagrangian"): "a model is written either as equations or with a lagrangian; use `force ... on q` for non-conservative forces",
    ("equations", "hamiltonian"): "a model is written either as equations or with a hamiltonian",
    ("constraints", "plain"): "in a plain model write `0 = ...` for an algebraic equation",
    ("lagrangian", "plain"): "a `lagrangian` needs `coord` declarations",
    ("hamiltonian", "plain"): "a `hamiltonian` needs `coord` and `momentum` declarations",
}


def check_finite(expr: sp.Expr, span: Span, what: str) -> None:
    if not scan(expr)[1]:
        raise PdslError.at("NotANumber", f"{what} is not finite (a division by zero?)", span)


_NOT_FINITE = (sp.S.ComplexInfinity, sp.S.NaN, sp.S.Infinity, sp.S.NegativeInfinity)
_OWN_FREE_SYMBOLS: dict[type, bool] = {}  # per class: it defines its own free_symbols (Derivative, Lambda, Piecewise…)


def _own_free_symbols(cls: type) -> bool:
    own = _OWN_FREE_SYMBOLS.get(cls)
    if own is None:
        owner = next(c for c in cls.__mro__ if "free_symbols" in c.__dict__)
        own = _OWN_FREE_SYMBOLS[cls] = owner is not sp.Basic
    return own


def scan(*exprs) -> tuple[set, bool]:
    """(free symbols, finite) of one or more expressions, each object visited once.

    Equal to ``(expr.free_symbols, not expr.has(zoo, nan, oo, -oo))``, but sympy's ``free_symbols`` walks every
    occurrence of a shared subtree and builds a set per node, and ``has`` compares every node with the patterns:
    on the structural sums of large models (Cucker–Smale N = 100: 9,900 pair terms, their repeated
    subexpressions shared) both cost seconds. Classes with their own ``free_symbols`` (bound variables:
    ``Derivative``, ``Lambda``, ``Integral``…) answer for themselves; their arguments are still searched for
    infinities."""
    free: set = set()
    finite = True
    seen: set[int] = set()
    seen_add, stack = seen.add, list(exprs)
    pop, push = stack.pop, stack.extend
    own_free = _OWN_FREE_SYMBOLS
    Symbol = sp.Symbol
    while stack:
        e = pop()
        k = id(e)
        if k in seen:
            continue
        seen_add(k)
        try:
            args = e._args
        except AttributeError:  # (a matrix: its own free_symbols, below)
            args = e.args
        if args:
            cls = e.__class__
            own = own_free.get(cls)
            if own is None:
                own = _own_free_symbols(cls)
            if own:
                free |= e.free_symbols
                if finite and any(_infinite(a) for a in sp.preorder_traversal(e)):
                    finite = False
            else:
                push(args)
        elif isinstance(e, Symbol):
            free.add(e)
        elif finite and _infinite(e):
            finite = False
    return free, finite


def _infinite(e) -> bool:
    return any(e is z for z in _NOT_FINITE)  # singletons (zoo is no Number)


def resolve_input_laws(model: Model) -> None:
    """Feedback laws may use each other, but not in a cycle."""
    laws = {u.symbol: u for u in model.inputs if u.law is not None}
    state: dict = {}

    def visit(sym, chain):
        if state.get(sym) == "done":
            return
        if state.get(sym) == "active":
            u = laws[sym]
            names = " -> ".join(c.name for c in chain + [sym])
            raise PdslError.at("CyclicDefinition", f"input laws form a cycle: {names}", u.span)
        state[sym] = "active"
        for dep in laws[sym].law.free_symbols & set(laws):
            visit(dep, chain + [sym])
        state[sym] = "done"

    for sym in laws:
        visit(sym, [])


def position_rates(system: SymbolicSystem, positions) -> dict[sp.Symbol, sp.Expr]:
    """ẋ as a function of the state, for states whose row reads ``rate(x) (+ multiplier terms) = f(x)``.

    With the multipliers set to zero these rows are explicit (kinematics
    ``der(q) = v`` or ``ẋ = ∂H/∂p``); on the constraint manifold the multiplier
    terms vanish, so this is the velocity that defines Φ̇.
    """
    zero = {m: 0 for m in system.multipliers}
    rates = {s.rate: s for s in system.states}
    out = {}
    for eq in system.differential:
        lhs = eq.lhs.xreplace(zero) if zero else eq.lhs
        if lhs in rates and rates[lhs].symbol in positions and not (eq.rhs.free_symbols & set(rates)):
            out[rates[lhs].symbol] = eq.rhs
    return out


def outputs_in_state(system: SymbolicSystem, positions) -> tuple:
    """The outputs with der(x) of a position replaced by ẋ in the state (v, or ∂H/∂p, or M⁻¹p), read off the
    system's explicit rows (:func:`position_rates`): outputs are functions of (t, x, p, u)."""
    from dataclasses import replace

    if not any(S.is_der(x) for o in system.outputs for x in S.as_expr(o.expr).free_symbols):
        return system.outputs
    rates = {S.der(x): e for x, e in position_rates(system, positions).items()}
    return tuple(replace(o, expr=S.as_expr(o.expr).xreplace(rates)) for o in system.outputs)


def partial_derivatives(expr: sp.Expr, symbols) -> dict[sp.Symbol, sp.Expr]:
    """∂expr/∂s for the given symbols that occur in expr (non-zero ones only).

    A polynomial in those symbols (every Cartesian constraint row: distances, joints, hinge
    axes) goes through ``sp.Poly``, several times faster than ``sp.diff`` on sums of products
    with float coefficients; anything else through ``sp.diff``.
    """
    gens = [s for s in symbols if s in expr.free_symbols]
    if not gens:
        return {}
    try:
        poly = sp.Poly(expr, *gens)
    except sp.PolynomialError:
        poly = None
    out = {}
    for g in gens:
        d = poly.diff(g).as_expr() if poly is not None else sp.diff(expr, g)
        if d != 0:
            out[g] = d
    return out


def derived_invariants(system: SymbolicSystem, positions, velocity_constraints=()) -> tuple[Constraint, ...]:
    """Φ and Φ̇ = DΦ·ẋ(x) for each holonomic constraint, plus velocity constraints as given."""
    vel = position_rates(system, positions)
    out = []
    for c in system.constraints:
        out.append(c)
        grad = partial_derivatives(c.residual, list(vel))
        dphi = sp.Add(*(g * vel[x] for x, g in grad.items()))
        dphi += sp.diff(c.residual, S.TIME)
        if dphi != 0:
            out.append(Constraint(residual=dphi, origin=c.origin, label=f"{c.label} (velocity level)"))
    out.extend(velocity_constraints)
    return tuple(out)


def velocity_report(system: SymbolicSystem, positions) -> tuple[tuple[str, sp.Expr], ...]:
    """Cartesian Hamiltonian states shown as positions and velocities ``b.vx = (M⁻¹p)_i``."""
    vel = position_rates(system, positions)
    cols = []
    for s in system.states:
        if s.symbol in vel:
            cols.append((s.name, s.symbol))
    for s in system.states:
        if s.symbol in vel:
            head, _, axis = s.name.rpartition(".")
            cols.append((f"{head}.v{axis}", vel[s.symbol]))
    return tuple(cols)


# ---------------------------------------------------------------- a lagrangian's symbols (generalized, hamel)
def check_lagrangian_symbols(model: Model, L, span) -> None:
    """A lagrangian reads time, parameters, inputs, the coordinates and their rates: nothing else."""
    allowed = {S.TIME} | {p.symbol for p in model.params} | {u.symbol for u in model.inputs}
    for c in model.variables_of("coord"):
        allowed |= {c.symbol, S.der(c.symbol)}
    check_symbols(L, allowed, span, "the lagrangian")


def check_momenta_free_of_inputs(model: Model, p, span) -> None:
    """d/dt ∂L/∂q̇ would need the time derivative of an input that ∂L/∂q̇ depends on: refuse it."""
    inputs = {u.symbol: u for u in model.inputs}
    used = sorted({s for pi in p for s in pi.free_symbols if s in inputs}, key=lambda s: s.name)
    if used:
        names = ", ".join(f"`{inputs[s].name}`" for s in used)
        raise PdslError.at(
            "NotYetSupported",
            f"the generalized momenta ∂L/∂der(q) depend on the input{'s' if len(used) > 1 else ''} {names}: "
            "Euler–Lagrange would need the input's time derivative, which pdsl does not have",
            span,
            "apply an input as a generalized force (`force F on q`) or through the potential; "
            "a known function of t and the coordinates can be written into the lagrangian directly",
        )


def check_symbols(expr, allowed, span, what) -> None:
    """``NotAllowedHere`` at ``span`` for the symbols of ``expr`` outside ``allowed``."""
    bad = sorted((s for s in expr.free_symbols if s not in allowed), key=lambda s: s.name)
    if bad:
        raise PdslError.at(
            "NotAllowedHere", f"{what} uses {', '.join(f'`{b}`' for b in bad)}, which {'is' if len(bad) == 1 else 'are'} not allowed there", span
        )
