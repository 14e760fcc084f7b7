"""Cartesian mechanics with explicit constraints (BENCHMARKS Part A, [P0]).

Bodies are point collections (A2.2): a point mass has one node, a rigid body of
``dim`` d its centre plus d principal-axis points. The state is the flat vector
x of all node coordinates (body by body, node by node, axis by axis) with either

* momenta p (``"hamiltonian"``, Eq. 6): H = ½pᵀM⁻¹p + V, Ψ = [Φ; DΦ M⁻¹p], the
  projected flow ż = P J∇H written as the linear system
  ``ż − J DΨᵀμ = J∇H (+ forces)``, ``DΨ ż = 0`` with 2C multipliers μ; or
* velocities v (``"lagrangian"``, Eq. 7): ``M v̇ − DΦᵀλ = −∇V + F``,
  ``DΦ v̇ = −(∂(DΦ v)/∂x) v`` with C multipliers λ.

M is constant (Eq. 9 blocks), so M⁻¹ is taken in closed form (A2.2); nothing
configuration-dependent is ever inverted symbolically: the backend solves
A(x)·w = b numerically.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations

import numpy as np
import sympy as sp

from .. import symbols as S
from ..diagnostics import Collector, PdslError, Span
from ..resolve.model import Body, Connector, Model, PointRef
from .common import FORMULATIONS, check_finite, check_no_unsupported, make_state, resolve_input_laws
from .ir import Constraint, Equation, State, SymbolicSystem

__all__ = ["lower_cartesian", "node_mass_matrix", "node_mass_inverse"]

_FROZEN = dict(frozen=True, slots=True, kw_only=True)
_RANK_TOL = 1e-9  # relative singular-value threshold of the constraint Gram matrix


# ======================================================================= mass matrix
def node_mass_matrix(mass, moments) -> sp.Matrix:
    """Eq. 9: m·[[1 + Σλ, −λᵀ], [−λ, diag λ]] on the node index ([[m]] for a point mass)."""
    lam = list(moments)
    n = len(lam) + 1
    M = sp.zeros(n, n)
    M[0, 0] = 1 + sum(lam, sp.Integer(0))
    for i, li in enumerate(lam, start=1):
        M[0, i] = M[i, 0] = -li
        M[i, i] = li
    return mass * M


def node_mass_inverse(mass, moments) -> sp.Matrix:
    """A2.2 closed form: M⁻¹ = m⁻¹(11ᵀ + diag(0, 1/λ₁, …, 1/λ_d))."""
    lam = list(moments)
    n = len(lam) + 1
    Minv = sp.ones(n, n)
    for i, li in enumerate(lam, start=1):
        Minv[i, i] += 1 / li
    return Minv / mass


def _block_diag(blocks: list[sp.Matrix]) -> sp.Matrix:
    return sp.diag(*blocks) if blocks else sp.zeros(0, 0)


# ======================================================================= layout
@dataclass(**_FROZEN)
class _Layout:
    """The flat coordinate vector x and the constant block-diagonal M, M⁻¹ (Eq. 9 ⊗ I_d)."""

    coords: tuple[sp.Symbol, ...]
    spans: tuple[Span, ...]  # per coordinate, the statement of its body
    mass: sp.ImmutableMatrix
    mass_inv: sp.ImmutableMatrix
    centres: tuple[tuple[Body, sp.ImmutableMatrix], ...]  # per body, its centre node position


def _layout(model: Model) -> _Layout:
    eye = sp.eye(model.space)
    coords, spans, blocks, inv_blocks, centres = [], [], [], [], []
    for body in model.bodies:
        for node in body.nodes:
            coords.extend(node)
            spans.extend([body.span] * len(node))
        blocks.append(sp.kronecker_product(node_mass_matrix(body.mass, body.moments), eye))
        inv_blocks.append(sp.kronecker_product(node_mass_inverse(body.mass, body.moments), eye))
        centres.append((body, sp.ImmutableMatrix(body.nodes[0])))
    return _Layout(
        coords=tuple(coords),
        spans=tuple(spans),
        mass=_block_diag(blocks).as_immutable(),
        mass_inv=_block_diag(inv_blocks).as_immutable(),
        centres=tuple(centres),
    )


def _rename_axis(symbol: sp.Symbol, prefix: str) -> str:
    """``b1.a1.x`` -> ``b1.a1.vx`` (prefix ``v``) or ``b1.a1.px`` (prefix ``p``)."""
    head, axis = symbol.name.rsplit(".", 1)
    return f"{head}.{prefix}{axis}"


# ======================================================================= constraints Φ(x)
@dataclass(**_FROZEN)
class _Row:
    """One holonomic constraint row Φ_k(x) = 0 with the statement that generated it."""

    residual: sp.Expr
    origin: Span
    label: str


def _rigidity_rows(body: Body) -> list[_Row]:
    """A2.3: ‖x_i − x_j‖² − l_ij² for every node pair, l = 1 to the centre, √2 between axis points."""
    rows = []
    for i, j in combinations(range(len(body.nodes)), 2):
        d = sp.Matrix(body.nodes[i]) - sp.Matrix(body.nodes[j])
        length_sq = 1 if i == 0 else 2
        rows.append(_Row(residual=sp.expand(d.dot(d) - length_sq), origin=body.span, label=f"rigidity {body.name}[{i}–{j}]"))
    return rows


def _pair_label(c: Connector) -> str:
    return f"{c.kind} {c.a.text}–{c.b.text}"


def _connector_rows(c: Connector) -> list[_Row]:
    """A2.6 links ‖A − B‖² − l² and A2.4 joints A − B = 0 (d rows; positions already X c~)."""
    d = sp.Matrix(c.a.position) - sp.Matrix(c.b.position)
    if c.kind == "link":
        if "length" not in c.options:
            raise PdslError.at("MissingArgument", "`link` needs `length = ...`", c.span, "link A, B, length = l")
        length = c.options["length"]
        return [_Row(residual=sp.expand(d.dot(d) - length**2), origin=c.span, label=_pair_label(c))]
    if c.kind == "joint":
        axes = "xyz"
        return [
            _Row(residual=sp.expand(d[k]), origin=c.span, label=f"{_pair_label(c)} ({axes[k]})") for k in range(d.rows)
        ]
    if c.kind == "hinge":
        raise PdslError.at(
            "NotYetSupported",
            "`hinge` is not lowered yet: its axis rows are redundant in 3D and need a rank-aware treatment",
            c.span,
            "use `joint` (a ball joint) for now",
        )
    return []  # springs and dampers are not constraints


def _constraint_rows(model: Model) -> list[_Row]:
    rows = [r for body in model.bodies for r in _rigidity_rows(body)]
    for c in model.connectors:
        rows.extend(_connector_rows(c))
    return rows


def _check_counts(layout: _Layout, rows: list[_Row]) -> None:
    """DOF = n·d − C must be ≥ 0 (A2.3); report the row that over-constrains the system."""
    n = len(layout.coords)
    if len(rows) > n:
        raise PdslError.at(
            "OverConstrained",
            f"{len(rows)} constraint equations for {n} Cartesian coordinates: "
            f"the system has {n - len(rows)} degrees of freedom",
            rows[n].origin,
            "remove redundant links or joints (each joint adds one equation per axis)",
        )


# ======================================================================= potential and forces
def _potential(model: Model, layout: _Layout) -> sp.Expr:
    """V = Σ_bodies −m g (direction · x_centre) + Σ springs ½k(‖A−B‖ − rest)² + Σ `potential` (A2.7)."""
    V = sp.Integer(0)
    for grav in model.gravity:
        for body, centre in layout.centres:
            V += -body.mass * grav.g * (sp.Matrix(grav.direction).dot(centre))
    for c in model.connectors:
        if c.kind == "spring":
            d = sp.Matrix(c.a.position) - sp.Matrix(c.b.position)
            rest = c.options.get("rest", sp.Integer(0))
            V += c.options["k"] * (sp.sqrt(d.dot(d)) - rest) ** 2 / 2
    for p in model.potentials:
        check_finite(p.expr, p.span, "a potential")
        V += p.expr
    return V


def _point_jacobian(point: PointRef, coords) -> sp.Matrix:
    """J = ∂(position)/∂x; constant because positions are linear in the nodes (A2.7)."""
    return sp.Matrix(point.position).jacobian(list(coords))


def _generalized_force(model: Model, layout: _Layout, velocity: list[sp.Expr]) -> sp.Matrix:
    """F = Σ Jᵀf for point forces, − ∂R/∂ẋ for dampers R = ½c‖J_A ẋ − J_B ẋ‖² (A2.7).

    ``velocity`` is ẋ expressed in the state (v, or M⁻¹p); ``der(coordinate)`` in a
    force expression is replaced by it.
    """
    coords = list(layout.coords)
    rates = {S.der(x): v for x, v in zip(coords, velocity)}
    xdot = sp.Matrix(velocity)
    F = sp.zeros(len(coords), 1)
    for f in model.forces:
        F += _point_jacobian(f.at, coords).T * sp.Matrix(f.force).xreplace(rates)
    for c in model.connectors:
        if c.kind == "damper":
            Jrel = _point_jacobian(c.a, coords) - _point_jacobian(c.b, coords)
            F += -c.options["c"] * Jrel.T * (Jrel * xdot)
    return F


# ======================================================================= singular constraints
def _generic_configuration(layout: _Layout, phi: list[sp.Expr], subs: dict) -> np.ndarray:
    """A deterministic generic point (seed 0), pulled onto Φ = 0 by Gauss–Newton when possible.

    Bodies have no start values yet, so the check runs at this point rather than
    at the initial state; if the projection does not converge, the generic
    (off-manifold) point is used, which still detects structural redundancy.
    """
    x = np.random.default_rng(0).normal(size=len(layout.coords))
    f = sp.lambdify([layout.coords], [e.xreplace(subs) for e in phi], "numpy")
    Jf = sp.lambdify([layout.coords], sp.Matrix(phi).jacobian(list(layout.coords)).xreplace(subs), "numpy")
    for _ in range(50):
        r = np.asarray(f(x), dtype=float)
        if np.max(np.abs(r)) < 1e-12:
            break
        x = x - np.linalg.lstsq(np.asarray(Jf(x), dtype=float), r, rcond=None)[0]
    return x if np.all(np.isfinite(x)) else np.random.default_rng(0).normal(size=len(layout.coords))


def _check_singular(model: Model, layout: _Layout, rows: list[_Row]) -> None:
    """DΦ M⁻¹ DΦᵀ must be invertible (A1.2): otherwise report the rows involved, by statement."""
    if not rows:
        return
    subs = {p.symbol: p.default for p in model.params}
    phi = [r.residual for r in rows]
    extra = set().union(*(e.xreplace(subs).free_symbols for e in phi)) - set(layout.coords)
    if extra:  # lengths depending on inputs or networks: nothing numeric to check
        return
    x = _generic_configuration(layout, phi, subs)
    D = np.asarray(sp.lambdify([layout.coords], sp.Matrix(phi).jacobian(list(layout.coords)).xreplace(subs), "numpy")(x), dtype=float)
    Minv = np.asarray(layout.mass_inv.xreplace(subs), dtype=float)
    G = D @ Minv @ D.T
    w, V = np.linalg.eigh(G)
    small = w <= _RANK_TOL * max(w.max(), 1.0)
    if not small.any():
        return
    diags = Collector()
    involved = np.abs(V[:, small]).max(axis=1) > 1e-6
    names = sorted({rows[k].label for k in np.flatnonzero(involved)})
    for k in np.flatnonzero(involved):
        diags.error(
            "SingularConstraints",
            f"the constraints are redundant or contradictory ({int(small.sum())} dependent of {len(rows)}); "
            f"involved: {', '.join(names)}",
            rows[k].origin,
            "remove the duplicate link/joint; DΦ M⁻¹ DΦᵀ must be invertible",
        )
    diags.raise_if_any()


# ======================================================================= formulations
def _lagrangian_system(model, layout, rows, V) -> tuple[list[State], list[sp.Symbol], list[Equation], sp.Expr]:
    """Eq. 7 in linear-implicit form: rate(x) = v, M v̇ − DΦᵀλ = −∇V + F, DΦ v̇ = −(∂(DΦv)/∂x) v."""
    x = list(layout.coords)
    pos = [make_state(s.name, s, None, span) for s, span in zip(x, layout.spans)]
    vel = [make_state(_rename_axis(s, "v"), S.sym(_rename_axis(s, "v")), None, span) for s, span in zip(x, layout.spans)]
    v = sp.Matrix([s.symbol for s in vel])
    acc = sp.Matrix([s.rate for s in vel])
    lam = [S.multiplier(k + 1) for k in range(len(rows))]
    D = sp.Matrix([r.residual for r in rows]).jacobian(x) if rows else sp.zeros(0, len(x))
    force = -sp.Matrix([V]).jacobian(x).T + _generalized_force(model, layout, list(v))
    Mv = layout.mass * acc - D.T * sp.Matrix(lam) if rows else layout.mass * acc
    eqs = [Equation(lhs=p.rate, rhs=vs.symbol, origin=p.span, label="kinematics") for p, vs in zip(pos, vel)]
    eqs += [Equation(lhs=Mv[i], rhs=force[i], origin=layout.spans[i], label=f"Newton for {x[i].name}") for i in range(len(x))]
    for k, r in enumerate(rows):
        phidot = (D[k, :] * v)[0]
        curvature = (sp.Matrix([phidot]).jacobian(x) * v)[0]
        eqs.append(Equation(lhs=(D[k, :] * acc)[0], rhs=sp.expand(-curvature), origin=r.origin, label=f"{r.label} (acceleration level)"))
    energy = (v.T * layout.mass * v)[0] / 2 + V
    return pos + vel, lam, eqs, energy


def _hamiltonian_system(model, layout, rows, V) -> tuple[list[State], list[sp.Symbol], list[Equation], sp.Expr]:
    """Eq. 6 as a linear system: ż − J DΨᵀμ = J∇H + (0, F), DΨ ż = 0, Ψ = [Φ; DΦ M⁻¹p] (A1.2)."""
    x = list(layout.coords)
    pos = [make_state(s.name, s, None, span) for s, span in zip(x, layout.spans)]
    mom = [make_state(_rename_axis(s, "p"), S.sym(_rename_axis(s, "p")), None, span) for s, span in zip(x, layout.spans)]
    p = sp.Matrix([s.symbol for s in mom])
    xdot = layout.mass_inv * p
    n, C = len(x), len(rows)
    mu = [S.multiplier(k + 1) for k in range(2 * C)]
    if rows:
        D = sp.Matrix([r.residual for r in rows]).jacobian(x)
        Psi = sp.Matrix.vstack(sp.Matrix([r.residual for r in rows]), (D * xdot).applyfunc(sp.expand))
        DPsi = Psi.jacobian(x + list(p))
        JDPsiT_mu = sp.Matrix.vstack(DPsi[:, n:].T, -DPsi[:, :n].T) * sp.Matrix(mu)
    else:
        DPsi, JDPsiT_mu = sp.zeros(0, 2 * n), sp.zeros(2 * n, 1)
    pdot = -sp.Matrix([V]).jacobian(x).T + _generalized_force(model, layout, list(xdot))
    rates = sp.Matrix([s.rate for s in pos + mom])
    lhs = rates - JDPsiT_mu
    rhs = list(xdot) + list(pdot)
    states = pos + mom
    eqs = [
        Equation(lhs=lhs[i], rhs=rhs[i], origin=states[i].span, label=f"{'∂H/∂' if i < n else '−∂H/∂'}{(mom + pos)[i].name}")
        for i in range(2 * n)
    ]
    for k in range(2 * C):
        r = rows[k % C]
        level = "position" if k < C else "velocity"
        eqs.append(Equation(lhs=(DPsi[k, :] * rates)[0], rhs=sp.Integer(0), origin=r.origin, label=f"{r.label} ({level} level, projection)"))
    energy = (p.T * layout.mass_inv * p)[0] / 2 + V
    return states, mu, eqs, energy


def lower_cartesian(model: Model, formulation: str = "hamiltonian") -> SymbolicSystem:
    """Lower a model of Cartesian bodies with explicit constraints to the IR (Eq. 6 or Eq. 7)."""
    if formulation not in FORMULATIONS:
        raise PdslError.at("BadOption", f"unknown formulation `{formulation}`", model.span, "one of: " + ", ".join(FORMULATIONS))
    check_no_unsupported(model, {"gravity", "potentials", "forces", "connectors"}, "Cartesian")
    resolve_input_laws(model)
    layout = _layout(model)
    rows = _constraint_rows(model)
    _check_counts(layout, rows)
    _check_singular(model, layout, rows)
    V = _potential(model, layout)
    build = _hamiltonian_system if formulation == "hamiltonian" else _lagrangian_system
    states, multipliers, eqs, energy = build(model, layout, rows, V)
    return SymbolicSystem(
        name=model.name,
        doc=model.doc,
        path=model.path,
        formalism=f"cartesian-{formulation}",
        states=tuple(states),
        algebraics=(),
        multipliers=tuple(multipliers),
        params=model.params,
        inputs=model.inputs,
        outputs=model.outputs,
        neural=model.neural,
        differential=tuple(eqs),
        algebraic=(),
        energy=energy,
        energy_origin=model.span,
        constraints=tuple(Constraint(residual=r.residual, origin=r.origin, label=r.label) for r in rows),
        span=model.span,
    )
