"""The data files the documents use are shipped in examples/ and are what they say (issue 34)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
import pytest

from pdsl.cli.main import main
from pdsl.data.csvio import read_table

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


def test_measured_csv_is_what_the_helper_makes():
    """examples/measured.csv (docs/fit.md's measured-data example) is tests/measured/measured_helpers.py's data."""
    sys.path.insert(0, str(ROOT / "tests" / "measured"))
    try:
        from measured_helpers import measured_pendulum
    finally:
        sys.path.pop(0)
    header, data = measured_pendulum()
    table = read_table(EXAMPLES / "measured.csv")
    assert list(table.columns) == header
    np.testing.assert_allclose(table.data, data, rtol=0, atol=1e-8)  # CVODES at rtol 1e-10 made it; noise is ~1e-3


def test_the_measured_fit_gives_the_documented_numbers(tmp_path, capsys):
    """The fit that docs/fit.md prints, on the shipped file: the same k and c (and the truth within 3 SE)."""
    text = (ROOT / "docs" / "fit.md").read_text()
    k_doc, k_se = (float(v) for v in re.search(r"k = ([\d.]+) ± ([\d.e-]+)\n\s+c = ", text).groups())
    c_doc = float(re.search(r"\n\s+c = ([\d.]+) ± ", text).group(1))
    assert main(["fit", str(ROOT / "models" / "driven_pendulum.phm"), "--data", str(EXAMPLES / "measured.csv"),
                 "--map", "time=t,run=traj", "--free", "k,c", "--noise", "x=0.0015", "--noise", "theta=0.004",
                 "-o", str(tmp_path / "fit"), "--quiet", "--no-plots"]) == 0
    out = capsys.readouterr().out
    k = float(re.search(r"k = ([\d.]+) ±", out).group(1))
    c = float(re.search(r"c = ([\d.]+) ±", out).group(1))
    assert k == pytest.approx(k_doc, rel=1e-6) and c == pytest.approx(c_doc, rel=1e-6)
    assert abs(k - 8.0) < 3 * k_se


def test_starts_toml_names_parameters_of_the_spring_pendulum():
    from pdsl.pipeline import load_models
    from pdsl.sweep import members_from_toml

    members = members_from_toml(EXAMPLES / "starts.toml")
    params = {p.name for p in load_models(ROOT / "models" / "spring_pendulum.phm")[0].params}
    assert len(members) == 3 and all(set(m.params) <= params for m in members)
    assert members[2].seed == 7


def test_bad_phm_has_the_documented_error(capsys):
    assert main(["check", str(EXAMPLES / "bad.phm")]) == 2
    assert "4:14: error[UnknownName]: unknown name `thetaa`" in capsys.readouterr().err
