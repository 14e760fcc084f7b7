"""Pieces of the gyroscope reproduction (benchmarks/repro_gyroscope.py, issue 32 item 1), checked against
independent routes: the training/test data that `pdsl simulate --random-init` draws from
models/gyroscope.sample, converted to the turned-frame ZXZ Euler angles of the HNN baseline
(benchmarks/gyroscope_data.py), must be a solution of the Euler-angle Hamiltonian of the top (A3.4,
Eqs. 27–28, moments about the pivot; BENCHMARKS Part G check 5) integrated by scipy; energy, the vertical
angular momentum L_z and the spin momentum p_ψ are conserved; the Cartesian ↔ Euler maps are inverse."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import gyroscope_data as gd  # noqa: E402

solve_ivp = pytest.importorskip("scipy.integrate").solve_ivp


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    out = tmp_path_factory.mktemp("gyro") / "traj.csv"
    gd.simulate(6, 11, out)  # 6 A3.4 initial states, 2 s at dt = 0.02, CVODES rtol 1e-10
    return gd.read_trajectories(out)


def euler_rhs(_t, y):
    """Hamilton's equations of H = ½ pᵀ M(θ, ψ)⁻¹ p + V(q) in the turned frame, by central differences of
    M (a route independent of the Cartesian lowering); V = m g l (Qᵀ R'(q) e₃)_z = m g l cos φ sin θ."""
    q, p = y[:3], y[3:]
    Minv = np.linalg.inv(gd.euler_mass(q))
    qd = Minv @ p
    dH = np.zeros(3)
    for k in range(3):
        h = np.zeros(3)
        h[k] = 1e-6
        dM = (gd.euler_mass(q + h) - gd.euler_mass(q - h)) / 2e-6
        dH[k] = -0.5 * qd @ dM @ qd  # ∂/∂q (½ pᵀ M⁻¹ p) = −½ q̇ᵀ (∂M/∂q) q̇
    ph, th = q[0], q[1]
    dV = gd.M_TRUE * gd.G * gd.L_PIVOT * np.array([-np.sin(ph) * np.sin(th), np.cos(ph) * np.cos(th), 0.0])
    return np.concatenate([qd, -(dH + dV)])


def test_turned_frame_puts_the_vertical_off_the_singularity():
    up = np.eye(3)  # body axes = world axes: the top straight up
    q = gd.zxz_angles(gd.Q_TURN @ up)
    assert abs(np.sin(q[1]) - 1.0) <= 1e-15  # θ' = π/2, as far from θ' = 0, π as possible
    assert abs(np.sin(gd.zxz_angles(np.eye(3))[1])) <= 1e-15  # unturned: on the singularity


def test_cartesian_euler_maps_are_inverse(data):
    _, Z = data
    Y = gd.to_euler(Z)
    qdot = np.linalg.solve(gd.euler_mass(Y[..., :3]), Y[..., 3:, None])[..., 0]
    back = gd.euler_to_cartesian(Y[..., :3], qdot)
    assert np.abs(back - Z).max() <= 1e-7  # constraint residue of the CVODES data (rtol 1e-10) and the arccos
    # the angles are continuous in time (unwrapped), the rates finite differences of them
    assert np.abs(np.diff(Y[..., 0], axis=1)).max() < 1.0 and np.abs(np.diff(Y[..., 2], axis=1)).max() < 1.0


def test_pdsl_data_solves_the_turned_euler_hamiltonian(data):
    t, Z = data
    Y = gd.to_euler(Z)
    checked = 0
    for k in range(len(Z)):
        if np.abs(np.sin(Y[k, :, 1])).min() < 0.2:  # keep the reference away from its own singularity
            continue
        checked += 1
        sol = solve_ivp(euler_rhs, (0.0, t[k, -1]), Y[k, 0], t_eval=t[k], method="DOP853", rtol=1e-12, atol=1e-12)
        q, p = sol.y[:3].T, sol.y[3:].T
        qdot = np.linalg.solve(gd.euler_mass(q), p[..., None])[..., 0]
        pts = gd.euler_to_cartesian(q, qdot)
        assert np.abs(pts[:, :12] - Z[k, :, :12]).max() <= 1e-6  # body points, BENCHMARKS check 5
        assert np.abs(Y[k, :, 3:] - p).max() <= 1e-6 * np.abs(p).max()
        E = gd.true_energy(Z[k])
        assert np.abs(E - E[0]).max() <= 1e-8 * np.abs(E).max()
        # p_ψ (spin about the symmetry axis) and the world-vertical angular momentum about the pivot
        assert np.abs(Y[k, :, 5] - Y[k, 0, 5]).max() <= 1e-8 * abs(Y[k, 0, 5])
        R, Rdot = gd.rotation(Z[k])
        L = np.einsum("tij,tj->ti", R, gd.I_PIVOT * gd.body_omega(R, Rdot))  # world frame, I' about the pivot
        assert np.abs(L[:, 2] - L[0, 2]).max() <= 1e-8 * np.abs(L).max()
        # ... which is not p_φ of the turned frame: there the vertical is y', p_φ is not conserved
        assert np.abs(Y[k, :, 3] - Y[k, 0, 3]).max() > 1e-4 * np.abs(Y[k, :, 3:]).max()
    assert checked >= 3


# ---------------------------------------------------------------- the data-efficiency mode's pieces
def _repro():
    pytest.importorskip("torch")
    import repro_gyroscope

    return repro_gyroscope


def test_efficiency_sizes_are_parsed_and_bounded():
    rg = _repro()
    assert rg.parse_sizes(["chnn=10", "hnn=200"]) == [("chnn", 10), ("hnn", 200)]
    for bad in (["node=10"], ["chnn=0"], ["chnn=801"], ["chnn"], ["hnn=x"]):
        with pytest.raises(ValueError):
            rg.parse_sizes(bad)


def test_efficiency_training_sets_are_nested_prefixes(tmp_path):
    rg = _repro()
    src = tmp_path / "train.csv"
    rows = ["traj,t,x"] + [f"{k}.0,{t / 10},{k * 10 + t}" for k in range(7) for t in range(5)]
    src.write_text("\n".join(rows) + "\n")
    small = rg.first_trajectories(src, 2, tmp_path / "a.csv").read_text().splitlines()
    big = rg.first_trajectories(src, 5, tmp_path / "b.csv").read_text().splitlines()
    assert small[0] == big[0] == "traj,t,x"
    assert len(small) == 1 + 2 * 5 and len(big) == 1 + 5 * 5
    assert big[:len(small)] == small  # the smaller set is a prefix of the larger one
    assert {r.split(",")[0] for r in big[1:]} == {f"{k}.0" for k in range(5)}
    with pytest.raises(SystemExit):
        rg.first_trajectories(src, 8, tmp_path / "c.csv")


def test_efficiency_claim_from_errors():
    rg = _repro()
    errs = {("chnn", 10): 3e-2, ("chnn", 80): 1e-3, ("chnn", 800): 3e-5, ("hnn", 80): 0.2, ("hnn", 800): 5e-2}
    claim = rg.efficiency_claim(errs)
    assert claim["beats"][800] == (10, 80.0)  # the CHNN at 10 already beats the HNN at 800: 80x fewer data
    assert claim["beats"][80] == (10, 8.0)
    assert claim["ratio_equal_n"] == {80: pytest.approx(200.0), 800: pytest.approx(5e-2 / 3e-5)}
    assert rg.efficiency_claim({("chnn", 10): 1.0, ("hnn", 800): 0.5})["beats"][800] is None
