"""The CasADi <-> torch bridge (gradcheck in float64) and the export of networks to torch."""

import casadi as ca
import numpy as np
import pytest

torch = pytest.importorskip("torch")

from pdsl.backend.neural import MLPGraph, init_weights  # noqa: E402
from pdsl.fit.data import load_dataset, make_chunks  # noqa: E402
from pdsl.fit.loss import ChunkLoss, LossSpec  # noqa: E402
from pdsl.fit.params import make_layout  # noqa: E402
from pdsl.fit.torch_bridge import CasadiFunction, casadi_loss, to_sequential  # noqa: E402
from pdsl.pipeline import compile_model, load_models  # noqa: E402


def test_gradcheck_generic_function():
    x, A, s = ca.MX.sym("x", 3), ca.MX.sym("A", 2, 3), ca.MX.sym("s")
    f = ca.Function("f", [x, A, s], [ca.mtimes(A, ca.sin(x)) * s, ca.sumsqr(x) * ca.exp(s)])
    rng = torch.Generator().manual_seed(0)
    args = (torch.randn(3, dtype=torch.float64, generator=rng, requires_grad=True),
            torch.randn(2, 3, dtype=torch.float64, generator=rng, requires_grad=True),
            torch.tensor(0.7, dtype=torch.float64, requires_grad=True))
    assert torch.autograd.gradcheck(lambda *a: CasadiFunction.apply(f, *a), args)
    y, z = CasadiFunction.apply(f, *args)
    assert y.shape == (2,) and z.shape == ()


@pytest.fixture(scope="module")
def nn_loss(nn_model, nn_data):
    c = compile_model(nn_model)
    lay = make_layout(c.numeric, c.model, [])
    ds = load_dataset(str(nn_data), c.numeric, min_samples=5)
    return lay, ChunkLoss(c.numeric, lay, LossSpec(steps=4, dt=ds.dt, loss="mse"), ds.observed), make_chunks(ds, 4).take(slice(0, 3))


def test_gradcheck_chunk_loss_through_the_rollout(nn_loss):
    """dL/dθ (mass in log space and every network weight) through 4 RK4 steps of the constrained dynamics."""
    lay, cl, chunks = nn_loss
    assert lay.n_theta == 1 + 25  # m, then V: 2 -> 6 -> 1
    fn = cl.value_grad_function(len(chunks))
    data = cl.batch_args(chunks)
    theta = torch.tensor(lay.theta_from_p(lay.p_base), dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda th: casadi_loss(fn, th, *data), (theta,), eps=1e-6, atol=1e-8, rtol=1e-6)
    # the generic bridge on the value-only batch function agrees
    value = cl._mapped("value", len(chunks))
    wrapped = lambda th: CasadiFunction.apply(value, th, *[torch.from_numpy(np.asarray(d, dtype=float)) for d in data]).sum()  # noqa: E731
    assert torch.autograd.gradcheck(wrapped, (theta,), eps=1e-6, atol=1e-8, rtol=1e-6)


@pytest.mark.parametrize("act", ["tanh", "relu", "softplus", "sin", "elu", "gelu", "sigmoid", "identity"])
def test_exported_sequential_matches_casadi(act):
    text = f"model N\n  nn V: mlp(hidden = [7, 5], act = {act}, out = 2)\n  var x\n  der(x) = V(x, 2*x, 3)[1]\nend\n"
    nn = load_models("n.phm", text=text)[0].neural[0]
    w = init_weights(nn, 4)
    graph = MLPGraph(nn, ca.MX.sym("w", w.size))
    seq = to_sequential(nn, w)
    assert isinstance(seq, torch.nn.Sequential)
    X = np.random.default_rng(0).standard_normal((20, 3))
    ref = np.column_stack([np.asarray(graph._f(x, w)).ravel() for x in X]).T
    out = seq(torch.from_numpy(X)).detach().numpy()
    np.testing.assert_allclose(out, ref, rtol=1e-13, atol=1e-14)
