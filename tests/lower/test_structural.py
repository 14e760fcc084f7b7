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
