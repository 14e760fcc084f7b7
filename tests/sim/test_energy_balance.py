"""`simulate` reports an energy *balance* for driven/damped models and the drift for conservative ones."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from pdsl.cli.main import main
from pdsl.sim.simulate import energy_balance

MODELS = Path(__file__).resolve().parents[2] / "models"


def _energy_line(capsys, *argv) -> str:
    assert main(list(argv)) == 0
    lines = [ln for ln in capsys.readouterr().out.splitlines() if "energy" in ln]
    assert len(lines) == 1, lines
    return lines[0]


def test_driven_damped_model_reports_a_closed_balance(tmp_path, capsys):
    line = _energy_line(capsys, "simulate", str(MODELS / "mass_spring_damper.phm"), "--t-end", "10", "--dt", "0.01",
                        "--input", "F=sin(t)", "--init", "q=1", "-o", str(tmp_path / "o.csv"))
    assert line.startswith("  energy balance:")
    rel = float(re.search(r"energy exchanged, [0-9.e+-]+: ([0-9.e+-]+);", line).group(1))
    assert rel < 1e-6  # the old drift line read 0.86 here: the damper dissipates most of E(0)
    net = float(re.search(r"net supplied − dissipated = ([-0-9.e+]+)", line).group(1))
    change = float(re.search(r"E\(end\) − E\(0\) = ([-0-9.e+]+)", line).group(1))
    assert net == pytest.approx(change, rel=1e-5) and change < -1.0


def test_conservative_model_reports_drift(tmp_path, capsys):
    line = _energy_line(capsys, "simulate", str(MODELS / "henon_heiles.phm"), "--t-end", "10", "--dt", "0.1",
                        "--rtol", "1e-10", "-o", str(tmp_path / "o.csv"))
    assert line.startswith("  energy: E(0) =") and "max |E(t) − E(0)|" in line


def test_energy_balance_closed_form():
    """E = e^{-t} (power −e^{-t}): the residual is Simpson's error, O(dt⁴)."""
    t = np.linspace(0.0, 2.0, 201)
    integral, residual = energy_balance(t, np.exp(-t), -np.exp(-t))
    assert integral[-1] == pytest.approx(np.exp(-2.0) - 1.0, rel=1e-9)
    assert np.abs(residual).max() < 1e-9
