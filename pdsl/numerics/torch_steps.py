"""Runge–Kutta steps on batched torch right-hand sides, with the implicit schemes' gradients.

The torch twin of :mod:`pdsl.numerics.fixed_step` and of the discrete adjoint in
:mod:`pdsl.numerics.sensitivity`, on the SAME Butcher tableaus (:func:`~pdsl.numerics.fixed_step.tableau`:
one tableau set in the project). A right-hand side is ``f(t, x, bound) -> xdot`` on a batch
(x: (B, nx)); ``bind(p)`` prepares a parameter vector p once (for the torch backend,
:meth:`pdsl.backend.torch_backend.TorchSystem.bind`).

Explicit schemes (``euler``, ``rk2``, ``rk4``) evaluate their stages in order; autograd
differentiates them. Implicit schemes (``midpoint``, ``gauss2``) solve the stage equations

    K_i = f(t + c_i h, x + h Σ_j a_ij K_j),     x_next = x + h Σ_i b_i K_i

from the explicit predictor K_i^(0) = f(t + c_i h, x + c_i h f(t, x)) (for midpoint the RK2
step: BENCHMARKS B3.2, Alg. 2) by

* ``fpi``: fixed-point sweeps K^(k) = F(K^(k-1)), a count (``n_iter``) or until the step change
  h·max|K^(k) − K^(k-1)| ≤ ``tol`` (at most ``n_iter`` sweeps) — the same iterates as CasADi's
  ``solver="fpi"``;
* ``newton``: Newton on K − F(K) = 0 with the batched Jacobian I − h (a_ij A_i), until the step
  is below ``tol``.

The gradient of an implicit step is, selectably,

* ``adjoint``: the discrete adjoint (:class:`ImplicitStep`, a ``torch.autograd.Function``). The
  forward solve runs without a graph; the backward step solves the transposed stage system at the
  stored stages (implicit-function theorem), i.e. for midpoint the cotangent lift of B4
  ("exact-gradient property", :func:`pdsl.numerics.make_midpoint_adjoint`):
  (I − h/2 A)ᵀ μ = λ, λ_n = (I + h/2 A)ᵀ μ + jumps, grad_p += h Bᵀ μ with A, B at the midpoint.
  Only the states (and stages) between steps are kept: memory per step is O(s·nx), flat in
  the number of sweeps and free of the network activations;
* ``unrolled``: backpropagation through the predictor and the sweeps (``fpi`` only); memory grows
  with sweeps × steps × network size.

With a converged forward solve the two agree to round-off; with a fixed count of sweeps they
differ by the unconverged residual (``tests/numerics/test_torch_steps.py``).

:func:`rk_event_step` is the batched twin of :func:`pdsl.numerics.events.make_event_step`: a step that locates the
state events (``when``) inside it — secant, then one Newton step on the step's cubic Hermite interpolant (its
derivative in θ by autograd, kept in the graph), the reset at x(τ), the rest of the step (1 − θ)h from τ with the same
scheme — every branch computed and selected per batch element (``torch.where``), so that autograd differentiates the
discrete solution with the event-time term dτ/dp (``tests/numerics/test_torch_event_step.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch.autograd.function import once_differentiable

from .fixed_step import Tableau, explicit_rk_step, tableau

__all__ = ["IMPLICIT_SOLVERS", "GRADIENTS", "StepOptions", "rk_step", "solve_stages", "ImplicitStep", "TorchStepEvents",
           "rk_event_step"]

IMPLICIT_SOLVERS = ("fpi", "newton")
GRADIENTS = ("adjoint", "unrolled")


@dataclass(frozen=True)
class StepOptions:
    """How an implicit step is solved and differentiated (ignored by explicit schemes)."""

    solver: str = "fpi"
    n_iter: int = 6  # fpi: sweeps (with ``tol``: at most this many); newton: at most max(n_iter, 20) steps
    tol: float | None = None  # fpi: stop early at this step change; newton: default 1e-12
    gradient: str = "adjoint"

    def __post_init__(self):
        if self.solver not in IMPLICIT_SOLVERS:
            raise ValueError(f"unknown implicit solver {self.solver!r}; expected one of {', '.join(IMPLICIT_SOLVERS)}")
        if self.gradient not in GRADIENTS:
            raise ValueError(f"unknown gradient {self.gradient!r}; expected one of {', '.join(GRADIENTS)}")
        if self.n_iter < 0:
            raise ValueError(f"n_iter must be non-negative, got {self.n_iter}")
        if self.gradient == "unrolled" and self.solver != "fpi":
            raise ValueError("unrolled backpropagation differentiates the fixed-point sweeps; use solver 'fpi', "
                             "or gradient 'adjoint' with Newton")


Rhs = Callable  # (t, x (B, nx), bound) -> (B, nx)


def _stage_points(tab: Tableau, h: float, x: torch.Tensor, K: list) -> list:
    """x + h Σ_j a_ij K_j for every stage i (zero coefficients skipped)."""
    out = []
    for i in range(tab.stages):
        y = x
        for j in range(tab.stages):
            if tab.a[i][j] != 0.0:
                y = y + (h * tab.a[i][j]) * K[j]
        out.append(y)
    return out


def _sweep(f: Rhs, tab: Tableau, h: float, t, x, bound, K: list) -> list:
    return [f(t + tab.c[i] * h, y, bound) for i, y in enumerate(_stage_points(tab, h, x, K))]


def _predictor(f: Rhs, tab: Tableau, h: float, t, x, bound) -> list:
    f0 = f(t, x, bound)
    return [f0 if c == 0.0 else f(t + c * h, x + (c * h) * f0, bound) for c in tab.c]


def _change(h: float, K: list, K_new: list) -> float:
    return h * max(float((a - b).detach().abs().max()) for a, b in zip(K, K_new)) if K and K[0].numel() else 0.0


def _stage_jacobians(F: list, Y: list) -> list:
    """A_i = ∂f/∂y at the stage points Y_i (leaves with grad), as (B, nx, nx); one backward pass per row."""
    out = []
    for Fi, Yi in zip(F, Y):
        nx = Fi.shape[1]
        rows = []
        for r in range(nx):
            (g,) = torch.autograd.grad(Fi[:, r].sum(), Yi, retain_graph=True, allow_unused=True)
            rows.append(torch.zeros_like(Yi) if g is None else g)
        out.append(torch.stack(rows, 1))
    return out


def _stage_matrix(tab: Tableau, h: float, A: list) -> torch.Tensor:
    """I − ∂F/∂K: block (i, j) = δ_ij I − h a_ij A_i, (B, s·nx, s·nx)."""
    s = tab.stages
    B, nx, _ = A[0].shape
    eye = torch.eye(nx, dtype=A[0].dtype, device=A[0].device).expand(B, nx, nx)
    rows = []
    for i in range(s):
        blocks = []
        for j in range(s):
            blk = -(h * tab.a[i][j]) * A[i]
            blocks.append(blk + eye if i == j else blk)
        rows.append(torch.cat(blocks, 2))
    return torch.cat(rows, 1)


def solve_stages(f: Rhs, tab: Tableau, h: float, t, x: torch.Tensor, bound, opts: StepOptions) -> list:
    """The stage slopes K_i (list of (B, nx)) of an implicit scheme, by ``opts.solver``.

    Differentiable (through the sweeps) when called with grad enabled and ``fpi``; Newton's
    iterates are detached (its gradient is the adjoint's)."""
    K = _predictor(f, tab, h, t, x, bound)
    if opts.solver == "fpi":
        for _ in range(opts.n_iter):
            K_new = _sweep(f, tab, h, t, x, bound, K)
            done = opts.tol is not None and _change(h, K, K_new) <= opts.tol
            K = K_new
            if done:
                break
        return K
    tol = 1e-12 if opts.tol is None else opts.tol
    K = [k.detach() for k in K]
    s = tab.stages
    for _ in range(max(opts.n_iter, 20)):
        with torch.enable_grad():
            Y = [y.detach().requires_grad_(True) for y in _stage_points(tab, h, x.detach(), K)]
            F = [f(t + tab.c[i] * h, Y[i], bound) for i in range(s)]
            A = _stage_jacobians(F, Y)
        G = torch.cat([k - Fi.detach() for k, Fi in zip(K, F)], 1)  # residual K − F(K), (B, s·nx)
        dK = torch.linalg.solve(_stage_matrix(tab, h, A), G.unsqueeze(-1)).squeeze(-1)
        K = [k - d for k, d in zip(K, dK.chunk(s, 1))]
        if h * float(dK.abs().max()) <= tol:
            break
    return K


def _combine(tab: Tableau, h: float, x, K: list):
    out = x
    for bi, k in zip(tab.b, K):
        if bi != 0.0:
            out = _axpy(out, h * bi, k)
    return out


class ImplicitStep(torch.autograd.Function):
    """One implicit RK step ``x_next(x, p)`` whose backward pass is the discrete adjoint.

    ``apply(x, p, f, bind, tab, h, t, opts)``; t may be a float or a (B,) tensor (not
    differentiated). The backward pass rebuilds f at the stored stage points, forms the stage
    Jacobians A_i (one backward pass per state row), solves (I − ∂F/∂K)ᵀ ν = h (b ⊗ λ) and
    returns grad_x = λ + Σ A_iᵀ ν_i and grad_p = Σ (∂f/∂p)_iᵀ ν_i (one more backward pass)."""

    @staticmethod
    def forward(ctx, x, p, f, bind, tab, h, t, opts):
        with torch.no_grad():
            bound = bind(p)
            K = solve_stages(f, tab, h, t, x, bound, opts)
            x_next = _combine(tab, h, x, K)
        ctx.save_for_backward(x, p, *K)
        ctx.f, ctx.bind, ctx.tab, ctx.h, ctx.t = f, bind, tab, h, t
        return x_next

    @staticmethod
    @once_differentiable
    def backward(ctx, lam):
        x, p, *K = ctx.saved_tensors
        f, tab, h, t = ctx.f, ctx.tab, ctx.h, ctx.t
        s = tab.stages
        with torch.enable_grad():
            pd = p.detach().requires_grad_(True)
            bound = ctx.bind(pd)
            Y = [y.detach().requires_grad_(True) for y in _stage_points(tab, h, x, K)]
            F = [f(t + tab.c[i] * h, Y[i], bound) for i in range(s)]
            A = _stage_jacobians(F, Y)
            rhs = torch.cat([(h * tab.b[i]) * lam for i in range(s)], 1).unsqueeze(-1)
            nu = torch.linalg.solve(_stage_matrix(tab, h, A).transpose(1, 2), rhs).squeeze(-1).chunk(s, 1)
            grads = torch.autograd.grad(F, [pd, *Y], grad_outputs=list(nu), allow_unused=True)
        gp = torch.zeros_like(p) if grads[0] is None else grads[0]
        gx = lam
        for g in grads[1:]:
            if g is not None:
                gx = gx + g
        return gx, gp, None, None, None, None, None, None


def rk_step(f: Rhs, method: str, h: float, t, x: torch.Tensor, *, p: torch.Tensor | None = None,
            bind: Callable | None = None, bound=None, opts: StepOptions = StepOptions()) -> torch.Tensor:
    """One step of ``method`` from x (B, nx) at time t with step h.

    Explicit schemes and implicit ones with ``opts.gradient == "unrolled"`` run on ``bound``
    (autograd through the stages); implicit ones with ``"adjoint"`` need ``p`` and ``bind``
    (:class:`ImplicitStep` binds p itself so that the gradient reaches p)."""
    tab = tableau(method)
    if not tab.implicit:
        return explicit_rk_step(lambda s, y: f(s, y, bound), method, t, x, h, _axpy)
    if opts.gradient == "adjoint":
        return ImplicitStep.apply(x, p, f, bind, tab, h, t, opts)
    return _combine(tab, h, x, solve_stages(f, tab, h, t, x, bound, opts))


def _axpy(y, c, k):
    """y + c·k: with a number c one operation (and one autograd node) instead of a scaling and a sum."""
    return torch.add(y, k, alpha=c) if isinstance(c, (int, float)) else y + c * k


# ---------------------------------------------------------------- steps through events
_NEVER = 2.0  # the θ of a condition that does not become true in the step (as pdsl.numerics.events)


@dataclass(frozen=True)
class TorchStepEvents:
    """The events of a batched rhs f(t, x, bound) (:class:`pdsl.numerics.events.StepEvents` in torch)."""

    atoms: Callable  # (t, x, bound) -> g (B, n_atoms): atom k true where g_k < 0 (strict) or g_k <= 0
    strict: tuple[bool, ...]
    conditions: tuple  # per event: ("atom", k) | ("and" | "or", (subtrees)) — negation normal form
    resets: tuple  # per event: (indices of the reset states, fn(t, x, bound) -> (B, k) new values), or None
    terminate: tuple[bool, ...]


def _truth(g: torch.Tensor, strict) -> list:
    return [g[:, k] < 0 if st else g[:, k] <= 0 for k, st in enumerate(strict)]


def _cond(tree, values, combine):
    kind, arg = tree
    if kind == "atom":
        return values[arg]
    out = None
    for sub in arg:
        v = _cond(sub, values, combine)
        out = v if out is None else combine[kind](out, v)
    return out


_LOGIC = {"and": torch.logical_and, "or": torch.logical_or}
_THETA = {"and": torch.maximum, "or": torch.minimum}  # a conjunction is true from its last atom's crossing


def _hermite(theta: torch.Tensor, x0, x1, hf0, hf1) -> torch.Tensor:
    """The step's cubic Hermite interpolant at θ (B,)."""
    th = theta.unsqueeze(1)
    t2, t3 = th * th, th * th * th
    return (2 * t3 - 3 * t2 + 1) * x0 + (t3 - 2 * t2 + th) * hf0 + (-2 * t3 + 3 * t2) * x1 + (t3 - t2) * hf1


def _nonzero(d: torch.Tensor) -> torch.Tensor:
    return torch.where(d != 0, d, torch.ones_like(d))


def rk_event_step(f: Rhs, method: str, h: float, t, x: torch.Tensor, events: TorchStepEvents, *,
                  p: torch.Tensor | None = None, bind: Callable | None = None, bound=None,
                  opts: StepOptions = StepOptions()) -> torch.Tensor:
    """One step of ``method`` (:func:`rk_step`) from x (B, nx) at t with the events located in it, as
    :func:`pdsl.numerics.events.make_event_step` (same semantics, per batch element): an event fires when its
    condition is false at the step's start and true at its end; each atom that turned true is located by the secant
    θ₀ = g(0)/(g(0) − g(1)) and one Newton step on the Hermite interpolant (clipped to [0, 1]); the earliest event
    wins (ties: the first declared); its reset is applied at x(τ), τ = t + θh, and the rest (1 − θ)h is integrated
    from τ. A second firing in the rest of the step, or a ``terminate``, gives NaN."""
    x1 = rk_step(f, method, h, t, x, p=p, bind=bind, bound=bound, opts=opts)
    if not events.conditions:
        return x1
    B = x.shape[0]
    grad_on = torch.is_grad_enabled()
    hf0, hf1 = h * f(t, x, bound), h * f(t + h, x1, bound)
    g0, g1 = events.atoms(t, x, bound), events.atoms(t + h, x1, bound)
    true0, true1 = _truth(g0, events.strict), _truth(g1, events.strict)
    never = torch.full((B,), _NEVER, dtype=x.dtype, device=x.device)
    zero = torch.zeros_like(never)

    theta_atom = []
    for k in range(len(events.strict)):
        th = torch.clamp(g0[:, k] / _nonzero(g0[:, k] - g1[:, k]), 0.0, 1.0)  # the secant
        # g(t + θh, X(θ)) and its derivative in θ (the batch elements are independent: the sum's gradient is each
        # one's derivative), in the graph when the step is differentiated (θ's own dependence on x, p is upstream)
        in_graph = grad_on and th.requires_grad
        with torch.enable_grad():
            tv = th if in_graph else th.detach().requires_grad_(True)
            gk = events.atoms(t + tv * h, _hermite(tv, x, x1, hf0, hf1), bound)[:, k]
            (slope,) = torch.autograd.grad(gk.sum(), tv, create_graph=in_graph, allow_unused=True)
        if slope is None:
            slope = torch.zeros_like(th)
        if not in_graph:
            gk, slope = gk.detach(), slope.detach()
        th = torch.clamp(th - gk / _nonzero(slope), 0.0, 1.0)  # one Newton step
        # when the atom becomes true: θ if it turned true in the step, 0 if true throughout, never if false at the end
        theta_atom.append(torch.where(true1[k], torch.where(true0[k], zero, th), never))

    fire, theta = [], []
    for tree in events.conditions:
        start = _cond(tree, true0, _LOGIC)
        th = _cond(tree, theta_atom, _THETA)
        fires = torch.logical_and(torch.logical_not(start), th <= 1.0)
        fire.append(fires)
        theta.append(torch.where(fires, th, never))
    first = theta[0]
    for th in theta[1:]:
        first = torch.minimum(first, th)

    tab = tableau(method)

    def rest_of_step(j):
        th = torch.clamp(theta[j], max=1.0)  # (θ = 2 where it does not fire: the branch is not taken, but stays finite)
        X = _hermite(th, x, x1, hf0, hf1)
        tau = t + th * h
        xp = X
        if events.resets[j] is not None:
            idx, fn = events.resets[j]
            vals = fn(tau, X, bound)
            cols = list(X.unbind(1))
            for r, i in enumerate(idx):
                cols[i] = vals[:, r]
            xp = torch.stack(cols, 1)
        if events.terminate[j]:  # the run ends here: data after it cannot be compared
            return torch.full_like(x1, float("nan"))
        hr = (1.0 - th) * h
        if tab.implicit and opts.gradient == "adjoint":
            # the discrete adjoint differentiates p only: τ and the rest's length travel in an extended p
            n = p.shape[0]
            pe = torch.cat([p.reshape(-1), tau, hr])

            def bind_e(q, n=n):
                return bind(q[:n]), q[n : n + B], q[n + B :]

            def f_e(s, y, be):
                return be[2].unsqueeze(1) * f(be[1] + s * be[2], y, be[0])

            x_end = ImplicitStep.apply(xp, pe, f_e, bind_e, tab, 1.0, 0.0, opts)
        else:
            def f_rest(s, y, bnd):
                return hr.unsqueeze(1) * f(tau + s * hr, y, bnd)

            x_end = rk_step(f_rest, method, 1.0, 0.0, xp, bound=bound, opts=opts)
        # a second firing in the rest of the step: events closer than a step (an accumulation): not taken, NaN
        tp = _truth(events.atoms(tau, xp, bound), events.strict)
        te = _truth(events.atoms(t + h, x_end, bound), events.strict)
        again = None
        for tree in events.conditions:
            a = torch.logical_and(torch.logical_not(_cond(tree, tp, _LOGIC)), _cond(tree, te, _LOGIC))
            again = a if again is None else torch.logical_or(again, a)
        return torch.where(again.unsqueeze(1), torch.full_like(x_end, float("nan")), x_end)

    x_next = x1
    for j in reversed(range(len(events.conditions))):
        sel = torch.logical_and(fire[j], theta[j] <= first)
        if bool(sel.any()):  # (a branch no element takes is not computed: it would be selected nowhere)
            x_next = torch.where(sel.unsqueeze(1), rest_of_step(j), x_next)
    return x_next
