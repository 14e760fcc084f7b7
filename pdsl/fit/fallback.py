"""The default fit's fallback (issue 27): multiple shooting when the staged single-shooting fit fails.

The default fit of physical parameters (``--method auto``, no networks: Levenberg–Marquardt with estimated starts
on windows growing to whole trajectories, :func:`pdsl.fit.run._staged_fit`) can still fail from poor start values:
a rollout blows up (a non-finite loss, an implicit stage solve that does not converge), or the long windows slip
into a local minimum where the model runs out of phase with the data. Multiple shooting
(:func:`pdsl.fit.ipopt.multiple_shooting`) keeps every rollout as short as the first stage's windows while
continuity constraints make the result one solution per trajectory, so it is the fallback:

* when the staged fit raises ``NonFiniteLoss`` or ``IntegratorFailure``;
* when it ends with χ²/dof far above 1 (above 1.5 and above its 1 − 10⁻³ quantile) and every observed column has
  a stated ``--noise`` (the benchmark's FitzHugh–Nagumo from 5× off: a local minimum at b = 0, χ²/dof = 1.69 for
  594 degrees of freedom; model error or outliers trigger it too, at the cost of the extra time only, since the
  lower cost is kept);
* when, without a stated noise, its whole-trajectory mean squared residual is more than 4× the best one of its
  short windows (each window with its own start fits only a little better than the whole trajectory when the
  fit is right: ~1.2× on the test problems; a phase slip makes it 100× and more) and not negligible (above 1e-8 ×
  the data's mean square: on noise-free data both are rounding and truncation error, whatever their ratio).

Multiple shooting starts afresh from the start values with segments as long as the first stage's windows. Its
objective at continuity is the staged fit's last-stage objective (every sample once, one start per trajectory),
so the two costs compare directly: the fallback's result is kept when its cost is lower (by more than 1e-6
relative: at the same minimum the default stays), and the fit says which (a note; the settings in
``params.json`` name ``shooting = multiple``, ``method = ipopt`` when the fallback was used). A checkpoint taken
during the fallback resumes it (the staged fit is not repeated).
"""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Callable

import numpy as np

from ..diagnostics import PdslError
import pdsl.fit.checkpoint as ck  # the module, not the pdsl.fit facade
from .loss import ChunkLoss

__all__ = ["staged_or_multiple", "failure"]

_CODES = ("NonFiniteLoss", "IntegratorFailure")
_CHI2_RATIO = 1.5  # χ²/dof above this (and above its 1 − 1e-3 quantile), with the noise stated, is a failed fit
_WINDOW_RATIO = 4.0  # without a stated noise: whole-trajectory mean square above this × the short windows' best
_NEGLIGIBLE = 1e-8  # ... unless that mean square is below this × the data's (noise-free data, a relative misfit < 1e-4)
_BETTER = 1e-6  # the fallback's result replaces the staged one when its cost is lower by more than this (relative)
_ITERATIONS = 200  # IPOPT iterations of the fallback


def eligible(run, auto: bool) -> bool:
    """The default fit of physical parameters (``--method auto``, staged, mse loss, CasADi backend)."""
    c = run.cfg
    return (auto and bool(run.stages) and not run.layout.networks and c.loss == "mse" and c.shooting == "single"
            and not getattr(c, "profile", None) and isinstance(run.loss, ChunkLoss))


def _noise_known(run) -> bool:
    noise = run.cfg.noise or {}
    return bool(noise) and all(n in noise and not isinstance(noise[n], str) for n in run.data.observed)


def _data_scale(run) -> float:
    """The mean square of the weighted observed data (what a mean squared residual is small against)."""
    w = np.ones(len(run.data.observed)) if run.spec.weights is None else np.asarray(run.spec.weights, dtype=float)
    Y = np.concatenate([tr.Y for tr in run.train.trajectories]) if run.train.trajectories else np.zeros((0, len(w)))
    return float(np.mean((Y * w) ** 2)) if Y.size else 0.0


def failure(run, result) -> str | None:
    """Why the staged fit's result counts as failed (module docstring), or None."""
    extra, h = result.state.extra, result.state.history["train"]
    cost, dof = extra.get("residual_cost"), extra.get("residual_dof")
    if cost is None or not np.isfinite(cost) or (h and not np.isfinite(h[-1])):
        return "the staged single-shooting fit ended with a non-finite cost"
    if dof and _noise_known(run):
        from scipy.stats import chi2

        ratio = float(cost) / int(dof)
        hi = float(chi2.ppf(1 - 1e-3, int(dof))) / int(dof)
        if ratio > max(_CHI2_RATIO, hi):
            return f"the staged single-shooting fit ended at χ²/dof = {ratio:.3g} against the stated noise"
    start = int(extra.get("stage_start_epoch", 0))
    earlier = [v for v in h[:start] if v is not None and np.isfinite(v)]
    if (len(run.stages) > 1 and earlier and h and h[-1] > _WINDOW_RATIO * min(earlier) > 0
            and h[-1] > _NEGLIGIBLE * _data_scale(run)):
        return (f"the staged single-shooting fit's whole trajectories fit {h[-1] / min(earlier):.3g}× worse than its "
                f"windows of {run.stages[0]} steps (mean squared residual {h[-1]:.3g} against {min(earlier):.3g})")
    return None


def staged_or_multiple(run, state: ck.State, opts, on_epoch: Callable, log: Callable, staged_fit: Callable, auto: bool):
    """``staged_fit(run, state, opts, on_epoch, log)``, and multiple shooting when it fails (module docstring);
    returns (result, the chunks whose residuals the result holds). Sets ``run._fallback`` to a sentence for the
    summary when the fallback ran."""
    if not eligible(run, auto):
        return staged_fit(run, state, opts, on_epoch, log)
    reason, staged, error = state.extra.get("fallback"), None, None
    if reason is None:
        try:
            staged = staged_fit(run, state, opts, on_epoch, log)
        except PdslError as exc:
            if not set(exc.codes) & set(_CODES):
                raise
            d = exc.diagnostics[0]
            reason, error = f"the staged single-shooting fit failed: {d.message}", exc
        else:
            if not staged[0].finished:  # stopped (--stop-after): judge it when it has finished
                return staged
            reason = failure(run, staged[0])
            if reason is None:
                return staged
        history, epoch = copy.deepcopy(state.history), state.epoch
        while history["train"] and not np.isfinite(history["train"][-1]):  # the epoch that failed (NonFiniteLoss)
            for v in history.values():
                if v:
                    v.pop()
            epoch -= 1
        ms_state = ck.State(theta=run.layout.theta_from_p(run.p_start), epoch=epoch, history=history,
                            extra={"fallback": reason, "fallback_start_epoch": epoch})
    else:
        ms_state = state  # resumed inside the fallback
    from .backends import make_loss
    from .data import make_chunks
    from .ipopt import make_segments, multiple_shooting

    n = run.stages[0]
    log(f"  fallback: multiple shooting, segments of {n} steps ({reason})")
    loss = make_loss(run.num, run.layout, replace(run.spec, steps=n), run.data.observed, run.cfg)
    segments = make_segments(run.train, n)
    ms_opts = replace(opts, epochs=int(ms_state.extra.get("fallback_start_epoch", 0)) + _ITERATIONS)
    try:
        result = multiple_shooting(loss, segments, make_chunks(run.val, n), ms_state, ms_opts, on_epoch,
                                   hessian=run.cfg.hessian, log=log)
    except PdslError as exc:
        if staged is None:
            raise error if error is not None else exc
        run._fallback = (f"multiple shooting was tried as a fallback ({reason}) and failed "
                         f"({exc.diagnostics[0].message}); the single-shooting result is kept")
        log(f"  {run._fallback}")
        return staged
    ms_cost = result.state.extra.get("residual_cost")
    staged_cost = None if staged is None else staged[0].state.extra.get("residual_cost")
    ms_ok = ms_cost is not None and np.isfinite(ms_cost)
    staged_ok = staged_cost is not None and np.isfinite(staged_cost)
    if staged is not None and result.finished and (not ms_ok or (staged_ok and ms_cost >= staged_cost * (1 - _BETTER))):
        run._fallback = (f"multiple shooting was tried as a fallback ({reason}) and did not lower the cost "
                         f"({_fmt(ms_cost)} against {_fmt(staged_cost)}); the single-shooting result is kept")
        log(f"  {run._fallback}")
        return staged
    run.cfg = replace(run.cfg, shooting="multiple", method="ipopt", chunk=n, stride=n)
    run._final_loss = loss
    run._fallback = f"multiple shooting (fallback: {reason}), segments of {n} steps"
    log(f"  multiple shooting kept: cost {_fmt(ms_cost)}" + ("" if staged is None else f" against {_fmt(staged_cost)} "
                                                         "of the single-shooting fit"))
    return result, segments.chunks


def _fmt(v) -> str:
    return "–" if v is None or not np.isfinite(v) else f"{v:.6g}"
