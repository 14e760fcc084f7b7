"""Evaluation metrics of BENCHMARKS A6 (Part G check 8).

* Bounded relative error Err(t) = ‖ẑ − z‖ / (‖ẑ‖ + ‖z‖) ∈ [0, 1]; Err(z, z) = 0, Err(−z, z) = 1;
  0/0 (both zero) counts as 0.
* Geometric mean over time h̄ = exp((1/T) ∫ log h dt), trapezoid rule on the sample grid. It is
  computed as h_ref · exp((1/T) ∫ log(h/h_ref) dt) with h_ref = h(t_0), so a constant series comes
  back exactly. **t = 0 is excluded** from trajectory errors (:func:`trajectory_error`): a rollout
  starts from the data, Err(0) = 0 and log 0 is undefined, so the integral runs over
  [t_1, t_N] (the A6 [FLAG] choice "start the integral at the first step"; the repo's eps = 1e-8
  is not used). A later exact zero makes h̄ = 0.
* Energy error |H(z) − H(ẑ)| / (|H(z)| + |H(ẑ)|), with the same energy function on both.
* Constraint violation: RMS of Φ over the constraints, per time.
* Across trajectories: mean with a normal-approximation 95 % confidence half-width 1.96·s/√n.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "bounded_relative_error",
    "geometric_mean",
    "trajectory_error",
    "energy_error",
    "constraint_rms",
    "summarize",
]


def bounded_relative_error(z_hat, z) -> np.ndarray:
    """Err along the last axis (one value per time sample for (T, d) arrays)."""
    z_hat, z = np.asarray(z_hat, dtype=float), np.asarray(z, dtype=float)
    num = np.linalg.norm(z_hat - z, axis=-1)
    den = np.linalg.norm(z_hat, axis=-1) + np.linalg.norm(z, axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1.0), 0.0)


def geometric_mean(h, t) -> float:
    """exp of the trapezoid time-average of log h over the whole grid ``t`` (h > 0 expected)."""
    h, t = np.asarray(h, dtype=float), np.asarray(t, dtype=float)
    if h.shape != t.shape or h.size < 1:
        raise ValueError("h and t must be 1-D arrays of the same length")
    if h.size == 1:
        return float(h[0])
    if np.any(h < 0):
        raise ValueError("the geometric mean needs non-negative values")
    if np.any(h == 0):
        return 0.0
    ref = h[0]
    dt = np.diff(t)
    log_ratio = np.log(h / ref)
    integral = float(np.sum(dt * (log_ratio[1:] + log_ratio[:-1]) / 2))
    return float(ref * np.exp(integral / (t[-1] - t[0])))


def trajectory_error(z_hat, z, t) -> tuple[np.ndarray, float]:
    """(Err(t), its geometric mean over t_1..t_N — t = 0 excluded, see the module docstring)."""
    err = bounded_relative_error(z_hat, z)
    if len(err) < 2:
        return err, float("nan")
    return err, geometric_mean(err[1:], np.asarray(t, dtype=float)[1:])


def energy_error(E, E_hat) -> np.ndarray:
    E, E_hat = np.asarray(E, dtype=float), np.asarray(E_hat, dtype=float)
    den = np.abs(E) + np.abs(E_hat)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, np.abs(E - E_hat) / np.where(den > 0, den, 1.0), 0.0)


def constraint_rms(phi) -> np.ndarray:
    """RMS over the constraints (last axis) per time; (T, C) -> (T,)."""
    phi = np.asarray(phi, dtype=float)
    if phi.shape[-1] == 0:
        return np.zeros(phi.shape[:-1])
    return np.sqrt(np.mean(phi**2, axis=-1))


def summarize(values) -> dict:
    """mean, 95 % CI half-width, min, max over trajectories (NaNs dropped)."""
    v = np.asarray([x for x in values if x == x], dtype=float)
    if v.size == 0:
        return {"mean": float("nan"), "ci95": float("nan"), "min": float("nan"), "max": float("nan"), "n": 0}
    ci = 1.96 * v.std(ddof=1) / np.sqrt(v.size) if v.size > 1 else float("nan")
    return {"mean": float(v.mean()), "ci95": float(ci), "min": float(v.min()), "max": float(v.max()), "n": int(v.size)}
