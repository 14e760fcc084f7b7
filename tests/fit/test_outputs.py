"""The fitted model copy: textual substitution of param defaults at their spans (nothing evaluated)."""

import numpy as np

from pdsl.fit.outputs import fitted_model_text, network_arrays
from pdsl.fit.params import make_layout
from pdsl.pipeline import compile_model, load_models

TEXT = """\
# a comment that mentions m = 1.0 and k = 2
model A "first"
  const N = 3
  param m = 1.0 {free, lower = 0}, k = 2*N, c = -0.5
  param w[1..N] = [0.1,
                   0.2, 0.3] {lower = 0}
  param z[1..N] = 1.5
  var x = 1.0, v
  der(x) = v
  der(v) = -k/m*x - c*v + w[1] + w[2] + w[3] + z[1] + z[2] + z[3]
end
model B
  param m = 1.0
  var y
  der(y) = -m*y
end
"""


def values_of(text, name):
    model = next(m for m in load_models("f.phm", text=text) if m.name == name)
    return {q.name: q.default for q in model.params}


def test_substitutes_scalars_arrays_and_broadcasts():
    new = {"m": 1.2999999999999998, "k": 7.25, "c": -0.125, "w[1]": 1e-3, "w[2]": 0.5, "w[3]": 2.0,
           "z[1]": 1.0, "z[2]": 2.0, "z[3]": 3.0}
    out = fitted_model_text(TEXT, "f.phm", "A", new)
    got = values_of(out, "A")
    for name, value in new.items():
        assert got[name] == value  # repr round-trips exactly
    assert values_of(out, "B") == {"m": 1.0}  # the other model is untouched
    assert out.splitlines()[0] == TEXT.splitlines()[0]  # comments untouched
    assert "{free, lower = 0}" in out and "{lower = 0}" in out
    assert "param z[1..N] = [1.0, 2.0, 3.0]" in out


def test_only_listed_parameters_change():
    out = fitted_model_text(TEXT, "f.phm", "A", {"c": 0.75})
    assert out == TEXT.replace("c = -0.5", "c = 0.75")


def test_network_arrays_follow_torch_naming(nn_model):
    c = compile_model(nn_model)
    lay = make_layout(c.numeric, c.model, [])
    arrays = network_arrays(c.numeric, lay, c.numeric.p_default)
    assert set(arrays) == {"V", "V/0.weight", "V/0.bias", "V/2.weight", "V/2.bias"}
    assert arrays["V/0.weight"].shape == (6, 2) and arrays["V/2.weight"].shape == (1, 6)
    np.testing.assert_array_equal(arrays["V"], c.numeric.p_default[1:])
