"""`pdsl check` prints what the integrability test and the junction check find (issue 30): the combination of a
differential drive's wheel constraints that integrates (never a single constraint that does not), and a bond listed
in both of its junctions."""

from __future__ import annotations

from pdsl.cli.main import main

DIFF_DRIVE = """model DiffDriveWheels "differential-drive robot (per-wheel rolling)"
  param m = 2.0, I = 0.1, Iw = 0.01, r = 0.05, b = 0.2
  coord x = 0.0, y = 0.0, th = 0.0, phL = 0.0, phR = 0.0
  lagrangian m/2*(der(x)^2 + der(y)^2) + I/2*der(th)^2 + Iw/2*(der(phL)^2 + der(phR)^2)
  constraint -der(x)*sin(th) + der(y)*cos(th) = 0
  constraint der(x)*cos(th) + der(y)*sin(th) - b*der(th) = r*der(phL)
  constraint der(x)*cos(th) + der(y)*sin(th) + b*der(th) = r*der(phR)
end
"""

TANKS = """model Tanks "two tanks and a pipe"
  param C1 = 1.0, C2 = 2.0, Rp = 0.5
  flow_store tank1(v1) energy v1^2/(2*C1)
  flow_store tank2(v2) energy v2^2/(2*C2)
  resistive res: e = Rp*f
  junction n1: common_effort(tank1, pipe)
  junction pipe: common_flow(-n1, res, n2)
  junction n2: common_effort(tank2)
end
"""


def _check(tmp_path, capsys, text):
    path = tmp_path / "m.phm"
    path.write_text(text, encoding="utf-8")
    code = main(["check", str(path)])
    out = capsys.readouterr()
    return code, out.out + out.err


def test_the_differential_drive_names_the_combination_and_no_false_note(tmp_path, capsys):
    code, said = _check(tmp_path, capsys, DIFF_DRIVE)
    assert code == 0
    assert "note[IntegrableCombination]" in said and "th - r*(phR - phL)/(2*b) = const" in said
    assert "HolonomicInDisguise" not in said  # neither wheel constraint integrates on its own


def test_a_bond_in_both_junctions_is_warned_at_both_lines(tmp_path, capsys):
    code, said = _check(tmp_path, capsys, TANKS)
    assert code == 0
    assert said.count("warning[DoubleBond]") == 2 and ":6:" in said and ":7:" in said
