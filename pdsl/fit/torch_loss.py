"""The chunk rollout loss of BENCHMARKS A5 on the torch backend (:mod:`pdsl.backend.torch_backend`).

The same loss as :class:`pdsl.fit.loss.ChunkLoss` — same initial-state map (shown columns ->
state, p = M v with the current masses), same fixed-step scheme per data interval (``rk4``, ``rk2``,
``euler``, or the implicit ``midpoint`` and ``gauss2``; ``substeps`` steps, inputs linear in time
between samples), same observed columns, weights and batch mean — evaluated for a whole batch of
chunks at once: every state is a row of a (B, nx) tensor, every network layer one matrix–matrix
product over the batch. The gradient is torch autograd through the rollout for the explicit
schemes (no adjoint ODE, as BENCHMARKS A5); an implicit step is solved by fixed-point sweeps or Newton and
differentiated by its discrete adjoint or by backpropagation through the sweeps
(:mod:`pdsl.numerics.torch_steps`; BENCHMARKS B3.2, B4). θ -> p applies the bounds'
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
from ..backend.torch_backend import Bound, TorchSystem
from ..numerics.torch_steps import StepOptions, TorchStepEvents, rk_event_step, rk_step
from ..diagnostics import InternalError, PdslError
from .data import Chunks, Trajectory
from .loss import LOSSES, LossSpec
from .params import ParamLayout
from .torch_support import torch_unsupported

__all__ = ["TorchChunkLoss"]

def _t(a) -> torch.Tensor:
    return torch.as_tensor(np.ascontiguousarray(a, dtype=np.float64))


DTYPES = {"float64": torch.float64, "float32": torch.float32}


def step_options(spec: LossSpec) -> StepOptions:
    """The implicit schemes' solver and gradient from ``spec.step_options`` (torch defaults: the
    paper's FPI, 6 sweeps, discrete adjoint)."""
    o = spec.step_options or {}
    return StepOptions(solver=o.get("solver", "fpi"), n_iter=int(o.get("n_iter", 6)), tol=o.get("tol"),
                       gradient=o.get("gradient", "adjoint"))


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
        self.dtype = DTYPES[getattr(spec, "dtype", "float64")]
        self.device = torch.device(getattr(spec, "device", "cpu"))
        if self.device.type == "cuda" and (not torch.cuda.is_available()
                                           or (self.device.index or 0) >= torch.cuda.device_count()):
            raise PdslError.at("BadOption", f"--device {spec.device}: no such CUDA device here "
                               f"({torch.cuda.device_count()} visible to torch {torch.__version__})",
                               hint="use --device cpu (the default)")
        self.step_opts = step_options(spec)
        self._masks = None  # dropout masks of the rollout being evaluated (training)
        self.system = TorchSystem(num.system, dtype=self.dtype, device=self.device)
        if self.system.report_names != num.report_names or self.system.n_p != len(num.p_names):
            raise InternalError("the torch and CasADi backends disagree on the model's columns")
        self._pick = []  # per observed column: ("report" | "output", index)
        for name in observed:
            if name in num.report_names:
                self._pick.append(("report", num.report_names.index(name)))
            else:
                self._pick.append(("output", num.y_names.index(name)))
        self._rep_idx = torch.tensor([i for k, i in self._pick if k == "report"], dtype=torch.long, device=self.device)
        self._out_idx = torch.tensor([i for k, i in self._pick if k == "output"], dtype=torch.long, device=self.device)
        self._all_report = [k for k, _ in self._pick] == ["report"] * len(self._pick)
        order = [j for j, (k, _) in enumerate(self._pick) if k == "report"] + [j for j, (k, _) in enumerate(self._pick) if k == "output"]
        self._unpermute = torch.tensor(np.argsort(order), dtype=torch.long, device=self.device)
        w = np.ones(len(observed)) if spec.weights is None else np.asarray(spec.weights, dtype=float)
        self.weights = self.tensor(w)
        self._p_base = self.tensor(np.asarray(layout.p_base[: layout.n_phys], dtype=float))

    def tensor(self, a) -> torch.Tensor:
        """An array as a tensor of this loss's dtype and device."""
        return torch.as_tensor(np.ascontiguousarray(a, dtype=np.float64)).to(dtype=self.dtype, device=self.device)

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
    def _interval(self, x, p: torch.Tensor, bound: Bound, u0, u1, tk):
        """``substeps`` steps of the spec's scheme over one data interval (the tableaus of
        :func:`pdsl.numerics.tableau`; implicit ones by :func:`pdsl.numerics.torch_steps.rk_step`)."""
        spec = self.spec
        dt, h = spec.dt, spec.dt / spec.substeps
        f = self.system.rhs
        nu = u0.shape[1]

        def u_at(tau):
            if not nu:
                return None
            w = tau / dt
            return u0 + (w.unsqueeze(1) if isinstance(w, torch.Tensor) and w.dim() else w) * (u1 - u0)

        def rhs(tau, x, bnd):
            return f(tk + tau, x, bnd, u_at(tau))

        sysm = self.system
        if sysm.has_events:  # `when`: each step locates the events in it (pdsl.numerics.torch_steps.rk_event_step)
            def atoms(tau, x, bnd):
                return sysm.event_atoms(tk + tau, x, bnd, u_at(tau))

            def reset(j):
                return lambda tau, x, bnd: sysm.event_reset(j, tk + tau, x, bnd, u_at(tau))

            events = TorchStepEvents(atoms, sysm.event_strict, sysm.event_conditions,
                                     tuple(None if idx is None else (idx, reset(j))
                                           for j, idx in enumerate(sysm.event_targets)), sysm.event_terminate)
            for j in range(spec.substeps):
                x = rk_event_step(rhs, spec.method, h, j * h, x, events, p=p, bind=self._bind, bound=bound,
                                  opts=self.step_opts)
            return x
        for j in range(spec.substeps):
            x = rk_step(rhs, spec.method, h, j * h, x, p=p, bind=self._bind, bound=bound, opts=self.step_opts)
        return x

    def _observe(self, t, x, bound: Bound, u):
        rep = self.system.report(t, x, bound)
        if self._all_report:
            return rep[:, self._rep_idx]
        parts = [rep[:, self._rep_idx]] if len(self._rep_idx) else []
        if len(self._out_idx):
            parts.append(self.system.outputs(t, x, bound, u if u.shape[1] else None)[:, self._out_idx])
        return torch.cat(parts, 1)[:, self._unpermute]

    def rollout(self, p: torch.Tensor, S0, U, T, masks: dict | None = None) -> torch.Tensor:
        """Observed columns at t_1..t_n of the rollouts from S0: (B, n_obs, n).
        S0 (B, n_shown), U (B, n_u, n + 1), T (B, n + 1); ``masks``: dropout (training)."""
        bound = self.system.bind(p, masks)
        self._masks = masks
        x = self.system.state_from_shown(T[:, 0], S0, bound)
        out = []
        for k in range(T.shape[1] - 1):
            x = self._interval(x, p, bound, U[:, :, k], U[:, :, k + 1], T[:, k])
            out.append(self._observe(T[:, k + 1], x, bound, U[:, :, k + 1]))
        return torch.stack(out, 2)

    # ---- losses
    def entry_scale(self, B: int) -> float:
        return 1.0 / (B * self.spec.steps * max(len(self.observed), 1))

    def _bind(self, p):  # for the implicit steps' adjoint: the same dropout masks as the forward pass
        return self.system.bind(p, self._masks)

    def objective(self, theta: torch.Tensor, chunks: Chunks, dropout_key=None) -> torch.Tensor:
        """The batch mean loss as a differentiable torch scalar of θ. With ``spec.dropout`` and a
        ``dropout_key`` (training: seed, epoch, batch) the networks drop units, one mask per sample and
        layer for the whole rollout (so that implicit steps solve one equation)."""
        p = self.p_of_theta(theta)
        masks = None
        if self.spec.dropout and dropout_key is not None:
            g = torch.Generator().manual_seed(int(np.random.default_rng(list(dropout_key)).integers(2**62)))
            masks = self.system.dropout_masks(self.spec.dropout, len(chunks), g)
        Yhat = self.rollout(p, self.tensor(chunks.S0), self.tensor(chunks.U), self.tensor(chunks.T), masks)
        R = (Yhat - self.tensor(chunks.Y)) * self.weights[None, :, None]
        total = R.abs().sum() if self.spec.loss == "l1" else (R * R).sum()
        return total * self.entry_scale(len(chunks))

    def value(self, theta: np.ndarray, chunks: Chunks, batch: int = 256) -> float:
        if len(chunks) == 0:
            return float("nan")
        th = self.tensor(theta)
        total = 0.0
        with torch.no_grad():
            for start in range(0, len(chunks), batch):
                part = chunks.take(slice(start, start + batch))
                total += float(self.objective(th, part)) * len(part)
        return total / len(chunks)

    def value_grad(self, theta: np.ndarray, chunks: Chunks) -> tuple[float, np.ndarray]:
        th = self.tensor(theta).clone().requires_grad_(True)
        L = self.objective(th, chunks)
        (g,) = torch.autograd.grad(L, th)
        return float(L.detach()), g.detach().cpu().double().numpy().copy()

    def predict(self, p: np.ndarray, traj: Trajectory) -> np.ndarray:
        """Observed columns along a whole trajectory from its first sample ((n, n_obs); row 0 = data)."""
        with torch.no_grad():
            Y = self.rollout(self.tensor(p), self.tensor(traj.S[:1]), self.tensor(traj.U.T[None]),
                             self.tensor(traj.t[None]))[0].cpu().double().numpy().T
        return np.vstack([traj.Y[:1], Y])
