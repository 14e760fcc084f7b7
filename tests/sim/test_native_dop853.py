"""``--integrator dop853`` (pdsl.sim.native): scipy's DOP853 compiled to C around the generated right-hand side.

Checked against independent routes: scipy's coefficients (to the last bit), scipy's solve_ivp DOP853 at the same
tolerances (the same steps: evaluation counts and trajectories agree), closed forms, CVODES on the bundled models
(batches in threads, switching inputs, projection), and the located errors of the options it refuses."""

from __future__ import annotations

from pathlib import Path

import casadi as ca
import numpy as np
import pytest

from pdsl.cache import ModelCache, using
from pdsl.cli.main import main
from pdsl.diagnostics import PdslError
from pdsl.numerics import dop853
from pdsl.pipeline import compile_model
from pdsl.sim import compiled, native
from pdsl.sim.simulate import simulate, simulate_batch

MODELS = Path(__file__).resolve().parents[2] / "models"
pytestmark = pytest.mark.skipif(compiled.find_compiler() is None, reason="no C compiler on this machine")


def test_coefficients_are_scipys_to_the_last_bit():
    from scipy.integrate._ivp import dop853_coefficients as ref

    assert dop853.N_STAGES == ref.N_STAGES and dop853.N_STAGES_EXTENDED == ref.N_STAGES_EXTENDED
    assert np.array_equal(np.array(dop853.C), ref.C)
    for i in range(ref.N_STAGES_EXTENDED):
        assert np.array_equal(np.array(dop853.A[i], dtype=float), ref.A[i, :i]), i
        assert not np.any(ref.A[i, i:]), i
    for name in ("B", "E3", "E5", "D"):
        assert np.array_equal(np.array(getattr(dop853, name)), getattr(ref, name)), name


def _double_pendulum():
    t, x, p = ca.SX.sym("t"), ca.SX.sym("x", 4), ca.SX.sym("p", 5)
    m1, m2, l1, l2, g = (p[i] for i in range(5))
    q1, q2, w1, w2 = (x[i] for i in range(4))
    a, d, k = (m1 + m2) * l1 * l1, m2 * l2 * l2, m2 * l1 * l2
    s, c = ca.sin(q1 - q2), ca.cos(q1 - q2)
    b = k * c
    r1 = -k * s * w2 * w2 - (m1 + m2) * g * l1 * ca.sin(q1)
    r2 = k * s * w1 * w1 - m2 * g * l2 * ca.sin(q2)
    det = a * d - b * b
    return ca.Function("dp", [t, x, p], [ca.vertcat(w1, w2, (d * r1 - b * r2) / det, (a * r2 - b * r1) / det)])


@pytest.mark.parametrize("rtol", [1e-6, 1e-10])
def test_takes_scipys_steps(rtol):
    """Same method, same control: the evaluation counts agree (scipy may spend one more dense-output stage set,
    3 evaluations, on the output at t0) and the trajectories agree to rounding."""
    from scipy.integrate import solve_ivp

    f = _double_pendulum()
    p = np.array([1.1722, 1.0391, 1.0359, 1.0822, 9.81])
    x0, grid = np.array([1.0, -0.5, 0.0, 0.0]), np.linspace(0.0, 10.0, 1001)
    X, counts = native.native_integrator(f, None).run(x0, p, grid, rtol, rtol * 1e-2)
    ref = solve_ivp(lambda t, x: np.asarray(f(t, x, p)).ravel(), (0.0, 10.0), x0, method="DOP853", t_eval=grid,
                    rtol=rtol, atol=rtol * 1e-2)
    assert 0 <= ref.nfev - counts["nfevals"] <= 3
    assert counts["nfevals"] == 2 + 12 * (counts["nsteps"] + counts["nrejected"]) + 3 * _dense_steps(counts, ref, grid)
    assert np.max(np.abs(X - ref.y.T)) < 1e3 * rtol * 1e-2  # rounding differences only, amplified by the chaos


def _dense_steps(counts, ref, grid):
    """Steps that produced an output (the rest of the count): at most one per output, at least one per step
    with outputs; inferred from the count itself, so this only checks the count is of that form."""
    extra = counts["nfevals"] - 2 - 12 * (counts["nsteps"] + counts["nrejected"])
    assert extra % 3 == 0 and 0 < extra // 3 <= min(counts["nsteps"], len(grid) - 1)
    return extra // 3


@pytest.mark.parametrize("rtol", [1e-5, 1e-8, 1e-11])
def test_harmonic_oscillator_closed_form(rtol):
    t, x, p = ca.SX.sym("t"), ca.SX.sym("x", 2), ca.SX.sym("p", 1)
    f = ca.Function("ho", [t, x, p], [ca.vertcat(x[1], -p[0] ** 2 * x[0])])
    w, grid = 3.0, np.linspace(0.0, 20.0, 401)
    X, _ = native.native_integrator(f, None).run(np.array([1.0, 0.0]), np.array([w]), grid, rtol, rtol * 1e-2)
    exact = np.column_stack([np.cos(w * grid), -w * np.sin(w * grid)])
    err = np.max(np.abs(X - exact))
    assert err < 100 * rtol * w
    assert X[0, 0] == 1.0 and X[0, 1] == 0.0  # the start is returned exactly


@pytest.fixture(scope="module")
def pendulum():
    return compile_model(MODELS / "double_pendulum.phm", cache=False).numeric


def test_simulate_matches_cvodes_and_reports(pendulum):
    grid = np.linspace(0.0, 5.0, 501)
    a = simulate(pendulum, grid, rtol=1e-11, integrator="dop853")
    b = simulate(pendulum, grid, rtol=1e-11, integrator="cvodes")
    assert np.max(np.abs(a.x - b.x)) < 1e-6
    assert a.info["integrator"] == "dop853" and a.info["rhs"].startswith("compiled C (")
    c = a.info["counts"]
    assert c["nsteps"] > 50 and c["nfevals"] >= 12 * c["nsteps"]
    assert np.max(np.abs(a.energy - a.energy[0])) < 1e-8 * abs(a.energy[0])  # the energy of a conservative model


def test_batch_in_threads_equals_one_by_one(pendulum):
    grid = np.linspace(0.0, 2.0, 201)
    rng = np.random.default_rng(0)
    X0 = pendulum.x_start + 0.3 * rng.standard_normal((5, pendulum.nx))
    runs = simulate_batch(pendulum, grid, X0, rtol=1e-9, integrator="dop853", threads=2)
    for x0, r in zip(X0, runs):
        one = simulate(pendulum, grid, x0=dict(zip(pendulum.x_names, x0)), rtol=1e-9, integrator="dop853")
        assert np.array_equal(one.x, r.x)


def test_switching_input_stops_at_the_switch():
    """The step input of step_pendulum.phm: integration restarts at t_on, as with CVODES."""
    num = compile_model(MODELS / "step_pendulum.phm", cache=False).numeric
    grid = np.linspace(0.0, 3.0, 301)
    a = simulate(num, grid, rtol=1e-10, integrator="dop853")
    b = simulate(num, grid, rtol=1e-10, integrator="cvodes")
    assert a.info["switch_times"] == b.info["switch_times"] == [1.0]
    assert np.max(np.abs(a.x - b.x)) < 1e-8


def test_projection_after_every_step_keeps_the_constraint():
    num = compile_model(MODELS / "pendulum_chain.phm", cache=False).numeric
    grid = np.linspace(0.0, 1.0, 51)
    a = simulate(num, grid, rtol=1e-9, integrator="dop853", stabilize="project")
    b = simulate(num, grid, rtol=1e-9, integrator="cvodes", stabilize="project")
    assert np.max(a.constraint_rms) < 1e-10
    assert np.max(np.abs(a.x - b.x)) < 1e-6


def test_library_is_cached_on_disk_and_reused(pendulum, tmp_path, monkeypatch):
    monkeypatch.setattr(native, "_LIBS", {})
    monkeypatch.setattr(native, "_MADE", {})
    monkeypatch.setattr(compiled, "_LOADED", {})
    monkeypatch.setattr(compiled, "_GRID", {})
    grid = np.linspace(0.0, 1.0, 11)
    with using(ModelCache(tmp_path)):
        first = simulate(pendulum, grid, integrator="dop853")
        assert "built in" in first.info["rhs"] and "cached" in first.info["rhs"]
        assert list(tmp_path.glob("rhs-*.so"))
        monkeypatch.setattr(native, "_LIBS", {})
        monkeypatch.setattr(native, "_MADE", {})
        again = simulate(pendulum, grid, integrator="dop853")
    assert again.info["rhs"] == "compiled C (library from the cache)"
    assert np.array_equal(first.x, again.x)


def test_refused_options_are_located_errors(pendulum):
    with pytest.raises(PdslError) as e:
        simulate(pendulum, np.linspace(0, 1, 3), integrator="dop853", compile="no")
    assert e.value.codes == ["BadOption"] and "compiled C" in str(e.value)
    with pytest.raises(PdslError) as e:
        simulate(pendulum, np.linspace(0, 1, 3), integrator="dop853", rtol=1e-15)
    assert e.value.codes == ["BadOption"]


def test_a_blow_up_is_an_integrator_failure_not_a_crash():
    t, x, p = ca.SX.sym("t"), ca.SX.sym("x", 1), ca.SX.sym("p", 0)
    f = ca.Function("blow", [t, x, p], [x ** 2])  # x(t) = 1/(1 − t): infinite at t = 1
    with pytest.raises(RuntimeError, match=r"at t = 0\.99|not finite|10 ulp"):
        native.native_integrator(f, None).run(np.array([1.0]), np.zeros(0), np.linspace(0.0, 2.0, 5), 1e-8, 1e-10)


def test_cli(tmp_path, capsys):
    out = tmp_path / "a.csv"
    rc = main(["simulate", str(MODELS / "double_pendulum.phm"), "--t-end", "1", "--dt", "0.1", "--integrator", "dop853",
               "-o", str(out), "--no-cache"])
    text = capsys.readouterr().out
    assert rc == 0, text
    assert "dop853 rtol 1e-08" in text and "right-hand side: compiled C" in text
    assert out.read_text().count("\n") == 12
    rc = main(["simulate", str(MODELS / "double_pendulum.phm"), "--t-end", "1", "--dt", "0.1", "--integrator", "dop853",
               "--compile", "no", "-o", str(tmp_path / "b.csv"), "--no-cache"])
    assert rc == 2 and "error[BadOption]" in capsys.readouterr().err


def test_a_model_with_networks_is_code_generated_too():
    """cart_pole_ph.phm holds an MLP (an MX graph): the generated C evaluates it; CVODES (VM) agrees."""
    num = compile_model(MODELS / "cart_pole_ph.phm", cache=False).numeric
    assert num.kind == "MX"
    grid = np.linspace(0.0, 1.0, 11)
    a = simulate(num, grid, rtol=1e-12, integrator="dop853")
    b = simulate(num, grid, rtol=1e-12, integrator="cvodes")
    assert a.info["rhs"].startswith("compiled C")
    scale = np.max(np.abs(b.x), axis=0) + 1.0
    assert np.max(np.abs(a.x - b.x) / scale) < 1e-9
