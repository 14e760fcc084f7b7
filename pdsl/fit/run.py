"""``pdsl fit`` as a library call: model + data + settings -> fitted parameters in a directory.

Steps (each a small function): compile the model, choose the free parameters, read and split
the data (by trajectory, seeded), cut chunks (BENCHMARKS A4), build the chunk loss (A5),
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
from . import checkpoint as ck
from . import outputs as out
from . import regularize
from .config import FitConfig, fingerprint, resolve_defaults, step_options
from .data import Dataset, make_chunks, random_windows, split_validation, load_dataset
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

    model_path: str
    model: object
    num: NumericSystem
    layout: ParamLayout
    cfg: FitConfig
    data: Dataset
    train: Dataset
    val: Dataset
    loss: ChunkLoss
    p_start: np.ndarray


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


def prepare(model_path: str, model_name: str | None, cfg: FitConfig, consts: Mapping[str, int] | None = None) -> FitRun:
    """Compile, choose parameters, load and split the data, build the loss."""
    seed = cfg.network_seed if cfg.network_seed is not None else cfg.seed
    compiled = compile_model(model_path, CompileOptions(model=model_name, consts=consts or (), formulation=cfg.formulation,
                                                        seed=seed, numeric=False))
    m = compiled.model
    num = _compile(compiled.system, seed)
    if cfg.init:  # warm start: a previous fit's parameters and network weights as start values
        num = apply_fitted(num, cfg.init)
    p_start = _start_values(num, cfg.param)
    layout = make_layout(num, m, cfg.free, p_start)
    cfg = resolve_defaults(cfg, bool(layout.networks))
    data = load_dataset(cfg.data, num, observe=cfg.observe, min_samples=(cfg.chunk or 1) + 1, columns=cfg.map,
                        inputs=fit_inputs(num, cfg.input), latent=cfg.start != "data")
    cfg.start = choose_start(cfg, data, layout)
    if cfg.chunk is None:  # 4 steps (A5); longer chunks when unmeasured states must be estimated per chunk
        shortest = min(len(tr) for tr in data.trajectories) - 1
        cfg.chunk = max(1, min(20 if data.latent and cfg.start == "estimate" else 4, shortest))
    if cfg.stride is None:
        cfg.stride = cfg.chunk
    if cfg.start == "estimate":  # unmeasured columns get rough guesses; every chunk start is estimated
        from .latent import start_guesses

        data = replace(data, trajectories=tuple(replace(tr, S=S) for tr, S in zip(data.trajectories, start_guesses(data))))
    train, val = split_validation(data, cfg.val_fraction, cfg.seed)
    spec = LossSpec(steps=cfg.chunk, dt=data.dt, method=cfg.integrator, substeps=cfg.substeps, loss=cfg.loss,
                    threads=cfg.threads, project=cfg.project, variable_step=not data.uniform,
                    weights=noise_weights(cfg.noise, data.observed), step_options=step_options(cfg),
                    dtype=cfg.dtype, device=cfg.device, dropout=_dropout(cfg, compiled.system))
    loss = make_loss(num, layout, spec, data.observed, cfg)  # CasADi or torch backend (cfg.backend)
    loss = regularize.wrap_loss(loss, cfg, m, num, layout, train)  # equilibrium / sparsity terms, when set
    return FitRun(model_path, m, num, layout, cfg, data, train, val, loss, p_start)


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


def noise_weights(noise: Mapping[str, float] | None, observed: tuple[str, ...]) -> tuple[float, ...] | None:
    """Residual weights 1/σ per observed column from ``--noise COL=σ`` (unlisted columns: weight 1)."""
    if not noise:
        return None
    for name in noise:
        if name not in observed:
            raise PdslError.at("BadOption", f"--noise {name}: `{name}` is not an observed column",
                               hint="observed columns: " + ", ".join(observed))
    return tuple(1.0 / float(noise[n]) if n in noise else 1.0 for n in observed)


def choose_start(cfg: FitConfig, data: Dataset, layout: ParamLayout) -> str:
    """``auto``: estimate the chunk starts when states are unmeasured or samples irregular, or for a
    Gauss–Newton fit of physical parameters (no networks): noisy first samples would bias it; else
    start from the data (A5)."""
    want = cfg.start
    need = bool(data.latent)
    if want == "data":
        return "data"
    if want == "auto":
        want = "estimate" if need or (cfg.method == "gauss-newton" and not layout.networks and cfg.shooting == "single") else "data"
    if want == "estimate":
        if cfg.shooting == "multiple":
            if need:
                raise PdslError.at("BadOption", "multiple shooting starts its nodes from full data samples; "
                                   f"{', '.join(data.latent)} {'is' if len(data.latent) == 1 else 'are'} not measured",
                                   hint="use the default --shooting single (chunk starts are estimated)")
            return "data"
        if cfg.method != "gauss-newton":
            why = ", ".join(data.latent)
            raise PdslError.at("BadOption", f"estimated chunk starts are fitted by gauss-newton, not {cfg.method}"
                               + (f" (unmeasured: {why})" if why else ""),
                               hint="use --method gauss-newton, or give every state column")
    return want


def _initial_state(run: FitRun, out_dir: Path, resume: bool) -> ck.State:
    fp = fingerprint(run.cfg, run.model_path, run.model.name)
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
    raise PdslError.at(
        "BadTrajectoryData",
        f"the loss is not finite on the chunk of trajectory {tr.label} starting at line {tr.first_line + s}: {why}",
        _row_span(run.data.path, line, names[c]),
        "rescale the data (SI units, values well below 1e150), drop this trajectory, or start from other parameter values",
    )


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


def run_fit(model_path: str, model_name: str | None, cfg: FitConfig, out_dir: str | Path, *, resume: bool = False,
            consts: Mapping[str, int] | None = None, stop_after: int | None = None, progress: bool = True,
            log: Callable[[str], None] = print) -> dict:
    """Fit, checkpointing every epoch into ``out_dir``; returns a summary (``params``, ``finished``...)."""
    import shutil

    out_dir = Path(out_dir)
    _check_inputs(cfg, out_dir, resume)
    run = prepare(model_path, model_name, cfg, consts)
    state = _initial_state(run, out_dir, resume)
    ck.remove_stale_temporaries(out_dir, (ck.NAME, *OUTPUT_FILES, f"{Path(model_path).stem}.fitted.phm"))
    if out_dir.is_dir():
        for stale in out_dir.glob(_STAGE + "*"):  # a staging directory a killed run left behind
            shutil.rmtree(stale, ignore_errors=True)
    fp = fingerprint(run.cfg, run.model_path, run.model.name)
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
                        patience=c.patience, factor=c.factor, early_stop=c.early_stop,
                        windows=_random_windows(run) if c.window == "random" else None)
    if (c.window != "chunks" or c.schedule != "cosine" or c.early_stop or c.dropout) and c.method != "adamw":
        raise PdslError.at("BadOption", "--window random, --schedule plateau, --early-stop and --dropout are adamw settings",
                           hint="use --method adamw")
    segments = make_segments(run.train, c.chunk) if c.shooting == "multiple" else None
    log(_banner(run, len(train_chunks), len(val_chunks), state.epoch, segments))
    t0 = time.perf_counter()
    save = _checked_save(run, out_dir / ck.NAME, fp)
    on_epoch = regularize.epoch_callback(run.loss, state, train_chunks, save)
    if c.start == "estimate":
        from .latent import latent_gauss_newton

        result = latent_gauss_newton(run.loss, run.train, train_chunks, val_chunks, state, opts, on_epoch=on_epoch)
    elif segments is not None:
        result = multiple_shooting(run.loss, segments, val_chunks, state, opts, on_epoch, hessian=c.hessian, log=log)
    elif c.method == "ipopt":
        result = ipopt(run.loss, train_chunks, val_chunks, state, opts, on_epoch, hessian=c.hessian, log=log)
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
    if result.finished:
        _write_outputs(run, result, summary, out_dir)
    return summary


def _random_windows(run: FitRun):
    """epoch -> one random window of ``chunk`` steps per training trajectory (seeded by seed, epoch)."""
    c = run.cfg
    return lambda epoch: random_windows(run.train, c.chunk, np.random.default_rng([c.seed, epoch, 15]))


def identifiability(run: FitRun, result: Result, train_chunks, batch: int = 200):
    """Standard errors, undetermined combinations and (data-start chunks) the residual-growth check;
    None for fits with networks, without free parameters, or by multiple shooting."""
    from .identify import analyse, residual_growth

    lay = run.layout
    if lay.networks or not lay.free_names or run.cfg.shooting == "multiple":
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
    ident = analyse(lay.free_names, values, H[: len(idx), : len(idx)], cost, dof, T)
    ident.sentences[:0] = notes
    return ident


def _banner(run: FitRun, n_train: int, n_val: int, epoch: int, segments=None) -> str:
    c = run.cfg
    if segments is not None:
        dropped = f", {segments.dropped} trailing samples dropped" if segments.dropped else ""
        pieces = (f"{len(segments)} shooting segments of {c.chunk} steps linked by continuity constraints{dropped}; "
                  f"{n_val} validation chunks")
    else:
        pieces = f"{n_train} / {n_val} chunks of {c.chunk} steps" + (
            " (one random window per trajectory, redrawn every epoch)" if c.window == "random" else "")
    what = ", ".join(run.layout.free_names) or "-"
    nets = ", ".join(f"{n.name} ({n.size} weights)" for n in run.layout.networks)
    resumed = f", resuming after epoch {epoch}" if epoch else ""
    return (f"{run.model.name}: fitting {what}{'; networks ' + nets if nets else ''}\n"
            f"  data {run.data.path}: {len(run.train.trajectories)} training / {len(run.val.trajectories)} validation "
            f"trajectories, {pieces} (dt {run.data.dt:g})\n"
            f"  {c.method}, {c.loss} loss, {c.integrator} x{c.substeps}, {c.epochs} epochs{resumed}, "
            f"{getattr(run.loss, 'backend', 'casadi')} backend"
            + ("" if c.start != "estimate" else "; chunk starts estimated"
               + (f" (unmeasured: {', '.join(run.data.latent)})" if run.data.latent else ""))
            + ("" if run.data.uniform else "; irregular sampling"))


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
        text = Path(run.model_path).read_text(encoding="utf-8")
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
    }


def apply_fitted(num: NumericSystem, params_path: str | Path) -> NumericSystem:
    """``num`` with the values of a ``params.json`` (and its ``networks.npz``) as defaults.

    The one reader of ``params.json`` (``fit --init``, ``evaluate --params``, ``compile --params``):
    :func:`pdsl.fit.params.read_params_file` checks it and locates every problem."""
    from .params import apply_params_file

    return apply_params_file(num, params_path)
