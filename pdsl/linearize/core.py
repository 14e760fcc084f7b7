"""The linearization of a compiled system about an operating point (LANGUAGE.md §12): a pure function from a
:class:`~pdsl.backend.functions.NumericSystem` and an :class:`~pdsl.linearize.point.OperatingPoint` to a frozen
:class:`Linearization`.

The vector field is the numeric system's own: ẋ = f(t, x, z, p, u) with the multipliers eliminated by the linear
solve of the differential rows, so its Jacobian (CasADi's, exact) is the Jacobian of the constrained vector field with
λ a function of the state — the λ·∇²Φ terms included. Algebraic variables are eliminated by the implicit function
theorem (dz = −g_z⁻¹(g_x dx + g_u du)). Where the system has invariants r(x) = 0 (Φ, Φ̇, velocity constraints), the
motion lies on their manifold, and A is restricted to its tangent space by coordinate partitioning (Wehage–Haug): a
pivoted LU of G = ∂r/∂x, row by row with the largest remaining entry as pivot, chooses one dependent state per
independent invariant; the others are the independent coordinates, δx = V δx_I with V_I = I, V_D = −G_D⁻¹ G_I, and
A = (∂f/∂x V)_I, B = (∂f/∂u)_I, C = ∂y/∂x V, D = ∂y/∂u. A Cartesian pendulum thus gives ±iω, not extra zero modes.
"""

from __future__ import annotations

from dataclasses import field

import casadi as ca
import numpy as np

from ..backend.functions import NumericSystem
from ..diagnostics import PdslError
from ..records import record
from .point import OperatingPoint

__all__ = ["Linearization", "linearize", "partition", "krylov_rank", "EQUILIBRIUM_TOL", "SURFACE_TOL"]

EQUILIBRIUM_TOL = 1e-8  # not an equilibrium: max |ẋ| > EQUILIBRIUM_TOL · (1 + max |x|)
SURFACE_TOL = 1e-10  # on a switching surface: |s| ≤ SURFACE_TOL · (1 + max |x|, |u|)
_PIVOT_TOL = 1e-10  # an invariant row whose remaining pivot is below this (relative) depends on the rows before it
_RANK_TOL = 1e-9


@record(kw_only=False, slots=False)
class Linearization:
    """δẋ = A δx + B δu, δy = C δx + D δu about ``point`` (in the independent coordinates ``states``).

    ``dependent``: the states coordinate partitioning expressed through the independent ones; ``residual``: ẋ at
    the point (zero at an equilibrium); ``eigenvalues`` of A (unstable first), with natural frequencies |λ| and
    damping ratios −Re λ/|λ| (NaN for λ = 0); ranks of the controllability and observability matrices (computed
    as the dimensions of the Krylov spaces, orthogonalised column by column). ``open_loop``: the feedback-law
    inputs were made free inputs (``inputs`` names them). ``outputs_declared``: C, D are the declared outputs; else
    C = I (the independent states) and D = 0."""

    model: str
    states: tuple[str, ...]
    dependent: tuple[str, ...]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    A: np.ndarray
    B: np.ndarray
    C: np.ndarray
    D: np.ndarray
    eigenvalues: np.ndarray
    natural_frequency: np.ndarray
    damping: np.ndarray
    controllability_rank: int
    observability_rank: int
    point: OperatingPoint
    state_names: tuple[str, ...]  # every state of the system, in the order of point.x
    residual: np.ndarray
    outputs_declared: bool
    open_loop: bool = False
    tangent: np.ndarray | None = None  # V: full-state directions of the independent coordinates (n × k)
    invariant_rows: tuple[int, ...] = ()  # the independent invariants, whose pivots chose ``dependent``
    algebraic_names: tuple[str, ...] = ()  # in the order of point.z
    param_names: tuple[str, ...] = ()  # in the order of point.p
    # the symbolic system linearized (open loop: with the feedback-law inputs free), for symbolic(); not compared
    system: object = field(default=None, compare=False, repr=False)

    @property
    def is_equilibrium(self) -> bool:
        return bool(np.max(np.abs(self.residual), initial=0.0) <= EQUILIBRIUM_TOL * (1 + np.max(np.abs(self.point.x), initial=0.0)))

    def to_dict(self) -> dict:
        """The content of ``linearization.json`` (full precision; NaN as null)."""
        from .output import as_json

        return as_json(self)

    def symbolic(self):
        """A, B, C, D as sympy matrices of the parameters (models of at most 12 states; see
        :mod:`pdsl.linearize.symbolic`)."""
        from .symbolic import symbolic_matrices

        if self.system is None:
            raise PdslError.at("BadOption", "symbolic(): this linearization does not carry its symbolic system",
                               hint="linearize with pdsl.linearize.run.linearize_numeric or Model.linearize")
        return symbolic_matrices(self.system, self)

    def _repr_markdown_(self) -> str:
        from .output import render_symbolic

        return render_symbolic(self, None, "markdown")

    def to_control(self):
        """A ``control.StateSpace`` (python-control), with the state, input and output names."""
        try:
            import control
        except ImportError:
            raise PdslError.at("MissingDependency", "to_control() needs the python-control package",
                               hint="install it with `pip install control`; A, B, C, D are also plain arrays "
                                    "(.A, .B, .C, .D)") from None
        return control.ss(self.A, self.B, self.C, self.D, states=list(self.states), inputs=list(self.inputs),
                          outputs=list(self.outputs))

    def __repr__(self) -> str:
        from .output import render_text

        return render_text(self)


def linearize(num: NumericSystem, point: OperatingPoint, *, open_loop: bool = False) -> Linearization:
    """The linearization of ``num`` about ``point`` (LANGUAGE.md §12). Raises ``OnSwitchingSurface`` at a point on a
    switching surface of the dynamics (the Jacobian jumps there)."""
    _check_switches(num, point)
    fx, fu, yx, yu, xdot = _jacobians(num, point)
    G = _invariant_jacobian(num, point)
    dep, rows, V = partition(G, *_kinematic_pairs(num, fx)) if G.shape[0] else ([], [], np.eye(num.nx))
    ind = [i for i in range(num.nx) if i not in set(dep)]
    A = (fx @ V)[ind]
    B = fu[ind]
    declared = bool(num.y_names)
    if declared:
        C, D, outputs = yx @ V, yu, tuple(num.y_names)
    else:
        C, D = np.eye(len(ind)), np.zeros((len(ind), len(num.u_names)))
        outputs = tuple(num.x_names[i] for i in ind)
    lam = _sorted_eigenvalues(A)
    wn = np.abs(lam)
    with np.errstate(invalid="ignore", divide="ignore"):
        zeta = np.where(wn > 0, -lam.real / np.where(wn > 0, wn, 1.0), np.nan)
    return Linearization(
        model=num.system.name, states=tuple(num.x_names[i] for i in ind), dependent=tuple(num.x_names[i] for i in dep),
        inputs=tuple(num.u_names), outputs=outputs, A=A, B=B, C=C, D=D, eigenvalues=lam, natural_frequency=wn,
        damping=zeta, controllability_rank=krylov_rank(A, B), observability_rank=krylov_rank(A.T, C.T),
        point=point, state_names=tuple(num.x_names), residual=xdot, outputs_declared=declared, open_loop=open_loop,
        tangent=V, invariant_rows=tuple(rows), algebraic_names=tuple(num.z_names), param_names=tuple(num.p_names),
    )


def _kinematic_pairs(num: NumericSystem, fx: np.ndarray) -> tuple[frozenset, dict]:
    """The kinetic states (velocities or momenta, as the formalism names them in the IR) and, for each other state,
    its partner: the kinetic state in the same place of the layout (positions and their velocities or conjugate
    momenta in the same order) where there are as many, else the kinetic state its rate depends on most strongly at
    the point (ẋ = v, ẋ = M⁻¹p; a Hamel model has fewer quasi-velocities than coordinates)."""
    kinetic = frozenset(num.x_names.index(k) for k in num.system.kinetic if k in num.x_names)
    if not kinetic:
        return kinetic, {}
    others = [i for i in range(num.nx) if i not in kinetic]
    kin = sorted(kinetic)
    if len(others) == len(kin):
        return kinetic, dict(zip(others, kin))
    partner = {}
    for i in others:
        j = max(kin, key=lambda c: abs(fx[i, c]))
        if fx[i, j] != 0:
            partner[i] = j
    return kinetic, partner


def _symbols(num: NumericSystem):
    T = ca.SX if num.kind == "SX" else ca.MX
    return T.sym("x", num.nx), T.sym("z", num.nz), T.sym("u", len(num.u_names))


def _jacobians(num: NumericSystem, pt: OperatingPoint):
    """∂ẋ/∂x, ∂ẋ/∂u, ∂y/∂x, ∂y/∂u at the point, the algebraic variables eliminated; and ẋ there."""
    x, z, u = _symbols(num)
    xdot, g = num.dae(pt.t, x, z, pt.p, u)
    y = num.outputs(pt.t, x, z, pt.p, u)
    outs = [xdot, y, g]
    jac = [ca.jacobian(e, v) for e in outs for v in (x, z, u)]
    f = ca.Function("linearization", [x, z, u], [xdot, *jac])
    vals = [np.asarray(v.full(), dtype=float) for v in f(pt.x, pt.z, pt.u)]
    xd = vals[0].ravel()
    (fx, fz, fu, yx, yz, yu, gx, gz, gu) = vals[1:]
    if num.nz:
        try:
            dzdx, dzdu = (-np.linalg.solve(gz, m) for m in (gx, gu))
        except np.linalg.LinAlgError:
            raise PdslError.at("BadOperatingPoint", "the algebraic equations are singular at this operating point "
                               "(∂g/∂z has no inverse): the algebraic variables are not functions of the state here",
                               num.system.span, "choose another operating point") from None
        fx, fu = fx + fz @ dzdx, fu + fz @ dzdu
        yx, yu = yx + yz @ dzdx, yu + yz @ dzdu
    if not (np.all(np.isfinite(fx)) and np.all(np.isfinite(fu)) and np.all(np.isfinite(xd))):
        raise PdslError.at("BadOperatingPoint", "the vector field or its Jacobian is not finite at this operating point",
                           num.system.span, "choose another operating point (--at)")
    return fx, fu, yx, yu, xd


def _invariant_jacobian(num: NumericSystem, pt: OperatingPoint) -> np.ndarray:
    T = ca.SX if num.kind == "SX" else ca.MX
    x = T.sym("x", num.nx)
    r = num.invariants(pt.t, x, pt.p)
    if r.shape[0] == 0:
        return np.zeros((0, num.nx))
    return np.asarray(ca.Function("G", [x], [ca.jacobian(r, x)])(pt.x).full(), dtype=float)


def partition(G: np.ndarray, kinetic: frozenset = frozenset(), partner: dict | None = None
              ) -> tuple[list[int], list[int], np.ndarray]:
    """Coordinate partitioning of the invariants' Jacobian G (m × n): a pivoted LU, row by row, each row's pivot
    the largest remaining entry (a row with none above the tolerance depends on the rows before it).

    The position-level rows (no entry in a ``kinetic`` column: the rows of DΦ) come first and choose the dependent
    positions; a velocity-level row then prefers as pivot the ``partner`` (the velocity or momentum state that is
    the rate of a dependent position) where its entry is not small, so that a dependent position's rate is
    dependent too. Returns the dependent columns (one per independent row, in the order found), those rows, and
    V (n × (n − rank)): the directions of the independent coordinates in the tangent space {G δx = 0},
    V_I = I, V_D = −G_D⁻¹ G_I."""
    m, n = G.shape
    if m == 0:
        return [], [], np.eye(n)
    kin = sorted(kinetic)
    position_rows = [i for i in range(m) if not kin or not np.any(G[i, kin])]
    order = position_rows + [i for i in range(m) if i not in set(position_rows)]
    U = np.array(G, dtype=float)
    scale = max(float(np.max(np.abs(G))), 1e-300)
    dep: list[int] = []
    rows: list[int] = []
    for i in order:
        row = U[i].copy()
        for r_, c in zip(rows, dep):  # eliminate the pivots found so far
            row -= (row[c] / U[r_, c]) * U[r_]
        U[i] = row
        free = [j for j in range(n) if j not in dep]
        if not free:
            continue
        j = max(free, key=lambda c: abs(row[c]))
        if abs(row[j]) <= _PIVOT_TOL * scale:
            continue
        preferred = [partner[d] for d in dep if partner and d in partner and partner[d] in free]
        good = [c for c in preferred if abs(row[c]) >= 1e-3 * abs(row[j])]
        if good:
            j = max(good, key=lambda c: abs(row[c]))
        dep.append(j)
        rows.append(i)
    ind = [j for j in range(n) if j not in set(dep)]
    V = np.zeros((n, len(ind)))
    V[ind, range(len(ind))] = 1.0
    if dep:
        Gr = G[rows]
        V[dep] = -np.linalg.solve(Gr[:, dep], Gr[:, ind])
    return dep, rows, V


def krylov_rank(A: np.ndarray, B: np.ndarray) -> int:
    """dim span{B, AB, A²B, …}: the rank of the controllability matrix, built with an orthonormal basis (each new
    column orthogonalised twice against the basis, kept when what remains is above the tolerance) rather than
    with powers of A, whose columns lose the small directions in rounding."""
    n = A.shape[0]
    if B.size == 0 or n == 0:
        return 0
    scale = max(float(np.linalg.norm(A, 2)), float(np.linalg.norm(B, 2)), 1e-300)
    basis = np.zeros((n, 0))
    new = [B[:, k] for k in range(B.shape[1])]
    while new and basis.shape[1] < n:
        added = []
        for v in new:
            w = v.copy()
            for _ in range(2):
                w -= basis @ (basis.T @ w)
            if np.linalg.norm(w) > _RANK_TOL * scale:
                w /= np.linalg.norm(w)
                basis = np.column_stack([basis, w])
                added.append(w)
                if basis.shape[1] == n:
                    break
        new = [A @ w for w in added]
    return basis.shape[1]


def _sorted_eigenvalues(A: np.ndarray) -> np.ndarray:
    """Eigenvalues, the largest real part first (conjugate pairs together, positive imaginary part first)."""
    if A.size == 0:
        return np.zeros(0, dtype=complex)
    lam = np.linalg.eigvals(A).astype(complex)
    return lam[np.lexsort((-lam.imag, -lam.real))]


def _check_switches(num: NumericSystem, pt: OperatingPoint) -> None:
    """OnSwitchingSurface where a switching function of the dynamics (an `if` on the state, the argument of sign,
    abs, min/max) vanishes at the point: the vector field's Jacobian jumps there."""
    if num.switching is None:
        return
    s = np.asarray(num.switching(pt.t, pt.x, pt.z, pt.p, pt.u), dtype=float).ravel()
    scale = 1 + max(np.max(np.abs(pt.x), initial=0.0), np.max(np.abs(pt.u), initial=0.0))
    on = [k for k in range(len(s)) if abs(s[k]) <= SURFACE_TOL * scale]
    if not on:
        return
    from .surfaces import surface_error

    raise surface_error(num, [num.switching_names[k] for k in on], [float(s[k]) for k in on])
