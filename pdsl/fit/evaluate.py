"""``pdsl evaluate``: roll a model out from the first sample of every test trajectory and score it (BENCHMARKS A6).

Each trajectory is integrated over its whole time grid (CVODES by default, or a fixed-step
scheme), starting from its first sample mapped to the state (projected onto the constraints when
the model has any, as ``simulate`` does). Metrics (:mod:`pdsl.fit.metrics`): the bounded relative
error over the shown state columns, its geometric mean over t_1..t_N (t = 0 excluded), the
energy error with the model's own energy on both trajectories, and the constraint RMS of the
prediction.

A rollout that diverges — a prediction that is not finite, or an integrator that fails on the way
(``IntegratorFailure``: a finite-time blow-up) — scores the worst error, ``inf``, in every metric;
the summary counts such trajectories (``diverged``) and the table says how many, never a mean over
the others alone.
"""

from __future__ import annotations

from dataclasses import dataclass

import casadi as ca
import numpy as np

from ..backend.functions import NumericSystem
from ..numerics.fixed_step import explicit_rk_step
from ..sim.simulate import InputSignal, simulate
from ..vocab import TORCH_EVALUATE_INTEGRATORS
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
    failure: str | None = None  # why the rollout stopped (an integrator failure), if it did

    @property
    def diverged(self) -> bool:
        """The rollout failed or its prediction is not finite (NaN or inf) somewhere."""
        return self.failure is not None or not bool(np.all(np.isfinite(self.predicted)))


class _Interp:
    def __init__(self, t, values):
        self._f = ca.interpolant("u", "linear", [t], values)

    def __call__(self, t, x, p):
        return self._f(t)


def _inputs(num: NumericSystem, traj: Trajectory) -> dict:
    return {name: InputSignal(name, _Interp(traj.t, traj.U[:, k]), f"column `{name}`") for k, name in enumerate(num.u_names)}


_MAPS: dict = {}


def _mapped(fn, n: int):
    """``fn(t, x, p, ...)`` over n columns with p passed ONCE (``reduce_in``): a plain ``map(n)`` would
    repmat p to n columns — n copies of every network weight (minutes for a 3 × 256 network)."""
    key = (id(fn), n)
    if key not in _MAPS:
        _MAPS[key] = (fn, fn.map(f"{fn.name()}_shared_p_{n}", "serial", n, [2], []))
    return _MAPS[key][1]


def _data_energy(num: NumericSystem, traj: Trajectory) -> np.ndarray | None:
    if num.energy is None:
        return None
    n = len(traj)
    p = num.p_default
    from ..quiet import capture

    with capture():  # a rootfinder (shown coordinates that are not the states) prints its inputs when it fails
        X = _mapped(_shown_map(num), n)(traj.t[None, :], traj.S.T, p)
    return np.asarray(_mapped(num.energy, n)(traj.t[None, :], X, p, traj.U.T)).ravel()


def _shown_map(num: NumericSystem):
    key = ("shown", id(num))
    if key not in _MAPS:
        _MAPS[key] = (num, state_from_shown(num))
    return _MAPS[key][1]


def score_trajectory(num: NumericSystem, traj: Trajectory, *, integrator: str | None, rtol: float,
                     substeps: int = 1) -> TrajectoryScore:
    from ..diagnostics import PdslError

    x0 = dict(zip(num.report_names, traj.S[0].tolist()))
    try:
        res = simulate(num, traj.t, x0=x0, inputs=_inputs(num, traj), rtol=rtol, integrator=integrator, substeps=substeps)
    except PdslError as err:
        if err.codes != ["IntegratorFailure"]:
            raise
        return _diverged_score(num, traj, err.diagnostics[0].message)
    pred = res.shown if res.shown is not None else res.x
    err, geo = M.trajectory_error(pred, traj.S, traj.t)
    E_data = _data_energy(num, traj)
    energy = M.energy_error(E_data, res.energy) if E_data is not None and res.energy is not None else None
    return TrajectoryScore(traj.label, traj.t, pred, traj.S, err, geo, energy, res.constraint_rms)


def _diverged_score(num: NumericSystem, traj: Trajectory, why: str) -> TrajectoryScore:
    """The score of a rollout that did not reach the end: no prediction (NaN), the worst error everywhere."""
    n = len(traj.t)
    worst = np.full(n, np.inf)
    return TrajectoryScore(traj.label, traj.t, np.full(traj.S.shape, np.nan), traj.S, worst, float("inf"),
                           worst.copy() if num.energy is not None else None,
                           worst.copy() if num.constraints.size1_out(0) else None, failure=why)


def _torch_scores(num: NumericSystem, data: Dataset, integrator: str, substeps: int) -> list[TrajectoryScore]:
    """Every trajectory rolled out at once on the torch backend (fixed-step, ``substeps`` steps per
    sample interval), trajectories of equal length in one batch; the start is mapped and projected
    as ``simulate`` does; energies and constraints by the CasADi functions on the predicted states."""
    import torch

    from ..backend.torch_backend import DTYPE, TorchSystem
    from ..diagnostics import PdslError
    from ..sim.initial import Projector

    if integrator not in TORCH_EVALUATE_INTEGRATORS:
        raise PdslError.at("BadOption", f"--backend torch evaluates with {', '.join(TORCH_EVALUATE_INTEGRATORS)}, "
                           f"not {integrator}",
                           hint="--integrator rk4 (with --substeps for accuracy), or --backend casadi")
    ts = TorchSystem(num.system)
    p = num.p_default
    bound = ts.bind(torch.tensor(p, dtype=DTYPE))
    from ..quiet import capture

    g = state_from_shown(num)
    proj = Projector(num) if num.invariants.size1_out(0) else None
    scores: dict[int, TrajectoryScore] = {}
    groups: dict[int, list[int]] = {}
    for k, tr in enumerate(data.trajectories):
        groups.setdefault(len(tr), []).append(k)
    for n, idx in groups.items():
        trs = [data.trajectories[k] for k in idx]
        x0 = []
        for tr in trs:
            with capture():  # a rootfinder when the shown coordinates are not the states: its failures print
                x = np.asarray(g(tr.t[0], tr.S[0], p)).ravel()
            x0.append(proj.project(x, p, float(tr.t[0])).x if proj is not None else x)
        T = torch.tensor(np.stack([tr.t for tr in trs]), dtype=DTYPE)
        U = torch.tensor(np.stack([tr.U for tr in trs]), dtype=DTYPE)  # (B, n, n_u)
        x = torch.tensor(np.stack(x0), dtype=DTYPE)
        states = [x]
        with torch.no_grad():
            for k in range(n - 1):
                t0, dt = T[:, k], T[:, k + 1] - T[:, k]
                u0, u1 = U[:, k], U[:, k + 1]
                h = (dt / substeps)[:, None]  # (B, 1): each trajectory's own step

                def f(s, y, t0=t0, dt=dt, u0=u0, u1=u1):  # s: time since t0, (B, 1)
                    u = u0 + (s / dt[:, None]) * (u1 - u0) if U.shape[2] else None
                    return ts.rhs(t0 + s[:, 0], y, bound, u)

                for j in range(substeps):
                    x = explicit_rk_step(f, integrator, j * h, x, h)
                states.append(x)
            X = torch.stack(states, 1)  # (B, n, nx)
            shown = torch.stack([ts.report(T[:, k], X[:, k], bound) for k in range(n)], 1).numpy()
        X = X.numpy()
        for b, (k, tr) in enumerate(zip(idx, trs)):
            err, geo = M.trajectory_error(shown[b], tr.S, tr.t)
            energy = None
            if num.energy is not None:
                E_hat = np.asarray(_mapped(num.energy, n)(tr.t[None, :], X[b].T, p, tr.U.T)).ravel()
                E_data = _data_energy(num, tr)
                energy = M.energy_error(E_data, E_hat) if E_data is not None else None
            rms = None
            if num.constraints.size1_out(0):
                phi = np.asarray(_mapped(num.constraints, n)(tr.t[None, :], X[b].T, p)).T
                rms = M.constraint_rms(phi)
            scores[k] = TrajectoryScore(tr.label, tr.t, shown[b], tr.S, err, geo, energy, rms)
    return [scores[k] for k in range(len(data.trajectories))]


def evaluate(num: NumericSystem, data: Dataset, *, integrator: str | None = None, rtol: float = 1e-9,
             substeps: int = 1, backend: str = "casadi") -> tuple[list[TrajectoryScore], dict]:
    """Scores per trajectory and their summaries (mean, 95 % CI, min, max over trajectories).

    ``backend="torch"``: all trajectories rolled out together by the torch backend with a
    fixed-step scheme (``integrator`` rk4 or euler, ``substeps`` per sample interval) — for
    models with large networks, whose CasADi rollouts (per trajectory, matrix–vector products)
    are slow; otherwise CVODES (default) or a fixed-step scheme per trajectory."""
    if backend == "torch":
        scores = _torch_scores(num, data, integrator or "rk4", substeps)
    elif backend == "casadi":
        scores = [score_trajectory(num, tr, integrator=integrator, rtol=rtol, substeps=substeps) for tr in data.trajectories]
    else:
        from ..diagnostics import PdslError

        raise PdslError.at("BadOption", f"--backend {backend}: unknown", hint="casadi or torch")
    summary = {
        "relative error (geometric mean over t>0)": M.summarize([s.err_geo for s in scores]),
        "relative error at final time": M.summarize([s.err[-1] for s in scores]),
    }
    with np.errstate(invalid="ignore", over="ignore"):
        if all(s.energy_err is not None for s in scores):
            summary["energy error (mean over t)"] = M.summarize([float(np.mean(s.energy_err[1:])) for s in scores])
        if all(s.constraint_rms is not None for s in scores):
            summary["constraint RMS (mean over t)"] = M.summarize([float(np.mean(s.constraint_rms)) for s in scores])
            summary["constraint RMS (max over t)"] = M.summarize([float(np.max(s.constraint_rms)) for s in scores])
    summary[DIVERGED] = diverged_summary(scores)
    return scores, summary


DIVERGED = "diverged"  # the summary's entry of the trajectories whose rollout diverged


def diverged_summary(scores: list[TrajectoryScore]) -> dict:
    """``{"count", "of", "trajectories" (labels), "reasons"}`` of the rollouts that diverged."""
    bad = [s for s in scores if s.diverged]
    return {"count": len(bad), "of": len(scores), "trajectories": [int(s.label) for s in bad],
            "reasons": {str(int(s.label)): s.failure or "non-finite prediction" for s in bad}}


def diverged_line(entry: dict) -> str | None:
    """``2 of 10 trajectories diverged (non-finite prediction): 3, 7; ...``, or None when none did."""
    if not entry or not entry.get("count"):
        return None
    labels = entry["trajectories"]
    shown = ", ".join(map(str, labels[:20])) + (f", … ({len(labels) - 20} more)" if len(labels) > 20 else "")
    reasons = list(dict.fromkeys(entry.get("reasons", {}).values()))
    why = f"; first: {reasons[0]}" if reasons and reasons[0] != "non-finite prediction" else ""
    return (f"{entry['count']} of {entry['of']} trajectories diverged (non-finite prediction or integrator failure; "
            f"scored as error inf): trajectory {shown}{why}")


def format_table(summary: dict) -> str:
    """The metrics as a table; the diverged trajectories (if any) in a line below it."""
    metrics = {k: s for k, s in summary.items() if isinstance(s, dict) and "mean" in s}
    width = max(len(k) for k in metrics)
    head = f"{'metric':<{width}}  {'mean':>10}  {'±95% CI':>10}  {'min':>10}  {'max':>10}"
    rows = [head, "-" * len(head)]
    for name, s in metrics.items():
        rows.append(f"{name:<{width}}  {s['mean']:>10.3e}  {s['ci95']:>10.2e}  {s['min']:>10.3e}  {s['max']:>10.3e}")
    line = diverged_line(summary.get(DIVERGED))
    if line:
        rows.append(line)
    return "\n".join(rows)


def score_figure(scores: list[TrajectoryScore], title: str):
    """Err(t) of every trajectory (thin), their geometric mean (bold) and 10–90 % spread (band), as a Figure."""
    from ..sim.plot import new_figure

    fig = new_figure(figsize=(7, 4))
    ax = fig.subplots()
    n_diverged = sum(s.diverged for s in scores)
    scores = [s for s in scores if not s.diverged]  # no curve to draw: counted in the title
    if n_diverged:
        title = f"{title} ({n_diverged} diverged, not drawn)"
    for s in scores:
        ax.semilogy(s.t[1:], np.maximum(s.err[1:], 1e-16), lw=0.6, alpha=0.35, color="0.5")
    lengths = {len(s.t) for s in scores}
    if len(scores) > 1 and len(lengths) == 1 and all(np.allclose(s.t, scores[0].t) for s in scores):
        E = np.log10(np.maximum(np.array([s.err[1:] for s in scores]), 1e-16))
        t = scores[0].t[1:]
        ax.fill_between(t, 10 ** np.percentile(E, 10, axis=0), 10 ** np.percentile(E, 90, axis=0), color="C0", alpha=0.2,
                        label="10–90 % of trajectories")
        ax.semilogy(t, 10 ** E.mean(axis=0), color="C0", lw=2, label=f"geometric mean over {len(scores)} trajectories")
        ax.legend(fontsize=8, loc="best")
    ax.set_xlabel("t")
    ax.set_ylabel("bounded relative error")
    ax.set_title(title)
    ax.grid(alpha=0.3, which="both")
    fig.tight_layout()
    return fig


def plot_scores(path, scores: list[TrajectoryScore], title: str) -> None:
    """``evaluate --plot``: :func:`score_figure` written to ``path`` atomically."""
    from .outputs import _save

    _save(score_figure(scores, title), path)
