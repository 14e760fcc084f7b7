"""The CLI surface of issue 17: help with choices and defaults, -V, -q/-v, shell completion."""

from __future__ import annotations

import argparse
import shutil
import subprocess
from pathlib import Path

import pytest

from pdsl import __version__
from pdsl.cli.main import build_parser, main

MODELS = Path(__file__).resolve().parents[2] / "models"


def _subparsers(ap):
    (sub,) = [a for a in ap._actions if isinstance(a, argparse._SubParsersAction)]
    return sub


def test_top_level_help_describes_every_command(capsys):
    ap = build_parser()
    sub = _subparsers(ap)
    helped = {a.dest: a.help for a in sub._choices_actions}
    assert set(helped) == set(sub.choices)
    assert all(h and len(h) > 10 for h in helped.values())
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    for name in sub.choices:
        assert f"\n    {name}" in out
    for name, parser in sub.choices.items():
        assert parser.description == helped[name]


def test_every_default_and_choice_is_in_help():
    ap = build_parser()
    for name, parser in _subparsers(ap).choices.items():
        text = parser.format_help()
        for a in parser._actions:
            d = a.default
            if not a.option_strings or d is None or d is False or d == [] or d == argparse.SUPPRESS:
                continue
            assert f"default: {a.default}" in " ".join(text.split()), (name, a.option_strings)
    assert "(default: 0)" in " ".join(_subparsers(ap).choices["sweep"].format_help().split())  # a zero is shown
    sim = _subparsers(ap).choices["simulate"]
    choices = {a.dest: a.choices for a in sim._actions}
    assert "gauss2" in choices["integrator"] and choices["stabilize"] == ("none", "project", "baumgarte")
    compile_ = {a.dest: a.choices for a in _subparsers(ap).choices["compile"]._actions}
    assert "fmu" in compile_["target"]


def test_choices_agree_with_the_modules_that_use_them():
    from pdsl.cli import choices
    from pdsl.compile.targets import TARGETS
    from pdsl.sim.simulate import AUTO, FIXED_STEP, INTEGRATORS, NATIVE, STABILIZERS

    assert choices.TARGETS == TARGETS
    assert choices.INTEGRATORS == (AUTO, *INTEGRATORS, *NATIVE, *FIXED_STEP)
    assert choices.STABILIZERS == STABILIZERS


def test_bad_choice_is_a_user_error(capsys):
    code = main(["simulate", str(MODELS / "pendulum1.phm"), "--t-end", "1", "--dt", "0.5", "-o", "x.csv",
                 "--integrator", "rk45"])
    err = capsys.readouterr().err
    assert code == 2 and "error[BadOption]" in err and "invalid choice" in err and "Traceback" not in err


def test_version_flags(capsys):
    for flag in ("-V", "--version"):
        assert main([flag]) == 0
        assert capsys.readouterr().out.strip() == f"pdsl {__version__}"


def test_quiet_and_verbose(tmp_path, capsys):
    args = ["simulate", str(MODELS / "double_pendulum.phm"), "--t-end", "0.2", "--dt", "0.1"]
    assert main(["-q", *args, "-o", str(tmp_path / "a.csv")]) == 0
    out, err = capsys.readouterr()
    assert out == "" and (tmp_path / "a.csv").exists()
    assert main(["-q", *args, "-o", "-"]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("t,q1,q2") and err == ""  # -q drops the summary, never the data
    assert main(["-v", *args, "-o", str(tmp_path / "b.csv")]) == 0
    out, err = capsys.readouterr()
    assert "DoublePendulum" in out and "pdsl simulate:" in err and " s" in err


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_completion_scripts(shell, capsys):
    assert main(["completion", shell]) == 0
    text = capsys.readouterr().out
    integrator = "-l integrator" if shell == "fish" else "--integrator"
    for word in ("simulate", "sweep", integrator, "cvodes-bdf", "fmu"):
        assert word in text
    exe = shutil.which(shell)
    if shell == "bash" and exe:
        proc = subprocess.run([exe, "-n"], input=text, text=True, capture_output=True)
        assert proc.returncode == 0, proc.stderr


def test_bash_completion_completes(capsys):
    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("no bash")
    main(["completion", "bash"])
    text = capsys.readouterr().out
    probe = text + '\nCOMP_WORDS=(pdsl compile m.phm --target ""); COMP_CWORD=4; _pdsl; echo "${COMPREPLY[@]}"\n'
    out = subprocess.run([bash, "-c", probe], capture_output=True, text=True).stdout.split()
    assert set(out) == {"casadi", "c", "python", "fmu"}
    probe = text + '\nCOMP_WORDS=(pdsl sim); COMP_CWORD=1; _pdsl; echo "${COMPREPLY[@]}"\n'
    assert subprocess.run([bash, "-c", probe], capture_output=True, text=True).stdout.split() == ["simulate"]


def test_dash_output_only_for_simulate(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code = main(["compile", str(MODELS / "pendulum1.phm"), "-o", "-"])
    assert code == 2 and "standard output" in capsys.readouterr().err
    assert not (tmp_path / "-").exists()
