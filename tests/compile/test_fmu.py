"""`pdsl compile --target fmu`: FMI 2.0 ME + CS, validated and simulated by fmpy against `pdsl simulate`."""

from __future__ import annotations

import json
import shutil
import subprocess
import zipfile
from pathlib import Path

import numpy as np
import pytest
from fmpy import read_model_description, simulate_fmu
from fmpy.validation import validate_fmu

from pdsl.cli.main import main
from pdsl.data.csvio import read_table

MODELS = Path(__file__).resolve().parents[2] / "models"
pytestmark = pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None,
                                reason="an FMU needs a C compiler")


def _fmu(tmp_path, model: str, *extra: str) -> Path:
    out = tmp_path / f"{Path(model).stem}.fmu"
    assert main(["compile", str(MODELS / model), "--target", "fmu", "-o", str(out), *extra]) == 0
    return out


def _reference(tmp_path, model: str, t_end: float, *extra: str):
    csv = tmp_path / f"{Path(model).stem}.csv"
    assert main(["simulate", str(MODELS / model), "--t-end", str(t_end), "--dt", "0.01", "--rtol", "1e-10",
                 "--atol", "1e-12", "-o", str(csv), *extra]) == 0
    return read_table(csv)


def _bare(column: str) -> str:
    """A CSV header cell without its unit: `theta [rad]` -> `theta`."""
    return column.split(" [")[0]


def _worst(result, ref) -> float:
    """Largest error over every CSV column, relative to the column's scale (at least 1)."""
    assert len(result) == len(ref.data)
    worst = 0.0
    for k, name in enumerate(map(_bare, ref.columns[1:]), start=1):
        assert name in result.dtype.names, f"the FMU does not record CSV column {name}"
        col = ref.data[:, k]
        worst = max(worst, float(np.abs(result[name] - col).max() / max(1.0, np.abs(col).max())))
    return worst


@pytest.mark.parametrize("model, t_end", [("double_pendulum.phm", 5.0), ("cart_pole_ph.phm", 3.0)])
def test_fmu_validates_and_matches_simulate(tmp_path, model, t_end):
    fmu = _fmu(tmp_path, model)
    assert validate_fmu(str(fmu)) == []
    ref = _reference(tmp_path, model, t_end)
    me = simulate_fmu(str(fmu), fmi_type="ModelExchange", stop_time=t_end, output_interval=0.01,
                      relative_tolerance=1e-10)
    assert _worst(me, ref) <= 1e-6
    cs = simulate_fmu(str(fmu), fmi_type="CoSimulation", stop_time=t_end, output_interval=0.01,
                      start_values={"pdsl:cs_max_step": 2.5e-4})
    assert _worst(cs, ref) <= 1e-6
    # every recorded output is a CSV column, in CSV order
    assert list(me.dtype.names) == ["time", *map(_bare, ref.columns[1:])]


def test_fmu_model_description(tmp_path):
    fmu = _fmu(tmp_path, "double_pendulum.phm")
    md = read_model_description(str(fmu))
    names = [v.name for v in md.modelVariables]
    assert md.modelExchange is not None and md.coSimulation is not None
    assert md.modelExchange.providesDirectionalDerivative and md.coSimulation.providesDirectionalDerivative
    # states called der(q1) keep their names; derivatives do not clash with them
    assert [d.variable.name for d in md.derivatives] == ["d/dt(q1)", "d/dt(q2)", "d/dt(der(q1))", "d/dt(der(q2))"]
    assert [d.variable.derivative.name for d in md.derivatives] == ["q1", "q2", "der(q1)", "der(q2)"]
    params = {v.name: float(v.start) for v in md.modelVariables if v.causality == "parameter"}
    assert params["m1"] == 1.1722 and params["g"] == 9.81
    assert len(set(names)) == len(names)
    # dependencies read off the Jacobian sparsity: d/dt(q1) = der(q1) only
    dq1 = md.derivatives[0]
    assert [v.name for v in dq1.dependencies] == ["der(q1)"]


def test_fmu_exports_only_fmi_symbols(tmp_path):
    if shutil.which("nm") is None:
        pytest.skip("nm not available")
    fmu = _fmu(tmp_path, "double_pendulum.phm")
    with zipfile.ZipFile(fmu) as zf:
        libs = [n for n in zf.namelist() if n.startswith("binaries/")]
        assert len(libs) == 1
        zf.extract(libs[0], tmp_path)
        src = zf.read("sources/model.c").decode()
    symbols = subprocess.run(["nm", "-D", "--defined-only", str(tmp_path / libs[0])], capture_output=True,
                             text=True, check=True).stdout.split()
    exported = [s for s in symbols if s.startswith(("fmi", "pdsl", "casadi", "eval", "fwd"))]
    assert exported and all(s.startswith("fmi2") for s in exported)
    assert "pdsl_DoublePendulum_eval" in src and "pdsl_DoublePendulum_fwd" in src


def test_fmu_directional_derivative_matches_finite_differences(tmp_path):
    from fmpy import extract, instantiate_fmu

    fmu = _fmu(tmp_path, "double_pendulum.phm")
    md = read_model_description(str(fmu))
    unzip = extract(str(fmu))
    inst = instantiate_fmu(unzip, md, fmi_type="ModelExchange")
    try:
        inst.setupExperiment(startTime=0.0)
        inst.enterInitializationMode()
        inst.exitInitializationMode()
        inst.enterContinuousTimeMode()
        x = np.array([0.3, -0.2, 0.5, 0.1])
        states = [d.variable.derivative.valueReference for d in md.derivatives]
        ders = [d.variable.valueReference for d in md.derivatives]
        inst.setReal(states, list(x))
        seed = [0.0, 1.0, 0.0, 0.0]  # d/d q2
        jv = np.array(inst.getDirectionalDerivative(ders, states, seed))
        h = 1e-6
        inst.setReal(states, list(x + h * np.array(seed)))
        f_plus = np.array(inst.getReal(ders))
        inst.setReal(states, list(x - h * np.array(seed)))
        f_minus = np.array(inst.getReal(ders))
        fd = (f_plus - f_minus) / (2 * h)
        assert np.abs(jv - fd).max() < 1e-6 * max(1.0, np.abs(fd).max())
        assert abs(jv[1]) < 1e-14 and jv[2] != 0.0  # d/dt(q2) = der(q2) does not depend on q2
        inst.terminate()
    finally:
        inst.freeInstance()
        shutil.rmtree(unzip, ignore_errors=True)


def test_fmu_bakes_fitted_params(tmp_path):
    params = tmp_path / "params.json"
    params.write_text(json.dumps({"values": {"m1": 1.3, "m2": 0.7}}))
    fmu = _fmu(tmp_path, "spring_pendulum.phm", "--params", str(params))
    assert validate_fmu(str(fmu)) == []
    md = read_model_description(str(fmu))
    start = {v.name: float(v.start) for v in md.modelVariables if v.causality == "parameter"}
    assert start["m1"] == 1.3 and start["m2"] == 0.7
    # the Cartesian model's CSV shows velocities; the FMU records the same columns
    ref = _reference(tmp_path, "spring_pendulum.phm", 1.0, "--param", "m1=1.3", "--param", "m2=0.7")
    me = simulate_fmu(str(fmu), fmi_type="ModelExchange", stop_time=1.0, output_interval=0.01,
                      relative_tolerance=1e-10)
    assert list(me.dtype.names) == ["time", *map(_bare, ref.columns[1:])]
    assert _worst(me, ref) <= 1e-6


def test_fmu_units_inputs_and_relative_output(tmp_path, monkeypatch):
    """Declared units become FMI units; an exogenous input is an FMI input; -o may be relative."""
    model = tmp_path / "decay.phm"
    model.write_text('model Decay\n  param k = 2.0 {unit = "1/s"}\n  input u\n  var x = 1 {unit = "m"}\n'
                     '  der(x) = -k*x + u\nend\n')
    monkeypatch.chdir(tmp_path)
    assert main(["compile", str(model), "--target", "fmu", "-o", "decay.fmu"]) == 0
    assert validate_fmu("decay.fmu") == []
    md = read_model_description("decay.fmu")
    var = {v.name: v for v in md.modelVariables}
    assert var["x"].unit == "m" and var["k"].unit == "1/s" and var["u"].causality == "input"
    assert {u.name for u in md.unitDefinitions} >= {"m", "1/s"}
    csv = tmp_path / "decay.csv"
    assert main(["simulate", str(model), "--t-end", "1", "--dt", "0.1", "--rtol", "1e-10", "--atol", "1e-12",
                 "--input", "u=0.5", "-o", str(csv)]) == 0
    ref = read_table(csv)
    me = simulate_fmu("decay.fmu", fmi_type="ModelExchange", stop_time=1.0, output_interval=0.1,
                      relative_tolerance=1e-10, start_values={"u": 0.5})
    x = ref.data[:, [_bare(c) for c in ref.columns].index("x")]
    assert np.abs(me["x"] - x).max() <= 1e-6


STEP = """
model Step "a torque step at t_on: a switch in time"
  param c = 0.05, t_on = 1.2345, tau0 = 1.0
  coord theta = 0.0
  input tau = if t < t_on then 0 else tau0
  lagrangian der(theta)^2/8 + 4.905*cos(theta)
  force tau - c*der(theta) on theta
end
"""


def test_fmu_time_events(tmp_path):
    """A condition on t: ME reports the switch as a time event, CS steps to it; both match `simulate`,
    which stops and restarts there (a plain RK4 step across the switch is off by O(h))."""
    model = tmp_path / "step.phm"
    model.write_text(STEP)
    fmu = tmp_path / "step.fmu"
    assert main(["compile", str(model), "--target", "fmu", "-o", str(fmu)]) == 0
    assert validate_fmu(str(fmu)) == []
    csv = tmp_path / "step.csv"
    assert main(["simulate", str(model), "--t-end", "3", "--dt", "0.01", "--rtol", "1e-10", "--atol", "1e-12",
                 "-o", str(csv)]) == 0
    ref = read_table(csv)
    me = simulate_fmu(str(fmu), fmi_type="ModelExchange", stop_time=3.0, output_interval=0.01,
                      relative_tolerance=1e-10)
    assert 1.2345 in me["time"]  # the time event, recorded
    me = me[np.isin(me["time"], ref.data[:, 0]) & np.concatenate([[True], np.diff(me["time"]) > 0])]
    assert _worst(me, ref) <= 1e-6
    cs = simulate_fmu(str(fmu), fmi_type="CoSimulation", stop_time=3.0, output_interval=0.01)
    assert _worst(cs, ref) <= 1e-8


def test_fmu_user_errors(tmp_path, capsys):
    out = tmp_path / "dp.zip"
    assert main(["compile", str(MODELS / "double_pendulum.phm"), "--target", "fmu", "-o", str(out)]) == 2
    assert "ending in .fmu" in capsys.readouterr().err
    assert not out.exists()
    dae = tmp_path / "dae.phm"
    dae.write_text("model D\n  var x = 1\n  var z = 1\n  der(x) = -z\n  0 = z - x^3 - z^3\nend\n")
    code = main(["compile", str(dae), "--target", "fmu", "-o", str(tmp_path / "d.fmu")])
    err = capsys.readouterr().err
    assert code == 2 and "NotYetSupported" in err and "dae.phm:1" in err
    assert not (tmp_path / "d.fmu").exists() and not list(tmp_path.glob(".d.fmu*"))


def test_fmu_of_a_mixed_model(tmp_path):
    """LANGUAGE.md §10 A5: a rigid rotor (Cartesian, constraint multipliers) under a PID block (plain equations)."""
    model, extra = "composition/a5_controlled_rotor.phm", ("--model", "ControlledRotor")
    fmu = _fmu(tmp_path, model, *extra)
    assert validate_fmu(str(fmu)) == []
    ref = _reference(tmp_path, model, 3.0, *extra)
    me = simulate_fmu(str(fmu), fmi_type="ModelExchange", stop_time=3.0, output_interval=0.01, relative_tolerance=1e-10)
    assert _worst(me, ref) <= 1e-6
    cs = simulate_fmu(str(fmu), fmi_type="CoSimulation", stop_time=3.0, output_interval=0.01,
                      start_values={"pdsl:cs_max_step": 2.5e-4})
    assert _worst(cs, ref) <= 1e-6
    t = me["time"]
    np.testing.assert_allclose(me["theta"], 1 + 2.5 * np.exp(-t) - 8 * np.exp(-2 * t) + 4.5 * np.exp(-3 * t), atol=1e-6)
