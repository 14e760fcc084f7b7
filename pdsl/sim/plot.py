"""Plots of simulated trajectories: matplotlib Figures, never a backend switch.

Every function builds a :class:`matplotlib.figure.Figure` directly (no ``pyplot``, no
``matplotlib.use``), so plotting from a notebook or a script leaves the user's backend as it was;
the figures render in Jupyter (``_repr_png_``) and are saved atomically by :func:`save_figure`.
Every function also draws into a given ``ax`` (a matplotlib Axes) instead, and returns that Axes' Figure.

* :func:`trajectory_figure` — the shown states against time (one panel each, or grouped for large
  models), algebraic variables, declared outputs (``simulate --power`` columns: the port powers in one panel),
  then the energy drift E(t) − E(0) (or the energy balance for driven/damped models) and the inputs;
  ``names=`` picks the columns;
* :func:`path_figure` — a planar path: one column against another (the rolling disk's contact point ``x``, ``y``),
  or the paths of the model's drawn points and bodies;
* :func:`phase_figure` — phase portraits: each coordinate against its rate (``q``/``der(q)``, ``b.x``/``b.vx``)
  or its momentum;
* :func:`mechanism_figure` — the model's picture (bodies and connectors, ``draw`` statements: pdsl.sim.drawing) at a
  few instants;
* :func:`animate_bodies` — the same as an animation: a GIF (Pillow) or a self-contained HTML page.
"""

from __future__ import annotations

import io
import re

import numpy as np

from ..data.csvio import atomic_path
from ..diagnostics import PdslError

__all__ = ["trajectory_figure", "path_figure", "phase_figure", "mechanism_figure", "animate_bodies", "plot_states",
           "save_figure", "new_figure", "ANIMATION_FORMATS", "check_animation_path"]

_MAX_PANELS = 8
ANIMATION_FORMATS = (".gif", ".html")


def new_figure(**kw):
    """A Figure that renders itself in Jupyter (PNG) without pyplot."""
    from matplotlib.figure import Figure

    class PdslFigure(Figure):
        def _repr_png_(self):
            buf = io.BytesIO()
            self.savefig(buf, format="png", dpi=90)
            return buf.getvalue()

    return PdslFigure(**kw)


def save_figure(fig, path, dpi: int = 110) -> None:
    """Write ``fig`` as PNG (or by the suffix's format) atomically."""
    fmt = str(path).rsplit(".", 1)[-1].lower() if "." in str(path) else "png"
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format=fmt if fmt in ("png", "pdf", "svg", "jpg", "jpeg") else "png", dpi=dpi)


def _axes(ax, rows: int = 1, figsize=None):
    """``rows`` stacked Axes of a new Figure, or the given ``ax`` (for every row) and its Figure."""
    if ax is not None:
        return ax.figure, [ax] * rows
    fig = new_figure(figsize=figsize or (8, 1.4 + 1.45 * rows))
    return fig, list(fig.subplots(rows, 1, sharex=True, squeeze=False)[:, 0])


# ---------------------------------------------------------------- columns
def _columns(result) -> dict[str, np.ndarray]:
    """Every plottable column by name: the shown state, algebraic variables, outputs, inputs (CSV order)."""
    shown = result.shown if result.shown is not None else result.x
    cols = dict(zip(result.shown_names or result.x_names, shown.T))
    cols.update(zip(result.z_names, result.z.T))
    cols.update(zip(result.y_names, result.y.T))
    if getattr(result, "u", None) is not None:
        cols.update(zip(result.u_names, result.u.T))
    return cols


def _column(result, name: str, cols=None) -> np.ndarray:
    cols = _columns(result) if cols is None else cols
    if name == "t":
        return result.t
    if name == "energy" and result.energy is not None:
        return result.energy
    if name not in cols:
        raise PdslError.at("BadOption", f"no column `{name}` in this run",
                           hint="columns: " + ", ".join(["t", *cols] + (["energy"] if result.energy is not None else [])))
    return cols[name]


_POWER = re.compile(r"power\(.*\)")  # `simulate --power` columns: the power e·f of each element port


def _label(result, name: str) -> str:
    """An axis label: ``theta [rad]`` where the model gives units, else the name."""
    units = dict(getattr(result, "units", ()) or ())
    if units:
        units.setdefault("t", "s")
    unit = units.get(name)
    return f"{name} [{unit}]" if unit else name


# ---------------------------------------------------------------- against time
def trajectory_figure(result, *, title: str = "", system=None, max_panels: int = _MAX_PANELS, names=None, ax=None):
    """The run ``result`` (:class:`~pdsl.sim.simulate.SimulationResult`) against time, as a Figure.

    Panels: every shown state (grouped into positions and velocities above ``max_panels``), algebraic variables,
    declared outputs (the port powers of ``simulate --power`` together in one panel), then energy — the drift
    E(t) − E(0), or, when power flows in or out, the balance E(t) − E(0) − ∫P dt — and the exogenous inputs, where
    the run has them. ``names``: only these columns (any CSV column, or ``energy``), one panel each; ``ax``: everything
    chosen in that one Axes (with a legend). ``system`` is accepted for symmetry with the other plots."""
    del system
    if names is not None:
        return _chosen_columns(result, [names] if isinstance(names, str) else list(names), title, ax)
    shown = result.shown if result.shown is not None else result.x
    state_names = list(result.shown_names or result.x_names) + list(result.z_names)
    data = np.column_stack([shown, result.z]) if result.z.size else shown
    n = len(state_names)
    outputs = [k for k, name in enumerate(result.y_names) if not _POWER.fullmatch(name)]
    powers = [k for k, name in enumerate(result.y_names) if _POWER.fullmatch(name)]
    grouped = n > max_panels
    out_grouped = len(outputs) > max_panels // 2
    extra = []
    if outputs:
        extra += ["outputs"] if out_grouped else [f"output{k}" for k in outputs]
    if powers:
        extra.append("powers")
    if result.energy is not None:
        extra.append("energy")
    if getattr(result, "u", None) is not None and result.u.size:
        extra.append("inputs")
    if ax is not None:
        return _chosen_columns(result, [*(result.shown_names or result.x_names), *result.z_names, *result.y_names],
                               title, ax)
    rows = (2 if grouped else n) + len(extra)
    fig, axes = _axes(None, rows)
    if not grouped:
        for k in range(n):
            axes[k].plot(result.t, data[:, k], lw=1.2)
            axes[k].set_ylabel(_label(result, state_names[k]), rotation=0, ha="right", va="center")
    else:
        half = shown.shape[1] // 2
        for a, (lo, hi) in zip(axes[:2], ((0, half), (half, n))):
            a.plot(result.t, data[:, lo:hi], lw=0.8)
            a.set_ylabel(f"{state_names[lo]} … {state_names[hi - 1]}\n({hi - lo} columns)")
    k = 2 if grouped else n
    for what in extra:
        a = axes[k]
        k += 1
        if what.startswith("output") and what != "outputs":
            j = int(what[len("output"):])
            a.plot(result.t, result.y[:, j], lw=1.2, color="C2")
            a.set_ylabel(_label(result, result.y_names[j]), rotation=0, ha="right", va="center")
        elif what == "outputs":
            _several(a, result, outputs, "outputs")
        elif what == "powers":
            _several(a, result, powers, "port power")
        elif what == "energy":
            _energy_panel(a, result)
        elif what == "inputs":
            for j, name in enumerate(result.u_names):
                a.plot(result.t, result.u[:, j], lw=1.1, label=_label(result, name))
            a.set_ylabel("inputs", rotation=0, ha="right", va="center")
            a.legend(fontsize=7, loc="best")
    for a in axes:
        a.grid(alpha=0.3)
    axes[-1].set_xlabel(_label(result, "t"))
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


def _several(ax, result, rows, ylabel: str) -> None:
    """Several outputs in one panel, with a legend."""
    for j in rows:
        ax.plot(result.t, result.y[:, j], lw=1.1, label=_label(result, result.y_names[j]))
    ax.set_ylabel(ylabel, rotation=0, ha="right", va="center")
    ax.legend(fontsize=7, loc="best")


def _energy_panel(ax, result) -> None:
    """E(t) − E(0) (never E itself: a drift of 1e-7 on E ≈ 21.8 would read as the offset text "1e−7−2.18e1"), or the
    balance E(t) − E(0) against ∫(supplied − dissipated) dt where power flows; no offset on the axis."""
    E = result.energy
    unit = dict(getattr(result, "units", ()) or ()).get("energy")
    ax.set_ylabel("energy" + (f" [{unit}]" if unit else ""), rotation=0, ha="right", va="center")
    if result.power is not None and np.max(np.abs(result.power)) > 1e-12 * max(np.max(np.abs(E)), 1e-300):
        from .simulate import energy_balance

        integral, residual = energy_balance(result.t, E, result.power, getattr(result, "power_integral", None))
        ax.plot(result.t, E - E[0], lw=1.2, label="E(t) − E(0)")
        ax.plot(result.t, integral, "--", lw=1.0, label="∫(supplied − dissipated) dt")
        ax.set_title(f"energy balance, E(0) = {E[0]:.10g}: residual max {np.max(np.abs(residual)):.2e}", fontsize=8)
    else:
        ax.plot(result.t, E - E[0], lw=1.2, color="C3", label="E(t) − E(0)")
        ax.set_title(f"energy drift E(t) − E(0), E(0) = {E[0]:.10g}: max {np.max(np.abs(E - E[0])):.2e}", fontsize=8)
    ax.ticklabel_format(axis="y", useOffset=False)
    ax.legend(fontsize=7, loc="best")


def _chosen_columns(result, names: list[str], title: str, ax):
    """``names`` against time: one panel each, or all in ``ax`` (``energy`` is plotted as E(t) − E(0))."""
    cols = _columns(result)
    series = []
    for name in names:
        v = _column(result, name, cols)
        series.append((name, v - v[0] if name == "energy" else v,
                       "E(t) − E(0)" if name == "energy" else _label(result, name)))
    if ax is not None:
        for _name, v, label in series:
            ax.plot(result.t, v, lw=1.2, label=label)
        ax.set_xlabel(_label(result, "t"))
        if len(series) == 1:
            ax.set_ylabel(series[0][2])
        ax.legend(fontsize=7, loc="best")
        ax.grid(alpha=0.3)
        if title:
            ax.set_title(title)
        return ax.figure
    fig, axes = _axes(None, len(series))
    for a, (name, v, label) in zip(axes, series):
        a.plot(result.t, v, lw=1.2)
        a.set_ylabel(label, rotation=0, ha="right", va="center")
        if name == "energy":
            a.ticklabel_format(axis="y", useOffset=False)
        a.grid(alpha=0.3)
    axes[-1].set_xlabel(_label(result, "t"))
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


def plot_states(result, path, *, title: str = "") -> None:
    """``simulate --plot``: :func:`trajectory_figure` written to ``path`` (atomically)."""
    save_figure(trajectory_figure(result, title=title), path)


# ---------------------------------------------------------------- planes
def path_figure(result, system=None, x: str | None = None, y: str | None = None, *, ax=None, title: str = ""):
    """A planar path: column ``y`` against column ``x`` (start ○, end ●, equal scales); without them the paths of
    the model's drawn points and bodies (``system``: its SymbolicSystem, or a loaded model), or the columns
    ``x`` and ``y`` where the run has both."""
    if (x is None) != (y is None):
        raise PdslError.at("BadOption", "a path plot takes both x and y (two column names), or neither")
    fig, (a,) = _axes(ax, 1, (5.5, 5.5))
    if x is not None:
        _one_path(a, result.t, _column(result, x), _column(result, y), f"{y}({x})")
        a.set_xlabel(_label(result, x))
        a.set_ylabel(_label(result, y))
    else:
        cols = _columns(result)
        sys_ = getattr(system, "system", system)
        from .drawing import has_picture

        if sys_ is not None and has_picture(sys_):
            from .drawing import scene_of_run

            scene = scene_of_run(result, sys_)
            for label, _kind, P in scene.marks:
                _one_path(a, scene.t, P[:, 0], P[:, 1], label)
            a.set_xlabel(scene.axes[0])
            a.set_ylabel(scene.axes[1])
        elif "x" in cols and "y" in cols:
            _one_path(a, result.t, cols["x"], cols["y"], "y(x)")
            a.set_xlabel(_label(result, "x"))
            a.set_ylabel(_label(result, "y"))
        else:
            raise PdslError.at("BadOption", "which path? give x and y (two column names); this run has no columns "
                               "`x`, `y` and no picture to trace", hint="columns: " + ", ".join(cols))
        if len(a.get_lines()) > 2:
            a.legend(fontsize=7, loc="best")
    a.set_aspect("equal", adjustable="datalim")
    a.grid(alpha=0.3)
    if title and ax is None:
        a.set_title(title)
    if ax is None:
        fig.tight_layout()
    return fig


def _one_path(ax, t, xs, ys, label: str) -> None:
    line, = ax.plot(xs, ys, lw=1.2, label=label)
    ax.plot([xs[0]], [ys[0]], "o", mfc="none", color=line.get_color(), ms=6)
    ax.plot([xs[-1]], [ys[-1]], "o", color=line.get_color(), ms=5)


def phase_pairs(result, system=None) -> list[tuple[str, str]]:
    """The (coordinate, rate) pairs of a run, read off the column names: ``q`` with ``der(q)``, ``b.x`` with
    ``b.vx``; a Hamiltonian model's coordinates with their momenta (declared in the same order)."""
    names = list(result.shown_names or result.x_names)
    have = set(names)
    pairs = [(q, f"der({q})") for q in names if f"der({q})" in have]
    for q in names:
        m = re.fullmatch(r"(.+)\.([xyz])", q)
        if m and f"{m.group(1)}.v{m.group(2)}" in have:
            pairs.append((q, f"{m.group(1)}.v{m.group(2)}"))
    sys_ = getattr(system, "system", system)
    if not pairs and sys_ is not None and getattr(sys_, "formalism", "") == "hamiltonian" and len(names) % 2 == 0:
        half = len(names) // 2
        pairs = list(zip(names[:half], names[half:]))
    return pairs


def phase_figure(result, system=None, pairs=None, *, ax=None, title: str = ""):
    """Phase portraits: for each (coordinate, rate) pair its trajectory in the plane (start ○, end ●). ``pairs``:
    one pair ``("theta", "der(theta)")`` or a list of them; default :func:`phase_pairs`. With ``ax`` all in it."""
    if pairs is None:
        pairs = phase_pairs(result, system)
        if not pairs:
            raise PdslError.at("BadOption", "no (coordinate, rate) pairs found in this run's columns",
                               hint="give pairs=[(\"q\", \"v\")] with two column names each")
    elif len(pairs) == 2 and all(isinstance(p, str) for p in pairs):
        pairs = [tuple(pairs)]
    pairs = [tuple(p) for p in pairs][:_MAX_PANELS]
    if ax is not None:
        fig, axes = ax.figure, [ax] * len(pairs)
    else:
        cols_n = min(len(pairs), 3)
        rows_n = -(-len(pairs) // cols_n)
        fig = new_figure(figsize=(3.6 * cols_n, 3.4 * rows_n))
        axes = list(fig.subplots(rows_n, cols_n, squeeze=False).ravel())
        for extra in axes[len(pairs):]:
            extra.set_visible(False)
    for a, (q, v) in zip(axes, pairs):
        _one_path(a, result.t, _column(result, q), _column(result, v), f"{v}({q})")
        a.set_xlabel(_label(result, q))
        a.set_ylabel(_label(result, v))
        a.grid(alpha=0.3)
    if ax is not None:
        if len(pairs) > 1:
            ax.legend(fontsize=7, loc="best")
        return fig
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


# ---------------------------------------------------------------- the model's picture
_STYLES = {"link": "-", "joint": "-", "hinge": "-", "slider": "-", "spring": ":", "damper": "--", "line": "-",
           "axis": "-"}


def _draw(ax, scene, i, alpha=1.0) -> None:
    """The picture at sample ``i``: lines (connectors, rigid bodies' axes, drawn lines), then marks."""
    for kind, pts in scene.lines:
        xy = np.array([P[i] for P in pts])
        ax.plot(xy[:, 0], xy[:, 1], _STYLES.get(kind, "-"), color="0.65" if kind == "axis" else "0.3",
                lw=1.0 if kind == "axis" else 1.6, alpha=alpha)
    for _label_, kind, P in scene.marks:
        ax.plot([P[i, 0]], [P[i, 1]], "o", ms=9 if kind == "body" else 7, color="C0" if kind == "body" else "C1",
                alpha=alpha)


def _model_of(obj):
    """The symbolic system (IR) to draw: given directly, or the ``system`` of a compiled model or API model."""
    return getattr(obj, "system", obj)


def _frame_axes(ax, scene, lim) -> None:
    ax.set_xlim(*lim[0])
    ax.set_ylim(*lim[1])
    ax.set_aspect("equal")
    ax.set_xlabel(scene.axes[0])
    ax.set_ylabel(scene.axes[1])
    ax.grid(alpha=0.3)


def mechanism_figure(result, model, n: int = 4, *, ax=None):
    """The model's picture (bodies and connectors, ``draw`` statements) at ``n`` evenly spaced instants: one panel
    each, or, with ``ax``, overlaid in that Axes (earlier instants fainter). ``model``: its SymbolicSystem, a
    compiled model or ``pdsl.load(...)``."""
    from .drawing import require_picture, scene_of_run

    model = _model_of(model)
    require_picture(model, "snapshots")
    scene = scene_of_run(result, model)
    idx = np.linspace(0, len(result.t) - 1, max(n, 1)).round().astype(int)
    lim = scene.limits()
    if ax is not None:
        for k, i in enumerate(idx):
            _draw(ax, scene, i, alpha=0.25 + 0.75 * (k + 1) / len(idx))
        _frame_axes(ax, scene, lim)
        ax.set_title(f"t = {result.t[idx[0]]:.3g} … {result.t[idx[-1]]:.3g}", fontsize=9)
        return ax.figure
    fig = new_figure(figsize=(3.2 * len(idx), 3.4))
    axes = fig.subplots(1, len(idx), squeeze=False)[0]
    for a, i in zip(axes, idx):
        _draw(a, scene, i)
        a.set_title(f"t = {result.t[i]:.3g}", fontsize=9)
        _frame_axes(a, scene, lim)
    fig.tight_layout()
    return fig


def check_animation_path(path) -> None:
    """``--animate OUT``: a ``.gif`` or ``.html`` file; said before anything is integrated."""
    suffix = str(path).lower().rsplit(".", 1)[-1] if "." in str(path) else ""
    if f".{suffix}" not in ANIMATION_FORMATS:
        raise PdslError.at("BadOption", f"--animate {path}: an animation is written as .gif or .html",
                           hint="e.g. --animate out.gif (Pillow) or --animate out.html (a self-contained page)")


def animate_bodies(result, model, path=None, *, frames: int = 60, fps: int = 20, trail: bool = True):
    """An animation of the model's picture (``frames`` evenly spaced samples); written to ``path`` (atomically)
    when given: a GIF (through Pillow) for ``.gif``, a self-contained HTML page (frames embedded, with play
    controls) for ``.html``. ``trail``: the path of every drawn point and body so far, faint. Returns the
    ``matplotlib.animation.FuncAnimation`` (it shows itself in Jupyter as that HTML player)."""
    from matplotlib.animation import FuncAnimation, PillowWriter

    from .drawing import require_picture, scene_of_run

    if path is not None:
        check_animation_path(path)
    model = _model_of(model)
    require_picture(model, "--animate")
    scene = scene_of_run(result, model)
    idx = np.linspace(0, len(result.t) - 1, max(2, min(frames, len(result.t)))).round().astype(int)
    fig = new_figure(figsize=(4.5, 4.5))
    ax = fig.subplots()
    lim = scene.limits()

    def frame(k):
        ax.clear()
        if trail:
            for _lbl, _kind, P in scene.marks:
                ax.plot(P[: idx[k] + 1, 0], P[: idx[k] + 1, 1], "-", color="C1", lw=0.7, alpha=0.35)
        _draw(ax, scene, idx[k])
        _frame_axes(ax, scene, lim)
        ax.set_title(f"t = {result.t[idx[k]]:.3g}")
        return []

    class Animation(FuncAnimation):
        def _repr_html_(self):  # Jupyter: the player, whatever rcParams["animation.html"] says
            return self.to_jshtml(fps=fps)

    anim = Animation(fig, frame, frames=len(idx), interval=1000 / fps, blit=False)
    if path is not None:
        if str(path).lower().endswith(".html"):
            html = anim.to_jshtml(fps=fps, default_mode="loop")
            with atomic_path(path) as tmp:
                with open(tmp, "w", encoding="utf-8") as fh:
                    fh.write(f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{_html_text(path)}</title>"
                             f"</head><body>\n{html}\n</body></html>\n")
        else:
            with atomic_path(path) as tmp:
                anim.save(str(tmp), writer=PillowWriter(fps=fps))
    return anim


def _html_text(path) -> str:
    import html
    from pathlib import Path

    return html.escape(Path(str(path)).stem)
