"""A picture of a model at its (projected) initial state: Cartesian bodies and their connectors, and the model's
``draw point`` / ``draw line`` statements (LANGUAGE.md §13)."""

from __future__ import annotations

import numpy as np

from ..data.csvio import atomic_path
from .. import symbols as S
from ..diagnostics import PdslError
from .initial import Projector

_COLORS = {"link": "tab:blue", "joint": "tab:red", "hinge": "tab:purple", "slider": "tab:brown", "spring": "tab:green",
           "damper": "tab:orange"}


def plot_structure(num, path) -> None:
    """Draw every body (centre, axis points) and connector of the system, and its drawn points and lines, at the
    initial state (from the IR: ``SymbolicSystem.bodies``, ``.segments``, ``.drawn_points``, ``.drawn_lines``)."""
    from .drawing import require_picture

    model = num.system
    require_picture(model, "--plot-structure")
    from matplotlib.lines import Line2D

    from .plot import new_figure

    x = num.x_start
    if num.invariants.size1_out(0):
        x = Projector(num).project(x, num.p_default).x
    values = {s.symbol: float(v) for s, v in zip(num.system.states, x)}
    values.update({q.symbol: q.default for q in num.system.params})
    values.update({S.TIME: 0.0, **{u.symbol: 0.0 for u in num.system.exogenous_inputs}})
    values.update({a.symbol: float(v) for a, v in zip(num.system.algebraics, getattr(num, "z_start", ()))})

    def pos(vec) -> np.ndarray:
        return np.array([float(S.as_expr(c).xreplace(values)) for c in vec])

    drawn = [len(p.position) for p in model.drawn_points] + [len(ln.points[0][1]) for ln in model.drawn_lines]
    d = model.space if model.bodies else max(drawn)
    fig = new_figure(figsize=(6, 6))
    ax = fig.add_subplot(projection="3d" if d == 3 else None)

    def draw(points, **kw):
        pts = np.array(points)
        if d == 1:
            pts = np.column_stack([pts, np.zeros(len(pts))])
        ax.plot(*pts.T, **kw)

    for b in model.bodies:
        nodes = [pos(n) for n in b.positions]
        draw([nodes[0]], marker="o", ms=8 if len(nodes) == 1 else 6, color="black", ls="none")
        for k, node in enumerate(nodes[1:], start=1):
            draw([nodes[0], node], color="gray", lw=1.5)
        label = np.array(nodes[0]) if d > 1 else np.array([nodes[0][0], 0.0])
        ax.text(*label, f" {b.name}", fontsize=9)
    for c in model.segments:
        draw([pos(c.a), pos(c.b)], color=_COLORS.get(c.kind, "gray"), lw=2, ls="--" if c.kind == "spring" else "-",
             marker="x" if c.fixed else None)
    _drawn(ax, model, pos, d)
    ax.set_title(f"{model.name}: structure at the initial state")
    if d == 2:
        ax.set_aspect("equal", adjustable="datalim")
        ax.grid(alpha=0.3)
    handles = [Line2D([], [], color=col, label=kind) for kind, col in _COLORS.items()
               if any(c.kind == kind for c in model.segments)]
    if handles:
        ax.legend(handles=handles, loc="best")
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=100)


def _drawn(ax, system, pos, d: int) -> None:
    """The drawn points (labelled) and lines at the start (inputs at zero), in the Axes' dimension."""
    from .drawing import _substitute_laws

    def at(vec, span) -> np.ndarray:
        try:
            p = pos([_substitute_laws(system, S.as_expr(c)) for c in vec])
        except TypeError:  # a symbol without a value at the start
            raise PdslError.at("BadDrawing", "this cannot be drawn: it uses a quantity that the lowered model does not "
                               "compute as a state, parameter or input", span,
                               "draw positions of the states (coordinates, body points), parameters, inputs and t") from None
        return np.concatenate([p, np.zeros(max(0, d - len(p)))])[: max(d, 2)]

    for ln in system.drawn_lines:
        ax.plot(*np.array([at(p, ln.span) for _, p in ln.points]).T, color="0.3", lw=1.8)
    for p in system.drawn_points:
        xyz = at(p.position, p.span)
        ax.plot(*xyz[:, None], marker="o", ms=7, color="C1", ls="none")
        ax.text(*xyz, f" {p.name}", fontsize=9)
