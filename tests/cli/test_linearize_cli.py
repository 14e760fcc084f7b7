"""`pdsl linearize` on the command line: results, files, and bad input as located errors with exit 2."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import numpy as np
import pytest

import pdsl
from pdsl.cli.main import main

REPO = Path(__file__).resolve().parents[2]
MODELS = REPO / "models"


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(["linearize", *argv])
    out = capsys.readouterr()
    assert "Traceback" not in out.err and "internal error" not in out.err, out.err
    return code, out.out, out.err


def test_unknown_names_are_errors_with_what_they_are(capsys):
    code, _, err = _run(capsys, str(MODELS / "cart_pole.phm"), "--at", "thta=1", "--at", "M=2", "--input", "F=1")
    assert code == 2
    assert err.count("error[BadOperatingPoint]") == 3
    assert "--at thta: `thta` is not a state of CartPole" in err and "hint: states: x, theta, der(x), der(theta)" in err
    assert "`M` is a parameter: give it with --param M=VALUE" in err
    assert "--open-loop makes it a free input" in err


def test_a_point_on_a_switching_surface_is_located_at_its_equation(capsys):
    code, _, err = _run(capsys, str(MODELS / "friction_oscillator.phm"), "--at", "v=vb")
    assert code == 2
    first = err.splitlines()[0]
    assert re.match(r".*friction_oscillator\.phm:11:3: error\[OnSwitchingSurface\]: .*`sign\(-v \+ vb\)`", first), err
    assert "mu*m*g*sign(vb - v)" in err  # the source line is quoted
    code, out, _ = _run(capsys, str(MODELS / "friction_oscillator.phm"), "--at", "v=0.05")  # beside it: fine
    assert code == 0 and "eigenvalues" in out


DRIFT = """\
model Drift
  param a = 1
  var x = 0, y = 1
  input u
  der(x) = a
  der(y) = -y + u
end
"""


def test_trim_without_a_steady_state_is_located_at_the_state(capsys, tmp_path):
    path = tmp_path / "drift.phm"
    path.write_text(DRIFT, encoding="utf-8")
    code, _, err = _run(capsys, str(path), "--trim")
    assert code == 2
    assert f"{path}:3:7: error[TrimFailed]: --trim: no steady state of Drift found" in err
    assert "der(x) = 1" in err and "held fixed: nothing" in err
    code, _, err = _run(capsys, str(path), "--at", "y=2", "--trim", "--input", "u=1")
    assert code == 2 and "held fixed: y, u" in err


def test_a_point_that_is_not_an_equilibrium_is_a_warning_with_the_rates(capsys, tmp_path):
    path = tmp_path / "drift.phm"
    path.write_text(DRIFT, encoding="utf-8")
    code, out, err = _run(capsys, str(path), "--at", "y=3")
    assert code == 0
    assert "warning[NotAnEquilibrium]: the operating point is not an equilibrium: der(y) = -3, der(x) = 1" in err
    assert "NOT an equilibrium" in out


def test_files_hold_the_result_at_full_precision(capsys, tmp_path):
    out_dir = tmp_path / "lin"
    code, out, err = _run(capsys, str(MODELS / "cart_pole.phm"), "--at", "theta=pi", "--trim", "--open-loop",
                          "-o", str(out_dir))
    assert code == 0
    assert "note: the steady state does not determine x" in err
    lin = pdsl.load(MODELS / "cart_pole.phm").linearize(at={"theta": "pi"}, trim=True, open_loop=True)
    data = json.loads((out_dir / "linearization.json").read_text(encoding="utf-8"))
    assert data["states"] == list(lin.states) and data["inputs"] == ["F"] and data["open_loop"] is True
    for key in "ABCD":
        assert np.array_equal(np.array(data[key], dtype=float).reshape(getattr(lin, key).shape), getattr(lin, key))
    assert data["eigenvalues"] == [[v.real, v.imag] for v in lin.eigenvalues]  # [re, im], every digit
    assert data["natural_frequency"] == list(lin.natural_frequency)
    assert data["damping"][1] is None and data["natural_frequency"][1] == 0.0  # λ = 0: no damping ratio
    assert data["operating_point"]["undetermined"] == ["x"] and data["operating_point"]["states"]["theta"] == np.pi
    npz = np.load(out_dir / "linearization.npz")
    assert np.array_equal(npz["A"], lin.A) and np.array_equal(npz["eigenvalues"], lin.eigenvalues)
    assert list(npz["states"]) == list(lin.states)
    assert sorted(p.name for p in out_dir.iterdir()) == ["linearization.json", "linearization.npz"]  # no temporaries


def test_symbolic_formats(capsys):
    code, out, _ = _run(capsys, str(MODELS / "cart_pole.phm"), "--at", "theta=pi", "--open-loop", "--format", "latex")
    assert code == 0
    assert r"\begin{equation} A = \left[\begin{matrix}" in out
    assert r"\frac{g l m \left(M + m\right)}{J M + J m + M l^{2} m}" in out
    code, out, _ = _run(capsys, str(MODELS / "dc_motor.phm"), "--format", "markdown")
    assert code == 0 and r"| `phi` | $- \frac{R_{a}}{L_{a}}$ | $- \frac{K}{J}$ |" in out


def test_large_models_get_numeric_entries_in_the_symbolic_formats(capsys):
    code, out, err = _run(capsys, str(MODELS / "slider_crank_cartesian.phm"), "--trim", "--format", "markdown")
    assert code == 0 and "at most 12 states" in err
    assert "Dependent states (coordinate partitioning)" in out and "## Eigenvalues" in out


def test_completion_knows_the_command():
    from pdsl.cli.completion import script
    from pdsl.cli.main import build_parser

    bash = script(build_parser(), "bash")
    assert "linearize" in bash and "--open-loop" in bash and "--trim" in bash


def _doc_commands() -> list[str]:
    text = (REPO / "docs" / "linearize.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```(?:sh|bash|console)\n(.*?)```", text, re.S)
    return [line.strip() for b in blocks for line in b.splitlines() if line.strip().startswith("pdsl linearize")]


def test_the_docs_page_commands_run_as_written(capsys, monkeypatch, tmp_path):
    commands = _doc_commands()
    assert len(commands) >= 5
    monkeypatch.chdir(REPO)
    for cmd in commands:
        argv = shlex.split(cmd)[1:]
        if "-o" in argv:  # into a temporary directory, not the checkout
            argv[argv.index("-o") + 1] = str(tmp_path / argv[argv.index("-o") + 1])
        assert main(argv) == 0, cmd
        capsys.readouterr()


@pytest.mark.parametrize("bad", ["theta=1e400", "theta=inf", "theta=", "theta=sin(t)"])
def test_bad_values_are_user_errors(capsys, bad):
    code, _, err = _run(capsys, str(MODELS / "cart_pole.phm"), "--at", bad)
    assert code == 2 and "error[" in err


def test_a_cached_compilation_linearizes_the_same(capsys, monkeypatch, tmp_path):
    """The compiled-model cache defers the symbolic system: --open-loop and the symbolic formats unwrap it."""
    monkeypatch.delenv("PDSL_NO_CACHE", raising=False)
    monkeypatch.setenv("PDSL_CACHE_DIR", str(tmp_path / "cache"))
    argv = (str(MODELS / "cart_pole.phm"), "--at", "theta=pi", "--trim", "--open-loop", "--format", "markdown", "-v")
    first = _run(capsys, *argv)
    second = _run(capsys, *argv)
    assert "cache: stored" in first[2] and "cache: hit" in second[2]
    assert first[0] == second[0] == 0 and first[1] == second[1]
    assert r"$\frac{g l m \left(M + m\right)}{J M + J m + M l^{2} m}$" in second[1]
