"""A picture of a Cartesian model: bodies and their connectors at the (projected) initial state."""

from __future__ import annotations

import numpy as np

from ..data.csvio import atomic_path
from .. import symbols as S
from ..diagnostics import PdslError
from .initial import Projector

_COLORS = {"link": "tab:blue", "joint": "tab:red", "hinge": "tab:purple", "spring": "tab:green", "damper": "tab:orange"}


def plot_structure(num, path) -> None:
    """Draw every body (centre, axis points) and connector of the system at its initial state (from the IR:
    ``SymbolicSystem.bodies`` and ``.segments``)."""
    model = num.system
    if not model.bodies:
        raise PdslError.at("BadOption", "--plot-structure draws Cartesian bodies; this model has none", model.span)
    from matplotlib.lines import Line2D

    from .plot import new_figure

    x = num.x_start
    if num.invariants.size1_out(0):
        x = Projector(num).project(x, num.p_default).x
    values = {s.symbol: float(v) for s, v in zip(num.system.states, x)}
    values.update({q.symbol: q.default for q in num.system.params})

    def pos(vec) -> np.ndarray:
        return np.array([float(S.as_expr(c).xreplace(values)) for c in vec])

    d = model.space
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
        draw([pos(c.a), pos(c.b)], color=_COLORS[c.kind], lw=2, ls="--" if c.kind == "spring" else "-",
             marker="x" if c.fixed else None)
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
