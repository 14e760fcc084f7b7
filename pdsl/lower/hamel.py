"""Hamel's equations in quasi-velocities on a constraint distribution (LANGUAGE.md §5; BENCHMARKS D1–D4).

A model with a ``lagrangian``, velocity constraints ``a(q) q̇ = 0`` and ``group G(g…)`` lowers here.
The coordinates split into the group's ``g`` and the shape ``r`` (the others). With the group's
generator fields ``u_{σ+a}`` (pdsl.groups) every velocity is ``q̇ = ṙ^α ∂_α + ξ^a u_{σ+a}``, so the
constraints read ``C(q)·(ṙ, ξ) = 0``. They are solved for ``k`` of the group velocities (the
*dependent* ones, chosen from the last generator back); the others, and every shape velocity, are
the independent quasi-velocities ``v`` on the distribution D. This gives

* the connection 𝒜: the horizontal lift of ``∂_α`` is ``ũ_α = ∂_α − 𝒜^a_α u_{σ+a}`` (𝒜^a = 0 for
  a free group direction) — for the rolling disk, 𝒜 = (0, −R cos φ, −R sin φ) (BENCHMARKS D4.1);
* a frame of D, ``ũ_i`` (one per independent quasi-velocity), completed by the dependent
  generators ``u_d`` to a frame of the whole tangent space, with ``q̇ = Σ v^i ũ_i``;
* the reduced Lagrangian ``l(q, v) = L(q, Σ v^i u_i)``, momenta ``p_i = ∂l/∂v^i``, brackets
  ``[u_j, u_i] = c^m_{ji} u_m`` (BENCHMARKS D1, Eq. 39), and Hamel's equations on D
  (Theorem 3.5; the dependent quasi-velocities are zero)::

      d/dt ∂l/∂v^i = Σ_{j∈D} Σ_m c^m_{ji} ∂l/∂v^m v^j + u_i[l] + Q_i,      i ∈ D.

  No multipliers; the states are (q, v): n + (n − k). ``Q_i = Q·ũ_i`` projects generalized forces.

The paper's full-frame momentum relations (its Eqs. 72–75 for the disk) are also derived: with the
frame (ũ_α, u_{σ+1}, …) and quasi-velocities (ṙ, Ω), Ω = ξ + 𝒜 ṙ, the momenta p̂ = ∂l/∂(ṙ, Ω) obey
``ṗ̂_i = Σ ĉ^m_{ji} p̂_m v̂^j`` along the constrained motion of the disk (the paper drops the u_i[l]
terms; BENCHMARKS D4.1 flags it). They are shown and kept as :class:`~.ir.Balance` records, whose
residual ``simulate`` reports — for another system they may not hold, and the report says so.
"""

from __future__ import annotations

import sympy as sp

from .. import symbols as S
from ..diagnostics import PdslError
from ..groups import GROUPS
from ..resolve.model import Model
from .common import (
    check_finite,
    check_lagrangian_symbols,
    check_momenta_free_of_inputs,
    check_no_unsupported,
    make_state,
    resolve_input_laws,
)
from .group_frames import (
    Frames,
    bracket,
    connection_items,
    generator_vectors,
    group_frames,
    light_simplify,
    paper_relations,
)
from .ir import DerivationItem, DerivationSection, Equation, SymbolicSystem
from .registry import Formalism, LowerOptions, register

__all__ = ["lower_hamel", "HAMEL"]


def _field_text(vec: sp.Matrix, q) -> sp.Expr:
    """A vector field as Σ coefficient·∂q for display."""
    return sp.Add(*(vec[j] * S.sym(f"∂{x.name}") for j, x in enumerate(q)))


def _quasi_name(model: Model) -> str:
    taken = {v.name for v in model.variables} | {p.name for p in model.params} | {u.name for u in model.inputs}
    taken |= {o.name for o in model.outputs}
    for base in ("v", "nu", "qv", "quasi"):
        if base not in taken:
            return base
    return "hamel_v"


def lower_hamel(model: Model) -> SymbolicSystem:
    check_no_unsupported(model, {"lagrangian", "constraints", "generalized_forces"}, "lagrangian")
    resolve_input_laws(model)
    (group,) = model.groups
    coords = model.variables_of("coord")
    if not coords or model.variables_of("var") or model.variables_of("momentum"):
        raise PdslError.at("MixedFormalism", "a `group` acts on the generalized coordinates of a `lagrangian` model",
                           group.span, "declare the coordinates with `coord` and write the model with a `lagrangian`")
    L = model.lagrangian.expr
    span = model.lagrangian.span
    check_finite(L, span, "the lagrangian")
    check_lagrangian_symbols(model, L, span)
    q = [c.symbol for c in coords]
    qd = [S.der(x) for x in q]
    check_momenta_free_of_inputs(model, [sp.diff(L, x) for x in qd], span)
    fr = group_frames(model, group, q, qd, L)
    n, r, sigma, ind, Ft, F, F_inv, m_ind = fr.n, fr.r, fr.sigma, fr.ind, fr.Ft, fr.F, fr.F_inv, len(fr.ind)

    vname = _quasi_name(model)
    v_all = [S.sym(f"{vname}[{i + 1}]") for i in range(n)]
    v = v_all[:m_ind]
    zero_dep = {s: sp.Integer(0) for s in v_all[m_ind:]}
    qdot_full = F * sp.Matrix(v_all)
    qdot = [sp.expand(e) for e in Ft * sp.Matrix(v)]
    to_v = dict(zip(qd, qdot))
    l_full = sp.expand(L.xreplace(dict(zip(qd, qdot_full))))
    l_D = l_full.xreplace(zero_dep)
    p_full = [sp.expand(sp.diff(l_full, vi).xreplace(zero_dep)) for vi in v_all]

    # brackets of the frame of D, in the whole frame: [ũ_j, ũ_i] = c^m_{ji} u_m
    cols = [Ft[:, i] for i in range(m_ind)]
    c = {}
    for i in range(m_ind):
        for j in range(m_ind):
            if i != j:
                c[j, i] = light_simplify(F_inv * bracket(cols[j], cols[i], q))

    Q = {x: sp.Integer(0) for x in q}
    for f in model.generalized_forces:
        Q[f.coord] += f.force
    states_q = [make_state(cc.name, cc.symbol, cc.start, cc.span) for cc in coords]
    states_v = [make_state(f"{vname}[{i + 1}]", v[i], None, span) for i in range(m_ind)]
    vdot = [s.rate for s in states_v]
    eqs = [Equation(lhs=s.rate, rhs=qdot[j], origin=s.span, label="kinematics on the distribution")
           for j, s in enumerate(states_q)]
    labels = [f"ṙ of {x.name}" for x in r] + [f"free group velocity ξ{jd - sigma + 1}" for jd in ind[sigma:]]
    for i in range(m_ind):
        P = p_full[i]
        lhs = sp.Add(*(sp.diff(P, v[j]) * vdot[j] for j in range(m_ind)))
        dPdt = sp.Add(*(sp.diff(P, x) * qdot[kk] for kk, x in enumerate(q))) + sp.diff(P, S.TIME)
        bracket_terms = sp.Add(*(c[j, i][m] * p_full[m] * v[j] for j in range(m_ind) if j != i for m in range(n)))
        u_l = sp.Add(*(Ft[kk, i] * sp.diff(l_full, x) for kk, x in enumerate(q))).xreplace(zero_dep)
        force = sp.Add(*(Ft[kk, i] * Q[x] for kk, x in enumerate(q)))
        rhs = sp.expand(-dPdt + bracket_terms + u_l + force)
        eqs.append(Equation(lhs=sp.expand(lhs), rhs=rhs, origin=span, label=f"Hamel's equation for {vname}[{i + 1}] ({labels[i]})"))

    energy = sp.expand(sum((x * sp.diff(L, x) for x in qd), sp.Integer(0)) - L).xreplace(to_v)
    report = tuple([(s.name, s.symbol) for s in states_q] + [(S.der_name(x.name), e) for x, e in zip(q, qdot)]
                   + [(s.name, s.symbol) for s in states_v])
    from dataclasses import replace

    outputs = tuple(replace(o, expr=o.expr.xreplace(to_v)) for o in model.outputs)

    derivation, balances = _derivation(group, fr, q, qd, L, l_D, p_full, c, to_v, vname)
    return SymbolicSystem(
        name=model.name, doc=model.doc, path=model.path, formalism="hamel",
        states=tuple(states_q + states_v), algebraics=(), multipliers=(),
        params=model.params, inputs=model.inputs, outputs=outputs, neural=model.neural,
        differential=tuple(eqs), algebraic=(), energy=energy, energy_origin=span, constraints=(),
        span=model.span, report=report, derivation=derivation, balances=balances,
    )


def _derivation(group, fr: Frames, q, qd, L, l_D, p_full, c, to_v, vname):
    """What `show` prints, and the full-frame momentum relations (the paper's Eqs. 72–75 form) as balances."""
    r, g, G, sigma, n, m_ind = fr.r, fr.g, fr.G, fr.sigma, fr.n, len(fr.ind)
    Ft, F, dep = fr.Ft, fr.F, fr.dep
    gen = generator_vectors(fr, q)
    u_names = [f"∂{x.name}" for x in r] + [f"u{sigma + a + 1}" for a in range(G)]
    items_group = [DerivationItem.of(f"u{sigma + a + 1}", _field_text(gen[a], q)) for a in range(G)]
    shape = ", ".join(x.name for x in r) or "none"
    sec = [DerivationSection.of(
        f"Hamel reduction: group {group.kind}({', '.join(x.name for x in g)}), shape ({shape})",
        tuple(items_group),
        f"{GROUPS[group.kind].describe}; ξ = U(g)⁻¹ ġ (pdsl.groups states the conventions)")]
    conn_items = connection_items(fr)
    sec.append(DerivationSection.of("Connection 𝒜 (horizontal lift ũ_α = ∂_α − 𝒜^a_α u_{σ+a})", conn_items,
                                    "" if conn_items else "no shape coordinates: the distribution is spanned by group directions"))
    frame = [DerivationItem.of(f"ũ{i + 1}  (pairs with {vname}[{i + 1}])", _field_text(Ft[:, i], q)) for i in range(m_ind)]
    frame += [DerivationItem.of(f"{u_names[jd]}  (complement: {vname}[{m_ind + d + 1}] = 0 on D)", _field_text(F[:, m_ind + d], q))
              for d, jd in enumerate(dep)]
    sec.append(DerivationSection.of("Frame of the constraint distribution D (q̇ = Σ v^i ũ_i)", tuple(frame)))
    sec.append(DerivationSection.of("Reduced Lagrangian on D", (DerivationItem.of("l", l_D),)))
    sec.append(DerivationSection.of("Momenta p_i = ∂l/∂v^i (on D)",
                                 tuple(DerivationItem.of(f"p[{i + 1}]", p_full[i]) for i in range(n))))
    sc = tuple(DerivationItem.of(f"c^{m + 1}_{j + 1}{i + 1}", c[j, i][m]) for (j, i) in sorted(c) for m in range(n)
               if j < i and c[j, i][m] != 0)
    sec.append(DerivationSection.of("Structure coefficients [ũ_j, ũ_i] = c^m_ji u_m (nonzero, j < i; c^m_ij = −c^m_ji)", sc,
                                 "" if sc else "all brackets of the frame of D vanish"))

    items_p, items_rel, balances = paper_relations(q, qd, L, r, gen, Ft, sigma, to_v, group.span)
    sec.append(DerivationSection.of("Full-frame momenta p̂ = ∂l/∂(ṙ, Ω) of the paper (frame ũ_α, u_{σ+a}; Ω = ξ + 𝒜ṙ)", items_p))
    sec.append(DerivationSection.of("Momentum relations ṗ̂_i = Σ ĉ^m_ji p̂_m v̂^j (without u_i[l], as in the paper)", items_rel,
                                    "the paper's form: they hold along the rolling disk's motion (BENCHMARKS D4.1) but are not "
                                    "a law of every system; `simulate` reports their residual along the trajectory"))
    return tuple(sec), balances


def _lower(model: Model, options: LowerOptions) -> SymbolicSystem:
    return lower_hamel(model)


def _claims(model: Model) -> bool:
    """A lagrangian with a group, whose constraints have known coefficients. A learned connection (`distribution
    learn`: constraints that call a network) lowers by Lagrange–d'Alembert, whose motion is the same."""
    from sympy.core.function import AppliedUndef

    return (model.lagrangian is not None and bool(model.groups)
            and not any(c.residual.atoms(AppliedUndef) for c in model.constraints))


HAMEL = register(Formalism(
    name="hamel", precedence=25, claims=_claims, lower=_lower,
    describe="a lagrangian with a symmetry `group` and velocity constraints: Hamel's equations on the distribution (§5)",
))
