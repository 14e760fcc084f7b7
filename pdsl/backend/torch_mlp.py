"""An MLP's value and input Jacobian over a batch, with a hand-written backward (torch backend).

A model that differentiates a network (∂V/∂q in Hamilton's equations, ∇V in a CHNN) evaluates,
per right-hand side and batch X (B, n_in),

    y = MLP(X)                              z_j = h_j Wt_j + b_j,  h_{j+1} = σ_j(z_j) · m_j
    G = dy_R/dX (B, R, n_in)                g_{L-1} = u ⊗ W_R,  δ_j = g_{j+1} · s_j,  g_j = δ_j Wt_jᵀ,  G = g_0

(R: the output rows whose gradient is used, s_j = σ_j'(z_j) · m_j the slopes, m_j the dropout
masks, u = σ'_{L-1}(z_{L-1})[:, R] for a non-linear output layer). Training differentiates the
loss through G, i.e. through this backpropagation: left to autograd, each of its operations
records a node, and the backward pass differentiates each of them in turn. Here the
whole network is ONE ``torch.autograd.Function`` whose backward is written out: given the
cotangents ȳ, Ḡ it runs

* the Jacobian pass in reverse (from the input side): δ̄_j = ḡ_j Wt_j, ∂Wt_j += ḡ_jᵀ δ_j,
  ḡ_{j+1} = δ̄_j · s_j, s̄_j = Σ_R δ̄_j · g_{j+1} (and ∂W_R, ū at the output layer);
* ordinary backpropagation of ȳ with the slope cotangents folded in (σ'' from :data:`D2ACT`):
  z̄_j = h̄_{j+1} · s_j + s̄_j · σ_j''(z_j) · m_j,  ∂Wt_j += h_jᵀ z̄_j,  ∂b_j = Σ_B z̄_j,  h̄_j = z̄_j Wt_jᵀ,

with the same dense products autograd would run (two per layer forward, four back), fewer elementwise
passes (an unmasked tanh layer never forms its slopes: ``tanh_backward`` multiplies by 1 − a², and its
σ'' term is two passes), one autograd node per network call instead of one per operation, and the output
layer's products skipped when ȳ is zero (a rhs that uses only the gradient). Measured on the CHNN batch
of ``benchmarks/bench_fit_speed_dtype.py`` (H = 256, float64): the gradient equal to the plain
operations' to 5e-16 relative, the batch's CPU time ~20 % below theirs (development runs). The backward is first-order only
(``once_differentiable``: a second derivative through it raises). Any network of the one
activation list (:data:`pdsl.vocab.ACTIVATIONS`: the tables :data:`ACT`, :data:`DACT`,
:data:`D2ACT` here cover exactly it; ``tests/backend/test_torch_mlp.py``), any widths, output
rows, dropout masks, dtype and device. Checked by ``torch.autograd.gradcheck`` in float64 and
against autograd through the plain operations (:func:`mlp_reference`).
"""

from __future__ import annotations

import math
from typing import Callable

import torch
from torch.autograd.function import once_differentiable

__all__ = ["ACT", "DACT", "D2ACT", "mlp_torch", "mlp_reference", "MLPValueJacobian"]

_SQRT2 = math.sqrt(2.0)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


def _softplus(z):  # the CasADi backend's formula (torch's softplus switches to z above 20)
    return torch.log1p(torch.exp(-z.abs())) + torch.clamp(z, min=0)


def _phi(z):  # the standard normal density
    return _INV_SQRT_2PI * torch.exp(-0.5 * z * z)


# σ(z)
ACT: dict[str, Callable] = {
    "tanh": torch.tanh,
    "relu": torch.relu,
    "softplus": _softplus,
    "sin": torch.sin,
    "elu": lambda z: torch.where(z > 0, z, torch.expm1(z)),
    "gelu": lambda z: 0.5 * z * (1 + torch.erf(z / _SQRT2)),
    "sigmoid": torch.sigmoid,
    "identity": lambda z: z,
}
# σ'(z) from z and a = σ(z); None: σ' = 1
DACT: dict[str, Callable | None] = {
    "tanh": lambda z, a: 1 - a * a,
    "relu": lambda z, a: (z > 0).to(z.dtype),
    "softplus": lambda z, a: torch.sigmoid(z),
    "sin": lambda z, a: torch.cos(z),
    "elu": lambda z, a: torch.where(z > 0, torch.ones_like(z), torch.exp(z)),
    "gelu": lambda z, a: 0.5 * (1 + torch.erf(z / _SQRT2)) + z * _phi(z),
    "sigmoid": lambda z, a: a * (1 - a),
    "identity": None,
}
# σ''(z) from z, a = σ(z) and d = σ'(z) (d is None where DACT is); None: σ'' = 0 (almost everywhere)
D2ACT: dict[str, Callable | None] = {
    "tanh": lambda z, a, d: -2.0 * a * d,
    "relu": None,
    "softplus": lambda z, a, d: d * (1 - d),
    "sin": lambda z, a, d: -a,
    "elu": lambda z, a, d: torch.where(z > 0, torch.zeros_like(z), d),
    "gelu": lambda z, a, d: _phi(z) * (2 - z * z),
    "sigmoid": lambda z, a, d: d * (1 - 2 * a),
    "identity": None,
}


def mlp_reference(nn, layers, X: torch.Tensor, jacobian: bool, rows: list[int] | None = None, masks=None):
    """:func:`mlp_torch` as plain torch operations (autograd differentiates them; the reference of the tests)."""
    names = nn.layer_acts()
    h, slopes = X, []
    n_hidden = len(layers) - 1
    for k, ((Wt, b), name) in enumerate(zip(layers, names)):
        z = torch.addmm(b, h, Wt)
        h = ACT[name](z)
        s = None if DACT[name] is None or not jacobian else DACT[name](z, h)
        if masks is not None and k < n_hidden:
            h = h * masks[k]
            if jacobian:
                s = masks[k] if s is None else s * masks[k]
        slopes.append(s)
    y = h
    if not jacobian:
        return y, None
    Wt_out = layers[-1][0]
    W_rows = Wt_out.t() if rows is None else Wt_out.t()[rows]
    n_out, B = W_rows.shape[0], X.shape[0]
    G = W_rows.unsqueeze(0).expand(B, n_out, Wt_out.shape[0])
    if slopes[-1] is not None:  # a non-linear output layer: D_out from the left
        G = G * (slopes[-1] if rows is None else slopes[-1][:, rows]).unsqueeze(2)
    for (Wt, _), s in zip(reversed(layers[:-1]), reversed(slopes[:-1])):
        if s is not None:
            G = G * s.unsqueeze(1)
        G = (G.reshape(B * n_out, -1) @ Wt.t()).reshape(B, n_out, -1)
    return y, G


def mlp_torch(nn, layers, X: torch.Tensor, jacobian: bool, rows: list[int] | None = None, masks=None):
    """``(y, J)`` for a batch X (B, n_in): y (B, n_out) and, if asked, J = dy/dX (B, n_out, n_in) —
    or only the Jacobian rows of the outputs ``rows`` (B, len(rows), n_in). ``masks``: one (B, width)
    dropout mask per hidden layer (0 or 1/(1 − rate); training only), applied after its activation.
    With the Jacobian: one :class:`MLPValueJacobian` (hand-written backward); without: plain operations."""
    if not jacobian:
        return mlp_reference(nn, layers, X, False, masks=masks)
    flat = [t for pair in layers for t in pair]
    meta = (tuple(nn.layer_acts()), None if rows is None else tuple(rows), None if masks is None else tuple(masks))
    return MLPValueJacobian.apply(meta, X, *flat)


_tanh_backward = torch.ops.aten.tanh_backward  # x · (1 − a²) in one pass


class _Slope:
    """Multiplication by the slopes s_j = σ_j'(z_j) · m_j of one layer: for an unmasked tanh layer as
    ``tanh_backward(x, a)`` (x · (1 − a²), one pass, s never formed), else by the tensor s (None: s = 1)."""

    __slots__ = ("a", "s")

    def __init__(self, a, s):
        self.a, self.s = a, s

    def __call__(self, x, inplace: bool = False):
        if self.a is not None:
            return _tanh_backward(x, self.a if x.dim() == 2 else self.a.unsqueeze(1))
        if self.s is None:
            return x
        s = self.s if x.dim() == 2 else self.s.unsqueeze(1)
        return x.mul_(s) if inplace else x * s


def _mm(a: torch.Tensor, W: torch.Tensor) -> torch.Tensor:
    """(B, n) or (B, R, n) @ (n, m) as one matrix–matrix product."""
    if a.dim() == 2:
        return torch.mm(a, W)
    B, R, n = a.shape
    return torch.mm(a.reshape(B * R, n), W).reshape(B, R, W.shape[1])


def _times_Wt_t(zbar: torch.Tensor, Wt: torch.Tensor) -> torch.Tensor:
    """z̄ Wtᵀ; for a layer of one unit (an outer product) as a broadcast product, not a K = 1 matrix product."""
    return zbar * Wt.t() if Wt.shape[1] == 1 else torch.mm(zbar, Wt.t())


def _flat(a: torch.Tensor) -> torch.Tensor:
    return a if a.dim() == 2 else a.reshape(-1, a.shape[-1])


class MLPValueJacobian(torch.autograd.Function):
    """``y, G = MLPValueJacobian.apply((acts, rows, masks), X, Wt_0, b_0, ..., Wt_{L-1}, b_{L-1})`` (module
    docstring). ``Wt_j`` (fan_in, fan_out), ``b_j`` (fan_out,), ``acts`` one name per layer, ``rows`` None (all)
    or a tuple of output indices, ``masks`` None or one (B, width) tensor per hidden layer (constants).
    With one output row the Jacobian pass runs on (B, width) matrices, else on (B, R, width)."""

    @staticmethod
    def forward(ctx, meta, X, *flat):
        acts, rows, masks = meta
        L = len(flat) // 2
        Wts, bs = flat[0::2], flat[1::2]
        hs, zs, As, Ds, Sl = [X], [], [], [], []  # h_j (inputs of layer j), z_j, σ(z_j), σ'(z_j), slopes
        h = X
        for j in range(L):
            z = torch.addmm(bs[j], h, Wts[j])
            m = masks[j] if masks is not None and j < L - 1 else None
            if acts[j] == "tanh" and m is None:  # a = tanh(z) in place: z is not needed again (σ'' from a)
                a = z.tanh_()
                z, d, slope = None, None, _Slope(a, None)
            else:
                a = ACT[acts[j]](z)
                d = None if DACT[acts[j]] is None else DACT[acts[j]](z, a)
                slope = _Slope(None, d if m is None else (m if d is None else d * m))
            h = a if m is None else a * m
            zs.append(z), As.append(a), Ds.append(d), Sl.append(slope)
            if j < L - 1:
                hs.append(h)
        y = h
        B = X.shape[0]
        W_R = Wts[-1].t() if rows is None else Wts[-1].t()[list(rows)]  # (R, n_{L-1})
        R = W_R.shape[0]
        out = Sl[-1]
        if out.a is None and out.s is None:  # a linear output layer: u = 1
            u = None
        else:  # u = σ'(z_{L-1})[:, R]
            u = out(torch.ones_like(y)) if out.a is not None else out.s
            u = u if rows is None else u[:, list(rows)]
        if R == 1:
            g = W_R if u is None else u * W_R  # (1 or B, n_{L-1})
        else:
            g = W_R.unsqueeze(0).expand(B, R, W_R.shape[1]) if u is None else u.unsqueeze(2) * W_R.unsqueeze(0)
        gs, deltas = [None] * L, [None] * L  # g_j = dy_R/dh_j for j = 0..L-1; δ_j = dy_R/dz_j for j < L-1
        gs[L - 1] = g
        for j in range(L - 2, -1, -1):
            delta = Sl[j](g) if g.shape[0] == B else Sl[j](g.expand(B, -1))
            deltas[j] = delta
            g = _mm(delta, Wts[j].t())
            gs[j] = g
        if g.shape[0] != B or L == 1:  # no hidden layer: G is u ⊗ W_R, W_R a view of an input
            g = g.expand(B, -1).clone() if g.dim() == 2 else g.clone()
        gs[0] = None  # the output G: not kept here (a tensor returned by forward and held by ctx is a cycle)
        ctx.meta, ctx.L = meta, L
        ctx.set_materialize_grads(False)
        ctx.lists = (hs, zs, As, Ds, Sl, gs, deltas, u, W_R)
        ctx.save_for_backward(X, *flat)
        return y.clone(), (g.unsqueeze(1) if R == 1 else g)  # y: a copy, As[-1] (and zs[-1]) are kept

    @staticmethod
    @once_differentiable
    def backward(ctx, ybar, Gbar):
        acts, rows, masks = ctx.meta
        L = ctx.L
        X, *flat = ctx.saved_tensors
        if ybar is None and Gbar is None:
            return (None,) * (2 + len(flat))
        Wts = flat[0::2]
        hs, zs, As, Ds, Sl, gs, deltas, u, W_R = ctx.lists
        B, R = X.shape[0], W_R.shape[0]
        dWt = [None] * L
        sbar = [None] * L  # cotangents of the slopes s_j (B, width_j) from the Jacobian pass
        ubar = None
        if Gbar is not None:
            gbar = Gbar[:, 0] if R == 1 else Gbar
            for j in range(L - 1):  # g_j = δ_j Wt_jᵀ, δ_j = g_{j+1} · s_j
                dbar = _mm(gbar, Wts[j])
                dWt[j] = torch.mm(_flat(gbar).t(), _flat(deltas[j]))
                slope = Sl[j]
                if slope.a is None and slope.s is None:
                    gbar = dbar
                else:
                    g1 = gs[j + 1]
                    sbar[j] = dbar * g1 if R == 1 else (dbar * g1).sum(1)
                    gbar = slope(dbar, inplace=True)
            # g_{L-1} = u ⊗ W_R
            if R == 1:
                WRbar = (gbar if u is None else gbar * u).sum(0, keepdim=True)  # (1, n_{L-1})
                if u is not None:
                    ubar = (gbar * W_R).sum(1, keepdim=True)  # (B, 1)
            else:
                WRbar = (gbar if u is None else gbar * u.unsqueeze(2)).sum(0)  # (R, n_{L-1})
                if u is not None:
                    ubar = (gbar * W_R.unsqueeze(0)).sum(2)  # (B, R)
            if rows is None:
                dWt[L - 1] = WRbar.t().contiguous()
            else:
                top = torch.zeros_like(Wts[-1])
                top.index_add_(1, torch.tensor(rows, device=top.device), WRbar.t())
                dWt[L - 1] = top
        # ordinary backpropagation of ȳ, the slope cotangents folded in; z̄ None: zero (a rhs that uses only the
        # Jacobian hands back ȳ = 0: the output layer's products are skipped, not run on zeros)
        out = Sl[-1]
        if ybar is not None and ybar.device.type == "cpu" and not bool(ybar.any()):
            ybar = None
        zbar = None if ybar is None else out(ybar)
        if ubar is not None:  # u = s_{L-1}[:, R], ds/dz = σ''
            d2 = _d2(acts[-1], zs[-1], As[-1], Ds[-1] if Ds[-1] is not None else 1 - As[-1] * As[-1])
            if d2 is not None:
                if zbar is None:
                    zbar = torch.zeros(B, Wts[-1].shape[1], dtype=X.dtype, device=X.device)
                if rows is None:
                    zbar = zbar + ubar * d2
                else:
                    idx = list(rows)
                    zbar = zbar.index_add(1, torch.tensor(idx, device=zbar.device), ubar * d2[:, idx])
        grads = [None] * (2 * L)
        Xbar = None
        for j in range(L - 1, -1, -1):
            Wt = Wts[j]
            if zbar is not None:
                dWt[j] = torch.mm(hs[j].t(), zbar) if dWt[j] is None else dWt[j].addmm_(hs[j].t(), zbar)
                grads[2 * j + 1] = zbar.sum(0)
            grads[2 * j] = dWt[j]
            if j == 0:
                if ctx.needs_input_grad[1] and zbar is not None:
                    Xbar = _times_Wt_t(zbar, Wt)
                break
            hbar = None if zbar is None else _times_Wt_t(zbar, Wt)
            k = j - 1
            slope = Sl[k]
            if sbar[k] is not None and slope.a is not None:  # tanh: σ'' = −2 a σ', z̄ = (h̄ − 2 a · s̄) · s
                t = torch.mul(As[k], sbar[k]).mul_(-2.0) if hbar is None else hbar.addcmul_(As[k], sbar[k], value=-2.0)
                zbar = slope(t)
                continue
            zbar = None if hbar is None else slope(hbar, inplace=True)
            if sbar[k] is not None:
                d2 = _d2(acts[k], zs[k], As[k], Ds[k])
                if d2 is not None:
                    term = d2 if masks is None else d2 * masks[k]
                    zbar = sbar[k] * term if zbar is None else zbar.addcmul_(sbar[k], term)
        return (None, Xbar, *grads)


def _d2(name: str, z, a, d):
    f = D2ACT[name]
    return None if f is None else f(z, a, d)
