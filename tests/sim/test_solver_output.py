"""What CasADi/SUNDIALS print never reaches the user raw (issue 26, pdsl.quiet).

A finite-time blow-up (x' = x², x(0) = 1, escapes at t = 1) used to print ~750,000 CasADi warning lines over
~17 s before pdsl's located error; a Coulomb-friction model chattering on sign() left a stray unlocated
``At t = ..., mxstep steps taken`` line. Now: one located error, one note, a bounded amount of work. The work
is measured by what the integrator was allowed (its max_num_steps), never in seconds.
"""

from __future__ import annotations

import ctypes
import sys

import casadi as ca
import numpy as np
import pytest

from pdsl import quiet
from pdsl.cli.main import main
from pdsl.sim import simulate as S

BLOWUP = """model Blowup "x' = x^2 from x = 1 escapes at t = 1"
  var x = 1.0
  der(x) = x^2
end
"""

COULOMB = """model Coulomb "a mass on a spring with Coulomb friction: sticks at once, sign(v) chatters"
  param m = 1.0, mu = 0.5, g = 9.81, k = 1.0
  var x = 1.0
  var v = 0.0
  der(x) = v
  der(v) = (-k*x - mu*m*g*sign(v))/m
end
"""


@pytest.fixture
def budgets(monkeypatch):
    """The max_num_steps of every CVODES/IDAS integrator built."""
    from pdsl.sim import dispatch, runs

    seen: list[int] = []
    real = runs._sundials

    def spy(*args, **kw):
        steps = kw.get("steps", args[11] if len(args) > 11 else S.STEPS_MAX)
        seen.append(steps)
        return real(*args, **kw)

    for module in (runs, dispatch):  # where it is defined, and where the dispatcher bound it
        monkeypatch.setattr(module, "_sundials", spy)
    S._INTEGRATORS.clear()
    return seen


def _write(tmp_path, text):
    model = tmp_path / "m.phm"
    model.write_text(text, encoding="utf-8")
    return model


def _run(tmp_path, text, *extra):
    return main(["simulate", str(_write(tmp_path, text)), "-o", str(tmp_path / "out.csv"), "--compile", "no", *extra])


@pytest.mark.parametrize("integrator", ["cvodes", "cvodes-bdf"])
def test_blowup_is_located_quiet_and_stops_at_the_first_budget(tmp_path, capfd, budgets, integrator):
    code = _run(tmp_path, BLOWUP, "--t-end", "2", "--integrator", integrator)
    out, err = capfd.readouterr()
    assert code == 2
    lines = err.splitlines()
    assert len(lines) < 30, err[:2000]
    assert lines[0].startswith(str(tmp_path / "m.phm") + ":1:1: error[IntegratorFailure]")
    assert "at t = 1:" in lines[0] and "t + h = t" in lines[0] and "escapes to infinity" in lines[0]
    assert "Inf detected" not in err  # CasADi's per-evaluation warnings are off
    # one note, after the error: what was suppressed
    notes = [ln for ln in lines if ln.startswith("note:")]
    assert len(notes) == 1 and lines[-1] == notes[0] and "-vv" in notes[0]
    # the stall is seen after the first, small budget: no second run with the large one
    assert budgets and set(budgets) == {S.STEPS_FIRST}
    assert out == ""


def test_chattering_sign_is_located_with_no_stray_line(tmp_path, capfd, budgets):
    code = _run(tmp_path, COULOMB, "--t-end", "10", "--switches", "step-through")
    _, err = capfd.readouterr()
    assert code == 2
    lines = err.splitlines()
    assert lines[0].startswith(str(tmp_path / "m.phm") + ":1:1: error[IntegratorFailure]")
    assert "steps" in lines[0] and "towards the output time 0.01" in lines[0]
    # the cause, measured on the state near the failure: the switching surface and the field on both sides
    assert "switching surface of `sign(" in lines[0] and "points into the surface from both sides" in lines[0]
    # the solver's own line is only quoted in the note, never on a line of its own
    assert not any(ln.startswith("At t =") for ln in lines)
    assert lines[-1].startswith("note:") and "mxstep" in lines[-1]
    assert set(budgets) == {S.STEPS_FIRST}  # projected hopeless: not rerun with STEPS_MAX


def test_sticking_is_slid_on_by_default(tmp_path, capfd):
    """The same model with the switching surface located (the default): the block sticks where the spring cannot
    overcome friction (k·x = 1 < mu·m·g = 4.9), Filippov's sliding mode at v = 0; exit 0."""
    code = _run(tmp_path, COULOMB, "--t-end", "10")
    out, _ = capfd.readouterr()
    assert code == 0 and "sliding phase" in out
    data = np.loadtxt(tmp_path / "out.csv", delimiter=",", skiprows=1)
    assert np.allclose(data[:, 1], 1.0, atol=1e-9) and np.allclose(data[:, 2], 0.0, atol=1e-9)


def test_minus_vv_lets_the_solver_speak(tmp_path, capfd, budgets):
    try:
        code = main(["-vv", "simulate", str(_write(tmp_path, COULOMB)), "-o", str(tmp_path / "out.csv"),
                     "--compile", "no", "--t-end", "10", "--switches", "step-through"])
    finally:
        quiet.set_passthrough(False)
    _, err = capfd.readouterr()
    assert code == 2
    assert any(ln.startswith("At t =") and "mxstep" in ln for ln in err.splitlines())
    assert "note:" not in err  # nothing was suppressed
    assert set(budgets) == {S.STEPS_FIRST}  # the same reading of the solver's messages as without -vv


def test_implicit_fixed_step_blowup_is_a_located_error(tmp_path, capfd):
    """The stage solve of implicit midpoint fails: a located error (it was an internal error, exit 1, after
    a dump of the rootfinder's inputs)."""
    code = _run(tmp_path, BLOWUP, "--t-end", "2", "--integrator", "midpoint")
    _, err = capfd.readouterr()
    assert code == 2, err
    assert "error[IntegratorFailure]" in err and "stage equations did not converge" in err
    assert "Input 0" not in err.split("note:")[0]
    assert len(err.splitlines()) < 30


def test_a_successful_run_prints_no_note(tmp_path, capfd):
    model = tmp_path / "osc.phm"
    model.write_text("model Osc\n  var x = 1.0\n  var v = 0.0\n  der(x) = v\n  der(v) = -x\nend\n", encoding="utf-8")
    assert main(["simulate", str(model), "--t-end", "1", "-o", str(tmp_path / "o.csv"), "--compile", "no"]) == 0
    _, err = capfd.readouterr()
    assert "note:" not in err


# ------------------------------------------------------------------------------------------- the facility
def _noisy_integrator():
    x = ca.SX.sym("x")
    return ca.integrator("F", "cvodes", {"x": x, "ode": x**2}, 0, [0.5, 1.0, 2.0], {"max_num_steps": 3000})


def test_capture_takes_c_and_casadi_output_and_lets_python_through(capfd):
    F = _noisy_integrator()
    quiet.take_note()
    print("before", flush=True)
    with quiet.capture() as got:
        print("pdsl's own line")  # Python-level writes of pdsl still reach the terminal
        sys.stderr.write("pdsl's own error line\n")
        with pytest.raises(RuntimeError):
            F(x0=1.0)  # SUNDIALS' messages through CasADi's Python bindings
        ctypes.CDLL(None).printf(b"a C printf line\n")  # C stdio, fd 1
    print("after", flush=True)
    out, err = capfd.readouterr()
    assert out == "before\npdsl's own line\nafter\n"
    assert err == "pdsl's own error line\n"
    assert "t + h = t" in got.text() and "mxstep" in got.text() and "a C printf line" in got.text()
    assert got.lines >= 3
    note = quiet.take_note()
    assert note.startswith(f"note: the numerical solvers printed {got.lines} lines") and "-vv" in note
    assert quiet.take_note() is None  # summarised once


def test_capture_is_bounded_and_counts_lines(capfd):
    libc = ctypes.CDLL(None)
    with quiet.capture(tally=False) as got:
        for k in range(20000):
            libc.printf(b"line %d of many, padded to make the output about a megabyte........\n", k)
    capfd.readouterr()
    assert got.lines == 20000
    assert got.chars > 1_000_000
    assert len(got.head) <= quiet.HEAD_CHARS and len(got.tail) <= quiet.TAIL_CHARS
    assert got.first_line().startswith("line 0 of many") and got.last_line().startswith("line 19999 of many")
    assert quiet.take_note() is None  # tally=False: not counted


def test_capture_nests_and_releases(capfd):
    libc = ctypes.CDLL(None)
    quiet.take_note()
    with quiet.capture() as outer:
        libc.printf(b"outer\n")
        with quiet.capture(tally=False) as inner:  # a probe inside a run (pdsl.sim.runs._probe)
            libc.printf(b"inner\n")
            with quiet.released():
                libc.printf(b"released\n")  # e.g. an iteration callback's progress bar
                libc.fflush(None)
        libc.printf(b"outer again\n")
    out, _ = capfd.readouterr()
    assert out == "released\n"
    assert inner.text() == "inner\n"
    assert outer.text() == "outer\nouter again\n"  # what the nested call printed is its own
    assert quiet.take_note().startswith("note: the numerical solvers printed 2 lines")  # not the probe's
