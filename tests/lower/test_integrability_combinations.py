"""The Frobenius test of the whole constraint distribution (issue 30, part 3).

A velocity constraint is reported as the time derivative of a holonomic constraint only when it is one (it
annihilates the involutive closure D̄ of the distribution); a combination of several constraints that integrates
although none of them does is a ``note[IntegrableCombination]`` naming the combination and its integral.

Each verdict is checked against an independent sympy computation: the closure by iterated Lie brackets of an
explicit basis of D (written by hand here), the rank at random rational points, and for each reported integral h
that dh/dt is identically the stated combination of the constraints' residuals.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import sympy as sp

from pdsl import symbols as S
from pdsl.lower.integrability import (
    analyze_velocity_constraints,
    classify_model_constraints,
    classify_velocity_constraints,
    velocity_notes,
    velocity_rows,
)
from pdsl.pipeline import load_models

MODELS = Path(__file__).resolve().parents[2] / "models"

WHEELS = """\
# Differential-drive robot: two wheels rolling without slipping (per-wheel constraints).
model DiffDriveWheels "differential-drive robot"
  param m = 2.0, I = 0.1, Iw = 0.01, r = 0.05, b = 0.2
  coord x = 0.0, y = 0.0, th = 0.0, phL = 0.0, phR = 0.0
  lagrangian m/2*(der(x)^2 + der(y)^2) + I/2*der(th)^2 + Iw/2*(der(phL)^2 + der(phR)^2)
  constraint -der(x)*sin(th) + der(y)*cos(th) = 0
  constraint der(x)*cos(th) + der(y)*sin(th) - b*der(th) = r*der(phL)
  constraint der(x)*cos(th) + der(y)*sin(th) + b*der(th) = r*der(phR)
end
"""

KINEMATIC = """\
model DiffDrive "differential-drive robot, kinematic form"
  param m = 2.0, I = 0.1, Iw = 0.01, r = 0.05, b = 0.2
  coord x = 0.0, y = 0.0, th = 0.0, phL = 0.0, phR = 0.0
  lagrangian m/2*(der(x)^2 + der(y)^2) + I/2*der(th)^2 + Iw/2*(der(phL)^2 + der(phR)^2)
  constraint der(x) = r/2*(der(phR) + der(phL))*cos(th)
  constraint der(y) = r/2*(der(phR) + der(phL))*sin(th)
  constraint der(th) = r*(der(phR) - der(phL))/(2*b)
end
"""

WHEEL = """\
model Wheel "a wheel rolling on a line: holonomic, written at velocity level"
  param m = 1.0, I = 0.1, r = 0.3
  coord x = 0.0, phi = 0.0
  lagrangian m/2*der(x)^2 + I/2*der(phi)^2
  constraint der(x) = r*der(phi)
end
"""


def _model(tmp_path, text, name="m.phm"):
    path = tmp_path / name
    path.write_text(text)
    return load_models(path)[0]


# ---------------------------------------------------------------------- an independent sympy reference
def _closure_dim(fields, q, point):
    """dim of the involutive closure of span(fields) at a rational point: iterated Lie brackets, exact ranks."""
    gens = [sp.Matrix(f) for f in fields]
    rank = sp.Matrix.hstack(*gens).subs(point).rank()
    frontier = list(gens)
    while frontier and rank < len(q):
        new = []
        for X in gens:
            for Y in frontier:
                br = Y.jacobian(q) * X - X.jacobian(q) * Y
                trial = sp.Matrix.hstack(*(gens + new + [br]))
                r2 = trial.subs(point).rank(simplify=True)
                if r2 > rank:
                    new.append(br)
                    rank = r2
        gens += new
        frontier = new
    return rank


def _residual_rate(h, coords):
    """dh/dt as a velocity expression (der(q) symbols; d/dt t = 1)."""
    return sum((sp.diff(h, s) * (1 if s == S.TIME else S.der(s)) for s in coords), sp.Integer(0))


def _point(coords, params):
    vals = [sp.Rational(3, 7), sp.Rational(-5, 11), sp.Rational(2, 13), sp.Rational(7, 5), sp.Rational(-1, 3),
            sp.Rational(9, 17), sp.Rational(4, 9)]
    return dict(zip(list(coords) + list(params), vals))


# ---------------------------------------------------------------------- the differential drive
def test_differential_drive_wheels_one_integrable_combination_no_single(tmp_path):
    model = _model(tmp_path, WHEELS)
    verdicts = classify_model_constraints(model)
    assert [ok for _, ok, _ in verdicts] == [False, False, False]  # no wheel constraint integrates on its own
    assert all("nonholonomic" in why for _, _, why in verdicts)
    assert "only a combination with line 8 integrates" in verdicts[1][2]
    assert "only a combination" not in verdicts[0][2]  # the lateral (no side slip) constraint takes no part

    notes = velocity_notes(model)
    assert [d.code for d in notes] == ["IntegrableCombination"]
    (note,) = notes
    assert note.severity == "note" and note.span.line == 7
    assert note.message == (
        "none of the velocity constraints at lines 7 and 8 is integrable, but their combination "
        "((line 8) - (line 7))/(2*b) is: der(th) - r*(der(phR) - der(phL))/(2*b) = 0 integrates to "
        "th - r*(phR - phL)/(2*b) = const")
    assert "keep the constraints" in note.hint

    # sympy: dim D = 2, closure dim 4 of 5 -> exactly one integrable combination
    x, y, th, phL, phR = (S.sym(n) for n in ("x", "y", "th", "phL", "phR"))
    r, b = S.sym("r"), S.sym("b")
    q = [x, y, th, phL, phR]
    # D: drive both wheels / one wheel (x, y follow the rolling, th the difference)
    fields = [[r / 2 * sp.cos(th), r / 2 * sp.sin(th), -r / (2 * b), 1, 0],
              [r / 2 * sp.cos(th), r / 2 * sp.sin(th), r / (2 * b), 0, 1]]
    rows, coords, cons = velocity_rows(model)
    A = sp.Matrix(rows)
    assert (A * sp.Matrix(fields).T).applyfunc(sp.simplify) == sp.zeros(3, 2)
    assert _closure_dim(fields, q, _point(q, [r, b])) == 4
    info = analyze_velocity_constraints(rows, coords)
    assert info.dims[0] == (2, 4, 5) and len(info.combinations) == 1
    # the integral: dh/dt is the stated combination of the residuals, identically
    (combo,) = info.combinations
    h = combo.integral
    assert sp.simplify(h - (th - r * (phR - phL) / (2 * b))) == 0
    stated = (cons[2].residual - cons[1].residual) / (2 * b)
    assert sp.simplify(_residual_rate(h, coords) - stated) == 0


def test_differential_drive_kinematic_form_the_heading_constraint_is_the_integrable_one(tmp_path):
    model = _model(tmp_path, KINEMATIC)
    verdicts = classify_model_constraints(model)
    assert [ok for _, ok, _ in verdicts] == [False, False, True]
    notes = velocity_notes(model)
    assert [(d.code, d.span.line) for d in notes] == [("HolonomicInDisguise", 7)]
    assert notes[0].message.endswith("it integrates to th - r*(phR - phL)/(2*b) = const")


def test_mixed_rows_name_the_combination_not_a_row():
    """Rows (x-row ± th-row, y-row) of the kinematic drive: none integrates alone, their difference does."""
    x, y, th, phL, phR, r, b = sp.symbols("x y th phL phR r b")
    q = [x, y, th, phL, phR]
    ex = [1, 0, 0, -r / 2 * sp.cos(th), -r / 2 * sp.cos(th)]
    ey = [0, 1, 0, -r / 2 * sp.sin(th), -r / 2 * sp.sin(th)]
    et = [0, 0, 1, r / (2 * b), -r / (2 * b)]
    rows = [[a + c for a, c in zip(ex, et)], [a - c for a, c in zip(ex, et)], ey]
    out = classify_velocity_constraints(rows, q)
    assert [ok for ok, _ in out] == [False, False, False]
    info = analyze_velocity_constraints(rows, q)
    (combo,) = info.combinations
    assert set(combo.rows) == {0, 1}
    assert sp.simplify(combo.integral - (th - r * (phR - phL) / (2 * b))) == 0


# ---------------------------------------------------------------------- the other textbook cases
def test_rolling_disk_no_combination_integrates():
    model = load_models(MODELS / "rolling_disk.phm")[0]
    assert [ok for _, ok, _ in classify_model_constraints(model)] == [False, False]
    assert velocity_notes(model) == []
    rows, coords, _ = velocity_rows(model)
    info = analyze_velocity_constraints(rows, coords)
    assert info.dims[0] == (2, 4, 4) and info.combinations == []
    th, ph, R = S.sym("theta"), S.sym("phi"), S.sym("R")
    fields = [[1, 0, R * sp.cos(ph), R * sp.sin(ph)], [0, 1, 0, 0]]
    assert _closure_dim(fields, coords, _point(coords, [R])) == 4


def test_chaplygin_sleigh_not_integrable():
    model = load_models(MODELS / "chaplygin_sleigh.phm")[0]
    assert [ok for _, ok, _ in classify_model_constraints(model)] == [False]
    assert velocity_notes(model) == []
    rows, coords, _ = velocity_rows(model)
    info = analyze_velocity_constraints(rows, coords)
    assert info.dims[0] == (2, 3, 3) and info.combinations == []
    th = S.sym("theta")
    fields = [[1, 0, 0], [0, sp.cos(th), sp.sin(th)]]
    assert _closure_dim(fields, coords, _point(coords, [])) == 3


def test_holonomic_velocity_constraint_is_one_integrable_constraint(tmp_path):
    model = _model(tmp_path, WHEEL)
    assert [ok for _, ok, _ in classify_model_constraints(model)] == [True]
    notes = velocity_notes(model)
    assert [(d.code, d.span.line) for d in notes] == [("HolonomicInDisguise", 5)]
    assert "integrates to x - phi*r = const" in notes[0].message
    rows, coords, cons = velocity_rows(model)
    info = analyze_velocity_constraints(rows, coords)
    assert info.combinations == [] and info.dims[0] == (1, 1, 2)
    h = info.singles[0].integral
    assert sp.simplify(_residual_rate(h, coords) - cons[0].residual) == 0


def test_independent_groups_are_tested_apart(tmp_path):
    """The drive plus an unrelated holonomic constraint: one combination, one single, nothing else."""
    text = WHEELS.replace("coord x = 0.0,", "coord z = 0.0, w = 0.0, x = 0.0,").replace(
        "lagrangian ", "lagrangian der(z)^2/2 + der(w)^2/2 + ").replace(
        "end\n", "  constraint der(z) = 2*der(w)\nend\n")
    model = _model(tmp_path, text)
    notes = velocity_notes(model)
    assert sorted(d.code for d in notes) == ["HolonomicInDisguise", "IntegrableCombination"]
    assert [ok for _, ok, _ in classify_model_constraints(model)] == [False, False, False, True]


@pytest.mark.parametrize("rows, expected", [
    ([[1, 0, 0], [0, 1, 0]], 0),  # two exact rows: singles, no further combination
    ([[1, 1, 0], [1, -1, 0]], 0),  # both integrable alone
])
def test_no_combination_beyond_the_singles(rows, expected):
    x, y, z = sp.symbols("x y z")
    info = analyze_velocity_constraints(rows, [x, y, z])
    assert all(info.integrable) and len(info.combinations) == expected


def test_redundant_rows_and_an_integrating_factor():
    x, y, z, w = sp.symbols("x y z w")
    info = analyze_velocity_constraints([[1, -2, 0, 0], [2, -4, 0, 0], [0, 0, 1, -y]], [x, y, z, w])
    assert info.integrable == [True, True, False] and info.combinations == []
    assert info.singles[0].integral == x - 2 * y
    # y dx − x dy = y² d(x/y): not exact after normalisation, integrable with the factor 1/y
    single = analyze_velocity_constraints([[y, -x, 0]], [x, y, z]).singles[0]
    assert sp.simplify(single.integral - x / y) == 0
