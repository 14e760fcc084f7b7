"""N-pendulum data for the CHNN studies (BENCHMARKS A3.1, A4), shared by ``repro_chnn.py`` and
``bench_fit_speed.py``.

* :func:`simulate` — ``pdsl simulate models/pendulumN.phm --random-init n`` (the A3.1 initial
  states of ``models/pendulumN.sample``: angles and rates ~ N(0, 1), perturbed, projected onto
  Φ = 0, Φ̇ = 0), 100 samples at dt = 0.03 s (t = 0 … 2.97 s), CVODES at rtol 1e-10.
* :func:`one_chunk_per_trajectory` — A4.2: each trajectory is split into 20 non-overlapping
  chunks of 5 samples (4 steps) and ONE chunk is kept at random.
* :func:`to_angles` / :func:`angles_to_cartesian` — the angle coordinates of the baselines
  (q_i of rod i from the −y axis, unwrapped in time; rates w_i, or canonical momenta
  p = M(q) q̇ with M_ij = l_i l_j cos(q_i − q_j) Σ_{k ≥ max(i,j)} m_k, A3.1) and back.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from pdsl.cli.main import main as pdsl_main  # noqa: E402
from pdsl.data.csvio import read_table, write_table  # noqa: E402

# A3.1, the CHNN authors' code: parameters, top -> bottom (the values of models/pendulumN.phm)
PARAMS = {
    2: {"m": [1.1722, 1.0391], "l": [1.0359, 1.0822]},
    3: {"m": [1.0822, 1.1722, 1.0391], "l": [1.1167, 0.9389, 1.0359]},
}
DT, SAMPLES = 0.03, 100


def pdsl(*args) -> None:
    rc = pdsl_main([str(a) for a in args])
    if rc != 0:
        raise SystemExit(f"pdsl {' '.join(map(str, args))} failed with exit code {rc}")


def simulate(N: int, n: int, seed: int, out: Path, threads: int = 1) -> Path:
    pdsl("simulate", ROOT / "models" / f"pendulum{N}.phm", "--t-end", DT * (SAMPLES - 1), "--dt", DT,
         "--random-init", n, "--seed", seed, "--rtol", 1e-10, "--threads", threads, "-o", out)
    return out


def cartesian_columns(N: int) -> list[str]:
    pos = [f"b[{i}].{a}" for i in range(1, N + 1) for a in "xy"]
    vel = [f"b[{i}].v{a}" for i in range(1, N + 1) for a in "xy"]
    return pos + vel


def read_trajectories(path: Path, N: int) -> tuple[np.ndarray, np.ndarray]:
    """(t (n_traj, T), Z (n_traj, T, 4N)) with Z in the order of :func:`cartesian_columns`."""
    table = read_table(path)
    cols = table.columns
    traj = table.data[:, cols.index("traj")]
    labels = np.unique(traj)
    idx = [cols.index(c) for c in cartesian_columns(N)]
    t = np.stack([table.data[traj == k, cols.index("t")] for k in labels])
    Z = np.stack([table.data[traj == k][:, idx] for k in labels])
    return t, Z


def write_trajectories(path: Path, columns: list[str], t: np.ndarray, Z: np.ndarray) -> Path:
    rows = [np.column_stack([np.full(t.shape[1], k), t[k], Z[k]]) for k in range(len(t))]
    write_table(path, ["traj", "t", *columns], np.vstack(rows))
    return path


def one_chunk_per_trajectory(t: np.ndarray, Z: np.ndarray, seed: int, chunk: int = 4):
    """A4.2: one of the ⌊T/(chunk+1)⌋ non-overlapping (chunk+1)-sample windows per trajectory, at random."""
    rng = np.random.default_rng(seed)
    n_chunks = t.shape[1] // (chunk + 1)
    pick = rng.integers(0, n_chunks, size=len(t))
    sl = [slice(j * (chunk + 1), (j + 1) * (chunk + 1)) for j in pick]
    return np.stack([t[k, s] for k, s in enumerate(sl)]), np.stack([Z[k, s] for k, s in enumerate(sl)])


def mass_matrix(q: np.ndarray, N: int) -> np.ndarray:
    """M(q) of A3.1 for q (..., N): M_ij = l_i l_j cos(q_i − q_j) Σ_{k ≥ max(i,j)} m_k."""
    m, l_ = np.asarray(PARAMS[N]["m"]), np.asarray(PARAMS[N]["l"])
    tail = np.array([[m[max(i, j):].sum() for j in range(N)] for i in range(N)])
    return l_[:, None] * l_[None, :] * tail * np.cos(q[..., :, None] - q[..., None, :])


def to_angles(Z: np.ndarray, N: int, kind: str) -> np.ndarray:
    """Cartesian (x, v) (n, T, 4N) -> (q, w) (``kind="rates"``) or (q, p) (``"momenta"``), q unwrapped in time."""
    X = Z[..., : 2 * N].reshape(*Z.shape[:-1], N, 2)
    V = Z[..., 2 * N :].reshape(*Z.shape[:-1], N, 2)
    dX = X - np.concatenate([np.zeros_like(X[..., :1, :]), X[..., :-1, :]], axis=-2)
    dV = V - np.concatenate([np.zeros_like(V[..., :1, :]), V[..., :-1, :]], axis=-2)
    q = np.unwrap(np.arctan2(dX[..., 0], -dX[..., 1]), axis=-2)
    w = (dX[..., 0] * dV[..., 1] - dX[..., 1] * dV[..., 0]) / (dX[..., 0] ** 2 + dX[..., 1] ** 2)
    if kind == "rates":
        return np.concatenate([q, w], axis=-1)
    p = np.einsum("...ij,...j->...i", mass_matrix(q, N), w)
    return np.concatenate([q, p], axis=-1)


def angles_to_cartesian(q: np.ndarray, w: np.ndarray, N: int) -> np.ndarray:
    """(q, q̇) (..., N) each -> Cartesian (x, v) (..., 4N) in the order of :func:`cartesian_columns`."""
    l_ = np.asarray(PARAMS[N]["l"])
    x = np.cumsum(l_ * np.sin(q), axis=-1)
    y = -np.cumsum(l_ * np.cos(q), axis=-1)
    vx = np.cumsum(l_ * np.cos(q) * w, axis=-1)
    vy = np.cumsum(l_ * np.sin(q) * w, axis=-1)
    pos = np.stack([x, y], axis=-1).reshape(*q.shape[:-1], 2 * N)
    vel = np.stack([vx, vy], axis=-1).reshape(*q.shape[:-1], 2 * N)
    return np.concatenate([pos, vel], axis=-1)


def angle_columns(N: int, kind: str) -> list[str]:
    second = "w" if kind == "rates" else "p"
    return [f"q{i}" for i in range(1, N + 1)] + [f"{second}{i}" for i in range(1, N + 1)]
