"""The numeric side of a model's events (``when``, LANGUAGE.md §11): CasADi Functions the simulator calls.

Each comparison in a condition is an *atom* with an indicator g (``a < b``: g = a − b), true where g < 0 (or ≤ 0
for ``<=``). A condition, put in negation normal form, is a monotone and/or tree of atoms, so it can become true
only when one of its atoms does, that is when an indicator crosses zero downwards: those crossings are what the
integrators locate (CVODES/IDAS root functions, or bracketing on the explicit methods' steps).

A reset of a state of the kinetic part (velocities or momenta, ``SymbolicSystem.kinetic``) in a model with velocity
constraints is an impulse: y⁺ minimises ½(y⁺ − y⁻)ᵀW(y⁺ − y⁻), W = ∂²E/∂y², subject to the reset values and to all
velocity-level invariants c(x, y⁺) = 0 (they are linear in y). For velocities W is the mass matrix; for momenta it
is its inverse, and both give the same motion.
"""

from __future__ import annotations

import casadi as ca
import sympy as sp

from ..records import record

__all__ = ["HybridFunctions", "hybrid_functions", "event_atoms", "condition_value", "atoms_of"]

_LESS = {sp.StrictLessThan: True, sp.LessThan: False}
_GREATER = {sp.StrictGreaterThan: True, sp.GreaterThan: False}


@record(kw_only=False, slots=False)
class HybridFunctions:
    atoms: ca.Function  # (t, x, z, p, u) -> g: atom k is true where g_k < 0 (strict) or g_k <= 0
    strict: tuple[bool, ...]
    conditions: tuple  # per event, its condition as a tree: ("atom", k) | ("and"|"or", (subtrees))
    resets: tuple  # per event, (t, x, z, p, u) -> its reset values (a Function, or None for no reset)
    targets: tuple  # per event, the names it resets
    labels: tuple[str, ...]  # per event, `when h < 0 (line 6)`
    lines: tuple[int, ...]
    terminate: tuple[bool, ...]
    target_names: tuple[str, ...]  # every reset target of the model
    target_value: ca.Function  # (t, x, p) -> r: the current value of each target (a state or a shown column)
    target_jac: ca.Function | None  # (t, x, p) -> ∂r/∂y: targets in the kinetic part are rows of the impulse
    kinetic: tuple[int, ...]  # indices of the kinetic states y in x
    metric: ca.Function | None  # (t, x, p) -> W = ∂²E/∂y²
    velocity_rows: ca.Function | None  # (t, x, p) -> (c, G = ∂c/∂y): the velocity-level invariants
    velocity_labels: tuple[str, ...]
    position_rows: int  # invariants that do not read y (positions): projected after a position reset
    # the switching surfaces of the dynamics (pdsl.backend.switching), located by the simulator; None: none
    switches: object = None


def condition_value(tree, truth) -> bool:
    """The condition ``tree`` with atom k's truth value ``truth[k]``."""
    kind, arg = tree
    if kind == "atom":
        return bool(truth[arg])
    vals = (condition_value(sub, truth) for sub in arg)
    return all(vals) if kind == "and" else any(vals)


def atoms_of(tree) -> list[int]:
    kind, arg = tree
    return [arg] if kind == "atom" else [k for sub in arg for k in atoms_of(sub)]


def event_atoms(system) -> tuple[list, tuple[bool, ...], tuple]:
    """The events' conditions decomposed into atoms, in sympy (no CasADi: the torch backend compiles the same).

    Returns ``(indicators, strict, conditions)``: atom k is true where ``indicators[k]`` < 0 (``strict[k]``) or ≤ 0;
    ``a < b`` (or ``<=``) gives g = a − b, ``a > b`` (or ``>=``) g = b − a, equal atoms shared; per event its
    condition in negation normal form as a tree ``("atom", k) | ("and" | "or", (subtrees))``."""
    atoms: list = []  # indicator expressions (sympy)
    strict: list[bool] = []
    index: dict = {}

    def atom(rel) -> int:
        if type(rel) in _LESS:
            g, st = rel.lhs - rel.rhs, _LESS[type(rel)]
        elif type(rel) in _GREATER:
            g, st = rel.rhs - rel.lhs, _GREATER[type(rel)]
        else:  # refused by the resolver (== and !=)
            raise ValueError(f"not an event atom: {rel}")
        key = (g, st)
        if key not in index:
            index[key] = len(atoms)
            atoms.append(g)
            strict.append(st)
        return index[key]

    def tree(cond):
        if isinstance(cond, sp.And | sp.Or):
            return ("and" if isinstance(cond, sp.And) else "or", tuple(tree(a) for a in cond.args))
        return ("atom", atom(cond))

    conditions = tuple(tree(sp.to_nnf(ev.condition)) for ev in system.events)
    return atoms, tuple(strict), conditions


def hybrid_functions(system, c, T, args, switches=None) -> HybridFunctions:
    """``c``: sympy -> CasADi (the Converter of to_casadi, laws substituted); ``args`` = (t, x, z, p, u) symbols."""
    from ..lower.structural import derivative

    t, x, z, p, u = args
    atoms, strict, trees = event_atoms(system)
    io = ["t", "x", "z", "p", "u"]
    conditions, resets, targets = [], [], []
    for ev, cond in zip(system.events, trees):
        conditions.append(cond)
        targets.append(tuple(r.target for r in ev.resets))
        resets.append(ca.Function("reset", [t, x, z, p, u], [ca.vertcat(*[c(r.value) for r in ev.resets])], io, ["values"])
                      if ev.resets else None)
    g = ca.vertcat(*[c(a) for a in atoms]) if atoms else T(0, 1)
    names = tuple(dict.fromkeys(r.target for ev in system.events for r in ev.resets))
    quantity = {}
    for ev in system.events:
        for r in ev.resets:
            quantity.setdefault(r.target, r.quantity)
    r_exprs = [quantity[n] for n in names]
    r = ca.vertcat(*[c(e) for e in r_exprs]) if r_exprs else T(0, 1)
    kin = tuple(i for i, s in enumerate(system.states) if s.name in set(system.kinetic))
    ys = [system.states[i].symbol for i in kin]
    metric = velocity_rows = target_jac = None
    vel_labels: tuple[str, ...] = ()
    n_pos = len(system.invariants)
    if ys:
        target_jac = ca.Function("target_jac", [t, x, p], [_matrix(c, [[derivative(e, y) for y in ys] for e in r_exprs], T,
                                                                    len(ys))], ["t", "x", "p"], ["R"])
        vel = [k for k in system.invariants if k.residual.free_symbols & set(ys)]
        n_pos = len(system.invariants) - len(vel)
        if system.energy is not None:
            W = [[derivative(derivative(system.energy, a), b) for b in ys] for a in ys]
            metric = ca.Function("metric", [t, x, p], [_matrix(c, W, T, len(ys))], ["t", "x", "p"], ["W"])
        if vel:
            rows = [k.residual for k in vel]
            G = [[derivative(e, y) for y in ys] for e in rows]
            velocity_rows = ca.Function("velocity_rows", [t, x, p], [ca.vertcat(*[c(e) for e in rows]),
                                                                     _matrix(c, G, T, len(ys))],
                                        ["t", "x", "p"], ["c", "G"])
            vel_labels = tuple(k.label or f"line {k.origin.line}" for k in vel)
    return HybridFunctions(
        atoms=ca.Function("event_indicators", [t, x, z, p, u], [g], io, ["g"]),
        strict=tuple(strict), conditions=tuple(conditions), resets=tuple(resets), targets=tuple(targets),
        labels=tuple(ev.label for ev in system.events), lines=tuple(ev.span.line for ev in system.events),
        terminate=tuple(ev.terminate for ev in system.events), target_names=names,
        target_value=ca.Function("target_value", [t, x, p], [r], ["t", "x", "p"], ["r"]),
        target_jac=target_jac, kinetic=kin, metric=metric, velocity_rows=velocity_rows, velocity_labels=vel_labels,
        position_rows=n_pos, switches=switches,
    )


def _matrix(c, rows, T, ncol: int):
    if not rows:
        return T(0, ncol)
    return ca.vertcat(*[ca.horzcat(*[c(e) for e in row]) for row in rows])
