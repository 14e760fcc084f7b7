"""CasADi functions as torch autograd operations, and networks exported as ``torch.nn.Sequential``.

Two bridges (both float64, both checked with ``torch.autograd.gradcheck`` in the tests):

* :class:`CasadiFunction` — any CasADi Function: ``forward`` evaluates it, ``backward`` evaluates
  its reverse-mode derivative ``fn.reverse(1)`` with the incoming output cotangents.
* :func:`casadi_loss` — a scalar loss given as ``fn(θ, data...) -> (L, dL/dθ)`` (what
  :meth:`pdsl.fit.loss.ChunkLoss.value_grad_function` builds): the reverse sweep runs once with
  the forward pass and ``backward`` scales the stored gradient. This is the training path
  (BENCHMARKS A5: the gradient is backpropagated through the solver, no adjoint ODE).

Shapes: a 1-D tensor is a CasADi column, a 2-D tensor a matrix, a 0-d tensor a 1×1; a 1×1
output comes back 0-d, a column 1-D.
"""

from __future__ import annotations

import casadi as ca
import numpy as np
import torch

from ..backend.neural import layer_sizes

__all__ = ["CasadiFunction", "casadi_loss", "to_sequential", "network_state"]


def _to_casadi(t: torch.Tensor) -> ca.DM:
    a = t.detach().cpu().numpy().astype(float)
    return ca.DM(a.reshape(-1, 1) if a.ndim <= 1 else a)


def _to_torch(v, like: ca.Sparsity | None = None) -> torch.Tensor:
    a = np.asarray(ca.DM(v).full(), dtype=np.float64)
    if like is not None and like.is_scalar():
        return torch.tensor(a.item(), dtype=torch.float64)
    if a.shape[1] == 1:
        a = a[:, 0]
    return torch.from_numpy(np.ascontiguousarray(a))


def _unbroadcast(a: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    """Sum the column blocks of an adjoint when the input was broadcast (e.g. θ passed once to a map)."""
    rows, cols = shape
    if a.shape[1] != cols and a.shape[1] % max(cols, 1) == 0:
        a = a.reshape(rows, a.shape[1] // cols, cols).sum(axis=1)
    return np.ascontiguousarray(a)


def _quiet_call(fn: ca.Function, args: list):
    """``fn.call(args)`` with what CasADi prints kept off the terminal (pdsl.quiet)."""
    from .. import quiet

    with quiet.capture():
        return fn.call(args)


class CasadiFunction(torch.autograd.Function):
    """``CasadiFunction.apply(fn, *inputs)``: outputs of ``fn``; gradients by its reverse mode."""

    @staticmethod
    def forward(ctx, fn: ca.Function, *inputs: torch.Tensor):
        args = [_to_casadi(t) for t in inputs]
        outs = _quiet_call(fn, args)
        ctx.fn, ctx.args, ctx.outs = fn, args, outs
        ctx.shapes = [t.shape for t in inputs]
        result = tuple(_to_torch(o, fn.sparsity_out(k)) for k, o in enumerate(outs))
        return result[0] if len(result) == 1 else result

    @staticmethod
    def backward(ctx, *grad_outputs):
        fn = ctx.fn
        seeds = []
        for k, g in enumerate(grad_outputs):
            sp = fn.sparsity_out(k)
            g = torch.zeros(sp.size1(), sp.size2(), dtype=torch.float64) if g is None else g
            seeds.append(ca.DM(g.detach().cpu().numpy().astype(float).reshape(sp.size1(), sp.size2())))
        adj = _quiet_call(fn.reverse(1), [*ctx.args, *ctx.outs, *seeds])
        grads = []
        for k, shape in enumerate(ctx.shapes):
            if not ctx.needs_input_grad[k + 1]:
                grads.append(None)
                continue
            grads.append(torch.from_numpy(_unbroadcast(np.asarray(adj[k].full(), dtype=np.float64), ctx.args[k].shape)).reshape(shape))
        return (None, *grads)


class _CasadiLoss(torch.autograd.Function):
    @staticmethod
    def forward(ctx, fn: ca.Function, theta: torch.Tensor, n_data: int, *data: torch.Tensor):
        L, g = _quiet_call(fn, [_to_casadi(theta), *[ca.DM(d.numpy()) for d in data]])
        ctx.grad = torch.from_numpy(np.asarray(g.full(), dtype=np.float64).ravel()).reshape(theta.shape)
        ctx.n_data = n_data
        return torch.tensor(float(L), dtype=torch.float64)

    @staticmethod
    def backward(ctx, grad_output):
        return (None, grad_output * ctx.grad, None, *([None] * ctx.n_data))


def casadi_loss(fn: ca.Function, theta: torch.Tensor, *data) -> torch.Tensor:
    """Scalar loss ``fn(θ, *data)[0]`` with gradient ``fn(θ, *data)[1]`` (data: numpy arrays, no gradient)."""
    return _CasadiLoss.apply(fn, theta, len(data), *[torch.as_tensor(np.asarray(d, dtype=np.float64)) for d in data])



# ---------------------------------------------------------------- network export
class Sine(torch.nn.Module):
    """sin activation (torch has no built-in module for it)."""

    def forward(self, x):
        return torch.sin(x)


_ACT = {
    "tanh": torch.nn.Tanh, "relu": torch.nn.ReLU, "softplus": torch.nn.Softplus, "sin": Sine,
    "elu": torch.nn.ELU, "gelu": torch.nn.GELU, "sigmoid": torch.nn.Sigmoid, "identity": torch.nn.Identity,
}


def network_state(nn, weights: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """(W, b) per layer from the flat CasADi layout of :mod:`pdsl.backend.neural` (W column-major)."""
    sizes = layer_sizes(nn)
    out, k = [], 0
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
        W = np.asarray(weights[k : k + fan_in * fan_out]).reshape(fan_out, fan_in, order="F")
        k += fan_in * fan_out
        b = np.asarray(weights[k : k + fan_out])
        k += fan_out
        out.append((W, b))
    return out


def to_sequential(nn, weights: np.ndarray) -> torch.nn.Sequential:
    """A plain ``torch.nn.Sequential`` (Linear, activation, ..., Linear) with the given weights, float64."""
    layers: list[torch.nn.Module] = []
    state = network_state(nn, weights)
    for li, (W, b) in enumerate(state):
        lin = torch.nn.Linear(W.shape[1], W.shape[0], dtype=torch.float64)
        with torch.no_grad():
            lin.weight.copy_(torch.from_numpy(np.ascontiguousarray(W)))
            lin.bias.copy_(torch.from_numpy(np.ascontiguousarray(b)))
        layers.append(lin)
        act = nn.layer_acts()[li]
        if act != "identity":  # hidden layers, and a non-linear output layer
            layers.append(_ACT[act]())
    return torch.nn.Sequential(*layers)
