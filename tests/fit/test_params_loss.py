"""Parameter reparametrisation (bounds) and the chunk loss (BENCHMARKS A5): values, gradients, maps."""

import numpy as np
import pytest

from pdsl.diagnostics import PdslError
from pdsl.fit.data import load_dataset, make_chunks
from pdsl.fit.loss import ChunkLoss, LossSpec, state_from_shown
from pdsl.fit.params import Transform, make_layout
from pdsl.pipeline import compile_model

from fit_helpers import PLAIN_PENDULUM


@pytest.mark.parametrize("lower, upper", [(None, None), (0.0, None), (2.0, None), (None, 5.0), (-1.0, 3.0)])
def test_transform_round_trip_and_bounds(lower, upper):
    tr = Transform(lower, upper)
    values = [v for v in (-0.5, 0.3, 1.0, 2.5, 4.0) if (lower is None or v > lower) and (upper is None or v < upper)]
    for v in values:
        assert tr.forward(tr.inverse(v)) == pytest.approx(v, rel=1e-12)
    for theta in (-50.0, -3.0, 0.0, 3.0, 50.0):
        p = tr.forward(theta)
        assert lower is None or p >= lower
        assert upper is None or p <= upper
    h = 1e-6
    assert tr.derivative(0.3) == pytest.approx((tr.forward(0.3 + h) - tr.forward(0.3 - h)) / (2 * h), rel=1e-7)


def test_lower_zero_is_log_space():
    tr = Transform(0.0, None)
    assert tr.kind == "exp-lower"
    assert tr.inverse(1.3) == pytest.approx(np.log(1.3))
    assert np.isfinite(tr.inverse(0.0))  # a start value on the bound is moved just inside


def test_layout_free_parameters(spring_model):
    c = compile_model(spring_model)
    lay = make_layout(c.numeric, c.model, ["m2", "m1"])
    assert lay.free_names == ("m1", "m2") and lay.n_theta == 2
    p = lay.p_from_theta(lay.theta_from_p(np.array([1.3, 0.7, 9.81, 4.0])))
    np.testing.assert_allclose(p, [1.3, 0.7, 9.81, 4.0], rtol=1e-14)
    with pytest.raises(PdslError) as e:
        make_layout(c.numeric, c.model, ["mass"])
    assert e.value.codes == ["BadOption"]
    with pytest.raises(PdslError) as e:
        make_layout(c.numeric, c.model, [])
    assert e.value.codes == ["NothingToFit"]


def test_velocities_map_to_momenta(spring_model):
    """The data shows velocities; the Hamiltonian state holds p = M v (A1.4), with M from the parameters."""
    num = compile_model(spring_model).numeric
    g = state_from_shown(num)
    rng = np.random.default_rng(1)
    s = rng.standard_normal(8)
    p = np.array([1.3, 0.7, 9.81, 4.0])
    x = np.asarray(g(0.0, s, p)).ravel()
    np.testing.assert_allclose(x[:4], s[:4], rtol=0, atol=1e-15)
    np.testing.assert_allclose(x[4:], [1.3 * s[4], 1.3 * s[5], 0.7 * s[6], 0.7 * s[7]], rtol=1e-14)
    np.testing.assert_allclose(np.asarray(num.report(0.0, x, p)).ravel(), s, rtol=1e-14)


def _setup(spring_model, data, free=("m1", "m2"), loss="mse"):
    c = compile_model(spring_model)
    num = c.numeric
    lay = make_layout(num, c.model, list(free))
    ds = load_dataset(str(data), num, min_samples=5)
    chunks = make_chunks(ds, 4).take(slice(0, 12))
    return lay, ChunkLoss(num, lay, LossSpec(steps=4, dt=ds.dt, loss=loss), ds.observed), chunks


@pytest.mark.parametrize("loss", ["mse", "l1"])
def test_batch_gradient_matches_finite_differences(spring_model, small_spring_data, loss):
    lay, cl, chunks = _setup(spring_model, small_spring_data, loss=loss)
    theta = lay.theta_from_p(np.array([1.1, 0.9, 9.81, 4.0]))
    L, g = cl.value_grad(theta, chunks)
    assert L == pytest.approx(cl.value(theta, chunks), rel=1e-13)
    h = 1e-6
    fd = [(cl.value(theta + h * e, chunks) - cl.value(theta - h * e, chunks)) / (2 * h) for e in np.eye(2)]
    np.testing.assert_allclose(g, fd, rtol=1e-6)


def test_residual_jacobian_matches_gradient(spring_model, small_spring_data):
    lay, cl, chunks = _setup(spring_model, small_spring_data)
    theta = lay.theta_from_p(np.array([1.1, 0.9, 9.81, 4.0]))
    r, J = cl.residuals(theta, chunks)
    scale = cl.entry_scale(len(chunks))
    assert r @ r * scale == pytest.approx(cl.value(theta, chunks), rel=1e-12)
    np.testing.assert_allclose(2 * scale * J.T @ r, cl.value_grad(theta, chunks)[1], rtol=1e-10)


def test_loss_vanishes_at_the_truth(spring_model, small_spring_data):
    lay, cl, chunks = _setup(spring_model, small_spring_data)
    at_truth = cl.value(lay.theta_from_p(np.array([1.3, 0.7, 9.81, 4.0])), chunks)
    away = cl.value(lay.theta_from_p(np.array([1.0, 1.0, 9.81, 4.0])), chunks)
    assert at_truth < 1e-5 * away  # what is left is the RK4 error at dt = 0.03 ...
    c = compile_model(spring_model)
    ds = load_dataset(str(small_spring_data), c.numeric, min_samples=5)
    fine = ChunkLoss(c.numeric, lay, LossSpec(steps=4, dt=ds.dt, loss="mse", substeps=4), ds.observed)
    assert fine.value(lay.theta_from_p(np.array([1.3, 0.7, 9.81, 4.0])), chunks) < 1e-3 * at_truth  # ... O(h^8) in mse


def test_without_spring_only_the_mass_ratio_matters(tmp_path, spring_model, small_spring_data):
    """The identifiability argument of the acceptance test: scaling both masses changes nothing."""
    path = tmp_path / "plain.phm"
    path.write_text(PLAIN_PENDULUM)
    c = compile_model(path)
    lay = make_layout(c.numeric, c.model, ["m1", "m2"])
    ds = load_dataset(str(small_spring_data), c.numeric, min_samples=5)
    cl = ChunkLoss(c.numeric, lay, LossSpec(steps=4, dt=ds.dt, loss="mse"), ds.observed)
    chunks = make_chunks(ds, 4)
    L1 = cl.value(lay.theta_from_p(np.array([1.3, 0.7, 9.81, 4.0])), chunks)
    L2 = cl.value(lay.theta_from_p(np.array([2.6, 1.4, 9.81, 4.0])), chunks)
    assert L2 == pytest.approx(L1, rel=1e-9)
    # ... while the spring model tells the two apart
    lay_s, cl_s, chunks_s = _setup(spring_model, small_spring_data)
    a = cl_s.value(lay_s.theta_from_p(np.array([1.3, 0.7, 9.81, 4.0])), chunks_s)
    b = cl_s.value(lay_s.theta_from_p(np.array([2.6, 1.4, 9.81, 4.0])), chunks_s)
    assert b > 100 * a


@pytest.mark.parametrize("method", ["midpoint", "gauss2"])
def test_implicit_integrators_agree_with_rk4(spring_model, small_spring_data, method):
    lay, cl, chunks = _setup(spring_model, small_spring_data)
    c = compile_model(spring_model)
    ds = load_dataset(str(small_spring_data), c.numeric, min_samples=5)
    other = ChunkLoss(c.numeric, lay, LossSpec(steps=4, dt=ds.dt, loss="mse", method=method, substeps=2), ds.observed)
    theta = lay.theta_from_p(np.array([1.2, 0.8, 9.81, 4.0]))
    assert other.value(theta, chunks) == pytest.approx(cl.value(theta, chunks), rel=1e-2)
    L, g = other.value_grad(theta, chunks)
    h = 1e-6
    fd = [(other.value(theta + h * e, chunks) - other.value(theta - h * e, chunks)) / (2 * h) for e in np.eye(2)]
    np.testing.assert_allclose(g, fd, rtol=1e-5)


def test_inputs_enter_between_samples(tmp_path):
    """An exogenous input read from the data, linear in time between samples."""
    model = tmp_path / "cart.phm"
    model.write_text("model Cart\n  param m = 2.0 {free, lower = 0}\n  input F\n  var x, v\n"
                     "  der(x) = v\n  der(v) = F/m\nend\n")
    c = compile_model(model)
    t = np.linspace(0, 1, 11)
    F = 3.0 * t  # x'' = 3t/m  ->  v = 1.5 t^2/m, x = 0.5 t^3/m from rest
    m = 2.0
    csv = tmp_path / "cart.csv"
    rows = np.column_stack([t, 0.5 * t**3 / m, 1.5 * t**2 / m, F])
    from pdsl.data.csvio import write_table

    write_table(csv, ["t", "x", "v", "F"], rows)
    lay = make_layout(c.numeric, c.model, [])
    ds = load_dataset(str(csv), c.numeric, min_samples=5)
    cl = ChunkLoss(c.numeric, lay, LossSpec(steps=4, dt=ds.dt, loss="mse"), ds.observed)
    assert cl.value(lay.theta_from_p(np.array([m])), make_chunks(ds, 4)) < 1e-25  # rk4 is exact on cubics
    assert cl.value(lay.theta_from_p(np.array([1.5])), make_chunks(ds, 4)) > 1e-6


def test_declared_outputs_can_be_the_observed_columns(tmp_path):
    """Fit a mass from measured momenta only: an `output` column, the states still start each chunk."""
    from pdsl.cli.main import main

    model = tmp_path / "osc.phm"
    model.write_text("model Osc\n  param m = 1.0 {free, lower = 0}, k = 3.0\n  var x = 1.0, v = 0.0\n"
                     "  output mom = m*v\n  der(x) = v\n  der(v) = -k/m*x\nend\n")
    data = tmp_path / "osc.csv"
    assert main(["simulate", str(model), "--t-end", "2", "--dt", "0.05", "--param", "m=2.5", "--rtol", "1e-11",
                 "-o", str(data)]) == 0
    c = compile_model(model)
    ds = load_dataset(str(data), c.numeric, observe=["mom"], min_samples=5)
    assert ds.observed == ("mom",)
    lay = make_layout(c.numeric, c.model, [])
    cl = ChunkLoss(c.numeric, lay, LossSpec(steps=4, dt=ds.dt, loss="mse"), ds.observed)
    chunks = make_chunks(ds, 4)
    values = {m: cl.value(lay.theta_from_p(np.array([m, 3.0])), chunks) for m in (2.0, 2.5, 3.0)}
    assert values[2.5] < 1e-6 * min(values[2.0], values[3.0])
