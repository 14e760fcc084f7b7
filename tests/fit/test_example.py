"""examples/fit_double_pendulum.py runs (fast mode) and recovers the masses."""

import importlib.util
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "fit_double_pendulum.py"


def test_fit_double_pendulum_example(tmp_path):
    spec = importlib.util.spec_from_file_location("fit_double_pendulum", EXAMPLE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    result = mod.main(["--fast", "--out", str(tmp_path)])
    assert result["masses"]["m1"] == pytest.approx(1.3, rel=0.01)
    assert result["masses"]["m2"] == pytest.approx(0.7, rel=0.01)
    assert (tmp_path / "learned" / "networks.npz").is_file()
    assert (tmp_path / "masses" / "report.md").is_file()
