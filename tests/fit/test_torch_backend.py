"""The torch backend (pdsl.backend.torch_backend, pdsl.fit.torch_loss) equals the CasADi backend.

Numerical equivalence on the same IR and the same parameter vector: right-hand sides (Cartesian
constraint projection with multipliers solved by substitution, a Lagrangian mass matrix solved
densely, Hamilton's equations through multi-output networks of sin/cos embeddings, plain neural
ODEs), shown columns and their inverse (p = M v), every activation's output and input Jacobian,
and the chunk loss with its gradient (bounded parameters, inputs, outputs, l1/mse, rk4/euler with
substeps). Small models only: this file runs in a few seconds.
"""

from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import casadi as ca  # noqa: E402

from pdsl.backend.neural import MLPGraph, init_weights  # noqa: E402
from pdsl.backend.torch_backend import TorchSystem, _layers, mlp_torch  # noqa: E402
from pdsl.fit.config import FitConfig  # noqa: E402
from pdsl.fit.data import Chunks  # noqa: E402
from pdsl.fit.loss import ChunkLoss, LossSpec  # noqa: E402
from pdsl.fit.params import make_layout  # noqa: E402
from pdsl.fit.backends import choose_backend, make_loss  # noqa: E402
from pdsl.fit.torch_loss import TorchChunkLoss  # noqa: E402
from pdsl.pipeline import compile_model, load_models  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
BENCH_MODELS = ROOT / "benchmarks" / "models"

DRIVEN = """\
model Driven "oscillator with a learned force, an input and an output"
  param k = 2.0 {free, lower = 0}, c = 0.3 {free, lower = 0, upper = 1}, s = 0.5 {free, upper = 2}, g = 0.2 {free}
  nn f: mlp(hidden = [5, 4], act = softplus, out = 2)
  input F
  var x, v
  output e = x^2/2 + s*v^2/2
  der(x) = v + g*f(x, v, F)[2]
  der(v) = -k*x - c*v + F + f(x, v, F)[1]
end
"""

CHNN_SMALL = """\
model CHNNSmall
  space 2
  param m[1..3] = [1.0, 1.3, 0.7] {free, lower = 0}
  nn V: mlp(hidden = [6, 5], act = tanh)
  body b[1..3] = point(mass = m[i])
  link ground, b[1], length = 1.1
  link b[i-1], b[i], length = 0.9 for i in 2..3
  potential V(b[1].x, b[1].y, b[2].x, b[2].y, b[3].x, b[3].y)
end
"""

# the potential's inputs are states in another order (and not all of them): the compiled core takes them from x
# by index (CHNN_SMALL: a slice), without the network-input function in C
CHNN_PERMUTED = CHNN_SMALL.replace("potential V(b[1].x, b[1].y, b[2].x, b[2].y, b[3].x, b[3].y)",
                                   "potential V(b[3].y, b[1].x, b[2].x, b[1].y)")

CASES = [
    ("chnn_small", None, CHNN_SMALL, None),  # Cartesian, multipliers by substitution, dV/dx
    ("chnn_permuted", None, CHNN_PERMUTED, None),  # network inputs: states by index
    ("hnn3", BENCH_MODELS / "hnn3.phm", None, {"H": 4}),  # Hamilton's equations, 9-output network, Subs(Derivative)
    ("node2", BENCH_MODELS / "node2.phm", None, {"H": 4}),  # plain neural ODE
    ("double_pendulum", ROOT / "models" / "double_pendulum.phm", None, None),  # Lagrangian: dense 2x2 solve
    ("pendulum3", ROOT / "models" / "pendulum3.phm", None, None),  # Cartesian, no networks
    ("driven", None, DRIVEN, None),  # inputs, outputs, bounded parameters
]


def _compile(path, text, consts, seed=3):
    return compile_model(path or "m.phm", text=text, consts=consts, seed=seed)


@pytest.fixture(params=["c", "tape"])
def core(request, monkeypatch):
    """Both ways of evaluating the symbolic part of the rhs: generated C (pdsl.backend.torch_core) and torch ops."""
    if request.param == "c":
        from pdsl.backend.torch_core import compiler

        if compiler() is None:
            pytest.skip("no C compiler")
    monkeypatch.setenv("PDSL_TORCH_CORE", request.param)
    return request.param


@pytest.mark.parametrize("name,path,text,consts", CASES, ids=[c[0] for c in CASES])
def test_rhs_report_and_shown_map_equal_casadi(name, path, text, consts, core):
    c = _compile(path, text, consts)
    num = c.numeric
    ts = TorchSystem(c.system)
    assert ts.core == core
    assert ts.report_names == num.report_names and ts.n_p == len(num.p_names)
    if core == "c" and name.startswith("chnn"):  # the network inputs are states: no f_in in C
        assert ts._core.in_columns == ((0, 1, 2, 3, 4, 5) if name == "chnn_small" else (5, 0, 2, 1))
        assert "in" not in ts._core.funs
    rng = np.random.default_rng(1)
    B = 9
    x = rng.standard_normal((B, num.nx))
    t = rng.standard_normal(B)
    u = rng.standard_normal((B, len(num.u_names)))
    p = num.p_default.copy()
    p[len(c.system.params) :] += 0.3 * rng.standard_normal(p.size - len(c.system.params))  # not the init weights
    bound = ts.bind(torch.tensor(p))
    ref = np.asarray(num.rhs.map(B)(t[None], x.T, p, u.T)).T
    got = ts.rhs(torch.tensor(t), torch.tensor(x), bound, torch.tensor(u)).numpy()
    np.testing.assert_allclose(got, ref, rtol=1e-11, atol=1e-12 * max(1.0, np.abs(ref).max()))
    shown_ref = np.asarray(num.report.map(B)(t[None], x.T, p)).T
    shown = ts.report(torch.tensor(t), torch.tensor(x), bound).numpy()
    np.testing.assert_allclose(shown, shown_ref, rtol=1e-13, atol=1e-14)
    back = ts.state_from_shown(torch.tensor(t), torch.tensor(shown), bound).numpy()
    np.testing.assert_allclose(back, x, rtol=1e-12, atol=1e-12)
    if num.y_names:
        y_ref = np.asarray(num.outputs.map(B)(t[None], x.T, np.zeros((0, B)), p, u.T)).T
        np.testing.assert_allclose(ts.outputs(torch.tensor(t), torch.tensor(x), bound, torch.tensor(u)).numpy(), y_ref,
                                   rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("act", ["tanh", "relu", "softplus", "sin", "elu", "gelu", "sigmoid", "identity"])
def test_mlp_output_and_input_jacobian_equal_casadi(act):
    text = f"model N\n  nn V: mlp(hidden = [7, 5], act = {act}, out = 3)\n  var x\n  der(x) = V(x, 2*x, 3, 4)[1]\nend\n"
    nn = load_models("n.phm", text=text)[0].neural[0]
    w = init_weights(nn, 4)
    graph = MLPGraph(nn, ca.MX.sym("w", w.size))
    X = np.random.default_rng(0).standard_normal((11, 4)) * 2
    y, J = mlp_torch(nn, _layers(nn, torch.tensor(w)), torch.tensor(X), True)
    for b in range(len(X)):
        np.testing.assert_allclose(y[b].numpy(), np.asarray(graph._f(X[b], w)).ravel(), rtol=1e-13, atol=1e-14)
        np.testing.assert_allclose(J[b].numpy(), np.asarray(graph._jac(X[b], w)), rtol=1e-12, atol=1e-13)


def _random_chunks(num, observed, B, n, dt, rng, ts=None, p=None):
    """Chunks whose first samples are shown columns of random states (so p = M v inverts exactly)."""
    x0 = 0.5 * rng.standard_normal((B, num.nx))
    T = 0.1 * rng.standard_normal((B, 1)) + dt * np.arange(n + 1)[None]
    S0 = np.asarray(num.report.map(B)(T[:, 0][None], x0.T, num.p_default)).T
    Y = rng.standard_normal((B, len(observed), n))
    U = rng.standard_normal((B, len(num.u_names), n + 1))
    return Chunks(S0, Y, U, T, np.zeros((B, 2), dtype=int))


@pytest.mark.parametrize("name,text,path,consts,spec", [
    ("chnn_rk4_l1", CHNN_SMALL, None, None, dict(steps=4, dt=0.03)),
    ("chnn_permuted_rk4", CHNN_PERMUTED, None, None, dict(steps=2, dt=0.03)),
    ("chnn_euler_mse_substeps", CHNN_SMALL, None, None, dict(steps=3, dt=0.05, method="euler", substeps=2, loss="mse")),
    ("driven_rk4_weights", DRIVEN, None, None, dict(steps=3, dt=0.1, substeps=2, weights=(1.0, 0.5, 2.0))),
    ("hnn2_rk4_mse", None, BENCH_MODELS / "hnn2.phm", {"H": 3}, dict(steps=2, dt=0.03, loss="mse")),
    ("driven_rk2", DRIVEN, None, None, dict(steps=2, dt=0.1, method="rk2", substeps=3)),
])
def test_chunk_loss_and_gradient_equal_casadi(name, text, path, consts, spec, core):
    c = _compile(path, text, consts)
    num = c.numeric
    lay = make_layout(num, c.model, [])
    observed = tuple(num.report_names) + tuple(num.y_names)
    s = LossSpec(**spec)
    ref_loss, torch_loss = ChunkLoss(num, lay, s, observed), TorchChunkLoss(num, lay, s, observed)
    rng = np.random.default_rng(2)
    chunks = _random_chunks(num, observed, 5, s.steps, s.dt, rng)
    theta = lay.theta_from_p(num.p_default) + 0.05 * rng.standard_normal(lay.n_theta)
    L_ref, g_ref = ref_loss.value_grad(theta, chunks)
    L, g = torch_loss.value_grad(theta, chunks)
    assert L == pytest.approx(L_ref, rel=1e-11)
    np.testing.assert_allclose(g, g_ref, rtol=1e-8, atol=1e-10 * np.abs(g_ref).max())
    assert torch_loss.value(theta, chunks, batch=2) == pytest.approx(ref_loss.value(theta, chunks, batch=2), rel=1e-11)


def test_predict_equals_casadi():
    from pdsl.fit.data import Trajectory

    c = _compile(None, DRIVEN, None)
    num = c.numeric
    lay = make_layout(num, c.model, [])
    observed = ("x", "e")
    s = LossSpec(steps=4, dt=0.1)
    rng = np.random.default_rng(5)
    t = 0.1 * np.arange(12)
    traj = Trajectory(0, 2, t, rng.standard_normal((12, 2)), rng.standard_normal((12, 2)), rng.standard_normal((12, 1)))
    p = num.p_default
    np.testing.assert_allclose(TorchChunkLoss(num, lay, s, observed).predict(p, traj),
                               ChunkLoss(num, lay, s, observed).predict(p, traj), rtol=1e-11, atol=1e-12)


def test_backend_choice():
    c = _compile(None, CHNN_SMALL, None)
    num = c.numeric
    lay = make_layout(num, c.model, [])
    rk4, mid = LossSpec(steps=4, dt=0.03), LossSpec(steps=4, dt=0.03, method="midpoint")
    adamw = FitConfig(data="x.csv", method="adamw")
    assert choose_backend(adamw, num, lay, rk4) == "torch"
    assert isinstance(make_loss(num, lay, rk4, num.report_names, adamw), TorchChunkLoss)
    assert choose_backend(adamw, num, lay, mid) == "torch"  # implicit integrators run on torch too (issue 15)
    assert choose_backend(FitConfig(data="x.csv", method="gauss-newton"), num, lay, rk4) == "casadi"
    assert choose_backend(FitConfig(data="x.csv", method="adamw", backend="casadi"), num, lay, rk4) == "casadi"
    from pdsl.diagnostics import PdslError

    with pytest.raises(PdslError, match="project"):
        choose_backend(FitConfig(data="x.csv", method="adamw", backend="torch"), num, lay, LossSpec(steps=4, dt=0.03, project=1))
    with pytest.raises(PdslError, match="unknown"):
        choose_backend(FitConfig(data="x.csv", method="adamw", backend="jax"), num, lay, rk4)


def test_evaluate_on_torch_equals_casadi_rk4(tmp_path):
    """`pdsl evaluate --backend torch` (all trajectories in one batch) = the per-trajectory CasADi rollout."""
    from fit_helpers import simulate_csv

    from pdsl.fit.data import load_dataset
    from pdsl.fit.evaluate import evaluate

    true = tmp_path / "p3.phm"
    true.write_text(CHNN_SMALL.replace("  nn V: mlp(hidden = [6, 5], act = tanh)\n", "").replace(
        "  potential V(b[1].x, b[1].y, b[2].x, b[2].y, b[3].x, b[3].y)\n", "  gravity 9.81\n").replace("{free, lower = 0}", ""))
    data = simulate_csv(true, tmp_path / "d.csv", 3, 0.3, 0.03)
    c = _compile(None, CHNN_SMALL, None)
    ds = load_dataset(str(data), c.numeric)
    ref, s_ref = evaluate(c.numeric, ds, integrator="rk4", substeps=2)
    got, s_got = evaluate(c.numeric, ds, integrator="rk4", substeps=2, backend="torch")
    for a, b in zip(ref, got):
        np.testing.assert_allclose(b.predicted, a.predicted, rtol=1e-10, atol=1e-11)
        np.testing.assert_allclose(b.energy_err, a.energy_err, rtol=1e-8, atol=1e-12)
    assert s_got.keys() == s_ref.keys()
    key = "relative error (geometric mean over t>0)"
    assert s_got[key]["mean"] == pytest.approx(s_ref[key]["mean"], rel=1e-8)


@pytest.mark.parametrize("model,dense", [("pendulum3", False), ("gyroscope", True)])
def test_shown_map_inverse_by_substitution_and_dense_block(model, dense):
    """state_from_shown solves J x = s − y0 on the tape by substitution (pendulum3: p = m v, one division per
    momentum) and, where rows stay coupled (the gyroscope's rigid body: momenta mixed by the inertia), one dense
    solve of the remaining block; either way it inverts the report map (CasADi's) to round-off."""
    c = _compile(ROOT / "models" / f"{model}.phm", None, None)
    num = c.numeric
    ts = TorchSystem(c.system)
    assert any(getattr(fn, "__name__", "") == "dense" for fn, *_ in ts._shown.instrs) is dense
    rng = np.random.default_rng(4)
    B = 7
    x = rng.standard_normal((B, num.nx))
    t = rng.standard_normal(B)
    p = num.p_default.copy()
    bound = ts.bind(torch.tensor(p))
    shown = np.asarray(num.report.map(B)(t[None], x.T, p)).T
    back = ts.state_from_shown(torch.tensor(t), torch.tensor(shown), bound).numpy()
    np.testing.assert_allclose(back, x, rtol=1e-11, atol=1e-11)
