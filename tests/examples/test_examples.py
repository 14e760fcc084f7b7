"""Every example runs (in its fast mode) and says something true."""

import importlib.util
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _load(name):
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_tolerance_study_drift_shrinks_with_rtol():
    rows = _load("tolerance_study").main(["--fast"])
    adams = [drift for integrator, _, drift in rows if integrator == "cvodes"]
    assert adams[-1] < adams[0] / 100
    assert adams[-1] < 1e-8
