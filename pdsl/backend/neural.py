"""Neural components as CasADi MX graphs whose weights are parameters."""

from __future__ import annotations

from dataclasses import dataclass

import casadi as ca
import numpy as np

from ..resolve.model import Neural

_ACT = {
    "tanh": ca.tanh,
    "relu": lambda x: ca.fmax(x, 0),
    "softplus": lambda x: ca.log1p(ca.exp(-ca.fabs(x))) + ca.fmax(x, 0),
    "sin": ca.sin,
    "elu": lambda x: ca.if_else(x > 0, x, ca.expm1(x)),
    "gelu": lambda x: 0.5 * x * (1 + ca.erf(x / np.sqrt(2.0))),
    "sigmoid": lambda x: 1 / (1 + ca.exp(-x)),
    "identity": lambda x: x,
}


def layer_sizes(nn: Neural) -> list[int]:
    return [nn.n_in, *nn.hidden, nn.n_out]


def n_weights(nn: Neural) -> int:
    sizes = layer_sizes(nn)
    return sum(a * b + b for a, b in zip(sizes[:-1], sizes[1:]))


def init_weights(nn: Neural, seed: int) -> np.ndarray:
    """torch.nn.Linear's default: W, b ~ U(−1/√fan_in, 1/√fan_in), layer by layer."""
    rng = np.random.default_rng(seed)
    out = []
    sizes = layer_sizes(nn)
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
        bound = 1.0 / np.sqrt(fan_in)
        out.append(rng.uniform(-bound, bound, size=(fan_out, fan_in)).ravel(order="F"))
        out.append(rng.uniform(-bound, bound, size=fan_out))
    return np.concatenate(out)


@dataclass
class MLPGraph:
    """An MLP evaluated on MX inputs with weights taken from a slice of the parameter vector."""

    nn: Neural
    weights: ca.MX  # this network's slice of p

    def __post_init__(self):
        x = ca.MX.sym("x", self.nn.n_in)
        w = ca.MX.sym("w", n_weights(self.nn))
        y = self._forward(x, w)
        self._f = ca.Function(f"nn_{self.nn.name}", [x, w], [y])
        self._jac = ca.Function(f"nn_{self.nn.name}_jac", [x, w], [ca.jacobian(y, x)])
        self._cache: dict = {}

    def _forward(self, x, w):
        sizes = layer_sizes(self.nn)
        act = _ACT[self.nn.act]
        h, k = x, 0
        for li, (fan_in, fan_out) in enumerate(zip(sizes[:-1], sizes[1:])):
            W = ca.reshape(w[k : k + fan_in * fan_out], fan_out, fan_in)
            k += fan_in * fan_out
            b = w[k : k + fan_out]
            k += fan_out
            h = ca.mtimes(W, h) + b
            if li < len(sizes) - 2:
                h = act(h)
        return h

    def _key(self, inputs):
        return tuple(id(i) for i in inputs)

    def output(self, k: int, inputs: list):
        key = ("y", self._key(inputs))
        if key not in self._cache:
            self._cache[key] = (self._f(ca.vertcat(*inputs), self.weights), inputs)
        return self._cache[key][0][k]

    def gradient(self, k: int, inputs: list, i: int):
        key = ("J", self._key(inputs))
        if key not in self._cache:
            self._cache[key] = (self._jac(ca.vertcat(*inputs), self.weights), inputs)
        return self._cache[key][0][k, i]
