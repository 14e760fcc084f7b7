"""Measured-style data for the issue-16 tests: simulate, rename columns, jitter the sample times,
drop the velocities, add noise (seeded)."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

MODELS = Path(__file__).resolve().parents[2] / "models"
PENDULUM = MODELS / "driven_pendulum.phm"
TAU = "0.8*sin(1.7*t) + 0.3*cos(0.6*t)"
TRUE = {"k": 8.0, "c": 0.5}


def measured_pendulum(n_traj: int = 4, n: int = 160, dt: float = 0.05, noise: float = 0.01, jitter: float = 0.3,
                      seed: int = 0, params=None):
    """A DataFrame-like dict of columns run, time, x, theta, tau: the driven pendulum sampled at
    jittered times (±jitter·dt), velocities dropped, Gaussian noise of ``noise`` × each column's std."""
    from pdsl.pipeline import compile_model
    from pdsl.sim.simulate import input_from_expression, simulate

    num = compile_model(PENDULUM).numeric
    rng = np.random.default_rng(seed)
    blocks = []
    for k in range(n_traj):
        t = np.arange(n + 1) * dt + rng.uniform(-jitter, jitter, n + 1) * dt
        t[0] = 0.0
        x0 = {"x": rng.uniform(-0.3, 0.3), "theta": rng.uniform(-1.0, 1.0),
              "der(x)": rng.uniform(-0.5, 0.5), "der(theta)": rng.uniform(-1.0, 1.0)}
        res = simulate(num, t, x0=x0, params=dict(params or TRUE),
                       inputs={"tau": input_from_expression(num, "tau", TAU)}, rtol=1e-10, atol=1e-12)
        names, data = res.columns()
        cols = {name: data[:, i] for i, name in enumerate(names)}
        blocks.append(np.column_stack([np.full(len(t), k), cols["t"], cols["x"], cols["theta"], cols["tau"]]))
    data = np.vstack(blocks)
    for j in (2, 3):  # 1 % noise on the measured positions
        data[:, j] += noise * np.std(data[:, j]) * rng.standard_normal(len(data))
    return ["run", "time", "x", "theta", "tau"], data


def write_csv(path, header, data) -> Path:
    path = Path(path)
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        for row in data:
            w.writerow([repr(float(v)) for v in row])
    return path
