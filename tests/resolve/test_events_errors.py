"""Malformed events (``when``, LANGUAGE.md §11): each a located diagnostic with a hint, never a crash.

As in tests/resolve/test_errors.py, every row names the error code, the line and column of the first diagnostic
and a fragment that the message or hint must contain. The statements go into a bouncing ball whose line 6 is free;
the run-time errors (two `when`s resetting one state at one instant, a reset the constraints cannot satisfy) are
raised by ``simulate``.
"""

from __future__ import annotations

import numpy as np
import pytest

from pdsl.diagnostics import PdslError, render
from pdsl.pipeline import compile_model
from pdsl.sim.simulate import simulate

BALL = """model B
  param g = 9.81, e = 0.8
  var h = 1.0, v = 0.0
  der(h) = v
  der(v) = -g
  {}
end
"""

# (name, statement on line 6, code, line, col, fragment of message or hint)
ERRORS = [
    ("reinit_of_a_parameter", "when h < 0 then reinit(g, 1)", "BadEvent", 6, 19, "it is a parameter, not a state"),
    ("reinit_of_a_parameter_hint", "when h < 0 then reinit(g, 1)", "BadEvent", 6, 19, "a reset may target: h, v"),
    ("reinit_of_an_expression", "when h < 0 then reinit(2*v, 0)", "BadEvent", 6, 26, "must be a state"),
    ("reinit_of_an_unknown_name", "when h < 0 then reinit(w, 0)", "UnknownName", 6, 26, "unknown name `w`"),
    ("equality_condition", "when h == 0 then reinit(v, -e*v)", "BadEvent", 6, 8, "write the crossing as an inequality"),
    ("inequality_condition", "when h != 0 then reinit(v, -e*v)", "BadEvent", 6, 8, "`!=` cannot start an event"),
    ("equality_inside_and", "when t > 1 and h == 0 then terminate", "BadEvent", 6, 18, "`==` cannot start an event"),
    ("reinit_outside_when", "reinit(v, 0)", "Syntax", 6, 3, "belongs after `when CONDITION then`"),
    ("reinit_outside_when_hint", "reinit(v, 0)", "Syntax", 6, 3, "when h < 0 then reinit"),
    ("terminate_outside_when", "terminate", "Syntax", 6, 3, "`terminate` is an action of an event"),
    ("two_resets_of_one_state", "when h < 0 then reinit(v, -e*v), reinit(v, 0)", "BadEvent", 6, 36, "reset twice by this `when`"),
    ("two_resets_hint", "when h < 0 then reinit(v, -e*v), reinit(v, 0)", "BadEvent", 6, 36, "keep one"),
    ("pre_in_condition", "when pre(h) < 0 then terminate", "BadEvent", 6, 8, "`pre(...)` belongs in the actions"),
    ("pre_as_target", "when h < 0 then reinit(pre(v), 0)", "BadEvent", 6, 26, "a state, not `pre(...)`"),
    ("condition_always_true", "when 1 < 2 then terminate", "BadEvent", 6, 8, "always true"),
    ("action_not_an_action", "when h < 0 then e", "BadEvent", 6, 19, "`reinit(state, value)` or `terminate`"),
    ("reinit_one_argument", "when h < 0 then reinit(v)", "WrongArity", 6, 19, "takes two arguments"),
    ("condition_is_a_number", "when h then terminate", "TypeMismatch", 6, 8, "not a condition"),
]


def _first_error(text: str) -> PdslError:
    with pytest.raises(PdslError) as info:
        compile_model("bad.phm", text=text)
    return info.value


def test_the_table_names_are_unique():
    assert len({row[0] for row in ERRORS}) == len(ERRORS)


@pytest.mark.parametrize("name, stmt, code, line, col, fragment", ERRORS, ids=[row[0] for row in ERRORS])
def test_event_error(name, stmt, code, line, col, fragment):
    err = _first_error(BALL.format(stmt))
    first = err.diagnostics[0]
    assert (first.code, first.span.line, first.span.col) == (code, line, col), render(err.diagnostics)
    assert fragment in first.message + " " + (first.hint or ""), render(err.diagnostics)
    assert first.span.path == "bad.phm"


@pytest.mark.parametrize("name", ["reinit_of_a_parameter", "equality_condition", "reinit_outside_when",
                                  "two_resets_of_one_state"])
def test_event_errors_have_a_hint_and_a_caret(name):
    _, stmt, code, line, col, _ = next(row for row in ERRORS if row[0] == name)
    err = _first_error(BALL.format(stmt))
    assert err.diagnostics[0].hint
    head, source, caret, *_ = render(err.diagnostics[:1]).splitlines()
    assert head.startswith(f"bad.phm:{line}:{col}: error[{code}]: ")
    assert caret.index("^") == len(f"{line:>4} | ") + col - 1


def test_velocity_reset_in_a_hamiltonian_model_names_the_momentum():
    text = "model P\n  coord q = 1\n  momentum p\n  hamiltonian p^2/2 + q^2/2\n  when q < 0 then reinit(der(q), 0)\nend\n"
    err = _first_error(text)
    d = err.diagnostics[0]
    assert (d.code, d.span.line, d.span.col) == ("BadEvent", 5, 19)
    assert "reset the momentum (p)" in d.hint


def test_two_whens_resetting_one_state_at_one_instant():
    c = compile_model("bad.phm", text=BALL.format("when h < 0 then reinit(v, -e*v)\n  when h < 0.0 then reinit(v, 0)"))
    with pytest.raises(PdslError) as info:
        simulate(c.numeric, np.linspace(0.0, 1.0, 11))
    d = info.value.diagnostics[0]
    assert d.code == "BadEvent" and d.span.line == 7 and d.span.path == "bad.phm"
    assert "`v` is reset twice at t = 0.4515236" in d.message
    assert "(line 6)" in d.message and "(line 7)" in d.message and "ambiguous" in d.hint


def test_two_whens_resetting_different_states_at_one_instant_is_fine():
    c = compile_model("ok.phm", text=BALL.format("when h < 0 then reinit(v, -e*v)\n  when h < 0.0 then reinit(h, 0)"))
    r = simulate(c.numeric, np.linspace(0.0, 1.0, 11), rtol=1e-12, atol=1e-12)
    assert r.info["events"].lines == [6, 7]


def test_a_reset_the_constraint_cannot_satisfy_names_it():
    text = """model SC
  param r = 0.1, l = 0.3, J = 0.01, M = 0.5, xmax = 0.38
  coord theta = 1.0, x
  lagrangian J/2*der(theta)^2 + M/2*der(x)^2 - 0.2*(theta - 1.5708)^2/2
  constraint x = r*cos(theta) + sqrt(l^2 - r^2*sin(theta)^2)
  when x > xmax then reinit(der(x), 0), reinit(der(theta), 1)
end
"""
    c = compile_model("bad.phm", text=text)
    with pytest.raises(PdslError) as info:
        simulate(c.numeric, np.linspace(0.0, 2.0, 21), x0={"theta": 3.0}, rtol=1e-10)
    d = info.value.diagnostics[0]
    assert d.code == "BadEvent" and d.span.line == 6
    assert "cannot satisfy the velocity constraint constraint 1 (velocity level)" in d.message and d.hint
