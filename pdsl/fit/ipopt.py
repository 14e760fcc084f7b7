"""IPOPT (through CasADi's ``nlpsol``) for fits with a few physical parameters, single or multiple shooting.

Single shooting (``--method ipopt``): the decision variables are θ (the free parameters in the
unconstrained coordinates of :mod:`pdsl.fit.params`), the objective is the mean squared chunk
error of :class:`pdsl.fit.loss.ChunkLoss` over ALL training chunks — the same quantity
Gauss–Newton minimises — written as one CasADi graph (the mapped single-chunk loss with the data
as constants), so IPOPT gets exact gradients and, by default, the exact Hessian of the objective.

Multiple shooting (``--shooting multiple``, Bock's method for long series): each training
trajectory is cut into consecutive segments of ``chunk`` steps; the state at every segment start
(a *shooting node*) is a decision variable, started from the data sample there, and IPOPT
enforces continuity — the end of segment j rolled out by the model equals node j + 1 — as
equality constraints, together with the model's invariants (holonomic constraints and their
derivatives) at the first node of every trajectory of a constrained model (at later nodes they
follow from continuity; imposing them there too would over-determine the problem, since a
fixed-step rollout conserves them only to its truncation error). The objective is the mean squared error of
the observed columns at every sample of the trajectory (the first sample's columns compared with
the first node's observation). Unlike chunking, the fit sees the whole trajectory as one
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
from .data import Dataset
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


def _solve(w, r, scale: float, g, w0, state: State, opts: TrainOptions, hessian: str, on_iterate, label: str) -> dict:
    """IPOPT on min scale·|r(w)|² s.t. g(w) = 0 from ``w0``, one epoch per iteration through ``on_iterate``.

    ``hessian``: ``gauss-newton`` passes 2·scale·JᵀJ (J = dr/dw, sparse) as the Hessian of the
    Lagrangian — positive semidefinite, no second derivatives, and it drops the constraints'
    curvature, as Bock's generalised Gauss–Newton for multiple shooting does; ``exact`` lets CasADi
    form the exact Hessian; ``limited-memory`` is IPOPT's L-BFGS."""
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
        options["hess_lag"] = ca.Function("nlp_hess_l", [w, ca.MX.sym("p", 0, 1), lam_f, lam_g],
                                          [ca.triu(lam_f * (2 * scale) * ca.mtimes(J.T, J))],
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
          hessian: str | None = None, log=print) -> Result:
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
                 _hessian(hessian), on_iterate, "ipopt")
    state.theta = out["w"][: loss.layout.n_theta]
    finished = _finish(state, opts, out["status"], "single shooting", log)
    return Result(state=state, finished=finished, stderr=_standard_errors(loss, train, state.theta, opts.batch))


# ---------------------------------------------------------------- multiple shooting
class Segments:
    """Consecutive segments of ``steps`` steps covering each trajectory (trailing samples that do not
    fill a whole segment are dropped), with the first sample of every trajectory."""

    def __init__(self, data: Dataset, steps: int):
        S0, Y, U, T, first_Y, first_U, owner = [], [], [], [], [], [], []
        self.dropped = 0
        for k, tr in enumerate(data.trajectories):
            m = (len(tr) - 1) // steps
            self.dropped += len(tr) - 1 - m * steps
            for j in range(m):
                a, b = j * steps, (j + 1) * steps
                S0.append(tr.S[a])
                Y.append(tr.Y[a + 1 : b + 1].T)
                U.append(tr.U[a : b + 1].T)
                T.append(tr.t[a : b + 1])
                owner.append(k)
            first_Y.append(tr.Y[0])
            first_U.append(tr.U[0])
        self.steps = steps
        self.S0, self.Y, self.U, self.T = np.array(S0), np.array(Y), np.array(U), np.array(T)
        self.owner = np.array(owner, dtype=int)
        self.first_Y, self.first_U = np.array(first_Y), np.array(first_U)
        # the segment that starts each trajectory, and the inner links (segment j -> node j + 1)
        self.starts = np.array([np.flatnonzero(self.owner == k)[0] for k in range(len(data.trajectories))
                                if np.any(self.owner == k)], dtype=int)
        self.links = np.array([j for j in range(len(owner) - 1) if owner[j] == owner[j + 1]], dtype=int)

    def __len__(self) -> int:
        return len(self.owner)


def make_segments(data: Dataset, steps: int) -> Segments:
    seg = Segments(data, steps)
    if len(seg) == 0:
        raise PdslError.at("BadTrajectoryData", f"{data.path}: no trajectory has {steps + 1} samples for one shooting segment",
                           hint="use a smaller --chunk")
    return seg


def multiple_shooting(loss: ChunkLoss, segments: Segments, val, state: State, opts: TrainOptions,
                      on_epoch: Callback | None = None, hessian: str | None = None, log=print) -> Result:
    """IPOPT on θ and the node states with continuity (and invariant) constraints (module docstring)."""
    if not isinstance(loss, ChunkLoss):
        raise PdslError.at("BadOption", "--shooting multiple needs the CasADi backend", hint="use --backend casadi (or auto)")
    if loss.spec.loss != "mse":
        raise PdslError.at("BadOption", "multiple shooting minimises the mse loss", hint="use --loss mse")
    num, lay, n = loss.num, loss.layout, segments.steps
    nx, S, nobs = num.nx, len(segments), len(loss.observed)
    theta = ca.MX.sym("theta", lay.n_theta)
    X = ca.MX.sym("nodes", nx, S)
    p = lay.casadi_p(theta)

    # one segment: (x0, p, Y, U, T) -> weighted residuals and the end state
    xs, ps = ca.MX.sym("x0", nx), ca.MX.sym("p", len(num.p_names))
    Ys, Us, Ts = ca.MX.sym("Y", nobs, n), ca.MX.sym("U", len(num.u_names), n + 1), ca.MX.sym("T", 1, n + 1)
    Xr, Yhat = loss.rollout_observed(n, xs, ps, Us, Ts)
    seg = ca.Function("segment", [xs, ps, Ys, Us, Ts], [ca.vec(loss.weighted(Yhat, Ys)), Xr[:, -1]])
    mapped = seg.map(S, "serial")
    Yd = ca.DM(segments.Y.transpose(1, 0, 2).reshape(nobs, S * n))
    Ud = ca.DM(segments.U.transpose(1, 0, 2).reshape(len(num.u_names), S * (n + 1)))
    Td = ca.DM(segments.T.reshape(1, -1))
    Rs, ends = mapped(X, p, Yd, Ud, Td)
    # the first sample of every trajectory, observed at its first node
    st = segments.starts
    obs0 = loss.obs.map(len(st))(ca.DM(segments.T[st, 0]).T, X[:, st.tolist()], p, ca.DM(segments.first_U.T))
    R0 = loss.weighted(obs0, ca.DM(segments.first_Y.T))
    entries = (S * n + len(st)) * max(nobs, 1)
    r = ca.vertcat(ca.vec(Rs), ca.vec(R0))
    links = segments.links.tolist()
    g_parts = []
    if links:
        g_parts.append(ca.vec(ends[:, links] - X[:, [j + 1 for j in links]]))
    if num.invariants.size1_out(0):  # at each trajectory's first node; continuity carries them on
        g_parts.append(ca.vec(num.invariants.map(len(st))(ca.DM(segments.T[st, 0]).T, X[:, st.tolist()], p)))
    g = ca.vertcat(*g_parts) if g_parts else ca.MX(0, 1)
    w = ca.vertcat(theta, ca.vec(X))

    # start: θ from the state, nodes from the checkpoint or from the data samples
    th0 = np.asarray(state.theta, dtype=float)
    if "nodes" in state.arrays and state.arrays["nodes"].shape == (nx, S):
        X0 = state.arrays["nodes"]
    else:
        p0 = lay.p_from_theta(th0)
        g_fn = loss.g.map(S)
        X0 = np.asarray(_call(g_fn, ca.DM(segments.T[:, 0]).T, ca.DM(segments.S0.T), p0))
        if loss.project is not None:
            X0 = np.asarray(loss.project.map(S)(ca.DM(segments.T[:, 0]).T, X0, p0))
    w0 = np.concatenate([th0, X0.T.ravel()])  # vec() is column-major: node after node

    def unpack(wk):
        return wk[: lay.n_theta].copy(), wk[lay.n_theta :].reshape(S, nx).T.copy()

    def on_iterate(wk, fk, seconds):
        state.theta, state.arrays["nodes"] = unpack(wk)
        _record(state, fk, loss.value(state.theta, val, opts.batch) if len(val) else float("nan"), 0.0, seconds)
        if on_epoch:
            on_epoch(state)

    out = _solve(w, r, 1.0 / entries, g, w0, state, opts, _hessian(hessian), on_iterate, "ipopt (multiple shooting)")
    state.theta, state.arrays["nodes"] = unpack(out["w"])
    cont = ca.Function("continuity", [w], [g])(out["w"]) if g.numel() else ca.DM(0, 1)
    state.extra["constraint_violation"] = float(np.max(np.abs(np.asarray(cont)))) if g.numel() else 0.0
    finished = _finish(state, opts, out["status"], "multiple shooting", log)
    return Result(state=state, finished=finished, stderr=None)
