"""Chunk fits with estimated start states (``--start estimate``): unbiased under measurement noise.

The chunk loss of :mod:`pdsl.fit.loss` rolls every chunk out from its first *data* sample. When
that sample is noisy, the noise enters the rollout as a wrong initial condition and biases the
parameters (errors in variables); when a state is not measured at all (velocities, currents) there
is no sample to start from. Here the start of every chunk is an unknown instead — the shown state
s_c at the chunk's first sample, a *latent start* as multiple shooting has for its nodes — and
Levenberg–Marquardt minimises, over θ and all s_c together,

    Σ_c Σ_k≥0 |w ⊙ (obs(x̂_c,k) − y_c,k)|²      (the first sample k = 0 is compared too)

Each chunk's residuals depend on θ and on its own s_c only, so the normal equations are
block-arrow shaped; the step is computed through the Schur complement of the start blocks
(cost linear in the number of chunks). The information matrix of θ *with the starts profiled
out*, H = Σ_c (J_θᵀJ_θ − J_θᵀJ_s (J_sᵀJ_s)⁻¹ J_sᵀJ_θ), gives the standard errors s²H⁻¹ and the
identifiability report of :mod:`pdsl.fit.identify`.

For a constrained (Cartesian) model the start's invariants (Φ, Φ̇, :attr:`NumericSystem.invariants`)
are residuals too: they can vanish exactly, so they keep each start on the constraint manifold without
biasing the fit (the off-manifold directions are otherwise nearly flat and Gauss–Newton creeps along them).

Starting values: measured columns from the data; an unmeasured ``der(q)`` (Lagrangian velocity) or
``b.vx`` (Cartesian velocity) from finite differences of the measured ``q`` / ``b.x``; any other
unmeasured column 0. A few Gauss–Newton sweeps on the starts alone (θ fixed) precede the joint
steps, so those guesses only need to be rough.
"""

from __future__ import annotations

import re
import time

import casadi as ca
import numpy as np

from ..diagnostics import PdslError
from .checkpoint import State
from .data import Chunks, Dataset
from .loss import ChunkLoss, _call
from .train import Callback, Result, TrainOptions, _bar, _last_epoch, _postfix, _record

__all__ = ["LatentChunks", "latent_gauss_newton", "start_guesses"]

_THETA_STEP = 1e-8  # a Gauss–Newton step below this (relative to |θ|) ends the fit
# weight of the start's constraint residuals (Φ, Φ̇) of constrained models, times the mean column weight (1/σ): near-
# constraints. Weight 1 (data units) left the starts free to leave the manifold: on the spring pendulum from positions
# only the error bars came out 1.7x the multiple-shooting ones (which a 12-seed Monte Carlo confirmed) and the estimate
# 2.7 sigma away; 100 relative to the data's scale reproduces multiple shooting; 1e3 made Levenberg-Marquardt stall.
_INVARIANT_WEIGHT = 1e2


def start_guesses(data: Dataset) -> list[np.ndarray]:
    """Per trajectory, the shown state at every sample: data where measured, else a guess (module docstring)."""
    out = []
    names = list(data.shown)
    for tr in data.trajectories:
        S = np.array(tr.S, dtype=float)
        for k, name in enumerate(names):
            if np.all(np.isfinite(S[:, k])):
                continue
            base = _derivative_of(name)
            if base in names and np.all(np.isfinite(S[:, names.index(base)])) and len(tr.t) >= 2:
                S[:, k] = np.gradient(S[:, names.index(base)], tr.t)
            else:
                S[:, k] = 0.0
        out.append(S)
    return out


def _derivative_of(name: str) -> str | None:
    m = re.fullmatch(r"der\((.+)\)", name)
    if m:
        return m.group(1)
    m = re.fullmatch(r"(.+)\.v([a-z])", name)
    if m:
        return f"{m.group(1)}.{m.group(2)}"
    return None


class LatentChunks:
    """Residuals and Jacobians (w.r.t. θ and the chunk starts) of chunks with latent starts."""

    def __init__(self, loss: ChunkLoss, invariant_weight: float = _INVARIANT_WEIGHT):
        if not isinstance(loss, ChunkLoss):
            raise PdslError.at("BadOption", "--start estimate needs the CasADi backend", hint="use --backend casadi (or auto)")
        self.loss = loss
        num, n = loss.num, loss.spec.steps
        theta = ca.MX.sym("theta", loss.layout.n_theta)
        s0 = ca.MX.sym("s0", len(num.report_names))
        nobs = len(loss.observed)
        Y0, Y = ca.MX.sym("Y0", nobs), ca.MX.sym("Y", nobs, n)
        U, T = ca.MX.sym("U", len(num.u_names), n + 1), ca.MX.sym("T", 1, n + 1)
        W = ca.MX.sym("W", nobs, n + 1)  # per-sample factors (Chunks.W: 0 on padding)
        p = loss.layout.casadi_p(theta)
        x0 = loss._x0(T[0], s0, p)
        _, Yhat = loss.rollout_observed(n, x0, p, U, T)
        R = loss.weighted(Yhat, Y) * W[:, 1:]
        R0 = loss.weighted(loss.obs(T[0], x0, p, U[:, 0]), Y0) * W[:, 0]
        r = ca.vertcat(R0, ca.vec(R))
        if num.invariants.size1_out(0):
            # constrained (Cartesian) models: the start's invariants (Φ, Φ̇) as residuals, so the start sits on
            # the constraint manifold; they can vanish exactly, so this fixes directions the data hardly see
            # (they would otherwise creep) without biasing the fit
            scale = invariant_weight * float(np.mean(np.asarray(loss.weights, dtype=float)))
            r = ca.vertcat(r, scale * num.invariants(T[0], x0, p))
        ins, names = [theta, s0, Y0, Y, U, T, W], ["theta", "s0", "Y0", "Y", "U", "T", "W"]
        self.m = int(r.numel())
        self.nt, self.ns = loss.layout.n_theta, len(num.report_names)
        self._value = ca.Function("latent_res", ins, [r], names, ["r"])
        self._jac = ca.Function("latent_res_jac", ins, [r, ca.jacobian(r, theta), ca.jacobian(r, s0)], names,
                                ["r", "Jt", "Js"])
        self._maps: dict = {}

    def _mapped(self, kind: str, B: int) -> ca.Function:
        key = (kind, B)
        if key not in self._maps:
            fn = self._value if kind == "value" else self._jac
            self._maps[key] = fn.map(B, "thread", max(1, self.loss.spec.threads))
        return self._maps[key]

    @staticmethod
    def _args(chunks: Chunks, S: np.ndarray):
        B, n = len(chunks), chunks.steps
        Y = chunks.Y.transpose(1, 0, 2).reshape(chunks.Y.shape[1], B * n)
        U = chunks.U.transpose(1, 0, 2).reshape(chunks.U.shape[1], B * (n + 1))
        n_obs = chunks.Y.shape[1]
        W = (np.ones((n_obs, B * (n + 1))) if chunks.W is None
             else chunks.W.transpose(1, 0, 2).reshape(n_obs, B * (n + 1)))
        return [S.T, chunks.Y0.T, Y, U, chunks.T.reshape(1, -1), W]

    def residuals(self, theta, chunks: Chunks, S, batch: int = 256) -> np.ndarray:
        """(N, m): the weighted residuals of every chunk (first sample included)."""
        out = []
        for a in range(0, len(chunks), batch):
            part, Sp = chunks.take(slice(a, a + batch)), S[a : a + batch]
            r = _call(self._mapped("value", len(part)), theta, *self._args(part, Sp))
            out.append(np.asarray(r).T)
        return np.vstack(out) if out else np.zeros((0, self.m))

    def jacobians(self, theta, chunks: Chunks, S, batch: int = 256):
        """r (N, m), dr/dθ (N, m, nθ), dr/ds (N, m, ns)."""
        rs, Jts, Jss = [], [], []
        for a in range(0, len(chunks), batch):
            part, Sp = chunks.take(slice(a, a + batch)), S[a : a + batch]
            B = len(part)
            r, Jt, Js = _call(self._mapped("jac", B), theta, *self._args(part, Sp))
            rs.append(np.asarray(r).T)
            Jts.append(np.asarray(Jt).reshape(self.m, B, self.nt).transpose(1, 0, 2))
            Jss.append(np.asarray(Js).reshape(self.m, B, self.ns).transpose(1, 0, 2))
        return np.vstack(rs), np.concatenate(Jts), np.concatenate(Jss)

    def cost(self, theta, chunks, S) -> float:
        r = self.residuals(theta, chunks, S)
        return float(np.sum(r * r)) if np.all(np.isfinite(r)) else np.inf

    # ---- the starts alone (θ fixed): validation chunks and the first sweeps
    def fit_starts(self, theta, chunks: Chunks, S: np.ndarray, sweeps: int = 4, tries: int = 8) -> np.ndarray:
        """Levenberg–Marquardt on every chunk's start with θ fixed (independent small problems): per sweep
        one Jacobian, and for the chunks whose step does not lower their cost up to ``tries`` retries
        with 10× the damping."""
        S = S.copy()
        if len(chunks) == 0:
            return S
        r, _, Js = self.jacobians(theta, chunks, S)
        cost = np.where(np.all(np.isfinite(r), axis=1), np.sum(r * r, axis=1), np.inf)
        for _ in range(sweeps):
            A = np.einsum("cmi,cmj->cij", Js, Js)
            g = np.einsum("cmi,cm->ci", Js, r)
            D = _diag(np.maximum(np.einsum("cii->ci", A), 1e-12))
            mu = np.full(len(chunks), 1e-4)
            pending = np.ones(len(chunks), dtype=bool)
            moved = False
            for _ in range(tries):
                step = -_batched_solve(A + mu[:, None, None] * D, g)
                trial = np.where(pending[:, None] & np.all(np.isfinite(step), axis=1)[:, None], S + step, S)
                r_new = self.residuals(theta, chunks, trial)
                cost_new = np.where(np.all(np.isfinite(r_new), axis=1), np.sum(r_new * r_new, axis=1), np.inf)
                better = pending & (cost_new < cost)
                S[better], cost[better] = trial[better], cost_new[better]
                moved = moved or bool(np.any(better))
                pending &= ~better
                if not np.any(pending):
                    break
                mu = np.where(pending, mu * 10, mu)
            if not moved:
                break
            r, _, Js = self.jacobians(theta, chunks, S)
        return S

    def value(self, theta, chunks: Chunks, S: np.ndarray) -> float:
        """Mean squared residual over every compared entry."""
        if len(chunks) == 0:
            return float("nan")
        return self.cost(theta, chunks, S) / (len(chunks) * self.m)


def _ones_w(chunks: Chunks) -> np.ndarray:
    """The chunks' per-sample factors (all 1 when none)."""
    n_obs = chunks.Y.shape[1]
    return chunks.W if chunks.W is not None else np.ones((len(chunks), n_obs, chunks.steps + 1))


def _reweighted(lat: LatentChunks, base: Chunks, theta, S, robust) -> Chunks:
    """``base`` with its per-sample factors multiplied by the robust loss's IRLS multipliers at (θ, S)."""
    from dataclasses import replace

    loss, known = robust
    W0 = _ones_w(base)
    r = lat.residuals(theta, base, S)  # (N, m): first the samples (column-major per step), then invariants
    n_obs, n = base.Y.shape[1], base.steps
    rs = r[:, : n_obs * (n + 1)].reshape(len(base), n + 1, n_obs).transpose(0, 2, 1)  # (N, n_obs, n + 1)
    live = W0 != 0
    f = np.ones_like(rs)
    if np.any(live):
        f[live] = loss.factors(rs[live], 1.0 if known else None)
    return replace(base, W=W0 * f)


def _diag(D: np.ndarray) -> np.ndarray:
    out = np.zeros(D.shape + (D.shape[-1],))
    idx = np.arange(D.shape[-1])
    out[..., idx, idx] = D
    return out


def _batched_solve(A: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Solve A_c x_c = b_c for every c; singular blocks by least squares."""
    try:
        return np.linalg.solve(A, b[..., None])[..., 0]
    except np.linalg.LinAlgError:
        return np.stack([np.linalg.lstsq(a, v, rcond=None)[0] for a, v in zip(A, b)])


def _schur(r, Jt, Js, mu_s: float | None = None):
    """The Schur complement H of the start blocks and the reduced gradient (θ part of the normal equations)."""
    A = np.einsum("cmi,cmj->cij", Js, Js)
    if mu_s is not None:
        D = np.maximum(np.einsum("cii->ci", A), 1e-12 * max(float(np.max(A)) if A.size else 1.0, 1e-300))
        A = A + mu_s * _diag(D)
    else:  # profile out the starts: a tiny ridge keeps unobservable start directions from breaking the solve
        A = A + _diag(np.full(A.shape[:2], 1e-12 * max(float(np.max(np.abs(A))) if A.size else 1.0, 1e-300)))
    Bm = np.einsum("cmi,cmj->cij", Jt, Js)  # (N, nt, ns)
    gs = np.einsum("cmi,cm->ci", Js, r)
    gt = np.einsum("cmi,cm->i", Jt, r)
    AinvBt = _batched_solve_mat(A, Bm.transpose(0, 2, 1))  # (N, ns, nt)
    Ainvgs = _batched_solve(A, gs)
    H = np.einsum("cmi,cmj->ij", Jt, Jt) - np.einsum("cij,cjk->ik", Bm, AinvBt)
    g = gt - np.einsum("cij,cj->i", Bm, Ainvgs)
    return H, g, A, Bm, gs


def _batched_solve_mat(A, B):
    try:
        return np.linalg.solve(A, B)
    except np.linalg.LinAlgError:
        return np.stack([np.linalg.lstsq(a, b, rcond=None)[0] for a, b in zip(A, B)])


def information(lat: LatentChunks, theta, chunks: Chunks, S, keep: dict | None = None) -> tuple[np.ndarray, float, int]:
    """(H, cost, degrees of freedom): the information matrix of θ with the starts profiled out (``keep``, when
    given, receives the residuals (N, m) under "residuals")."""
    r, Jt, Js = lat.jacobians(theta, chunks, S)
    if keep is not None:
        keep["residuals"] = r
    H, _, _, _, _ = _schur(r, Jt, Js)
    padding = (len(chunks) * chunks.Y.shape[1] * (chunks.steps + 1)) - chunks.compared  # zero-weight entries
    invariants = len(chunks) * (lat.m - chunks.Y.shape[1] * (chunks.steps + 1))  # near-constraints, not data
    dof = r.size - padding - invariants - Jt.shape[2] - len(chunks) * Js.shape[2]
    return H, float(np.sum(r * r)), int(dof)


def latent_gauss_newton(loss: ChunkLoss, data_train: Dataset, train: Chunks, val: Chunks, state: State,
                        opts: TrainOptions, on_epoch: Callback | None = None, S_val: np.ndarray | None = None,
                        robust=None, fixed=(), invariant_weight: float = _INVARIANT_WEIGHT) -> Result:
    """Levenberg–Marquardt on θ and every chunk's start (module docstring); one epoch = one accepted step.
    ``robust``: (a :class:`pdsl.fit.robust.RobustLoss`, whether the residuals are in noise units): iteratively
    reweighted, the weights renewed at every step (``state.extra["downweighted"]`` counts the entries whose
    weight fell below 1/2 at the end). ``fixed``: indices of θ held at their values (profile likelihood).
    ``invariant_weight``: the staged fit's earlier stages pass 1 (soft: fewer steps; their error bars are unused)."""
    if loss.spec.loss != "mse":
        raise PdslError.at("BadOption", "gauss-newton minimises the mse loss", hint="use --loss mse")
    lat = LatentChunks(loss, invariant_weight)
    theta = np.asarray(state.theta, dtype=float)
    S = state.arrays.get("starts")
    if S is None or S.shape != train.S0.shape:
        S = lat.fit_starts(theta, train, train.S0.copy())
    if S_val is None:
        S_val = state.arrays.get("starts_val")  # a resumed run continues from the checkpointed estimates
    if S_val is None or (len(val) and S_val.shape != val.S0.shape):
        S_val = val.S0.copy()
    mu = float(state.extra.get("mu", 1e-3))
    scale = 1.0 / (max(len(train), 1) * lat.m)
    bar = _bar(opts, state, "gauss-newton (estimated starts)")
    base = train
    try:
        while state.epoch < _last_epoch(opts) and not state.extra.get("converged"):
            t0 = time.perf_counter()
            if robust is not None:
                train = _reweighted(lat, base, theta, S, robust)
            r, Jt, Js = lat.jacobians(theta, train, S)
            if len(fixed):
                Jt[:, :, list(fixed)] = 0.0  # held: no step along them (H's rows there are only damping)
            cost = float(np.sum(r * r))
            accepted = False
            for _ in range(12):
                H, g, A, Bm, gs = _schur(r, Jt, Js, mu_s=mu)
                Dt = np.maximum(np.diag(H), 1e-12 * max(float(np.max(np.abs(np.diag(H)))), 1e-300))
                try:
                    dth = -np.linalg.solve(H + mu * np.diag(Dt), g)
                except np.linalg.LinAlgError:
                    mu *= 4
                    continue
                ds = -_batched_solve(A, gs + np.einsum("cij,i->cj", Bm, dth))
                th_new, S_new = theta + dth, S + ds
                try:
                    cost_new = lat.cost(th_new, train, S_new)
                except PdslError:
                    cost_new = np.inf
                if cost_new < cost:
                    accepted = True
                    break
                mu *= 4
            if accepted:
                # converged: the cost stalls, or the parameters stop moving (start states of constrained
                # models can creep along directions the data hardly see, long after θ has settled)
                converged = (cost - cost_new <= opts.tol * cost
                             or float(np.max(np.abs(dth), initial=0.0)) <= _THETA_STEP * (1 + float(np.max(np.abs(theta)))))
                theta, S, cost = th_new, S_new, cost_new
                mu = max(mu / 3, 1e-12)
            else:
                converged = True
            state.theta = theta
            state.arrays["starts"] = S
            state.extra["mu"] = mu
            if converged:
                state.extra["converged"] = True
            if len(val):
                S_val = lat.fit_starts(theta, val, S_val)
                state.arrays["starts_val"] = S_val
                v = lat.value(theta, val, S_val)
            else:
                v = float("nan")
            _record(state, cost * scale, v, mu, time.perf_counter() - t0)
            _postfix(bar, state)
            if on_epoch:
                on_epoch(state)
    finally:
        bar.close()
    done = bool(state.extra.get("converged")) or state.epoch >= opts.epochs
    if robust is not None:
        train = _reweighted(lat, base, theta, S, robust)
        n_obs, n = base.Y.shape[1], base.steps
        f = train.W / np.where(_ones_w(base) != 0, _ones_w(base), 1.0)
        state.extra["downweighted"] = int(np.sum((f < 0.5) & (_ones_w(base) != 0)))
    H, cost, dof = information(lat, theta, train, S, keep=state.arrays)  # the residuals: outliers (pdsl.fit.run)
    stderr = None
    state.arrays["information"] = H
    state.extra["residual_dof"] = dof
    state.extra["residual_cost"] = cost
    if dof > 0:
        try:
            cov = np.linalg.inv(H) * cost / dof
            stderr = np.sqrt(np.maximum(np.diag(cov), 0.0))
        except np.linalg.LinAlgError:
            stderr = None
    return Result(state=state, finished=done, stderr=stderr)
