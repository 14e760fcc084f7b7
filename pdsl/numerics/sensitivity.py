"""Gradients of a scalar trajectory loss with respect to the parameters p and the initial state x0.

A trajectory starts at x0 at ``t_grid[0]`` and is observed at ``t_grid[1:]``; the target holds
the observed states as columns (nx x M, M = len(t_grid) - 1). The loss is the SSE of BENCHMARKS
B4/Eq. 16, its mean (``mse``) or the sum of absolute errors (``l1``).

Routes to the gradient (``mode``):

* ``method="cvodes"``: ``forward`` gives CVODES forward sensitivities (one direction per entry of
  x0 and p); ``adjoint`` and ``reverse`` both give CVODES adjoint sensitivities (CasADi's reverse
  mode of an integrator is its adjoint).
* fixed-step methods (``euler``, ``rk4``, ``midpoint``, ``gauss2``): ``forward`` and ``reverse``
  are forward and reverse AD through the unrolled rollout (one call node per step, p shared);
  ``adjoint`` is the discrete adjoint of implicit midpoint (``make_midpoint_adjoint``), so
  ``method="midpoint"`` only.

Memory of a fixed-step gradient is O(steps x nx + np): the rollout graph keeps the states
between steps and one p; reverse mode through a step call re-evaluates that step's internals
(checkpointing per step); the contributions of the steps to grad_p are summed as they are
formed (``_loss_grad_function`` evaluates grad_p first).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import casadi as ca
import numpy as np

from pdsl.numerics.fixed_step import METHODS, inline_call, make_rollout, rhs_dims, unrolled_blocks
from pdsl.vocab import SENSITIVITY_LOSSES

__all__ = [
    "LOSSES",
    "MODES",
    "LossGrad",
    "batched_loss_and_grad",
    "loss_and_grad",
    "make_batched_loss_grad",
    "make_loss_grad",
    "make_midpoint_adjoint",
    "make_trajectory",
    "trajectory_loss",
]

LOSSES: tuple[str, ...] = SENSITIVITY_LOSSES  # pdsl.vocab
MODES: tuple[str, ...] = ("forward", "adjoint", "reverse")

_DEFAULT_CVODES = {"abstol": 1e-10, "reltol": 1e-10}


@dataclass(frozen=True, slots=True)
class LossGrad:
    """A trajectory loss and its gradients; ``grad_x0`` is (nx,) or (batch, nx) when batched."""

    loss: float
    grad_x0: np.ndarray
    grad_p: np.ndarray


def trajectory_loss(kind: str, X, target):
    """Scalar loss of predicted states X against ``target`` (same shape); SSE is B4/Eq. 16."""
    r = X - target
    if kind == "sse":
        return ca.sumsqr(r)
    if kind == "mse":
        return ca.sumsqr(r) / r.numel()
    if kind == "l1":
        return ca.sum1(ca.sum2(ca.fabs(r)))
    raise ValueError(f"unknown loss {kind!r}; expected one of {', '.join(LOSSES)}")


def _uniform_step(t_grid: np.ndarray) -> float:
    """The spacing of a uniform grid; fixed-step methods take one step per observation interval."""
    dt = np.diff(t_grid)
    if not np.allclose(dt, dt[0], rtol=1e-9, atol=0.0):
        raise ValueError("fixed-step methods need a uniformly spaced t_grid; use method='cvodes' for an irregular one")
    return float(dt[0])


def _as_grid(t_grid) -> np.ndarray:
    grid = np.asarray(t_grid, dtype=float).ravel()
    if grid.size < 2 or np.any(np.diff(grid) <= 0.0):
        raise ValueError("t_grid needs the initial time and at least one later, strictly increasing observation time")
    return grid


def _cvodes_trajectory(f: ca.Function, grid: np.ndarray, options: Mapping | None) -> ca.Function:
    """CVODES on the multi-point output grid ``grid[1:]`` (CasADi >= 3.6 integrator signature)."""
    nx, np_ = rhs_dims(f)
    sym = ca.SX.sym if f.is_a("SXFunction") else ca.MX.sym
    t, x, p = sym("t"), sym("x", nx), sym("p", np_)
    dae = {"t": t, "x": x, "p": p, "ode": f(t, x, p)}
    opts = {**_DEFAULT_CVODES, **(options or {})}
    return ca.integrator("cvodes_trajectory", "cvodes", dae, float(grid[0]), list(grid[1:]), opts)


def make_trajectory(f: ca.Function, t_grid, *, method: str = "cvodes", integrator_options: Mapping | None = None, **step_options) -> ca.Function:
    """``trajectory(x0, p) -> X`` (nx x M): the states at ``t_grid[1:]`` from x0 at ``t_grid[0]``."""
    grid = _as_grid(t_grid)
    nx, np_ = rhs_dims(f)
    x0, p = ca.MX.sym("x0", nx), ca.MX.sym("p", np_)
    X = _trajectory_expr(f, grid, x0, p, method, integrator_options, step_options)
    return ca.Function("trajectory", [x0, p], [X], ["x0", "p"], ["X"])


def _trajectory_expr(f: ca.Function, grid: np.ndarray, x0, p, method: str, integrator_options, step_options):
    """X(x0, p) as an MX expression. A fixed-step rollout is inlined: one call node per step in
    this graph, not a nested rollout Function whose derivative would re-run the forward rollout."""
    if method == "cvodes":
        return _cvodes_trajectory(f, grid, integrator_options)(x0=x0, p=p)["xf"]
    rollout = make_rollout(f, method, _uniform_step(grid), grid.size - 1, **step_options)
    return rollout.call([grid[0], x0, p], True, False)[0]  # inline one level: the step calls stay


def _loss_grad_function(x0, p, target, L, grad_x0, grad_p) -> ca.Function:
    """``loss_grad(x0, p, target) -> (loss, grad_x0, grad_p)``, evaluated with grad_p first.

    CasADi orders the evaluation of an MX Function depth-first from its outputs, in output
    order. Evaluated first, grad_x0 would run the whole reverse sweep and keep every step's
    contribution to grad_p (np doubles each) alive until the sum for grad_p is formed at the
    end: O(steps x np) memory. With grad_p first each contribution is added as soon as it is
    computed. The public output order is restored by a wrapper (one call node).
    """
    core = ca.Function("loss_grad_core", [x0, p, target], [grad_p, grad_x0, L])
    gp, gx0, loss = core.call([x0, p, target], False, True)
    return ca.Function("loss_grad", [x0, p, target], [loss, gx0, gp], ["x0", "p", "target"], ["loss", "grad_x0", "grad_p"])


def _gradient(L, w, mode: str):
    """dL/dw as a column: one reverse (adjoint) sweep, or forward sweeps seeded with the identity."""
    if mode == "forward":
        return ca.jtimes(L, w, ca.MX.eye(w.numel()), False).T
    return ca.jtimes(L, w, ca.MX.ones(1, 1), True)


def make_loss_grad(
    f: ca.Function,
    t_grid,
    *,
    method: str = "cvodes",
    mode: str = "adjoint",
    loss: str = "sse",
    integrator_options: Mapping | None = None,
    **step_options,
) -> ca.Function:
    """``loss_grad(x0, p, target) -> (loss, grad_x0, grad_p)`` for one trajectory.

    ``integrator_options`` go to CVODES (default abstol = reltol = 1e-10); ``step_options``
    (``solver``, ``n_iter``, ``tol``) go to ``make_step`` for the fixed-step methods.
    """
    if method != "cvodes" and method not in METHODS:
        raise ValueError(f"unknown integration method {method!r}; expected one of cvodes, {', '.join(METHODS)}")
    if mode not in MODES:
        raise ValueError(f"unknown sensitivity mode {mode!r}; expected one of {', '.join(MODES)}")
    grid = _as_grid(t_grid)
    if method != "cvodes" and mode == "adjoint":
        if method != "midpoint":
            raise ValueError(
                f"mode 'adjoint' for a fixed-step method is the discrete adjoint of implicit midpoint; "
                f"use method='midpoint', or mode='reverse' for {method!r}"
            )
        adjoint = make_midpoint_adjoint(f, _uniform_step(grid), grid.size - 1, loss=loss, **step_options)
        x0, p, target = adjoint.mx_in()[1:]
        outputs = adjoint.call([grid[0], x0, p, target], True, False)  # inlined (a call with a constant t0 is slow to build)
        return ca.Function("loss_grad", [x0, p, target], outputs, ["x0", "p", "target"], ["loss", "grad_x0", "grad_p"])
    nx, np_ = rhs_dims(f)
    x0, p = ca.MX.sym("x0", nx), ca.MX.sym("p", np_)
    target = ca.MX.sym("target", nx, grid.size - 1)
    L = trajectory_loss(loss, _trajectory_expr(f, grid, x0, p, method, integrator_options, step_options), target)
    grad = _gradient(L, ca.vertcat(x0, p), mode)  # one sweep for x0 and p together
    return _loss_grad_function(x0, p, target, L, grad[:nx], grad[nx:])


def loss_and_grad(f: ca.Function, x0, p, t_grid, target, *, method: str = "cvodes", mode: str = "adjoint", loss: str = "sse",
                  events=None, switches=None, **options) -> LossGrad:
    """Evaluate the loss and its gradients for one trajectory (see ``make_loss_grad``).

    With ``events`` (:class:`pdsl.numerics.events.StepEvents`) or ``switches`` (``StepSwitches``; then f may be None):
    CVODES forward sensitivities through them by the jump formula (:mod:`pdsl.numerics.event_sensitivity`;
    ``method="cvodes"``, ``mode="forward"``; ``options``: rtol, atol, substeps)."""
    if events is not None or switches is not None:
        if method != "cvodes" or mode != "forward":
            raise ValueError("through events and switches the gradient is CVODES forward sensitivities: "
                             "method='cvodes', mode='forward'")
        return _event_loss_and_grad(f, x0, p, t_grid, target, loss, events, switches, options)
    L, gx0, gp = make_loss_grad(f, t_grid, method=method, mode=mode, loss=loss, **options)(x0, p, target)
    return LossGrad(loss=float(L), grad_x0=np.asarray(gx0).ravel(), grad_p=np.asarray(gp).ravel())


def _event_loss_and_grad(f, x0, p, t_grid, target, loss, events, switches, options) -> LossGrad:
    from .event_sensitivity import event_sensitivities

    if loss not in LOSSES:
        raise ValueError(f"unknown loss {loss!r}; expected one of {', '.join(LOSSES)}")
    run = event_sensitivities(f, t_grid, x0, p, events=events, switches=switches, **options)
    target = np.asarray(target, dtype=float)
    R = run.X.T - target[:, : run.X.shape[0]]  # nx x M (a terminating event: the samples up to it)
    if loss == "l1":
        L, dL = np.abs(R).sum(), np.sign(R)
    else:
        c = 1.0 / R.size if loss == "mse" else 1.0
        L, dL = c * (R * R).sum(), 2.0 * c * R
    g = np.einsum("im,mij->j", dL, run.S)
    nx = run.X.shape[1]
    return LossGrad(loss=float(L), grad_x0=g[:nx], grad_p=g[nx:])


def make_batched_loss_grad(f: ca.Function, t_grid, n_batch: int, *, n_threads: int = 1, **options) -> ca.Function:
    """``(X0, p, targets) -> (loss, grad_X0, grad_p)`` summed over ``n_batch`` trajectories.

    X0 is nx x B, p is np x 1 and shared, targets is nx x (M B) (the per-trajectory targets side
    by side). Every trajectory is differentiated on its own (``make_loss_grad``) and the result
    mapped with ``Function.map(B, "thread", n_threads)``: each instance runs once and no Jacobian
    of the mapped function (block diagonal in X0) is formed. p enters once as a column that the
    map broadcasts, and loss and grad_p are summed, i.e. the reduce_in/reduce_out semantics of
    ``map``. The ``map(name, "thread", n, reduce_in, reduce_out, opts)`` overload itself is not
    used: it drops the thread limit (measured: no speed-up on 2 threads, against 1.95x here).

    Pass p as np x 1. CasADi evaluates a Function k times when an input has k times its
    columns, so a repmat'd np x B p would run the whole batch B times (B^2 trajectories).
    """
    single = make_loss_grad(f, t_grid, **options)
    mapped = single.map(n_batch, "thread", n_threads)
    x0, p, target = single.mx_in()
    X0 = ca.MX.sym("X0", x0.numel(), n_batch)
    targets = ca.MX.sym("targets", target.size1(), target.size2() * n_batch)
    L, G_x0, G_p = mapped(X0, p, targets)
    return ca.Function(
        "batched_loss_grad", [X0, p, targets], [ca.sum2(L), G_x0, ca.sum2(G_p)],
        ["X0", "p", "targets"], ["loss", "grad_X0", "grad_p"],
    )


def batched_loss_and_grad(f: ca.Function, x0s, p, t_grid, targets, *, n_threads: int = 1, **options) -> LossGrad:
    """Summed loss and gradients over initial states ``x0s`` (B x nx) and targets (B x nx x M)."""
    x0s = np.atleast_2d(np.asarray(x0s, dtype=float))
    targets = np.asarray(targets, dtype=float)
    p = np.asarray(p, dtype=float)
    if p.size != rhs_dims(f)[1]:
        raise ValueError(f"p must hold the {rhs_dims(f)[1]} shared parameters once, got an array of shape {p.shape}")
    batch = make_batched_loss_grad(f, t_grid, x0s.shape[0], n_threads=n_threads, **options)
    L, gx0, gp = batch(x0s.T, p.ravel(), np.hstack(list(targets)))
    return LossGrad(loss=float(L), grad_x0=np.asarray(gx0).T, grad_p=np.asarray(gp).ravel())


def make_midpoint_adjoint(f: ca.Function, h: float, n_steps: int, *, loss: str = "sse", **step_options) -> ca.Function:
    """Discrete adjoint of implicit midpoint: ``(t0, x0, p, target) -> (loss, grad_x0, grad_p)``.

    The cotangent lift of BENCHMARKS B4 ("Exact-gradient property"). With the forward midpoints
    m_n = (y_n + y_{n+1})/2, A_n = df/dy(m_n), B_n = df/dp(m_n), one backward step from the
    cotangent lambda_{n+1} (which already holds the jump dL/dy_{n+1}) is

        (I - h/2 A_n)^T mu_n = lambda_{n+1},   lambda_n = (I + h/2 A_n)^T mu_n + dL/dy_n,
        grad_p += h B_n^T mu_n,

    i.e. lambda_n = lambda_{n+1} + h A_n^T (lambda_n + lambda_{n+1})/2: the midpoint rule on
    lambda_dot = -(df/dy)^T lambda (Eqs. 12-13) with the Jacobian at the forward midpoint, and
    the midpoint quadrature of Eq. 15. Given a converged forward solve it equals reverse-mode AD
    through the solver to round-off. ``step_options`` choose the forward solver (see ``make_step``).

    Memory is O(n_steps x nx + np): the forward pass stores the states (one call node per step,
    p passed once), and the backward pass is an unrolled chain of calls of one adjoint step
    that carries (lambda, grad_p) — grad_p is a running sum, each step's term is added as soon
    as it is formed and never stored.
    """
    nx, np_ = rhs_dims(f)
    t0, x0, p = ca.MX.sym("t0"), ca.MX.sym("x0", nx), ca.MX.sym("p", np_)
    target = ca.MX.sym("target", nx, n_steps)
    rollout = make_rollout(f, "midpoint", h, n_steps, **step_options)
    X = rollout.call([t0, x0, p], True, False)[0]

    Y = ca.MX.sym("Y", nx, n_steps)
    L_Y = trajectory_loss(loss, Y, target)
    loss_jumps = ca.Function("loss_jumps", [Y, target], [L_Y, ca.gradient(L_Y, Y)])
    L, G = loss_jumps(X, target)

    midpoints = (ca.horzcat(x0, X[:, :-1]) + X) / 2
    t_mid = t0 + h * (ca.DM(np.arange(n_steps)).T + 0.5)
    jumps_before = ca.horzcat(ca.MX.zeros(nx, 1), G[:, :-1])  # dL/dy_n, n = 0 ... N-1 (y_0 = x0 is not observed)
    step = _midpoint_adjoint_step(f, h)

    def block(k: int) -> ca.Function:  # steps n = start + k - 1 down to start, given their columns
        lam_in, g_in, p_ = ca.MX.sym("lam", nx), ca.MX.sym("g", np_), ca.MX.sym("p", np_)
        M, T, J = ca.MX.sym("m", nx, k), ca.MX.sym("t", 1, k), ca.MX.sym("jump", nx, k)
        lam_, g_ = lam_in, g_in
        for j in range(k - 1, -1, -1):
            lam_, g_ = step(lam_, g_, M[:, j], T[j], J[:, j], p_)
        return ca.Function(f"midpoint_adjoint_block{k}", [lam_in, g_in, M, T, J, p_], [lam_, g_])

    lam, gp = G[:, -1], ca.MX.zeros(np_, 1)
    for start, stop, blk in reversed(unrolled_blocks(n_steps, block)):
        cols = slice(start, stop)
        lam, gp = blk.call([lam, gp, midpoints[:, cols], t_mid[:, cols], jumps_before[:, cols], p], True, False)
    return ca.Function(
        "midpoint_adjoint", [t0, x0, p, target], [L, lam, gp],
        ["t0", "x0", "p", "target"], ["loss", "grad_x0", "grad_p"],
    )


def _midpoint_adjoint_step(f: ca.Function, h: float) -> ca.Function:
    """``(lambda_{n+1}, g, m_n, t_n + h/2, dL/dy_n, p) -> (lambda_n, g + h B_n^T mu_n)`` (see above)."""
    nx, np_ = rhs_dims(f)
    sym = ca.SX.sym if f.is_a("SXFunction") else ca.MX.sym
    lam, g, m, t, jump, p = sym("lam", nx), sym("g", np_), sym("m", nx), sym("t"), sym("jump", nx), sym("p", np_)
    fm = inline_call(f, [t, m, p])[0]
    A = ca.jacobian(fm, m)
    mu = ca.solve((ca.DM.eye(nx) - h / 2 * A).T, lam)
    lam_prev = mu + h / 2 * ca.mtimes(A.T, mu) + jump
    g_next = g + h * ca.jtimes(fm, p, mu, True)
    if sym is ca.MX.sym:
        lam_prev, g_next = ca.cse([lam_prev, g_next])
    return ca.Function("midpoint_adjoint_step", [lam, g, m, t, jump, p], [lam_prev, g_next])
