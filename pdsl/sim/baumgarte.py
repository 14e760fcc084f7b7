"""Baumgarte stabilisation's gains: α, β of Φ̈ + 2αΦ̇ + β²Φ = 0 for a system lowered with ``stabilize="baumgarte"``
(pdsl.lower.cartesian builds the rows; the gains are parameters that ``simulate`` sets from the time scale of the
motion unless given)."""

from __future__ import annotations

import math
from dataclasses import replace

import casadi as ca
import numpy as np

from ..backend.functions import NumericSystem
from ..diagnostics import PdslError
from ..records import record
from ..vocab import FIXED_STEP, Stabilize

__all__ = ["BAUMGARTE_FACTOR", "BaumgarteGains", "baumgarte_gains"]

BAUMGARTE_FACTOR = 3.0  # default gains: critically damped, this many times the fastest rate of the motion


@record(kw_only=False, slots=False)
class BaumgarteGains:
    """α, β of Φ̈ + 2αΦ̇ + β²Φ = 0 and how they were chosen."""

    alpha: float
    beta: float
    how: str


def baumgarte_gains(num: NumericSystem, X0: np.ndarray, p: np.ndarray, grid: np.ndarray, *,
                    alpha: float | None = None, beta: float | None = None, fixed_step: float | None = None) -> BaumgarteGains:
    """Gains for Baumgarte stabilisation; the defaults come from the time scale of the motion.

    α = β = ω (critical damping: a violation decays like (1 + ωt)e^(−ωt)) with
    ω = BAUMGARTE_FACTOR·ρ, ρ the fastest rate of the motion over the starts X0 (at most
    100 of them), the largest of

    * the spectral radius of ∂f/∂x (a spring's √(k/m), a potential's curvature);
    * max |ẋ|/L and √(max |ẍ|/L), L the length scale of the constraints (the smallest
      ‖∇Φ_k‖/‖∇²Φ_k‖ over the quadratic rows: a link length, a body's axis length):
      a rotation rate, and √(g/l) for a pendulum even where ∂f/∂x vanishes (at rest,
      horizontal);

    floored at 1/(t_end − t0). For a fixed-step scheme ω is capped at 1/h to keep the step
    stable. One gain given: the other takes the same value (critical damping).
    """
    for name, v in (("--baumgarte-alpha", alpha), ("--baumgarte-beta", beta)):
        if v is not None and not (math.isfinite(v) and v >= 0):
            raise PdslError.at("BadOption", f"{name} must be a non-negative number, got {v}",
                               hint="α damps Φ̇ and β² pulls Φ back; α = β (critical damping) is the usual choice")
    if alpha is not None or beta is not None:
        a = alpha if alpha is not None else beta
        b = beta if beta is not None else alpha
        return BaumgarteGains(alpha=float(a), beta=float(b), how="given")
    rho = max(_motion_rate(num, x0, p, float(grid[0])) for x0 in np.atleast_2d(X0)[:100])
    floor = 1.0 / float(grid[-1] - grid[0])
    omega = BAUMGARTE_FACTOR * max(rho, floor)
    how = f"{BAUMGARTE_FACTOR:g} × the fastest rate of the motion at the start, {max(rho, floor):.4g}/s"
    if fixed_step is not None and omega * fixed_step > 1.0:
        omega = 1.0 / fixed_step
        how = f"capped at 1/h for the fixed step h = {fixed_step:g}"
    return BaumgarteGains(alpha=omega, beta=omega, how=how)


def _motion_rate(num: NumericSystem, x0: np.ndarray, p: np.ndarray, t0: float) -> float:
    """ρ of :func:`baumgarte_gains` at one state (gains set to zero)."""
    T = ca.SX if num.kind == "SX" else ca.MX
    x = T.sym("x", num.nx)
    q = p.copy()
    q[[num.p_names.index(n) for n in num.system.stabilization_params]] = 0.0
    f = num.dae(t0, x, num.z_start, q, ca.DM.zeros(len(num.u_names), 1))[0]
    phi = num.constraints(t0, x, q)
    symbols = set().union(*(c.residual.free_symbols for c in num.system.constraints))
    pos = [i for i, s in enumerate(num.system.states) if s.symbol in symbols]
    vel = f[pos]
    outs = [ca.jacobian(f, x), vel, ca.jtimes(vel, x, f), ca.jacobian(phi, x)]
    outs += [ca.hessian(phi[k], x)[0] for k in range(phi.shape[0])]
    vals = [np.asarray(v) for v in ca.Function("rates", [x], outs)(x0)]
    J, v, a, D, H = vals[0], vals[1].ravel(), vals[2].ravel(), vals[3], vals[4:]
    if not all(np.all(np.isfinite(m)) for m in vals):
        return 0.0
    rate = float(np.max(np.abs(np.linalg.eigvals(J)))) if J.size else 0.0
    lengths = [np.linalg.norm(D[k]) / np.linalg.norm(Hk, 2) for k, Hk in enumerate(H) if np.any(Hk != 0)]
    lengths = [L for L in lengths if L > 0 and np.isfinite(L)]
    if lengths and v.size:
        L = min(lengths)
        rate = max(rate, float(np.max(np.abs(v))) / L, math.sqrt(float(np.max(np.abs(a))) / L))
    return rate


def _stabilization(num: NumericSystem) -> str:
    return num.system.stabilization


def _apply_gains(num, st, X0, grid, alpha, beta, params) -> tuple[object, dict]:
    """Put the Baumgarte gains into the parameter vector (unless given as parameters)."""
    if st.stabilize != Stabilize.BAUMGARTE:
        if alpha is not None or beta is not None:
            raise PdslError.at("BadOption", "--baumgarte-alpha/--baumgarte-beta need --stabilize baumgarte")
        return st, {}
    names = num.system.stabilization_params
    given = {n: (params or {})[n] for n in names if n in (params or {})}
    if given and (alpha is not None or beta is not None):
        raise PdslError.at("BadOption", "give the Baumgarte gains either as --baumgarte-alpha/-beta or as --param, not both")
    if given:
        alpha, beta = given.get(names[0]), given.get(names[1])
    h = float(grid[1] - grid[0]) / st.substeps if st.integrator in FIXED_STEP and len(grid) > 1 else None
    gains = baumgarte_gains(num, X0, st.p, grid, alpha=alpha, beta=beta, fixed_step=h)
    p = st.p.copy()
    p[num.p_names.index(names[0])], p[num.p_names.index(names[1])] = gains.alpha, gains.beta
    return replace(st, p=p), {"baumgarte": gains}
