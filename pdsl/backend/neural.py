"""Neural components as CasADi graphs whose weights are parameters.

An MLP ``y = W_L s(... s(W_1 x + b_1) ...) + b_L`` is written straight into the caller's graph
(MX or SX, dense ``mtimes``), together with its input Jacobian by explicit backpropagation,

    dy/dx = W_L D_{L-1} W_{L-1} ... D_1 W_1,   D_l = diag(s'(z_l)),  z_l = W_l h_{l-1} + b_l,

evaluated from the output side (``W_l^T g`` as ``(g^T W_l)^T``, so no transposed weight matrix
is formed). Both share one forward pass. Derivatives of the model (e.g. reverse mode through a
rollout of a Hamiltonian with ``dV/dq`` in it) then differentiate this flat graph: no nested
CasADi Jacobian Function, whose derivative would re-run its own forward pass.
"""

from __future__ import annotations

from dataclasses import dataclass

import casadi as ca
import numpy as np

from ..resolve.model import Neural

_SQRT2 = np.sqrt(2.0)
_INV_SQRT_2PI = 1.0 / np.sqrt(2.0 * np.pi)

_ACT = {
    "tanh": ca.tanh,
    "relu": lambda x: ca.fmax(x, 0),
    "softplus": lambda x: ca.log1p(ca.exp(-ca.fabs(x))) + ca.fmax(x, 0),
    "sin": ca.sin,
    "elu": lambda x: ca.if_else(x > 0, x, ca.expm1(x)),
    "gelu": lambda x: 0.5 * x * (1 + ca.erf(x / _SQRT2)),
    "sigmoid": lambda x: 1 / (1 + ca.exp(-x)),
    "identity": lambda x: x,
}

# s'(z) given z and h = s(z) (reused where it is cheaper: tanh, sigmoid)
_DACT = {
    "tanh": lambda z, h: 1 - h * h,
    "relu": lambda z, h: z > 0,
    "softplus": lambda z, h: 1 / (1 + ca.exp(-z)),
    "sin": lambda z, h: ca.cos(z),
    "elu": lambda z, h: ca.if_else(z > 0, 1, ca.exp(z)),
    "gelu": lambda z, h: 0.5 * (1 + ca.erf(z / _SQRT2)) + z * _INV_SQRT_2PI * ca.exp(-0.5 * z * z),
    "sigmoid": lambda z, h: h * (1 - h),
    "identity": None,  # D_l = I
}


def layer_sizes(nn: Neural) -> list[int]:
    return [nn.n_in, *nn.hidden, nn.n_out]


def n_weights(nn: Neural) -> int:
    sizes = layer_sizes(nn)
    return sum(a * b + b for a, b in zip(sizes[:-1], sizes[1:]))


def orthogonal(rng: np.random.Generator, rows: int, cols: int) -> np.ndarray:
    """A (rows x cols) matrix with orthonormal rows (rows <= cols) or columns, drawn as
    ``torch.nn.init.orthogonal_`` draws it (gain 1): Q of the QR factorisation of a standard normal
    matrix, its columns' signs fixed by diag(R) so the draw is uniform (Haar) over such matrices."""
    A = rng.standard_normal((max(rows, cols), min(rows, cols)))
    Q, R = np.linalg.qr(A)
    Q = Q * np.sign(np.where(np.diag(R) == 0, 1.0, np.diag(R)))
    return Q if rows >= cols else Q.T


def init_weights(nn: Neural, seed: int) -> np.ndarray:
    """The network's initial weights in pdsl's layout (per layer W column-major, fan_out x fan_in, then b).
    Biases ~ U(−1/√fan_in, 1/√fan_in) (torch.nn.Linear's default); W by ``nn.init``: "uniform" is torch's
    default U(−1/√fan_in, 1/√fan_in), "orthogonal" is :func:`orthogonal` (the CHNN authors' choice)."""
    rng = np.random.default_rng(seed)
    out = []
    sizes = layer_sizes(nn)
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
        bound = 1.0 / np.sqrt(fan_in)
        if nn.init == "orthogonal":
            W = orthogonal(rng, fan_out, fan_in)
        elif nn.init == "uniform":
            W = rng.uniform(-bound, bound, size=(fan_out, fan_in))
        else:
            raise ValueError(f"unknown weight initialisation {nn.init!r}")
        out.append(W.ravel(order="F"))
        out.append(rng.uniform(-bound, bound, size=fan_out))
    return np.concatenate(out)


def unpack_layers(nn: Neural, w) -> list:
    """``[(W_l, b_l)]`` from the flat weight vector: per layer W (fan_out x fan_in, column-major), then b."""
    layers, k = [], 0
    for fan_in, fan_out in zip(layer_sizes(nn)[:-1], layer_sizes(nn)[1:]):
        W = ca.reshape(w[k : k + fan_in * fan_out], fan_out, fan_in)
        k += fan_in * fan_out
        layers.append((W, w[k : k + fan_out]))
        k += fan_out
    return layers


def mlp_forward_backward(nn: Neural, x, w):
    """``(y, J)``: the MLP output (n_out) at x and its Jacobian dy/dx (n_out x n_in), one graph. Each layer has its
    activation (``Neural.layer_acts``: the hidden ones, then the output layer's, "identity" when linear)."""
    names = nn.layer_acts()
    layers = unpack_layers(nn, w)
    h, slopes = x, []
    for (W, b), name in zip(layers, names):
        z = ca.mtimes(W, h) + b
        h = _ACT[name](z)
        slopes.append(None if _DACT[name] is None else _DACT[name](z, h))
    y = h
    # G^T = dy/dh_l, from the output side: G^T <- (G^T D_l) W_l, one row per output
    s_out = slopes[-1]
    W_out = layers[-1][0]
    Gt = W_out if s_out is None else W_out * ca.repmat(s_out, 1, W_out.size2())
    for (W, _), s in zip(reversed(layers[:-1]), reversed(slopes[:-1])):
        if s is not None:
            Gt = Gt * (s.T if Gt.size1() == 1 else ca.repmat(s.T, Gt.size1(), 1))
        Gt = ca.mtimes(Gt, W)
    return y, Gt


@dataclass
class MLPGraph:
    """An MLP evaluated on MX (or SX) inputs with weights taken from a slice of the parameter vector.

    ``output`` and ``gradient`` inline the network into the caller's graph, one forward (and
    backward) pass per distinct input list; ``_f`` and ``_jac`` are the same formulas as
    Functions of ``(x, w)``.
    """

    nn: Neural
    weights: ca.MX  # this network's slice of p

    def __post_init__(self):
        x = ca.MX.sym("x", self.nn.n_in)
        w = ca.MX.sym("w", n_weights(self.nn))
        y, J = mlp_forward_backward(self.nn, x, w)
        self._f = ca.Function(f"nn_{self.nn.name}", [x, w], [y])
        self._jac = ca.Function(f"nn_{self.nn.name}_jac", [x, w], [J])
        self._cache: dict = {}

    def _forward(self, x, w):
        return mlp_forward_backward(self.nn, x, w)[0]

    def _key(self, inputs):
        return tuple(id(i) for i in inputs)

    def _pass(self, inputs):
        key = self._key(inputs)
        if key not in self._cache:  # inputs kept alive with the entry, so that their ids stay theirs
            self._cache[key] = (mlp_forward_backward(self.nn, ca.vertcat(*inputs), self.weights), inputs)
        return self._cache[key][0]

    def output(self, k: int, inputs: list):
        return self._pass(inputs)[0][k]

    def gradient(self, k: int, inputs: list, i: int):
        return self._pass(inputs)[1][k, i]
