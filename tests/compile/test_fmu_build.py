"""FMU builds (issue 34): a large linear-implicit model solved at run time (small C, same motion), the default
experiment, Modelica unit strings with their base units, and progress lines for long builds."""

from __future__ import annotations

import shutil
import stat
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


def _bare(column: str) -> str:
    return column.split(" [")[0]


@pytest.fixture(scope="module")
def motor_pendulum(tmp_path_factory):
    """The composed motor–pendulum (LANGUAGE.md §10): 14 states, 35 unknowns in A·w = b (interface multiplier)."""
    out = tmp_path_factory.mktemp("fmu") / "mp.fmu"
    assert main(["compile", str(MODELS / "composition" / "a3_motor_pendulum.phm"), "--target", "fmu", "-o", str(out)]) == 0
    return out


def test_large_implicit_model_is_assembled_and_solved_at_run_time(motor_pendulum, tmp_path):
    with zipfile.ZipFile(motor_pendulum) as zf:
        src = zf.read("sources/model.c").decode()
    # 368,377 bytes when A·w = b was solved symbolically (block by block); the sparse A, b and CasADi's QR instead
    assert len(src) < 120_000 and "casadi_qr" in src
    assert validate_fmu(str(motor_pendulum)) == []
    csv = tmp_path / "ref.csv"
    assert main(["simulate", str(MODELS / "composition" / "a3_motor_pendulum.phm"), "--t-end", "2", "--dt", "0.01",
                 "--rtol", "1e-10", "--atol", "1e-12", "--input", "V=1", "-o", str(csv)]) == 0
    ref = read_table(csv)
    me = simulate_fmu(str(motor_pendulum), fmi_type="ModelExchange", stop_time=2.0, output_interval=0.01,
                      relative_tolerance=1e-10, start_values={"V": 1.0})
    cs = simulate_fmu(str(motor_pendulum), fmi_type="CoSimulation", stop_time=2.0, output_interval=0.01,
                      start_values={"V": 1.0, "pdsl:cs_max_step": 5e-4})
    for run in (me, cs):
        assert len(run) == len(ref.data) and "theta" in run.dtype.names
        for k, name in enumerate(map(_bare, ref.columns[1:]), start=1):
            if name in run.dtype.names:
                col = ref.data[:, k]
                assert np.abs(run[name] - col).max() <= 1e-6 * max(1.0, np.abs(col).max()), name
    assert np.ptp(me["theta"]) > 0.1  # the motor moves the pendulum


def test_directional_derivative_through_the_run_time_solve(motor_pendulum):
    from fmpy import extract, instantiate_fmu

    md = read_model_description(str(motor_pendulum))
    unzip = extract(str(motor_pendulum))
    inst = instantiate_fmu(unzip, md, fmi_type="ModelExchange")
    try:
        inst.setupExperiment(startTime=0.0)
        inst.enterInitializationMode()
        inst.exitInitializationMode()
        inst.enterContinuousTimeMode()
        states = [d.variable.derivative.valueReference for d in md.derivatives]
        ders = [d.variable.valueReference for d in md.derivatives]
        x = np.array(inst.getReal(states))
        rng = np.random.default_rng(7)
        seed = rng.normal(size=len(states))
        jv = np.array(inst.getDirectionalDerivative(ders, states, list(seed)))
        h = 1e-6
        inst.setReal(states, list(x + h * seed))
        f_plus = np.array(inst.getReal(ders))
        inst.setReal(states, list(x - h * seed))
        f_minus = np.array(inst.getReal(ders))
        fd = (f_plus - f_minus) / (2 * h)
        assert np.abs(jv - fd).max() < 1e-5 * max(1.0, np.abs(fd).max())
        inst.terminate()
    finally:
        inst.freeInstance()
        shutil.rmtree(unzip, ignore_errors=True)


def test_default_experiment(motor_pendulum):
    exp = read_model_description(str(motor_pendulum)).defaultExperiment
    assert (float(exp.startTime), float(exp.stopTime), float(exp.stepSize), float(exp.tolerance)) == (0.0, 10.0, 0.01, 1e-8)


def test_units_in_modelica_form_experiment_and_progress(tmp_path, capsys):
    from pdsl.pipeline import CompileOptions, compile_model
    from pdsl.resolve.units import parse_unit

    out = tmp_path / "step.fmu"
    assert main(["-v", "compile", str(MODELS / "step_pendulum.phm"), "--target", "fmu", "-o", str(out),
                 "--t-end", "5", "--dt", "0.02"]) == 0
    err = capsys.readouterr().err
    lines = [ln.strip() for ln in err.splitlines() if ln.strip().startswith("[")]
    phases = [ln.split("] ", 1)[1].split(":")[0] for ln in lines]
    assert phases[:3] == ["functions", "C code", "compiling"] and phases[-1] == "written"
    assert phases[-2].startswith("compiled in") and " -O2 " in lines[2]
    assert validate_fmu(str(out)) == []
    md = read_model_description(str(out))
    var = {v.name: v for v in md.modelVariables}
    assert var["g"].unit == "m/s2" and var["c"].unit == "N.m.s" and var["tau0"].unit == "N.m"
    assert var["theta"].unit == "rad" and var["der(theta)"].unit == "rad/s" and var["d/dt(der(theta))"].unit == "rad/s2"
    # each unit's base units, against the resolver's own reading of the model's unit texts
    model = compile_model(MODELS / "step_pendulum.phm", CompileOptions(numeric=False)).system
    texts = dict(model.units)
    units = {u.name: u for u in md.unitDefinitions}
    for name in ("g", "c", "tau0", "l", "m"):
        d = parse_unit(texts[name])
        base = units[var[name].unit].baseUnit
        got = [getattr(base, b) for b in ("kg", "m", "s", "A", "K", "mol", "cd")]
        assert got == [int(k) for k in d.e], name
    assert units["rad"].baseUnit.rad == 1
    exp = md.defaultExperiment
    assert (float(exp.stopTime), float(exp.stepSize)) == (5.0, 0.02)
    res = simulate_fmu(str(out))  # the default experiment: to t = 5 (fmpy's own default is 1)
    assert res["time"][-1] == pytest.approx(5.0) and np.allclose(np.diff(res["time"])[:5], 0.02)


def test_no_progress_without_a_terminal_or_verbose(tmp_path, capsys):
    model = tmp_path / "decay.phm"
    model.write_text("model Decay\n  var x = 1\n  der(x) = -x\nend\n")
    assert main(["compile", str(model), "--target", "fmu", "-o", str(tmp_path / "d.fmu")]) == 0
    assert "compiling" not in capsys.readouterr().err
    assert main(["compile", str(model), "--target", "c", "-o", str(tmp_path / "c"), "--t-end", "3"]) == 2
    assert "BadOption" in capsys.readouterr().err


def test_a_slow_compiler_is_reported_while_it_runs(tmp_path, monkeypatch):
    """A compiler that runs longer than the heartbeat: a `still compiling` line in between (not a wall-clock bound:
    the compiler sleeps 0.6 s, the heartbeat is 0.1 s)."""
    from pdsl.compile import fmu
    from pdsl.pipeline import compile_model

    cc = shutil.which("cc") or shutil.which("gcc")
    slow = tmp_path / "slowcc"
    slow.write_text(f"#!/bin/sh\nsleep 0.6\nexec {cc} \"$@\"\n")
    slow.chmod(slow.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setattr(fmu, "_HEARTBEAT_S", 0.1)
    lines = []
    num = compile_model("d.phm", text="model Decay\n  var x = 1\n  der(x) = -x\nend\n").numeric
    fmu.write_fmu(num, tmp_path / "d.fmu", cc=str(slow), progress=lines.append)
    assert any("still compiling" in ln for ln in lines) and lines[-1].endswith(")") and "written" in lines[-1]
    assert all(ln.startswith("[") and " s] " in ln for ln in lines)
