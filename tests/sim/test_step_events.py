"""Integrating through conditionals (issue 11): CVODES/IDAS stop at the switching times of conditions
on t alone, with the mode frozen inside each segment; a state-dependent switch is stepped through
and its parameter gradient (forward sensitivities) matches finite differences."""

from __future__ import annotations

import math
import textwrap

import casadi as ca
import numpy as np
import pytest

from pdsl.numerics.sensitivity import loss_and_grad
from pdsl.pipeline import compile_model
from pdsl.sim.simulate import input_from_expression, simulate, simulate_batch, time_grid


def _model(body: str, name: str = "A") -> str:
    return f"model {name}\n" + textwrap.indent(textwrap.dedent(body).strip("\n"), "  ") + "\nend\n"


def msd(t_on: str = "1", step: str = "2", form: str = "plain") -> str:
    if form == "plain":
        return _model(f"""
            param m = 1.0, k = 4.0, d = 0.3
            input F = if t < {t_on} then 0 else {step}
            var x = 0, v = 0
            der(x) = v
            der(v) = (F - k*x - d*v)/m
        """, "StepMSD")
    return _model(f"""
        param m = 1.0, k = 4.0, d = 0.3
        input F = if t < {t_on} then 0 else {step}
        coord x = 0
        lagrangian m*der(x)^2/2 - k*x^2/2
        force F - d*der(x) on x
    """, "StepMSD")


def step_response(t, t_on, F=2.0, m=1.0, k=4.0, d=0.3):
    """x(t) of m x'' + d x' + k x = F·H(t − t_on), at rest at the start (underdamped closed form)."""
    wn = math.sqrt(k / m)
    z = d / (2 * math.sqrt(k * m))
    wd = wn * math.sqrt(1 - z * z)
    tau = np.maximum(np.asarray(t) - t_on, 0.0)
    return F / k * (1 - np.exp(-z * wn * tau) * (np.cos(wd * tau) + z / math.sqrt(1 - z * z) * np.sin(wd * tau)))


@pytest.mark.parametrize("form", ["plain", "lagrangian"])
def test_step_input_matches_closed_form_to_1e_8(form):
    num = compile_model("<test>", text=msd(form=form)).numeric
    grid = time_grid(6.0, 0.05)
    r = simulate(num, grid, rtol=1e-12, atol=1e-14)
    assert r.info["switch_times"] == [1.0]
    err = np.max(np.abs(r.x[:, 0] - step_response(grid, 1.0)))
    assert err < 1e-8, err


def test_switch_between_grid_points_is_found_to_machine_precision():
    num = compile_model("<test>", text=msd(t_on="1.234567")).numeric
    grid = time_grid(4.0, 0.1)
    r = simulate(num, grid, rtol=1e-12, atol=1e-14)
    (ts,) = r.info["switch_times"]
    assert abs(ts - 1.234567) < 1e-14
    assert np.max(np.abs(r.x[:, 0] - step_response(grid, 1.234567))) < 1e-8


def test_parameter_switch_time_and_pulse():
    """A pulse `t_on <= t and t < t_on + w` with parameters: two switches, both moved by --param."""
    text = _model("""
        param t_on = 0.5, w = 1.0, k = 4.0, d = 0.3
        input F = if t >= t_on and t < t_on + w then 2 else 0
        var x = 0, v = 0
        der(x) = v
        der(v) = F - k*x - d*v
    """)
    num = compile_model("<test>", text=text).numeric
    grid = time_grid(5.0, 0.05)
    r = simulate(num, grid, params={"t_on": 0.75}, rtol=1e-12, atol=1e-14)
    assert r.info["switch_times"] == pytest.approx([0.75, 1.75], abs=1e-14)
    expected = step_response(grid, 0.75) - step_response(grid, 1.75)  # linear: a pulse is two steps
    assert np.max(np.abs(r.x[:, 0] - expected)) < 1e-8


@pytest.mark.parametrize("stop", [True, False])
def test_short_pulse_is_not_stepped_over(stop, monkeypatch):
    """A 1 ms pulse of 2000 (impulse 2) in a quiet stretch. Stopped at its two switches the response
    matches the closed form; the same CVODES run not stopped there (conditions read at t, the
    reference that makes this test meaningful) steps over the pulse and misses it entirely."""
    import pdsl.sim.simulate as simmod

    text = _model("""
        param k = 4.0, d = 0.3
        input F = if t >= 2 and t < 2.001 then 2000 else 0
        var x = 0, v = 0
        der(x) = v
        der(v) = F - k*x - d*v
    """)
    num = compile_model("<test>", text=text).numeric
    grid = time_grid(6.0, 0.5)
    if not stop:
        monkeypatch.setattr(simmod, "_locate_switches", lambda num, st, grid: st)
    r = simulate(num, grid, rtol=1e-10)
    expected = 1000 * (step_response(grid, 2.0) - step_response(grid, 2.001))
    err = np.max(np.abs(r.x[:, 0] - expected))
    if stop:
        assert r.info["switch_times"] == pytest.approx([2.0, 2.001], abs=1e-14)
        assert err < 1e-8, err
    else:
        assert "switch_times" not in r.info
        assert err > 0.5 * np.max(np.abs(expected))  # the pulse is lost


def test_batch_runs_stop_at_the_switch_too():
    num = compile_model("<test>", text=msd()).numeric
    grid = time_grid(3.0, 0.1)
    runs = simulate_batch(num, grid, np.array([[0.0, 0.0], [0.0, 0.0], [0.0, 0.0]]), rtol=1e-12, atol=1e-14)
    for r in runs:
        assert np.max(np.abs(r.x[:, 0] - step_response(grid, 1.0))) < 1e-8


def test_idas_stops_at_the_switch():
    """A DAE (an algebraic force variable) through IDAS with the same step."""
    text = _model("""
        param k = 4.0, d = 0.3
        input F = if t < 1 then 0 else 2
        var x = 0, v = 0, f
        der(x) = v
        der(v) = f
        0 = f - (F - k*x - d*v)
    """)
    num = compile_model("<test>", text=text).numeric
    assert num.nz == 1
    grid = time_grid(4.0, 0.1)
    r = simulate(num, grid, rtol=1e-12, atol=1e-14)
    assert r.info["switch_times"] == [1.0]
    assert np.max(np.abs(r.x[:, 0] - step_response(grid, 1.0))) < 1e-7


# ---------------------------------------------------------------- state-dependent switch
SATURATION = _model("""
    param m = 1.0, k = 4.0
    coord x = 2
    lagrangian m*der(x)^2/2
    force if abs(x) < 1 then -k*x else -k*sign(x) on x
""", "Saturation")


def _loss(num, grid, k, target):
    r = simulate(num, grid, params={"k": k}, rtol=1e-12, atol=1e-14)
    return float(np.sum((r.x[1:].T - target) ** 2))


@pytest.mark.parametrize("x0", [0.5, 2.0])  # inside the linear zone throughout; crossing |x| = 1 repeatedly
def test_saturation_gradient_matches_finite_differences(x0):
    num = compile_model("<test>", text=SATURATION).numeric
    r0 = simulate(num, np.linspace(0, 3, 31), x0={"x": x0}, switches="step-through")
    assert "switch_times" not in r0.info and "state" in r0.info["state_conditions"]
    # located (the default): the same trajectory, with the crossings of |x| = 1 as mode changes
    r1 = simulate(num, np.linspace(0, 3, 31), x0={"x": x0}, rtol=1e-12, atol=1e-14)
    r2 = simulate(num, np.linspace(0, 3, 31), x0={"x": x0}, rtol=1e-12, atol=1e-14, switches="step-through")
    assert np.max(np.abs(r1.x - r2.x)) < 1e-7
    assert any(text.startswith("Abs(x) <") for _, text, _ in r1.info["switches"]) == (x0 > 1)
    t, x, p = ca.SX.sym("t"), ca.SX.sym("x", 2), ca.SX.sym("p", 2)
    f = ca.Function("f", [t, x, p], [num.rhs(t, x, p, ca.DM(0, 1))])
    grid = np.linspace(0, 3, 31)
    target = np.full((2, 30), 0.1)
    x_start = np.array([x0, 0.0])
    lg = loss_and_grad(f, x_start, num.p_default, grid, target, mode="forward",
                       integrator_options={"abstol": 1e-12, "reltol": 1e-12})
    k, h = 4.0, 1e-3  # central differences: O(h²) truncation, far above the integrator's noise
    num_x0 = compile_model("<test>", text=SATURATION.replace("coord x = 2", f"coord x = {x0}")).numeric
    fd = (_loss(num_x0, grid, k + h, target) - _loss(num_x0, grid, k - h, target)) / (2 * h)
    assert lg.grad_p[num.p_names.index("k")] == pytest.approx(fd, rel=1e-5)
    # and away from the switch the rhs derivative is the branch's: −x inside, −sign(x) outside
    J = ca.Function("J", [t, x, p], [ca.jacobian(f(t, x, p), p)])
    for xs in (0.3, -0.7, 1.5, -3.0):
        dk = float(J(0, [xs, 0.0], num.p_default)[1, 1])
        assert dk == pytest.approx(-xs if abs(xs) < 1 else -math.copysign(1.0, xs), abs=1e-14)


def test_command_line_step_input_stops_too():
    """`--input "F=if t < 1.05 then 0 else 2"`: the switch of a command-line input is located as well."""
    text = _model("""
        param k = 4.0, d = 0.3
        input F
        var x = 0, v = 0
        der(x) = v
        der(v) = F - k*x - d*v
    """)
    num = compile_model("<test>", text=text).numeric
    sig = input_from_expression(num, "F", "if t < 1.05 then 0 else 2")
    grid = time_grid(4.0, 0.1)
    r = simulate(num, grid, inputs={"F": sig}, rtol=1e-12, atol=1e-14)
    assert r.info["switch_times"] == pytest.approx([1.05], abs=1e-14)
    assert np.max(np.abs(r.x[:, 0] - step_response(grid, 1.05))) < 1e-8
    np.testing.assert_array_equal(r.u[:, 0], np.where(grid < 1.05, 0.0, 2.0))  # the input column as recorded


def test_bundled_step_pendulum_against_an_independent_integration():
    """models/step_pendulum.phm against scipy's DOP853 on the hand-written ODE m l² θ'' = τ − c θ' − m g l sin θ,
    integrated in two pieces split at t_on (the reference knows where the step is; pdsl finds it)."""
    from pathlib import Path

    from scipy.integrate import solve_ivp

    path = Path(__file__).resolve().parents[2] / "models" / "step_pendulum.phm"
    num = compile_model(path).numeric
    grid = time_grid(4.0, 0.1)
    r = simulate(num, grid, rtol=1e-12, atol=1e-14)
    assert r.info["switch_times"] == [1.0]
    m, l, g, c, t_on, tau0 = 1.0, 0.5, 9.81, 0.05, 1.0, 1.0

    def f(t, y, tau):
        return [y[1], (tau - c * y[1] - m * g * l * np.sin(y[0])) / (m * l * l)]

    first = solve_ivp(f, (0, t_on), [0.0, 0.0], args=(0.0,), method="DOP853", rtol=1e-13, atol=1e-14,
                      t_eval=grid[grid <= t_on])
    second = solve_ivp(f, (t_on, 4.0), first.y[:, -1], args=(tau0,), method="DOP853", rtol=1e-13, atol=1e-14,
                       t_eval=grid[grid > t_on])
    theta = np.concatenate([first.y[0], second.y[0]])
    assert np.max(np.abs(r.x[:, 0] - theta)) < 1e-8


def test_cli_reports_switches_and_state_conditions(tmp_path, capsys):
    from pathlib import Path

    from pdsl.cli.main import main

    model = Path(__file__).resolve().parents[2] / "models" / "step_pendulum.phm"
    assert main(["simulate", str(model), "--t-end", "2", "--dt", "0.1", "-o", str(tmp_path / "a.csv")]) == 0
    assert "restarted at the switches of conditions on t: t = 1\n" in capsys.readouterr().out
    sat = tmp_path / "sat.phm"
    sat.write_text(SATURATION)
    assert main(["simulate", str(sat), "--t-end", "1", "--dt", "0.1", "-o", str(tmp_path / "b.csv")]) == 0
    assert "switching surfaces located:" in capsys.readouterr().out  # located by default (LANGUAGE.md §11)
    assert main(["simulate", str(sat), "--t-end", "1", "--dt", "0.1", "-o", str(tmp_path / "b.csv"),
                 "--switches", "step-through"]) == 0
    assert "note: --switches step-through: 1 condition(s) on the state" in capsys.readouterr().out
