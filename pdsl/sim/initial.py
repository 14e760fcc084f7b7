"""Initial states: user overrides, projection onto the constraint manifold, random draws.

Projection is the minimum-norm Newton iteration of BENCHMARKS A3.1:
x ← x − Jᵀ(JJᵀ)⁺ r(x) on the invariants r = (Φ, Φ̇, velocity constraints), with
each step clamped to half the RMS scale of the state.
"""

from __future__ import annotations

from typing import Mapping

import casadi as ca
import numpy as np

from ..backend.functions import NumericSystem
from ..diagnostics import PdslError
from ..records import record

__all__ = ["Projector", "initial_state", "random_initial_states", "sampled_initial_states", "SampledStates"]


@record(kw_only=False, slots=False)
class Projection:
    x: np.ndarray
    residual_before: float
    residual_after: float
    iterations: int
    changes: tuple[tuple[str, float, float], ...]  # (state, before, after)


class Projector:
    """Newton projection onto r(t, x, p) = 0 (minimum-norm steps)."""

    def __init__(self, num: NumericSystem):
        self.num = num
        T = ca.SX if num.kind == "SX" else ca.MX
        t, x, p = T.sym("t"), T.sym("x", num.nx), T.sym("p", len(num.p_names))
        r = num.invariants(t, x, p)
        self.n = r.shape[0]
        J = ca.jacobian(r, x)
        if num.projection is not None:
            # steps along the model's own directions B (a p-H junction's redistribution): x ← x − B (J B)⁺ r,
            # returned as (r, J B, B)
            B = num.projection(t, x, p)
            self._f = ca.Function("r_and_J", [t, x, p], [r, ca.mtimes(J, B), B])
        else:
            self._f = ca.Function("r_and_J", [t, x, p], [r, J])

    def residual(self, x, p, t=0.0) -> np.ndarray:
        return np.asarray(self._f(t, x, p)[0]).ravel()

    def project(self, x0, p, t: float = 0.0, *, tol: float = 1e-12, max_iter: int = 100, keep=()) -> Projection:
        """Move the start onto r = 0. Without junction directions, the states move in tiers: first those that have
        neither a declared start value nor a given one (``keep``: names from ``--init``), then also those with a
        declared start, then every state — so a velocity constraint solves the dependent velocities and never
        moves a coordinate or a velocity the user gave when that suffices."""
        x = np.array(x0, dtype=float)
        r, J = self._eval(x, p, t)
        before = _rms(r)
        if before > tol and np.any(np.all(np.abs(J) < 1e-14, axis=1) & (np.abs(r) > tol)):
            # a constraint with no gradient here (e.g. every body at the origin): start from a
            # deterministic nearby point, so Newton has a direction to move in
            x = x + 1e-3 * np.random.default_rng(0).standard_normal(x.shape)
            r, _ = self._eval(x, p, t)
        scale = 0.5 * max(_rms(x), 1.0)  # A3.1 clamps steps to half the state scale
        start, k = x, 0
        tiers = [None] if self.num.projection is not None else self._tiers(set(keep))
        for cols in tiers:
            x, r, used = self._newton(start, p, t, cols, scale, tol, max_iter)
            k += used
            if _rms(r) <= tol:
                break
        after = _rms(r)
        if not after <= max(tol * 1e3, 1e-8):  # NaN too: constraints that are not finite at the start
            raise PdslError.at(
                "InconsistentInitialState",
                f"the initial state could not be projected onto the constraints (RMS residual {after:.2e} "
                f"after {k} Newton steps)",
                self.num.system.span,
                "start closer to a configuration that satisfies the constraints (--init ...)",
            )
        changes = tuple(
            (name, float(a), float(b)) for name, a, b in zip(self.num.x_names, x0, x) if abs(a - b) > 1e-12 * max(1.0, abs(a))
        )
        return Projection(x=x, residual_before=before, residual_after=after, iterations=k, changes=changes)

    def _tiers(self, keep: set) -> list[list[int] | None]:
        names, has_start = self.num.x_names, _declared(self.num)
        free = [i for i, n in enumerate(names) if not has_start[i] and n not in keep]
        declared = [i for i, n in enumerate(names) if n not in keep]
        tiers = [cols for cols in (free, declared) if cols]
        return [*dict.fromkeys(map(tuple, tiers)), None]  # None: every state

    def _newton(self, x, p, t, cols, scale, tol, max_iter):
        """Minimum-norm Newton steps on r = 0 moving only ``cols`` (None: every state, along B where given)."""
        x = np.array(x, dtype=float)
        r, _ = self._eval(x, p, t)
        k = 0
        while _rms(r) > tol and k < max_iter:
            r, J, B = self._eval(x, p, t, directions=True)
            if not (np.all(np.isfinite(r)) and np.all(np.isfinite(J)) and (B is None or np.all(np.isfinite(B)))):
                break  # inf or NaN in the constraints here (a parameter of 1e308): no Newton step; reported by project
            if cols is not None:
                dx = np.zeros_like(x)
                dx[list(cols)] = -np.linalg.lstsq(J[:, list(cols)], r, rcond=None)[0]
                if np.max(np.abs(dx)) < 1e-15 * scale:
                    break  # these states cannot reduce the residual further
                x = x + np.clip(dx, -scale, scale)
            elif B is None:
                dx = -np.linalg.lstsq(J, r, rcond=None)[0]
                x = x + np.clip(dx, -scale, scale)
            else:  # shrink the whole step (clipping entries would leave the directions, and the balance they keep)
                dx = B @ -np.linalg.lstsq(J, r, rcond=None)[0]
                x = x + dx * min(1.0, scale / max(float(np.max(np.abs(dx))), 1e-300))
            r, _ = self._eval(x, p, t)
            k += 1
        return x, r, k

    def _eval(self, x, p, t, directions: bool = False):
        """r and the Jacobian of r in the step coordinates (J, or J B); with ``directions`` also B (or None)."""
        out = self._f(t, x, p)
        r, J = np.asarray(out[0]).ravel(), np.asarray(out[1])
        if not directions:
            return r, J
        return r, J, (np.asarray(out[2]) if len(out) > 2 else None)


def _rms(v) -> float:
    v = np.asarray(v, dtype=float)
    with np.errstate(over="ignore", invalid="ignore"):  # inf/NaN residuals (a 1e308 parameter): reported as such
        return float(np.sqrt(np.mean(v**2))) if v.size else 0.0


def initial_state(num: NumericSystem, overrides: Mapping[str, float], p: np.ndarray, t0: float = 0.0) -> np.ndarray:
    """Start values with ``--init`` overrides; a name may be a state or a shown column (``b.vx``)."""
    x = num.x_start.copy()
    shown = {}
    for name, value in overrides.items():
        if name in num.x_names:
            x[num.x_names.index(name)] = value
        elif name in num.report_names:
            shown[name] = value
        else:
            names = list(dict.fromkeys([*num.x_names, *num.report_names]))
            raise PdslError.at("BadOption", f"--init {name}: `{name}` is not a state of {num.system.name}",
                               hint="states: " + ", ".join(names))
    if shown:
        x = _ShownSolver(num, p, t0).solve(x, shown)
    return x


class _ShownSolver:
    """Find the state whose shown columns take requested values. Columns that are states themselves keep their
    values; columns computed from the states (velocities of a Hamel model, ``b.vx``) follow from the others, so a
    start given as ``der(theta)``/``der(phi)`` sets the quasi-velocities and ``der(x)`` is what the distribution makes
    of them (minimum-norm Newton steps on the requested and the kept columns)."""

    def __init__(self, num: NumericSystem, p, t0: float = 0.0):
        T = ca.SX if num.kind == "SX" else ca.MX
        xs = T.sym("x", num.nx)
        y = num.report(t0, xs, p)
        self.num = num
        self._f = ca.Function("shown", [xs], [y, ca.jacobian(y, xs)])

    def solve(self, x, shown: Mapping[str, float]) -> np.ndarray:
        x = np.array(x, dtype=float)
        names, states = self.num.report_names, self.num.x_names
        for name, value in shown.items():  # a shown column that is a state is set directly
            if name in states:
                x[states.index(name)] = value
        rows = [names.index(n) for n in shown if n not in states]
        if not rows:
            return x
        target = np.array([shown[names[i]] for i in rows], dtype=float)
        # unknowns: the states these columns depend on that were neither given nor declared with a start value
        declared = {n for n, d in zip(self.num.x_names, _declared(self.num)) if d}
        J = np.asarray(self._f(x)[1])[rows]
        free = [j for j, n in enumerate(states) if np.any(J[:, j] != 0) and n not in shown and n not in declared]
        scale = max(1.0, float(np.max(np.abs(target))))
        res = np.full(len(rows), np.inf)
        for _ in range(30):
            yv, J = (np.asarray(v) for v in self._f(x))
            res = yv.ravel()[rows] - target
            if np.max(np.abs(res)) < 1e-13 * scale or not free:
                break
            x[free] = x[free] - np.linalg.lstsq(J[np.ix_(rows, free)], res, rcond=None)[0]
        if np.max(np.abs(res)) > 1e-9 * scale:
            bad = [names[rows[i]] for i in np.argsort(-np.abs(res))[:3] if abs(res[i]) > 1e-9 * scale]
            raise PdslError.at("InconsistentInitialState", "the requested start values cannot all hold: "
                               + ", ".join(f"`{b}`" for b in bad) + " follow from the other start values in this model",
                               self.num.system.span, "give fewer --init values (e.g. only the independent velocities)")
        return x



def random_initial_states(num: NumericSystem, base: np.ndarray, p: np.ndarray, n: int, seed: int, scale: float) -> np.ndarray:
    """n draws base + scale·N(0, 1) per state, each projected onto the constraints (rows = draws)."""
    if n < 1 or n > 100_000:
        raise PdslError.at("BadOption", f"--random-init must be between 1 and 100000, got {n}")
    if not (scale >= 0 and np.isfinite(scale)):
        raise PdslError.at("BadOption", f"--random-scale must be non-negative, got {scale}")
    rng = np.random.default_rng(seed)
    draws = base[None, :] + scale * rng.standard_normal((n, num.nx))
    if num.invariants.size1_out(0) == 0:
        return draws
    proj = Projector(num)
    return np.array([proj.project(d, p).x for d in draws])


@record(kw_only=False, slots=False)
class SampledStates:
    """Initial states drawn by a declared sampler: ``x`` projected, ``raw`` as drawn (rows = draws)."""

    x: np.ndarray
    raw: np.ndarray
    values: dict  # sampled target name -> values as drawn (before projection)
    max_change: float  # largest |projected − drawn| over all draws and states


def sampled_initial_states(num: NumericSystem, sampler, base: np.ndarray, p: np.ndarray, n: int, seed: int,
                           t0: float = 0.0) -> SampledStates:
    """n draws of ``sampler`` (pdsl.sim.sampling) on top of ``base``, each projected onto Φ = 0, Φ̇ = 0."""
    if n < 1 or n > 100_000:
        raise PdslError.at("BadOption", f"--random-init must be between 1 and 100000, got {n}")
    values = sampler.sample(n, seed)
    X = np.tile(np.asarray(base, dtype=float), (n, 1))
    shown = {}
    for name, v in values.items():
        if name in num.x_names:
            X[:, num.x_names.index(name)] = v
        else:
            shown[name] = v
    if shown:
        solver = _ShownSolver(num, p, t0)
        X = np.array([solver.solve(X[r], {k: v[r] for k, v in shown.items()}) for r in range(n)])
    raw = X.copy()
    if num.invariants.size1_out(0):
        proj = Projector(num)
        X = np.array([proj.project(x, p, t0).x for x in X])
    return SampledStates(x=X, raw=raw, values=values, max_change=float(np.max(np.abs(X - raw))) if n else 0.0)


def _declared(num) -> tuple[bool, ...]:
    """Per state: declared with a start value (from the NumericSystem: a cached one has no sympy loaded)."""
    if num.x_declared is not None:
        return num.x_declared
    return tuple(s.start is not None for s in num.system.states)
