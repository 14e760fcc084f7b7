"""The geometry of a symmetry group acting on a Lagrangian system with velocity constraints (LANGUAGE.md §5;
BENCHMARKS D1–D4): the frame of the constraint distribution, the connection 𝒜 and the paper's full-frame momentum
relations. Hamel's lowering (:mod:`pdsl.lower.hamel`) builds its equations on it, and the Lagrange–d'Alembert
lowering (:mod:`pdsl.lower.generalized`) shows the connection and relations of a learned one
(:func:`group_relations`); neither formalism imports the other. The conventions are in hamel's docstring.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import sympy as sp

from .. import symbols as S
from ..diagnostics import PdslError
from ..groups import GROUPS
from ..resolve.model import Model
from .ir import Balance, DerivationItem, DerivationSection

__all__ = ["Frames", "group_frames", "group_relations", "paper_relations", "connection_items", "generator_vectors",
           "bracket", "light_simplify", "adjugate_inverse"]


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


def light_simplify(e):
    """A light simplification for the small frame/connection expressions: expansion, sin² = 1 − cos², common
    factors (the group's trigonometric identities without sympy's trigsimp, which dominated the lowering)."""
    if isinstance(e, sp.MatrixBase):
        return e.applyfunc(light_simplify)
    e = sp.expand(e)
    if e.has(sp.sin) and e.has(sp.cos):
        e = _pythagoras(e)
    return sp.factor_terms(e)


def adjugate_inverse(M: sp.Matrix) -> sp.Matrix:
    """The inverse by adjugate and determinant, each lightly simplified (sympy's inv simplifies every pivot)."""
    det = light_simplify(M.det(method="berkowitz"))
    if det == 0:
        raise ValueError("singular matrix")
    return light_simplify(M.adjugate() / det)


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


def bracket(X: sp.Matrix, Y: sp.Matrix, q) -> sp.Matrix:
    """[X, Y]^j = X^i ∂_i Y^j − Y^i ∂_i X^j (BENCHMARKS D1, Eq. 39)."""
    return Y.jacobian(q) * X - X.jacobian(q) * Y


@dataclass
class Frames:
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


def group_frames(model: Model, group, q, qd, L) -> Frames:
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
    C = light_simplify(sp.Matrix(rows) * Psi)
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
    D = light_simplify(-(adjugate_inverse(C[:, dep]) * C[:, ind]))  # w_dep = D w_ind
    m_ind = len(ind)

    # frame of the distribution: ũ_i = Ψ (e_ind_i + Σ_d D[d, i] e_dep_d); completed by the dependent generators
    T = sp.zeros(n, m_ind)
    for i, j in enumerate(ind):
        T[j, i] = 1
        for d, jd in enumerate(dep):
            T[jd, i] = D[d, i]
    Ft = light_simplify(Psi * T)
    F = Ft.row_join(Psi[:, dep])
    W_inv = sp.zeros(n, n)  # v = W_inv w
    for i, j in enumerate(ind):
        W_inv[i, j] = 1
    for d, jd in enumerate(dep):
        W_inv[m_ind + d, jd] = 1
        for i, j in enumerate(ind):
            W_inv[m_ind + d, j] = -D[d, i]
    F_inv = light_simplify(W_inv * Psi_inv)
    from sympy.core.function import AppliedUndef

    if not any(e.atoms(AppliedUndef) for e in F):  # (with a learned connection the check is the same algebra)
        assert light_simplify(F_inv * F) == sp.eye(n), "the Hamel frame is not inverted by its coframe"

    # connection: ũ_α = ∂_α − 𝒜^a_α u_{σ+a}
    conn = sp.zeros(G, sigma)
    for alpha in range(sigma):
        for d, jd in enumerate(dep):
            conn[jd - sigma, alpha] = -D[d, alpha]

    return Frames(n=n, g=g, r=r, sigma=sigma, G=G, Ug=Ug, dep=dep, ind=ind, Ft=Ft, F=F, F_inv=F_inv, conn=conn)


def paper_relations(q, qd, L, r, gen, Ft, sigma, to_v, origin):
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
    full_inv = adjugate_inverse(full)
    qdot_D = sp.Matrix([to_v[x] for x in qd])
    vhat = light_simplify(full_inv * qdot_D)  # (ṙ, Ω) on D, in the states
    dLdqd = sp.Matrix([sp.diff(L, x) for x in qd])
    phat = [light_simplify(sp.expand((full[:, i].T * dLdqd)[0, 0].xreplace(to_v))) for i in range(n)]
    psym = [S.sym(f"p̂[{i + 1}]") for i in range(n)]
    cols = [full[:, i] for i in range(n)]
    balances, rel = [], []
    for i in range(n):
        rate_sym = sp.Integer(0)
        for j in range(n):
            if j == i:
                continue
            cji = light_simplify(full_inv * bracket(cols[j], cols[i], q))
            rate_sym += sp.Add(*(cji[m] * psym[m] * vhat[j] for m in range(n)))
        rate_sym = sp.factor_terms(sp.expand(rate_sym))
        rate = sp.expand(rate_sym.xreplace(dict(zip(psym, phat))))
        balances.append(Balance(name=f"p̂[{i + 1}]", quantity=phat[i], rate=rate, origin=origin,
                                label=f"full-frame momentum relation {i + 1} (the paper's Eqs. 72–75 form)"))
        rel.append(DerivationItem.of(f"d/dt p̂[{i + 1}]", rate_sym))
    items_p = tuple(DerivationItem.of(f"p̂[{i + 1}]", phat[i]) for i in range(n)) + tuple(
        DerivationItem.of(f"v̂[{j + 1}]", vhat[j]) for j in range(n))
    return items_p, tuple(rel), tuple(balances)


def connection_items(fr: Frames) -> tuple[DerivationItem, ...]:
    return tuple(DerivationItem.of(f"𝒜^{a + 1}_{fr.r[alpha].name}", fr.conn[a, alpha])
                 for alpha in range(fr.sigma) for a in range(fr.G))


def generator_vectors(fr: Frames, q) -> list[sp.Matrix]:
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
    fr = group_frames(model, group, q, qd, L)
    items_p, items_rel, balances = paper_relations(q, qd, L, fr.r, generator_vectors(fr, q), fr.Ft, fr.sigma,
                                                    {x: x for x in qd}, group.span)
    return (DerivationSection.of(f"Connection 𝒜 of group {group.kind}({', '.join(x.name for x in fr.g)})",
                                 connection_items(fr)),
            DerivationSection.of("Momentum relations of the paper (Eqs. 72–75 form) with this connection", items_rel,
                                 "the quantities of the teacher-forced Eq. 18 loss (`pdsl fit --momentum-weight`)")), balances
