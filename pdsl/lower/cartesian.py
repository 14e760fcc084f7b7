"""Cartesian mechanics with explicit constraints (BENCHMARKS Part A: the CHNN/CLNN paper of Finzi et al.).

Bodies are point collections (A2.2): a point mass has one node, a rigid body of
``dim`` d its centre plus d principal-axis points. The state is the flat vector
x of all node coordinates (body by body, node by node, axis by axis) with either
momenta p (``"hamiltonian"``, Eq. 6) or velocities v (``"lagrangian"``, Eq. 7).

M is constant and block diagonal (Eq. 9 blocks ⊗ I_d); M⁻¹ is applied in the
closed form of A2.2, body by body. The multipliers are eliminated through the
Gram matrix G = DΦ M⁻¹ DΦᵀ (C×C, symmetric positive definite when the
constraints are independent), factored symbolically as G = L·diag(d)·Lᵀ in a
fill-reducing order. Every emitted row is linear in the unknowns and the
whole system is *triangular after a permutation*, so the backend's linear solve
is a substitution: O(nnz) operations instead of a dense symbolic QR of the
(2n + 2C)-sized saddle-point matrix, and the accuracy of a Cholesky-type solve
(error ∝ cond(G)·ε, no pivoting needed for an SPD matrix).

Lagrangian (Eq. 7); unknowns ẋ, v̇, λ and elimination helpers η:

    ẋ = v
    v̇ − M⁻¹DΦᵀ λ = M⁻¹f                                  f = −∇V + F
    G λ = −DΦ M⁻¹f − (∂(DΦ v)/∂x) v                       (L η = r, λ + Lᵀ-part = η/d)

Hamiltonian (Eq. 6), ż = J∇H + J DΨᵀμ with DΨ ż = 0, Ψ = [Φ; DΦ M⁻¹p], in Schur
form (μ₁ pairs with Φ, μ₂ with Φ̇; K = ∂(DΦ M⁻¹p)/∂x; S = K M⁻¹DΦᵀ − DΦ M⁻¹Kᵀ):

    ẋ − M⁻¹DΦᵀ μ₂ = M⁻¹p
    ṗ + DΦᵀ μ₁ + Kᵀ μ₂ = f
    G μ₂ = −DΦ M⁻¹p                                       (zero on the manifold)
    G μ₁ = K M⁻¹p + DΦ M⁻¹f + S μ₂

Baumgarte stabilisation (``stabilize="baumgarte"``) replaces the constraint rows by
Φ̈ + 2αΦ̇ + β²Φ = 0, so a violation decays like a damped oscillator instead of
drifting. In Eq. 7 the multiplier row becomes
G λ = −DΦ M⁻¹f − (DΦ v)ₓ v − 2α DΦ v − β²Φ. In Eq. 6 the invariance condition
DΨ ż = 0 becomes DΨ ż = −Γ Ψ with Γ = [[0, −I], [β²I, 2αI]]: its first block
row DΦ ẋ = DΦ M⁻¹p gives μ₂ = 0 (so ẋ = M⁻¹p and Φ̇ = DΦ M⁻¹p exactly), its
second G μ₁ = K M⁻¹p + DΦ M⁻¹f + 2α DΦ M⁻¹p + β²Φ. On the manifold (Φ = 0,
Φ̇ = 0) both are the unstabilised fields. α and β are the parameters
``baumgarte.alpha`` and ``baumgarte.beta`` of the lowered system (default 0;
``pdsl.sim.simulate`` chooses them from the time scale of the motion).

The default forms are algebraically identical to the projected (Eq. 6) and constrained
Lagrangian (Eq. 7) forms of A1.2/A1.3; Part G check 2 tests them against each
other and against P = I − J DΨᵀ(DΨ J DΨᵀ)⁻¹DΨ computed independently.
Constraint residuals are kept unexpanded, ‖A − B‖² − l² with A − B formed
first, so that bodies far from the origin do not lose digits to cancellation.
"""

from __future__ import annotations

from itertools import combinations

import numpy as np
import sympy as sp

from .. import symbols as S
from ..diagnostics import Collector, PdslError, Span
from ..records import record
from ..resolve.model import Body, Connector, Model, Param, PointRef
from ..vocab import STABILIZE_LOWER
from .common import (
    check_finite,
    check_no_unsupported,
    make_state,
    outputs_in_state,
    partial_derivatives,
    resolve_input_laws,
)
from .ir import BodySummary, Constraint, Equation, Segment, SymbolicSystem
from .registry import FORMULATIONS, Formalism, LowerOptions, register

__all__ = ["lower_cartesian", "node_mass_matrix", "node_mass_inverse", "CartesianSystem", "STABILIZATIONS",
           "BAUMGARTE_PARAMS"]

_RANK_TOL = 1e-9  # relative eigenvalue threshold of the constraint Gram matrix
_ZERO = sp.Integer(0)

SparseVec = dict  # coordinate index -> sympy expression (structurally non-zero entries only)

STABILIZATIONS = STABILIZE_LOWER  # pdsl.vocab: what the lowering itself can build into the constraint rows
BAUMGARTE_PARAMS = ("baumgarte.alpha", "baumgarte.beta")  # no model name contains a dot: no clash


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


# ======================================================================= the IR, with a direct linear read-off
@record
class CartesianSystem(SymbolicSystem):
    """A :class:`SymbolicSystem` whose differential rows are sums of ``coefficient·unknown`` terms.

    Invariant of the rows built here: an unknown (rate or multiplier) occurs only as a
    top-level factor of a top-level term of ``lhs`` or ``rhs``, never inside a
    coefficient. ``linear_system`` reads A and b off that structure directly instead
    of differentiating every row by every unknown and substituting zeros, which is
    quadratic in the model size and dominated the lowering time (N = 20 pendulum:
    10 s of 16 s). The result is the same A, b; a row of any other shape falls back
    to the generic read-off.

    ``stabilization`` (a field of every system) records how the constraint rows were built
    (``"none"`` or ``"baumgarte"``, see the module docstring).
    """

# ======================================================================= layout
@record
class _BodyBlock:
    body: Body
    offset: int  # index of its first coordinate in x
    nodes: int  # number of nodes (1 for a point mass)


@record
class _Layout:
    """The flat coordinate vector x; per body its slice (node-major, axis-minor)."""

    coords: tuple[sp.Symbol, ...]
    spans: tuple[Span, ...]  # per coordinate, the statement of its body
    blocks: tuple[_BodyBlock, ...]
    block_of: tuple[int, ...]  # per coordinate, the index of its body block
    dim: int


def _layout(model: Model) -> _Layout:
    coords, spans, blocks, block_of = [], [], [], []
    for b_index, body in enumerate(model.bodies):
        blocks.append(_BodyBlock(body=body, offset=len(coords), nodes=len(body.nodes)))
        for node in body.nodes:
            coords.extend(node)
            spans.extend([body.span] * len(node))
            block_of.extend([b_index] * len(node))
    return _Layout(coords=tuple(coords), spans=tuple(spans), blocks=tuple(blocks), block_of=tuple(block_of), dim=model.space)


def _default_start(layout: _Layout, coordinate: sp.Symbol) -> float | None:
    """LANGUAGE.md §3: a body without start values sits with its centre at the origin and its principal axes along
    the world axes — the k-th axis point at e_k (so a named joint's angle starts at 0). Centres start at 0 (None)."""
    for block in layout.blocks:
        for k, node in enumerate(block.body.nodes[1:], start=1):
            if coordinate in node:
                return 1.0 if node.index(coordinate) == k - 1 else 0.0
    return None


def _minv_apply(layout: _Layout, vec) -> SparseVec:
    """(M⁻¹ ⊗ I_d)·vec in the closed form of A2.2, on the bodies vec touches.

    Per body and axis: out_0 = s/m, out_i = (s + vec_i/λ_i)/m with s = Σ_c vec_c.
    ``vec`` is a SparseVec or a dense list.
    """
    d = layout.dim
    if isinstance(vec, dict):
        get = lambda j: vec.get(j, _ZERO)  # noqa: E731
        touched = sorted({layout.block_of[j] for j in vec})
    else:
        get = vec.__getitem__
        touched = range(len(layout.blocks))
    out: SparseVec = {}
    for bi in touched:
        blk = layout.blocks[bi]
        m, lam = blk.body.mass, blk.body.moments
        for axis in range(d):
            entries = [get(blk.offset + c * d + axis) for c in range(blk.nodes)]
            if all(e == 0 for e in entries):
                continue
            s = sp.Add(*entries)
            out[blk.offset + axis] = s / m
            for i in range(1, blk.nodes):
                out[blk.offset + i * d + axis] = (s + entries[i] / lam[i - 1]) / m
    return out


def _kinetic_velocity(layout: _Layout, v) -> sp.Expr:
    """½ vᵀ(M ⊗ I)v = ½ Σ m(|v₀|² + Σ_i λ_i |v_i − v₀|²) (Eq. 9, written with differences)."""
    d, terms = layout.dim, []
    for blk in layout.blocks:
        m, lam = blk.body.mass, blk.body.moments
        node = [[v[blk.offset + c * d + a] for a in range(d)] for c in range(blk.nodes)]
        t = sp.Add(*(x**2 for x in node[0]))
        for i in range(1, blk.nodes):
            t += lam[i - 1] * sp.Add(*((node[i][a] - node[0][a]) ** 2 for a in range(d)))
        terms.append(m * t / 2)
    return sp.Add(*terms)


def _kinetic_momentum(layout: _Layout, p) -> sp.Expr:
    """½ pᵀ(M⁻¹ ⊗ I)p = ½ Σ (|Σ_c p_c|² + Σ_i |p_i|²/λ_i)/m (A2.2 closed form)."""
    d, terms = layout.dim, []
    for blk in layout.blocks:
        m, lam = blk.body.mass, blk.body.moments
        node = [[p[blk.offset + c * d + a] for a in range(d)] for c in range(blk.nodes)]
        t = sp.Add(*(sp.Add(*(node[c][a] for c in range(blk.nodes))) ** 2 for a in range(d)))
        for i in range(1, blk.nodes):
            t += sp.Add(*(node[i][a] ** 2 for a in range(d))) / lam[i - 1]
        terms.append(t / (2 * m))
    return sp.Add(*terms)


def _rename_axis(symbol: sp.Symbol, prefix: str) -> str:
    """``b1.a1.x`` -> ``b1.a1.vx`` (prefix ``v``) or ``b1.a1.px`` (prefix ``p``)."""
    head, axis = symbol.name.rsplit(".", 1)
    return f"{head}.{prefix}{axis}"


def _sparse_grad(expr: sp.Expr, coords: tuple[sp.Symbol, ...], position: dict[sp.Symbol, int]) -> SparseVec:
    free = expr.free_symbols
    out = {}
    for j in sorted(position[s] for s in free if s in position):
        g = sp.diff(expr, coords[j])
        if g != 0:
            out[j] = g
    return out


def _poly_grad(expr: sp.Expr, coords: tuple[sp.Symbol, ...], position: dict[sp.Symbol, int]) -> SparseVec:
    """:func:`_sparse_grad` through :func:`partial_derivatives` (``sp.Poly`` for the polynomial
    constraint rows: several times faster than ``sp.diff``)."""
    gens = [coords[j] for j in sorted(position[s] for s in expr.free_symbols if s in position)]
    return {position[s]: g for s, g in partial_derivatives(expr, gens).items()}


def _dot(a: SparseVec, b) -> sp.Expr:
    if isinstance(b, dict):
        return sp.Add(*(a[j] * b[j] for j in a if j in b))
    return sp.Add(*(a[j] * b[j] for j in a))


# ======================================================================= constraints Φ(x)
@record
class _Row:
    """One holonomic constraint row Φ_k(x) = 0 with the statement that generated it."""

    residual: sp.Expr
    origin: Span
    label: str
    velocity: sp.Expr | None = None  # a velocity row A(x, t)·ẋ = 0, in der(x) symbols (its residual is 0)

    @property
    def holonomic(self) -> bool:
        return self.velocity is None


def _sq_distance(diff) -> sp.Expr:
    return sp.Add(*(e**2 for e in diff))


def _rigidity_rows(body: Body) -> list[_Row]:
    """A2.3: ‖x_i − x_j‖² − l_ij² for every node pair, l = 1 to the centre, √2 between axis points."""
    rows = []
    for i, j in combinations(range(len(body.nodes)), 2):
        diff = [a - b for a, b in zip(body.nodes[i], body.nodes[j])]
        length_sq = 1 if i == 0 else 2
        rows.append(_Row(residual=_sq_distance(diff) - length_sq, origin=body.span, label=f"rigidity {body.name}[{i}–{j}]"))
    return rows


def _pair_label(c: Connector) -> str:
    return f"{c.kind} {c.a.text}–{c.b.text}"


def _connector_rows(c: Connector, bodies: dict[str, Body], space: int) -> list[_Row]:
    """A2.6 links ‖A − B‖² − l², A2.4 joints A − B = 0 (d rows; positions already X c~), A2.5 hinges."""
    diff = [sp.expand(a - b) for a, b in zip(c.a.position, c.b.position)]
    if c.kind == "link":
        if c.length is None:
            raise PdslError.at("MissingArgument", "`link` needs `length = ...`", c.span, "link A, B, length = l")
        length = c.length
        return [_Row(residual=_sq_distance(diff) - length**2, origin=c.span, label=_pair_label(c))]
    if c.kind in ("joint", "hinge"):
        axes = "xyz"
        rows = [_Row(residual=diff[k], origin=c.span, label=f"{_pair_label(c)} ({axes[k]})") for k in range(len(diff))]
        if c.kind == "hinge":
            rows += _hinge_axis_rows(c, bodies, space)
        return rows
    if c.kind == "slider":
        return _slider_rows(c, bodies, space, diff)
    return []  # springs and dampers are not constraints


def _slider_rows(c: Connector, bodies: dict[str, Body], space: int, diff) -> list[_Row]:
    """B on the line through A along u (fixed in A's frame): (R_A w_k)·(A − B) = 0 for an orthonormal basis w_k of
    u^⊥ — linear when A is fixed (R_A = I), bilinear (X_A Δw_k)·(A − B) when A is a point of a rigid body."""
    u = _hinge_axis(c, "slider")
    w = _axis_complement(u)
    if c.a.body is None:
        across = [list(wk) for wk in w]
    else:
        body = bodies[c.a.body]
        across = [_rotated(body, list(wk)) for wk in w]
    return [_Row(residual=sp.Add(*(a * e for a, e in zip(wk, diff))), origin=c.span,
                 label=f"{_pair_label(c)} (across the axis{'' if len(w) == 1 else f', {k + 1}'})")
            for k, wk in enumerate(across)]


def _hinge_axis(c: Connector, what: str = "hinge") -> sp.Matrix:
    """The constant hinge (or slider) axis u (local coordinates of each body it attaches, world coordinates for ground)."""
    u = sp.Matrix(c.axis)
    if any(S.as_expr(e).free_symbols for e in u):
        raise PdslError.at("NotConstant", f"the {what} axis must be a constant vector (it fixes which constraint rows "
                           "are independent)", c.span, "write the axis with numbers, e.g. axis = [0, 0, 1]")
    if all(e == 0 for e in u):
        code = "BadHinge" if what == "hinge" else "BadSlider"
        raise PdslError.at(code, f"the {what} axis is the zero vector", c.span, "give the axis, e.g. axis = [0, 0, 1]")
    scale = max(abs(e) for e in u)
    if not sp.Float(1e-8) <= scale <= sp.Float(1e8):  # only its direction matters: keep the rows' numbers moderate
        u = u / scale
    return u


def _axis_complement(u: sp.Matrix) -> list[sp.Matrix]:
    """An orthonormal basis w_1 … w_{d−1} of u^⊥: the other unit vectors for a coordinate axis,
    else the trailing right singular vectors of uᵀ (floats; a symbolic Gram–Schmidt with
    radicals costs seconds of sympy time further down the lowering)."""
    d = u.shape[0]
    nonzero = [j for j in range(d) if u[j] != 0]
    if len(nonzero) == 1:
        return [sp.Matrix([1 if i == j else 0 for i in range(d)]) for j in range(d) if j != nonzero[0]]
    un = np.array([float(e) for e in u])
    _, _, vt = np.linalg.svd(un[None, :] / np.linalg.norm(un))
    return [sp.Matrix([sp.Float(float(e), 17) for e in row]) for row in vt[1:]]


def _rotated(body: Body, local) -> list[sp.Expr]:
    """R·local = X Δ local = Σ_i local_i (x_i − x_0) (A2.2, A2.5): a body-fixed direction in the world."""
    x0 = body.nodes[0]
    return [sp.Add(*(local[i] * (body.nodes[i + 1][k] - x0[k]) for i in range(len(local)))) for k in range(len(x0))]


def _hinge_axis_rows(c: Connector, bodies: dict[str, Body], space: int) -> list[_Row]:
    """A2.5 axis restriction R_A u = R_B u, as its d − 1 independent components.

    Φ = R_A u − R_B u = X_A Δu − X_B Δu has d rows but only d − 1 independent ones on the
    manifold (two unit vectors can differ only across their common direction), so keeping
    all d would make DΦ M⁻¹DΦᵀ singular. The rows kept are the components of Φ across the
    axis, on an orthonormal basis w_k of u^⊥:

    * to ground (R = I): w_k·(R_A u − u) = w_k·(X_A Δu), linear: the A2.8 axis rows
      (c~ replaced by Δu) projected onto w_k;
    * between two bodies: (R_B w_k)·(R_A u) = (X_B Δw_k)·(X_A Δu), bilinear, with w_k fixed
      in B because the common axis turns in the world. On the manifold its gradient across
      rigid motions equals that of w_kᵀR_Bᵀ(R_A u − R_B u).
    """
    u = _hinge_axis(c)
    ends = []
    for point in (c.a, c.b):
        if point.body is None:
            ends.append(None)
            continue
        body = bodies[point.body]
        if body.dim != space:
            raise PdslError.at("BadHinge", f"a hinge on `{body.name}` (rigid, dim {body.dim}) in space {space}: its "
                               f"orientation about the axis is not embedded", c.span,
                               f"declare it rigid(dim = {space}, ...), or use `joint`")
        ends.append(body)
    w = _axis_complement(u)
    if ends[0] is None or ends[1] is None:
        axis = _rotated(ends[1] if ends[0] is None else ends[0], u)
        residuals = [sp.Add(*(wk[k] * axis[k] for k in range(space))) for wk in w]
    else:
        axis_a = _rotated(ends[0], u)
        residuals = [sp.Add(*(a * b for a, b in zip(_rotated(ends[1], wk), axis_a))) for wk in w]
    return [_Row(residual=r, origin=c.span, label=f"{_pair_label(c)} (axis, across {k + 1})") for k, r in enumerate(residuals)]


def _constraint_rows(model: Model, layout: _Layout | None = None) -> list[_Row]:
    rows = [r for body in model.bodies for r in _rigidity_rows(body)]
    bodies = {b.name: b for b in model.bodies}
    for c in model.connectors:
        rows.extend(_connector_rows(c, bodies, model.space))
    if layout is not None:
        rows.extend(_explicit_rows(model, layout))
    return rows


def _explicit_rows(model: Model, layout: _Layout) -> list[_Row]:
    """``constraint`` statements on body coordinates (LANGUAGE.md §3): holonomic rows Φ(x, t) = 0 (drivers may
    depend on t) and velocity rows A(x, t)·ẋ = 0 (Lagrange–d'Alembert), checked to use only body coordinates,
    parameters and t."""
    coords = set(layout.coords)
    rates = {S.der(x) for x in coords}
    params = {q.symbol for q in model.params}
    inputs = {i.symbol for i in model.inputs}
    rows, diags = [], Collector()
    for n, c in enumerate(model.constraints, start=1):
        residual = S.as_expr(c.residual)
        free = residual.free_symbols
        undefined = residual.atoms(sp.core.function.AppliedUndef)
        if undefined:
            diags.error("NotYetSupported", "a constraint on bodies through a neural network or an undefined function",
                        c.span, "write the constraint with body coordinates, parameters and t")
            continue
        used_inputs = free & inputs
        if used_inputs:
            names = ", ".join(sorted(f"`{x}`" for x in used_inputs))
            diags.error("NotYetSupported", f"a constraint on bodies that depends on the input {names}: a driven "
                        "constraint needs its first and second time derivatives", c.span,
                        "drive it by a function of t (constraint b.x = r*cos(w*t)), or apply the input as a force")
            continue
        other = free - coords - rates - params - {S.TIME}
        if other or not free & (coords | rates):
            if other:
                names = ", ".join(sorted(f"`{x}`" for x in other))
                msg = f"this constraint uses {names}, which {'is' if len(other) == 1 else 'are'} not a body coordinate"
            else:
                msg = "this constraint does not involve any body coordinate (it constrains nothing that moves)"
            diags.error("NotABodyCoordinate", msg + ": in a model of bodies a `constraint` restricts the bodies' "
                        "positions or velocities", c.span,
                        "constrain a body coordinate or a point: constraint b.y = 0, constraint r.at([0.1, 0]).x = 0, "
                        "constraint b.vx = 0")
            continue
        if c.kind == "holonomic":
            if free & rates:  # cannot happen: classified holonomic
                continue
            rows.append(_Row(residual=residual, origin=c.span, label=f"constraint {n}"))
        else:
            rows.append(_Row(residual=_ZERO, origin=c.span, label=f"velocity constraint {n}", velocity=residual))
    diags.raise_if_any()
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
def _potential_terms(model: Model, layout: _Layout) -> list[sp.Expr]:
    """V = Σ_bodies −m g (direction · x_centre) + Σ springs ½k(‖A−B‖ − rest)² + Σ `potential` (A2.7)."""
    terms = []
    d = layout.dim
    for grav in model.gravity:
        for blk in layout.blocks:
            centre = layout.coords[blk.offset : blk.offset + d]
            terms.append(-blk.body.mass * grav.g * sp.Add(*(u * x for u, x in zip(grav.direction, centre))))
    for c in model.connectors:
        if c.kind == "spring":
            diff = [sp.expand(a - b) for a, b in zip(c.a.position, c.b.position)]
            rest = c.rest if c.rest is not None else sp.Integer(0)
            terms.append(c.k * (sp.sqrt(_sq_distance(diff)) - rest) ** 2 / 2)
    for p in model.potentials:
        check_finite(p.expr, p.span, "a potential")
        terms.append(p.expr)
    return [t for t in terms if t != 0]


def _point_jacobian(point: PointRef, coords, position) -> list[SparseVec]:
    """Per axis, ∂(position)/∂x (constant: positions are linear in the nodes, A2.7)."""
    return [_sparse_grad(sp.expand(e), coords, position) for e in point.position]


def _generalized_force(model: Model, layout: _Layout, velocity, position) -> SparseVec:
    """F = Σ Jᵀf for point forces, − ∂R/∂ẋ for dampers R = ½c‖J_A ẋ − J_B ẋ‖² (A2.7).

    ``velocity`` is ẋ expressed in the state (v, or M⁻¹p); ``der(coordinate)`` in a
    force expression is replaced by it.
    """
    coords = layout.coords
    rates = {S.der(x): v for x, v in zip(coords, velocity)}
    F: dict[int, list] = {}
    for f in model.forces:
        J = _point_jacobian(f.at, coords, position)
        for axis, row in enumerate(J):
            fa = S.as_expr(f.force[axis]).xreplace(rates)
            for j, g in row.items():
                F.setdefault(j, []).append(g * fa)
    for g in model.generalized_forces:  # on node coordinates: a kinematic port's JᵀF (LANGUAGE.md §10)
        if g.coord not in position:
            raise PdslError.at("TypeMismatch", f"`force … on {g.coord}`: not a coordinate of the bodies", g.span)
        F.setdefault(position[g.coord], []).append(S.as_expr(g.force).xreplace(rates))
    for c in model.connectors:
        if c.kind == "damper":
            Ja, Jb = _point_jacobian(c.a, coords, position), _point_jacobian(c.b, coords, position)
            for axis in range(layout.dim):
                rel = dict(Ja[axis])
                for j, g in Jb[axis].items():
                    rel[j] = rel.get(j, _ZERO) - g
                rel = {j: g for j, g in rel.items() if g != 0}
                rv = _dot(rel, velocity)
                for j, g in rel.items():
                    F.setdefault(j, []).append(-c.c * g * rv)
    return {j: sp.Add(*ts) for j, ts in F.items()}


# ======================================================================= constraint data
@record
class _Constraints:
    """Sparse DΦ, W = M⁻¹DΦᵀ (columns), K = ∂ψ/∂x, the curvature and G = DΦ M⁻¹ DΦᵀ.

    Per row, ψ = DΦ v + Φ_t is its velocity level (ψ = A v for a velocity row A(x, t)·ẋ = 0, whose D is A);
    ``curvature`` = K·v + ∂ψ/∂t, so that ψ̇ = DΦ v̇ + curvature: for a fixed constraint (DΦ v)ₓ·v, for a driver
    Φ(x, t) also 2 DΦ_t·v + Φ_tt. ``phi_t`` is Φ_t (0 for velocity rows and fixed constraints).
    """

    rows: tuple[_Row, ...]
    D: tuple[SparseVec, ...]
    W: tuple[SparseVec, ...]
    K: tuple[SparseVec, ...]
    curvature: tuple[sp.Expr, ...]
    G: dict  # (k, l) -> expr, k ≥ l and structurally non-zero; symmetric
    phi_t: tuple[sp.Expr, ...] = ()

    def velocity_level(self, k: int, velocity) -> sp.Expr:
        """ψ_k = DΦ_k·v + Φ_t,k (Φ̇ of a holonomic row, A v of a velocity row)."""
        return _dot(self.D[k], velocity) + (self.phi_t[k] if self.phi_t else _ZERO)


def _velocity_row(row: _Row, coords, position) -> SparseVec:
    """A of a velocity row: the coefficient of der(x_j) in A(x, t)·ẋ."""
    rates = {S.der(x): j for j, x in enumerate(coords)}
    out = {}
    for r, j in sorted(((r, rates[r]) for r in row.velocity.free_symbols if r in rates), key=lambda e: e[1]):
        g = sp.diff(row.velocity, r)
        if g != 0:
            out[j] = g
    return out


def _constraint_data(layout: _Layout, rows: list[_Row], velocity, position) -> _Constraints:
    coords = layout.coords
    D = [_poly_grad(r.residual, coords, position) if r.holonomic else _velocity_row(r, coords, position) for r in rows]
    W = [_minv_apply(layout, Dk) for Dk in D]
    K, curvature, phi_t = [], [], []
    for r, Dk in zip(rows, D):  # K_k[j] = Σ_i ∂(DΦ_k)_i/∂x_j v_i (the Hessian of Φ_k is constant for links and joints)
        acc: dict[int, list] = {}
        for i, g in Dk.items():
            for j, h in _poly_grad(g, coords, position).items():
                acc.setdefault(j, []).append(h * velocity[i])
        ft = sp.diff(r.residual, S.TIME) if S.TIME in r.residual.free_symbols else _ZERO
        for j, h in _poly_grad(ft, coords, position).items():  # ∂Φ_t/∂x: a driver's ψ = DΦ v + Φ_t
            acc.setdefault(j, []).append(h)
        Kk = {j: e for j, e in ((j, sp.Add(*ts)) for j, ts in sorted(acc.items())) if e != 0}
        K.append(Kk)
        # ∂ψ/∂t = (∂DΦ/∂t)·v + Φ_tt
        psi_t = sp.Add(*(sp.diff(g, S.TIME) * velocity[i] for i, g in Dk.items() if S.TIME in g.free_symbols))
        psi_t += sp.diff(ft, S.TIME) if ft != 0 else _ZERO
        curvature.append(_dot(Kk, velocity) + psi_t)
        phi_t.append(ft)
    G = {}
    for k in range(len(rows)):
        for l in range(k + 1):
            if set(D[k]) & set(W[l]):
                e = _dot(D[k], W[l])
                if e != 0:
                    G[(k, l)] = e
    return _Constraints(rows=tuple(rows), D=tuple(D), W=tuple(W), K=tuple(K), curvature=tuple(curvature), G=G,
                        phi_t=tuple(phi_t))


# ======================================================================= singular constraints
def _generic_configuration(layout: _Layout, phi_fn, jac_fn) -> np.ndarray:
    """A deterministic generic point (seed 0), pulled onto Φ = 0 by Gauss–Newton when possible.

    Bodies have no start values, so the check runs at this point rather than at
    the initial state; if the projection does not converge (or meets numbers that are
    not finite), the generic (off-manifold) point is used, which still detects
    structural redundancy.
    """
    start = np.random.default_rng(0).normal(size=len(layout.coords))
    x = start
    with np.errstate(all="ignore"):
        for _ in range(50):
            r = phi_fn(x)
            if not np.all(np.isfinite(r)):
                break
            if np.max(np.abs(r)) < 1e-12:
                break
            J = jac_fn(x)
            if not np.all(np.isfinite(J)):
                break
            try:
                x = x - np.linalg.lstsq(J, r, rcond=None)[0]
            except np.linalg.LinAlgError:
                break
            if not np.all(np.isfinite(x)):
                break
    return x if np.all(np.isfinite(x)) and np.all(np.isfinite(phi_fn(x))) else start


def _numeric(exprs: list, coords) -> "callable":
    """x -> float array of ``exprs`` (sympy, numbers and coordinates only), through numpy.

    ``sympy.lambdify`` prints the expressions as numpy code; no numeric backend is imported
    by the lowering. Symbols whose names are not identifiers (``b[1].x``) are replaced by
    dummies by lambdify itself.
    """
    if not exprs:
        return lambda x: np.zeros(0)
    f = sp.lambdify(list(coords), exprs, modules="numpy", cse=False)
    n = len(exprs)

    def call(x):
        try:
            with np.errstate(all="ignore"):
                out = f(*x)
            return np.array([np.broadcast_to(np.asarray(v, dtype=float), ()).item() for v in out], dtype=float).reshape(n)
        except (OverflowError, TypeError, ValueError):  # an exact integer past the doubles (10**616): one by one
            at = dict(zip(coords, (sp.Float(float(v)) for v in x)))
            return np.array([_to_float(e.xreplace(at)) for e in exprs], dtype=float)

    return call


def _to_float(v) -> float:
    """A sympy number as a double: ±inf past the largest one, nan if it is not a real number."""
    try:
        return float(v)
    except (OverflowError, TypeError, ValueError):
        if v.is_extended_real and v.is_number:
            return float("inf") if v.is_extended_positive else float("-inf")
        return float("nan")


def _overflow(what: str, span: Span, value) -> PdslError:
    return PdslError.at(
        "NumericOverflow",
        f"{what} is not a finite floating-point number ({value}) at the default parameter values",
        span,
        "choose units in which lengths, positions and masses are moderate numbers "
        "(a length of 1e308 squares to more than the largest double)",
    )


def _check_singular(model: Model, layout: _Layout, data: _Constraints) -> None:
    """DΦ M⁻¹ DΦᵀ must be invertible (A1.2): otherwise report the rows involved, by statement.

    The check is numeric (numpy, at a generic configuration and the default parameter
    values); a constraint or mass whose numbers overflow a double is reported at its
    statement (``NumericOverflow``) rather than failing inside the linear algebra.
    """
    rows = data.rows
    if not rows:
        return
    subs = {p.symbol: sp.Float(p.default) for p in model.params}
    subs[S.TIME] = sp.Float(0)  # drivers Φ(x, t): checked at t = 0
    phi = [r.residual.xreplace(subs) for r in rows]
    entries = [(k, j, g.xreplace(subs)) for k, Dk in enumerate(data.D) for j, g in Dk.items()]
    extra = set().union(*(e.free_symbols for e in phi)) - set(layout.coords)
    if extra:  # lengths depending on inputs or networks: nothing numeric to check
        return
    C, n = len(rows), len(layout.coords)
    Minv = np.zeros((n, n))
    for j in range(n):
        col = _minv_apply(layout, {j: sp.Integer(1)})
        for i, e in col.items():
            v = e.xreplace(subs)
            Minv[i, j] = float(v) if v.is_number and v.is_finite is not False else np.nan
            if not np.isfinite(Minv[i, j]):
                raise _overflow(f"the inverse mass of `{layout.blocks[layout.block_of[j]].body.name}`",
                                layout.spans[j], v)
    f_phi = _numeric(phi, layout.coords)
    f_jac = _numeric([e for _, _, e in entries], layout.coords)
    ks = np.array([k for k, _, _ in entries], dtype=int)
    js = np.array([j for _, j, _ in entries], dtype=int)

    def jac_fn(x):
        J = np.zeros((C, n))
        np.add.at(J, (ks, js), f_jac(x))
        return J

    hol = np.array([k for k in range(C) if rows[k].holonomic], dtype=int)  # velocity rows have no position level
    x = _generic_configuration(layout, lambda x: f_phi(x)[hol], lambda x: jac_fn(x)[hol])
    for k, value in enumerate(f_phi(x)):
        if not np.isfinite(value):
            raise _overflow(f"the residual of {rows[k].label}", rows[k].origin, value)
    Dn = jac_fn(x)
    for k in range(C):
        if not np.all(np.isfinite(Dn[k])):
            raise _overflow(f"the gradient of {rows[k].label}", rows[k].origin, Dn[k][~np.isfinite(Dn[k])][0])
    with np.errstate(all="ignore"):
        Gn = Dn @ Minv @ Dn.T
    bad = ~np.isfinite(Gn)
    if bad.any():
        k = int(np.flatnonzero(bad.any(axis=1))[0])
        raise _overflow(f"DΦ M⁻¹ DΦᵀ for {rows[k].label}", rows[k].origin, Gn[bad][0])
    try:
        w, V = np.linalg.eigh(Gn)
    except np.linalg.LinAlgError:  # finite but badly scaled beyond what LAPACK converges on
        raise PdslError.at(
            "NumericOverflow",
            "the constraint matrix DΦ M⁻¹ DΦᵀ cannot be decomposed numerically (its entries span too many "
            "orders of magnitude)", rows[0].origin,
            "choose units in which lengths and masses are moderate numbers") from None
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


# ======================================================================= symbolic LDLᵀ of G
@record
class _Factor:
    """G = L·diag(d)·Lᵀ in the elimination order ``order`` (positions 0..C−1 -> constraint index)."""

    order: tuple[int, ...]
    L: dict  # (i, j) -> expr, i > j, positions in the elimination order
    d: tuple[sp.Expr, ...]


def _elimination_order(C: int, G: dict) -> list[int]:
    """Greedy minimum degree on the sparsity graph of G (ties by index: deterministic)."""
    adj = {k: set() for k in range(C)}
    for k, l in G:
        if k != l:
            adj[k].add(l)
            adj[l].add(k)
    order, alive = [], set(range(C))
    while alive:
        k = min(alive, key=lambda v: (len(adj[v]), v))
        order.append(k)
        alive.discard(k)
        nb = adj.pop(k)
        for a in nb:
            adj[a].discard(k)
            adj[a] |= nb - {a}
    return order


def _ldl(C: int, G: dict) -> _Factor:
    """Symbolic LDLᵀ with unscaled entries U (U_ij = L_ij d_j), which keeps the expression DAG shallow.

    U_ij = G_ij − Σ_{k<j} L_ik U_jk,   d_j = U_jj,   L_ij = U_ij / d_j   (i > j)
    """
    order = _elimination_order(C, G)
    pos = {k: i for i, k in enumerate(order)}
    Gp: dict[tuple[int, int], sp.Expr] = {}
    for (k, l), e in G.items():
        i, j = pos[k], pos[l]
        Gp[(max(i, j), min(i, j))] = e
    lower_cols: list[dict[int, sp.Expr]] = [dict() for _ in range(C)]  # per row i: {j: U_ij} for j < i
    for (i, j), e in Gp.items():
        if i > j:
            lower_cols[i][j] = e
    L: dict[tuple[int, int], sp.Expr] = {}
    d: list[sp.Expr] = []
    # column j is final once all columns k < j have been processed (left-looking)
    U: dict[tuple[int, int], sp.Expr] = {}
    pattern: list[set[int]] = [set(lower_cols[i]) for i in range(C)]  # per row, columns j < i (with fill)
    for j in range(C):  # symbolic fill
        below = [i for i in range(j + 1, C) if j in pattern[i]]
        for a, b in combinations(below, 2):
            pattern[b].add(a)  # rows a < b both connect to j: fill (b, a)
    for j in range(C):
        terms = [Gp.get((j, j), _ZERO)] + [-L[(j, k)] * U[(j, k)] for k in sorted(pattern[j])]
        d.append(sp.Add(*terms))
        for i in range(j + 1, C):
            if j not in pattern[i]:
                continue
            terms = [Gp.get((i, j), _ZERO)] + [-L[(i, k)] * U[(j, k)] for k in sorted(pattern[i] & pattern[j])]
            U[(i, j)] = sp.Add(*terms)
            L[(i, j)] = U[(i, j)] / d[j]
    return _Factor(order=tuple(order), L=L, d=tuple(d))


@record
class _LinRow:
    """``Σ coeffs·unknowns = rhs``; with ``assign`` the first unknown (coefficient 1) stays on the
    left and the other terms move to the right: a substitution step ``u = rhs − Σ c·w``.

    Assignment rows keep deep coefficients (factor entries) out of the left side,
    which is what consumers inspect for ``rate(x) = …`` rows.
    """

    coeffs: tuple[tuple[sp.Symbol, sp.Expr], ...]  # unknown, coefficient
    rhs: sp.Expr
    origin: Span
    label: str
    assign: bool = False

    def equation(self) -> Equation:
        if self.assign:
            (u, one), rest = self.coeffs[0], self.coeffs[1:]
            assert one == 1
            rhs = sp.Add(self.rhs, *(-c * w for w, c in rest))
            return Equation(lhs=u, rhs=rhs, origin=self.origin, label=self.label)
        lhs = sp.Add(*(u if c == 1 else c * u for u, c in self.coeffs))
        return Equation(lhs=lhs, rhs=self.rhs, origin=self.origin, label=self.label)


def _solve_rows(factor: _Factor, rows: tuple[_Row, ...], rhs: list[tuple[list, sp.Expr]], z, eta, what: str) -> list[_LinRow]:
    """Rows for G z = r through L η = P r and z_P + (Lᵀ z)_P-part − η/d = 0.

    ``rhs[k]`` is (unknown terms as [(unknown, coefficient)], known part) of r_k, the
    unknown terms moved to the left. Both row groups are triangular.
    """
    C = len(factor.order)
    out = []
    for i, k in enumerate(factor.order):  # forward: η_i + Σ_{j<i} L_ij η_j − (unknown part of r_k) = known part
        coeffs = [(eta[i], sp.Integer(1))] + [(eta[j], factor.L[(i, j)]) for j in range(i) if (i, j) in factor.L]
        unknown_terms, known = rhs[k]
        coeffs += [(u, -c) for u, c in unknown_terms]
        out.append(_LinRow(coeffs=tuple(coeffs), rhs=known, origin=rows[k].origin, assign=True,
                           label=f"{rows[k].label}: {what}, forward elimination (G = L·D·Lᵀ, G = DΦ M⁻¹ DΦᵀ)"))
    for i in reversed(range(C)):  # backward: z_k + Σ_{j>i} L_ji z_{order j} − η_i/d_i = 0
        k = factor.order[i]
        coeffs = [(z[k], sp.Integer(1))] + [(z[factor.order[j]], factor.L[(j, i)]) for j in range(i + 1, C) if (j, i) in factor.L]
        coeffs.append((eta[i], -1 / factor.d[i]))
        out.append(_LinRow(coeffs=tuple(coeffs), rhs=_ZERO, origin=rows[k].origin, assign=True,
                           label=f"{rows[k].label}: {what}, back substitution"))
    return out


# ======================================================================= formulations
def _baumgarte_terms(data: _Constraints, velocity, gains) -> list[sp.Expr]:
    """2α Φ̇_k + β² Φ_k per constraint (zero without stabilisation)."""
    if gains is None:
        return [_ZERO] * len(data.rows)
    alpha, beta = gains
    return [2 * alpha * data.velocity_level(k, velocity) + beta**2 * data.rows[k].residual for k in range(len(data.rows))]


def _lagrangian_system(model, layout, rows, terms_V, position, gains=None):
    """Eq. 7: ẋ = v, v̇ = M⁻¹(f + DΦᵀλ), G λ = −DΦ M⁻¹f − (DΦ v)ₓ v (− 2αΦ̇ − β²Φ with Baumgarte)."""
    x = list(layout.coords)
    n = len(x)
    pos = [make_state(s.name, s, _default_start(layout, s), span) for s, span in zip(x, layout.spans)]
    vel = [make_state(_rename_axis(s, "v"), S.sym(_rename_axis(s, "v")), None, span) for s, span in zip(x, layout.spans)]
    v = [s.symbol for s in vel]
    data = _constraint_data(layout, rows, v, position)
    _check_singular(model, layout, data)
    f = _force_vector(model, layout, terms_V, v, position)
    a = _minv_apply(layout, f)
    C = len(rows)
    lam = [S.multiplier(k + 1) for k in range(C)]
    eta = [sp.Dummy(f"eta{k + 1}", real=True) for k in range(C)]
    lin: list[_LinRow] = [_LinRow(coeffs=((p.rate, sp.Integer(1)),), rhs=vs.symbol, origin=p.span, label="kinematics")
                          for p, vs in zip(pos, vel)]
    for i in range(n):
        coeffs = [(vel[i].rate, sp.Integer(1))] + [(lam[k], -data.W[k][i]) for k in range(C) if i in data.W[k]]
        lin.append(_LinRow(coeffs=tuple(coeffs), rhs=a.get(i, _ZERO), origin=layout.spans[i],
                           label=f"Newton for {x[i].name}: der({vel[i].name}) = M⁻¹(−∇V + F + DΦᵀλ)"))
    if C:
        factor = _ldl(C, data.G)
        stab = _baumgarte_terms(data, v, gains)
        rhs = [([], -_dot(data.D[k], a) - data.curvature[k] - stab[k]) for k in range(C)]
        what = "multiplier λ (" + ("Baumgarte: Φ̈ + 2αΦ̇ + β²Φ = 0" if gains else "acceleration level") + ")"
        lin += _solve_rows(factor, data.rows, rhs, lam, eta, what)
    energy = _kinetic_velocity(layout, v) + sp.Add(*terms_V)
    return pos + vel, lam + eta, lin, energy


def _hamiltonian_system(model, layout, rows, terms_V, position, gains=None):
    """Eq. 6 in Schur form (module docstring): 2C multipliers μ = (μ₁, μ₂) and 2C elimination helpers.

    With Baumgarte gains, DΨ ż = −ΓΨ: μ₂ = 0 (not emitted) and μ₁ carries 2αΦ̇ + β²Φ.
    """
    x = list(layout.coords)
    n = len(x)
    pos = [make_state(s.name, s, _default_start(layout, s), span) for s, span in zip(x, layout.spans)]
    mom = [make_state(_rename_axis(s, "p"), S.sym(_rename_axis(s, "p")), None, span) for s, span in zip(x, layout.spans)]
    p = [s.symbol for s in mom]
    vdict = _minv_apply(layout, {i: p[i] for i in range(n)})
    v = [vdict.get(i, _ZERO) for i in range(n)]
    data = _constraint_data(layout, rows, v, position)
    _check_singular(model, layout, data)
    f = _force_vector(model, layout, terms_V, v, position)
    a = _minv_apply(layout, f)
    C = len(rows)
    if gains is not None:
        states, multipliers, lin = _hamiltonian_baumgarte(layout, data, pos, mom, v, f, a, gains)
        return states, multipliers, lin, _kinetic_momentum(layout, p) + sp.Add(*terms_V)
    hol = [k for k in range(C) if rows[k].holonomic]  # μ₂ (the projection) only for position-level rows
    H = len(hol)
    mu1 = [S.multiplier(k + 1) for k in range(C)]
    mu2_of = {k: S.multiplier(C + h + 1) for h, k in enumerate(hol)}
    mu2 = [mu2_of[k] for k in hol]
    eta1 = [sp.Dummy(f"eta{k + 1}", real=True) for k in range(C)]
    eta2 = [sp.Dummy(f"eta{C + h + 1}", real=True) for h in range(H)]
    lin: list[_LinRow] = []
    for i in range(n):
        coeffs = [(pos[i].rate, sp.Integer(1))] + [(mu2_of[k], -data.W[k][i]) for k in hol if i in data.W[k]]
        lin.append(_LinRow(coeffs=tuple(coeffs), rhs=v[i], origin=pos[i].span, label=f"∂H/∂{mom[i].name} (+ projection)"))
    for i in range(n):
        coeffs = [(mom[i].rate, sp.Integer(1))]
        coeffs += [(mu1[k], data.D[k][i]) for k in range(C) if i in data.D[k]]
        coeffs += [(mu2_of[k], data.K[k][i]) for k in hol if i in data.K[k]]
        lin.append(_LinRow(coeffs=tuple(coeffs), rhs=f.get(i, _ZERO), origin=mom[i].span, label=f"−∂H/∂{x[i].name} + F (+ projection)"))
    if C:
        factor = _ldl(C, data.G)
        if H:
            if H == C:  # no velocity rows: μ₂ has the same Gram matrix
                factor2 = factor
            else:
                sub = {(a, b): data.G[(hol[a], hol[b])] for a in range(H) for b in range(a + 1)
                       if (hol[a], hol[b]) in data.G}
                factor2 = _ldl(H, sub)
            # G μ₂ = −DΦ M⁻¹p − Φ_t  (position level: keeps Φ̇ = DΦ ẋ + Φ_t = 0)
            rhs2 = [([], -data.velocity_level(k, v)) for k in hol]
            lin += _solve_rows(factor2, tuple(rows[k] for k in hol), rhs2, mu2, eta2,
                               "multiplier μ₂ (position level, projection)")
        # G μ₁ = K M⁻¹p + DΦ M⁻¹f + S μ₂ + ∂ψ/∂t,  S_kl = K_k·W_l − W_k·K_l  (velocity level; velocity rows too)
        rhs1 = []
        for k in range(C):
            unknown = []
            for l in hol:
                s_kl = _dot(data.K[k], data.W[l]) - _dot(data.W[k], data.K[l])
                if s_kl != 0:
                    unknown.append((mu2_of[l], s_kl))
            rhs1.append((unknown, data.curvature[k] + _dot(data.D[k], a)))
        lin += _solve_rows(factor, data.rows, rhs1, mu1, eta1, "multiplier μ₁ (velocity level, projection)")
    energy = _kinetic_momentum(layout, p) + sp.Add(*terms_V)
    return pos + mom, mu1 + mu2 + eta1 + eta2, lin, energy


def _hamiltonian_baumgarte(layout, data, pos, mom, v, f, a, gains):
    """ẋ = M⁻¹p, ṗ + DΦᵀμ = f, G μ = K M⁻¹p + DΦ M⁻¹f + 2α DΦ M⁻¹p + β²Φ (d/dt Φ̇ = −2αΦ̇ − β²Φ)."""
    x, n, C = layout.coords, len(layout.coords), len(data.rows)
    mu = [S.multiplier(k + 1) for k in range(C)]
    eta = [sp.Dummy(f"eta{k + 1}", real=True) for k in range(C)]
    lin: list[_LinRow] = []
    for i in range(n):
        lin.append(_LinRow(coeffs=((pos[i].rate, sp.Integer(1)),), rhs=v[i], origin=pos[i].span,
                           label=f"∂H/∂{mom[i].name}"))
    for i in range(n):
        coeffs = [(mom[i].rate, sp.Integer(1))] + [(mu[k], data.D[k][i]) for k in range(C) if i in data.D[k]]
        lin.append(_LinRow(coeffs=tuple(coeffs), rhs=f.get(i, _ZERO), origin=mom[i].span,
                           label=f"−∂H/∂{x[i].name} + F − DΦᵀμ"))
    if C:
        factor = _ldl(C, data.G)
        stab = _baumgarte_terms(data, v, gains)
        rhs = [([], data.curvature[k] + _dot(data.D[k], a) + stab[k]) for k in range(C)]
        lin += _solve_rows(factor, data.rows, rhs, mu, eta, "multiplier μ (Baumgarte: Φ̈ + 2αΦ̇ + β²Φ = 0)")
    return pos + mom, mu + eta, lin


def _force_vector(model, layout, terms_V, velocity, position) -> SparseVec:
    """f = −∇V + F, sparse (each term differentiated only by its own coordinates)."""
    acc: dict[int, list] = {}
    for term in terms_V:
        for j, g in _sparse_grad(term, layout.coords, position).items():
            acc.setdefault(j, []).append(-g)
    for j, g in _generalized_force(model, layout, velocity, position).items():
        acc.setdefault(j, []).append(g)
    out = {}
    for j, ts in acc.items():
        e = sp.Add(*ts)
        if e != 0:
            out[j] = e
    return out


def _baumgarte_params(model: Model) -> tuple[Param, ...]:
    return tuple(Param(name=name, symbol=S.sym(name), default=0.0, lower=0.0, upper=None, free=False, span=model.span)
                 for name in BAUMGARTE_PARAMS)


def _check_no_generalized_variables(model: Model) -> None:
    """``coord`` and ``momentum`` belong to lagrangian/hamiltonian models: in a model of bodies they would be names
    bound to nothing (found by the fuzz campaign: `momentum k = 2, c = 0.1` used as spring constants ended in an
    internal error), so they are refused where they are declared."""
    diags = Collector()
    for kind, what in (("coord", "a generalized coordinate"), ("momentum", "a canonical momentum")):
        for v in model.variables_of(kind):
            diags.error("MixedFormalism", f"`{v.name}` is declared `{kind}`, {what} of a `lagrangian`/`hamiltonian` "
                        "model; a model of bodies has the bodies' positions and momenta as its states", v.span,
                        "declare numbers with `param`, and describe the motion with bodies, joints and forces")
    diags.raise_if_any()


def _check_constraints_on_bodies(model: Model) -> None:
    """A `constraint` mixing generalized coordinates (`coord`) and bodies is not lowered (LANGUAGE.md §3)."""
    generalized = {v.symbol for kind in ("coord", "momentum") for v in model.variables_of(kind)}
    if not generalized:
        return
    generalized |= {S.der(x) for x in generalized}
    diags = Collector()
    for c in model.constraints:
        if S.as_expr(c.residual).free_symbols & generalized:
            diags.error("NotYetSupported", "a constraint between generalized coordinates (`coord`) and bodies",
                        c.span, "describe the whole mechanism with bodies (constraints on b.x, b.y, …), "
                        "or write it in generalized coordinates with a `lagrangian`")
    diags.raise_if_any()


def lower_cartesian(model: Model, formulation: str = "hamiltonian", *, stabilize: str = "none") -> SymbolicSystem:
    """Lower a model of Cartesian bodies with explicit constraints to the IR (Eq. 6 or Eq. 7).

    ``stabilize="baumgarte"`` builds Φ̈ + 2αΦ̇ + β²Φ = 0 into the constraint rows, with α, β
    the extra parameters ``baumgarte.alpha``, ``baumgarte.beta`` (module docstring).
    """
    if formulation not in FORMULATIONS:
        raise PdslError.at("BadOption", f"unknown formulation `{formulation}`", model.span, "one of: " + ", ".join(FORMULATIONS))
    if stabilize not in STABILIZATIONS:
        raise PdslError.at("BadOption", f"unknown constraint stabilisation `{stabilize}`", model.span,
                           "one of: " + ", ".join(STABILIZATIONS))
    check_no_unsupported(model, {"gravity", "potentials", "forces", "connectors", "generalized_forces", "constraints"},
                         "Cartesian")
    _check_constraints_on_bodies(model)
    _check_no_generalized_variables(model)
    resolve_input_laws(model)
    layout = _layout(model)
    position = {s: i for i, s in enumerate(layout.coords)}
    rows = _constraint_rows(model, layout)
    _check_counts(layout, rows)
    terms_V = _potential_terms(model, layout)
    if stabilize == "baumgarte" and not rows:
        raise PdslError.at("BadOption", f"--stabilize baumgarte: {model.name} has no constraints to stabilise", model.span)
    extra = _baumgarte_params(model) if stabilize == "baumgarte" else ()
    gains = tuple(q.symbol for q in extra) or None
    build = _hamiltonian_system if formulation == "hamiltonian" else _lagrangian_system
    states, multipliers, lin, energy = build(model, layout, rows, terms_V, position, gains)
    return CartesianSystem(
        readoff=True,  # rows of coefficient × one unknown: A and b read off the terms (ir.readoff_linear)
        name=model.name,
        doc=model.doc,
        path=model.path,
        formalism=f"cartesian-{formulation}",
        states=tuple(states),
        algebraics=(),
        multipliers=tuple(multipliers),
        params=model.params + extra,
        inputs=model.inputs,
        outputs=model.outputs,
        neural=model.neural,
        differential=tuple(r.equation() for r in lin),
        algebraic=(),
        energy=energy,
        energy_origin=model.span,
        constraints=tuple(Constraint(residual=r.residual, origin=r.origin, label=r.label) for r in rows if r.holonomic),
        span=model.span,
        stabilization=stabilize,
        stabilization_params=BAUMGARTE_PARAMS if stabilize == "baumgarte" else (),
        bodies=tuple(_body_summary(b) for b in model.bodies),
        segments=tuple(Segment(kind=c.kind, a=c.a.position, b=c.b.position, fixed=c.a.body is None or c.b.body is None)
                       for c in model.connectors),
        space=model.space,
    )


def _body_summary(b: Body) -> BodySummary:
    return BodySummary(
        name=b.name,
        kind="point mass" if b.kind == "point" else f"rigid, dim {b.dim}",
        mass=b.mass,
        moments=tuple(b.moments) if b.kind == "rigid" else (),
        nodes=tuple(b.name + ("." + nn if nn else "") for nn in b.node_names),
        node_mass_matrix=node_mass_matrix(b.mass, b.moments) if b.kind == "rigid" else None,
        coordinates=len(b.nodes) * len(b.nodes[0]),
        span=b.span,
        positions=tuple(tuple(node) for node in b.nodes),
    )


def _lower(model: Model, options: LowerOptions) -> SymbolicSystem:
    """The plugin's lowering: the Cartesian system, its derived invariants (Φ, Φ̇) and, for the momentum
    formulation, the CSV's velocity columns."""
    from dataclasses import replace

    from .common import derived_invariants, velocity_report

    system = lower_cartesian(model, options.formulation, stabilize=options.stabilize)
    positions = {c for body in model.bodies for node in body.nodes for c in node}
    report = velocity_report(system, positions) if options.formulation == "hamiltonian" else ()
    kinetic = tuple(s.name for s in system.states if s.symbol not in positions)  # velocities or momenta
    velocity = _velocity_invariants(model, system, positions)
    outputs = outputs_in_state(system, positions)
    return replace(system, invariants=derived_invariants(system, positions, velocity), report=report, kinetic=kinetic,
                   outputs=outputs)


def _velocity_invariants(model: Model, system: SymbolicSystem, positions) -> tuple[Constraint, ...]:
    """A(x, t)·ẋ of each velocity constraint on bodies, with ẋ in the state (v, or M⁻¹p), for drift monitoring."""
    from .common import position_rates

    out = []
    velocity = [c for c in model.constraints if c.kind == "velocity"]
    if not velocity:
        return ()
    rates = {S.der(x): e for x, e in position_rates(system, positions).items()}
    for n, c in enumerate(model.constraints, start=1):
        if c.kind == "velocity":
            out.append(Constraint(residual=S.as_expr(c.residual).xreplace(rates), origin=c.span,
                                  label=f"velocity constraint {n}"))
    return tuple(out)


CARTESIAN = register(Formalism(
    name="cartesian", precedence=30, claims=lambda model: bool(model.bodies), lower=_lower,
    stabilizations=("none", "baumgarte"),
    describe="bodies in Cartesian coordinates with links, joints, hinges, springs and forces (LANGUAGE.md §3)",
))
