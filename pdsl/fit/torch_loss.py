"""The chunk rollout loss of BENCHMARKS A5 on the torch backend (:mod:`pdsl.backend.torch_backend`).

The same loss as :class:`pdsl.fit.loss.ChunkLoss` — same initial-state map (shown columns ->
state, p = M v with the current masses), same fixed-step scheme per data interval (``rk4``, ``rk2`` or
``euler``, ``substeps`` steps, inputs linear in time between samples), same observed columns,
weights and batch mean — evaluated for a whole batch of chunks at once: every state is a row of a
(B, nx) tensor, every network layer one matrix–matrix product over the batch, and the gradient is
torch autograd through the rollout (no adjoint ODE, as A5). θ -> p applies the bounds'
reparametrisations of :mod:`pdsl.fit.params` in torch.

AdamW trains on :meth:`TorchChunkLoss.objective` (a torch scalar, differentiated by
``backward()``); ``value``, ``value_grad`` and ``predict`` mirror ``ChunkLoss`` so that the rest of
``pdsl fit`` (validation losses, the report's rollout) works unchanged. The two backends agree to
round-off: ``tests/fit/test_torch_backend.py``.
"""

from __future__ import annotations

import numpy as np
import torch

from ..backend.functions import NumericSystem
from ..backend.torch_backend import DTYPE, Bound, TorchSystem
from ..diagnostics import InternalError, PdslError
from .data import Chunks, Trajectory
from .loss import LOSSES, LossSpec
from .params import ParamLayout
from .backends import BACKENDS, TORCH_INTEGRATORS, choose_backend, make_loss, torch_unsupported  # noqa: F401 (re-exported)

__all__ = ["TorchChunkLoss", "TORCH_INTEGRATORS", "BACKENDS", "torch_unsupported", "choose_backend", "make_loss"]

def _t(a) -> torch.Tensor:
    return torch.as_tensor(np.ascontiguousarray(a, dtype=np.float64))


class TorchChunkLoss:
    """Losses, gradients and rollouts over batches of chunks, on the torch backend."""

    backend = "torch"

    def __init__(self, num: NumericSystem, layout: ParamLayout, spec: LossSpec, observed: tuple[str, ...]):
        if spec.loss not in LOSSES:
            raise PdslError.at("BadOption", f"loss {spec.loss!r}: unknown", hint="one of: " + ", ".join(LOSSES))
        why = torch_unsupported(num, spec)
        if why:
            raise PdslError.at("BadOption", f"--backend torch: {why}", hint="use --backend casadi")
        self.num, self.layout, self.spec, self.observed = num, layout, spec, observed
        self.system = TorchSystem(num.system)
        if self.system.report_names != num.report_names or self.system.n_p != len(num.p_names):
            raise InternalError("the torch and CasADi backends disagree on the model's columns")
        self._pick = []  # per observed column: ("report" | "output", index)
        for name in observed:
            if name in num.report_names:
                self._pick.append(("report", num.report_names.index(name)))
            else:
                self._pick.append(("output", num.y_names.index(name)))
        self._rep_idx = torch.tensor([i for k, i in self._pick if k == "report"], dtype=torch.long)
        self._out_idx = torch.tensor([i for k, i in self._pick if k == "output"], dtype=torch.long)
        self._all_report = [k for k, _ in self._pick] == ["report"] * len(self._pick)
        order = [j for j, (k, _) in enumerate(self._pick) if k == "report"] + [j for j, (k, _) in enumerate(self._pick) if k == "output"]
        self._unpermute = torch.tensor(np.argsort(order), dtype=torch.long)
        w = np.ones(len(observed)) if spec.weights is None else np.asarray(spec.weights, dtype=float)
        self.weights = torch.tensor(w, dtype=DTYPE)
        self._p_base = torch.tensor(np.asarray(layout.p_base[: layout.n_phys], dtype=float), dtype=DTYPE)

    # ---- parameters
    def p_of_theta(self, theta: torch.Tensor) -> torch.Tensor:
        """p(θ) as a torch expression (bounds by reparametrisation, networks identity-mapped)."""
        lay = self.layout
        theta = theta.reshape(-1)
        if lay.n_free:
            entries = list(self._p_base.unbind(0))
            for k, (i, tr) in enumerate(zip(lay.free_index, lay.transforms)):
                th = theta[k]
                kind = tr.kind
                if kind == "logistic":
                    entries[i] = tr.lower + (tr.upper - tr.lower) * torch.sigmoid(th)
                elif kind == "exp-lower":
                    entries[i] = tr.lower + torch.exp(th)
                elif kind == "exp-upper":
                    entries[i] = tr.upper - torch.exp(th)
                else:
                    entries[i] = th
            phys = torch.stack(entries) if entries else self._p_base
        else:
            phys = self._p_base
        return torch.cat([phys, theta[lay.n_free :]]) if lay.n_weights else phys

    # ---- the rollout
    def _interval(self, x, bound: Bound, u0, u1, tk):
        spec = self.spec
        dt, h = spec.dt, spec.dt / spec.substeps
        f = self.system.rhs
        nu = u0.shape[1]

        def rhs(tau, x):
            u = u0 + (tau / dt) * (u1 - u0) if nu else None
            return f(tk + tau, x, bound, u)

        for j in range(spec.substeps):
            t0 = j * h
            if spec.method == "euler":
                x = x + h * rhs(t0, x)
                continue
            if spec.method == "rk2":  # explicit midpoint: x + h f(x + h/2 f(x))
                x = x + h * rhs(t0 + h / 2, x + (h / 2) * rhs(t0, x))
                continue
            k1 = rhs(t0, x)
            k2 = rhs(t0 + h / 2, x + (h / 2) * k1)
            k3 = rhs(t0 + h / 2, x + (h / 2) * k2)
            k4 = rhs(t0 + h, x + h * k3)
            x = x + (h / 6) * (k1 + 2 * k2 + 2 * k3 + k4)
        return x

    def _observe(self, t, x, bound: Bound, u):
        rep = self.system.report(t, x, bound)
        if self._all_report:
            return rep[:, self._rep_idx]
        parts = [rep[:, self._rep_idx]] if len(self._rep_idx) else []
        if len(self._out_idx):
            parts.append(self.system.outputs(t, x, bound, u if u.shape[1] else None)[:, self._out_idx])
        return torch.cat(parts, 1)[:, self._unpermute]

    def rollout(self, p: torch.Tensor, S0, U, T) -> torch.Tensor:
        """Observed columns at t_1..t_n of the rollouts from S0: (B, n_obs, n).
        S0 (B, n_shown), U (B, n_u, n + 1), T (B, n + 1)."""
        bound = self.system.bind(p)
        x = self.system.state_from_shown(T[:, 0], S0, bound)
        out = []
        for k in range(T.shape[1] - 1):
            x = self._interval(x, bound, U[:, :, k], U[:, :, k + 1], T[:, k])
            out.append(self._observe(T[:, k + 1], x, bound, U[:, :, k + 1]))
        return torch.stack(out, 2)

    # ---- losses
    def entry_scale(self, B: int) -> float:
        return 1.0 / (B * self.spec.steps * max(len(self.observed), 1))

    def objective(self, theta: torch.Tensor, chunks: Chunks) -> torch.Tensor:
        """The batch mean loss as a differentiable torch scalar of θ."""
        p = self.p_of_theta(theta)
        Yhat = self.rollout(p, _t(chunks.S0), _t(chunks.U), _t(chunks.T))
        R = (Yhat - _t(chunks.Y)) * self.weights[None, :, None]
        total = R.abs().sum() if self.spec.loss == "l1" else (R * R).sum()
        return total * self.entry_scale(len(chunks))

    def value(self, theta: np.ndarray, chunks: Chunks, batch: int = 256) -> float:
        if len(chunks) == 0:
            return float("nan")
        th = _t(theta)
        total = 0.0
        with torch.no_grad():
            for start in range(0, len(chunks), batch):
                part = chunks.take(slice(start, start + batch))
                total += float(self.objective(th, part)) * len(part)
        return total / len(chunks)

    def value_grad(self, theta: np.ndarray, chunks: Chunks) -> tuple[float, np.ndarray]:
        th = _t(theta).clone().requires_grad_(True)
        L = self.objective(th, chunks)
        (g,) = torch.autograd.grad(L, th)
        return float(L.detach()), g.numpy().copy()

    def predict(self, p: np.ndarray, traj: Trajectory) -> np.ndarray:
        """Observed columns along a whole trajectory from its first sample ((n, n_obs); row 0 = data)."""
        with torch.no_grad():
            Y = self.rollout(_t(p), _t(traj.S[:1]), _t(traj.U.T[None]), _t(traj.t[None]))[0].numpy().T
        return np.vstack([traj.Y[:1], Y])
