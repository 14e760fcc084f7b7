"""``pdsl evaluate``: roll a model out from the first sample of every test trajectory and score it (A6).

Each trajectory is integrated over its whole time grid (CVODES by default, or a fixed-step
scheme), starting from its first sample mapped to the state (projected onto the constraints when
the model has any, as ``simulate`` does). Metrics (:mod:`pdsl.fit.metrics`): the bounded relative
error over the shown state columns, its geometric mean over t_1..t_N (t = 0 excluded), the
energy error with the model's own energy on both trajectories, and the constraint RMS of the
prediction.
"""

from __future__ import annotations

from dataclasses import dataclass

import casadi as ca
import numpy as np

from ..backend.functions import NumericSystem
from ..sim.simulate import InputSignal, simulate
from . import metrics as M
from .data import Dataset, Trajectory
from .loss import state_from_shown

__all__ = ["TrajectoryScore", "evaluate", "format_table"]


@dataclass(frozen=True)
class TrajectoryScore:
    label: int
    t: np.ndarray
    predicted: np.ndarray  # shown state, (n, n_shown)
    measured: np.ndarray
    err: np.ndarray  # Err(t)
    err_geo: float  # geometric mean over t > 0
    energy_err: np.ndarray | None
    constraint_rms: np.ndarray | None


class _Interp:
    def __init__(self, t, values):
        self._f = ca.interpolant("u", "linear", [t], values)

    def __call__(self, t, x, p):
        return self._f(t)


def _inputs(num: NumericSystem, traj: Trajectory) -> dict:
    return {name: InputSignal(name, _Interp(traj.t, traj.U[:, k]), f"column `{name}`") for k, name in enumerate(num.u_names)}


def _data_energy(num: NumericSystem, traj: Trajectory) -> np.ndarray | None:
    if num.energy is None:
        return None
    n = len(traj)
    p = num.p_default
    X = state_from_shown(num).map(n)(traj.t[None, :], traj.S.T, p)
    return np.asarray(num.energy.map(n)(traj.t[None, :], X, p, traj.U.T)).ravel()


def score_trajectory(num: NumericSystem, traj: Trajectory, *, integrator: str | None, rtol: float) -> TrajectoryScore:
    x0 = dict(zip(num.report_names, traj.S[0].tolist()))
    res = simulate(num, traj.t, x0=x0, inputs=_inputs(num, traj), rtol=rtol, integrator=integrator)
    pred = res.shown if res.shown is not None else res.x
    err, geo = M.trajectory_error(pred, traj.S, traj.t)
    E_data = _data_energy(num, traj)
    energy = M.energy_error(E_data, res.energy) if E_data is not None and res.energy is not None else None
    return TrajectoryScore(traj.label, traj.t, pred, traj.S, err, geo, energy, res.constraint_rms)


def evaluate(num: NumericSystem, data: Dataset, *, integrator: str | None = None, rtol: float = 1e-9) -> tuple[list[TrajectoryScore], dict]:
    """Scores per trajectory and their summaries (mean, 95 % CI, min, max over trajectories)."""
    scores = [score_trajectory(num, tr, integrator=integrator, rtol=rtol) for tr in data.trajectories]
    summary = {
        "relative error (geometric mean over t>0)": M.summarize([s.err_geo for s in scores]),
        "relative error at final time": M.summarize([s.err[-1] for s in scores]),
    }
    if all(s.energy_err is not None for s in scores):
        summary["energy error (mean over t)"] = M.summarize([float(np.mean(s.energy_err[1:])) for s in scores])
    if all(s.constraint_rms is not None for s in scores):
        summary["constraint RMS (mean over t)"] = M.summarize([float(np.mean(s.constraint_rms)) for s in scores])
        summary["constraint RMS (max over t)"] = M.summarize([float(np.max(s.constraint_rms)) for s in scores])
    return scores, summary


def format_table(summary: dict) -> str:
    width = max(len(k) for k in summary)
    head = f"{'metric':<{width}}  {'mean':>10}  {'±95% CI':>10}  {'min':>10}  {'max':>10}"
    rows = [head, "-" * len(head)]
    for name, s in summary.items():
        rows.append(f"{name:<{width}}  {s['mean']:>10.3e}  {s['ci95']:>10.2e}  {s['min']:>10.3e}  {s['max']:>10.3e}")
    return "\n".join(rows)


def plot_scores(path, scores: list[TrajectoryScore], title: str) -> None:
    from .outputs import _pyplot, _save

    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    for s in scores:
        ax.semilogy(s.t[1:], np.maximum(s.err[1:], 1e-16), lw=0.8, alpha=0.7)
    ax.set_xlabel("t")
    ax.set_ylabel("bounded relative error")
    ax.set_title(title)
    ax.grid(alpha=0.3, which="both")
    _save(fig, path)
