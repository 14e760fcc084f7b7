"""Plots of simulated trajectories: matplotlib Figures, never a backend switch.

Every function builds a :class:`matplotlib.figure.Figure` directly (no ``pyplot``, no
``matplotlib.use``), so plotting from a notebook or a script leaves the user's backend as it was;
the figures render in Jupyter (``_repr_png_``) and are saved atomically by :func:`save_figure`.

* :func:`trajectory_figure` — the shown states against time (one panel each, or grouped for large
  models), then energy (or the energy balance for driven/damped models), power and input panels
  where the run has them;
* :func:`mechanism_figure` — for models with bodies: the mechanism (bodies, links, springs) drawn at
  a few instants;
* :func:`animate_bodies` — the same as an animation (a GIF through Pillow).
"""

from __future__ import annotations

import io

import numpy as np

from ..data.csvio import atomic_path

__all__ = ["trajectory_figure", "mechanism_figure", "animate_bodies", "plot_states", "save_figure", "new_figure"]

_MAX_PANELS = 8


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


def trajectory_figure(result, *, title: str = "", system=None, max_panels: int = _MAX_PANELS):
    """The run ``result`` (:class:`~pdsl.sim.simulate.SimulationResult`) against time, as a Figure.

    Panels: every shown state (grouped into positions and velocities above ``max_panels``),
    algebraic variables, then energy — or, when power flows in or out, the balance residual
    E(t) − E(0) − ∫P dt — and the exogenous inputs, where the run has them."""
    shown = result.shown if result.shown is not None else result.x
    names = list(result.shown_names or result.x_names) + list(result.z_names)
    data = np.column_stack([shown, result.z]) if result.z.size else shown
    n = len(names)
    extra = []
    if result.energy is not None:
        extra.append("energy")
    if getattr(result, "u", None) is not None and result.u.size:
        extra.append("inputs")
    grouped = n > max_panels
    rows = (2 if grouped else n) + len(extra)
    fig = new_figure(figsize=(8, 1.4 + 1.45 * rows))
    axes = fig.subplots(rows, 1, sharex=True, squeeze=False)[:, 0]
    if not grouped:
        for k in range(n):
            axes[k].plot(result.t, data[:, k], lw=1.2)
            axes[k].set_ylabel(_label(result, names[k]), rotation=0, ha="right", va="center")
    else:
        half = shown.shape[1] // 2
        for ax, (a, b) in zip(axes[:2], ((0, half), (half, n))):
            ax.plot(result.t, data[:, a:b], lw=0.8)
            ax.set_ylabel(f"{names[a]} … {names[b - 1]}\n({b - a} columns)")
    k = 2 if grouped else n
    if "energy" in extra:
        ax = axes[k]
        k += 1
        E = result.energy
        if result.power is not None and np.max(np.abs(result.power)) > 1e-12 * max(np.max(np.abs(E)), 1e-300):
            from .simulate import energy_balance

            integral, residual = energy_balance(result.t, E, result.power)
            ax.plot(result.t, E - E[0], lw=1.2, label="E(t) − E(0)")
            ax.plot(result.t, integral, "--", lw=1.0, label="∫(supplied − dissipated) dt")
            ax.set_ylabel("energy", rotation=0, ha="right", va="center")
            ax.legend(fontsize=7, loc="best")
            ax.set_title(f"energy balance residual: max {np.max(np.abs(residual)):.2e}", fontsize=8)
        else:
            ax.plot(result.t, E, lw=1.2, color="C3")
            ax.set_ylabel("energy", rotation=0, ha="right", va="center")
            ax.set_title(f"max |E(t) − E(0)| = {np.max(np.abs(E - E[0])):.2e}", fontsize=8)
    if "inputs" in extra:
        ax = axes[k]
        for j, name in enumerate(result.u_names):
            ax.plot(result.t, result.u[:, j], lw=1.1, label=_label(result, name))
        ax.set_ylabel("inputs", rotation=0, ha="right", va="center")
        ax.legend(fontsize=7, loc="best")
    for ax in axes:
        ax.grid(alpha=0.3)
    axes[-1].set_xlabel(_label(result, "t"))
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


def _label(result, name: str) -> str:
    """An axis label: ``theta [rad]`` where the model gives units (the CSV header's spelling), else the name."""
    from ..data.csvio import header_with_unit

    units = dict(getattr(result, "units", ()) or ())
    if units:
        units.setdefault("t", "s")
    return header_with_unit(name, units.get(name))


def plot_states(result, path, *, title: str = "") -> None:
    """``simulate --plot``: :func:`trajectory_figure` written to ``path`` (atomically)."""
    save_figure(trajectory_figure(result, title=title), path)


# ---------------------------------------------------------------- mechanisms
def _geometry(result, model):
    """Functions of a sample index giving body centres and connector segments (2-D/3-D projected to x, y), read
    from the IR (``SymbolicSystem.bodies``, ``.segments``)."""
    import sympy as sp

    cols = list(result.shown_names or result.x_names)
    shown = result.shown if result.shown is not None else result.x
    index = {name: k for k, name in enumerate(cols)}

    def evaluator(expr_matrix):
        expr = sp.Matrix(expr_matrix)
        syms = sorted(expr.free_symbols, key=lambda s: s.name)
        if any(s.name not in index for s in syms):
            return None
        fn = sp.lambdify(syms, list(expr[:2]), "numpy")
        ks = [index[s.name] for s in syms]
        return lambda i: np.asarray(fn(*[shown[i, k] for k in ks]), dtype=float)

    bodies = []
    for b in model.bodies:
        f = evaluator(sp.Matrix(b.positions[0])) if b.positions else None
        if f is not None:
            bodies.append((b.name, f))
    segments = []
    for c in model.segments:
        fa, fb = evaluator(c.a), evaluator(c.b)
        if fa is not None and fb is not None:
            segments.append((c.kind, fa, fb))
    return bodies, segments


def _draw(ax, bodies, segments, i, alpha=1.0):
    for kind, fa, fb in segments:
        a, b = fa(i), fb(i)
        style = {"link": "-", "joint": "-", "hinge": "-", "spring": ":", "damper": "--"}.get(kind, "-")
        ax.plot([a[0], b[0]], [a[1], b[1]], style, color="0.3", lw=1.6, alpha=alpha)
    for _, f in bodies:
        p = f(i)
        ax.plot([p[0]], [p[1]], "o", ms=9, color="C0", alpha=alpha)


def _model_of(obj):
    """The symbolic system (IR) to draw: given directly, or the ``system`` of a compiled model or API model."""
    return getattr(obj, "system", obj)


def mechanism_figure(result, model, n: int = 4):
    """The mechanism of a body model (its ``SymbolicSystem``, or ``pdsl.load(...)``) drawn at ``n`` evenly spaced
    instants."""
    from ..diagnostics import PdslError

    model = _model_of(model)
    if not getattr(model, "bodies", None):
        raise PdslError.at("BadOption", "this model has no bodies to draw", hint="mechanism pictures are for Cartesian body models")
    bodies, segments = _geometry(result, model)
    idx = np.linspace(0, len(result.t) - 1, max(n, 1)).round().astype(int)
    fig = new_figure(figsize=(3.2 * len(idx), 3.4))
    axes = fig.subplots(1, len(idx), squeeze=False)[0]
    lim = _limits(bodies, segments, len(result.t))
    for ax, i in zip(axes, idx):
        _draw(ax, bodies, segments, i)
        ax.set_title(f"t = {result.t[i]:.3g}", fontsize=9)
        ax.set_aspect("equal")
        ax.set_xlim(*lim[0])
        ax.set_ylim(*lim[1])
        ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def _limits(bodies, segments, n):
    pts = [f(i) for i in range(0, n, max(1, n // 50)) for _, f in bodies]
    pts += [g(i) for i in range(0, n, max(1, n // 50)) for _, fa, fb in segments for g in (fa, fb)]
    P = np.array(pts) if pts else np.zeros((1, 2))
    lo, hi = P.min(axis=0), P.max(axis=0)
    pad = 0.1 * max(float(np.max(hi - lo)), 1e-3)
    return (lo[0] - pad, hi[0] + pad), (lo[1] - pad, hi[1] + pad)


def animate_bodies(result, model, path=None, *, frames: int = 60, fps: int = 20):
    """An animation of the mechanism (``frames`` evenly spaced samples); written as a GIF to ``path``
    (atomically, through Pillow) when given. Returns the ``matplotlib.animation.FuncAnimation``."""
    from matplotlib.animation import FuncAnimation, PillowWriter

    from ..diagnostics import PdslError

    model = _model_of(model)
    if not getattr(model, "bodies", None):
        raise PdslError.at("BadOption", "--animate: this model has no bodies to draw",
                           hint="animations are for Cartesian body models")
    bodies, segments = _geometry(result, model)
    idx = np.linspace(0, len(result.t) - 1, max(2, min(frames, len(result.t)))).round().astype(int)
    fig = new_figure(figsize=(4.5, 4.5))
    ax = fig.subplots()
    lim = _limits(bodies, segments, len(result.t))

    def frame(k):
        ax.clear()
        _draw(ax, bodies, segments, idx[k])
        ax.set_xlim(*lim[0])
        ax.set_ylim(*lim[1])
        ax.set_aspect("equal")
        ax.grid(alpha=0.3)
        ax.set_title(f"t = {result.t[idx[k]]:.3g}")
        return []

    anim = FuncAnimation(fig, frame, frames=len(idx), interval=1000 / fps, blit=False)
    if path is not None:
        with atomic_path(path) as tmp:
            anim.save(str(tmp), writer=PillowWriter(fps=fps))
    return anim
