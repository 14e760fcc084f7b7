"""pdsl.backend.torch_mlp: the network's value and input Jacobian as one autograd Function with a hand-written
backward (issue 36.3), checked three ways: ``torch.autograd.gradcheck`` in float64 (finite differences), against
autograd through the plain operations (:func:`mlp_reference`), and — whole models — the CHNN chunk loss and its
gradient through the fused Function equal to the same loss through the plain operations to 1e-12 (float64)."""

from __future__ import annotations

import types

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from pdsl import vocab  # noqa: E402
from pdsl.backend import torch_backend  # noqa: E402
from pdsl.backend.torch_mlp import ACT, D2ACT, DACT, MLPValueJacobian, mlp_reference, mlp_torch  # noqa: E402

F64 = torch.float64


def _net(sizes, acts, seed=0, dtype=F64):
    g = torch.Generator().manual_seed(seed)
    nn = types.SimpleNamespace(layer_acts=lambda: tuple(acts))
    layers = [((torch.randn(a, b, generator=g, dtype=F64) / a**0.5).to(dtype), (0.3 * torch.randn(b, generator=g, dtype=F64)).to(dtype))
              for a, b in zip(sizes[:-1], sizes[1:])]
    return nn, layers


def _masks(B, widths, seed, dtype=F64):
    g = torch.Generator().manual_seed(seed)
    return [(torch.bernoulli(torch.full((B, w), 0.7, dtype=F64), generator=g) / 0.7).to(dtype) for w in widths]


def test_the_tables_cover_exactly_the_one_activation_list():
    want = set(vocab.ACTIVATIONS)
    assert set(ACT) == want and set(DACT) == want and set(D2ACT) == want
    assert torch_backend._ACT is ACT and torch_backend._DACT is DACT  # one table, re-exported


@pytest.mark.parametrize("act", vocab.ACTIVATIONS)
def test_first_and_second_derivatives_equal_autograd_of_the_activation(act):
    """σ' and σ'' of the tables against autograd differentiating σ itself twice (an independent route)."""
    z = torch.linspace(-3.0, 3.0, 61, dtype=F64)
    z = z[z.abs() > 1e-3].clone().requires_grad_(True)  # off the kinks of relu/elu
    a = ACT[act](z)
    (d_auto,) = torch.autograd.grad(a.sum(), z, create_graph=True)
    d2_auto = torch.autograd.grad(d_auto.sum(), z, allow_unused=True)[0] if d_auto.requires_grad else None
    d2_auto = torch.zeros_like(z) if d2_auto is None else d2_auto
    d = torch.ones_like(z) if DACT[act] is None else DACT[act](z, a)
    torch.testing.assert_close(d.detach(), d_auto.detach(), rtol=1e-13, atol=1e-14)
    d2 = torch.zeros_like(z) if D2ACT[act] is None else D2ACT[act](z, a, None if DACT[act] is None else d)
    torch.testing.assert_close(d2.detach(), d2_auto.detach(), rtol=1e-12, atol=1e-13)


CASES = [  # (sizes, hidden activation, output activation, rows, masks)
    ([4, 5, 6, 3], "tanh", "identity", None, False),
    ([4, 5, 6, 3], "tanh", "identity", (0,), False),
    ([4, 5, 6, 3], "tanh", "tanh", (2, 0), True),
    ([4, 5, 6, 3], "tanh", "identity", (1,), True),
    ([6, 7, 7, 7, 1], "tanh", "identity", None, False),  # the CHNN's shape: three hidden layers, a scalar potential
    ([3, 4, 2], "softplus", "sigmoid", None, True),
    ([3, 4, 5, 2], "sin", "sin", (1,), False),
    ([3, 4, 2], "gelu", "identity", None, True),
    ([3, 4, 2], "sigmoid", "softplus", (0, 1), False),
    ([3, 4, 2], "elu", "identity", None, False),
    ([3, 4, 2], "relu", "identity", (1,), True),
    ([3, 4, 2], "identity", "tanh", None, True),
    ([3, 2], "tanh", "identity", None, False),  # no hidden layer
    ([3, 2], "tanh", "tanh", (1,), False),
]


def _inputs(sizes, hid, out, masks, B=7, seed=1):
    acts = [hid] * (len(sizes) - 2) + [out]
    nn, layers = _net(sizes, acts, seed)
    g = torch.Generator().manual_seed(seed + 10)
    X = torch.randn(B, sizes[0], generator=g, dtype=F64)
    M = _masks(B, sizes[1:-1], seed + 20) if masks else None
    return nn, layers, X, M


@pytest.mark.parametrize("sizes,hid,out,rows,masks", CASES)
def test_gradcheck_float64(sizes, hid, out, rows, masks):
    nn, layers, X, M = _inputs(sizes, hid, out, masks)
    meta = (nn.layer_acts(), rows, None if M is None else tuple(M))
    flat = [t.clone().requires_grad_(True) for pair in layers for t in pair]
    Xr = X.clone().requires_grad_(True)
    assert torch.autograd.gradcheck(lambda X, *w: MLPValueJacobian.apply(meta, X, *w), (Xr, *flat), eps=1e-6, atol=1e-7,
                                    rtol=1e-5)


@pytest.mark.parametrize("sizes,hid,out,rows,masks", CASES)
@pytest.mark.parametrize("which", ["both", "jacobian only", "value only"])
def test_value_jacobian_and_gradients_equal_autograd_through_plain_operations(sizes, hid, out, rows, masks, which):
    nn, layers, X, M = _inputs(sizes, hid, out, masks, seed=4)
    flat = [t.clone().requires_grad_(True) for pair in layers for t in pair]
    Xr = X.clone().requires_grad_(True)
    pairs = [(flat[2 * i], flat[2 * i + 1]) for i in range(len(layers))]
    y, G = mlp_torch(nn, pairs, Xr, True, None if rows is None else list(rows), masks=M)
    y0, G0 = mlp_reference(nn, pairs, Xr, True, None if rows is None else list(rows), masks=M)
    torch.testing.assert_close(y, y0, rtol=1e-14, atol=1e-14)
    torch.testing.assert_close(G, G0, rtol=1e-13, atol=1e-14)
    g = torch.Generator().manual_seed(9)
    wy, wG = torch.randn(y.shape, generator=g, dtype=F64), torch.randn(G.shape, generator=g, dtype=F64)

    def obj(y, G):
        return {"both": (y * wy).sum() + (G * wG).sum(), "jacobian only": (G * wG).sum(), "value only": (y * wy).sum()}[which]

    got = torch.autograd.grad(obj(y, G), [Xr, *flat], allow_unused=True)
    ref = torch.autograd.grad(obj(y0, G0), [Xr, *flat], allow_unused=True)
    for a, b in zip(got, ref):
        a = torch.zeros_like(Xr) if a is None and b is None else a
        b = torch.zeros_like(a) if b is None else b
        a = torch.zeros_like(b) if a is None else a
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-13)


def test_float32_agrees_with_float64():
    sizes = [6, 32, 32, 32, 1]
    nn, layers = _net(sizes, ["tanh"] * 3 + ["identity"], seed=2)
    X = torch.randn(50, 6, generator=torch.Generator().manual_seed(3), dtype=F64)
    out = {}
    for dt in (torch.float32, F64):
        flat = [t.to(dt).clone().requires_grad_(True) for pair in layers for t in pair]
        Xr = X.to(dt).clone().requires_grad_(True)
        y, G = mlp_torch(nn, [(flat[2 * i], flat[2 * i + 1]) for i in range(len(layers))], Xr, True)
        grads = torch.autograd.grad((G * G).sum() + y.sum(), [Xr, *flat])
        assert all(t.dtype == dt for t in (y, G, *grads))
        out[dt] = [t.double() for t in (y, G, *grads)]
    for a, b in zip(out[torch.float32], out[F64]):
        torch.testing.assert_close(a, b, rtol=2e-4, atol=2e-4 * float(b.detach().abs().max()))


def test_second_derivatives_through_it_raise():
    nn, layers = _net([3, 4, 1], ["tanh", "identity"])
    flat = [t.clone().requires_grad_(True) for pair in layers for t in pair]
    X = torch.randn(5, 3, dtype=F64, requires_grad=True)
    _, G = mlp_torch(nn, [(flat[0], flat[1]), (flat[2], flat[3])], X, True)
    (gx,) = torch.autograd.grad(G.sum(), X, create_graph=True)
    with pytest.raises(RuntimeError):
        torch.autograd.grad(gx.sum(), flat[0])


# ---------------------------------------------------------------- whole models
CHNN = """\
model CHNNSmall
  space 2
  param m[1..3] = [1.0, 1.3, 0.7] {free, lower = 0}
  nn V: mlp(hidden = [16, 16, 16], act = tanh, init = orthogonal)
  body b[1..3] = point(mass = m[i])
  link ground, b[1], length = 1.1
  link b[i-1], b[i], length = 0.9 for i in 2..3
  potential V(b[1].x, b[1].y, b[2].x, b[2].y, b[3].x, b[3].y)
end
"""


def _reference_mlp(nn, layers, X, jacobian, rows=None, masks=None):
    return mlp_reference(nn, layers, X, jacobian, rows, masks)


@pytest.mark.parametrize("core", ["c", "tape"])
@pytest.mark.parametrize("dropout", [0.0, 0.2])
def test_chnn_chunk_loss_and_gradient_equal_the_plain_operations(core, dropout, monkeypatch):
    """A batch of the CHNN protocol (RK4, L1, the Cartesian projection; dropout masks too): the loss and its gradient
    with the fused network equal those with the network as plain operations (autograd's double backward) to 1e-12."""
    from pdsl.backend.torch_core import compiler
    from pdsl.fit.data import Chunks
    from pdsl.fit.loss import LossSpec
    from pdsl.fit.params import make_layout
    from pdsl.fit.torch_loss import TorchChunkLoss
    from pdsl.pipeline import compile_model

    if core == "c" and compiler() is None:
        pytest.skip("no C compiler")
    monkeypatch.setenv("PDSL_TORCH_CORE", core)
    c = compile_model("m.phm", text=CHNN, seed=3)
    num = c.numeric
    lay = make_layout(num, c.model, [])
    observed = tuple(num.report_names)
    spec = LossSpec(steps=4, dt=0.03, loss="l1", dropout=dropout)
    loss = TorchChunkLoss(num, lay, spec, observed)
    assert loss.system.core == core
    rng = np.random.default_rng(7)
    B = 12
    x0 = 0.5 * rng.standard_normal((B, num.nx))
    T = 0.03 * np.arange(spec.steps + 1)[None].repeat(B, 0)
    S0 = np.asarray(num.report.map(B)(T[:, 0][None], x0.T, num.p_default)).T
    chunks = Chunks(S0, rng.standard_normal((B, len(observed), spec.steps)), np.zeros((B, 0, spec.steps + 1)), T,
                    np.zeros((B, 2), dtype=int))
    theta = lay.theta_from_p(num.p_default) + 0.05 * rng.standard_normal(lay.n_theta)

    def value_grad():
        th = loss.tensor(theta).clone().requires_grad_(True)
        L = loss.objective(th, chunks, dropout_key=(0, 1, 2) if dropout else None)
        (g,) = torch.autograd.grad(L, th)
        return float(L.detach()), g.numpy()

    L1, g1 = value_grad()
    monkeypatch.setattr(torch_backend, "mlp_torch", _reference_mlp)
    L0, g0 = value_grad()
    assert abs(L1 - L0) <= 1e-12 * abs(L0)
    assert np.abs(g1 - g0).max() <= 1e-12 * np.abs(g0).max()
    assert np.abs(g0).max() > 0


def test_the_graph_is_freed_with_its_outputs():
    """The Function's context holds its intermediates, never its outputs (a returned tensor held by ctx is a reference
    cycle through C++ that is never freed: every batch's activations would stay in memory)."""
    import gc
    import weakref

    for out in ("identity", "tanh"):
        nn, layers = _net([3, 8, 8, 2], ["tanh", "tanh", out])
        flat = [t.clone().requires_grad_(True) for pair in layers for t in pair]
        X = torch.randn(5, 3, dtype=F64, requires_grad=True)
        y, G = mlp_torch(nn, [(flat[0], flat[1]), (flat[2], flat[3]), (flat[4], flat[5])], X, True)
        ref = weakref.ref(G.grad_fn)
        ((G * G).sum() + y.sum()).backward()
        del y, G
        gc.collect()
        assert ref() is None, out
