"""Plots read by their artists (not pixels): the energy drift axis, outputs and port powers, column choice and ``ax=``,
planar paths and phase portraits, against the run's own columns."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("matplotlib")

import pdsl  # noqa: E402
from pdsl.diagnostics import PdslError  # noqa: E402
from pdsl.sim.plot import new_figure, path_figure, phase_figure, phase_pairs, trajectory_figure  # noqa: E402

MODELS = Path(__file__).resolve().parents[2] / "models"


@pytest.fixture(scope="module")
def double_pendulum():
    return pdsl.load(MODELS / "double_pendulum.phm").simulate(3, 0.01, rtol=1e-6)


def _panel(fig, ylabel):
    return next(a for a in fig.axes if a.get_ylabel() == ylabel)


def test_energy_axis_shows_the_drift_without_an_offset(double_pendulum):
    run = double_pendulum
    fig = trajectory_figure(run.result, title="dp")
    ax = _panel(fig, "energy")
    (line,) = [ln for ln in ax.get_lines() if ln.get_label() == "E(t) − E(0)"]
    E = run.result.energy
    np.testing.assert_array_equal(line.get_ydata(), E - E[0])
    assert abs(E[0]) > 20 and 0 < np.max(np.abs(E - E[0])) < 1e-3  # a tiny drift on a large energy
    fig.canvas.draw()
    offset = ax.yaxis.get_offset_text().get_text()
    assert "2.18" not in offset and "21.8" not in offset  # no `1e−7−2.18225083e1`: at most a scale such as 1e−6
    assert ax.yaxis.get_major_formatter().get_useOffset() is False
    assert "E(0) = -21.8225" in ax.get_title()
    assert ax.get_legend().get_texts()[0].get_text() == "E(t) − E(0)"


def test_outputs_are_plotted():
    run = pdsl.load(MODELS / "step_pendulum.phm").simulate(2, 0.05)
    fig = trajectory_figure(run.result)
    labels = [a.get_ylabel() for a in fig.axes]
    assert {"x [m]", "y [m]", "tau_smooth [N*m]"} <= set(labels)
    np.testing.assert_array_equal(_panel(fig, "x [m]").get_lines()[0].get_ydata(), run["x"])


def test_power_columns_share_one_panel(tmp_path):
    from pdsl.backend.functions import to_casadi
    from pdsl.cli.simulate_cmd import _with_power_outputs
    from pdsl.pipeline import CompileOptions, compile_model
    from pdsl.sim.simulate import input_from_expression, simulate, time_grid

    c = compile_model(MODELS / "mass_spring_damper.phm", CompileOptions(numeric=False))
    num = to_casadi(_with_power_outputs(c.model, c.system))  # what `simulate --power` integrates
    res = simulate(num, time_grid(2.0, 0.05), inputs={"F": input_from_expression(num, "F", "sin(t)")})
    fig = trajectory_figure(res)
    power = _panel(fig, "port power")
    legend = [t.get_text() for t in power.get_legend().get_texts()]
    assert legend == [n for n in res.y_names if n.startswith("power(")] and len(legend) == 4
    k = list(res.y_names).index("power(damper)")
    np.testing.assert_array_equal(power.get_lines()[legend.index("power(damper)")].get_ydata(), res.y[:, k])
    assert "H" in [a.get_ylabel() for a in fig.axes]


def test_chosen_columns_and_ax(double_pendulum):
    run = double_pendulum
    fig = run.plot(["q2", "energy"])
    assert [a.get_ylabel() for a in fig.axes] == ["q2", "E(t) − E(0)"]
    np.testing.assert_array_equal(fig.axes[0].get_lines()[0].get_ydata(), run["q2"])
    ax = new_figure().subplots()
    assert run.plot(["q1", "der(q1)"], ax=ax) is ax.figure
    assert [ln.get_label() for ln in ax.get_lines()] == ["q1", "der(q1)"]
    with pytest.raises(PdslError) as e:
        run.plot(["q3"])
    assert e.value.diagnostics[0].code == "BadOption" and "q1" in e.value.diagnostics[0].hint


def test_planar_path_of_the_rolling_disk():
    run = pdsl.load(MODELS / "rolling_disk.phm").simulate(4, 0.02, init={"der(theta)": 1.7, "der(phi)": 0.6})
    fig = run.plot_path("x", "y")
    line = fig.axes[0].get_lines()[0]
    np.testing.assert_array_equal(line.get_xdata(), run["x"])
    np.testing.assert_array_equal(line.get_ydata(), run["y"])
    # the D4 closed form: the contact point runs on a circle of radius R·θ̇/φ̇ = 0.3·1.7/0.6
    r = 0.3 * 1.7 / 0.6
    centre = np.array([0.0, r])
    np.testing.assert_allclose(np.hypot(run["x"] - centre[0], run["y"] - centre[1]), r, rtol=1e-6)
    assert fig.axes[0].get_aspect() == 1.0
    # without columns: the paths of the drawn points (the contact point)
    traced = run.plot_path().axes[0].get_lines()[0]
    np.testing.assert_allclose(traced.get_xdata(), run["x"], atol=1e-14)


def test_phase_portraits(double_pendulum):
    run = double_pendulum
    assert phase_pairs(run.result) == [("q1", "der(q1)"), ("q2", "der(q2)")]
    fig = run.plot_phase()
    assert len(fig.axes) == 2 and fig.axes[1].get_xlabel() == "q2" and fig.axes[1].get_ylabel() == "der(q2)"
    np.testing.assert_array_equal(fig.axes[0].get_lines()[0].get_ydata(), run["der(q1)"])
    ax = new_figure().subplots()
    phase_figure(run.result, pairs=("q1", "der(q1)"), ax=ax)
    assert len(ax.get_lines()) == 3  # the path, its start and its end
    hh = pdsl.load(MODELS / "henon_heiles.phm").simulate(1, 0.1)
    assert phase_pairs(hh.result, hh.model.system) == [("x", "px"), ("y", "py")]
    p2 = pdsl.load(MODELS / "pendulum2.phm").simulate(0.5, 0.1, init={"b[1].x": 0.5})
    assert ("b[1].x", "b[1].vx") in phase_pairs(p2.result)


def test_path_needs_both_columns(double_pendulum):
    with pytest.raises(PdslError):
        path_figure(double_pendulum.result, None, "q1")
    # no picture given and no columns x, y: it asks for them
    with pytest.raises(PdslError) as e:
        path_figure(double_pendulum.result)
    assert "give x and y" in e.value.diagnostics[0].message
