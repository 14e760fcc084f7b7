"""Plain equations: the located errors of lower_plain and outputs that use der(...)."""

from __future__ import annotations

import numpy as np
import pytest

from pdsl.diagnostics import PdslError
from pdsl.pipeline import compile_model, load_models
from pdsl.lower import lower


def lower_text(text: str):
    return lower(load_models("m.phm", text=text)[0], "hamiltonian")


def test_nonlinear_derivative_is_reported_alone():
    with pytest.raises(PdslError) as e:
        lower_text("model A\n  var x = 1, v\n  der(x) = v\n  der(v)^2 = 1\nend\n")
    assert e.value.codes == ["NonlinearDerivative"]
    assert e.value.diagnostics[0].span.line == 4


def test_missing_algebraic_equation_points_at_the_variable():
    with pytest.raises(PdslError) as e:
        lower_text("model A\n  var x = 1, v, w\n  der(x) = v\n  der(v) = -x\nend\n")
    (d,) = e.value.diagnostics
    assert d.code == "UnbalancedSystem" and (d.span.line, d.span.col) == (2, 17) and "(w)" in d.message


def test_output_may_use_der_of_an_explicit_state():
    c = compile_model("m.phm", text="model A\n  param k = 4\n  var x = 1, v\n  der(x) = v\n  der(v) = -k*x\n  output a = der(v)\nend\n")
    x = np.array([0.3, -0.2])
    assert float(c.numeric.outputs(0.0, x, [], c.numeric.p_default, [])) == pytest.approx(-4 * 0.3, abs=1e-15)


@pytest.mark.parametrize("text, what", [
    ("model A\n  var x = 1, y\n  der(x) = -y\n  0 = y - x\n  output a = der(y)\nend\n", "algebraic"),
    ("model A\n  var x = 1, v\n  der(x) = v\n  2*der(v) + der(x) = -x\n  output a = der(v)\nend\n", "not of the form"),
])
def test_output_with_an_implicit_derivative_is_a_located_error(text, what):
    with pytest.raises(PdslError) as e:
        lower_text(text)
    (d,) = e.value.diagnostics
    assert d.code == "NotAllowedHere" and d.span.line == 5 and what in d.message
