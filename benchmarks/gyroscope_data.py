"""Gyroscope data for benchmarks/repro_gyroscope.py (BENCHMARKS A3.4, A4): pdsl's Cartesian trajectories of
models/gyroscope.phm and their ZXZ Euler-angle form for the HNN baseline, in a world frame turned by π/2.

The Cartesian state (A2.2) is the centre of mass and the three unit principal-axis points with their
velocities, 24 columns in the order of :func:`cartesian_columns` (the names `pdsl simulate` writes).
R = [x₁ − x_cm, x₂ − x_cm, x₃ − x_cm] is the body's rotation, Ṙ = R [ω]× with ω its body angular
velocity. The Euler baseline sees R' = Q R, Q the turn by π/2 about the world x axis (the authors rotate
the coordinate system so that a top straight up or straight down is not the ZXZ singularity θ = 0, π;
the singularity then lies on the horizontal world y axis), as ZXZ angles R' = Rz(φ) Rx(θ) Rz(ψ),
φ and ψ unwrapped in time, and the canonical momenta p = Eᵀ diag(I') ω (ω = E q̇, A3.4) of the TRUE
moments about the pivot (I' = I + m l² on the two transverse axes), as the HNN of repro_chnn.py is given
p of the true masses. The way back takes q̇ (e.g. ∂H/∂p of a learned H): ω = E q̇, R = Qᵀ R'(q),
x_cm = l R e₃ (the pivot (0, 0, −l) in body coordinates sits at the origin), x_k = x_cm + R e_k.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

# models/gyroscope.phm (A3.4)
M_TRUE, L_PIVOT, G = 0.1, 0.22173, 9.81
LAM = np.array([0.241378, 0.241378, 0.036942])
I_COM = M_TRUE * (LAM.sum() - LAM)  # A2.1
I_PIVOT = I_COM + M_TRUE * L_PIVOT**2 * np.array([1.0, 1.0, 0.0])
DT, SAMPLES = 0.02, 100
Q_TURN = np.array([[1.0, 0.0, 0.0], [0.0, 0.0, -1.0], [0.0, 1.0, 0.0]])  # Rx(π/2): world → Euler frame
NODES = ("top", "top.a1", "top.a2", "top.a3")
EULER_COLUMNS = ["ph", "th", "ps", "p1", "p2", "p3"]


def cartesian_columns() -> list[str]:
    return [f"{n}.{a}" for n in NODES for a in "xyz"] + [f"{n}.v{a}" for n in NODES for a in "xyz"]


def simulate(n: int, seed: int, out: Path, rtol: float = 1e-10) -> Path:
    """`pdsl simulate models/gyroscope.phm --random-init n` (A3.4 initial states of models/gyroscope.sample)."""
    from pendulum_data import pdsl

    pdsl("simulate", ROOT / "models" / "gyroscope.phm", "--t-end", DT * (SAMPLES - 1), "--dt", DT,
         "--random-init", n, "--seed", seed, "--rtol", rtol, "--threads", 1, "-o", out)
    return out


def read_trajectories(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """(t (n_traj, T), Z (n_traj, T, 24)) in the order of :func:`cartesian_columns`."""
    from pdsl.data.csvio import read_table

    table = read_table(path)
    cols = table.columns
    traj = table.data[:, cols.index("traj")]
    labels = np.unique(traj)
    idx = [cols.index(c) for c in cartesian_columns()]
    t = np.stack([table.data[traj == k, cols.index("t")] for k in labels])
    Z = np.stack([table.data[traj == k][:, idx] for k in labels])
    return t, Z


def rotation(Z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """R and Ṙ (..., 3, 3) of Cartesian states (..., 24): columns x_k − x_cm and their rates."""
    X = Z[..., :12].reshape(*Z.shape[:-1], 4, 3)
    V = Z[..., 12:].reshape(*Z.shape[:-1], 4, 3)
    return np.swapaxes(X[..., 1:, :] - X[..., :1, :], -1, -2), np.swapaxes(V[..., 1:, :] - V[..., :1, :], -1, -2)


def body_omega(R: np.ndarray, Rdot: np.ndarray) -> np.ndarray:
    """ω with Rᵀ Ṙ = [ω]× (the antisymmetric part, robust to constraint residue)."""
    W = np.swapaxes(R, -1, -2) @ Rdot
    W = 0.5 * (W - np.swapaxes(W, -1, -2))
    return np.stack([W[..., 2, 1], W[..., 0, 2], W[..., 1, 0]], axis=-1)


def euler_E(th: np.ndarray, ps: np.ndarray) -> np.ndarray:
    """E(θ, ψ) with ω = E q̇ for ZXZ angles (A3.4)."""
    s, c, sp, cp = np.sin(th), np.cos(th), np.sin(ps), np.cos(ps)
    z, o = np.zeros_like(th), np.ones_like(th)
    return np.stack([np.stack([s * sp, cp, z], -1), np.stack([s * cp, -sp, z], -1), np.stack([c, z, o], -1)], -2)


def zxz_matrix(q: np.ndarray) -> np.ndarray:
    """Rz(φ) Rx(θ) Rz(ψ) for q (..., 3)."""
    ph, th, ps = q[..., 0], q[..., 1], q[..., 2]
    c1, s1, c2, s2, c3, s3 = np.cos(ph), np.sin(ph), np.cos(th), np.sin(th), np.cos(ps), np.sin(ps)
    return np.stack([
        np.stack([c1 * c3 - c2 * s1 * s3, -c1 * s3 - c2 * s1 * c3, s1 * s2], -1),
        np.stack([s1 * c3 + c1 * c2 * s3, c1 * c2 * c3 - s1 * s3, -c1 * s2], -1),
        np.stack([s2 * s3, s2 * c3, c2], -1)], -2)


def zxz_angles(R: np.ndarray) -> np.ndarray:
    """ZXZ angles (..., 3) of rotations (..., 3, 3): θ ∈ [0, π], φ, ψ ∈ (−π, π]."""
    th = np.arctan2(np.hypot(R[..., 0, 2], R[..., 1, 2]), R[..., 2, 2])
    ph = np.arctan2(R[..., 0, 2], -R[..., 1, 2])
    ps = np.arctan2(R[..., 2, 0], R[..., 2, 1])
    return np.stack([ph, th, ps], axis=-1)


def to_euler(Z: np.ndarray) -> np.ndarray:
    """Cartesian trajectories (n, T, 24) → (φ, θ, ψ, p) (n, T, 6) in the turned frame, φ and ψ unwrapped in time."""
    R, Rdot = rotation(Z)
    q = zxz_angles(Q_TURN @ R)
    q[..., 0] = np.unwrap(q[..., 0], axis=-1)
    q[..., 2] = np.unwrap(q[..., 2], axis=-1)
    w = body_omega(R, Rdot)
    E = euler_E(q[..., 1], q[..., 2])
    p = np.einsum("...ji,...j->...i", E, I_PIVOT * w)
    return np.concatenate([q, p], axis=-1)


def euler_to_cartesian(q: np.ndarray, qdot: np.ndarray) -> np.ndarray:
    """(q, q̇) (..., 3) each, in the turned frame → Cartesian states (..., 24)."""
    R = Q_TURN.T @ zxz_matrix(q)
    w = np.einsum("...ij,...j->...i", euler_E(q[..., 1], q[..., 2]), qdot)
    S = np.zeros(w.shape[:-1] + (3, 3))
    S[..., 0, 1], S[..., 0, 2], S[..., 1, 2] = -w[..., 2], w[..., 1], -w[..., 0]
    S[..., 1, 0], S[..., 2, 0], S[..., 2, 1] = w[..., 2], -w[..., 1], w[..., 0]
    Rdot = R @ S
    xcm, vcm = L_PIVOT * R[..., :, 2], L_PIVOT * Rdot[..., :, 2]
    X = np.concatenate([xcm[..., None, :], xcm[..., None, :] + np.swapaxes(R, -1, -2)], axis=-2)
    V = np.concatenate([vcm[..., None, :], vcm[..., None, :] + np.swapaxes(Rdot, -1, -2)], axis=-2)
    return np.concatenate([X.reshape(*X.shape[:-2], 12), V.reshape(*V.shape[:-2], 12)], axis=-1)


def euler_mass(q: np.ndarray) -> np.ndarray:
    """The true Euler-angle mass matrix Eᵀ diag(I') E (..., 3, 3) (A3.4, Eq. 28; frame-independent)."""
    E = euler_E(q[..., 1], q[..., 2])
    return np.swapaxes(E, -1, -2) @ (I_PIVOT[:, None] * E)


def true_energy(Z: np.ndarray) -> np.ndarray:
    """H = ½ Tr(Ẋ M Ẋᵀ) + m g z_cm with the true M of Eq. 9, on Cartesian states (..., 24)."""
    Mn = M_TRUE * np.block([[np.array([[1 + LAM.sum()]]), -LAM[None, :]], [-LAM[:, None], np.diag(LAM)]])
    V = Z[..., 12:].reshape(*Z.shape[:-1], 4, 3)
    T = 0.5 * np.einsum("...ia,ij,...ja->...", V, Mn, V)
    return T + M_TRUE * G * Z[..., 2]
