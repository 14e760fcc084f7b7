"""Optimisers: Levenberg–Marquardt for a few physical parameters, AdamW for networks.

* ``gauss-newton``: Levenberg–Marquardt (Marquardt's diagonal scaling) on the stacked chunk
  residuals, with the exact Jacobian dr/dθ from CasADi (forward mode through the rollouts).
  One epoch is one accepted step on all training chunks. It minimises the MSE loss; bounds are
  kept by the reparametrisation of :mod:`pdsl.fit.params`. At the end, standard errors come
  from s²(JᵀJ)⁻¹ (delta method to the parameters) — indicative only, since noise on a chunk's
  first sample correlates its residuals.
* ``adamw``: torch AdamW on minibatches of chunks with the BENCHMARKS A5 defaults (lr 3e-3,
  weight decay 1e-4 on the networks, none on the physical parameters, cosine annealing without
  restarts over the epochs, minibatch 200); the gradient comes from CasADi through
  :func:`pdsl.fit.torch_bridge.casadi_loss`.

Both are deterministic for a given seed (the minibatch order of epoch e is drawn from
``default_rng([seed, e])``, and the learning rate is the closed form of cosine annealing), so a
run resumed from a checkpoint ends exactly where an uninterrupted run does.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..diagnostics import PdslError
from .checkpoint import State
from .data import Chunks
from .loss import ChunkLoss

__all__ = ["TrainOptions", "Result", "gauss_newton", "adamw", "cosine_lr", "METHODS"]

METHODS = ("auto", "gauss-newton", "adamw")


@dataclass(frozen=True)
class TrainOptions:
    epochs: int = 100
    batch: int = 200
    lr: float = 3e-3
    lr_min: float = 0.0
    weight_decay: float = 1e-4
    seed: int = 0
    tol: float = 1e-10  # Gauss–Newton: stop when the relative decrease of the cost falls below it
    stop_after: int | None = None  # end this run after this many epochs in total (resume later)
    progress: bool = True
    schedule: str = "cosine"  # cosine | plateau (ReduceLROnPlateau on the validation loss)
    patience: int = 10
    factor: float = 0.5
    warmup: int = 0  # epochs of linear warm-up: the schedule's lr times (epoch + 1)/warmup while epoch < warmup
    early_stop: int | None = None  # epochs without a better validation loss before stopping
    windows: Callable | None = None  # epoch -> the training Chunks of that epoch (random windows); None: fixed chunks


@dataclass
class Result:
    state: State
    finished: bool  # all epochs done, or converged
    stderr: np.ndarray | None = None  # Gauss–Newton: standard errors of θ


Callback = Callable[[State], None]


def _bar(opts: TrainOptions, state: State, label: str):
    """The epoch bar on standard error: only where it can be redrawn (a terminal or a notebook; pdsl.terminal),
    never as carriage-return frames in a log file."""
    import sys

    from tqdm import tqdm

    from ..terminal import progress

    return tqdm(total=opts.epochs, initial=state.epoch, desc=label, unit="epoch", file=sys.stderr,
                disable=not (opts.progress and progress(sys.stderr)), dynamic_ncols=True, leave=True)


def _record(state: State, train: float, val: float, lr: float, seconds: float) -> None:
    h = state.history
    h["train"].append(float(train))
    h["val"].append(float(val) if val == val else None)
    h["lr"].append(float(lr))
    h["seconds"].append(float(seconds))
    state.epoch += 1


def _postfix(bar, state: State) -> None:
    h = state.history
    val = h["val"][-1]
    bar.set_postfix(loss=f"{h['train'][-1]:.3e}", val="-" if val is None else f"{val:.3e}", refresh=False)
    bar.update(1)


def _last_epoch(opts: TrainOptions) -> int:
    return opts.epochs if opts.stop_after is None else min(opts.epochs, opts.stop_after)


# ---------------------------------------------------------------- Levenberg–Marquardt
def _stacked_residuals(loss: ChunkLoss, theta, chunks: Chunks, batch: int):
    rs, Js = [], []
    for start in range(0, len(chunks), batch):
        r, J = loss.residuals(theta, chunks.take(slice(start, start + batch)))
        rs.append(r)
        Js.append(J)
    return np.concatenate(rs), np.vstack(Js)


def gauss_newton(loss: ChunkLoss, train: Chunks, val: Chunks, state: State, opts: TrainOptions,
                 on_epoch: Callback | None = None) -> Result:
    """Levenberg–Marquardt epochs from ``state`` until ``opts.epochs``, convergence or ``stop_after``."""
    if loss.spec.loss != "mse":
        raise PdslError.at("BadOption", "gauss-newton minimises the mse loss", hint="use --loss mse, or --method adamw for l1")
    scale = loss.entry_scale(len(train))
    mu = float(state.extra.get("mu", 1e-3))
    bar = _bar(opts, state, "gauss-newton")
    try:
        while state.epoch < _last_epoch(opts) and not state.extra.get("converged"):
            t0 = time.perf_counter()
            theta = np.asarray(state.theta, dtype=float)
            r, J = _stacked_residuals(loss, theta, train, opts.batch)
            cost = float(r @ r)
            theta, cost_new, mu, accepted = _lm_step(loss, train, theta, r, J, cost, mu, scale)
            state.theta = theta
            state.extra["mu"] = mu
            if not accepted or cost - cost_new <= opts.tol * cost:
                state.extra["converged"] = True
            _record(state, cost_new * scale, loss.value(theta, val, opts.batch) if len(val) else float("nan"), mu,
                    time.perf_counter() - t0)
            _postfix(bar, state)
            if on_epoch:
                on_epoch(state)
    finally:
        bar.close()
    done = bool(state.extra.get("converged")) or state.epoch >= opts.epochs
    return Result(state=state, finished=done, stderr=_standard_errors(loss, train, state.theta, opts.batch))


def _lm_step(loss, train, theta, r, J, cost, mu, scale, max_tries: int = 12):
    """One accepted Levenberg–Marquardt step (damping ×1/3 on success, ×4 on failure)."""
    A = J.T @ J
    g = J.T @ r
    D = np.diag(np.maximum(np.diag(A), 1e-12 * max(np.max(np.diag(A)), 1e-300)))
    for _ in range(max_tries):
        try:
            step = -np.linalg.solve(A + mu * D, g)
        except np.linalg.LinAlgError:
            mu *= 4
            continue
        trial = theta + step
        try:
            value = loss.value(trial, train)
        except PdslError:  # e.g. an implicit stage solve failing far from the data: reject the step
            value = np.inf
        cost_new = value / scale if np.isfinite(value) else np.inf
        if cost_new < cost:
            return trial, cost_new, max(mu / 3, 1e-12), True
        mu *= 4
    return theta, cost, mu, False


def _standard_errors(loss, train, theta, batch) -> np.ndarray | None:
    r, J = _stacked_residuals(loss, theta, train, batch)
    dof = len(r) - J.shape[1]
    if dof <= 0:
        return None
    try:
        cov = np.linalg.inv(J.T @ J) * float(r @ r) / dof
    except np.linalg.LinAlgError:
        return None
    return np.sqrt(np.maximum(np.diag(cov), 0.0))


# ---------------------------------------------------------------- AdamW
def cosine_lr(epoch: int, opts: TrainOptions) -> float:
    """Cosine annealing without restarts (torch's CosineAnnealingLR, T_max = epochs), closed form."""
    return opts.lr_min + (opts.lr - opts.lr_min) * (1 + math.cos(math.pi * epoch / opts.epochs)) / 2


def warmup_factor(epoch: int, opts: TrainOptions) -> float:
    """Linear warm-up (as ``LambdaLR(lambda k: min(1, (k + 1)/warmup))`` on top of the schedule): 1/warmup of the
    schedule's lr in the first epoch, the full lr from epoch ``warmup - 1`` on; 1 without warm-up. A large first
    Adam step moves every weight by about lr at once; networks with a saturating output (a softplus Cholesky
    diagonal) can die in the first epoch without it (docs/fit.md)."""
    return 1.0 if epoch >= opts.warmup else (epoch + 1) / opts.warmup


def plateau_lr(state: State, monitor: float, opts: TrainOptions) -> float:
    """ReduceLROnPlateau (torch's defaults: mode min, relative threshold 1e-4) on ``monitor``,
    kept in ``state.extra`` so that a resumed run continues the same schedule; returns the lr of
    the next epoch."""
    pl = state.extra.setdefault("plateau", {"lr": opts.lr, "best": None, "bad": 0})
    if monitor == monitor:  # not NaN
        if pl["best"] is None or monitor < pl["best"] * (1 - 1e-4):
            pl["best"], pl["bad"] = float(monitor), 0
        else:
            pl["bad"] += 1
            if pl["bad"] > opts.patience:
                pl["lr"], pl["bad"] = max(pl["lr"] * opts.factor, opts.lr_min), 0
    return float(pl["lr"])


def _early_stop(state: State, val: float, theta: np.ndarray, opts: TrainOptions) -> bool:
    """Track the best validation loss (its epoch, θ and the training time to reach it: the time to
    saturation); True when it has not improved for ``opts.early_stop`` epochs."""
    ex = state.extra
    if val == val and (ex.get("best_val") is None or val < ex["best_val"]):
        ex["best_val"], ex["best_epoch"] = float(val), state.epoch
        ex["saturation_seconds"] = float(sum(state.history["seconds"]))
        state.arrays["best_theta"] = np.array(theta, dtype=float)
    if opts.early_stop is None or ex.get("best_epoch") is None:
        return False
    return state.epoch - ex["best_epoch"] >= opts.early_stop


def _torch_params(loss: ChunkLoss, theta: np.ndarray):
    import torch

    layout = loss.layout
    dtype, device = getattr(loss, "dtype", torch.float64), getattr(loss, "device", "cpu")
    blocks = [(0, layout.n_free, 0.0)] if layout.n_free else []
    blocks += [(layout.n_free + net.offset - layout.n_phys, net.size, None) for net in layout.networks]
    tensors = [torch.tensor(theta[a : a + n], dtype=dtype, device=device, requires_grad=True) for a, n, _ in blocks]
    return tensors, [wd for _, _, wd in blocks]


class _AdamW:
    """torch's AdamW on the fit's few flat tensors, with its state kept here.

    The update is torch's own: the functional ``torch.optim.adamw.adamw`` (single-tensor form: the arithmetic of
    ``torch.optim.AdamW`` on the CPU, betas 0.9/0.999, eps 1e-8, one weight decay per tensor). The class
    ``torch.optim.AdamW`` is not used because its constructor imports ``torch._dynamo`` (0.8 s of every
    ``pdsl fit`` process on these machines, measured; the functional form does not). The state is saved under the
    keys of torch's ``state_dict`` (``<i>.step``, ``<i>.exp_avg``, ``<i>.exp_avg_sq``), so that a checkpoint of
    either resumes in the other; a tensor that never had a gradient has no state, as in torch."""

    def __init__(self, tensors, decays, lr: float):
        from torch.optim.adamw import adamw

        self.params, self.decays, self.lr = list(tensors), list(decays), lr
        self.state: dict[int, dict] = {}
        self._update = adamw

    def zero_grad(self) -> None:
        for t in self.params:
            t.grad = None

    def step(self) -> None:
        import torch

        with torch.no_grad():
            for i, (t, wd) in enumerate(zip(self.params, self.decays)):
                if t.grad is None:
                    continue
                st = self.state.get(i)
                if st is None:  # torch's initial state (the step counter in its scalar dtype)
                    scalar = torch.float64 if torch.get_default_dtype() == torch.float64 else torch.float32
                    st = self.state[i] = {"step": torch.tensor(0.0, dtype=scalar),
                                          "exp_avg": torch.zeros_like(t, memory_format=torch.preserve_format),
                                          "exp_avg_sq": torch.zeros_like(t, memory_format=torch.preserve_format)}
                self._update([t], [t.grad], [st["exp_avg"]], [st["exp_avg_sq"]], [], [st["step"]], foreach=False,
                             capturable=False, differentiable=False, fused=None, grad_scale=None, found_inf=None,
                             amsgrad=False, beta1=0.9, beta2=0.999, lr=self.lr, weight_decay=wd, eps=1e-8,
                             maximize=False)

    def arrays(self) -> dict:
        return {f"{i}.{k}": v.detach().cpu().numpy().copy() for i, st in sorted(self.state.items())
                for k, v in st.items()}

    def load(self, arrays: dict) -> None:
        import torch

        for key, v in arrays.items():
            i, _, k = key.partition(".")
            if not (i.isdigit() and k in ("step", "exp_avg", "exp_avg_sq")):  # not optimiser state (e.g. best_theta)
                continue
            t = self.params[int(i)]
            a = torch.from_numpy(np.array(v))
            self.state.setdefault(int(i), {})[k] = a if k == "step" else a.to(dtype=t.dtype, device=t.device)


def _optimizer(tensors, decays, opts: TrainOptions) -> _AdamW:
    return _AdamW(tensors, [opts.weight_decay if wd is None else wd for wd in decays], opts.lr)


def adamw(loss: ChunkLoss, train: Chunks, val: Chunks, state: State, opts: TrainOptions,
          on_epoch: Callback | None = None) -> Result:
    """AdamW epochs over shuffled minibatches of chunks (BENCHMARKS A5)."""
    import torch

    from .torch_bridge import casadi_loss

    tensors, decays = _torch_params(loss, np.asarray(state.theta, dtype=float))
    opt = _optimizer(tensors, decays, opts)
    opt.load(state.arrays)
    bar = _bar(opts, state, "adamw")
    from .torch_loss import TorchChunkLoss

    on_torch = isinstance(loss, TorchChunkLoss)  # the torch chunk loss itself (a regularised loss is a RegularizedLoss)
    threads = torch.get_num_threads()
    if on_torch:  # one thread per fit by default: shared cores make torch's own thread pool spin (docs/fit.md)
        torch.set_num_threads(max(1, getattr(loss.spec, "threads", 1)))
    try:
        while state.epoch < _last_epoch(opts) and not state.extra.get("early_stopped"):
            t0 = time.perf_counter()
            if opts.schedule == "plateau":
                lr = float(state.extra.get("plateau", {}).get("lr", opts.lr))
            else:
                lr = cosine_lr(state.epoch, opts)
            lr *= warmup_factor(state.epoch, opts)
            opt.lr = lr
            if opts.windows is not None:
                train = opts.windows(state.epoch)
            order = np.random.default_rng([opts.seed, state.epoch]).permutation(len(train))
            total = 0.0
            for start in range(0, len(order), opts.batch):
                part = train.take(order[start : start + opts.batch])
                if on_torch:  # torch backend: autograd through the batched rollout
                    if getattr(loss.spec, "dropout", 0.0):
                        value = loss.objective(torch.cat(tensors), part, dropout_key=(opts.seed, state.epoch, start))
                    else:
                        value = loss.objective(torch.cat(tensors), part)
                else:  # CasADi backend: loss and reverse-mode gradient in one call, through the bridge
                    fn = loss.value_grad_function(len(part))
                    value = casadi_loss(fn, torch.cat(tensors), *loss.batch_args(part))
                opt.zero_grad()
                value.backward()
                opt.step()
                total += float(value.detach()) * len(part)
            state.theta = torch.cat(tensors).detach().cpu().double().numpy().copy()
            best = state.arrays.get("best_theta")
            state.arrays = opt.arrays()
            if best is not None:
                state.arrays["best_theta"] = best
            val_loss = loss.value(state.theta, val, opts.batch) if len(val) else float("nan")
            _record(state, total / len(train), val_loss, lr, time.perf_counter() - t0)
            if opts.schedule == "plateau":
                plateau_lr(state, val_loss if val_loss == val_loss else total / len(train), opts)
            if _early_stop(state, val_loss, state.theta, opts):
                state.extra["early_stopped"] = True
                state.theta = np.array(state.arrays["best_theta"])
            _postfix(bar, state)
            if on_epoch:
                on_epoch(state)
    finally:
        bar.close()
        torch.set_num_threads(threads)
    return Result(state=state, finished=state.epoch >= opts.epochs or bool(state.extra.get("early_stopped")))
