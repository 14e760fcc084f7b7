"""What ``pdsl fit`` leaves in its output directory, each file written atomically.

* ``params.json``: every physical parameter with its value, which were free, start values,
  bounds, standard errors (Gauss–Newton), the final losses and the settings;
* ``networks.npz``: per network the flat weight vector (``NAME``, the layout of
  :mod:`pdsl.backend.neural`) and torch-named layers (``NAME/0.weight``, ``NAME/0.bias``, ...,
  the ``state_dict`` keys of :func:`pdsl.fit.torch_bridge.to_sequential`);
* ``MODEL.fitted.phm``: the model file with the fitted values substituted for the ``param``
  defaults — a textual edit at the spans of the default expressions, nothing evaluated;
* ``history.csv``, ``loss.png``, ``validation.png`` and ``report.md``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ..data.csvio import atomic_path, write_table
from ..parse import ast as A
from ..parse.parser import parse_text
from .params import ParamLayout

__all__ = ["write_json", "write_networks", "fitted_model_text", "write_text", "write_history", "plot_losses",
           "plot_validation", "network_arrays"]


def write_text(path: Path, text: str) -> None:
    with atomic_path(path) as tmp:
        Path(tmp).write_text(text, encoding="utf-8")


def write_json(path: Path, data: dict) -> None:
    write_text(path, json.dumps(data, indent=2, allow_nan=True) + "\n")


def network_arrays(num, layout: ParamLayout, p: np.ndarray) -> dict[str, np.ndarray]:
    """Flat weights per network plus per-layer arrays named like a torch Sequential's state_dict."""
    from ..backend.neural import layer_sizes

    arrays = {}
    specs = {nn.name: nn for nn in num.system.neural}
    for net in layout.networks:
        w = np.asarray(p[net.offset : net.offset + net.size], dtype=float)
        arrays[net.name] = w
        sizes, k = layer_sizes(specs[net.name]), 0
        for li, (fan_in, fan_out) in enumerate(zip(sizes[:-1], sizes[1:])):
            arrays[f"{net.name}/{2 * li}.weight"] = w[k : k + fan_in * fan_out].reshape(fan_out, fan_in, order="F")
            k += fan_in * fan_out
            arrays[f"{net.name}/{2 * li}.bias"] = w[k : k + fan_out]
            k += fan_out
    return arrays


def write_networks(path: Path, arrays: dict) -> None:
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as fh:
            np.savez(fh, **arrays)


# ---------------------------------------------------------------- the fitted model copy
def _offset(lines_start: list[int], line: int, col: int) -> int:
    return lines_start[line - 1] + col - 1


def _number(v: float) -> str:
    return repr(float(v))


def fitted_model_text(text: str, path: str, model_name: str, values: dict[str, float]) -> str:
    """``text`` with the default of every ``param`` in ``values`` replaced by its value.

    Array parameters are named ``m[1]``, ``m[2]``...: a vector literal default has its elements
    replaced one by one; any other default becomes a vector literal of the new values.
    """
    tree = parse_text(text, path)
    starts = [0]
    for line in text.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))
    edits: list[tuple[int, int, str]] = []
    for model in tree.models:
        if model.name != model_name:
            continue
        for stmt in model.body:
            if isinstance(stmt, A.DeclStmt) and stmt.kind == "param":
                for d in stmt.decls:
                    edits.extend(_decl_edits(d, values, starts))
    out = text
    for a, b, new in sorted(edits, reverse=True):
        out = out[:a] + new + out[b:]
    return out


def _decl_edits(d: A.Decl, values: dict[str, float], starts: list[int]) -> list[tuple[int, int, str]]:
    span_of = lambda e: (_offset(starts, e.span.line, e.span.col), _offset(starts, e.span.end_line, e.span.end_col))  # noqa: E731
    if d.range is None:
        if d.name not in values:
            return []
        if d.value is None:
            end = span_of(d)[1]
            return [(end, end, f" = {_number(values[d.name])}")]
        a, b = span_of(d.value)
        return [(a, b, _number(values[d.name]))]
    elements = sorted((k for k in values if k.startswith(f"{d.name}[")), key=lambda k: int(k[len(d.name) + 1 : -1]))
    if not elements:
        return []
    if isinstance(d.value, A.Vector) and len(d.value.items) == len(elements):
        return [(*span_of(item), _number(values[name])) for item, name in zip(d.value.items, elements)]
    literal = "[" + ", ".join(_number(values[n]) for n in elements) + "]"
    if d.value is None:
        end = span_of(d.range)[1]
        return [(end, end, f" = {literal}")]
    return [(*span_of(d.value), literal)]


# ---------------------------------------------------------------- history and plots
def write_history(path: Path, history: dict) -> None:
    n = len(history["train"])
    nan = float("nan")
    data = np.array([[k + 1, history["train"][k], history["val"][k] if history["val"][k] is not None else nan,
                      history["lr"][k], history["seconds"][k]] for k in range(n)]).reshape(n, 5)
    write_table(path, ["epoch", "train", "val", "lr_or_damping", "seconds"], data)


def _figure(figsize):
    """A Figure built without pyplot: the user's matplotlib backend is never switched."""
    from ..sim.plot import new_figure

    return new_figure(figsize=figsize)


def _save(fig, path: Path) -> None:
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=100)


def plot_losses(path: Path, history: dict, loss_name: str) -> None:
    fig = _figure((7, 4))
    ax = fig.subplots()
    epochs = np.arange(1, len(history["train"]) + 1)
    ax.semilogy(epochs, history["train"], label="training")
    val = [np.nan if v is None else v for v in history["val"]]
    if not all(np.isnan(val)):
        ax.semilogy(epochs, val, label="validation")
    ax.set_xlabel("epoch")
    ax.set_ylabel(f"{loss_name} loss")
    ax.grid(alpha=0.3, which="both")
    ax.legend()
    _save(fig, path)


def plot_validation(path: Path, t: np.ndarray, measured: np.ndarray, predicted: np.ndarray, names, title: str) -> None:
    k = min(len(names), 8)
    fig = _figure((8, 1.4 + 1.4 * k))
    axes = fig.subplots(k, 1, sharex=True, squeeze=False)
    for j, ax in enumerate(axes[:, 0]):
        ax.plot(t, measured[:, j], ".", ms=3, color="0.4", label="measured")
        ax.plot(t, predicted[:, j], "-", lw=1.3, color="C1", label="predicted")
        ax.set_ylabel(names[j], rotation=0, ha="right", va="center")
        ax.grid(alpha=0.3)
    axes[0, 0].legend(loc="upper right", fontsize=8)
    axes[-1, 0].set_xlabel("t")
    fig.suptitle(title)
    _save(fig, path)
