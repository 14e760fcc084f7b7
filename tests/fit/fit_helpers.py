"""Models and helpers shared by the fit tests (all seeded)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from pdsl.cli.main import main
from pdsl.data.csvio import read_table, write_table

# A double pendulum (Cartesian bodies, links of length 1) with a KNOWN spring on the lower bob.
# Without the spring the dynamics depend on the masses only through m2/(m1 + m2) (scaling both
# masses scales momenta, gravity and constraint forces alike); the spring force does not scale,
# so the absolute masses become identifiable. See test_fit_double_pendulum.py.
SPRING_PENDULUM = """\
# double pendulum with a known spring on the lower bob
model SpringPendulum "double pendulum, Cartesian, known spring"
  space 2
  param m1 = 1.0 {lower = 0}, m2 = 1.0 {lower = 0}, g = 9.81, k = 4.0
  body b1 = point(mass = m1)
  body b2 = point(mass = m2)
  link ground, b1, length = 1.0
  link b1, b2, length = 1.0
  spring ground.at([0, -2.5]), b2, k = k, rest = 0.5
  gravity g
end
"""

PLAIN_PENDULUM = SPRING_PENDULUM.replace("  spring ground.at([0, -2.5]), b2, k = k, rest = 0.5\n", "")

# One pendulum bob whose potential is a small network (CHNN-style, A1.4) with a free mass.
NN_PENDULUM = """\
model NNPendulum "pendulum with a learned potential"
  space 2
  param m = 1.0 {free, lower = 0}
  nn V: mlp(hidden = [6], act = tanh, out = 1)
  body b = point(mass = m)
  link ground, b, length = 1.0
  potential V(b.x, b.y)
end
"""

TRUE_PENDULUM = """\
model Pendulum
  space 2
  param m = 1.0, g = 9.81
  body b = point(mass = m)
  link ground, b, length = 1.0
  gravity g
end
"""


def cli(*args) -> int:
    return main([str(a) for a in args])


def simulate_csv(model: Path, out: Path, n: int, t_end: float, dt: float, *extra) -> Path:
    rc = cli("simulate", model, "--t-end", t_end, "--dt", dt, "--random-init", n, "--random-scale", 0.5,
             "--seed", 0, "--rtol", 1e-10, "-o", out, *extra)
    assert rc == 0
    return out


def add_noise(src: Path, dst: Path, level: float, seed: int) -> Path:
    """Gaussian noise of ``level`` times each column's standard deviation on every state column."""
    table = read_table(src)
    data = table.data.copy()
    cols = [k for k, c in enumerate(table.columns) if c not in ("traj", "t")]
    rng = np.random.default_rng(seed)
    data[:, cols] += level * data[:, cols].std(axis=0) * rng.standard_normal((data.shape[0], len(cols)))
    write_table(dst, table.columns, data)
    return dst


