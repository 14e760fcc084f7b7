"""``pdsl fit`` as a library call: model + data + settings -> fitted parameters in a directory.

Steps (each a small function): compile the model, choose the free parameters, read and split
the data (by trajectory, seeded), cut chunks (BENCHMARKS A4), build the chunk loss (BENCHMARKS A5),
optimise with a checkpoint after every epoch, then write the outputs (:mod:`pdsl.fit.outputs`).
Outputs are written only when the fit has finished; a run stopped early (``stop_after``,
a kill) leaves its checkpoint, and ``resume=True`` continues from it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Mapping

import numpy as np

from ..backend.functions import NumericSystem, to_casadi
from ..diagnostics import PdslError
from ..pipeline import CompileOptions, compile_model
from ..vocab import IMPLICIT_FIXED_STEP
import pdsl.fit.checkpoint as ck  # the module, not the pdsl.fit facade (which imports this module)
import pdsl.fit.outputs as out
import pdsl.fit.regularize as regularize
from .config import FitConfig, fingerprint, resolve_defaults, step_options
from .data import Dataset, make_chunks, random_windows, split_validation, load_dataset, whole_trajectories
from .loss import ChunkLoss, LossSpec
from .backends import make_loss
from .params import ParamLayout, bounds_violation, make_layout
from .ipopt import ipopt, make_segments, multiple_shooting
from .train import Result, TrainOptions, adamw, gauss_newton

__all__ = ["FitRun", "prepare", "run_fit", "apply_fitted"]

OUTPUT_FILES = ("params.json", "networks.npz", "report.md", "loss.png", "validation.png", "history.csv")


@dataclass
class FitRun:
    """Everything a fit needs, prepared and checked before the first epoch."""

    model_path: str  # the model file, or the label of a model given as text (the Python API)
    model: object
    num: NumericSystem
    layout: ParamLayout
    cfg: FitConfig
    data: Dataset
    train: Dataset
    val: Dataset
    loss: ChunkLoss
    p_start: np.ndarray
    spec: LossSpec | None = None
    # the staged fit of physical parameters (chunk not given): window lengths in steps, the last one whole
    # trajectories (:func:`stage_lengths`); empty: one fit on chunks of cfg.chunk steps
    stages: tuple[int, ...] = ()
    substeps_note: str | None = None  # how the integration substeps were chosen (reported), None: given
    model_text: str | None = None  # the model's source text (the fitted model is written from it)


def _start_values(num: NumericSystem, values: Mapping[str, float]) -> np.ndarray:
    phys = num.p_names[: len(num.system.params)]
    for name in values:
        if name not in phys:
            raise PdslError.at("BadOption", f"--param {name}: `{name}` is not a parameter of {num.system.name}",
                               hint="parameters: " + (", ".join(phys) or "none"))
        q = num.system.params[phys.index(name)]
        outside = bounds_violation(q, float(values[name]))
        if outside:
            raise PdslError.at("BadOption", f"--param {name}: {float(values[name]):g} is outside the declared bounds {outside}",
                               hint=f"`{name}` is declared at {q.span}")
    return num.param_vector(dict(values))


_SX_WEIGHTS = 20_000  # networks up to this many weights are expanded to SX (about 2x faster rollouts)


def _compile(system, seed: int) -> NumericSystem:
    """SX functions where the networks are small enough to be scalarised, else MX (dense kernels)."""
    from ..backend.neural import n_weights

    size = sum(n_weights(nn) for nn in system.neural if nn.n_in is not None)
    if system.neural and size <= _SX_WEIGHTS:
        try:
            return to_casadi(system, seed=seed, kind="SX")
        except (RuntimeError, NotImplementedError):
            pass
    return to_casadi(system, seed=seed)


def _dropout(cfg: FitConfig, system) -> float | tuple:
    """--dropout for every network, else the networks' own ``mlp(dropout = …)`` (AdamW training only)."""
    if cfg.dropout is not None:
        return cfg.dropout
    if cfg.method != "adamw":
        return 0.0
    return tuple((nn.name, nn.dropout) for nn in system.neural if nn.dropout)


def prepare(model_path, model_name: str | None, cfg: FitConfig, consts: Mapping[str, int] | None = None, *,
            text: str | None = None) -> FitRun:
    """Compile, choose parameters, load and split the data, build the loss. ``model_path`` is a model file, or a
    :class:`pdsl.pipeline.Compiled` model (the Python API's, compiled once: nothing is written to disk) whose
    source ``text`` is given; ``text`` with a path compiles that text under the path's name."""
    from ..pipeline import Compiled

    seed = cfg.network_seed if cfg.network_seed is not None else cfg.seed
    if isinstance(model_path, Compiled):
        compiled = model_path
        model_path = str(compiled.model.path or "<model text>")
    else:
        compiled = compile_model(model_path, CompileOptions(model=model_name, consts=consts or (), formulation=cfg.formulation,
                                                            seed=seed, numeric=False), text=text)
    if text is None:
        from ..limits import read_text

        text = read_text(model_path)
    m = compiled.model
    num = _compile(compiled.system, seed)
    if cfg.init:  # warm start: a previous fit's parameters and network weights as start values
        num = apply_fitted(num, cfg.init)
    p_start = _start_values(num, cfg.param)
    layout = make_layout(num, m, cfg.free, p_start)
    cfg = resolve_defaults(cfg, bool(layout.networks))
    if cfg.profile:
        from .profile import check_profile_names

        check_profile_names(cfg.profile, layout.free_names)
    data = load_dataset(cfg.data, num, observe=cfg.observe, min_samples=(cfg.chunk or 1) + 1, columns=cfg.map,
                        inputs=fit_inputs(num, cfg.input), latent=cfg.start != "data", noise=cfg.noise)
    cfg = replace(cfg, start=choose_start(cfg, data, layout))
    if any(isinstance(v, str) for v in (cfg.noise or {}).values()) and not (
            (cfg.start == "estimate" and cfg.shooting == "single") or cfg.shooting == "multiple"):
        raise PdslError.at("BadOption", "relative (5%) and per-sample (a column) noise weight each sample; the fits with "
                           "estimated starts (the default for physical parameters) and multiple shooting do, this one "
                           "does not", hint="drop --start data / --method, or give σ as a number")
    stages: tuple[int, ...] = ()
    if cfg.chunk is None and staged(cfg, layout):  # physical parameters: whole trajectories, reached in stages
        stages = stage_lengths([len(tr) for tr in data.trajectories])
        cfg = replace(cfg, chunk=stages[0])
    if cfg.chunk is None:  # 4 steps (BENCHMARKS A5); longer chunks when unmeasured states must be estimated per chunk
        shortest = min(len(tr) for tr in data.trajectories) - 1
        cfg = replace(cfg, chunk=max(1, min(20 if data.latent and cfg.start == "estimate" else 4, shortest)))
    if cfg.stride is None:
        cfg = replace(cfg, stride=cfg.chunk)
    if cfg.start == "estimate":  # unmeasured columns get rough guesses; every chunk start is estimated
        from .latent import start_guesses

        data = replace(data, trajectories=tuple(replace(tr, S=S) for tr, S in zip(data.trajectories, start_guesses(data))))
    if cfg.val_fraction is None:  # a hold-out only where it serves: networks (early stopping, saturation)
        cfg = replace(cfg, val_fraction=0.2 if layout.networks else 0.0)
    substeps_note = None
    if cfg.substeps is None:  # networks: 1 (their rates at the initial weights say nothing about the system)
        substeps, substeps_note = (1, None) if layout.networks else auto_substeps(num, data, p_start, cfg.integrator)
        cfg = replace(cfg, substeps=substeps)
    if cfg.profile and (cfg.start != "estimate" or cfg.method != "gauss-newton" or cfg.shooting != "single"):
        raise PdslError.at("BadOption", "--profile refits the Gauss–Newton fit with estimated starts (the default for "
                           "physical parameters)", hint="drop --method / --start data / --shooting multiple")
    if cfg.loss in ("huber", "soft-l1") and cfg.method == "gauss-newton" and cfg.start != "estimate":
        raise PdslError.at("BadOption", f"--loss {cfg.loss} reweights the residuals of the fits with estimated starts "
                           "(the default for physical parameters); this fit starts its chunks from data samples",
                           hint="drop --start data, or use --loss mse")
    train, val = split_validation(data, cfg.val_fraction, cfg.seed)
    spec = LossSpec(steps=cfg.chunk, dt=data.dt, method=cfg.integrator, substeps=cfg.substeps,
                    exact_inputs=exact_inputs(num, cfg.input),
                    loss="mse" if cfg.loss in ("huber", "soft-l1") else cfg.loss,  # robust: IRLS weights (fit.robust)
                    threads=cfg.threads, project=cfg.project, variable_step=not data.uniform,
                    weights=noise_weights(cfg.noise, data.observed), step_options=step_options(cfg),
                    dtype=cfg.dtype, device=cfg.device, dropout=_dropout(cfg, compiled.system),
                    switches=cfg.switches)
    loss = make_loss(num, layout, spec, data.observed, cfg)  # CasADi or torch backend (cfg.backend)
    loss = regularize.wrap_loss(loss, cfg, m, num, layout, train)  # equilibrium / sparsity terms, when set
    return FitRun(str(model_path), m, num, layout, cfg, data, train, val, loss, p_start, spec, stages, substeps_note,
                  text)


def staged(cfg: FitConfig, layout: ParamLayout) -> bool:
    """Whether a fit uses whole trajectories reached in stages: physical parameters only (no networks), by
    Gauss–Newton with estimated starts on fixed windows (the default for such fits)."""
    return (not layout.networks and cfg.method == "gauss-newton" and cfg.start == "estimate"
            and cfg.shooting == "single" and cfg.window == "chunks")


_FIRST_WINDOW = 10  # steps of the first stage's windows: short, so that a start far from the optimum still fits
_STAGE_GROWTH = 4  # each stage's windows are this many times longer than the last one's
_STAGE_EPOCHS = 25  # Levenberg–Marquardt steps at most in a stage before the last (--epochs bounds the last)


def stage_lengths(lengths: list[int], first: int = _FIRST_WINDOW) -> tuple[int, ...]:
    """Window lengths (steps) of a staged fit: ``first``, ×4, ... while clearly shorter than the longest
    trajectory, then whole trajectories (longest − 1 steps; shorter ones are padded, :func:`whole_trajectories`)."""
    whole = max(lengths) - 1
    out = []
    n = max(1, min(first, whole))
    while 2 * n <= whole:
        out.append(n)
        n *= _STAGE_GROWTH
    out.append(whole)
    return tuple(out)


_STEP_SCALE = 0.2  # substeps so that |h λ| ≤ this for the fastest local rate λ (RK4: local error ~ (hλ)⁵/120)
_MAX_SUBSTEPS = 64


def auto_substeps(num: NumericSystem, data: Dataset, p: np.ndarray, integrator: str) -> tuple[int, str]:
    """Integration substeps per sample interval from the sample spacing and the model's time scales: the largest
    |eigenvalue| of ∂f/∂x over up to 64 data states (start values of the parameters) sets the step h so that
    |h λ| ≤ 0.2. Returns (substeps, a sentence saying why)."""
    import casadi as ca

    from .loss import state_from_shown

    h_max = max((float(np.max(np.diff(tr.t))) for tr in data.trajectories if len(tr.t) > 1), default=0.0)
    if num.rhs is None or h_max <= 0 or num.nx == 0:
        return 1, "1 integration step per sample interval (no explicit right-hand side to take time scales from)"
    sym = ca.SX.sym if num.kind == "SX" else ca.MX.sym
    t, x, pp, u = sym("t"), sym("x", num.nx), sym("p", len(num.p_names)), sym("u", len(num.u_names))
    jac = ca.Function("rhs_jac", [t, x, pp, u], [ca.jacobian(num.rhs(t, x, pp, u), x)])
    g = state_from_shown(num)
    samples = [(tr, k) for tr in data.trajectories for k in range(len(tr.t))]
    pick = [samples[i] for i in np.unique(np.linspace(0, len(samples) - 1, min(64, len(samples))).astype(int))]
    lam = 0.0
    for tr, k in pick:
        s = np.asarray(tr.S[k], dtype=float)
        if not np.all(np.isfinite(s)):
            continue
        u_k = np.asarray(tr.U[k], dtype=float) if tr.U.size else np.zeros(len(num.u_names))
        try:
            xk = np.asarray(g(float(tr.t[k]), s, p), dtype=float).ravel()
            J = np.asarray(jac(float(tr.t[k]), xk, p, u_k), dtype=float)
            ev = np.linalg.eigvals(J) if np.all(np.isfinite(J)) else np.array([0.0])
        except (RuntimeError, np.linalg.LinAlgError):
            continue
        lam = max(lam, float(np.max(np.abs(ev), initial=0.0)))
    lam_u = 0.0  # the inputs' own rate (a forcing at ω needs h·ω small as well): max |du/dt| / max |u|
    for tr in data.trajectories:
        if tr.U.size and len(tr.t) > 1:
            scale = np.max(np.abs(tr.U), axis=0)
            du = np.abs(np.diff(tr.U, axis=0)) / np.diff(tr.t)[:, None]
            ok = scale > 0
            if np.any(ok):
                lam_u = max(lam_u, float(np.max(du[:, ok] / scale[ok])))
    lam_all = max(lam, lam_u)
    m = int(min(_MAX_SUBSTEPS, max(1, np.ceil(h_max * lam_all / _STEP_SCALE)))) if integrator == "rk4" else 1
    rate = f"fastest rate |λ| ≈ {lam:.3g}/s along the data" if lam > 0 else "no local rate found"
    if lam_u > lam:
        rate += f", inputs ≈ {lam_u:.3g}/s"
    return m, (f"{m} {integrator} step{'s' if m > 1 else ''} per sample interval ({rate}, sample spacing {h_max:.3g} s"
               + (f"; h·|λ| ≤ {_STEP_SCALE}" if integrator == "rk4" else
                  "; implicit scheme: one step" if integrator in IMPLICIT_FIXED_STEP else
                  "; the substep rule is RK4's: give --substeps for this scheme") + ")")


def fit_inputs(num: NumericSystem, exprs: Mapping[str, str] | None) -> dict:
    """``--input NAME=EXPR`` / ``[input]`` for a fit: expressions of t (pdsl syntax), or Python callables
    of a time array (the API), as functions of a time array."""
    from ..sim.simulate import input_from_expression

    out = {}
    for name, expr in (exprs or {}).items():
        if name not in num.u_names:
            raise PdslError.at("BadOption", f"--input {name}: the model has no exogenous input `{name}`",
                               hint="exogenous inputs: " + (", ".join(num.u_names) or "none"))
        if callable(expr):
            out[name] = expr
            continue
        sig = input_from_expression(num, name, str(expr))
        if sig.fn.sparsity_jac(1, 0).nnz():
            raise PdslError.at("BadOption", f"--input {name}={expr}: a fit's input is a function of time only",
                               hint="give measured inputs as a data column instead")
        p0 = num.param_vector({})
        x0 = np.zeros(num.nx)
        fn = sig.fn
        out[name] = lambda t, fn=fn, p0=p0, x0=x0: np.asarray(
            fn.map(len(np.atleast_1d(t)))(np.atleast_1d(t)[None, :], np.tile(x0[:, None], len(np.atleast_1d(t))),
                                          np.tile(p0[:, None], len(np.atleast_1d(t))))).ravel()
    return out


def exact_inputs(num: NumericSystem, exprs: Mapping[str, str] | None) -> tuple:
    """The inputs given as expressions of t (``--input NAME=EXPR``) as (index, CasADi function): the rollouts
    evaluate them at every stage's time (a sinusoid sampled every 0.05 s and interpolated linearly is off by up to
    (ωh)²/8 of its amplitude: 1.6 % at ω = 7.1, enough to bias a fit by 2σ)."""
    from ..sim.simulate import input_from_expression

    return tuple((num.u_names.index(name), input_from_expression(num, name, str(expr)).fn)
                 for name, expr in (exprs or {}).items() if not callable(expr) and name in num.u_names)


def noise_weights(noise: Mapping[str, float] | None, observed: tuple[str, ...]) -> tuple[float, ...] | None:
    """Residual weights 1/σ per observed column from ``--noise COL=σ`` (unlisted columns: weight 1)."""
    if not noise:
        return None
    for name in noise:
        if name not in observed:
            raise PdslError.at("BadOption", f"--noise {name}: `{name}` is not an observed column",
                               hint="observed columns: " + ", ".join(observed))
    # relative and per-sample noise (strings) weight each sample instead (Trajectory.weights): column weight 1
    return tuple(1.0 / float(noise[n]) if n in noise and not isinstance(noise[n], str) else 1.0 for n in observed)


def choose_start(cfg: FitConfig, data: Dataset, layout: ParamLayout) -> str:
    """``auto``: estimate the chunk starts when states are unmeasured or samples irregular, or for a
    Gauss–Newton fit of physical parameters (no networks): noisy first samples would bias it; else
    start from the data (BENCHMARKS A5)."""
    want = cfg.start
    need = bool(data.latent)
    if want == "data":
        return "data"
    if want == "auto":
        want = "estimate" if need or (cfg.method == "gauss-newton" and not layout.networks and cfg.shooting == "single") else "data"
    if want == "estimate":
        if cfg.shooting == "multiple":  # node states are unknowns either way; unmeasured ones start from guesses
            return "estimate" if need else "data"
        if cfg.method != "gauss-newton":
            why = ", ".join(data.latent)
            raise PdslError.at("BadOption", f"estimated chunk starts are fitted by gauss-newton, not {cfg.method}"
                               + (f" (unmeasured: {why})" if why else ""),
                               hint="use --method gauss-newton, or give every state column")
    return want


def _initial_state(run: FitRun, out_dir: Path, resume: bool) -> ck.State:
    fp = fingerprint(run.cfg, run.model_path, run.model.name, run.model_text)
    if not resume:
        return ck.State(theta=run.layout.theta_from_p(run.p_start))
    state, saved = ck.load_checkpoint(out_dir / ck.NAME)
    # key by key: a setting that one side lacks counts as None (a field added or removed since, at its default)
    changed = sorted(k for k in set(saved) | set(fp) if saved.get(k) != fp.get(k))
    if changed:
        raise PdslError.at("BadResume", f"the checkpoint in {out_dir} was made with different settings ({', '.join(changed)})",
                           hint="resume with the same model, data and settings (only --epochs may change), or start afresh")
    return state


def _check_inputs(cfg: FitConfig, out_dir: Path, resume: bool) -> None:
    """What can be checked without the model, checked before it is parsed and compiled (which can
    take long): the settings, the data and --init files, the output directory, the checkpoint."""
    import os

    from ..diagnostics import Span
    from .config import check_options

    check_options(cfg)
    for what, name in (("data", cfg.data), ("--init", cfg.init)):
        if name is None or not isinstance(name, (str, Path)):  # an in-memory table (the Python API)
            continue
        p = Path(name)
        at = Span.point(str(p), 1, 1)
        if not p.exists():
            raise PdslError.at("FileNotFound", f"no such file: {p}", at, hint=f"check the {what} path")
        if not p.is_file():
            raise PdslError.at("FileUnreadable", f"{p} is not a file", at, hint=f"{what} names a file")
        try:
            with open(p, "rb") as fh:
                fh.read(1)
        except OSError as exc:
            raise PdslError.at("FileUnreadable", f"cannot read {p}: {exc.strerror or exc}", at) from None
    if out_dir.exists() and not out_dir.is_dir():
        raise PdslError.at("CannotWrite", f"cannot write {out_dir}: it exists and is not a directory",
                           hint="-o names a directory")
    probe = out_dir
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        raise PdslError.at("CannotWrite", f"cannot create {out_dir}: {probe} is not a directory", hint="-o names a directory")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise PdslError.at("CannotWrite", f"cannot write {out_dir}: {probe} is not writable")
    if resume and not (out_dir / ck.NAME).is_file():
        raise PdslError.at("NoCheckpoint", f"no checkpoint to resume from: {out_dir / ck.NAME}",
                           hint="run without --resume first")


def _first_bad_chunk(loss, theta: np.ndarray, chunks) -> int:
    """Index of a chunk whose loss is not finite (bisection over the chunks; the whole set is bad)."""
    idx = np.arange(len(chunks))
    while len(idx) > 1:
        half = idx[: len(idx) // 2]
        idx = half if not np.isfinite(loss.value(theta, chunks.take(half))) else idx[len(idx) // 2 :]
    return int(idx[0])


_HUGE = 1e150  # data beyond this magnitude cannot be fitted in double precision: its squares overflow


def _row_span(path: str, line: int, column: str | None = None):
    """The cell of the column named ``column`` on file line ``line`` (the whole line when it is not found)."""
    import csv

    from ..data.csvio import cell_span, split_header
    from ..diagnostics import source_text

    first = (source_text(path) or "").split("\n", 1)[0]
    try:  # `theta [rad]` is the column `theta`
        header = [split_header(h)[0] for h in next(csv.reader([first]), [])] if first else []
    except csv.Error:  # a header cell beyond csv's field limit: point at the line
        header = []
    return cell_span(path, line, header.index(column) if column in header else len(header) + 1)


def _check_magnitudes(data: Dataset) -> None:
    """No data value so large that the loss overflows (|v| > 1e150: v² is beyond the largest double)."""
    for tr in data.trajectories:
        for block, names in ((tr.S, data.shown), (tr.Y, data.observed), (tr.U, data.inputs)):
            if block.size == 0:
                continue
            big = np.argwhere(np.abs(block) > _HUGE)
            if big.size:
                r, c = (int(v) for v in big[0])
                raise PdslError.at(
                    "BadTrajectoryData",
                    f"{names[c]} = {block[r, c]:.6g} is too large to fit: the squared errors overflow (|value| > {_HUGE:g})",
                    _row_span(data.path, tr.first_line + r, names[c]),
                    "rescale the data (e.g. SI units), or drop this sample",
                )


def _check_start_loss(run: FitRun, theta: np.ndarray, chunks) -> None:
    """The loss at the start values must be finite: an overflow (values like 1e308 in the data) or a
    rollout blowing up is reported at the data row it comes from, before any epoch."""
    loss = getattr(run.loss, "base", run.loss)  # the data term, without regularisers
    with np.errstate(all="ignore"):
        if np.isfinite(loss.value(theta, chunks)):
            return
        k = _first_bad_chunk(loss, theta, chunks)
    j, s = (int(v) for v in chunks.origin[k])
    tr = run.train.trajectories[j]
    rows = slice(s, s + chunks.steps + 1)
    block = np.abs(np.concatenate([tr.S[rows], tr.Y[rows]], axis=1))
    names = [*run.data.shown, *run.data.observed]
    r, c = np.unravel_index(int(np.argmax(np.where(np.isfinite(block), block, np.inf))), block.shape)
    line = tr.first_line + s + int(r)
    biggest = float(block[r, c])
    why = (f"the largest value there is {names[c]} = {biggest:.3g}, whose square overflows" if biggest > 1e150
           else "the model's rollout from this sample blows up")
    hint = "rescale the data (SI units, values well below 1e150), drop this trajectory, or start from other parameter values"
    events = _event_failure(run, loss, theta, tr, s, chunks.steps) if biggest <= 1e150 else None
    if events is not None:
        why, hint = events
    raise PdslError.at(
        "BadTrajectoryData",
        f"the loss is not finite on the chunk of trajectory {tr.label} starting at line {tr.first_line + s}: {why}",
        _row_span(run.data.path, line, names[c]),
        hint,
    )


def _event_failure(run: FitRun, loss, theta: np.ndarray, tr, s: int, steps: int) -> tuple[str, str] | None:
    """Why a chunk's rollout from sample ``s`` of a model with events is not finite, when an event is the cause
    (pdsl.numerics.events: a `terminate` inside the data, or two firings in one integration step): (why, hint)."""
    hy = getattr(run.num, "hybrid", None)
    if hy is None or not hy.conditions or not isinstance(loss, ChunkLoss) or loss.spec.variable_step:
        return None
    p = run.layout.p_from_theta(theta)
    x = np.asarray(loss._x0(float(tr.t[s]), tr.S[s], p), dtype=float).ravel()
    U = tr.U if tr.U.size else np.zeros((len(tr.t), 0))
    z = np.zeros(0)
    for k in range(s, min(s + steps, len(tr.t) - 1)):
        x_next = np.asarray(loss.interval(x, p, U[k], U[k + 1], float(tr.t[k])), dtype=float).ravel()
        if np.all(np.isfinite(x_next)):
            x = x_next
            continue
        if not np.all(np.isfinite(x)):
            return None
        t = float(tr.t[k])  # the crossing: a Newton step of each atom from the step's start along the flow
        g = np.asarray(hy.atoms(t, x, z, p, U[k]), dtype=float).ravel()
        f = np.asarray(run.num.rhs(t, x, p, U[k]), dtype=float).ravel()
        dt = float(tr.t[k + 1] - t)
        gdot = (np.asarray(hy.atoms(t + 1e-6 * dt, x + 1e-6 * dt * f, z, p, U[k]), dtype=float).ravel() - g) / (1e-6 * dt)
        taus = [t - g[i] / gdot[i] for i in range(len(g)) if gdot[i] != 0 and t <= t - g[i] / gdot[i] <= t + dt]
        when = f"t ≈ {min(taus):.6g}" if taus else f"t = {t:.6g} … {tr.t[k + 1]:.6g}"
        stops = [hy.labels[j] for j in range(len(hy.terminate)) if hy.terminate[j]]
        if stops:
            return (f"the rollout reaches a terminating event ({' or '.join(f'`{l}`' for l in stops)}) at {when}, but the "
                    f"data go on to t = {float(tr.t[-1]):.6g} (or events come closer together than one integration "
                    "step there)",
                    "data after a terminating event cannot be fitted: end the data before it, remove the `terminate`, "
                    "or start from other parameter values (--param)")
        return (f"two events fire within one integration step at {when} (events accumulate there: the fit takes one "
                "event per step)", "start from other parameter values (--param), or use more --substeps")
    return None


def _checked_save(run: FitRun, path: Path, fp: dict) -> Callable:
    """The per-epoch checkpoint writer: refuses a non-finite loss (the previous checkpoint stays)."""
    from ..diagnostics import Span

    def save(s: ck.State) -> None:
        h = s.history
        if h["train"] and not np.isfinite(h["train"][-1]):
            raise PdslError.at("NonFiniteLoss", f"the training loss became {h['train'][-1]} in epoch {s.epoch}",
                               Span.point(run.data.path, 1, 1) if run.data.path else None,
                               "the optimiser diverged: lower --lr, use shorter --chunk, or rescale the data; "
                               f"{path} holds the last finite epoch")
        with ck.writing(path):
            ck.save_checkpoint(path, s, fp)

    return save


_STAGE = ".pdsl-outputs."  # prefix of the staging directory of the output set


def run_fit(model_path, model_name: str | None, cfg: FitConfig, out_dir: str | Path, *, resume: bool = False, text: str | None = None,
            consts: Mapping[str, int] | None = None, stop_after: int | None = None, progress: bool = True,
            log: Callable[[str], None] = print) -> dict:
    """Fit, checkpointing every epoch into ``out_dir``; returns a summary (``params``, ``finished``...)."""
    import shutil

    out_dir = Path(out_dir)
    _check_inputs(cfg, out_dir, resume)
    auto = cfg.method == "auto"  # the default method: its staged fit falls back on multiple shooting (pdsl.fit.fallback)
    run = prepare(model_path, model_name, cfg, consts, text=text)
    state = _initial_state(run, out_dir, resume)
    ck.remove_stale_temporaries(out_dir, (ck.NAME, *OUTPUT_FILES, f"{Path(run.model_path).stem}.fitted.phm"))
    if out_dir.is_dir():
        for stale in out_dir.glob(_STAGE + "*"):  # a staging directory a killed run left behind
            shutil.rmtree(stale, ignore_errors=True)
    fp = fingerprint(run.cfg, run.model_path, run.model.name, run.model_text)
    if run.cfg.window == "random":  # one window per trajectory: epoch 0's for the checks, a fixed draw for validation
        train_chunks = _random_windows(run)(0)
        val_chunks = random_windows(run.val, run.cfg.chunk, np.random.default_rng([run.cfg.seed, 15]))
    else:
        train_chunks = make_chunks(run.train, run.cfg.chunk, run.cfg.stride)
        val_chunks = make_chunks(run.val, run.cfg.chunk, run.cfg.chunk)
    if len(train_chunks) == 0:
        raise PdslError.at("BadTrajectoryData", f"{run.data.path}: no training chunks", hint="give more or longer trajectories")
    _check_magnitudes(run.data)
    _check_start_loss(run, np.asarray(state.theta, dtype=float), train_chunks)
    c = run.cfg
    opts = TrainOptions(epochs=c.epochs, batch=c.batch, lr=c.lr, lr_min=c.lr_min, weight_decay=c.weight_decay,
                        seed=c.seed, tol=c.tol, stop_after=stop_after, progress=progress, schedule=c.schedule,
                        patience=c.patience, factor=c.factor, early_stop=c.early_stop, warmup=c.warmup,
                        windows=_random_windows(run) if c.window == "random" else None)
    if (c.window != "chunks" or c.schedule != "cosine" or c.early_stop or c.dropout or c.warmup) and c.method != "adamw":
        raise PdslError.at("BadOption", "--window random, --schedule plateau, --early-stop, --warmup and --dropout are "
                           "adamw settings",
                           hint="use --method adamw")
    segments = make_segments(run.train, c.chunk) if c.shooting == "multiple" else None
    log(_banner(run, len(train_chunks), len(val_chunks), state.epoch, segments))
    t0 = time.perf_counter()
    save = _checked_save(run, out_dir / ck.NAME, fp)
    on_epoch = regularize.epoch_callback(run.loss, state, train_chunks, save)
    run._final_loss = run.loss
    if run.stages:
        from .fallback import staged_or_multiple

        result, train_chunks = staged_or_multiple(run, state, opts, on_epoch, log, _staged_fit, auto)
        run._final_chunks = train_chunks
    elif segments is not None:  # node states estimated (unmeasured ones too), every sample compared once
        run._final_chunks = segments.chunks
        result = multiple_shooting(run.loss, segments, val_chunks, state, opts, on_epoch, hessian=c.hessian, log=log,
                                   robust=_robust(run))
    elif c.start == "estimate":
        run._final_chunks = train_chunks
        from .latent import latent_gauss_newton

        result = latent_gauss_newton(run.loss, run.train, train_chunks, val_chunks, state, opts, on_epoch=on_epoch,
                                     robust=_robust(run))
    elif c.method == "ipopt":
        result = ipopt(run.loss, train_chunks, val_chunks, state, opts, on_epoch, hessian=c.hessian, log=log,
                       robust=_robust(run))
    else:
        optimise = gauss_newton if c.method == "gauss-newton" else adamw
        result = optimise(run.loss, train_chunks, val_chunks, state, opts, on_epoch=on_epoch)
    save(result.state)
    elapsed = time.perf_counter() - t0
    summary = _summary(run, result, elapsed)
    run._starts = {"train": result.state.arrays.get("starts"), "val": result.state.arrays.get("starts_val")}
    ident = identifiability(run, result, train_chunks, c.batch)
    if ident is not None:
        summary["identifiability"] = ident.to_dict()
        summary["notes"] = list(ident.sentences)
        if ident.stderr is not None:  # an undetermined parameter has no error bar (None: "not determined")
            for name, se in zip(ident.names, ident.stderr):
                if not np.isfinite(se):
                    summary["stderr"][name] = None
        summary["misfit"] = misfit(run, result)
        summary["notes"] += diagnostics(run, result, summary)
    stall = stall_note(run, result)
    if stall:
        summary["notes"] = [*(summary.get("notes") or ()), stall]
    if getattr(run, "_fallback", None):  # the default fit fell back on multiple shooting (said first), or tried it (last)
        notes = list(summary.get("notes") or ())
        summary["notes"] = [run._fallback, *notes] if run.cfg.shooting == "multiple" else [*notes, run._fallback]
    if c.profile and result.finished:
        from .profile import profile_intervals

        run._stderr = summary["stderr"]
        summary["profiles"] = profile_intervals(run, result, run._final_loss, run._final_chunks, c.profile,
                                                robust=_robust(run), log=log)
    if result.finished:
        _write_outputs(run, result, summary, out_dir)
    return summary


def misfit(run: FitRun, result: Result) -> dict | None:
    """χ² (the weighted residuals' sum of squares), its degrees of freedom and χ²/dof, when the fit's information
    was computed (Gauss–Newton with estimated starts); ``noise_known`` when every observed column has a --noise σ,
    so that χ²/dof should be near 1."""
    extra = result.state.extra
    if "residual_cost" not in extra or not extra.get("residual_dof"):
        return None
    chi2, dof = float(extra["residual_cost"]), int(extra["residual_dof"])
    known = bool(run.cfg.noise) and all(n in run.cfg.noise for n in run.data.observed)
    return {"chi2": chi2, "dof": dof, "ratio": chi2 / dof, "noise_known": known}


_MISFIT_P = 1e-3  # χ²/dof outside the central 1 − 2·1e-3 of its distribution is a warning


def diagnostics(run: FitRun, result: Result, summary: dict) -> list[str]:
    """Warnings a fit's numbers alone do not show: a misfit far from the stated noise, parameters that ended at
    a declared bound, a fit that never left its start values."""
    notes = []
    mf = summary.get("misfit")
    if mf and mf["noise_known"] and run.cfg.loss not in ("huber", "soft-l1"):  # a reweighted sum is no χ²
        from scipy.stats import chi2

        lo, hi = (float(chi2.ppf(q, mf["dof"])) / mf["dof"] for q in (_MISFIT_P, 1 - _MISFIT_P))
        ratio = mf["ratio"]
        if ratio > hi:
            notes.append(
                f"warning: the misfit is χ²/dof = {ratio:.3g}, {ratio:.3g}× what measurement noise of the stated size "
                f"gives (expected {lo:.3g}–{hi:.3g} for {mf['dof']} degrees of freedom): the model misses something the "
                "data show (model error), the stated --noise is too small, or the fit stopped in a local minimum (try "
                "other start values); the error bars are scaled by the misfit")
        elif ratio < lo:
            notes.append(
                f"warning: the misfit is χ²/dof = {ratio:.3g}, smaller than measurement noise of the stated size allows "
                f"(expected {lo:.3g}–{hi:.3g}): the stated --noise is larger than the data's, or the model overfits")
    if run.cfg.loss in ("huber", "soft-l1") and "downweighted" in result.state.extra:
        k = int(result.state.extra["downweighted"])
        notes.append(f"{run.cfg.loss} loss: {k} residual{'s' if k != 1 else ''} weighted below 1/2 (treated as outliers); "
                     "χ²/dof and the error bars are those of the reweighted fit")
    else:
        notes += outliers(run, result, summary)
    lay, specs = run.layout, {q.name: q for q in run.model.params}
    for name in lay.free_names:
        q, v = specs.get(name), summary["params"][name]
        for side, bound in (("lower", getattr(q, "lower", None)), ("upper", getattr(q, "upper", None))):
            if bound is not None and abs(v - bound) <= 1e-6 * max(abs(bound), abs(v), 1e-12):
                notes.append(f"warning: {name} ended at its {side} bound {bound:g}: the best fit may lie beyond it, and "
                             "its error bar assumes it does not (check the model, or the bound)")
    theta0 = lay.theta_from_p(run.p_start)
    theta = np.asarray(result.state.theta, dtype=float)
    if result.state.epoch > 0 and lay.free_names and np.all(np.abs(theta - theta0) <= 1e-9 * (1 + np.abs(theta0))):
        notes.append("warning: the fit never left its start values: the data may not depend on the free parameters "
                     "there, or the first steps failed; try other start values (--param NAME=VALUE)")
    return notes


_STALL = 0.05  # a network fit whose last training loss is above this fraction of its first epoch's may not have trained
_STALL_EPOCHS = 50  # and only after this many epochs (a short fit may simply not be done)


def training_stall(train: list[float]) -> tuple[float, float] | None:
    """(first, last) training loss of an AdamW history whose last epoch is above :data:`_STALL` of its first, after
    at least :data:`_STALL_EPOCHS` epochs; else None. Healthy network fits of this project end 1e-3–1e-2 of their
    first epoch's (the CHNN/HNN/NODE studies); the stalled ones 0.14–0.19, or above the first (a dead output)."""
    if len(train) < _STALL_EPOCHS or not (train[0] > 0 and np.isfinite(train[0]) and np.isfinite(train[-1])):
        return None
    return (float(train[0]), float(train[-1])) if train[-1] > _STALL * train[0] else None


def stall_note(run: FitRun, result: Result) -> str | None:
    """A finished AdamW fit of networks without warm-up whose loss did not fall (:func:`training_stall`)."""
    stall = training_stall(result.state.history.get("train") or [])
    if stall is None or run.cfg.method != "adamw" or not run.layout.networks or run.cfg.warmup or not result.finished:
        return None
    first, last = stall
    return (f"warning: the training loss ended at {last / first:.2g}× its first epoch's ({first:.3g} -> {last:.3g}): "
            "the networks may not have trained. A network output that passes through a saturating function "
            "(softplus, sigmoid, exp) can be driven flat by the first AdamW steps, which move every weight by "
            "about the learning rate at once; try --warmup 50 or a smaller --lr before reading this as the "
            "limit of the model or of the data (docs/fit.md, --warmup)")


_OUTLIER_SIGMAS = 5.0  # a standardized residual beyond this is reported as a likely outlier
_LISTED = 5  # at most this many residuals are listed


def largest_residuals(run: FitRun, result: Result, summary: dict, count: int = _LISTED) -> list[dict]:
    """The largest standardized residuals of a fit with estimated starts: residual / σ (the stated noise when
    every column has one, else the fit's residual scale), with the data file line, column and time of each."""
    r = result.state.arrays.get("residuals")
    chunks = getattr(run, "_final_chunks", None)
    mf = summary.get("misfit")
    if r is None or chunks is None or not mf or r.shape[0] != len(chunks):
        return []
    n_obs, n = len(run.data.observed), chunks.steps
    scale = 1.0 if mf["noise_known"] else float(np.sqrt(max(mf["ratio"], 1e-300)))
    z = np.abs(np.asarray(r)[:, : n_obs * (n + 1)]) / scale  # (first sample, then each step) × columns
    flat = np.argsort(z, axis=None)[::-1][:count]
    out = []
    for e in flat:
        c, k = np.unravel_index(int(e), z.shape)
        step, col = divmod(int(k), n_obs)
        j, s0 = (int(v) for v in chunks.origin[c])
        tr = run.train.trajectories[j]
        if s0 + step >= len(tr.t):
            continue  # padding
        out.append({"z": float(z[c, k]), "line": int(tr.first_line + s0 + step), "column": run.data.observed[col],
                    "t": float(tr.t[s0 + step]), "trajectory": tr.label})
    return out


def outliers(run: FitRun, result: Result, summary: dict) -> list[str]:
    """The largest standardized residuals (summary["largest_residuals"]), and a warning naming the data lines of
    those beyond 5σ — Gaussian noise puts one there in ~2 million samples."""
    top = largest_residuals(run, result, summary)
    summary["largest_residuals"] = top
    far = [x for x in top if x["z"] > _OUTLIER_SIGMAS]
    if not far:
        return []
    mf = summary["misfit"]
    if not mf["noise_known"]:
        scale = float(np.sqrt(np.mean(np.concatenate([tr.Y.ravel() for tr in run.train.trajectories]) ** 2))) or 1.0
        if np.sqrt(mf["ratio"]) < 1e-6 * scale:  # residuals at rounding/integration-error level: noise-free data
            return []
    r = result.state.arrays["residuals"]
    mf = summary["misfit"]
    scale = 1.0 if mf["noise_known"] else float(np.sqrt(max(mf["ratio"], 1e-300)))
    n_far = int(np.sum(np.abs(np.asarray(r)) / scale > _OUTLIER_SIGMAS))
    where = "; ".join(f"line {x['line']} ({x['column']} at t = {x['t']:.6g}): {x['z']:.3g}σ" for x in far)
    how = "" if mf["noise_known"] else " (σ estimated from the residuals: give --noise to judge against the real noise)"
    return [f"warning: {n_far} sample{'s' if n_far != 1 else ''} deviate{'s' if n_far == 1 else ''} from the fit by more "
            f"than {_OUTLIER_SIGMAS:g}σ{how} — outliers, or model error there: {where}"
            + (", …" if n_far > len(far) else "")
            + (f" — the {run.cfg.loss} loss limits their pull" if run.cfg.loss in ("huber", "soft-l1")
               else " — they pull the estimates: check or remove them, or fit with --loss huber")]


def _robust(run: FitRun):
    """(the robust loss, σ known?) of ``--loss huber|soft-l1``, or None."""
    from .robust import robust_loss

    loss = robust_loss(run.cfg.loss)
    if loss is None:
        return None
    known = bool(run.cfg.noise) and all(n in run.cfg.noise for n in run.data.observed)
    return loss, known


def _stage_chunks(run: FitRun, k: int, which: str = "train"):
    ds = run.train if which == "train" else run.val
    return whole_trajectories(ds) if k == len(run.stages) - 1 else make_chunks(ds, run.stages[k], run.stages[k])


def _carried_starts(S_prev: np.ndarray, prev, chunks) -> np.ndarray:
    """The start estimates of the last stage where a new window begins at one of its windows' starts (every
    stage's windows begin at multiples of the last one's length), else the data guesses."""
    at = {(int(j), int(s)): i for i, (j, s) in enumerate(prev.origin)}
    S = np.array(chunks.S0, dtype=float)
    for i, (j, s) in enumerate(chunks.origin):
        k = at.get((int(j), int(s)))
        if k is not None and k < len(S_prev):
            S[i] = S_prev[k]
    return S


def _staged_fit(run: FitRun, state: ck.State, opts: TrainOptions, on_epoch, log):
    """Levenberg–Marquardt with estimated starts on windows that grow stage by stage up to whole trajectories
    (:func:`stage_lengths`): the short windows first, where a start far from the optimum still converges, then
    longer ones warm-started from the last stage's parameters and start estimates, ending at one window per
    trajectory — every sample compared once, one start per trajectory — whose information gives the error
    bars. A checkpoint records the stage, so ``--resume`` continues inside it."""
    from dataclasses import replace as _replace

    from .latent import latent_gauss_newton

    first = int(state.extra.get("stage", 0))
    result = None
    chunks = _stage_chunks(run, first)
    for k in range(first, len(run.stages)):
        last = k == len(run.stages) - 1
        chunks = _stage_chunks(run, k)
        if k > first or state.arrays.get("starts") is None:
            if k > first:  # carry the last stage's estimates into this one
                prev = _stage_chunks(run, k - 1)
                state.arrays["starts"] = _carried_starts(state.arrays["starts"], prev, chunks)
                if run.val.trajectories:
                    prev_val = _stage_chunks(run, k - 1, "val")
                    state.arrays["starts_val"] = _carried_starts(state.arrays.get("starts_val", prev_val.S0), prev_val,
                                                                 _stage_chunks(run, k, "val"))
            state.extra.pop("converged", None)
            state.extra["stage"] = k
            state.extra["stage_start_epoch"] = state.epoch
        loss = run.loss if k == 0 else make_loss(run.num, run.layout, _replace(run.spec, steps=run.stages[k]),
                                                 run.data.observed, run.cfg)
        run._final_loss = loss
        # --epochs bounds the last stage; the earlier ones end at convergence or _STAGE_EPOCHS, whatever --epochs
        # says, so that a run continued with more --epochs (--resume) equals one given them from the start
        budget = run.cfg.epochs if last else _STAGE_EPOCHS
        stage_opts = _replace(opts, epochs=int(state.extra.get("stage_start_epoch", state.epoch)) + budget)
        result = latent_gauss_newton(loss, run.train, chunks, _stage_chunks(run, k, "val"), state, stage_opts,
                                     on_epoch=on_epoch, robust=_robust(run), **({} if last else {"invariant_weight": 1.0}))
        stopped = opts.stop_after is not None and state.epoch >= opts.stop_after
        what = "whole trajectories" if last else f"windows of {run.stages[k]} steps"
        log(f"  stage {k + 1}/{len(run.stages)}: {what} ({len(chunks)}), {state.epoch} epochs so far, "
            f"cost {state.history['train'][-1]:.6g}" + ("" if state.extra.get("converged") else " (not converged)"))
        if stopped and not (last and result.finished):
            return _replace(result, finished=False), chunks
    return result, chunks


def _random_windows(run: FitRun):
    """epoch -> one random window of ``chunk`` steps per training trajectory (seeded by seed, epoch)."""
    c = run.cfg
    return lambda epoch: random_windows(run.train, c.chunk, np.random.default_rng([c.seed, epoch, 15]))


def identifiability(run: FitRun, result: Result, train_chunks, batch: int = 200):
    """Standard errors, undetermined combinations and (data-start chunks) the residual-growth check;
    None for fits with networks or without free parameters (multiple shooting: its information, nodes profiled out)."""
    from .identify import analyse, residual_growth

    lay = run.layout
    multiple = run.cfg.shooting == "multiple"
    if lay.networks or not lay.free_names or (multiple and "information" not in result.state.arrays):
        return None
    theta = np.asarray(result.state.theta, dtype=float)
    notes = []
    if "information" in result.state.arrays:  # estimated starts: information with the starts profiled out
        H = result.state.arrays["information"]
        cost, dof = float(result.state.extra["residual_cost"]), int(result.state.extra["residual_dof"])
    else:
        base = getattr(run.loss, "base", run.loss)
        if not isinstance(base, ChunkLoss):
            return None
        from .train import _stacked_residuals

        r, J = _stacked_residuals(base, theta, train_chunks, batch)
        H, cost, dof = J.T @ J, float(r @ r), len(r) - J.shape[1]
        growth = residual_growth(r, len(train_chunks), train_chunks.steps, len(base.observed))
        scale = float(np.mean(np.concatenate([tr.Y.ravel() for tr in run.train.trajectories]) ** 2)) or 1.0
        if growth is not None and growth > 2.0 and cost / max(len(r), 1) > 1e-10 * scale:
            notes.append(
                f"the residuals grow along the chunks (mean square ×{growth:.3g} from the first to the last step): the chunk "
                "starts are noisy data samples, so these estimates are biased and their errors too small; fit with "
                "--start estimate (chunk starts fitted) or --shooting multiple")
    p = lay.p_from_theta(theta)
    idx = [run.num.p_names.index(n) for n in lay.free_names]
    values = np.array([p[i] for i in idx])
    dp = np.array([tr.derivative(float(theta[k])) for k, tr in enumerate(lay.transforms)])
    T = np.where(values != 0, dp / np.where(values != 0, values, 1.0), 1.0)
    by = "these data"
    if not run.stages and not multiple:  # short windows each with its own start may leave a parameter undetermined
        by = (f"this fit (windows of {run.cfg.chunk} steps, each from {'its own estimated start' if run.cfg.start == 'estimate' else 'a data sample'}; "
              "whole trajectories may determine it: leave --chunk at its default)")
    suspect = _suspect_end(run, values, cost, dof)
    if suspect:  # the fit, not the data, may be why: say so instead of blaming the data
        by = f"this fit ({suspect}; other start values may determine it)"
    ident = analyse(lay.free_names, values, H[: len(idx), : len(idx)], cost, dof, T, by=by)
    ident.sentences[:0] = notes
    return ident


def _suspect_end(run: FitRun, values, cost: float, dof: int) -> str | None:
    """Why a fit's end may not be the optimum the data allow (a parameter at a declared bound, or a misfit far
    above the stated noise), in words; None when neither."""
    specs = {q.name: q for q in run.model.params}
    at = [n for n, v in zip(run.layout.free_names, values)
          for b in (getattr(specs.get(n), "lower", None), getattr(specs.get(n), "upper", None))
          if b is not None and abs(v - b) <= 1e-6 * max(abs(b), abs(v), 1e-12)]
    if at:
        return f"{', '.join(at)} ended at {'a bound' if len(at) == 1 else 'bounds'}"
    noise = run.cfg.noise or {}
    if dof > 0 and noise and all(n in noise for n in run.data.observed):
        from scipy.stats import chi2

        if cost / dof > max(2.0, float(chi2.ppf(1 - _MISFIT_P, dof)) / dof):
            return f"its misfit χ²/dof = {cost / dof:.3g} is far above the stated noise: a local minimum?"
    return None


def _banner(run: FitRun, n_train: int, n_val: int, epoch: int, segments=None) -> str:
    c = run.cfg
    if segments is not None:
        dropped = f", {segments.dropped} samples dropped" if segments.dropped else ""
        pieces = (f"{len(segments)} shooting segments of {c.chunk} steps linked by continuity constraints, node states "
                  f"estimated, every sample compared once{dropped}; "
                  f"{n_val} validation chunks")
    elif run.stages:
        pieces = "whole trajectories, each start estimated" + (
            f", reached through windows of {', '.join(str(n) for n in run.stages[:-1])} steps" if len(run.stages) > 1 else "")
    else:
        pieces = f"{n_train} / {n_val} chunks of {c.chunk} steps" + (
            " (one random window per trajectory, redrawn every epoch)" if c.window == "random" else "")
    what = ", ".join(run.layout.free_names) or "-"
    nets = ", ".join(f"{n.name} ({n.size} weights)" for n in run.layout.networks)
    resumed = f", resuming after epoch {epoch}" if epoch else ""
    return (f"{run.model.name}: fitting {what}{'; networks ' + nets if nets else ''}\n"
            f"  data {run.data.path}: {len(run.train.trajectories)} training / {len(run.val.trajectories)} validation "
            f"trajectories, {pieces} (dt {run.data.dt:g})\n"
            f"  {c.method}, {c.loss} loss, {c.integrator} x{c.substeps}, {c.epochs} epochs"
            f"{f' (lr warm-up over {c.warmup})' if c.warmup else ''}{resumed}, "
            f"{getattr(run.loss, 'backend', 'casadi')} backend"
            + ("" if c.start != "estimate" else "; chunk starts estimated"
               + (f" (unmeasured: {', '.join(run.data.latent)})" if run.data.latent else ""))
            + ("" if run.data.uniform else "; irregular sampling")
            + (f"\n  {run.substeps_note}" if run.substeps_note else "")
            + (f"\n  events located inside the {c.integrator} steps (at most one per step): "
               + ", ".join(f"`{label}`" for label in run.num.hybrid.labels)
               if getattr(run.num, "hybrid", None) is not None and run.num.hybrid.conditions else "")
            + _switches_line(run))


def _switches_line(run: FitRun) -> str:
    """What the fit does at the switching surfaces of the dynamics (LANGUAGE.md §11)."""
    hy = getattr(run.num, "hybrid", None)
    sw = hy.switches if hy is not None else None
    if sw is None or not sw.n:
        return ""
    names = ", ".join(f"`{text}`" for text in sw.texts[:4]) + (" ..." if sw.n > 4 else "")
    if hy.conditions:
        return f"\n  note: the switching surfaces {names} are stepped through (the steps locate the events)"
    if run.cfg.switches == "locate":
        return f"\n  switching surfaces located inside the {run.cfg.integrator} steps (Filippov sliding): {names}"
    return (f"\n  note: the {run.cfg.integrator} steps step through the switching surfaces {names}; "
            "--switches locate locates them (gradients with the switching-time term)")


def _summary(run: FitRun, result: Result, elapsed: float) -> dict:
    lay = run.layout
    p = lay.p_from_theta(result.state.theta)
    stderr = {}
    if result.stderr is not None:
        for k, (name, tr) in enumerate(zip(lay.free_names, lay.transforms)):
            stderr[name] = abs(tr.derivative(float(result.state.theta[k]))) * float(result.stderr[k])
    h = result.state.history
    return {
        "model": run.model.name, "p": p, "finished": result.finished, "epochs": result.state.epoch,
        "converged": bool(result.state.extra.get("converged", False)),
        "solver_status": result.state.extra.get("ipopt_status"), "continuity": result.state.extra.get("constraint_violation"),
        "params": {n: float(p[i]) for i, n in enumerate(run.num.p_names[: lay.n_phys])},
        "free": list(lay.free_names), "stderr": stderr,
        "train_loss": h["train"][-1] if h["train"] else None, "val_loss": h["val"][-1] if h["val"] else None,
        "seconds": elapsed, "history": h, "early_stop": run.cfg.early_stop,
        "saturation": ({"epoch": result.state.extra["best_epoch"], "seconds": result.state.extra["saturation_seconds"],
                        "val_loss": result.state.extra["best_val"], "stopped": bool(result.state.extra.get("early_stopped"))}
                       if result.state.extra.get("best_epoch") is not None else None),
    }


def _write_outputs(run: FitRun, result: Result, summary: dict, out_dir: Path) -> None:
    """The output set, all or nothing: written into a staging directory inside ``out_dir``, then
    moved into place file by file (renames within one directory), ``params.json`` last. A failed
    write (disk full, ...) is a ``CannotWrite`` naming the file and leaves the previous set as it was."""
    import json
    import os
    import shutil
    import tempfile

    from .report import write_report

    lay, p = run.layout, summary["p"]
    bad = [n for n, v in summary["params"].items() if not np.isfinite(v)]
    if bad or not np.all(np.isfinite(p)):
        raise PdslError.at("NonFiniteLoss", "the fitted values are not finite (" + (", ".join(bad) or "network weights") + ")",
                           hint="the optimiser diverged: lower --lr, use shorter --chunk, or rescale the data")
    stem = Path(run.model_path).stem
    names = {"params": "params.json", "model": f"{stem}.fitted.phm"}
    if lay.networks:
        names["networks"] = "networks.npz"
    with ck.writing(out_dir):
        out_dir.mkdir(parents=True, exist_ok=True)
        stage = Path(tempfile.mkdtemp(prefix=_STAGE, dir=out_dir))
    try:
        if lay.networks:
            with ck.writing(out_dir / names["networks"]):
                out.write_networks(stage / names["networks"], out.network_arrays(run.num, lay, p))
        text = run.model_text
        values = {n: summary["params"][n] for n in lay.free_names}
        with ck.writing(out_dir / names["model"]):
            out.write_text(stage / names["model"], out.fitted_model_text(text, run.model_path, run.model.name, values))
        write_report(run, result, summary, stage, out_dir)
        doc = json.dumps(_params_json(run, summary, names), indent=2, allow_nan=False) + "\n"
        with ck.writing(out_dir / names["params"]):
            out.write_text(stage / names["params"], doc)
        files = sorted(stage.iterdir(), key=lambda f: f.name == names["params"])  # params.json last
        if not run.cfg.plots:  # an earlier fit's figures would not belong to these parameters
            for stale in ("loss.png", "validation.png"):
                with ck.writing(out_dir / stale):
                    (out_dir / stale).unlink(missing_ok=True)
        for f in files:
            with ck.writing(out_dir / f.name):
                os.replace(f, out_dir / f.name)
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def _finite_or_none(v):
    return None if v is None or not np.isfinite(v) else float(v)


def _strict(obj):
    """``obj`` with every float that is not finite replaced by None (params.json is strict JSON)."""
    if isinstance(obj, float):
        return _finite_or_none(obj)
    if isinstance(obj, dict):
        return {k: _strict(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_strict(v) for v in obj]
    return obj


def _settings(cfg: FitConfig) -> dict:
    """The settings as JSON values: in-memory data (the Python API) and Python input functions by description."""
    d = dict(vars(cfg))
    if d.get("data") is not None and not isinstance(d["data"], str):
        d["data"] = f"<in-memory table {getattr(d['data'], 'path', '')}>"
    if d.get("input"):
        d["input"] = {k: v if isinstance(v, str) else f"<python {getattr(v, '__name__', 'callable')}>" for k, v in d["input"].items()}
    return d


def _params_json(run: FitRun, summary: dict, names: dict) -> dict:
    """The content of params.json: strict JSON (optional numbers that are not finite become null)."""
    specs = {q.name: q for q in run.model.params}
    params = {}
    for i, name in enumerate(run.num.p_names[: run.layout.n_phys]):
        q = specs.get(name)
        params[name] = {
            "value": summary["params"][name], "free": name in run.layout.free_names, "start": float(run.p_start[i]),
            "lower": None if q is None else q.lower, "upper": None if q is None else q.upper,
            "stderr": _finite_or_none(summary["stderr"].get(name)),
        }
    return {
        "model": run.model.name, "file": str(Path(run.model_path).resolve()),
        "values": summary["params"], "params": params,
        "networks": names.get("networks"),
        "fitted_model": names["model"],
        "epochs": summary["epochs"], "converged": summary["converged"],
        "solver_status": summary["solver_status"], "continuity": _finite_or_none(summary["continuity"]),
        "train_loss": _finite_or_none(summary["train_loss"]), "val_loss": _finite_or_none(summary["val_loss"]),
        "settings": _strict(_settings(run.cfg)),
        "identifiability": _strict(summary.get("identifiability")),
        "misfit": _strict(summary.get("misfit")),
        "largest_residuals": _strict(summary.get("largest_residuals")),
        "profiles": _strict(summary.get("profiles")),
        "notes": list(summary.get("notes") or ()),
        "stages": list(run.stages) or None,
    }


def apply_fitted(num: NumericSystem, params_path: str | Path) -> NumericSystem:
    """``num`` with the values of a ``params.json`` (and its ``networks.npz``) as defaults.

    The one reader of ``params.json`` (``fit --init``, ``evaluate --params``, ``compile --params``):
    :func:`pdsl.fit.params.read_params_file` checks it and locates every problem."""
    from .params import apply_params_file

    return apply_params_file(num, params_path)
