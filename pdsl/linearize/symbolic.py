"""A, B, C, D as sympy matrices of the parameters (``--format latex|markdown``, models of at most 12 states).

The Jacobians are sympy's, of the IR's own expressions (the differential rows with the feedback laws substituted,
the algebraic rows, the invariants, the outputs), evaluated at the operating point — the values given as
expressions (``--at theta=pi``) stay exact, the others enter as floats — with the parameters left as symbols. A
linear-implicit system A_w(x)·w = b(x), w = (ẋ, λ), is differentiated implicitly at the point,
dw/dx_j = A_w⁻¹ (∂b/∂x_j − ∂A_w/∂x_j · w): only the matrix at the point is inverted, never the symbolic one. The
tangent-space reduction uses the partition the numeric linearization chose.
"""

from __future__ import annotations

import sympy as sp

from ..diagnostics import PdslError
from ..records import record

__all__ = ["SymbolicMatrices", "symbolic_matrices", "MAX_SYMBOLIC_STATES"]

MAX_SYMBOLIC_STATES = 12
_TIDY_OPS = 200  # entries with floats larger than this are shown as derived
_TIDY_OPS_EXACT = 2000  # entries without floats (rational functions of the parameters): cancel is fast on these


@record(kw_only=False, slots=False)
class SymbolicMatrices:
    A: sp.ImmutableMatrix
    B: sp.ImmutableMatrix
    C: sp.ImmutableMatrix
    D: sp.ImmutableMatrix

    def numeric(self, values: dict) -> tuple:
        """The four matrices with ``values`` (symbol -> number) substituted, as float arrays."""
        import numpy as np

        return tuple(np.array(M.xreplace(values).evalf(), dtype=float).reshape(M.shape) for M in (self.A, self.B, self.C, self.D))


def symbolic_matrices(system, lin) -> SymbolicMatrices:
    """The sympy form of ``lin`` (a :class:`~pdsl.linearize.core.Linearization` of ``system``; for an open-loop
    linearization, of the open-loop system)."""
    if len(system.states) > MAX_SYMBOLIC_STATES:
        raise PdslError.at("NotYetSupported", f"symbolic matrices are built for models of at most {MAX_SYMBOLIC_STATES} "
                           f"states; {system.name} has {len(system.states)}", system.span,
                           "use --format text (numeric matrices), or -o DIR for linearization.json")
    if system.neural:
        raise PdslError.at("NotYetSupported", "symbolic matrices of a model with neural components", system.span,
                           "use --format text (numeric matrices)")
    pt = lin.point
    xs = [s.symbol for s in system.states]
    zs = [a.symbol for a in system.algebraics]
    us = [u.symbol for u in system.exogenous_inputs]
    exact = dict(pt.exact)
    scale = 1.0 + max((abs(float(v)) for v in (*pt.x, *pt.z, *pt.u)), default=0.0)
    at = {}
    for s, v in zip(system.states, pt.x):
        at[s.symbol] = exact.get(s.name, _value(v, scale))
    for a, v in zip(system.algebraics, pt.z):
        at[a.symbol] = _value(v, scale)
    for u, v in zip(system.exogenous_inputs, pt.u):
        at[u.symbol] = exact.get(u.name, _value(v, scale))
    from .. import symbols as S

    at[S.TIME] = sp.Float(pt.t)
    laws = system.input_laws()

    def law(e):
        return e.xreplace(laws) if laws else e

    fx, fz, fu = _rates_jacobian(system, xs, zs, us, at, law)
    y = sp.Matrix([law(o.expr) for o in system.outputs])
    yx, yz, yu = (_jac(y, v, at) for v in (xs, zs, us))
    if zs:
        g = sp.Matrix([law(e.lhs - e.rhs) for e in system.algebraic])
        gx, gz, gu = (_jac(g, v, at) for v in (xs, zs, us))
        gz_inv_x, gz_inv_u = gz.LUsolve(gx), gz.LUsolve(gu)
        fx, fu = fx - fz * gz_inv_x, fu - fz * gz_inv_u
        yx, yu = yx - yz * gz_inv_x, yu - yz * gz_inv_u
    V = _tangent(system, lin, xs, at)
    ind = [lin.state_names.index(n) for n in lin.states]
    A = (fx * V).extract(ind, list(range(V.shape[1]))) if ind else sp.zeros(0, 0)
    B = fu.extract(ind, list(range(fu.shape[1]))) if ind and us else sp.zeros(len(ind), len(us))
    if system.outputs:
        C, D = yx * V, yu
    else:
        C, D = sp.eye(len(ind)), sp.zeros(len(ind), len(us))
    return SymbolicMatrices(*(sp.ImmutableMatrix(M.applyfunc(_tidy)) for M in (A, B, C, D)))


def _jac(rows: sp.Matrix, v: list, at: dict) -> sp.Matrix:
    if not v or rows.shape[0] == 0:
        return sp.zeros(rows.shape[0], len(v))
    return rows.jacobian(v).xreplace(at)


def _rates_jacobian(system, xs, zs, us, at, law):
    """∂ẋ/∂(x, z, u) at the point: read off an explicit system's right-hand sides, else by implicit differentiation
    of A_w(x)·w = b(x) at the point."""
    nx = len(xs)
    if system.is_explicit():
        f = sp.Matrix([law(e.rhs) for e in system.differential])
        return tuple(_jac(f, v, at) for v in (xs, zs, us))
    Aw, b = system.linear_system()
    Aw, b = Aw.applyfunc(law), b.applyfunc(law)
    A0 = Aw.xreplace(at)
    w0 = A0.LUsolve(b.xreplace(at))
    out = []
    for v in (xs, zs, us):
        if not v:
            out.append(sp.zeros(nx, 0))
            continue
        rhs = sp.Matrix.hstack(*[(b.diff(vj) - Aw.diff(vj) * w0).xreplace(at) if Aw.has(vj) else b.diff(vj).xreplace(at)
                                 for vj in v])
        dw = A0.LUsolve(rhs)
        out.append(dw[:nx, :])
    return tuple(out)


def _tangent(system, lin, xs, at) -> sp.Matrix:
    """V of the numeric partition, with G = ∂r/∂x of the invariants at the point (symbolic in the parameters)."""
    n = len(xs)
    dep = [lin.state_names.index(d) for d in lin.dependent]
    ind = [lin.state_names.index(i) for i in lin.states]
    V = sp.zeros(n, len(ind))
    for k, i in enumerate(ind):
        V[i, k] = 1
    if not dep:
        return V
    r = sp.Matrix([system.invariants[i].residual for i in lin.invariant_rows])
    G = r.jacobian(xs).xreplace(at)
    GD, GI = G.extract(list(range(len(dep))), dep), G.extract(list(range(len(dep))), ind)
    VD = -GD.LUsolve(GI)
    for k, d in enumerate(dep):
        for j in range(len(ind)):
            V[d, j] = VD[k, j]
    return V


def _value(v, scale: float) -> sp.Expr:
    """A value a solver found (or a start value) as a sympy number. Within 1e-12 of the point's scale of a fraction
    with a denominator up to 1000 it is that fraction: round-off zeros (a trimmed velocity of 1e-22) vanish instead
    of leaving terms of 1e-16 in the matrices, and −0.4999999999999999 (a body's centre at −L/2) is −1/2. Display
    only: the numeric matrices use the values as they are."""
    from fractions import Fraction

    v = float(v)
    f = Fraction(v).limit_denominator(1000)
    if abs(v - float(f)) <= 1e-12 * scale:
        return sp.Rational(f.numerator, f.denominator)
    return sp.Float(v, 17)


def _tidy(e: sp.Expr) -> sp.Expr:
    """A rational function of the parameters in lowest terms (sympy's cancel, then common factors pulled out); an
    entry larger than ``_TIDY_OPS`` operations is shown as derived (cancel on large expressions full of floats takes
    minutes: a rigid pendulum's 12-state entries took 4 min)."""
    limit = _TIDY_OPS if e.has(sp.Float) else _TIDY_OPS_EXACT
    if not e.free_symbols or not _small(e, limit):
        return e
    try:
        c = sp.cancel(sp.together(e))
        return sp.factor_terms(c) if _small(c, limit) else c
    except (sp.PolynomialError, TypeError, ValueError):
        return e


def _small(e: sp.Expr, limit: int) -> bool:
    """At most ``limit`` operations, without walking all of a huge expression."""
    for k, _ in enumerate(sp.preorder_traversal(e)):
        if k > 8 * limit:
            return False
    return sp.count_ops(e) <= limit
