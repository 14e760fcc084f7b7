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
from ..lower import lower
from ..pipeline import load_models, select_model
from . import checkpoint as ck
from . import outputs as out
from . import regularize
from .config import FitConfig, fingerprint, resolve_defaults
from .data import Dataset, make_chunks, split_validation, load_dataset
from .loss import ChunkLoss, LossSpec
from .torch_loss import make_loss
from .params import ParamLayout, make_layout
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


def prepare(model_path: str, model_name: str | None, cfg: FitConfig, consts: Mapping[str, int] | None = None) -> FitRun:
    """Compile, choose parameters, load and split the data, build the loss."""
    m = select_model(load_models(model_path, consts=consts), model_name, model_path)
    num = _compile(lower(m, cfg.formulation), cfg.network_seed if cfg.network_seed is not None else cfg.seed)
    if cfg.init:  # warm start: a previous fit's parameters and network weights as start values
        num = apply_fitted(num, cfg.init)
    p_start = _start_values(num, cfg.param)
    layout = make_layout(num, m, cfg.free, p_start)
    cfg = resolve_defaults(cfg, bool(layout.networks))
    data = load_dataset(cfg.data, num, observe=cfg.observe, min_samples=cfg.chunk + 1)
    train, val = split_validation(data, cfg.val_fraction, cfg.seed)
    spec = LossSpec(steps=cfg.chunk, dt=data.dt, method=cfg.integrator, substeps=cfg.substeps, loss=cfg.loss,
                    threads=cfg.threads, project=cfg.project)
    loss = make_loss(num, layout, spec, data.observed, cfg)  # CasADi or torch backend (cfg.backend)
    loss = regularize.wrap_loss(loss, cfg, m, num, layout, train)  # equilibrium / sparsity terms, when set
    return FitRun(model_path, m, num, layout, cfg, data, train, val, loss, p_start)


def _initial_state(run: FitRun, out_dir: Path, resume: bool) -> ck.State:
    fp = fingerprint(run.cfg, run.model_path, run.model.name)
    if not resume:
        return ck.State(theta=run.layout.theta_from_p(run.p_start))
    state, saved = ck.load_checkpoint(out_dir / ck.NAME)
    if saved != fp:
        changed = sorted(k for k in set(saved) | set(fp) if saved.get(k) != fp.get(k))
        raise PdslError.at("BadResume", f"the checkpoint in {out_dir} was made with different settings ({', '.join(changed)})",
                           hint="resume with the same model, data and settings (only --epochs may change), or start afresh")
    return state


def run_fit(model_path: str, model_name: str | None, cfg: FitConfig, out_dir: str | Path, *, resume: bool = False,
            consts: Mapping[str, int] | None = None, stop_after: int | None = None, progress: bool = True,
            log: Callable[[str], None] = print) -> dict:
    """Fit, checkpointing every epoch into ``out_dir``; returns a summary (``params``, ``finished``...)."""
    out_dir = Path(out_dir)
    run = prepare(model_path, model_name, cfg, consts)
    state = _initial_state(run, out_dir, resume)
    ck.remove_stale_temporaries(out_dir, (ck.NAME, *OUTPUT_FILES, f"{Path(model_path).stem}.fitted.phm"))
    fp = fingerprint(run.cfg, run.model_path, run.model.name)
    train_chunks = make_chunks(run.train, run.cfg.chunk, run.cfg.stride)
    val_chunks = make_chunks(run.val, run.cfg.chunk, run.cfg.chunk)
    if len(train_chunks) == 0:
        raise PdslError.at("BadTrajectoryData", f"{run.data.path}: no training chunks", hint="give more or longer trajectories")
    c = run.cfg
    opts = TrainOptions(epochs=c.epochs, batch=c.batch, lr=c.lr, lr_min=c.lr_min, weight_decay=c.weight_decay,
                        seed=c.seed, tol=c.tol, stop_after=stop_after, progress=progress)
    segments = make_segments(run.train, c.chunk) if c.shooting == "multiple" else None
    log(_banner(run, len(train_chunks), len(val_chunks), state.epoch, segments))
    t0 = time.perf_counter()
    on_epoch = regularize.epoch_callback(run.loss, state, train_chunks, lambda s: ck.save_checkpoint(out_dir / ck.NAME, s, fp))
    if segments is not None:
        result = multiple_shooting(run.loss, segments, val_chunks, state, opts, on_epoch, hessian=c.hessian, log=log)
    elif c.method == "ipopt":
        result = ipopt(run.loss, train_chunks, val_chunks, state, opts, on_epoch, hessian=c.hessian, log=log)
    else:
        optimise = gauss_newton if c.method == "gauss-newton" else adamw
        result = optimise(run.loss, train_chunks, val_chunks, state, opts, on_epoch=on_epoch)
    ck.save_checkpoint(out_dir / ck.NAME, result.state, fp)
    elapsed = time.perf_counter() - t0
    summary = _summary(run, result, elapsed)
    if result.finished:
        _write_outputs(run, result, summary, out_dir)
    return summary


def _banner(run: FitRun, n_train: int, n_val: int, epoch: int, segments=None) -> str:
    c = run.cfg
    if segments is not None:
        dropped = f", {segments.dropped} trailing samples dropped" if segments.dropped else ""
        pieces = (f"{len(segments)} shooting segments of {c.chunk} steps linked by continuity constraints{dropped}; "
                  f"{n_val} validation chunks")
    else:
        pieces = f"{n_train} / {n_val} chunks of {c.chunk} steps"
    what = ", ".join(run.layout.free_names) or "-"
    nets = ", ".join(f"{n.name} ({n.size} weights)" for n in run.layout.networks)
    resumed = f", resuming after epoch {epoch}" if epoch else ""
    return (f"{run.model.name}: fitting {what}{'; networks ' + nets if nets else ''}\n"
            f"  data {run.data.path}: {len(run.train.trajectories)} training / {len(run.val.trajectories)} validation "
            f"trajectories, {pieces} (dt {run.data.dt:g})\n"
            f"  {c.method}, {c.loss} loss, {c.integrator} x{c.substeps}, {c.epochs} epochs{resumed}, "
            f"{getattr(run.loss, 'backend', 'casadi')} backend")


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
        "seconds": elapsed, "history": h,
    }


def _write_outputs(run: FitRun, result: Result, summary: dict, out_dir: Path) -> None:
    from .report import write_report

    lay, p = run.layout, summary["p"]
    stem = Path(run.model_path).stem
    files = {"params": out_dir / "params.json", "model": out_dir / f"{stem}.fitted.phm"}
    if lay.networks:
        files["networks"] = out_dir / "networks.npz"
        out.write_networks(files["networks"], out.network_arrays(run.num, lay, p))
    text = Path(run.model_path).read_text(encoding="utf-8")
    values = {n: summary["params"][n] for n in lay.free_names}
    out.write_text(files["model"], out.fitted_model_text(text, run.model_path, run.model.name, values))
    out.write_json(files["params"], _params_json(run, summary, files))
    write_report(run, result, summary, out_dir)


def _params_json(run: FitRun, summary: dict, files: dict) -> dict:
    specs = {q.name: q for q in run.model.params}
    params = {}
    for i, name in enumerate(run.num.p_names[: run.layout.n_phys]):
        q = specs.get(name)
        params[name] = {
            "value": summary["params"][name], "free": name in run.layout.free_names, "start": float(run.p_start[i]),
            "lower": None if q is None else q.lower, "upper": None if q is None else q.upper,
            "stderr": summary["stderr"].get(name),
        }
    return {
        "model": run.model.name, "file": str(Path(run.model_path).resolve()),
        "values": summary["params"], "params": params,
        "networks": files["networks"].name if "networks" in files else None,
        "fitted_model": files["model"].name,
        "epochs": summary["epochs"], "converged": summary["converged"],
        "solver_status": summary["solver_status"], "continuity": summary["continuity"],
        "train_loss": summary["train_loss"], "val_loss": summary["val_loss"],
        "settings": {k: v for k, v in vars(run.cfg).items()},
    }


def apply_fitted(num: NumericSystem, params_path: str | Path) -> NumericSystem:
    """``num`` with the values of a ``params.json`` (and its ``networks.npz``) as defaults."""
    import json

    path = Path(params_path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        values = data["values"]
    except FileNotFoundError:
        raise PdslError.at("FileNotFound", f"no such file: {path}") from None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise PdslError.at("BadParams", f"{path} is not a params.json written by `pdsl fit`: {exc}") from None
    p = num.p_default.copy()
    for name, value in values.items():
        if name not in num.p_names[: len(num.system.params)]:
            raise PdslError.at("BadParams", f"{path}: `{name}` is not a parameter of {num.system.name}")
        p[num.p_names.index(name)] = float(value)
    if data.get("networks"):
        p = _load_networks(num, p, path.parent / data["networks"])
    return replace(num, p_default=p)


def _load_networks(num: NumericSystem, p: np.ndarray, path: Path) -> np.ndarray:
    from ..backend.neural import n_weights

    try:
        z = np.load(path, allow_pickle=False)
    except OSError as exc:
        raise PdslError.at("BadParams", f"cannot read network weights {path}: {exc}") from None
    offset = len(num.system.params)
    for nn in num.system.neural:
        if nn.n_in is None:
            continue
        size = n_weights(nn)
        if nn.name not in z.files or z[nn.name].size != size:
            raise PdslError.at("BadParams", f"{path}: no weights of size {size} for network `{nn.name}`")
        p[offset : offset + size] = z[nn.name]
        offset += size
    return p
