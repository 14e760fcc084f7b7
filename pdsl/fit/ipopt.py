"""IPOPT (through CasADi's ``nlpsol``) for fits with a few physical parameters, single or multiple shooting.

Single shooting (``--method ipopt``): the decision variables are θ (the free parameters in the
unconstrained coordinates of :mod:`pdsl.fit.params`), the objective is the mean squared chunk
error of :class:`pdsl.fit.loss.ChunkLoss` over ALL training chunks — the same quantity
Gauss–Newton minimises — written as one CasADi graph (the mapped single-chunk loss with the data
as constants), so IPOPT gets exact gradients and, by default, the exact Hessian of the objective.

Multiple shooting (``--shooting multiple``, Bock's method for long series): each training
trajectory is cut into consecutive segments of ``chunk`` steps; the state at every segment start
(a *shooting node*) is a decision variable — every state, measured or not: started from the data
sample where measured, else from :func:`pdsl.fit.latent.start_guesses`, refined segment by segment
at the start values (:func:`_start_nodes`) — and IPOPT enforces continuity — the end of segment j rolled out by the model equals node j + 1 — as
equality constraints, together with the model's invariants (holonomic constraints and their
derivatives) at the first node of every trajectory of a constrained model (at later nodes they
follow from continuity; imposing them there too would over-determine the problem, since a
fixed-step rollout conserves them only to its truncation error). The objective is the mean squared error of
the observed columns at every sample of the trajectory, each compared once: a segment compares its
first sample through its node's observation (a noisy sample is never taken as the state), and the
last segment of a trajectory, shorter when the steps do not divide, is padded with zero-weight
samples (:class:`Segments`: no sample dropped). At the solution, the standard errors come from the
Gauss–Newton information with the node states profiled out through the null space of the
constraints (:func:`_profiled_information`), as the default fit's come with its starts profiled
out; the objective is then that fit's too (one start per trajectory). Unlike chunking, the fit sees the whole trajectory as one
continuous solution at convergence, while each rollout stays as short as a chunk (no blow-up of
a long rollout from a wrong parameter guess).

One *epoch* is one IPOPT iteration: the iteration callback records the loss history, the
validation loss, and writes the checkpoint (θ and the node states), so ``--resume`` restarts
IPOPT from the last iterate (IPOPT's own multipliers are not kept: a restarted run takes a few
more iterations than an uninterrupted one). IPOPT's status becomes ``converged`` or a warning.
"""

from __future__ import annotations

import time

import casadi as ca
import numpy as np

from ..diagnostics import PdslError
from .checkpoint import State
from .data import Chunks, Dataset
from .loss import ChunkLoss, _call
from .train import Callback, Result, TrainOptions, _bar, _postfix, _record, _standard_errors

__all__ = ["ipopt", "multiple_shooting", "SHOOTING", "Segments", "make_segments"]

SHOOTING = ("single", "multiple")


class _IterationCallback(ca.Callback):
    """Called by IPOPT after every iteration with the iterate; returning 1 stops IPOPT."""

    def __init__(self, nx: int, ng: int, on_iteration):
        ca.Callback.__init__(self)
        self.nx, self.ng, self.on_iteration = nx, ng, on_iteration
        self.construct("pdsl_ipopt_iteration", {})

    def get_n_in(self):
        return ca.nlpsol_n_out()

    def get_n_out(self):
        return 1

    def get_name_in(self, i):
        return ca.nlpsol_out(i)

    def get_name_out(self, i):
        return "ret"

    def get_sparsity_in(self, i):
        name = ca.nlpsol_out(i)
        if name == "f":
            return ca.Sparsity.scalar()
        if name in ("x", "lam_x"):
            return ca.Sparsity.dense(self.nx)
        if name in ("g", "lam_g"):
            return ca.Sparsity.dense(self.ng)
        return ca.Sparsity(0, 0)

    def eval(self, arg):
        from .. import quiet

        with quiet.released():  # the progress bar and checkpoints: pdsl's own output, inside the captured solve
            stop = self.on_iteration(np.asarray(arg[0]).ravel(), float(arg[1]))
        return [1 if stop else 0]


def _solve(w, r, scale: float, g, w0, state: State, opts: TrainOptions, hessian: str, on_iterate, label: str,
           robust=None) -> dict:
    """IPOPT on min scale·|r(w)|² s.t. g(w) = 0 from ``w0``, one epoch per iteration through ``on_iterate``.

    ``hessian``: ``gauss-newton`` passes 2·scale·JᵀJ (J = dr/dw, sparse) as the Hessian of the
    Lagrangian — positive semidefinite, no second derivatives, and it drops the constraints'
    curvature, as Bock's generalised Gauss–Newton for multiple shooting does; ``exact`` lets CasADi
    form the exact Hessian; ``limited-memory`` is IPOPT's L-BFGS.

    ``robust`` = (a :class:`pdsl.fit.robust.RobustLoss`, whether the residuals are in noise units): the objective is
    scale·Σ c²ρ((r/c)²) with c from the stated noise or from the residuals at the start (1.4826·MAD), and the
    Gauss–Newton Hessian 2·scale·Jᵀ diag(ρ'((r/c)²)) J."""
    weight = None
    if robust is not None:
        rl, known = robust
        r0 = np.asarray(ca.Function("r0", [w], [r])(w0)).ravel()
        c = rl.scale(r0, 1.0 if known else None)
        s_r = (r / c) ** 2
        f = scale * c**2 * ca.sum1(rl.rho_casadi(s_r))
        weight = rl.rho_prime_casadi(s_r)
    else:
        f = scale * ca.sumsqr(r)
    last = opts.epochs if opts.stop_after is None else min(opts.epochs, opts.stop_after)
    budget = last - state.epoch
    if budget <= 0 or state.extra.get("converged"):
        return {"status": state.extra.get("ipopt_status", "not run"), "w": w0}
    bar = _bar(opts, state, label)
    clock = [time.perf_counter()]
    stopped = [False]
    seen_start = [False]

    def on_iteration(wk: np.ndarray, fk: float) -> bool:
        if not seen_start[0]:  # IPOPT reports the starting point as iteration 0
            seen_start[0] = True
            return False
        on_iterate(wk, fk, time.perf_counter() - clock[0])
        clock[0] = time.perf_counter()
        _postfix(bar, state)
        if state.epoch >= last:
            stopped[0] = True
            return True
        return False

    cb = _IterationCallback(w.numel(), g.numel(), on_iteration)
    options = {
        "print_time": False,
        "iteration_callback": cb,
        "ipopt": {"print_level": 0, "sb": "yes", "tol": max(opts.tol, 1e-14), "max_iter": budget + 1,
                  "hessian_approximation": "limited-memory" if hessian == "limited-memory" else "exact"},
    }
    if hessian == "gauss-newton":
        J = ca.jacobian(r, w)
        lam_f, lam_g = ca.MX.sym("lam_f"), ca.MX.sym("lam_g", g.numel())
        JtJ = ca.mtimes(J.T, J) if weight is None else ca.mtimes(J.T, J * ca.repmat(weight, 1, J.size2()))
        options["hess_lag"] = ca.Function("nlp_hess_l", [w, ca.MX.sym("p", 0, 1), lam_f, lam_g],
                                          [ca.triu(lam_f * (2 * scale) * JtJ)],
                                          ["x", "p", "lam_f", "lam_g"], ["hess_gamma_x_x"])
    solver = ca.nlpsol("pdsl_fit", "ipopt", {"x": w, "f": f, "g": g}, options)
    from .. import quiet

    try:
        with quiet.capture():  # IPOPT's own lines, failed stage solves' dumps, CasADi's evaluation warnings
            sol = solver(x0=w0, lbg=0, ubg=0)
    except RuntimeError as exc:  # an implicit stage solve failing inside a function evaluation
        raise PdslError.at("IntegratorFailure", f"IPOPT stopped: {str(exc).strip().splitlines()[-1]}",
                           hint="start closer to the data (--param), use more --substeps, or --integrator rk4") from None
    finally:
        bar.close()
    status = solver.stats().get("return_status", "unknown")
    if stopped[0] or status == "User_Requested_Stop":
        status = "Maximum_Iterations_Exceeded" if state.epoch >= opts.epochs else "stopped"
    state.extra["ipopt_status"] = status
    if status in ("Solve_Succeeded", "Solved_To_Acceptable_Level"):
        state.extra["converged"] = True
    return {"status": status, "w": np.asarray(sol["x"]).ravel()}


def _hessian(requested: str | None) -> str:
    return requested if requested in ("exact", "limited-memory", "gauss-newton") else "gauss-newton"


def _finish(state: State, opts: TrainOptions, status: str, label: str, log) -> bool:
    if status not in ("Solve_Succeeded", "Solved_To_Acceptable_Level", "Maximum_Iterations_Exceeded", "stopped", "not run"):
        log(f"warning: IPOPT ended with status {status} ({label}); the parameters are its last iterate")
    cut_short = status in ("stopped", "not run")  # --stop-after reached before the epochs: resume later
    return bool(state.extra.get("converged")) or state.epoch >= opts.epochs or not cut_short


# ---------------------------------------------------------------- single shooting
def ipopt(loss: ChunkLoss, train, val, state: State, opts: TrainOptions, on_epoch: Callback | None = None,
          hessian: str | None = None, log=print, robust=None) -> Result:
    """IPOPT on the mean squared chunk loss over all training chunks (module docstring)."""
    if not isinstance(loss, ChunkLoss):
        raise PdslError.at("BadOption", "--method ipopt needs the CasADi backend", hint="use --backend casadi (or auto)")
    if loss.spec.loss != "mse":
        raise PdslError.at("BadOption", "ipopt minimises the mse loss", hint="use --loss mse, or --method adamw for l1")
    theta = ca.MX.sym("theta", loss.layout.n_theta)
    single = loss._single
    res = ca.Function("chunk_residuals", single["ins"], [ca.vec(single["R"])])
    parts = []
    for start in range(0, len(train), opts.batch):
        part = train.take(slice(start, start + opts.batch))
        parts.append(ca.vec(res.map(len(part))(theta, *[ca.DM(a) for a in loss.batch_args(part)])))
    r = ca.vertcat(*parts)

    def on_iterate(w, fk, seconds):
        state.theta = w.copy()
        _record(state, fk, loss.value(w, val, opts.batch) if len(val) else float("nan"), 0.0, seconds)
        if on_epoch:
            on_epoch(state)

    out = _solve(theta, r, loss.entry_scale(len(train)), ca.MX(0, 1), np.asarray(state.theta, dtype=float), state, opts,
                 _hessian(hessian), on_iterate, "ipopt", robust=robust)
    state.theta = out["w"][: loss.layout.n_theta]
    finished = _finish(state, opts, out["status"], "single shooting", log)
    return Result(state=state, finished=finished, stderr=_standard_errors(loss, train, state.theta, opts.batch))


# ---------------------------------------------------------------- multiple shooting
class Segments:
    """Each trajectory cut into consecutive segments of ``steps`` steps that, together, compare every sample once.

    Segment j of a trajectory starts at sample a = j·steps, its *node*, and compares samples a … a + steps − 1 (the
    first through the observation of the node state itself), while its rollout runs on to a + steps, where
    continuity meets node j + 1. The last segment of a trajectory compares its samples to the end, the last one
    included; it may be shorter than ``steps`` and is then padded (times continued at the last interval, inputs
    held) with residual factor 0, as :func:`pdsl.fit.data.whole_trajectories` pads. No sample is dropped, none is
    compared twice.

    ``chunks``: the segments as :class:`pdsl.fit.data.Chunks` — ``S0`` the shown state at each node (data where
    measured, else :func:`pdsl.fit.latent.start_guesses`), ``W`` the residual factors (0 on padding and on an inner
    segment's last sample, else the trajectory's per-sample weights or 1); ``owner``: each segment's trajectory;
    ``starts``: the first segment of every trajectory; ``links``: the segments j whose end meets node j + 1."""

    def __init__(self, data: Dataset, steps: int):
        trs = data.trajectories
        shown = [np.asarray(tr.S, dtype=float) for tr in trs]
        if any(not np.all(np.isfinite(S)) for S in shown):  # unmeasured columns: rough guesses, estimated anyway
            from .latent import start_guesses

            shown = start_guesses(data)
        n_obs = len(data.observed)
        S0, Y, U, T, Y0, W, origin, owner = [], [], [], [], [], [], [], []
        self.dropped = 0
        for j, tr in enumerate(trs):
            L = len(tr)
            if L < 2:
                self.dropped += L
                continue
            weights = getattr(tr, "weights", None)
            weights = np.ones_like(tr.Y, dtype=float) if weights is None else np.asarray(weights, dtype=float)
            for a in range(0, L - 1, steps):
                k = min(steps, L - 1 - a)  # steps with data
                pad = steps - k
                dt_last = float(tr.t[a + k] - tr.t[a + k - 1])
                T.append(np.concatenate([tr.t[a : a + k + 1], tr.t[a + k] + dt_last * np.arange(1, pad + 1)]))
                y = np.zeros((n_obs, steps))
                y[:, :k] = tr.Y[a + 1 : a + k + 1].T
                Y.append(y)
                U.append(np.concatenate([tr.U[a : a + k + 1], np.repeat(tr.U[a + k : a + k + 1], pad, axis=0)]).T)
                w = np.zeros((n_obs, steps + 1))
                w[:, : k + 1] = weights[a : a + k + 1].T
                if a + steps < L - 1:  # an inner segment: its last sample is the next node's first
                    w[:, steps] = 0.0
                W.append(w)
                S0.append(shown[j][a])
                Y0.append(tr.Y[a])
                origin.append((j, a))
                owner.append(j)
        n_u, n_s = len(data.inputs), len(data.shown)
        self.steps = steps
        N = len(owner)
        self.chunks = Chunks(np.array(S0).reshape(N, n_s), np.array(Y).reshape(N, n_obs, steps),
                             np.array(U).reshape(N, n_u, steps + 1), np.array(T).reshape(N, steps + 1),
                             np.array(origin, dtype=int).reshape(N, 2), np.array(Y0).reshape(N, n_obs),
                             np.array(W).reshape(N, n_obs, steps + 1))
        self.owner = np.array(owner, dtype=int)
        self.starts = np.array([j for j in range(len(owner)) if j == 0 or owner[j - 1] != owner[j]], dtype=int)
        self.links = np.array([j for j in range(len(owner) - 1) if owner[j] == owner[j + 1]], dtype=int)

    def __len__(self) -> int:
        return len(self.owner)


def make_segments(data: Dataset, steps: int) -> Segments:
    seg = Segments(data, steps)
    if len(seg) == 0:
        raise PdslError.at("BadTrajectoryData", f"{data.path}: no trajectory has 2 samples for one shooting segment",
                           hint="give longer trajectories")
    return seg


def _segment_functions(loss: ChunkLoss) -> dict:
    """One segment as CasADi functions of (x0, θ, Y0, Y, U, T, W): its weighted residuals r (first sample, then each
    step; factors W) and end state, and (``jac``) also dr/dθ, dr/dx0, d end/dθ, d end/dx0."""
    num, lay, n = loss.num, loss.layout, loss.spec.steps
    nobs = len(loss.observed)
    x0, theta = ca.MX.sym("x0", num.nx), ca.MX.sym("theta", lay.n_theta)
    Y0, Y = ca.MX.sym("Y0", nobs), ca.MX.sym("Y", nobs, n)
    U, T, W = ca.MX.sym("U", len(num.u_names), n + 1), ca.MX.sym("T", 1, n + 1), ca.MX.sym("W", nobs, n + 1)
    p = lay.casadi_p(theta)
    X, Yhat = loss.rollout_observed(n, x0, p, U, T)
    R = loss.weighted(Yhat, Y) * W[:, 1:]
    R0 = loss.weighted(loss.obs(T[0], x0, p, U[:, 0]), Y0) * W[:, 0]
    r, end = ca.vertcat(R0, ca.vec(R)), X[:, -1]
    ins, names = [x0, theta, Y0, Y, U, T, W], ["x0", "theta", "Y0", "Y", "U", "T", "W"]
    t, x = ca.MX.sym("t"), ca.MX.sym("x", num.nx)
    inv = num.invariants(t, x, p)
    return {
        "value": ca.Function("segment", ins, [r, end], names, ["r", "end"]),
        "jac": ca.Function("segment_jac", ins, [r, end, ca.jacobian(r, theta), ca.jacobian(r, x0), ca.jacobian(end, theta),
                                                ca.jacobian(end, x0)], names, ["r", "end", "Jt", "Jx", "Et", "Ex"]),
        "inv_jac": ca.Function("invariants_jac", [t, x, theta], [ca.jacobian(inv, x), ca.jacobian(inv, theta)]),
        "m": int(r.numel()),
    }


def _segment_data(chunks: Chunks) -> list[np.ndarray]:
    """(Y0, Y, U, T, W) of the segments side by side, as the mapped segment functions take them."""
    B, n = len(chunks), chunks.steps
    n_obs = chunks.Y.shape[1]
    return [chunks.Y0.T, chunks.Y.transpose(1, 0, 2).reshape(n_obs, B * n),
            chunks.U.transpose(1, 0, 2).reshape(chunks.U.shape[1], B * (n + 1)), chunks.T.reshape(1, -1),
            chunks.W.transpose(1, 0, 2).reshape(n_obs, B * (n + 1))]


def _start_nodes(loss: ChunkLoss, segments: Segments, theta: np.ndarray, refine: bool) -> np.ndarray:
    """(nx, S) node states at the start values: the shown state at each node (data, or guesses where unmeasured),
    with ``refine`` first fitted segment by segment at θ (:meth:`pdsl.fit.latent.LatentChunks.fit_starts`: a few
    Levenberg–Marquardt sweeps on each segment's start alone — a short single-shooting pass), then mapped to the
    state (and projected onto the constraints when --project is set)."""
    ch = segments.chunks
    S = np.array(ch.S0, dtype=float)
    p0 = loss.layout.p_from_theta(theta)
    if refine:
        from .latent import LatentChunks

        try:
            S = LatentChunks(loss).fit_starts(theta, ch, S)
        except PdslError:  # an implicit stage solve failing at the start values: keep the guesses
            pass
    t0 = ca.DM(ch.T[:, 0]).T
    X0 = np.asarray(_call(loss.g.map(len(ch)), t0, ca.DM(S.T), p0))
    if loss.project is not None:
        X0 = np.asarray(loss.project.map(len(ch))(t0, X0, p0))
    return X0


def _profiled_information(loss: ChunkLoss, fns: dict, segments: Segments, theta: np.ndarray, nodes: np.ndarray,
                          batch: int = 256):
    """The Gauss–Newton information of θ with the node states profiled out, at a solution that satisfies the
    continuity constraints: the null space of the constraint Jacobian is spanned by θ and each trajectory's free
    start directions u (the first node's state, less the directions its invariants fix), through the linearised
    segment maps δx_{j+1} = (∂end_j/∂x_j) δx_j + (∂end_j/∂θ) δθ; the residuals' Jacobian J Z in these
    coordinates is block-arrow shaped (θ shared, u per trajectory), and H = Σ_k (J_θᵀJ_θ − J_θᵀJ_u (J_uᵀJ_u)⁻¹ J_uᵀJ_θ)
    — the same Schur complement as :func:`pdsl.fit.latent.information`, i.e. s²H⁻¹ = the θ block of
    s² Z (Zᵀ JᵀJ Z)⁻¹ Zᵀ. Returns (H, cost = |r|², dof = compared residuals − parameters − free start
    dimensions, residuals (S, m))."""
    ch = segments.chunks
    nt, nx, m = loss.layout.n_theta, loss.num.nx, fns["m"]
    rs, Jts, Jxs, Ets, Exs = [], [], [], [], []
    for a in range(0, len(ch), batch):
        idx = slice(a, a + batch)
        part = ch.take(idx)
        B = len(part)
        fn = fns["jac"].map(B, "thread", max(1, loss.spec.threads))
        r, _, Jt, Jx, Et, Ex = _call(fn, ca.DM(nodes[:, idx]), theta, *_segment_data(part))
        rs.append(np.asarray(r).T)
        Jts.append(np.asarray(Jt).reshape(m, B, nt).transpose(1, 0, 2))
        Jxs.append(np.asarray(Jx).reshape(m, B, nx).transpose(1, 0, 2))
        Ets.append(np.asarray(Et).reshape(nx, B, nt).transpose(1, 0, 2))
        Exs.append(np.asarray(Ex).reshape(nx, B, nx).transpose(1, 0, 2))
    r, Jt, Jx, Et, Ex = (np.concatenate(v) for v in (rs, Jts, Jxs, Ets, Exs))
    H = np.zeros((nt, nt))
    free = 0
    n_inv = loss.num.invariants.size1_out(0)
    for first in segments.starts:
        ids = np.flatnonzero(segments.owner == segments.owner[first])
        if n_inv:  # δx0 = N δu + P δθ keeps the first node's invariants
            from scipy.linalg import null_space

            Px, Pt = (np.asarray(v, dtype=float) for v in fns["inv_jac"](float(ch.T[first, 0]), nodes[:, first], theta))
            N = null_space(Px, rcond=1e-10)
            P = -np.linalg.pinv(Px) @ Pt
        else:
            N, P = np.eye(nx), np.zeros((nx, nt))
        D = np.hstack([P, N])  # d x_j / d(θ, u)
        rows = []
        for j in ids:
            Jj = Jx[j] @ D
            Jj[:, :nt] += Jt[j]
            rows.append(Jj)
            D = Ex[j] @ D
            D[:, :nt] += Et[j]
        Jk = np.vstack(rows)
        Bk, Ak = Jk[:, :nt], Jk[:, nt:]
        G = Ak.T @ Ak
        G += np.eye(len(G)) * 1e-12 * max(float(np.max(np.abs(G), initial=0.0)), 1e-300)  # unobservable directions
        try:
            H += Bk.T @ Bk - Bk.T @ Ak @ np.linalg.solve(G, Ak.T @ Bk)
        except np.linalg.LinAlgError:
            H += Bk.T @ Bk - Bk.T @ Ak @ np.linalg.lstsq(G, Ak.T @ Bk, rcond=None)[0]
        free += N.shape[1]
    dof = ch.compared - nt - free
    return 0.5 * (H + H.T), float(np.sum(r * r)), int(dof), r


def multiple_shooting(loss: ChunkLoss, segments: Segments, val, state: State, opts: TrainOptions,
                      on_epoch: Callback | None = None, hessian: str | None = None, log=print, refine: bool = True,
                      robust=None) -> Result:
    """IPOPT on θ and the node states with continuity (and invariant) constraints (module docstring); standard
    errors and the information with the node states profiled out (:func:`_profiled_information`)."""
    if not isinstance(loss, ChunkLoss):
        raise PdslError.at("BadOption", "--shooting multiple needs the CasADi backend", hint="use --backend casadi (or auto)")
    if loss.spec.loss != "mse":
        raise PdslError.at("BadOption", "multiple shooting minimises the mse loss", hint="use --loss mse")
    num, lay, ch = loss.num, loss.layout, segments.chunks
    if ch.steps != loss.spec.steps:
        raise ValueError(f"segments of {ch.steps} steps for a loss of {loss.spec.steps}")
    nx, S = num.nx, len(ch)
    fns = _segment_functions(loss)
    theta = ca.MX.sym("theta", lay.n_theta)
    X = ca.MX.sym("nodes", nx, S)
    Rs, ends = fns["value"].map(S, "thread", max(1, loss.spec.threads))(X, theta, *[ca.DM(a) for a in _segment_data(ch)])
    r = ca.vec(Rs)
    st, links = segments.starts.tolist(), segments.links.tolist()
    g_parts = []
    if links:
        g_parts.append(ca.vec(ends[:, links] - X[:, [j + 1 for j in links]]))
    if num.invariants.size1_out(0):  # at each trajectory's first node; continuity carries them on
        g_parts.append(ca.vec(num.invariants.map(len(st))(ca.DM(ch.T[st, 0]).T, X[:, st], lay.casadi_p(theta))))
    g = ca.vertcat(*g_parts) if g_parts else ca.MX(0, 1)
    w = ca.vertcat(theta, ca.vec(X))

    # start: θ from the state, nodes from the checkpoint or from the data (refined segment by segment)
    th0 = np.asarray(state.theta, dtype=float)
    if "nodes" in state.arrays and state.arrays["nodes"].shape == (nx, S):
        X0 = state.arrays["nodes"]
    else:
        X0 = _start_nodes(loss, segments, th0, refine)
        state.arrays["nodes"] = X0
    w0 = np.concatenate([th0, X0.T.ravel()])  # vec() is column-major: node after node

    def unpack(wk):
        return wk[: lay.n_theta].copy(), wk[lay.n_theta :].reshape(S, nx).T.copy()

    def on_iterate(wk, fk, seconds):
        state.theta, state.arrays["nodes"] = unpack(wk)
        _record(state, fk, loss.value(state.theta, val, opts.batch) if len(val) else float("nan"), 0.0, seconds)
        if on_epoch:
            on_epoch(state)

    out = _solve(w, r, 1.0 / max(ch.compared, 1), g, w0, state, opts, _hessian(hessian), on_iterate,
                 "ipopt (multiple shooting)", robust=robust)
    state.theta, state.arrays["nodes"] = unpack(out["w"])
    cont = ca.Function("continuity", [w], [g])(out["w"]) if g.numel() else ca.DM(0, 1)
    state.extra["constraint_violation"] = float(np.max(np.abs(np.asarray(cont)))) if g.numel() else 0.0
    finished = _finish(state, opts, out["status"], "multiple shooting", log)
    return Result(state=state, finished=finished, stderr=shooting_information(loss, fns, segments, state))


def shooting_information(loss: ChunkLoss, fns: dict | None, segments: Segments, state: State) -> np.ndarray | None:
    """Store the profiled information, χ², its degrees of freedom, the residuals and the nodes' shown states in
    ``state`` (as :func:`pdsl.fit.latent.latent_gauss_newton` does); returns the standard errors of θ."""
    fns = fns or _segment_functions(loss)
    theta, nodes = np.asarray(state.theta, dtype=float), state.arrays["nodes"]
    try:
        H, cost, dof, r = _profiled_information(loss, fns, segments, theta, nodes)
    except (PdslError, np.linalg.LinAlgError, ValueError):
        return None
    state.arrays["information"] = H
    state.arrays["residuals"] = r
    state.extra["residual_cost"] = cost
    state.extra["residual_dof"] = dof
    p = loss.layout.p_from_theta(theta)
    report = loss.num.report.map(len(segments))
    state.arrays["starts"] = np.asarray(report(ca.DM(segments.chunks.T[:, 0]).T, ca.DM(nodes), p)).T
    if dof <= 0 or not np.all(np.isfinite(H)):
        return None
    try:
        cov = np.linalg.inv(H) * cost / dof
    except np.linalg.LinAlgError:
        return None
    return np.sqrt(np.maximum(np.diag(cov), 0.0))
