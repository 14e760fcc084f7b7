"""`pdsl evaluate --energy-grid ... --reference MODEL`: Table 1's metric (BENCHMARKS B6). Torch-free."""

import json
from pathlib import Path

import numpy as np
import pytest
from fit_helpers import cli

from pdsl.fit.energy_grid import grid_errors, parse_grid

ROOT = Path(__file__).resolve().parents[2]
DW = ROOT / "models" / "double_well.phm"


def test_offset_and_shape_errors(tmp_path, capsys):
    """H + 0.1 q² + 3 against H on q, p ∈ [-2, 2]²: raw MAE = 3 + 0.1·mean q², offset-corrected = 0.1·mean|q² − mean q²|."""
    shifted = tmp_path / "dw.phm"
    shifted.write_text(DW.read_text().replace("- q^2/2\n", "- q^2/2 + 0.1*q^2 + 3\n"))
    out = tmp_path / "e.json"
    assert cli("evaluate", shifted, "--energy-grid", "q=-2:2:101,p=-2:2:101", "--reference", DW, "--json", out) == 0
    text = capsys.readouterr().out
    assert "101 x 101 grid (10201 points)" in text and "offset-corrected" in text
    q = np.linspace(-2, 2, 101)
    mq2 = float(np.mean(q**2))
    got = json.loads(out.read_text())["energy_grid"]
    assert got["mae"] == pytest.approx(3 + 0.1 * mq2, rel=1e-12)
    assert got["offset"] == pytest.approx(3 + 0.1 * mq2, rel=1e-12)
    assert got["mae_offset_corrected"] == pytest.approx(0.1 * np.mean(np.abs(q**2 - mq2)), rel=1e-12)
    assert cli("evaluate", DW, "--energy-grid", "q=-2:2:11,p=0.5", "--reference", DW) == 0
    assert "raw 0.0000e+00; offset-corrected 0.0000e+00" in capsys.readouterr().out


@pytest.mark.parametrize("spec,msg", [("q=-2:2:101", "no values for p"), ("q=1:0:3,p=0", "LO must be below HI"),
                                      ("q=-2:2:x,p=0", "N an integer"), ("r=0,q=0,p=0", "not a state"),
                                      ("q=0,q=1,p=0", "given twice"), ("q", "not NAME=LO:HI:N")])
def test_bad_grids_exit_2(spec, msg, capsys):
    assert cli("evaluate", DW, "--energy-grid", spec, "--reference", DW) == 2
    err = capsys.readouterr().err
    assert msg in err and "Traceback" not in err


def test_needs_reference_and_states_by_name(tmp_path, capsys):
    assert cli("evaluate", DW, "--energy-grid", "q=0,p=0") == 2
    assert "--energy-grid needs --reference" in capsys.readouterr().err
    assert cli("evaluate", DW, "--reference", DW) == 2  # a reference compares on a grid or along --data
    assert "on --energy-grid (H) or along --data" in capsys.readouterr().err
    assert cli("evaluate", DW, "--energy-grid", "q=0,p=0", "--reference", ROOT / "models" / "henon_heiles.phm") == 2
    assert "same state names" in capsys.readouterr().err


def test_grid_errors_and_parse():
    g = parse_grid("p=0:1:3,q=2", ("q", "p"))
    assert list(g) == ["p", "q"] and np.allclose(g["p"], [0, 0.5, 1])
    e = grid_errors(np.array([1.0, 2.0, 4.0]), np.array([0.0, 0.0, 0.0]))
    assert e.mae == pytest.approx(7 / 3) and e.mae_offset_corrected == pytest.approx((4 / 3 + 1 / 3 + 5 / 3) / 3)
