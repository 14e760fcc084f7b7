"""models/cucker_smale.phm against BENCHMARKS C6.1 (the port-Hamiltonian paper's Eqs. 25–26) and Part G check 15."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pdsl.pipeline import compile_model
from pdsl.sim.simulate import simulate, time_grid

PATH = Path(__file__).resolve().parents[2] / "models" / "cucker_smale.phm"
N = 30
PARAMS = {"gamma": 0.15, "C_A": 200.0, "l_A": 100.0, "C_R": 500.0, "l_R": 2.0}


def eq_26(x, v, gamma, C_A, l_A, C_R, l_R):
    """v_i' = (1/N) Σ_j G(r_ij)(v_j − v_i) − (1/N) Σ_{j≠i} U'(r_ij) sign(x_i − x_j), r_ij = |x_i − x_j|."""
    n = len(x)
    dx = x[:, None] - x[None, :]  # x_i − x_j
    r = np.abs(dx)
    G = (1 + r**2) ** (-gamma)
    dU = C_A / l_A * np.exp(-r / l_A) - C_R / l_R * np.exp(-r / l_R)
    off = ~np.eye(n, dtype=bool)
    align = (G * (v[None, :] - v[:, None])).sum(axis=1)
    potential = np.where(off, dU * np.sign(dx), 0.0).sum(axis=1)
    return (align - potential) / n


@pytest.fixture(scope="module")
def cs():
    return compile_model(PATH)


def test_structure_and_start_values(cs):
    num = cs.numeric
    assert num.nx == 2 * N
    assert num.x_names[:2] == ("x[1]", "x[2]") and num.x_names[N] == "v[1]"
    assert dict(zip(num.p_names, num.p_default)) == PARAMS
    x0, v0 = num.x_start[:N], num.x_start[N:]
    rng = np.random.default_rng(2024)  # as the file's header says
    np.testing.assert_allclose(x0, np.round(rng.uniform(-10, 10, N), 4), atol=0)
    np.testing.assert_allclose(v0, np.round(rng.uniform(-10, 10, N), 4), atol=0)
    assert np.all(np.abs(num.x_start) <= 10)


def test_rhs_equals_eq_26(cs):
    num = cs.numeric
    rng = np.random.default_rng(26)
    n_pts = 100
    X = rng.uniform(-10, 10, (n_pts, 2 * N))
    X[0, 1] = X[0, 0]  # a coincident pair: the sign term vanishes, no 0/0
    out = np.asarray(num.rhs.map(n_pts)(0.0, X.T, num.p_default, np.zeros((0, n_pts)))).T
    err = 0.0
    for xv, f in zip(X, out):
        x, v = xv[:N], xv[N:]
        ref = np.concatenate([v, eq_26(x, v, **PARAMS)])
        err = max(err, np.abs(f - ref).max() / np.abs(ref).max())
    assert err <= 1e-12, err


def test_pairwise_force_changes_sign_at_r_star():
    """Check 15: F_true(0, q) = U'(|q|) sign(q) vanishes at r* = ln(125)/0.49 ≈ 9.8537."""
    r_star = np.log(125) / 0.49
    x = np.array([0.0, r_star])
    v = np.zeros(2)
    assert abs(eq_26(x, v, **PARAMS)).max() <= 1e-13
    assert abs(r_star - 9.8537) <= 1e-4


def test_momentum_conserved(cs):
    """Check 15: Σ v_i conserved to 1e-9 relative over 40 s at rtol 1e-10 (401 samples at 0.1 s).

    Σ v_i(0) = −22.116 is not small compared with Σ |v_i(0)| = 133.0, so the relative bound is
    taken against |Σ v_i(0)| itself.
    """
    num = cs.numeric
    grid = time_grid(40.0, 0.1)
    res = simulate(num, grid, rtol=1e-10)
    assert res.x.shape == (401, 2 * N)
    V = res.x[:, N:]
    total = V.sum(axis=1)
    assert abs(total[0]) >= 0.1 * np.abs(V[0]).sum()
    drift = np.abs(total - total[0]).max() / abs(total[0])
    assert drift <= 1e-9, drift
    # the swarm does something: velocities align (their spread shrinks)
    assert V[-1].std() < 0.5 * V[0].std()
