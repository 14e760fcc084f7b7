"""Structural passes shared by every formalism: one place for each.

* alias elimination, causal sorting and the linear solve of what is left
  (:func:`eliminate_aliases`, :func:`sort_causal`, :func:`solve_linear`, with :func:`substitute`,
  :func:`closure`, :func:`close`) — the elimination p-H networks use for their junction equations
  and that any system of algebraic relations between unknowns can use;
* :func:`tidy` and :func:`zero_or_residual` — equivalence-preserving tidying and the zero test of
  identities (power balances, hidden constraints);
* :func:`power_balance` — dE/dt = Σ supplied − Σ dissipated, verified symbolically on any
  :class:`~pdsl.lower.ir.SymbolicSystem` whose formalism contributed its power terms.

Pure sympy: no numeric backend is imported here.
"""

from __future__ import annotations

import heapq
from dataclasses import replace

import sympy as sp

from .. import symbols as S
from ..diagnostics import PdslError
from ..records import record
from .calculus import _CHAIN_RULE, derivative  # noqa: F401 (_CHAIN_RULE: tests read it here too)
from .common import scan
from .ir import Constraint, Equation, SymbolicSystem

__all__ = [
    "tidy", "is_rational", "close", "eliminate_aliases", "sort_causal", "substitute", "closure", "solve_linear",
    "zero_or_residual", "on_manifold", "PowerBalance", "power_balance", "check_structure",
]


_NO_SIMPLIFY = (sp.Abs, sp.sign, sp.Piecewise, sp.Heaviside, sp.Min, sp.Max)
_TIDY_OPS_LIMIT = 200


def tidy(expr):
    """A light, always-equivalent tidy-up: sympy's simplify on small expressions free of Abs/sign/Piecewise, kept only
    when it is not longer and adds no Piecewise; an expansion otherwise (when it is not longer)."""
    if not isinstance(expr, sp.Expr) or expr.is_Atom:
        return expr
    ops = sp.count_ops(expr)
    if ops > _TIDY_OPS_LIMIT:
        return expr
    best, best_ops = expr, ops
    candidates = [expand(expr)]
    if _huge_numbers(expr):  # factorisation of 300-digit coefficients runs primality tests for minutes
        return min(candidates + [expr], key=sp.count_ops)
    # a rational function of the symbols (a linear network, polynomial energies): its expansion is already the
    # tidy form, and sympy's simplify would spend 0.1–1 s per expression to find it
    if not expr.has(*_NO_SIMPLIFY) and not is_rational(expr):
        candidates.append(sp.simplify(expr))
    elif _nested_fraction(expr):  # e.g. after an index reduction: q/(C1*R) − q/(C1*R + C1²R/C2) -> −q/(R*(C1 + C2))
        candidates.append(sp.factor(sp.cancel(expr)))
        candidates.append(sp.expand(sp.factor_terms(sp.cancel(expr))))
    for c in candidates:
        if c.has(sp.Piecewise) and not expr.has(sp.Piecewise):
            continue
        c_ops = sp.count_ops(c)
        if c_ops <= best_ops:
            best, best_ops = c, c_ops
    return best


_HUGE = 10**30


def _huge_numbers(expr) -> bool:
    """A rational number with more than 30 digits (a literal such as 1e308 is kept exact)."""
    return any(abs(r.p) > _HUGE or r.q > _HUGE for r in expr.atoms(sp.Rational))


def _nested_fraction(expr) -> bool:
    """A denominator that is itself a sum (a rational function that expansion does not tidy)."""
    return any(p.exp.is_negative and p.base.is_Add for p in expr.atoms(sp.Pow))


def is_rational(expr) -> bool:
    """Only symbols and numbers combined by +, * and integer powers."""
    stack = [expr]
    while stack:
        e = stack.pop()
        if e.is_Symbol or e.is_Number:
            continue
        if e.is_Add or e.is_Mul:
            stack.extend(e.args)
        elif e.is_Pow and e.exp.is_Integer:
            stack.append(e.base)
        else:
            return False
    return True


def close(expr, subs):
    for _ in range(50):
        new = expr.xreplace(subs)
        if new == expr:
            return expr
        expr = new
    return expr


def eliminate_aliases(eqs, unknowns, subs):
    """Equations a − b = 0 or a + b = 0 between two unknowns: substitute a := ±b."""

    def pick(r):
        if len(r.free_symbols) != 2 or not r.free_symbols <= unknowns:
            return None
        a, b = sorted(r.free_symbols, key=lambda s: s.name)
        ca, cb = derivative(r, a), derivative(r, b)
        if not (ca.is_number and cb.is_number and abs(ca) == abs(cb) and sp.expand(r - ca * a - cb * b) == 0):
            return None
        return a, -cb / ca * b

    return substitute(eqs, subs, pick)


def sort_causal(eqs, unknowns, subs):
    """Repeatedly solve an equation that has exactly one unknown, in which it appears linearly."""

    def pick(r):
        free = r.free_symbols & unknowns
        if len(free) != 1:
            return None
        (v,) = free
        c = derivative(r, v)
        if v in c.free_symbols or c == 0:
            return None
        value = -(r - c * v).xreplace({v: 0}) / c
        return v, (expand(value) if _fewer_ops_than(value, 60) else value)

    return substitute(eqs, subs, pick)


def expand(expr):
    """``sp.expand(expr)``, skipped where it cannot change anything: sums of products of symbols and numbers, and
    powers of symbols with numeric exponents (no product over a sum, no power of a sum or product, no function)."""
    stack = [expr]
    while stack:
        e = stack.pop()
        if e.is_Symbol or e.is_Number:
            continue
        if e.is_Add:
            stack.extend(e.args)
        elif e.is_Mul:
            if any(a.is_Add for a in e.args):
                return sp.expand(expr)
            stack.extend(e.args)
        elif e.is_Pow and e.exp.is_Number and e.base.is_Symbol:
            continue
        else:
            return sp.expand(expr)
    return expr


def _fewer_ops_than(expr, limit: int) -> bool:
    """``sp.count_ops(expr) < limit``, answered without counting for small trees: a node adds at most 3 operations
    (its arguments − 1 ADD/MUL, a DIV, a NEG), so a tree of fewer than limit/3 nodes has fewer than limit."""
    nodes = 0
    stack = [expr]
    while stack:
        e = stack.pop()
        nodes += 1
        if 3 * nodes >= limit:
            return sp.count_ops(expr) < limit
        stack.extend(e.args)
    return True


def substitute(eqs, subs, pick):
    """Apply ``pick`` (residual -> (unknown, value) or None) to the equations until it applies to none, always to the
    first equation (in statement order) it applies to. A solved unknown is substituted into the equations that contain
    it, and only those (an index of occurrences keeps a ladder of n sections linear in n, not quadratic); the values in
    ``subs`` are left in terms of unknowns solved later — :func:`closure` resolves them."""
    eqs = list(eqs)
    subs = dict(subs)
    alive = [True] * len(eqs)
    occurs: dict = {}
    for k, (r, _, _) in enumerate(eqs):
        for x in r.free_symbols:
            occurs.setdefault(x, set()).add(k)
    heap = list(range(len(eqs)))
    queued = set(heap)
    while heap:
        k = heapq.heappop(heap)
        queued.discard(k)
        if not alive[k]:
            continue
        hit = pick(eqs[k][0])
        if hit is None:
            continue
        v, value = hit
        alive[k] = False
        subs[v] = value
        for j in sorted(occurs.pop(v, ())):
            if not alive[j]:
                continue
            r, span, label = eqs[j]
            eqs[j] = (r.xreplace({v: value}), span, label)
            for x in value.free_symbols:
                occurs.setdefault(x, set()).add(j)
            if j not in queued:
                heapq.heappush(heap, j)
                queued.add(j)
    return [eq for k, eq in enumerate(eqs) if alive[k]], subs


def closure(subs: dict) -> dict:
    """``subs`` with every value written in terms of unsolved symbols only (the values form a DAG: each refers only
    to unknowns solved after it). Iterative, so a long chain of substitutions does not hit the recursion limit."""
    out: dict = {}
    for root in subs:
        stack = [(root, False)]
        while stack:
            v, ready = stack.pop()
            if v in out:
                continue
            value = subs[v]
            deps = [d for d in value.free_symbols if d in subs and d not in out]
            if deps and not ready:
                stack.append((v, True))
                stack.extend((d, False) for d in deps)
                continue
            out[v] = value.xreplace({d: out[d] for d in value.free_symbols if d in out})
    return out


def solve_linear(eqs, remaining):
    """Solve the equations left after sorting when they are linear and square in the remaining unknowns."""
    if len(eqs) != len(remaining):
        return None
    exprs = [r for r, _, _ in eqs]
    try:
        A, b = sp.linear_eq_to_matrix(exprs, remaining)
    except (sp.PolynomialError, ValueError):
        return None
    if A.free_symbols & set(remaining):
        return None
    det = A.det(method="berkowitz")
    if sp.simplify(det) == 0:
        return None
    sol = A.LUsolve(b)
    return {v: tidy(s) for v, s in zip(remaining, sol)}


@record
class HeatBalance:
    """The first law of a system's thermal part (LANGUAGE.md "Port domains"): dU/dt = Σ Q̇ in, in W, with U the
    internal energy of its heat stores; temperature × heat flow is never counted as a power."""

    U: sp.Expr
    dUdt: sp.Expr
    terms: tuple[tuple[str, str, sp.Expr], ...]  # (role, name, heat flow into the thermal part)
    residual: sp.Expr  # dU/dt − Σ Q̇ in: zero when no heat is made or lost inside the thermal part


@record
class ComponentBalance:
    """Σ P_in = Σ Q̇_out + dE/dt of a component with power ports and a thermal port (a heating resistor)."""

    name: str  # the instance ("" for the model itself)
    power_in: sp.Expr
    heat_out: sp.Expr
    dEdt: sp.Expr | None  # None: the component holds states of plain equations, whose energy is not declared
    residual: sp.Expr | None  # P_in − Q̇_out − dE/dt: zero when the power it takes in leaves as heat or is stored


@record
class PowerBalance:
    """dE/dt = supplied − dissipated, per term (C1), with its symbolic verification; for a model with thermal
    ports also the heat balance of its thermal part and the first law of each component that turns power into heat."""

    dHdt: sp.Expr
    terms: tuple[tuple[str, str, sp.Expr], ...]  # (role, name, power: + supplied / − dissipated)
    residual: sp.Expr  # dE/dt − (Σ supplied − Σ dissipated): zero when the system conserves power
    # constraints g(x) = 0 (an index-reduced network): the balance is checked on them (a store's port effort is the
    # junction's, equal to its ∂H/∂x only where g = 0); empty when it holds identically
    modulo: tuple[sp.Expr, ...] = ()
    heat: HeatBalance | None = None
    components: tuple[ComponentBalance, ...] = ()

    @property
    def holds(self) -> bool:
        """Every balance vanishes identically (power, heat and each component's first law)."""
        return (self.residual == 0 and (self.heat is None or self.heat.residual == 0)
                and all(c.residual == 0 for c in self.components))


def symbols_in(exprs, wanted: set) -> set:
    """The symbols of ``wanted`` that occur free in ``exprs`` (one walk, shared subexpressions once: see
    :func:`pdsl.lower.common.scan`)."""
    return scan(*exprs)[0] & wanted


MAX_INDEX = 3  # a constraint between states is differentiated at most this many times (index ≤ 3 + 1)


def reduce_index(system: SymbolicSystem) -> SymbolicSystem:
    """Index reduction for every lowered system (LANGUAGE.md §7: ``0 = g(x)`` between states).

    An algebraic row with no algebraic unknown is a constraint g(x, t) = 0 between states. It is differentiated —
    ġ = Σ ∂g/∂x·ẋ + ∂g/∂t, with the explicit rows ``der(x) = f`` substituted — until it reaches a rate that the
    explicit rows do not fix or an unknown; that last derivative becomes a row of the linear-implicit system, and
    g and its lower derivatives become invariants (monitored, and ``simulate`` projects start values onto them).
    An algebraic variable that then appears only in differential rows, linearly, is a multiplier of that system
    (the pendulum's λ). A constraint that needs the derivative of an input is a located ``DependentStorage``.
    Systems without such rows are returned unchanged."""
    alg = {a.symbol for a in system.algebraics}
    state_only = [e for e in system.algebraic if not symbols_in((e.lhs, e.rhs), alg)]
    if not state_only:
        return system
    from ..diagnostics import Collector

    rates = {s.rate for s in system.states}
    rate_of = {s.symbol: s.rate for s in system.states}
    unknown = rates | set(system.multipliers) | alg
    explicit = {e.lhs: e.rhs for e in system.differential
                if e.lhs in rates and not symbols_in((e.rhs,), unknown)}
    exogenous = {u.symbol for u in system.exogenous_inputs}
    diags = Collector()
    rows, invariants = [], []
    for e in state_only:
        g = zero_or_residual(e.lhs - e.rhs)
        for times in range(1, MAX_INDEX + 1):
            if g == 0:
                break
            if g.free_symbols & exogenous:
                names = ", ".join(sorted(f"`{u}`" for u in g.free_symbols & exogenous))
                diags.error("DependentStorage", f"the constraint {g} = 0 ties states to {names}: keeping it would need the "
                            "input's time derivative", e.origin, "write the constraint on states and parameters only")
                break
            invariants.append(Constraint(residual=g, origin=e.origin, label=f"index reduction: {g} = 0 (invariant)"))
            dg = sum((sp.diff(g, x) * rate_of[x] for x in g.free_symbols if x in rate_of), sp.Integer(0))
            if S.TIME in g.free_symbols:
                dg += sp.diff(g, S.TIME)
            closed = zero_or_residual(dg.xreplace(explicit))
            if symbols_in((closed,), unknown):
                rows.append(Equation(lhs=dg, rhs=sp.Integer(0), origin=e.origin,
                                     label=f"index reduction: d/dt({g}) = 0 (differentiated {times}×)"))
                break
            g = closed
        else:
            diags.error("UnbalancedSystem", f"the constraint {e.lhs - e.rhs} = 0 between states still holds after "
                        f"{MAX_INDEX} differentiations", e.origin, "the DAE's index is too high to reduce here")
    diags.raise_if_any()
    algebraic = tuple(e for e in system.algebraic if e not in state_only)
    still = set().union(*(symbols_in((e.lhs, e.rhs), alg) for e in algebraic)) if algebraic else set()
    differential = system.differential + tuple(rows)
    multipliers, kept = [], []
    for a in system.algebraics:
        inside = [e for e in differential if symbols_in((e.lhs, e.rhs), {a.symbol})]
        linear = bool(inside) and all(sp.diff(e.lhs - e.rhs, a.symbol, 2) == 0 for e in inside)
        (multipliers if a.symbol not in still and linear else kept).append(a)
    return replace(system, differential=differential, algebraic=algebraic, algebraics=tuple(kept),
                   multipliers=system.multipliers + tuple(a.symbol for a in multipliers),
                   invariants=system.invariants + tuple(invariants), constraints=system.constraints + tuple(invariants))


def interface_balance(system: SymbolicSystem) -> list:
    """Pairs of interface ports (the network's side, the mechanics' side) with the sum of their powers, which a
    power-conserving interface makes identically zero (LANGUAGE.md §10)."""
    sides = [p for p in system.ports if p.role == "interface"]
    return [(a, b, zero_or_residual(a.power + b.power)) for a, b in zip(sides[::2], sides[1::2])]


def power_balance(system: SymbolicSystem) -> PowerBalance:
    """The power balance of a system with an energy, explicit rates and power terms (from its formalism)."""
    if system.energy is None:
        raise PdslError.at("BadOption", f"{system.name} has no energy: there is no power balance to show", system.span)
    if not system.power_terms and not system.ports:
        raise PdslError.at("BadOption", f"--power: {system.name} declares no power ports or elements "
                           "(it applies to port-Hamiltonian networks and structures)", system.span)
    if not system.is_explicit():
        raise PdslError.at("NotYetSupported", "the power audit of systems with algebraic unknowns is not implemented yet",
                           system.span)
    rates = {s.symbol: e.rhs for s, e in zip(system.states, system.differential)}
    states = {s.symbol for s in system.states}
    heat_energy = system.heat_energy if system.heat_energy is not None else sp.Integer(0)
    thermal = system.heat_energy is not None or any(t.kind == "heat" for t in system.power_terms)
    energy = system.energy - heat_energy if thermal else system.energy
    dHdt = _rate_of(energy, rates)
    terms = tuple((t.role, t.name, t.power) for t in system.power_terms if t.kind != "heat")
    residual = zero_or_residual(dHdt - sum((t[2] for t in terms), sp.Integer(0)))
    constraints = tuple(c.residual for c in system.constraints)

    def checked(r):
        r = zero_or_residual(r)
        return zero_or_residual(on_manifold(r, constraints, states)) if r != 0 and constraints else r

    modulo = ()
    if residual != 0 and constraints:
        modulo = constraints
        residual = checked(residual)
    heat = None
    if thermal:
        dUdt = _rate_of(heat_energy, rates)
        heat_terms = tuple((t.role, t.name, t.power) for t in system.power_terms if t.kind == "heat")
        heat = HeatBalance(U=heat_energy, dUdt=tidy(dUdt), terms=heat_terms,
                           residual=checked(dUdt - sum((t[2] for t in heat_terms), sp.Integer(0))))
    components = []
    for c in system.components:
        dEdt = None if c.energy is None else tidy(_rate_of(c.energy, rates))
        components.append(ComponentBalance(name=c.name, power_in=c.power_in, heat_out=c.heat_out, dEdt=dEdt,
                                           residual=None if dEdt is None else checked(c.power_in - c.heat_out - dEdt)))
    return PowerBalance(dHdt=tidy(dHdt), terms=terms, residual=residual, modulo=modulo, heat=heat,
                        components=tuple(components))


def _rate_of(expr, rates) -> sp.Expr:
    """d/dt of an expression of the states: Σ ∂e/∂x·ẋ."""
    return sum((sp.diff(expr, x) * f for x, f in rates.items()), sp.Integer(0))


def on_manifold(expr, constraints, states):
    """``expr`` with each constraint g = 0 solved for one of its states (one in which it is linear) substituted."""
    pending = list(constraints)
    while pending:
        g = pending.pop(0)
        for x in sorted(g.free_symbols & states, key=lambda s: s.name):
            c = sp.diff(g, x)
            if c != 0 and x not in c.free_symbols:
                value = -(g - c * x).xreplace({x: 0}) / c
                expr = expr.xreplace({x: value})
                pending = [h.xreplace({x: value}) for h in pending]
                break
    return expr


def zero_or_residual(expr):
    """0 when ``expr`` vanishes identically: expansion first (cheap, and enough for networks, whose terms cancel
    monomial by monomial), then cancel and simplify."""
    r = sp.expand(expr)
    if r == 0:
        return sp.Integer(0)
    if not r.has(*_NO_SIMPLIFY) and sp.count_ops(r) <= 2 * _TIDY_OPS_LIMIT:
        r = sp.cancel(sp.together(r))
    if r == 0:
        return sp.Integer(0)
    return sp.simplify(r) if sp.count_ops(r) <= _TIDY_OPS_LIMIT else r


# ====================================================================== structural balance
def _matching(rows: list[set], unknowns: list) -> tuple[dict, dict]:
    """A maximum matching of rows to unknowns they contain (augmenting paths; iterative DFS).

    Returns (row -> unknown index, unknown index -> row). Structural rank = its size; a system
    whose Jacobian is regular for some parameter values always has a perfect one."""
    where: dict = {}
    for j, u in enumerate(unknowns):
        where[u] = j
    adj = [sorted(where[u] for u in r if u in where) for r in rows]
    row_of: dict[int, int] = {}
    col_of: dict[int, int] = {}
    for start in range(len(rows)):
        # cheap pass: a free unknown right away
        free = next((j for j in adj[start] if j not in row_of), None)
        if free is not None:
            row_of[free], col_of[start] = start, free
            continue
        parent: dict[int, tuple[int, int]] = {}  # unknown -> (row that reached it, previous unknown or -1)
        stack = [(start, -1)]
        seen_rows = {start}
        found = None
        while stack and found is None:
            r, via = stack.pop()
            for j in adj[r]:
                if j in parent:
                    continue
                parent[j] = (r, via)
                if j not in row_of:
                    found = j
                    break
                nxt = row_of[j]
                if nxt not in seen_rows:
                    seen_rows.add(nxt)
                    stack.append((nxt, j))
        if found is None:
            continue
        j = found
        while j != -1:  # flip the augmenting path
            r, prev = parent[j]
            row_of[j], col_of[r] = r, j
            j = prev
    return col_of, row_of


def check_structure(system: SymbolicSystem) -> None:
    """Structural balance of a lowered system, reported in the user's names and lines.

    The differential rows must determine every rate and multiplier, the algebraic rows every
    algebraic variable: a maximum matching of rows to the unknowns they contain must be perfect.
    An unknown left unmatched is reported at its declaration, a row left unmatched at the line it
    came from (it repeats what other rows determine, or constrains only states)."""
    from ..diagnostics import Collector
    from .common import rate_name

    diags = Collector()
    names = {s.rate: (rate_name(s.rate), s.span) for s in system.states}
    names.update({m: (f"the multiplier {m.name}", system.span) for m in system.multipliers})
    names.update({a.symbol: (a.name, a.span) for a in system.algebraics})
    groups = (
        ("differential", system.differential, list(system.unknowns)),
        ("algebraic", system.algebraic, [a.symbol for a in system.algebraics]),
    )
    for kind, equations, unknowns in groups:
        if not equations and not unknowns:
            continue
        wanted = set(unknowns)
        rows = [symbols_in((e.lhs, e.rhs), wanted) for e in equations]
        col_of, row_of = _matching(rows, unknowns)
        if len(col_of) == len(equations) == len(unknowns):
            continue
        lost = [u for j, u in enumerate(unknowns) if j not in row_of]
        extra = [e for i, e in enumerate(equations) if i not in col_of]
        for u in lost:
            name, span = names.get(u, (u.name, system.span))
            diags.error("UnbalancedSystem", f"{name} is not determined by the {kind} equations "
                        f"(no equation is left that could determine it)", span,
                        "give it an equation, or remove it" if kind == "algebraic" else
                        "an equation for it is missing, or two equations determine the same quantity")
        for e in extra:
            inside = sorted(names.get(u, (u.name, None))[0] for u in symbols_in((e.lhs, e.rhs), wanted))
            what = ("it contains no " + ("algebraic variable" if kind == "algebraic" else "derivative") if not inside
                    else "its unknowns (" + ", ".join(inside) + ") are determined by other equations")
            diags.error("UnbalancedSystem", f"this {kind} equation determines nothing new: {what}", e.origin,
                        "a constraint between states only is a higher-index DAE: differentiate it, or write it "
                        "with the variable it determines" if kind == "algebraic" and not inside else
                        "remove the redundant equation, or add the unknown it was meant to determine")
    diags.raise_if_any()
