"""Data of BENCHMARKS Part B (B2, B5): the double well, the coupled oscillator and Hénon–Heiles.

Initial states are drawn uniformly in the B2 domains (the symplectic-HNN authors' code: q, p ~ U[−2, 2] for the two
1-DOF systems, U[−0.3, 0.3]⁴ for Hénon–Heiles); trajectories are integrated with classical RK4 at
``refine`` substeps per sample interval (local error ~h⁵/refine⁴: round-off level at dt = 0.01,
refine = 10, the "high-order solver" of B5), vectorised over the initial states in numpy.
Noise σ·N(0, 1) is added to every sample except t0 (B5, as the symplectic-HNN authors' code). For long protocols only the
windows the loss uses are kept: a trajectory of ``samples`` samples is written as it is, so keep
``samples`` at the window length + what the random window needs.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

ALPHA = 0.5  # coupled oscillator, as the symplectic-HNN authors' code

SYSTEMS = {
    # name: (model file, state names, domain half-width, dt, H(y), f(y))
    "double_well": ("double_well.phm", ("q", "p"), 2.0, 0.01),
    "coupled_oscillator": ("coupled_oscillator.phm", ("q", "p"), 2.0, 0.01),
    "henon_heiles": ("henon_heiles.phm", ("x", "y", "px", "py"), 0.3, 0.001),
}


def rhs(name: str, Y: np.ndarray) -> np.ndarray:
    if name == "double_well":
        q, p = Y[:, 0], Y[:, 1]
        return np.stack([p, q - q**3], 1)
    if name == "coupled_oscillator":
        q, p = Y[:, 0], Y[:, 1]
        return np.stack([p + ALPHA * q, -(q + ALPHA * p)], 1)
    x, y, px, py = Y.T
    return np.stack([px, py, -x - 2 * x * y, -y - x * x + y * y], 1)


def energy(name: str, Y: np.ndarray) -> np.ndarray:
    if name == "double_well":
        q, p = Y[..., 0], Y[..., 1]
        return p**2 / 2 + q**4 / 4 - q**2 / 2
    if name == "coupled_oscillator":
        q, p = Y[..., 0], Y[..., 1]
        return p**2 / 2 + q**2 / 2 + ALPHA * p * q
    x, y, px, py = (Y[..., k] for k in range(4))
    return (px**2 + py**2) / 2 + (x**2 + y**2) / 2 + x**2 * y - y**3 / 3


def trajectories(name: str, n: int, samples: int, seed: int, refine: int = 10) -> np.ndarray:
    """(n, samples, 2d) exact-to-round-off trajectories from uniform initial states."""
    _, names, half, dt = SYSTEMS[name]
    rng = np.random.default_rng(seed)
    Y = rng.uniform(-half, half, (n, len(names)))
    out = np.empty((n, samples, len(names)))
    out[:, 0] = Y
    h = dt / refine
    for k in range(1, samples):
        for _ in range(refine):
            k1 = rhs(name, Y)
            k2 = rhs(name, Y + h / 2 * k1)
            k3 = rhs(name, Y + h / 2 * k2)
            k4 = rhs(name, Y + h * k3)
            Y = Y + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
        out[:, k] = Y
    return out


def noisy(Z: np.ndarray, sigma: float, seed: int) -> np.ndarray:
    """σ·N(0, 1) on every sample but the first of each trajectory (B5)."""
    out = Z.copy()
    if sigma > 0:
        out[:, 1:] += sigma * np.random.default_rng([seed, 99]).standard_normal(out[:, 1:].shape)
    return out


def write_csv(path: Path, name: str, Z: np.ndarray) -> Path:
    """traj, t, states: the format `pdsl fit` reads."""
    from pdsl.data.csvio import write_table

    _, names, _, dt = SYSTEMS[name]
    n, m, d = Z.shape
    data = np.column_stack([np.repeat(np.arange(n), m), np.tile(dt * np.arange(m), n), Z.reshape(n * m, d)])
    write_table(path, ["traj", "t", *names], data)
    return Path(path)
