"""The energy balance integrates the power with the states (issue 30): a CVODES/IDAS quadrature or one more state
of a fixed-step scheme, so that E(t) − E(0) − ∫P dt measures the simulation, not the output grid."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pdsl.pipeline import compile_model
from pdsl.sim.simulate import energy_balance, input_from_expression, simulate, time_grid

MODELS = Path(__file__).resolve().parents[2] / "models"


@pytest.fixture(scope="module")
def msd():
    num = compile_model(MODELS / "mass_spring_damper.phm", cache=False).numeric
    return num, {"F": input_from_expression(num, "F", "sin(2*t)")}


def _relative(res, ref, integral):
    exchanged = float(np.sum(0.5 * (np.abs(res.power[1:]) + np.abs(res.power[:-1])) * np.diff(res.t)))
    _, residual = energy_balance(res.t, res.energy, res.power, integral)
    trajectory = float(np.max(np.abs(res.x - ref.x).max(0) / np.abs(ref.x).max(0)))
    return float(np.abs(residual).max()) / exchanged, trajectory


@pytest.mark.parametrize("integrator, how", [
    ("cvodes", "CVODES quadrature"),
    ("auto", "DOP853 on the states' steps, outside the error test"),  # the default (pdsl.sim.auto)
])
@pytest.mark.parametrize("samples", [1001, 51])
def test_balance_is_within_ten_times_the_trajectory_error_on_any_grid(msd, samples, integrator, how):
    num, inputs = msd
    grid = time_grid(10.0, 10.0 / (samples - 1))
    kw = dict(x0={"q": 1.0}, inputs=inputs, compile="no")
    res = simulate(num, grid, rtol=1e-8, power_integral=True, integrator=integrator, **kw)
    ref = simulate(num, grid, rtol=1e-13, integrator="cvodes", **kw)
    assert res.info["power_integral"] == how
    assert res.power_integral[0] == 0.0 and res.power_integral.shape == res.t.shape
    balance, trajectory = _relative(res, ref, res.power_integral)
    assert balance <= 10 * trajectory
    simpson, _ = _relative(res, ref, None)
    if samples == 51:  # Simpson on a coarse output grid measures its own quadrature, not the run
        assert simpson > 1e3 * trajectory
    if integrator == "auto":  # outside the error test: the states are those of a run without the integral, bit for bit
        assert np.array_equal(res.x, simulate(num, grid, rtol=1e-8, integrator=integrator, **kw).x)


def test_without_power_integral_nothing_changes(msd):
    num, inputs = msd
    grid = time_grid(2.0, 0.01)
    res = simulate(num, grid, x0={"q": 1.0}, inputs=inputs, compile="no")
    assert res.power_integral is None and "power_integral" not in res.info


def test_fixed_step_scheme_carries_the_integral_as_a_state(msd):
    num, inputs = msd
    grid = time_grid(2.0, 0.01)
    kw = dict(x0={"q": 1.0}, inputs=inputs, integrator="rk4", substeps=4)
    res = simulate(num, grid, power_integral=True, **kw)
    plain = simulate(num, grid, **kw)
    assert res.info["power_integral"] == "one more state of rk4"
    assert np.array_equal(res.x, plain.x)  # the states do not depend on the extra one
    _, residual = energy_balance(res.t, res.energy, res.power, res.power_integral)
    assert np.abs(residual).max() < 1e-9  # rk4 integrates E's derivative with the states: consistent to O(h⁴)


def test_cli_line_says_how_the_integral_was_made(tmp_path, capsys):
    from pdsl.cli.main import main

    out = tmp_path / "dc.csv"
    code = main(["simulate", str(MODELS / "dc_motor.phm"), "--t-end", "1", "--input", "V=1+0.5*sin(3*t)",
                 "--compile", "no", "--no-cache", "--integrator", "cvodes", "-o", str(out)])
    text = capsys.readouterr().out
    assert code == 0
    assert "∫ integrated with the states: CVODES quadrature" in text
    code = main(["simulate", str(MODELS / "dc_motor.phm"), "--t-end", "1", "--input", "V=1+0.5*sin(3*t)",
                 "--compile", "no", "--no-cache", "-o", str(out)])
    text = capsys.readouterr().out
    assert code == 0
    assert "∫ integrated with the states: DOP853 on the states' steps, outside the error test" in text
