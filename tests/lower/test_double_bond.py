"""A bond between two named junctions written in both lists (issue 30, part 3): ``warning[DoubleBond]``.

LANGUAGE.md §6: each appearance of a named junction in another junction's list is one bond, so naming each
junction in the other's list makes two parallel bonds, "which pdsl keeps but reports as warning[DoubleBond] at both
lines". The derivation is checked against the equations of two parallel bonds worked out by hand.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import sympy as sp

from pdsl import symbols as S
from pdsl.diagnostics import PdslError, render
from pdsl.lower import lower
from pdsl.lower.port_hamiltonian import double_bonds
from pdsl.pipeline import load_models

MODELS = Path(__file__).resolve().parents[2] / "models"

TANKS = """\
# Two tanks joined by a pipe.
model Tanks "two tanks and a pipe"
  param C1 = 1.0, C2 = 2.0, Rp = 0.5
  flow_store tank1(v1) energy v1^2/(2*C1)
  flow_store tank2(v2) energy v2^2/(2*C2)
  resistive res: e = Rp*f
  junction n1: common_effort(tank1, pipe)
  junction pipe: common_flow({first}res, n2)
  junction n2: common_effort(tank2)
end
"""

v1, v2, C1, C2, Rp = (S.sym(n) for n in ("v1", "v2", "C1", "C2", "Rp"))


def _model(tmp_path, first: str):
    path = tmp_path / "tanks.phm"
    path.write_text(TANKS.format(first=first))
    return load_models(path)[0]


def _rates(model) -> dict:
    """state symbol -> its rate in the lowered system."""
    system = lower(model)
    rate_of = {st.rate: st.symbol for st in system.states}
    return {rate_of[row.lhs]: row.rhs for row in system.differential}


def test_bond_written_once_has_no_warning_and_the_pipe_equations(tmp_path):
    model = _model(tmp_path, "")
    assert double_bonds(model) == []
    rates = _rates(model)
    f = (v1 / C1 - v2 / C2) / Rp  # the pipe's flow from tank 1 to tank 2
    assert sp.simplify(rates[v1] + f) == 0 and sp.simplify(rates[v2] - f) == 0


def test_bond_in_both_lists_is_warned_at_both_lines_and_kept_as_two_bonds(tmp_path):
    model = _model(tmp_path, "-n1, ")
    warnings = double_bonds(model)
    assert [(d.code, d.severity, d.span.line) for d in warnings] == [("DoubleBond", "warning", 7), ("DoubleBond", "warning", 8)]
    # located at the member written in each list
    assert (warnings[0].span.col, warnings[0].span.end_col) == (37, 41)  # `pipe` in n1's list
    assert warnings[1].span.col == 31  # `n1` in pipe's list
    assert "2 parallel bonds between `n1` and `pipe`" in warnings[0].message
    assert ("the flow balance of `n1` takes the flow of `pipe` twice and the effort balance of `pipe` the effort of "
            "`n1` twice") in warnings[0].message
    assert "written once, in either list" in warnings[0].hint
    text = render(warnings)
    assert "tanks.phm:7:37: warning[DoubleBond]" in text and "tanks.phm:8:31: warning[DoubleBond]" in text
    assert "errors" not in text  # warnings are not counted as errors
    # kept (LANGUAGE.md §6): two parallel bonds n1 -> pipe, each with effort e1 = v1/C1 and flow f. The pipe's
    # efforts: e_res = 2 e1 − e2, f = e_res/Rp; n1 gives 2f, n2 receives f.
    rates = _rates(model)
    f = (2 * v1 / C1 - v2 / C2) / Rp
    assert sp.simplify(rates[v1] + 2 * f) == 0
    assert sp.simplify(rates[v2] - f) == 0


def test_bonds_in_opposite_directions_cancel_and_the_warning_says_so(tmp_path):
    model = _model(tmp_path, "n1, ")
    warnings = double_bonds(model)
    assert len(warnings) == 2
    assert all("opposite directions and cancel" in d.message for d in warnings)
    rates = _rates(model)
    assert rates[v1] == 0  # tank 1 is cut off
    assert sp.simplify(rates[v2] + v2 / (C2 * Rp)) == 0


def test_double_bond_between_junctions_of_one_kind_is_named_in_the_lowering_error(tmp_path):
    path = tmp_path / "same.phm"
    path.write_text(
        "model SameKind\n"
        "  param C1 = 1.0, C2 = 2.0, Rp = 0.5\n"
        "  flow_store tank1(v1) energy v1^2/(2*C1)\n"
        "  flow_store tank2(v2) energy v2^2/(2*C2)\n"
        "  resistive res: e = Rp*f\n"
        "  junction a: common_effort(tank1, b, res)\n"
        "  junction b: common_effort(tank2, -a)\n"
        "end\n")
    model = load_models(path)[0]
    with pytest.raises(PdslError) as info:
        lower(model)
    assert info.value.codes == ["UnbalancedSystem", "DoubleBond", "DoubleBond"]
    assert "only the sum of their flows is determined" in info.value.diagnostics[1].message


@pytest.mark.parametrize("name", ["rlc", "rlc_ladder", "dc_motor", "mass_spring_damper", "cucker_smale_ph"])
def test_bundled_networks_have_no_double_bond(name):
    for model in load_models(MODELS / f"{name}.phm"):
        assert double_bonds(model) == []
