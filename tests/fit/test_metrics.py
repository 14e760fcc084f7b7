"""BENCHMARKS A6 metrics, Part G check 8."""

import numpy as np
import pytest

from pdsl.fit import metrics as M


def test_bounded_relative_error_properties():
    rng = np.random.default_rng(0)
    z = rng.standard_normal((50, 6))
    assert np.all(M.bounded_relative_error(z, z) == 0)
    np.testing.assert_allclose(M.bounded_relative_error(-z, z), 1.0, rtol=0, atol=1e-15)
    other = rng.standard_normal((50, 6))
    err = M.bounded_relative_error(other, z)
    assert np.all((err >= 0) & (err <= 1))
    # Err(c z, z) = |c - 1| / (|c| + 1) -> 1 as c -> inf
    big = M.bounded_relative_error(1e8 * z, z)
    assert np.all(big > 1 - 1e-7)
    # orthogonal vectors of equal norm: 1/sqrt(2) (BENCHMARKS A6 flags this)
    assert M.bounded_relative_error([1.0, 0.0], [0.0, 1.0]) == pytest.approx(1 / np.sqrt(2), abs=1e-15)
    assert M.bounded_relative_error(np.zeros(3), np.zeros(3)) == 0.0


def test_geometric_mean_exponential_is_exact():
    t = np.linspace(0.0, 1.0, 11)
    assert M.geometric_mean(np.exp(t), t) == pytest.approx(np.exp(0.5), rel=1e-12, abs=0)


def test_geometric_mean_one_plus_t():
    t = np.linspace(0.0, 1.0, 101)
    assert abs(M.geometric_mean(1 + t, t) - 4 / np.e) <= 1e-5
    assert 4 / np.e == pytest.approx(1.471518, abs=1e-6)


@pytest.mark.parametrize("c", [0.3, 1.0, 7.25, 1e-9, 123456.789])
def test_geometric_mean_constant_is_returned_exactly(c):
    t = np.linspace(0.0, 3.0, 37)
    assert M.geometric_mean(np.full_like(t, c), t) == c


def test_trajectory_error_excludes_t0():
    t = np.linspace(0.0, 1.0, 11)
    z = np.column_stack([np.ones_like(t), t])
    z_hat = z.copy()
    z_hat[1:, 0] += 0.1  # exact at t = 0 (Err(0) = 0), 0.1 off later
    err, geo = M.trajectory_error(z_hat, z, t)
    assert err[0] == 0.0
    expected = M.geometric_mean(err[1:], t[1:])
    assert geo == expected and 0 < geo < 1


def test_energy_error_and_constraint_rms_fixtures():
    E = np.array([1.0, -2.0, 0.0, 3.0])
    E_hat = np.array([1.0, -1.0, 0.0, -3.0])
    np.testing.assert_array_equal(M.energy_error(E, E_hat), [0.0, 1 / 3, 0.0, 1.0])
    phi = np.array([[3.0, 4.0], [0.0, 0.0], [1.0, -1.0]])
    np.testing.assert_allclose(M.constraint_rms(phi), [np.sqrt(12.5), 0.0, 1.0], rtol=1e-15)


def test_summarize():
    s = M.summarize([1.0, 2.0, 3.0])
    assert s["n"] == 3 and s["mean"] == 2.0 and s["min"] == 1.0 and s["max"] == 3.0 and s["diverged"] == 0
    assert s["ci95"] == pytest.approx(1.96 * 1.0 / np.sqrt(3))


def test_summarize_counts_non_finite_values_as_diverged():
    """A NaN was dropped silently (a diverged trajectory vanished from the mean): now it is counted, and the worst."""
    s = M.summarize([1.0, 2.0, 3.0, float("nan"), float("inf")])
    assert s["n"] == 5 and s["diverged"] == 2
    assert s["mean"] == np.inf and s["max"] == np.inf and s["min"] == 1.0 and np.isnan(s["ci95"])
    s = M.summarize([float("nan")])
    assert s["n"] == 1 and s["diverged"] == 1 and s["mean"] == np.inf and s["min"] == np.inf


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_a_non_finite_prediction_is_the_worst_error(bad):
    """A NaN prediction scored Err = 0 and a geometric mean of 0: a perfect score for a diverged rollout."""
    t = np.linspace(0.0, 1.0, 11)
    z = np.column_stack([np.cos(t), np.sin(t)])
    z_hat = z * 1.01
    z_hat[6:, 0] = bad  # diverged from t = 0.6 on
    err, geo = M.trajectory_error(z_hat, z, t)
    assert np.all(np.isfinite(err[:6])) and np.all(err[6:] == np.inf)
    assert geo == np.inf
    assert M.bounded_relative_error(np.full(3, bad), np.ones(3)) == np.inf
    assert M.geometric_mean(np.array([0.1, bad, 0.2]), np.array([0.0, 0.5, 1.0])) == np.inf
    np.testing.assert_array_equal(M.energy_error(np.array([1.0, 1.0]), np.array([1.0, bad])), [0.0, np.inf])
    np.testing.assert_array_equal(M.constraint_rms(np.array([[0.0, 0.0], [bad, 0.0]])), [0.0, np.inf])
