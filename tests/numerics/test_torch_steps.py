"""Implicit RK steps on torch (pdsl.numerics.torch_steps): solvers, discrete adjoint vs unrolled
backprop vs finite differences, memory of the adjoint, option checks. Small and fast."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from pdsl.numerics import tableau  # noqa: E402
from pdsl.numerics.torch_steps import StepOptions, rk_step, solve_stages  # noqa: E402


def _f(t, y, bound):
    """A non-separable, parameterised Hamiltonian flow (H = p²/2 + a q⁴/4 − q²/2 + c p q) plus a
    time-dependent forcing, on a batch."""
    a, c, w = bound[0], bound[1], bound[2]
    q, p = y[:, 0], y[:, 1]
    return torch.stack([p + c * q, q - a * q**3 - c * p + w * torch.sin(t if torch.is_tensor(t) else torch.tensor(t, dtype=y.dtype))], 1)


def _bind(p):
    return p.unbind(0)


def _loss(p, x0, method, opts, n=5, h=0.1):
    x, total = x0, 0.0
    bound = _bind(p)
    for k in range(n):
        x = rk_step(_f, method, h, k * h, x, p=p, bind=_bind, bound=bound, opts=opts)
        total = total + ((x - 0.3 * k) ** 2).sum() * (k + 1)
    return total


@pytest.mark.parametrize("method", ["midpoint", "gauss2"])
def test_adjoint_equals_unrolled_and_finite_differences(method):
    rng = np.random.default_rng(0)
    x0 = torch.tensor(rng.uniform(-1, 1, (4, 2)))
    p0 = torch.tensor([1.0, 0.4, 0.3], dtype=torch.float64)
    grads = {}
    for name, opts in {"adjoint": StepOptions("fpi", 60, 1e-15, "adjoint"),
                       "unrolled": StepOptions("fpi", 60, 1e-15, "unrolled"),
                       "newton": StepOptions("newton", 20, 1e-14, "adjoint")}.items():
        p = p0.clone().requires_grad_(True)
        x = x0.clone().requires_grad_(True)
        L = _loss(p, x, method, opts)
        gp, gx = torch.autograd.grad(L, [p, x])
        grads[name] = (float(L.detach()), gp.numpy(), gx.numpy())
    for name in ("unrolled", "newton"):
        assert grads[name][0] == pytest.approx(grads["adjoint"][0], rel=1e-13)
        np.testing.assert_allclose(grads[name][1], grads["adjoint"][1], rtol=1e-10)
        np.testing.assert_allclose(grads[name][2], grads["adjoint"][2], rtol=1e-10)
    # central differences on the converged solve
    opts = StepOptions("newton", 20, 1e-15, "adjoint")
    eps = 1e-6
    with torch.no_grad():
        fd = [(_loss(p0 + eps * e, x0, method, opts) - _loss(p0 - eps * e, x0, method, opts)) / (2 * eps)
              for e in torch.eye(3, dtype=torch.float64)]
    np.testing.assert_allclose(grads["adjoint"][1], [float(v) for v in fd], rtol=1e-7)


def test_fpi_count_is_the_papers_predictor_corrector():
    """midpoint FPI with n sweeps: y^(k) = y_n + h f((y_n + y^(k-1))/2) from the RK2 predictor (Alg. 2)."""
    x = torch.tensor([[0.7, -0.2]], dtype=torch.float64)
    bound = tuple(torch.tensor([1.0, 0.5, 0.0], dtype=torch.float64))
    h = 0.3
    f = lambda y: _f(0.0, y, bound)  # noqa: E731
    y = x + h * f(x + h / 2 * f(x))  # RK2 predictor
    for _ in range(3):
        y = x + h * f((x + y) / 2)
    got = rk_step(_f, "midpoint", h, 0.0, x, bound=bound, opts=StepOptions("fpi", 3, None, "unrolled"))
    torch.testing.assert_close(got, y, rtol=1e-15, atol=1e-15)
    # more sweeps converge to the Newton solution of the implicit equation
    newton = solve_stages(_f, tableau("midpoint"), h, 0.0, x, bound, StepOptions("newton"))[0]
    fpi3 = solve_stages(_f, tableau("midpoint"), h, 0.0, x, bound, StepOptions("fpi", 3))[0]
    fpi30 = solve_stages(_f, tableau("midpoint"), h, 0.0, x, bound, StepOptions("fpi", 30))[0]
    assert float((fpi30 - newton).abs().max()) < 1e-13 < float((fpi3 - newton).abs().max())
    ynew = x + h * newton
    torch.testing.assert_close(ynew, x + h * f((x + ynew) / 2), rtol=1e-13, atol=1e-13)


def test_tolerance_stops_the_sweeps_early():
    x = torch.tensor([[0.7, -0.2]], dtype=torch.float64)
    bound = tuple(torch.tensor([1.0, 0.5, 0.0], dtype=torch.float64))
    calls = []

    def f(t, y, b):
        calls.append(1)
        return _f(t, y, b)

    solve_stages(f, tableau("midpoint"), 0.01, 0.0, x, bound, StepOptions("fpi", 50, 1e-12))
    assert 2 + 2 <= len(calls) < 2 + 50  # predictor (2 evaluations) + a few sweeps, not 50


def _saved_bytes(opts, n_steps):
    p = torch.tensor([1.0, 0.4, 0.3], dtype=torch.float64, requires_grad=True)
    x0 = torch.tensor(np.random.default_rng(1).uniform(-1, 1, (64, 2)))
    total = [0]

    def pack(t):
        total[0] += t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        _loss(p, x0, "midpoint", opts, n=n_steps).backward()
    return total[0]


def test_adjoint_memory_is_flat_in_the_sweeps():
    """The adjoint keeps the states and stages per step, whatever the sweep count; unrolled backprop
    keeps every sweep's intermediates."""
    adj6, adj30 = _saved_bytes(StepOptions("fpi", 6), 4), _saved_bytes(StepOptions("fpi", 30), 4)
    unr6, unr30 = (_saved_bytes(StepOptions("fpi", 6, gradient="unrolled"), 4),
                   _saved_bytes(StepOptions("fpi", 30, gradient="unrolled"), 4))
    assert adj6 == adj30
    assert unr30 > 3 * unr6 and unr6 > adj6
    # and linear (not worse) in the number of steps
    assert _saved_bytes(StepOptions("fpi", 6), 8) <= 2 * adj6 + 1024


@pytest.mark.parametrize("kw", [dict(solver="bogus"), dict(gradient="bogus"), dict(n_iter=-1),
                                dict(solver="newton", gradient="unrolled")])
def test_bad_step_options(kw):
    with pytest.raises(ValueError):
        StepOptions(**kw)
