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

from dataclasses import dataclass

import numpy as np
import sympy as sp

from .. import symbols as S
from ..diagnostics import PdslError
from ..groups import GROUPS
from ..resolve.model import Model
from .common import check_finite, check_no_unsupported, make_state, resolve_input_laws
from .generalized import _check_lagrangian_symbols, _check_momenta_free_of_inputs
from .ir import Balance, DerivationItem, DerivationSection, Equation, SymbolicSystem
from .registry import Formalism, LowerOptions, register

__all__ = ["lower_hamel", "HAMEL"]


def _pythagoras(e):
    """sin(a)^k -> (1 − cos(a)^2) sin(a)^(k−2) for k ≥ 2: with expansion, a canonical form of polynomials in sin and
    cos of the same angle (every frame of SE2), far cheaper than trigsimp."""
    def is_sin_power(x):
        return x.is_Pow and isinstance(x.base, sp.sin) and x.exp.is_Integer and x.exp >= 2

    for _ in range(8):
        if not e.has(sp.sin):
            return e
        new = sp.expand(e.replace(is_sin_power, lambda x: (1 - sp.cos(x.base.args[0]) ** 2) * x.base ** (x.exp - 2)))
        if new == e:
            return e
        e = new
    return e


def _simp(e):
    """A light simplification for the small frame/connection expressions: expansion, sin² = 1 − cos², common
    factors (the group's trigonometric identities without sympy's trigsimp, which dominated the lowering)."""
    if isinstance(e, sp.MatrixBase):
        return e.applyfunc(_simp)
    e = sp.expand(e)
    if e.has(sp.sin) and e.has(sp.cos):
        e = _pythagoras(e)
    return sp.factor_terms(e)


def _inv(M: sp.Matrix) -> sp.Matrix:
    """The inverse by adjugate and determinant, each lightly simplified (sympy's inv simplifies every pivot)."""
    det = _simp(M.det(method="berkowitz"))
    if det == 0:
        raise ValueError("singular matrix")
    return _simp(M.adjugate() / det)


def _numeric_rank(M: sp.Matrix, point: dict) -> int:
    """The rank of M at a generic point; network calls (a learned connection) take generic values too."""
    from sympy.core.function import AppliedUndef

    if M.shape[0] == 0 or M.shape[1] == 0:
        return 0
    M = M.xreplace(point)
    calls = sorted({c for e in M for c in e.atoms(AppliedUndef)}, key=str)
    if calls:
        rng = np.random.default_rng(7)
        M = M.xreplace({c: sp.Float(rng.uniform(-1.0, 1.0)) for c in calls})
    values = np.array(M.evalf(), dtype=float)
    return int(np.linalg.matrix_rank(values, tol=1e-9 * max(1.0, float(np.max(np.abs(values))))))


def _generic_point(exprs, params) -> dict:
    """Deterministic generic values for every symbol (parameters at their defaults when non-zero)."""
    rng = np.random.default_rng(20261124)
    defaults = {p.symbol: p.default for p in params if p.default}
    symbols = sorted(set().union(*(S.as_expr(e).free_symbols for e in exprs)) if exprs else set(), key=lambda s: s.name)
    return {s: sp.Float(defaults.get(s, 0.3 + rng.random())) for s in symbols}


def _bracket(X: sp.Matrix, Y: sp.Matrix, q) -> sp.Matrix:
    """[X, Y]^j = X^i ∂_i Y^j − Y^i ∂_i X^j (BENCHMARKS D1, Eq. 39)."""
    return Y.jacobian(q) * X - X.jacobian(q) * Y


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


@dataclass
class _Frames:
    """The group reduction of a model's velocity constraints (module docstring)."""

    n: int
    g: list
    r: list
    sigma: int
    G: int
    Ug: sp.Matrix
    dep: list
    ind: list
    Ft: sp.Matrix  # frame of the distribution (columns), shape lifts first
    F: sp.Matrix  # the whole frame: Ft, then the dependent generators
    F_inv: sp.Matrix
    conn: sp.Matrix  # 𝒜^a_α (G × σ)


def _frames(model: Model, group, q, qd, L) -> _Frames:
    n = len(q)
    index = {x: i for i, x in enumerate(q)}
    g = list(group.coords)
    r = [x for x in q if x not in g]
    sigma, G = len(r), len(g)
    kind = GROUPS[group.kind]
    Ug = kind.fields(tuple(g))

    # Ψ: w = (ṙ, ξ) -> q̇, and its inverse (the group's body velocity ξ = U_g⁻¹ ġ)
    Psi = sp.zeros(n, n)
    for a, x in enumerate(r):
        Psi[index[x], a] = 1
    for a in range(G):
        for j, x in enumerate(g):
            Psi[index[x], sigma + a] = Ug[j, a]
    Ug_inv = kind.coframe(tuple(g))  # ξ = U⁻¹ ġ (pdsl.groups)
    Psi_inv = sp.zeros(n, n)
    for a, x in enumerate(r):
        Psi_inv[a, index[x]] = 1
    for a in range(G):
        for j, x in enumerate(g):
            Psi_inv[sigma + a, index[x]] = Ug_inv[a, j]

    # the velocity constraints a(q) q̇ = 0, in (ṙ, ξ): C w = 0
    rows = []
    for c in model.constraints:
        if c.kind != "velocity":
            raise PdslError.at("NotYetSupported", "a holonomic constraint in a model with a `group` is not lowered by "
                               "Hamel's equations yet", c.span, "write it at velocity level, or remove the `group` "
                               "(Lagrange–d'Alembert lowering)")
        a = [sp.diff(c.residual, v) for v in qd]
        rest = sp.expand(c.residual - sum((ai * vi for ai, vi in zip(a, qd)), sp.Integer(0)))
        if rest != 0:
            raise PdslError.at("NotYetSupported", "an affine (time- or input-driven) velocity constraint is not lowered by "
                               "Hamel's equations yet", c.span, "remove the `group` to lower it by Lagrange–d'Alembert")
        if any(ai.free_symbols & set(qd) for ai in a):
            raise PdslError.at("BadConstraint", "a velocity constraint must be linear in der(...)", c.span)
        rows.append(a)
    k = len(rows)
    if k == 0:
        raise PdslError.at("MissingDeclaration", "a `group` reduces velocity constraints, and this model has none",
                           group.span, "add `constraint der(x) = ...`, or remove the `group`")
    C = _simp(sp.Matrix(rows) * Psi)
    point = _generic_point(list(C) + [L], model.params)
    if _numeric_rank(C, point) < k:
        raise PdslError.at("RedundantConstraint", f"the {k} velocity constraints are not independent",
                           model.constraints[0].span, "remove the constraints that follow from the others")
    dep: list[int] = []
    for col in reversed(range(sigma, n)):  # the last generators first
        if _numeric_rank(C[:, dep + [col]], point) > len(dep):
            dep.append(col)
        if len(dep) == k:
            break
    if len(dep) < k:
        raise PdslError.at("NotYetSupported", f"the constraints fix shape velocities, not only group velocities of "
                           f"{group.kind}: the Hamel reduction with this group does not apply", group.span,
                           "choose a group whose directions the constraints fix, or remove the `group`")
    dep.sort()
    ind = [j for j in range(n) if j not in dep]
    D = _simp(-(_inv(C[:, dep]) * C[:, ind]))  # w_dep = D w_ind
    m_ind = len(ind)

    # frame of the distribution: ũ_i = Ψ (e_ind_i + Σ_d D[d, i] e_dep_d); completed by the dependent generators
    T = sp.zeros(n, m_ind)
    for i, j in enumerate(ind):
        T[j, i] = 1
        for d, jd in enumerate(dep):
            T[jd, i] = D[d, i]
    Ft = _simp(Psi * T)
    F = Ft.row_join(Psi[:, dep])
    W_inv = sp.zeros(n, n)  # v = W_inv w
    for i, j in enumerate(ind):
        W_inv[i, j] = 1
    for d, jd in enumerate(dep):
        W_inv[m_ind + d, jd] = 1
        for i, j in enumerate(ind):
            W_inv[m_ind + d, j] = -D[d, i]
    F_inv = _simp(W_inv * Psi_inv)
    from sympy.core.function import AppliedUndef

    if not any(e.atoms(AppliedUndef) for e in F):  # (with a learned connection the check is the same algebra)
        assert _simp(F_inv * F) == sp.eye(n), "the Hamel frame is not inverted by its coframe"

    # connection: ũ_α = ∂_α − 𝒜^a_α u_{σ+a}
    conn = sp.zeros(G, sigma)
    for alpha in range(sigma):
        for d, jd in enumerate(dep):
            conn[jd - sigma, alpha] = -D[d, alpha]

    return _Frames(n=n, g=g, r=r, sigma=sigma, G=G, Ug=Ug, dep=dep, ind=ind, Ft=Ft, F=F, F_inv=F_inv, conn=conn)


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
    _check_lagrangian_symbols(model, L, span)
    q = [c.symbol for c in coords]
    qd = [S.der(x) for x in q]
    _check_momenta_free_of_inputs(model, [sp.diff(L, x) for x in qd], span)
    fr = _frames(model, group, q, qd, L)
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
                c[j, i] = _simp(F_inv * _bracket(cols[j], cols[i], q))

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


def _paper_relations(q, qd, L, r, gen, Ft, sigma, to_v, origin):
    """The paper's full frame (ũ_α for the shapes, every generator), its momenta p̂ = ∂l/∂(ṙ, Ω) with Ω = ξ + 𝒜ṙ and
    the relations ṗ̂_i = Σ ĉ^m_ji p̂_m v̂^j (its Eqs. 72–75 for the disk), in the variables of ``to_v`` (der(q) ->
    expressions of the states). Returns the display items and the :class:`Balance` records."""
    n, G = len(q), len(gen)
    # the paper's full frame: (ũ_α for shapes, every generator); quasi-velocities (ṙ, Ω), Ω = ξ + 𝒜 ṙ
    full = sp.zeros(n, n)
    for alpha in range(sigma):
        full[:, alpha] = Ft[:, alpha]
    for a in range(G):
        full[:, sigma + a] = gen[a]
    full_inv = _inv(full)
    qdot_D = sp.Matrix([to_v[x] for x in qd])
    vhat = _simp(full_inv * qdot_D)  # (ṙ, Ω) on D, in the states
    dLdqd = sp.Matrix([sp.diff(L, x) for x in qd])
    phat = [_simp(sp.expand((full[:, i].T * dLdqd)[0, 0].xreplace(to_v))) for i in range(n)]
    psym = [S.sym(f"p̂[{i + 1}]") for i in range(n)]
    cols = [full[:, i] for i in range(n)]
    balances, rel = [], []
    for i in range(n):
        rate_sym = sp.Integer(0)
        for j in range(n):
            if j == i:
                continue
            cji = _simp(full_inv * _bracket(cols[j], cols[i], q))
            rate_sym += sp.Add(*(cji[m] * psym[m] * vhat[j] for m in range(n)))
        rate_sym = sp.factor_terms(sp.expand(rate_sym))
        rate = sp.expand(rate_sym.xreplace(dict(zip(psym, phat))))
        balances.append(Balance(name=f"p̂[{i + 1}]", quantity=phat[i], rate=rate, origin=origin,
                                label=f"full-frame momentum relation {i + 1} (the paper's Eqs. 72–75 form)"))
        rel.append(DerivationItem.of(f"d/dt p̂[{i + 1}]", rate_sym))
    items_p = tuple(DerivationItem.of(f"p̂[{i + 1}]", phat[i]) for i in range(n)) + tuple(
        DerivationItem.of(f"v̂[{j + 1}]", vhat[j]) for j in range(n))
    return items_p, tuple(rel), tuple(balances)


def _derivation(group, fr: _Frames, q, qd, L, l_D, p_full, c, to_v, vname):
    """What `show` prints, and the full-frame momentum relations (the paper's Eqs. 72–75 form) as balances."""
    r, g, G, sigma, n, m_ind = fr.r, fr.g, fr.G, fr.sigma, fr.n, len(fr.ind)
    Ft, F, dep = fr.Ft, fr.F, fr.dep
    gen = _generator_vectors(fr, q)
    u_names = [f"∂{x.name}" for x in r] + [f"u{sigma + a + 1}" for a in range(G)]
    items_group = [DerivationItem.of(f"u{sigma + a + 1}", _field_text(gen[a], q)) for a in range(G)]
    shape = ", ".join(x.name for x in r) or "none"
    sec = [DerivationSection.of(
        f"Hamel reduction: group {group.kind}({', '.join(x.name for x in g)}), shape ({shape})",
        tuple(items_group),
        f"{GROUPS[group.kind].describe}; ξ = U(g)⁻¹ ġ (pdsl.groups states the conventions)")]
    conn_items = _connection_items(fr)
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

    items_p, items_rel, balances = _paper_relations(q, qd, L, r, gen, Ft, sigma, to_v, group.span)
    sec.append(DerivationSection.of("Full-frame momenta p̂ = ∂l/∂(ṙ, Ω) of the paper (frame ũ_α, u_{σ+a}; Ω = ξ + 𝒜ṙ)", items_p))
    sec.append(DerivationSection.of("Momentum relations ṗ̂_i = Σ ĉ^m_ji p̂_m v̂^j (without u_i[l], as in the paper)", items_rel,
                                    "the paper's form: they hold along the rolling disk's motion (BENCHMARKS D4.1) but are not "
                                    "a law of every system; `simulate` reports their residual along the trajectory"))
    return tuple(sec), balances


def _connection_items(fr: _Frames) -> tuple[DerivationItem, ...]:
    return tuple(DerivationItem.of(f"𝒜^{a + 1}_{fr.r[alpha].name}", fr.conn[a, alpha])
                 for alpha in range(fr.sigma) for a in range(fr.G))


def _generator_vectors(fr: _Frames, q) -> list[sp.Matrix]:
    index = {x: i for i, x in enumerate(q)}
    gen = []
    for a in range(fr.G):
        vec = sp.zeros(len(q), 1)
        for j, x in enumerate(fr.g):
            vec[index[x]] = fr.Ug[j, a]
        gen.append(vec)
    return gen


def group_relations(model: Model) -> tuple[tuple[DerivationSection, ...], tuple[Balance, ...]]:
    """For a model with a group lowered by Lagrange–d'Alembert (a learned connection, whose constraints call a
    network): its connection and the paper's full-frame momentum relations in the states (q, der(q)) — the
    quantities of the paper's teacher-forced Eq. 18 loss (``pdsl fit --momentum-weight``)."""
    (group,) = model.groups
    q = [c.symbol for c in model.variables_of("coord")]
    qd = [S.der(x) for x in q]
    L = model.lagrangian.expr
    fr = _frames(model, group, q, qd, L)
    items_p, items_rel, balances = _paper_relations(q, qd, L, fr.r, _generator_vectors(fr, q), fr.Ft, fr.sigma,
                                                    {x: x for x in qd}, group.span)
    return (DerivationSection.of(f"Connection 𝒜 of group {group.kind}({', '.join(x.name for x in fr.g)})",
                                 _connection_items(fr)),
            DerivationSection.of("Momentum relations of the paper (Eqs. 72–75 form) with this connection", items_rel,
                                 "the quantities of the teacher-forced Eq. 18 loss (`pdsl fit --momentum-weight`)")), balances


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
