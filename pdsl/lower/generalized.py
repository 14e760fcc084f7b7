"""Generalized coordinates: Euler–Lagrange (with constraints) and Hamilton's equations.

Euler–Lagrange is kept in mass-matrix form, ``M(q) q̈ + Gᵀλ = f``, and never
inverted symbolically; the numeric backend solves it.
"""

from __future__ import annotations

import dataclasses

import sympy as sp

from .. import symbols as S
from ..diagnostics import Collector, PdslError
from ..resolve.model import Model
from .calculus import derivative
from .common import (
    check_finite,
    check_lagrangian_symbols,
    check_momenta_free_of_inputs,
    check_no_unsupported,
    check_symbols,
    derived_invariants,
    make_state,
    outputs_in_state,
    resolve_input_laws,
)
from .group_frames import group_relations
from .ir import Constraint, Equation, SymbolicSystem
from .registry import Formalism, LowerOptions, register


def _coords(model: Model, formalism: str):
    diags = Collector()
    coords = model.variables_of("coord")
    for v in model.variables_of("var"):
        diags.error(
            "MixedFormalism",
            f"`{v.name}` is a `var`, but this model is written with a {formalism}",
            v.span,
            "declare generalized coordinates with `coord` (and momenta with `momentum`)",
        )
    if not coords:
        span = (model.lagrangian or model.hamiltonian).span
        diags.error("MissingDeclaration", f"a {formalism} needs generalized coordinates", span, "declare them: `coord q1, q2`")
    diags.raise_if_any()
    return coords


def lower_lagrangian(model: Model) -> SymbolicSystem:
    """d/dt ∂L/∂q̇ − ∂L/∂q = Q + Gᵀλ, with G q̇ = 0 for the velocity-level constraints."""
    check_no_unsupported(model, {"lagrangian", "constraints", "generalized_forces"}, "lagrangian")
    resolve_input_laws(model)
    coords = _coords(model, "lagrangian")
    if model.variables_of("momentum"):
        v = model.variables_of("momentum")[0]
        raise PdslError.at("MixedFormalism", "`momentum` belongs to a `hamiltonian` model, not a `lagrangian` one", v.span)
    L = model.lagrangian.expr
    span = model.lagrangian.span
    check_finite(L, span, "the lagrangian")
    q = [c.symbol for c in coords]
    v = [S.der(x) for x in q]  # the rate states, named der(q)
    pos_states = [make_state(c.name, c.symbol, c.start, c.span) for c in coords]
    vel_states = [make_state(S.der_name(c.name), S.der(c.symbol), None, c.span) for c in coords]
    acc = [s.rate for s in vel_states]
    check_lagrangian_symbols(model, L, span)

    # generalized forces by coordinate
    Q = {x: sp.Integer(0) for x in q}
    force_origin = {}
    for f in model.generalized_forces:
        Q[f.coord] += f.force
        force_origin[f.coord] = f.span
    n = len(q)
    p = [derivative(L, vi) for vi in v]  # generalized momenta ∂L/∂q̇
    check_momenta_free_of_inputs(model, p, span)
    rows = []
    for i in range(n):
        lhs = sum((derivative(p[i], v[j]) * acc[j] for j in range(n)), sp.Integer(0))
        rhs = derivative(L, q[i]) - sum((derivative(p[i], q[j]) * v[j] for j in range(n)), sp.Integer(0)) - derivative(p[i], S.TIME)
        rhs = rhs + Q[q[i]]
        rows.append([lhs, rhs, f"Euler–Lagrange for {coords[i].name}"])

    # constraints, all at velocity level: G(q) q̇ = 0
    multipliers, constraint_rows, holonomic = [], [], []
    for k, c in enumerate(model.constraints):
        lam = S.multiplier(k + 1)
        multipliers.append(lam)
        if c.kind == "holonomic":
            _check_config_only(c.residual, set(q), c.span, model)
            G = [derivative(c.residual, x) for x in q]
            dt_term = derivative(c.residual, S.TIME)
            holonomic.append(Constraint(residual=c.residual, origin=c.span, label=f"constraint {k + 1}"))
            if all(g == 0 for g in G):
                raise PdslError.at("DegenerateConstraint", "this constraint does not involve any coordinate", c.span)
            vel = sum((G[j] * v[j] for j in range(n)), dt_term)
        else:
            G = [derivative(c.residual, vi) for vi in v]
            vel = c.residual
            extra = (c.residual.free_symbols & {S.der(x) for x in model_symbols(model)}) - set(v)
            if extra:
                raise PdslError.at("BadConstraint", "a velocity constraint may only use der() of coordinates", c.span)
        # d/dt (G q̇ + ∂Φ/∂t) = G q̈ + (∂vel/∂q) q̇ + ∂vel/∂t = 0
        lhs = sum((G[j] * acc[j] for j in range(n)), sp.Integer(0))
        rhs = -sum((derivative(vel, q[j]) * v[j] for j in range(n)), sp.Integer(0)) - derivative(vel, S.TIME)
        constraint_rows.append(Equation(lhs=lhs, rhs=rhs, origin=c.span, label=f"{c.kind} constraint {k + 1} (acceleration level)"))
        for i in range(n):
            rows[i][0] = rows[i][0] - G[i] * lam  # M q̈ − Gᵀλ = f

    kinematic = [
        Equation(lhs=s.rate, rhs=vs.symbol, origin=s.span, label="kinematics") for s, vs in zip(pos_states, vel_states)
    ]
    dynamic = [Equation(lhs=lhs, rhs=rhs, origin=span, label=label) for lhs, rhs, label in rows]
    energy = sum((vi * pi for vi, pi in zip(v, p)), sp.Integer(0)) - L
    _check_regular(model, p, v, span)
    return SymbolicSystem(
        name=model.name,
        doc=model.doc,
        path=model.path,
        formalism="lagrangian",
        states=tuple(pos_states + vel_states),
        algebraics=(),
        multipliers=tuple(multipliers),
        params=model.params,
        inputs=model.inputs,
        outputs=model.outputs,
        neural=model.neural,
        differential=tuple(kinematic + dynamic + constraint_rows),
        algebraic=(),
        energy=energy,
        energy_origin=span,
        constraints=tuple(holonomic),
        span=model.span,
        kinetic=tuple(s.name for s in vel_states),
        conservative=conserves_energy(model, L),
    )


# pieces whose derivative the Euler–Lagrange rows do not see as a smooth flow (a switch, a kink): left to the numeric dE/dt
_NON_SMOOTH = (sp.Piecewise, sp.Heaviside, sp.DiracDelta, sp.sign, sp.Abs, sp.Min, sp.Max, sp.floor, sp.ceiling)


def conserves_energy(model: Model, expr: sp.Expr) -> bool:
    """Whether E (the Jacobi integral q̇·∂L/∂q̇ − L, or H) is constant along every solution by Noether's theorem: the
    Lagrangian or Hamiltonian ``expr`` does not depend on t, directly or through an input, is smooth, and nothing else
    acts (no generalized forces, constraints or events). Then dE/dt is the constant 0 (``SymbolicSystem.conservative``)
    rather than ∇E·ẋ evaluated to roundoff."""
    if model.generalized_forces or model.constraints or model.events:
        return False
    if expr.has(S.TIME) or any(expr.has(u.symbol) for u in model.inputs):
        return False
    return not expr.has(*_NON_SMOOTH)


def model_symbols(model: Model):
    return [v.symbol for v in model.variables]


def _check_config_only(residual, q, span, model):
    bad = {s for s in residual.free_symbols if S.is_der(s)}
    if bad:
        raise AssertionError("holonomic constraint with der")  # classify_constraint guarantees this


def _check_regular(model: Model, p, v, span) -> None:
    """The mass matrix ∂²L/∂q̇² must not be identically singular (checked at a random point)."""

    M = sp.Matrix([[derivative(pi, vj) for vj in v] for pi in p])
    if any(M[i, i] == 0 and all(M[i, j] == 0 for j in range(len(v))) for i in range(len(v))):
        i = next(i for i in range(len(v)) if all(M[i, j] == 0 for j in range(len(v))))
        raise PdslError.at(
            "SingularMassMatrix",
            f"the lagrangian does not depend on der({model.variables_of('coord')[i].name}) quadratically: "
            "its mass matrix is singular",
            span,
            "every coordinate needs a kinetic energy term",
        )


def lower_hamiltonian(model: Model) -> SymbolicSystem:
    """q̇ = ∂H/∂p, ṗ = −∂H/∂q (coords and momenta paired in declaration order)."""
    check_no_unsupported(model, {"hamiltonian", "generalized_forces"}, "hamiltonian")
    resolve_input_laws(model)
    coords = _coords(model, "hamiltonian")
    momenta = model.variables_of("momentum")
    H = model.hamiltonian.expr
    span = model.hamiltonian.span
    if len(momenta) != len(coords):
        raise PdslError.at(
            "UnbalancedSystem",
            f"{len(coords)} coordinate{'s' if len(coords) != 1 else ''} but {len(momenta)} momenta",
            (momenta[0].span if momenta else span),
            "declare one `momentum` per `coord`, in the same order",
        )
    check_finite(H, span, "the hamiltonian")
    allowed = {S.TIME} | {p.symbol for p in model.params} | {u.symbol for u in model.inputs}
    allowed |= {c.symbol for c in coords} | {m.symbol for m in momenta}
    check_symbols(H, allowed, span, "the hamiltonian")
    Q = {c.symbol: sp.Integer(0) for c in coords}
    for f in model.generalized_forces:
        Q[f.coord] += f.force
    q_states = [make_state(c.name, c.symbol, c.start, c.span) for c in coords]
    p_states = [make_state(m.name, m.symbol, m.start, m.span) for m in momenta]
    rows = []
    for qs, ps in zip(q_states, p_states):
        rows.append(Equation(lhs=qs.rate, rhs=derivative(H, ps.symbol), origin=span, label=f"∂H/∂{ps.name}"))
    for qs, ps in zip(q_states, p_states):
        rows.append(
            Equation(lhs=ps.rate, rhs=-derivative(H, qs.symbol) + Q[qs.symbol], origin=span, label=f"−∂H/∂{qs.name}")
        )
    system = SymbolicSystem(
        name=model.name,
        doc=model.doc,
        path=model.path,
        formalism="hamiltonian",
        states=tuple(q_states + p_states),
        algebraics=(),
        multipliers=(),
        params=model.params,
        inputs=model.inputs,
        outputs=model.outputs,
        neural=model.neural,
        differential=tuple(rows),
        algebraic=(),
        energy=H,
        energy_origin=span,
        constraints=(),
        span=model.span,
        kinetic=tuple(s.name for s in p_states),
        conservative=conserves_energy(model, H),
    )
    # an output may read der(q) = ∂H/∂p and der(p) = −∂H/∂q + Q: Hamilton's rows are explicit
    return dataclasses.replace(system, outputs=outputs_in_state(system, {s.symbol for s in system.states}))


def _lower_lagrangian(model: Model, options: LowerOptions) -> SymbolicSystem:
    """The plugin's lowering: the Lagrangian system with Φ, Φ̇ and the velocity constraints as invariants."""
    from dataclasses import replace

    system = lower_lagrangian(model)
    velocity = tuple(
        Constraint(residual=c.residual, origin=c.span, label="velocity constraint")
        for c in model.constraints if c.kind == "velocity"
    )
    positions = {c.symbol for c in model.variables_of("coord")}
    system = replace(system, invariants=derived_invariants(system, positions, velocity))
    if model.groups:  # a group whose constraints Hamel's lowering left here (a learned connection)
        derivation, balances = group_relations(model)
        system = replace(system, derivation=derivation, balances=balances)
    return system


LAGRANGIAN = register(Formalism(
    name="lagrangian", precedence=20, claims=lambda model: model.lagrangian is not None, lower=_lower_lagrangian,
    describe="generalized coordinates with a Lagrangian, generalized forces and constraints (LANGUAGE.md §4, §5)",
))
HAMILTONIAN = register(Formalism(
    name="hamiltonian", precedence=10, claims=lambda model: model.hamiltonian is not None,
    lower=lambda model, options: lower_hamiltonian(model),
    describe="canonical coordinates and momenta with a Hamiltonian (LANGUAGE.md §4)",
))
