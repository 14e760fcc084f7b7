"""The real `pdsl` command on bad models and bad options: exit 2, a located message, no traceback."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

GOOD = """\
model Oscillator
  param k = 1.0
  var x = 1.0, v
  der(x) = v
  der(v) = -k*x
end
"""

# (name, command, model text, code, line, col)
BAD_MODELS = [
    ("missing_end", "check", "model A\n  var x\n  der(x) = -x\n", "UnexpectedEnd", 3, 14),
    ("unbalanced_bracket", "check", "model A\n  var x\n  der(x) = sin(x]\nend\n", "UnbalancedBracket", 3, 17),
    ("unknown_name", "check", "model A\n  param gamma = 1\n  var x\n  der(x) = -gama*x\nend\n", "UnknownName", 4, 13),
    ("duplicate_param", "check", "model A\n  param k = 1, k = 2\n  var x\n  der(x) = -k*x\nend\n", "DuplicateDefinition", 2, 16),
    ("python_payload", "check", "model A\n  var x\n  der(x) = __import__('os').system('x')\nend\n", "BadCharacter", 3, 23),
    ("bound_is_a_param", "show", "model A\n  param N = 3\n  param m[1..N] = 1\n  var x\n  der(x) = -x\nend\n", "NotConstant", 3, 14),
    ("nonlinear_constraint", "show", "model A\n  coord x\n  lagrangian der(x)^2/2\n  constraint der(x)^2 = 1\nend\n", "BadConstraint", 4, 3),
    # parts of several formalisms compose (LANGUAGE.md §10); the input-state-output `structure` form does not mix
    ("mixed_formalism_at_lowering", "show", "model A\n  var q, p, z\n  der(z) = 1\n  hamiltonian q^2/2 + p^2/2\n"
     "  structure J = [[0, 1], [-1, 0]]\nend\n", "MixedFormalism", 3, 3),
]


def _pdsl(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pdsl", *args], cwd=cwd, capture_output=True, text=True, timeout=600, env=_env()
    )


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env["MPLBACKEND"] = "Agg"
    return env


def _assert_user_error(proc: subprocess.CompletedProcess, code: str) -> str:
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out
    assert f"error[{code}]" in proc.stderr, out
    assert "Traceback" not in out and "internal error" not in out, out
    return proc.stderr


BAD_OPTIONS = [
    ("unknown_init_name", ["simulate", "{model}", "--t-end", "1", "--dt", "0.1", "--init", "nope=1", "-o", "out.csv"], "BadOption", "nope"),
    ("negative_t_end", ["simulate", "{model}", "--t-end", "-1", "--dt", "0.1", "-o", "out.csv"], "BadOption", "--t-end"),
    ("const_not_an_integer", ["check", "{model}", "--const", "N=abc"], "BadOption", "N=abc"),
    ("const_not_in_the_model", ["check", "{model}", "--const", "N=3"], "UnknownName", "--const N"),
    ("missing_file", ["check", "{missing}"], "FileNotFound", "no such file"),
    ("unknown_subcommand", ["frobnicate", "{model}"], "BadOption", "invalid choice"),
]


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, tuple[Path, subprocess.CompletedProcess]]:
    """Every command of this file, run up front a few at a time (each one starts a Python)."""
    root = tmp_path_factory.mktemp("cli")
    good = root / "oscillator.phm"
    good.write_text(GOOD, encoding="utf-8")
    jobs = {"good": (good, ["check", str(good)])}
    for name, command, text, *_ in BAD_MODELS:
        path = root / f"{name}.phm"
        path.write_text(text, encoding="utf-8")
        jobs[name] = (path, [command, str(path)])
    for name, argv, *_ in BAD_OPTIONS:
        jobs[name] = (root, [a.format(model=good, missing=root / "nope.phm") for a in argv])
    with ThreadPoolExecutor(max_workers=4) as pool:
        futures = {name: pool.submit(_pdsl, *argv, cwd=root) for name, (_, argv) in jobs.items()}
    return {name: (jobs[name][0], f.result()) for name, f in futures.items()}


@pytest.mark.parametrize("name, command, text, code, line, col", BAD_MODELS, ids=[row[0] for row in BAD_MODELS])
def test_bad_model(runs, name, command, text, code, line, col):
    path, proc = runs[name]
    err = _assert_user_error(proc, code)
    first = err.splitlines()
    assert first[0].startswith(f"{path}:{line}:{col}: error[{code}]: "), err
    assert first[1].startswith(f"{line:>4} | ")
    caret = first[2]
    assert re.fullmatch(r" +\^+", caret), err
    assert caret.index("^") == len(f"{line:>4} | ") + col - 1


@pytest.mark.parametrize("name, argv, code, fragment", BAD_OPTIONS, ids=[row[0] for row in BAD_OPTIONS])
def test_bad_option(runs, name, argv, code, fragment):
    root, proc = runs[name]
    assert fragment in _assert_user_error(proc, code)
    assert not (root / "out.csv").exists()


def test_good_model_checks(runs):
    _, proc = runs["good"]
    assert proc.returncode == 0, proc.stderr
    assert "ok  Oscillator" in proc.stdout


def test_check_takes_several_files_and_reports_each_bad_one(tmp_path):
    (tmp_path / "good.phm").write_text(GOOD)
    (tmp_path / "bad.phm").write_text("model A\n  var x\n  der(x) = -y\nend\n")
    r = _pdsl("check", "good.phm", "bad.phm", "good.phm", cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    assert r.stdout.count("ok  good.phm: Oscillator") == 2
    assert "bad.phm:3:13: error[UnknownName]" in r.stderr and "Traceback" not in r.stderr
    assert "1 of 3 files failed: bad.phm" in r.stderr


def test_check_notes_a_velocity_constraint_that_is_holonomic_in_disguise(tmp_path):
    (tmp_path / "slide.phm").write_text(
        "model Slide\n  coord x = 0.5, y\n  lagrangian (der(x)^2 + der(y)^2)/2\n  constraint der(x) = 2*der(y)\nend\n")
    r = _pdsl("check", "slide.phm", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "slide.phm:4:3: note[HolonomicInDisguise]" in r.stdout
    disk = _pdsl("check", str(REPO / "models" / "rolling_disk.phm"), cwd=tmp_path)
    assert disk.returncode == 0 and "HolonomicInDisguise" not in disk.stdout


def test_check_runs_the_structural_checks_of_lowering(tmp_path, capsys):
    """A model `check` accepts is not rejected by `show` for a structural reason (issue 12 defect 1: an
    overflowing link length passed `check` and crashed `show`)."""
    from pdsl.cli.main import main

    src = (Path(__file__).resolve().parents[2] / "models" / "pendulum3.phm").read_text(encoding="utf-8")
    bad = tmp_path / "big.phm"
    bad.write_text(src.replace("link ground, b[1], length = l[1]", "link ground, b[1], length = 1e308"), encoding="utf-8")
    for command in ("check", "show"):
        assert main([command, str(bad)]) == 2
        err = capsys.readouterr().err
        assert f"{bad}:16:3: error[NumericOverflow]" in err and "Traceback" not in err
