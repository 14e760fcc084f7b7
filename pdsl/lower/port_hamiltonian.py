"""Port-Hamiltonian networks -> SymbolicSystem (BENCHMARKS Part C).

Two forms are accepted:

* a **network** of elements (stores, resistive elements, sources, transformers,
  gyrators) joined by junctions (a Dirac structure). Its equations — element
  relations and junction constraints on the port variables (e, f) — form a DAE,
  which is simplified by structural passes: alias elimination (junction
  equalities), causal sorting (solve an equation for its single unknown), then a
  linear solve of what remains when it is linear; anything left is kept as
  algebraic variables for IDAS (a store's rate caught in such a nonlinear loop
  becomes the algebraic variable ``rate(x)``, with der(x) = rate(x)).
* the **input-state-output** form ``structure J = …, R = …, B = …`` with ``var``
  states and a ``hamiltonian``: ẋ = (J − R)∇H + B u (C1), J skew, R ⪰ 0.

Sign convention (LANGUAGE.md §6): a junction member without a sign takes power
from the junction, ``-x`` delivers power into it; a 0-junction (common_effort)
has equal efforts and Σ s·f = 0, a 1-junction (common_flow) equal flows and
Σ s·e = 0.

**Index reduction.** When the junctions tie stores together — two capacitors
directly in parallel (q1/C1 = q2/C2), two masses rigidly coupled on one
common-flow junction (p1/m1 = p2/m2), a capacitor behind a transformer — the
port equations determine only a combination of the stores' rates. The passes
expose this as a constraint g(x) = 0 between store states: an equation left
without unknowns after causal sorting, or (fallback) wᵀb = 0 for a left null
vector w of the remaining linear system A·w = b. Each such g is **differentiated**
(∇g·ẋ = 0 is an equation in the rates, which replaces it) and the passes run
again; the result is an explicit ODE on **all** store states, with g recorded as
a monitored constraint and as an invariant (``simulate`` projects start values
onto it and lists what it changed; ``show`` names the stores and lines).

Why differentiate and keep the states rather than merge stores into one state
(q1 + q2 with C1 + C2)? Merging needs an explicit parametrisation of the
constraint surface, which exists only for linear constraints; differentiation
works unchanged for nonlinear stores (a quartic capacitor next to a linear one).
Every store keeps its own state, so names, ``--init`` and CSV columns stay those
of the model, and "one state per storage" holds. Drift is not an issue for linear
storages: ∇g·f(x) = 0 holds for *every* x (not only on g = 0), so g is a linear
first integral of the ODE, which BDF and Runge–Kutta methods preserve up to
round-off. A nonlinear g drifts at the integrator's tolerance; it is monitored,
and ``--stabilize project`` removes it. The elimination of the constraint force
(the undetermined flow split) is symbolic, so no IDAS index-1 DAE is needed.
Limits: a store tied to an exogenous input (a capacitor directly across a
voltage source) would need the input's derivative and is a located
``error[DependentStorage]``; the start projection is the minimum-norm Newton
projection of ``simulate``, not the charge- (momentum-) conserving redistribution
of an impulsive connection — give consistent start values when that matters.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace

import sympy as sp
from sympy.core.function import AppliedUndef

from .. import symbols as S
from ..diagnostics import Collector, PdslError, Span
from ..resolve.model import Element, Junction, Model, Resistive, Source, Store, Structure, Terminal, TwoPort
from ..resolve.port_hamiltonian import port_symbols
from .calculus import derivative as _derivative
from .common import check_no_unsupported, make_state, resolve_input_laws
from .ir import Algebraic, ComponentPorts, Constraint, Equation, Port, PowerTerm, SymbolicSystem, closed_input_laws
from .registry import Formalism, LowerOptions, register
from .structural import close as _close
from .structural import closure as _closure  # noqa: F401 (used by the network solve)
from .structural import eliminate_aliases as _eliminate_aliases
from .structural import is_rational
from .structural import solve_linear as _solve_linear
from .structural import sort_causal as _sort_causal
from .structural import tidy as _tidy
from .structural import zero_or_residual as _zero_or_residual

__all__ = ["lower_port_hamiltonian", "is_rational", "PORT_HAMILTONIAN"]


def lower_port_hamiltonian(model: Model) -> SymbolicSystem:
    structure = [e for e in model.elements if isinstance(e, Structure)]
    # a network takes the plain equations that read its ports' values (a component written in equations, §9)
    check_no_unsupported(model, {"hamiltonian"} if structure else {"hamiltonian", "equations"}, "port-Hamiltonian")
    resolve_input_laws(model)
    if structure:
        return _iso_form(model, structure)
    return _network(model)


# ====================================================================== ISO form
def _iso_form(model: Model, structure: list[Element]) -> SymbolicSystem:
    if len(structure) > 1:
        raise PdslError.at("DuplicateDefinition", "the model has two `structure` statements", structure[1].span)
    others = [e for e in model.elements if not isinstance(e, Structure)]
    if others:
        raise PdslError.at("MixedFormalism", "`structure` (input-state-output form) cannot be combined with p-H elements", others[0].span)
    st = structure[0]
    if model.hamiltonian is None:
        raise PdslError.at("MissingDeclaration", "`structure` needs a `hamiltonian` H(x)", st.span)
    xs = model.variables_of("var")
    n = len(xs)
    if n == 0 or len(xs) != len(model.variables):
        raise PdslError.at("MissingDeclaration", "`structure` needs the states declared with `var`", st.span)
    J, jspan = st.J
    R, rspan = st.R or (sp.zeros(n, n), st.span)
    B, bspan = st.B or (sp.zeros(n, 0), st.span)
    for name, (Mx, span) in (("J", (J, jspan)), ("R", (R, rspan))):
        if Mx.shape != (n, n):
            raise PdslError.at("TypeMismatch", f"{name} must be {n}x{n} (one row per state), got {Mx.shape[0]}x{Mx.shape[1]}", span)
    if (J + J.T).applyfunc(sp.simplify) != sp.zeros(n, n):
        raise PdslError.at("NotSkew", "J must be skew-symmetric (J = −Jᵀ) for the interconnection to conserve power", jspan)
    if (R - R.T).applyfunc(sp.simplify) != sp.zeros(n, n):
        raise PdslError.at("NotSymmetric", "R must be symmetric", rspan)
    _check_psd(R, model, rspan)
    exo = [u for u in model.inputs]
    if B.shape[0] != n or B.shape[1] != len(exo):
        raise PdslError.at("TypeMismatch", f"B must be {n}x{len(exo)} (states × inputs), got {B.shape[0]}x{B.shape[1]}", bspan)
    H = model.hamiltonian.expr
    x = [v.symbol for v in xs]
    grad = sp.Matrix([sp.diff(H, xi) for xi in x])
    u = sp.Matrix([v.symbol for v in exo]) if exo else sp.zeros(0, 1)
    rhs = (J - R) * grad + (B * u if exo else sp.zeros(n, 1))
    states = tuple(make_state(v.name, v.symbol, v.start, v.span) for v in xs)
    rows = tuple(Equation(lhs=s.rate, rhs=rhs[i], origin=st.span, label="(J − R)∇H + Bu") for i, s in enumerate(states))
    terms = [PowerTerm(role="resistive", name="R", power=-(grad.T * R * grad)[0, 0], span=rspan)]
    if exo:
        terms.append(PowerTerm(role="source", name="B", power=(grad.T * B * u)[0, 0], span=bspan))
    system = _system(model, states, rows, (), (), H, model.hamiltonian.span, "port-hamiltonian-iso")
    return replace(system, power_terms=tuple(terms))


def _check_psd(R: sp.Matrix, model: Model, span: Span) -> None:
    """R ⪰ 0: exactly when constant, else at random points (parameters at their defaults)."""
    defaults = {p.symbol: p.default for p in model.params}
    rng = random.Random(0)
    for _ in range(1 if not (R.free_symbols - set(defaults)) else 20):
        vals = {s: (defaults[s] if s in defaults else rng.uniform(-2, 2)) for s in R.free_symbols}
        Rn = sp.Matrix(R.xreplace(vals)).evalf()
        eig = [complex(v).real for v in Rn.eigenvals(multiple=True)] if Rn.shape[0] else []
        if eig and min(eig) < -1e-12:
            raise PdslError.at("NotPositiveSemidefinite", f"R must be positive semidefinite (dissipation ≥ 0); it has an eigenvalue {min(eig):.3g}", span)


# ====================================================================== networks
@dataclass
class _Net:
    model: Model
    equations: list  # (residual, span, label)
    ports: dict  # port name -> (role, span)
    signs: dict  # port -> sign in its junction
    states: list
    energy: sp.Expr
    domains: dict  # port name -> its domain ("thermal", another domain, or "" where no port says)
    heat_energy: sp.Expr | None = None  # U of the thermal stores (their states), a part of ``energy``
    unknowns: tuple = ()  # algebraic variables of the model's plain equations (components written in equations)
    owners: dict | None = None  # state symbol -> (name, span) of the store or variable it belongs to


def _network(model: Model) -> SymbolicSystem:
    net = _collect(model)
    sol = _solve_network(net)
    _check_switches(sol)
    subs = sol.subs
    reduced = {x for red in sol.reductions for x in red.states}
    rows = []
    for s in net.states:
        if s.rate not in subs:
            raise PdslError.at("UnbalancedSystem", f"the rate of `{s.name}` is not determined by the network", s.span)
        label = "network, index-reduced" if s.symbol in reduced else "network"
        rows.append(Equation(lhs=s.rate, rhs=_tidy(subs[s.rate]), origin=s.span, label=label))
    alg = tuple(
        Algebraic(name=a.name, symbol=a, start=None, span=model.span) for a in sol.algebraics
    )
    alg_rows = tuple(Equation(lhs=r.xreplace(subs), rhs=sp.Integer(0), origin=span, label=label) for r, span, label in sol.alg_eqs)
    constraints = tuple(Constraint(residual=red.residual, origin=red.origin, label=red.label) for red in sol.reductions)
    system = _system(model, tuple(net.states), tuple(rows), alg, alg_rows, net.energy, model.span, "port-hamiltonian")
    ports, terms = _ports(net, sol)
    return replace(system, constraints=constraints, invariants=constraints, projection=tuple(sol.directions or ()),
                   ports=ports, power_terms=terms, display="expand-rational", heat_energy=net.heat_energy,
                   components=_components(net, {p.name: p for p in ports}), port_values=_port_values(net, sol),
                   outputs=_closed_outputs(model, sol), inputs=_closed_laws(model, sol),
                   constraints_title="Constraints between stores (index reduction; monitored)")


def _port_values(net: _Net, sol) -> tuple:
    """The power ports' values and the eliminated variables of the model's equations, in the network's solution."""
    wanted = set(net.unknowns)
    for pp in net.model.power_ports:
        wanted |= pp.across.free_symbols | pp.through.free_symbols
    algebraic = set(sol.algebraics)
    return tuple((k, _tidy(sol.subs[k])) for k in sorted(wanted, key=lambda s: s.name)
                 if k in sol.subs and k not in algebraic)


def _closed_laws(model: Model, sol) -> tuple:
    """Feedback laws that read port values (``input Q = if body.port.T > 330 then 0 else P``), in the solution."""
    closed = {k: v for k, v in sol.subs.items() if k not in set(sol.algebraics)}
    return tuple(replace(u, law=_close(u.law, closed)) if u.law is not None and u.law.free_symbols & closed.keys() else u
                 for u in model.inputs)


def _components(net: _Net, ports: dict) -> tuple[ComponentPorts, ...]:
    """The components with a thermal port and ports of other domains (LANGUAGE.md "Port domains"): the power into
    them, the heat out of them and the energy of their stores (None where they hold states of plain equations)."""
    by_owner: dict[str, list] = {}
    for pp in net.model.power_ports:
        if pp.name in ports:
            by_owner.setdefault(pp.owner, []).append((pp, ports[pp.name]))
    stores = [el for el in net.model.elements if isinstance(el, Store)]
    store_states = {el.state for el in stores}
    out = []
    for owner, items in by_owner.items():
        if len({pp.domain == "thermal" for pp, _ in items}) < 2:
            continue
        inside = (lambda name: True) if not owner else (lambda name, pre=owner + ".": name.startswith(pre))
        power = sp.Add(*(-pt.sign * pt.power for pp, pt in items if pp.domain != "thermal"))
        heat_out = sp.Add(*(pt.sign * pt.power for pp, pt in items if pp.domain == "thermal"))
        plain = [st for st in net.states if st.symbol not in store_states and inside(st.name)]
        energy = None if plain else sp.Add(*(el.state if net.domains.get(el.name) == "thermal" else el.energy
                                             for el in stores if inside(el.name)))
        out.append(ComponentPorts(name=owner, power_in=_tidy(power), heat_out=_tidy(heat_out), energy=energy,
                                  span=items[0][0].span))
    return tuple(out)


def _check_switches(sol) -> None:
    """A switch (``sign``, a comparison of ``if``) whose argument the network leaves to an algebraic loop: its mode
    would have to be chosen together with the unknowns it decides (a complementarity problem), which the simulator
    does not do (it reads modes off the states) — refused where it is written, rather than integrated in a wrong mode."""
    unknowns = set(sol.algebraics)
    if not unknowns:
        return
    for r, span, label in sol.alg_eqs:
        r = r.xreplace(sol.subs)
        for node in sp.preorder_traversal(r):
            if isinstance(node, sp.sign | sp.Heaviside | sp.core.relational.Relational) and node.free_symbols & unknowns:
                names = ", ".join(sorted(_shown(u) for u in node.free_symbols & unknowns))
                raise PdslError.at("AlgebraicSwitch", f"{label}: the switch {node} depends on {names}, which the "
                                   "network only determines together with it (an algebraic loop)", span,
                                   "a switch must be decided by the states: give the quantity it reads a state of its "
                                   "own (an inertia, a spring, a capacitor at that port), or a source")


def _closed_outputs(model: Model, sol) -> tuple:
    """Outputs that read port values (``p.T``) or the algebraic variables of equations, in the network's solution."""
    closed = {k: v for k, v in sol.subs.items() if k not in set(sol.algebraics)}
    out = []
    for o in model.outputs:
        if o.expr.free_symbols & closed.keys():
            o = replace(o, expr=_tidy(_close(o.expr, closed)))
        out.append(o)
    return tuple(out)


def _ports(net: _Net, sol) -> tuple[tuple[Port, ...], tuple[PowerTerm, ...]]:
    """Effort and flow of every element port in terms of states, inputs and parameters, and the power balance
    terms (sources supply, resistive elements dissipate). None for networks with algebraic loops (the port
    variables would depend on algebraic unknowns): their power audit is not available yet."""
    if sol.algebraics:
        return (), ()
    ports, terms = [], []
    owners = {el.name: el.owner for el in net.model.elements if isinstance(el, Terminal)}
    for port, (role, span) in net.ports.items():
        e, f = port_symbols(port)
        sign = net.signs.get(port, 1)
        domain = net.domains.get(port, "")
        pt = Port(name=port, role=role, sign=sign, effort=_close(e, sol.subs), flow=_close(f, sol.subs), span=span,
                  domain=domain, owner=owners.get(port, ""))
        ports.append(pt)
        # a thermal resistive element passes its heat on (T·Q̇ is not a power): no term of either balance
        if role in ("source", "terminal") or (role == "resistive" and domain != "thermal"):
            terms.append(PowerTerm(role=role, name=port, power=-sign * _tidy(pt.power), span=span,
                                   kind="heat" if domain == "thermal" else "power"))
    return tuple(ports), tuple(terms)


# ====================================================================== index reduction
# How many times a constraint between stores may be differentiated (1 for two capacitors in parallel: index 2).
MAX_DIFFERENTIATIONS = 3


@dataclass
class Reduction:
    """A constraint g(x) = 0 that the Dirac structure imposes between store states, and how it was reduced."""

    residual: sp.Expr  # g(x), zero along every solution
    stores: tuple[tuple[str, Span], ...]  # the stores whose states it ties (element name, statement span)
    states: tuple[sp.Symbol, ...]
    origin: Span  # the statement whose equation became the constraint
    times: int  # differentiated this many times (the index of the network is times + 1)
    label: str


@dataclass
class _Solution:
    subs: dict  # port variable / rate -> expression of states, parameters, inputs (and algebraics)
    algebraics: list
    alg_eqs: list
    reductions: list
    directions: list | None = None  # columns (one per reduction): how the junctions redistribute the tied stores


def _solve_network(net: _Net) -> _Solution:
    """Solve the port equations for every port variable and rate (see the module docstring for the passes).

    An equation left without any unknown after alias elimination and causal sorting — or a combination of the
    remaining linear equations whose coefficients vanish (a left null vector of their matrix) — is a constraint
    g(x) = 0 between store states: it is replaced by its time derivative Σ ∂g/∂x·ẋ = 0, which is an equation in
    the rates, and the passes run again (index reduction by differentiation, at most MAX_DIFFERENTIATIONS times).
    """
    model = net.model
    unknowns: set = set(net.unknowns)
    for port in net.ports:
        unknowns |= set(port_symbols(port))
    rates = {s.rate for s in net.states}
    rate_of = {s.symbol: s.rate for s in net.states}
    eqs = list(net.equations)
    subs: dict = {}
    reductions: list[Reduction] = []
    algebraics, alg_eqs = [], []
    directions = None
    for times in range(MAX_DIFFERENTIATIONS + 1):
        eqs, subs = _eliminate_aliases(eqs, unknowns, subs)
        eqs, subs = _sort_causal(eqs, unknowns | rates, subs)
        open_ = (unknowns | rates) - set(subs)
        constraints = [eq for eq in eqs if not (eq[0].free_symbols & open_)]
        eqs = [eq for eq in eqs if eq[0].free_symbols & open_]
        remaining = sorted(open_, key=lambda s: s.name)
        if not constraints and remaining:
            solved = _solve_linear(eqs, remaining)
            if solved is not None:
                subs.update(solved)
                eqs = []
                break
            hidden = _hidden_constraints(eqs, remaining)
            if hidden is None:
                if len(eqs) != len(remaining):
                    shown = _port_value_names(net)
                    names = ", ".join(shown.get(s, _shown(s)) for s in remaining)
                    raise PdslError.at(
                        "UnbalancedSystem",
                        f"the network leaves {len(remaining)} port variables or rates ({names}) to {len(eqs)} equations "
                        "that no index reduction explains",
                        model.span,
                    )
                # an algebraic loop (through nonlinear elements): the equations stay for IDAS; a rate caught in the
                # loop becomes an algebraic variable `rate(x)` with der(x) = rate(x)
                for st in net.states:
                    if st.rate in open_:
                        z = S.sym(f"rate({st.name})")
                        eqs = [(r.xreplace({st.rate: z}), span, label) for r, span, label in eqs]
                        subs[st.rate] = z
                        remaining = [z if v == st.rate else v for v in remaining]
                algebraics = remaining
                alg_eqs = eqs
                break
            constraints, eqs = hidden
        new = [r for r in (_reduction(g, span, label, net, times) for g, span, label in constraints) if r is not None]
        if not new:
            if not open_:
                break
            continue
        if times == MAX_DIFFERENTIATIONS:
            raise PdslError.at("DependentStorage", f"the constraint {new[0].residual} = 0 between stores still holds after "
                               f"{MAX_DIFFERENTIATIONS} differentiations", new[0].origin)
        # a second pass of reductions falls back to the minimum-norm projection
        directions = _redistribution(eqs, subs, open_, net, len(new)) if times == 0 else None
        reductions += new
        closed = _closure(subs)
        for red in new:
            dg = sum((sp.diff(red.residual, x) * rate_of[x] for x in red.states), sp.Integer(0))
            eqs.append((dg.xreplace(closed), red.origin, f"index reduction: d/dt({red.residual}) = 0"))
    return _Solution(subs=_closure(subs), algebraics=algebraics, alg_eqs=alg_eqs, reductions=reductions,
                     directions=directions)


def _redistribution(eqs, subs, open_, net: _Net, n_constraints: int) -> list | None:
    """The directions in which the junctions move the tied stores' states when an inconsistent start is connected.

    When a constraint g(x) = 0 appears, the port equations that are left no longer fix every rate: they admit a
    free internal flow (the current circulating between two parallel capacitors, the force between two rigidly
    coupled masses). The rates that free flow produces — the rate components of the null space of the left
    equations' Jacobian in the open unknowns — are the directions of the impulsive redistribution of a physical
    connection: moving the start along them keeps every quantity the junctions balance (total charge, total
    momentum), as closing a switch does. One column per constraint, or None (minimum-norm projection instead)
    when the equations are nonlinear in the unknowns or the count does not match."""
    unknowns = sorted(open_, key=lambda v: v.name)
    if not unknowns or not eqs:
        return None
    closed = _closure(subs)
    residuals = [r.xreplace(closed) for r, _, _ in eqs]
    A = sp.Matrix([[sp.diff(r, u) for u in unknowns] for r in residuals])
    if A.free_symbols & set(unknowns):
        return None
    null = A.nullspace(simplify=True)
    if not null:
        return None
    rate_exprs = [closed.get(st.rate, st.rate) for st in net.states]
    R = sp.Matrix([[sp.diff(e, u) for u in unknowns] for e in rate_exprs])
    if R.free_symbols & set(unknowns):
        return None
    cols = [sp.simplify(R * v) for v in null]
    cols = [c for c in cols if any(e != 0 for e in c)]
    if len(cols) != n_constraints or sp.Matrix.hstack(*cols).rank(simplify=True) != n_constraints:
        return None
    return [tuple(c) for c in cols]


def _port_value_names(net: _Net) -> dict:
    """A power port's bond variables (and those of its terminal) as the model reads them: ``p.across``, ``p.through``."""
    out = {}
    for pp in net.model.power_ports:
        for name in (pp.name, f"{pp.name}.terminal"):
            for sym in port_symbols(name):
                out[sym] = f"{pp.name}.across" if sym.name[-1] == pp.across.name[-1] else f"{pp.name}.through"
    return out


def _shown(symbol) -> str:
    """dt(q) -> der(q); port variables as they are."""
    return "der(" + symbol.name[3:-1] + ")" if symbol.name.startswith("dt(") else symbol.name


def _hidden_constraints(eqs, remaining):
    """Linear equations A·w = b whose rows are dependent (wᵀA = 0): the constraints wᵀb = 0 they imply, and the
    equations with a redundant row dropped. None when the equations are not linear or no row is dependent."""
    if not eqs:
        return None
    try:
        A, b = sp.linear_eq_to_matrix([r for r, _, _ in eqs], remaining)
    except (sp.PolynomialError, ValueError):
        return None
    if A.free_symbols & set(remaining):
        return None
    null = A.T.nullspace(simplify=True)
    if not null:
        return None
    W, pivots = sp.Matrix.hstack(*null).T.rref(simplify=True)
    constraints = []
    for k in range(len(pivots)):
        g = sp.cancel(sp.together((W[k, :] * b)[0, 0]))
        drop = pivots[k]
        constraints.append((-g, eqs[drop][1], eqs[drop][2]))
    kept = [eq for j, eq in enumerate(eqs) if j not in pivots]
    return constraints, kept


def _reduction(g, span, label, net: _Net, times: int) -> Reduction | None:
    """A constraint left by the passes: None when it holds identically, a Reduction when it ties store states
    (and nothing that cannot be differentiated), a located error otherwise."""
    model = net.model
    laws = closed_input_laws(model.inputs)
    g = _close(g, laws) if laws else g
    g = _zero_or_residual(g)
    if g == 0:
        return None
    states = {s.symbol: s for s in net.states}
    stores = net.owners or {}
    tied = sorted(g.free_symbols & set(states), key=lambda x: x.name)
    exogenous = {u.symbol for u in model.inputs if u.law is None} | {S.TIME}
    driven = sorted(g.free_symbols & exogenous, key=lambda x: x.name)
    names = ", ".join(f"`{stores[x][0]}` (line {stores[x][1].line})" for x in tied)
    where = stores[tied[0]][1] if tied else span
    if not tied:
        if driven:
            raise PdslError.at("ConflictingSources", f"the junctions force {g} = 0 between the sources at all times", span,
                               "two sources impose the same effort (or flow) through the junctions")
        raise PdslError.at("InconsistentNetwork", f"the junctions force {g} = 0 between parameters", span)
    if driven:
        what = ", ".join(f"`{u}`" for u in driven)
        raise PdslError.at(
            "DependentStorage",
            f"the junctions tie store{'s' if len(tied) > 1 else ''} {names} to {what}: {g} = 0, so "
            f"{'their' if len(tied) > 1 else 'its'} rate would need the time derivative of {what}",
            where,
            "put a resistive element between the source and the store (derivatives of inputs are not available)",
        )
    if g.atoms(AppliedUndef):
        raise PdslError.at("NotYetSupported", f"stores {names} are tied by a constraint through a neural component "
                           f"({label}); its derivative is not formed", where)
    order = ["once", "twice", "three times"][times] if times < 3 else f"{times + 1} times"
    text = (f"index reduction: the junctions tie stores {names.replace('`', '')}; differentiated {order}, states kept, "
            "start values projected onto it")
    return Reduction(residual=g, stores=tuple(stores[x] for x in tied), states=tuple(tied),
                     origin=span, times=times + 1, label=text)


# sympy's simplify rewrites sign(q) (the derivative of abs) as a Piecewise in q = 0 and takes seconds to minutes
# on networks with such elements; these expressions are only expanded.
def _collect(model: Model) -> _Net:
    diags = Collector()
    equations, ports, states = [], {}, []
    energy_terms: list = []
    junctions = [e for e in model.elements if isinstance(e, Junction)]
    for el in model.elements:
        if isinstance(el, Store):
            e, f = port_symbols(el.name)
            var = el.state
            st = make_state(var.name, var, None, el.span)
            states.append(st)
            grad = _derivative(el.energy, el.state)
            if el.integrates == "flow":  # ẋ = f, e = ∂H/∂x
                equations += [(st.rate - f, el.span, f"flow store {el.name}: der({var.name}) = f"),
                              (e - grad, el.span, f"flow store {el.name}: e = ∂H/∂{var.name}")]
            else:  # ẋ = e, f = ∂H/∂x
                equations += [(st.rate - e, el.span, f"effort store {el.name}: der({var.name}) = e"),
                              (f - grad, el.span, f"effort store {el.name}: f = ∂H/∂{var.name}")]
            energy_terms.append(el.energy)  # one Add at the end: `energy += …` is quadratic in the stores
            ports[el.name] = ("store", el.span)
        elif isinstance(el, Resistive):
            rel = _dissipative(el) if el.dissipative else el.relation
            equations.append((rel, el.span, f"resistive {el.name}"))
            ports[el.name] = ("resistive", el.span)
        elif isinstance(el, Source):
            e, f = port_symbols(el.name)
            var = f if el.imposes == "flow" else e
            equations.append((var - el.value, el.span, f"{el.imposes} source {el.name}"))
            ports[el.name] = ("source", el.span)
        elif isinstance(el, TwoPort):
            try:
                equations += _twoport(el)
            except PdslError as err:
                diags.extend(err)
            for p in el.ports:
                ports[f"{el.name}.{p}"] = ("twoport", el.span)
        elif isinstance(el, Terminal):  # its effort and flow: fixed by the model's equations (below)
            ports[el.name] = ("terminal", el.span)
    # Bonds. A named junction (and each port of a `connect` node, an alias of the node's junction) is a bond
    # target: every appearance of its name in another junction's list is one bond, named after the name written
    # there (a second appearance of the same name gets `name@parent`), so a ladder's 1-junction may be bonded to
    # the node before it and the node after it.
    targets: dict[str, Element] = {}
    for j in junctions:
        if j.name:
            targets[j.name] = j
        for alias in j.aliases:
            targets[alias] = j
    appearances: dict[str, list] = {}
    for j in junctions:
        for idx, (_sign, port, _span) in enumerate(j.members):
            if port in targets:
                appearances.setdefault(port, []).append((j, idx))
    bond_name: dict[tuple[int, int], str] = {}
    child_bonds: dict[int, list] = {}
    for port, apps in appearances.items():
        target = targets[port]
        for k, (parent, idx) in enumerate(apps):
            name = port if k == 0 else f"{port}@{parent.name or f'line {parent.span.line}'}"
            sign, _, span = parent.members[idx]
            bond_name[(id(parent), idx)] = name
            ports[name] = ("bond", target.span)
            # seen from the target: a plain member of the parent takes power from the parent and so delivers it
            # into the target (−1); a `-` member delivers power into the parent, taken from the target (+1)
            child_bonds.setdefault(id(target), []).append((-sign, name, target.span))
    seen: dict[str, Span] = {}
    signs: dict[str, int] = {}
    for j in junctions:
        listed = [(sign, bond_name.get((id(j), idx), port), span) for idx, (sign, port, span) in enumerate(j.members)]
        members = listed + child_bonds.get(id(j), [])
        for sign, port, span in listed:
            if port not in ports:
                diags.error("UnknownName", f"`{port}` is not a p-H element, two-port port or named junction", span,
                            "two-port ports are written `tr.a`")
                continue
            if port in seen:
                diags.error("PortConnectedTwice", f"`{port}` is already connected to the junction at line "
                            f"{seen[port].line}", span, "each port belongs to exactly one junction")
            seen[port] = span
            signs[port] = sign
        if diags:
            continue
        if len(members) < 2:
            diags.error("BadJunction", f"junction `{j.name}` has {len(members)} bond(s): it connects nothing", j.span,
                        "a junction joins at least two ports")
            continue
        equations += _junction(j, members)
    for port, (role, span) in ports.items():
        if port not in seen:
            diags.error("UnconnectedPort", f"`{port}` ({role}) is not connected to any junction", span,
                        "list it in a `junction common_effort(...)` or `common_flow(...)`")
    _check_sources(model, junctions, ports, diags)
    diags.raise_if_any()
    domains = _domains(model, junctions, ports, child_bonds, bond_name, diags)
    diags.raise_if_any()
    thermal = [el for el in model.elements if isinstance(el, Store) and domains.get(el.name) == "thermal"]
    for el in thermal:
        if el.integrates != "flow":
            diags.error("BadElement", f"`{el.name}` is an effort store on a thermal port: it would integrate the "
                        "temperature", el.span, "heat is stored by integrating the heat flow: `flow_store "
                        f"{el.name}({el.state.name}) energy …` (T = ∂H/∂{el.state.name}, and {el.state.name} is the heat taken in)")
    diags.raise_if_any()
    if thermal:  # a thermal store's p-H energy only gives T = ∂H/∂x; its internal energy is the heat taken in, x
        hot = {id(el) for el in thermal}
        energy_terms = [el.state if id(el) in hot else el.energy for el in model.elements if isinstance(el, Store)]
    plain_states, unknowns, plain_eqs = _plain_equations(model)
    owners = {el.state: (el.name, el.span) for el in model.elements if isinstance(el, Store)}
    owners.update({st.symbol: (st.name, st.span) for st in plain_states})
    return _Net(model=model, equations=equations + plain_eqs, ports=ports, signs=signs, states=states + plain_states,
                energy=sp.Add(*energy_terms), domains=domains,
                heat_energy=sp.Add(*(el.state for el in thermal)) if thermal else None, unknowns=unknowns, owners=owners)


def _plain_equations(model: Model) -> tuple[list, tuple, list]:
    """The plain equations a network takes (they read its ports' values, LANGUAGE.md §9): the variables under
    der(...) become states, the others unknowns solved with the port variables; der(x) becomes the rate of x."""
    if not model.equations:
        return [], (), []
    used = set().union(*(e.lhs.free_symbols | e.rhs.free_symbols for e in model.equations))
    variables = [v for v in model.variables if v.kind == "var"]
    states = [make_state(v.name, v.symbol, v.start, v.span) for v in variables if S.der(v.symbol) in used]
    to_rate = {S.der(st.symbol): st.rate for st in states}
    unknowns = tuple(v.symbol for v in variables if S.der(v.symbol) not in used)
    eqs = []
    for e in model.equations:
        r = (e.lhs - e.rhs).xreplace(to_rate)
        if r == 0:
            raise PdslError.at("TrivialEquation", "this equation is always true (0 = 0)", e.span)
        eqs.append((r, e.span, "equation"))
    return states, unknowns, eqs


def _domains(model: Model, junctions, ports: dict, child_bonds: dict, bond_name: dict, diags: Collector) -> dict:
    """The domain of every port of the network: the ports bonded through junctions share one (a two-port's two
    sides are apart). Nodes of `connect`, open ports and terminals say which (pdsl.compose); a group with a thermal
    port and a port of another domain, or a two-port on a thermal side, is refused (T·Q̇ is not a power)."""
    parent: dict = {}

    def find(k):
        parent.setdefault(k, k)
        while parent[k] != k:
            parent[k] = parent[parent[k]]
            k = parent[k]
        return k

    for j in junctions:
        for idx, (_sign, port, _span) in enumerate(j.members):
            parent[find(bond_name.get((id(j), idx), port))] = find(("junction", id(j)))
        for _sign, name, _span in child_bonds.get(id(j), []):
            parent[find(name)] = find(("junction", id(j)))
    tags: dict = {}
    where: dict = {}
    for j in junctions:
        if j.domain:
            tags.setdefault(find(("junction", id(j))), set()).add(j.domain)
            where.setdefault(find(("junction", id(j))), j.span)
    for el in model.elements:
        domain = getattr(el, "domain", "") if isinstance(el, Source | Terminal) else ""
        if domain and el.name in ports:
            tags.setdefault(find(el.name), set()).add(domain)
            where.setdefault(find(el.name), el.span)
    meet: dict = {}  # the first junction of a group: where its ports meet
    for j in junctions:
        meet.setdefault(find(("junction", id(j))), j.span)
    for root, found in tags.items():
        if "thermal" in found and len(found) > 1:
            other = sorted(found - {"thermal"})[0]
            article = "an" if other[0] in "aeiou" else "a"
            diags.error("DomainMismatch", f"a thermal port and {article} {other} port meet at one junction: temperature "
                        "and heat flow are not a power pair", meet.get(root, where[root]), "a component that turns power into heat writes the "
                        "heat flow by an equation (`heat.Q_flow = -(p.v - n.v)*p.i`), see std:thermal HeatingResistor")
    domains = {p: next(iter(tags[find(p)])) if len(tags.get(find(p), ())) == 1 else "" for p in ports}
    for el in model.elements:
        if isinstance(el, TwoPort) and any(domains.get(f"{el.name}.{p}") == "thermal" for p in el.ports):
            diags.error("DomainMismatch", f"{el.form} `{el.name}` has a thermal side: a two-port conserves power, and "
                        "temperature × heat flow is not a power", el.span,
                        "join thermal parts by junctions, conductors and sources only")
    return domains


def double_bonds(model: Model) -> list:
    """``warning[DoubleBond]`` for two named junctions that list each other (LANGUAGE.md §6).

    Each appearance of a named junction in another junction's list is one bond, so ``n1: common_effort(…, pipe)``
    with ``pipe: common_flow(-n1, …)`` makes two parallel bonds between n1 and pipe. The lowering keeps both (the
    spec's reading); this says so at both appearances, with what the two bonds do to the equations: in the same
    direction between a common-effort and a common-flow junction each balance counts the other junction's effort or
    flow twice; in opposite directions they cancel, and the two junctions are not connected at all."""
    from ..diagnostics import Diagnostic

    junctions = [e for e in model.elements if isinstance(e, Junction)]
    names: dict[str, Junction] = {}
    for j in junctions:
        if j.name:
            names[j.name] = j
        for alias in j.aliases:
            names[alias] = j
    # (parent, child) -> [(sign, written name, span)]: the parent's list names the child
    listed: dict[tuple[int, int], list] = {}
    by_id = {id(j): j for j in junctions}
    for j in junctions:
        for sign, port, span in j.members:
            child = names.get(port)
            if child is not None and child is not j:
                listed.setdefault((id(j), id(child)), []).append((sign, port, span))
    out, done = [], set()
    for (a, b), apps_a in listed.items():
        apps_b = listed.get((b, a))
        if not apps_b or frozenset((a, b)) in done:
            continue
        done.add(frozenset((a, b)))
        ja, jb = by_id[a], by_id[b]
        # a plain member takes power from its list's junction: a bond a -> b is (+) in a's list or (−) in b's
        direction = [s for s, _, _ in apps_a] + [-s for s, _, _ in apps_b]
        na, nb = _junction_name(ja), _junction_name(jb)
        count = len(direction)
        times = "twice" if count == 2 else f"{count} times"
        if abs(sum(direction)) == count:
            if ja.form != jb.form:
                ce, cf = (na, nb) if ja.form == "common_effort" else (nb, na)
                effect = (f"each carries the effort of `{ce}` and the flow of `{cf}`, so the flow balance of `{ce}` "
                          f"takes the flow of `{cf}` {times} and the effort balance of `{cf}` the effort of `{ce}` {times}")
            else:
                kind = "efforts" if ja.form == "common_effort" else "flows"
                other = "flows" if kind == "efforts" else "efforts"
                effect = (f"both junctions equate {kind}: the bonds share one {kind[:-1]} and only the sum of their "
                          f"{other} is determined")
        elif sum(direction) == 0:
            effect = ("they point in opposite directions and cancel: the two junctions exchange nothing, as if "
                      "they were not connected")
        else:
            effect = "some point one way and some the other; they add up with their signs"
        for (parent, child, apps) in ((ja, jb, apps_a), (jb, ja, apps_b)):
            other = apps_b if parent is ja else apps_a
            where = ", ".join(f"`{'-' if s < 0 else ''}{w}` in the list of `{_junction_name(child)}` at line "
                              f"{sp_.line}" for s, w, sp_ in other)
            for sign, written, span in apps:
                out.append(Diagnostic(
                    "DoubleBond",
                    f"`{_junction_name(parent)}` lists `{'-' if sign < 0 else ''}{written}`, and {where} bonds "
                    f"the same two junctions again: each appearance is one bond, so there are {count} parallel bonds "
                    f"between `{na}` and `{nb}`; {effect}",
                    span,
                    hint=f"a bond between two named junctions is written once, in either list: drop `{written}` here "
                         "or the other appearance (a plain member takes power from its junction, `-x` delivers it)",
                    severity="warning"))
    return sorted(out, key=lambda d: d.sort_key())


def _junction_name(j: Junction) -> str:
    return j.name or (j.aliases[0] if j.aliases else f"junction at line {j.span.line}")


def _check_sources(model, junctions, ports, diags) -> None:
    """Two flow sources on one common-flow junction (or effort sources on a common-effort one) conflict."""
    kinds = {e.name: e.imposes for e in model.elements if isinstance(e, Source)}
    for j in junctions:
        clash = "flow" if j.form == "common_flow" else "effort"
        srcs = [port for _, port, _ in j.members if kinds.get(port) == clash]
        if len(srcs) > 1:
            diags.error("ConflictingSources", f"{clash} sources {', '.join(f'`{s}`' for s in srcs)} both impose the {clash} "
                        f"of one {j.form} junction", j.span, "their values would have to be equal at all times")


def _junction(j: Element, members) -> list:
    e0, f0 = port_symbols(members[0][1])
    out = []
    common_effort = j.form == "common_effort"
    for _, port, span in members[1:]:
        e, f = port_symbols(port)
        out.append(((e - e0) if common_effort else (f - f0), j.span, f"junction: equal {'efforts' if common_effort else 'flows'}"))
    total = sum((sign * port_symbols(port)[1 if common_effort else 0] for sign, port, _ in members), sp.Integer(0))
    out.append((total, j.span, f"junction: signed {'flows' if common_effort else 'efforts'} sum to zero"))
    return out


def _twoport(el: TwoPort) -> list:
    """Transformer e_a = n·e_b (then f_b = n·f_a); gyrator e_a = r·f_b (then e_b = r·f_a): power conserving."""
    rel = el.relation
    ea, fa, eb, fb = el.e_a, el.f_a, el.e_b, el.f_b
    other = fb if el.form == "gyrator" else eb
    ca, co = _derivative(rel, ea), _derivative(rel, other)
    rest = sp.simplify(rel - ca * ea - co * other)
    bad = (ca.free_symbols | co.free_symbols) & {ea, fa, eb, fb}
    if rest != 0 or bad or ca == 0 or co == 0:
        a, b = el.ports
        want = f"e_{a} = n*e_{b}" if el.form == "transformer" else f"e_{a} = r*f_{b}"
        raise PdslError.at("NotYetSupported", f"a {el.form} relation must have the form {want} (n, r may depend on states and "
                           "parameters); general nonlinear two-ports are not lowered yet", el.span)
    modulus = -co / ca  # e_a = modulus · other
    if el.form == "transformer":
        companion = fb - modulus * fa
    else:
        companion = eb - modulus * fa
    return [(rel, el.span, f"{el.form} {el.name}"), (companion, el.span, f"{el.form} {el.name}: power conserving companion")]


def _dissipative(el: Resistive) -> sp.Expr:
    """``{dissipative}``: a map f = g(…) becomes f = e·g(…)², so e·f = e²g² ≥ 0 by construction."""
    e, f, rel = el.e, el.f, el.relation
    if sp.diff(rel, f) != 0 and not (sp.diff(rel, f).free_symbols & {f}) and f not in (rel - sp.diff(rel, f) * f).free_symbols:
        g = sp.solve(rel, f)
        if len(g) == 1:
            return f - e * g[0] ** 2
    raise PdslError.at("BadElement", f"`{{dissipative}}` needs the relation of `{el.name}` written as `f = ...`", el.span)


# ====================================================================== structural passes
# ====================================================================== power audit
def _system(model, states, rows, algebraics, alg_rows, energy, energy_span, formalism) -> SymbolicSystem:
    return SymbolicSystem(
        name=model.name, doc=model.doc, path=model.path, formalism=formalism,
        states=states, algebraics=algebraics, multipliers=(), params=model.params, inputs=model.inputs,
        outputs=model.outputs, neural=model.neural, differential=rows, algebraic=alg_rows,
        energy=energy, energy_origin=energy_span, constraints=(), span=model.span,
    )


def _claims(model: Model) -> bool:
    return bool(model.elements)


_CAUSALITY_ERRORS = {"DependentStorage", "ConflictingSources", "UnbalancedSystem", "AlgebraicSwitch"}
MAX_OPEN_PORTS = 6


def _lower(model: Model, options: LowerOptions) -> SymbolicSystem:
    """:func:`_lower_network`; a network that fails to lower also gets its ``warning[DoubleBond]`` diagnostics (two
    parallel bonds between junctions of one kind leave the split of their flows open: ``UnbalancedSystem``)."""
    try:
        return _lower_network(model, options)
    except PdslError as err:
        warnings = double_bonds(model)
        if warnings:
            raise PdslError(list(err.diagnostics) + warnings) from err
        raise


def _lower_network(model: Model, options: LowerOptions) -> SymbolicSystem:
    """A network whose power ports are left open (a component checked on its own) imposes at each open port its
    effort or its flow, whichever the network accepts: the first assignment that lowers (the flattener's guess
    first: the variable that the port's junction does not fix), with only the inputs it uses."""
    opened = [e for e in model.elements if isinstance(e, Source) and e.open_port]
    if not opened:
        return lower_port_hamiltonian(model)
    if len(opened) > MAX_OPEN_PORTS:
        raise PdslError.at("NotYetSupported", f"{len(opened)} open power ports: connect some of them (at most "
                           f"{MAX_OPEN_PORTS} are given causality automatically)", opened[0].span)
    guess = tuple(e.imposes for e in opened)
    flips = sorted(range(2 ** len(opened)), key=lambda m: bin(m).count("1"))
    first_error = None
    implicit = None  # the first assignment that lowers only with algebraic unknowns: kept while an explicit one is sought
    for mask in flips:
        kinds = tuple(("flow" if k == "effort" else "effort") if mask >> i & 1 else k for i, k in enumerate(guess))
        chosen = {e.name: k for e, k in zip(opened, kinds)}
        unused = {S.sym(f"{e.name}.{'flow' if chosen[e.name] == 'effort' else 'effort'}") for e in opened}
        elements = tuple(replace(e, imposes=chosen[e.name], value=S.sym(f"{e.name}.{chosen[e.name]}"))
                         if isinstance(e, Source) and e.open_port and e.name in chosen else e for e in model.elements)
        trial = replace(model, elements=elements, inputs=tuple(u for u in model.inputs if u.symbol not in unused))
        try:
            system = lower_port_hamiltonian(trial)
        except PdslError as err:
            if not set(err.codes) & _CAUSALITY_ERRORS:
                raise
            first_error = first_error or err
            continue
        if not system.algebraics:
            return system
        implicit = implicit or system
    if implicit is not None:
        return implicit
    raise first_error


PORT_HAMILTONIAN = register(Formalism(
    name="port-hamiltonian", precedence=40, claims=_claims, lower=_lower,
    describe="port-Hamiltonian elements and junctions (LANGUAGE.md §6), or the input-state-output `structure`",
))
