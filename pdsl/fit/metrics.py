"""Evaluation metrics of BENCHMARKS A6 (Part G check 8).

* Bounded relative error Err(t) = ‖ẑ − z‖ / (‖ẑ‖ + ‖z‖) ∈ [0, 1]; Err(z, z) = 0, Err(−z, z) = 1;
  0/0 (both zero) counts as 0.
* Geometric mean over time h̄ = exp((1/T) ∫ log h dt), trapezoid rule on the sample grid. It is
  computed as h_ref · exp((1/T) ∫ log(h/h_ref) dt) with h_ref = h(t_0), so a constant series comes
  back exactly. **t = 0 is excluded** from trajectory errors (:func:`trajectory_error`): a rollout
  starts from the data, Err(0) = 0 and log 0 is undefined, so the integral runs over
  [t_1, t_N] (the source leaves this open; BENCHMARKS A6 chooses "start the integral at the first step";
  the CHNN authors' code's eps = 1e-8 is not used). A later exact zero makes h̄ = 0.
* Energy error |H(z) − H(ẑ)| / (|H(z)| + |H(ẑ)|), with the same energy function on both.
* Constraint violation: RMS of Φ over the constraints, per time.
* Across trajectories: mean with a normal-approximation 95 % confidence half-width 1.96·s/√n.
* A prediction that is not finite (NaN or inf: a rollout that diverged) is the worst error there is:
  Err, the energy error and the constraint RMS are ``inf`` at its samples, and so is the geometric
  mean of a trajectory with such a sample. :func:`summarize` counts every non-finite value as a
  diverged trajectory (``diverged``) and its mean and maximum become ``inf``: a diverging model
  never scores as a good one, and no trajectory is dropped silently.
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


def _not_finite(a) -> np.ndarray:
    """Per sample (last axis reduced): whether any value is NaN or inf."""
    return ~np.all(np.isfinite(a), axis=-1)


def bounded_relative_error(z_hat, z) -> np.ndarray:
    """Err along the last axis (one value per time sample for (T, d) arrays); ``inf`` where the
    prediction (or the data) is not finite."""
    z_hat, z = np.asarray(z_hat, dtype=float), np.asarray(z, dtype=float)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        num = np.linalg.norm(z_hat - z, axis=-1)
        den = np.linalg.norm(z_hat, axis=-1) + np.linalg.norm(z, axis=-1)
        err = np.where(den > 0, num / np.where(den > 0, den, 1.0), 0.0)
    return np.where(_not_finite(z_hat) | _not_finite(z), np.inf, err)


def geometric_mean(h, t) -> float:
    """exp of the trapezoid time-average of log h over the whole grid ``t`` (h > 0 expected)."""
    h, t = np.asarray(h, dtype=float), np.asarray(t, dtype=float)
    if h.shape != t.shape or h.size < 1:
        raise ValueError("h and t must be 1-D arrays of the same length")
    if not np.all(np.isfinite(h)):  # a diverged prediction: the worst error
        return float("inf")
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
    """|H(z) − H(ẑ)| / (|H(z)| + |H(ẑ)|) per sample; ``inf`` where either energy is not finite."""
    E, E_hat = np.asarray(E, dtype=float), np.asarray(E_hat, dtype=float)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        den = np.abs(E) + np.abs(E_hat)
        err = np.where(den > 0, np.abs(E - E_hat) / np.where(den > 0, den, 1.0), 0.0)
    return np.where(np.isfinite(E) & np.isfinite(E_hat), err, np.inf)


def constraint_rms(phi) -> np.ndarray:
    """RMS over the constraints (last axis) per time; (T, C) -> (T,); ``inf`` where Φ is not finite."""
    phi = np.asarray(phi, dtype=float)
    if phi.shape[-1] == 0:
        return np.zeros(phi.shape[:-1])
    with np.errstate(over="ignore", invalid="ignore"):
        rms = np.sqrt(np.mean(phi**2, axis=-1))
    return np.where(_not_finite(phi), np.inf, rms)


def summarize(values) -> dict:
    """mean, 95 % CI half-width, min, max over trajectories; ``n`` trajectories, ``diverged`` of them not finite.

    A value that is not finite (inf, or NaN) is a diverged trajectory: it is counted, never dropped, and
    the worst error there is — the mean and the maximum are then ``inf`` (the CI is NaN); the minimum is
    the least of the finite values."""
    v = np.asarray(list(values), dtype=float).ravel()
    bad = ~np.isfinite(v)
    k = int(bad.sum())
    ok = v[~bad]
    nan = float("nan")
    if v.size == 0:
        return {"mean": nan, "ci95": nan, "min": nan, "max": nan, "n": 0, "diverged": 0}
    if k:
        return {"mean": float("inf"), "ci95": nan, "min": float(ok.min()) if ok.size else float("inf"),
                "max": float("inf"), "n": int(v.size), "diverged": k}
    ci = 1.96 * ok.std(ddof=1) / np.sqrt(ok.size) if ok.size > 1 else nan
    return {"mean": float(ok.mean()), "ci95": float(ci), "min": float(ok.min()), "max": float(ok.max()),
            "n": int(v.size), "diverged": 0}
