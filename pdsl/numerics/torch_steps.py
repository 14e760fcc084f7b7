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
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch.autograd.function import once_differentiable

from .fixed_step import Tableau, tableau

__all__ = ["IMPLICIT_SOLVERS", "GRADIENTS", "StepOptions", "rk_step", "solve_stages", "ImplicitStep"]

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
            out = out + (h * bi) * k
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
        K: list = []
        for i in range(tab.stages):
            y = x
            for j in range(i):
                if tab.a[i][j] != 0.0:
                    y = y + (h * tab.a[i][j]) * K[j]
            K.append(f(t + tab.c[i] * h, y, bound))
        return _combine(tab, h, x, K)
    if opts.gradient == "adjoint":
        return ImplicitStep.apply(x, p, f, bind, tab, h, t, opts)
    return _combine(tab, h, x, solve_stages(f, tab, h, t, x, bound, opts))
