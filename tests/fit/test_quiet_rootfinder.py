"""A failing implicit stage solve inside a loss evaluation: CasADi's rootfinder prints its inputs with C's
stdio before raising (hundreds of lines in a Gauss–Newton fit with implicit midpoint, one block per rejected
trial step). pdsl keeps them off the terminal and reports the failure as a located error."""

import casadi as ca
import pytest

from pdsl.diagnostics import PdslError
from pdsl.fit.loss import _call


def _failing():
    k, p = ca.MX.sym("k"), ca.MX.sym("p")
    solve = ca.rootfinder("stage_solve", "newton", ca.Function("g", [k, p], [k * k + p]), {"abstol": 1e-14})
    x = ca.MX.sym("x")
    return ca.Function("loss", [x], [solve(0.5, x)])


def test_failed_stage_solve_is_quiet_and_located(capfd):
    fn = _failing()
    print("before", flush=True)
    with pytest.raises(PdslError, match="did not converge"):
        _call(fn, 1.0)  # k² + 1 = 0 has no real root
    print("after", flush=True)
    out, err = capfd.readouterr()
    assert "Input 0" not in out + err and "stage_solve (0x" not in out + err
    assert out == "before\nafter\n"  # the terminal comes back: output before and after is kept
    assert float(_call(fn, -4.0)) == pytest.approx(2.0)  # a solvable call still works (root of k² − 4 from 0.5)
