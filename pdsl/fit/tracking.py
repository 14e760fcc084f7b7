"""Experiment tracking: a fit's per-epoch history to TensorBoard or MLflow (``pdsl fit --track``).

``--track tensorboard:DIR`` writes TensorBoard event files into ``DIR`` (with tensorboardX);
``--track mlflow`` logs a run to MLflow's default tracking URI (``MLFLOW_TRACKING_URI``, else
``./mlruns``), ``--track mlflow:URI`` to ``URI``. Logged: the settings and fitted values as
parameters, and per epoch the training and validation loss, the learning rate (AdamW) or damping
(Gauss–Newton) and the epoch's seconds, with the epoch as the step.

The history is exported when the fit returns (also for a stopped fit that can be resumed), from
the same per-epoch record that ``history.csv`` holds; it is not streamed while the fit runs.
Both packages are optional (``pip install tensorboardX`` or ``mlflow-skinny``); a missing one
is a ``MissingDependency`` error, raised before the fit starts (:func:`check_target`).
"""

from __future__ import annotations

import math
from pathlib import Path

from ..diagnostics import PdslError

__all__ = ["check_target", "export_history"]

_KINDS = ("tensorboard", "mlflow")
# keys of the fit's history (as pdsl.fit.outputs.write_history reads them) -> tracked names
_SERIES = (("train", "loss/train"), ("val", "loss/validation"), ("lr", "lr_or_damping"),
           ("seconds", "seconds_per_epoch"))


def _split(target: str) -> tuple[str, str | None]:
    kind, _, where = target.partition(":")
    kind = kind.strip().lower()
    if kind not in _KINDS:
        raise PdslError.at("BadOption", f"--track {target}: unknown tracker `{kind}`",
                           hint="tensorboard:DIR, mlflow, or mlflow:TRACKING_URI")
    where = where.strip() or None
    if kind == "tensorboard" and where is None:
        raise PdslError.at("BadOption", "--track tensorboard needs a directory", hint="e.g. --track tensorboard:out/tb")
    return kind, where


def check_target(target: str) -> None:
    """Fail early (before a long fit) on a bad ``--track`` or a missing package."""
    kind, _ = _split(target)
    _module(kind)


def _module(kind: str):
    name = "tensorboardX" if kind == "tensorboard" else "mlflow"
    try:
        return __import__(name)
    except ImportError:
        package = "tensorboardX" if kind == "tensorboard" else "mlflow-skinny"
        raise PdslError.at("MissingDependency", f"--track {kind} needs the Python package `{name}`, which is not installed",
                           hint=f"pip install {package}") from None


def _finite(v) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def export_history(target: str, summary: dict, settings: dict | None = None, run_name: str | None = None) -> str:
    """Log ``summary["history"]`` (and the fitted values) to ``target``; returns where it went.

    A failure of the tracking library (a server that does not answer, a store it refuses) is a
    ``TrackingFailed`` error; the fit's own outputs are written before and stay."""
    kind, where = _split(target)
    mod = _module(kind)
    try:
        return _export(kind, where, mod, summary, settings, run_name)
    except PdslError:
        raise
    except Exception as exc:  # noqa: BLE001 - whatever the tracking library raises
        raise PdslError.at("TrackingFailed", f"--track {target}: {type(exc).__name__}: {str(exc)[:300]}",
                           hint="the fit's outputs are written; only the tracking failed (for MLflow, give a "
                                "server URI such as http://host:5000)") from None


def _export(kind: str, where: str | None, mod, summary: dict, settings: dict | None, run_name: str | None) -> str:
    history = summary.get("history") or {}
    n = len(history.get("train") or [])
    epochs = list(range(1, n + 1))
    params = {f"fit.{k}": v for k, v in (summary.get("params") or {}).items() if k in (summary.get("free") or ())}
    flat = {str(k): str(v) for k, v in (settings or {}).items() if v is not None}
    if kind == "tensorboard":
        Path(where).mkdir(parents=True, exist_ok=True)
        writer = mod.SummaryWriter(logdir=str(where))
        try:
            for key, tag in _SERIES:
                for step, value in zip(epochs, history.get(key) or []):
                    v = _finite(value)
                    if v is not None:
                        writer.add_scalar(tag, v, int(step))
            for name, value in params.items():
                v = _finite(value)
                if v is not None:
                    writer.add_scalar(name, v, int(epochs[-1]) if n else 0)
            if flat:
                writer.add_text("settings", "\n".join(f"    {k} = {v}" for k, v in sorted(flat.items())), 0)
        finally:
            writer.close()
        return str(where)
    if where:
        mod.set_tracking_uri(where)
    with mod.start_run(run_name=run_name):
        if flat:
            mod.log_params({k: v[:500] for k, v in flat.items()})
        for key, tag in _SERIES:
            for step, value in zip(epochs, history.get(key) or []):
                v = _finite(value)
                if v is not None:
                    mod.log_metric(tag.replace("/", "_"), v, step=int(step))
        for name, value in params.items():
            v = _finite(value)
            if v is not None:
                mod.log_metric(name, v)
        return mod.get_tracking_uri()
