"""Long-time energy behaviour (BENCHMARKS G check 10).

CI runs 1e4 steps; the full 1e5-step check is marked slow. The implicit-midpoint thresholds
are the check's own: its maxima are reached within the first periods, so 1e4 steps are an
honest sample. RK4 drifts linearly, so its CI bound is the 1e5-step bound scaled by 1/10,
together with a growth test (the second half of the run drifts about twice the first half).
"""

from __future__ import annotations

import numpy as np
import pytest
from numerics_systems import coupled_oscillator, double_well, henon_heiles

from pdsl.numerics.fixed_step import make_rollout

CONVERGED_FPI = {"solver": "fpi", "n_iter": 25}  # residual at round-off at h <= 0.1 (check 9)


def _energy_error(system, y0, h: float, n_steps: int, method: str = "midpoint", **options) -> np.ndarray:
    """|H(y_n) - H(y_0)| along an n_steps rollout."""
    X = np.array(make_rollout(system.rhs, method, h, n_steps, **options)(0.0, y0, system.theta))
    H = np.array(system.energy.map(n_steps)(X, system.theta)).ravel()
    return np.abs(H - float(system.energy(y0, system.theta)))


def _growth(dH: np.ndarray) -> float:
    """max |dH| over the second half divided by the max over the first half."""
    half = dH.size // 2
    return float(dH[half:].max() / dH[:half].max())


MIDPOINT_CASES = [
    # (system, y0, h, bound on max |dH|, check secular growth)
    (coupled_oscillator, [1.0, 0.0], 0.1, 1e-10, False),
    (double_well, [1.2, 0.3], 0.01, 5e-6, True),
    (double_well, [1.2, 0.3], 0.1, 5e-4, True),
    (henon_heiles, [0.1, -0.2, 0.3, 0.2], 0.1, 5e-5, True),
]


def _check_midpoint(system, y0, h, bound, secular, n_steps):
    dH = _energy_error(system(), y0, h, n_steps, **CONVERGED_FPI)
    assert dH.max() <= bound, dH.max()
    if secular:
        assert _growth(dH) <= 1.2


@pytest.mark.parametrize(("system", "y0", "h", "bound", "secular"), MIDPOINT_CASES)
def test_midpoint_energy_is_bounded(system, y0, h, bound, secular):
    _check_midpoint(system, y0, h, bound, secular, 10**4)


@pytest.mark.slow
@pytest.mark.parametrize(("system", "y0", "h", "bound", "secular"), MIDPOINT_CASES)
def test_midpoint_energy_is_bounded_1e5_steps(system, y0, h, bound, secular):
    _check_midpoint(system, y0, h, bound, secular, 10**5)


def test_midpoint_with_newton_conserves_the_quadratic_invariant():
    assert _energy_error(coupled_oscillator(), [1.0, 0.0], 0.1, 10**4, solver="newton").max() <= 1e-10


def test_rk4_drifts_secularly():
    dH = _energy_error(double_well(), [1.2, 0.3], 0.1, 10**4, method="rk4")
    assert dH.max() >= 1e-4
    assert _growth(dH) >= 1.8


@pytest.mark.slow
def test_rk4_drifts_secularly_1e5_steps():
    dH = _energy_error(double_well(), [1.2, 0.3], 0.1, 10**5, method="rk4")
    assert dH.max() >= 1e-3
    assert _growth(dH) >= 1.8
