"""The shared structural passes (pdsl/lower/structural.py) on systems of every formalism."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sps
from scipy.sparse.csgraph import maximum_bipartite_matching

from pdsl.cli.main import main
from pdsl.diagnostics import PdslError
from pdsl.lower import lower
from pdsl.lower.structural import _matching
from pdsl.pipeline import load_models


@pytest.mark.parametrize("seed", range(40))
def test_matching_is_maximum(seed):
    """Structural rank from the augmenting-path matching equals scipy's maximum bipartite matching."""
    rng = np.random.default_rng(seed)
    n_rows, n_cols = rng.integers(1, 30, size=2)
    density = rng.uniform(0.02, 0.3)
    incidence = rng.random((n_rows, n_cols)) < density
    rows = [set(np.flatnonzero(r).tolist()) for r in incidence]
    col_of, row_of = _matching(rows, list(range(n_cols)))
    reference = maximum_bipartite_matching(sps.csr_matrix(incidence.astype(int)), perm_type="column")
    assert len(col_of) == int((reference >= 0).sum())
    assert all(j in rows[i] for i, j in col_of.items()) and all(row_of[j] == i for i, j in col_of.items())
    assert len(set(col_of.values())) == len(col_of)


def _lower(text: str):
    return lower(load_models("m.phm", text=text)[0])


def test_unused_algebraic_variable_and_state_only_row_are_located():
    text = "model A\n  var x = 1, y, z\n  der(x) = -y\n  0 = y - x\n  0 = x - 1\nend\n"
    with pytest.raises(PdslError) as err:
        _lower(text)
    where = {(d.code, d.span.line, d.span.col) for d in err.value.diagnostics}
    assert where == {("UnbalancedSystem", 2, 17), ("UnbalancedSystem", 5, 3)}
    assert any("z is not determined" in d.message for d in err.value.diagnostics)


def test_structurally_singular_with_equal_counts():
    """Equal counts, but one unknown in no row: the count check passes, the matching does not (was an IDAS failure)."""
    text = "model A\n  var x = 1, y, z\n  der(x) = -y\n  0 = y - x\n  0 = 2*y - x\nend\n"
    with pytest.raises(PdslError) as err:
        _lower(text)
    msgs = [(d.span.line, d.message) for d in err.value.diagnostics]
    assert (2, "z is not determined by the algebraic equations (no equation is left that could determine it)") in msgs
    assert any(line == 5 and "its unknowns (y) are determined by other equations" in m for line, m in msgs)


def test_every_bundled_model_is_structurally_balanced(capsys):
    from pathlib import Path

    models = sorted(str(p) for p in (Path(__file__).resolve().parents[2] / "models").glob("*.phm"))
    assert main(["check", *models]) == 0


PENDULUM_DAE = """model PendulumDAE "Cartesian pendulum as a plain index-3 DAE"
  param g = 9.81, l = 1.0
  var x = 0.6, y = -0.8, vx = 0.0, vy = 0.0, lam
  der(x) = vx
  der(y) = vy
  der(vx) = -lam*x
  der(vy) = -lam*y - g
  0 = x^2 + y^2 - l^2
end
"""


def test_a_plain_index_3_dae_is_reduced_and_matches_the_angle_ode():
    """`0 = g(x)` between states is differentiated by the shared pass (twice here): λ becomes a multiplier, g and ġ
    invariants; the motion equals θ'' = −(g/l) sin θ from θ0 = atan2(0.6, 0.8)."""
    import numpy as np
    from scipy.integrate import solve_ivp

    from pdsl.pipeline import compile_model
    from pdsl.sim.simulate import simulate

    c = compile_model("pendulum_dae.phm", text=PENDULUM_DAE)
    assert [str(m) for m in c.system.multipliers] == ["lam"] and not c.system.algebraics
    assert len(c.system.invariants) == 2
    grid = np.array([0.0, 1.0, 3.0])
    r = simulate(c.numeric, grid, rtol=1e-11, atol=1e-12)
    x, y = (r.x[:, list(r.x_names).index(n)] for n in ("x", "y"))
    theta = np.arctan2(x, -y)
    ref = solve_ivp(lambda t, s: [s[1], -9.81 * np.sin(s[0])], (0, 3), [np.arctan2(0.6, 0.8), 0.0], t_eval=grid,
                    rtol=1e-12, atol=1e-13, method="DOP853").y[0]
    np.testing.assert_allclose(theta, ref, atol=1e-7)


def test_a_constraint_on_an_input_needs_its_derivative():
    text = "model A\n  input u\n  var x = 0, y = 0, lam\n  der(x) = y\n  der(y) = -x + lam\n  0 = x - u\nend\n"
    with pytest.raises(PdslError) as err:
        _lower(text)
    assert err.value.codes[0] == "DependentStorage" and err.value.diagnostics[0].span.line == 6
