"""Global flags (--debug, -q, -v) are accepted after the command too (issue 30); a successful run that needed the
larger step budget (Robertson with Adams) prints no stray solver note."""

from __future__ import annotations

from pathlib import Path

import pytest

from pdsl.cli.main import build_parser, main

MODELS = Path(__file__).resolve().parents[2] / "models"


@pytest.mark.parametrize("argv, quiet, verbose, debug", [
    (["simulate", "m.phm", "--t-end", "1", "-o", "o.csv"], False, 0, False),
    (["simulate", "m.phm", "--t-end", "1", "-o", "o.csv", "-v", "--debug", "-q"], True, 1, True),
    (["-v", "simulate", "m.phm", "--t-end", "1", "-o", "o.csv", "-v"], False, 2, False),
    (["--debug", "-q", "check", "m.phm"], True, 0, True),
    (["check", "m.phm", "--verbose", "--quiet"], True, 1, False),
])
def test_flags_before_or_after_the_command(argv, quiet, verbose, debug):
    args = build_parser().parse_args(argv)
    assert args.summary_quiet is quiet
    assert args.verbose + getattr(args, "verbose_after", 0) == verbose
    assert args.debug is debug


def test_fit_keeps_its_own_quiet():
    args = build_parser().parse_args(["fit", "m.phm", "--data", "d.csv", "-o", "out", "--quiet", "-q"])
    assert args.quiet is True and args.summary_quiet is True


def test_quiet_after_the_command_suppresses_the_summary(tmp_path, capsys):
    out = tmp_path / "o.csv"
    code = main(["simulate", str(MODELS / "mass_spring_damper.phm"), "--t-end", "0.5", "--input", "F=0",
                 "--no-cache", "-o", str(out), "-q"])
    assert code == 0 and out.exists()
    assert capsys.readouterr().out == ""


ROBERTSON = """model Robertson "stiff chemical kinetics"
  var y1 = 1.0, y2 = 0.0, y3 = 0.0
  der(y1) = -0.04*y1 + 1e4*y2*y3
  der(y2) = 0.04*y1 - 1e4*y2*y3 - 3e7*y2^2
  der(y3) = 3e7*y2^2
end
"""


def test_robertson_retry_prints_no_stray_mxstep_line(tmp_path, capsys):
    model = tmp_path / "robertson.phm"
    model.write_text(ROBERTSON)
    # Adams on a stiff system: the first attempt stops at 100,000 steps ("mxstep"), the redone run succeeds
    code = main(["simulate", str(model), "--t-end", "4e7", "--dt", "4e6", "--compile", "no", "--no-cache",
                 "--integrator", "cvodes", "-o", str(tmp_path / "r.csv")])
    captured = capsys.readouterr()
    assert code == 0
    assert "mxstep" not in captured.out + captured.err
    assert "note:" not in captured.err
