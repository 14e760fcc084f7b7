"""What a picture of a model draws, evaluated along a trajectory: the :class:`Scene`.

A model draws itself from its IR (:class:`~pdsl.lower.ir.SymbolicSystem`):

* Cartesian bodies (their centres; a rigid body's principal-axis points as thin lines from its centre) and the
  connectors between them (links, joints, springs …: ``SymbolicSystem.segments``);
* the ``draw point`` / ``draw line`` statements of the model (LANGUAGE.md §13: ``drawn_points``, ``drawn_lines``),
  for any formalism — generalized coordinates, port-Hamiltonian networks, plain equations.

Every position is a sympy expression of the states, algebraic variables, parameters, exogenous inputs and t (inputs
with a feedback law are replaced by their law); all of them are translated to one CasADi function and evaluated
on every sample of a run at once. Pictures are planar: a 3-D picture is projected onto the two axes along which
it moves the most (``Scene.axes``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import sympy as sp

from .. import symbols as S
from ..diagnostics import PdslError, Span

__all__ = ["Scene", "has_picture", "require_picture", "scene_of_run", "scene_at"]

_NOTHING_HINT = ("add `draw point NAME = [x, y]` and `draw line A, B` statements to the model (docs/language.md, "
                 "\"Drawing a model\"); Cartesian bodies, links and joints draw themselves")


@dataclass(frozen=True)
class Scene:
    """The picture at every sample: ``marks`` (label, kind, (n, 2) positions) — bodies and drawn points — and
    ``lines`` (kind, ((n, 2) positions of each point …)) — connectors, rigid bodies' axes and drawn lines —
    projected onto the picture's two ``axes`` (names such as ``("x", "y")``)."""

    t: np.ndarray
    marks: tuple[tuple[str, str, np.ndarray], ...]
    lines: tuple[tuple[str, tuple[np.ndarray, ...]], ...]
    axes: tuple[str, str]

    def limits(self, pad: float = 0.1) -> tuple[tuple[float, float], tuple[float, float]]:
        """(xlim, ylim) enclosing the whole run, with a margin of ``pad`` × the larger span."""
        parts = [P for _, _, P in self.marks] + [P for _, pts in self.lines for P in pts]
        allp = np.concatenate(parts, axis=0) if parts else np.zeros((1, 2))
        allp = allp[np.all(np.isfinite(allp), axis=1)] if np.isfinite(allp).any() else np.zeros((1, 2))
        lo, hi = allp.min(axis=0), allp.max(axis=0)
        margin = pad * max(float(np.max(hi - lo)), 1e-3)
        return (lo[0] - margin, hi[0] + margin), (lo[1] - margin, hi[1] + margin)


def has_picture(system) -> bool:
    """Whether ``system`` (a SymbolicSystem) has anything to draw: bodies, or ``draw`` statements."""
    return bool(getattr(system, "bodies", ()) or getattr(system, "drawn_points", ())
                or getattr(system, "drawn_lines", ()))


def require_picture(system, what: str) -> None:
    """Refuse, located at the model, a picture (``what``: "--animate", "snapshots" …) of a model with nothing to
    draw — before any integration starts."""
    if not has_picture(system):
        raise PdslError.at("NothingToDraw", f"{what}: model `{system.name}` has nothing to draw (no bodies and no "
                           "`draw` statements)", system.span, _NOTHING_HINT)


# ---------------------------------------------------------------- what to evaluate
@dataclass(frozen=True)
class _Item:
    kind: str  # body | point (marks); link, spring, …, axis, line (lines)
    label: str
    exprs: tuple[tuple[sp.Expr, ...], ...]  # one position per point (a mark has one)
    span: Span | None  # a `draw` statement's span (None: the model draws it itself)
    mark: bool


def _items(system) -> list[_Item]:
    items: list[_Item] = []
    for b in getattr(system, "bodies", ()):
        if not b.positions:
            continue
        centre = tuple(b.positions[0])
        items.append(_Item("body", b.name, (centre,), None, True))
        for node in b.positions[1:]:  # a rigid body's principal-axis points: its orientation
            items.append(_Item("axis", b.name, (centre, tuple(node)), None, False))
    for c in getattr(system, "segments", ()):
        items.append(_Item(c.kind, c.kind, (tuple(c.a), tuple(c.b)), None, False))
    for p in getattr(system, "drawn_points", ()):
        items.append(_Item("point", p.name, (tuple(p.position),), p.span, True))
    for ln in getattr(system, "drawn_lines", ()):
        items.append(_Item("line", " – ".join(lbl for lbl, _ in ln.points), tuple(tuple(p) for _, p in ln.points),
                           ln.span, False))
    return items


def _substitute_laws(system, expr: sp.Expr) -> sp.Expr:
    """Inputs with a feedback law (``input F = -K*x``) replaced by the law (laws may use other laws)."""
    laws = {u.symbol: u.law for u in system.inputs if u.law is not None}
    for _ in range(len(laws) + 1):
        if not (expr.free_symbols & laws.keys()):
            break
        expr = expr.xreplace(laws)
    return expr


# ---------------------------------------------------------------- evaluation
def _evaluate(system, items: list[_Item], t, X, Z, p, U) -> list[np.ndarray]:
    """Every coordinate of every item at every sample: one (n_coordinates, n) array per item."""
    import casadi as ca

    from ..backend.sympy_to_casadi import Converter

    n = len(t)
    xs, zs = [s.symbol for s in system.states], [a.symbol for a in system.algebraics]
    ps, us = [q.symbol for q in system.params], [u.symbol for u in system.exogenous_inputs]
    tt, x, z = ca.SX.sym("t"), ca.SX.sym("x", len(xs)), ca.SX.sym("z", len(zs))
    pp, u = ca.SX.sym("p", len(ps)), ca.SX.sym("u", len(us))
    table = {S.TIME: tt, **{s: x[k] for k, s in enumerate(xs)}, **{s: z[k] for k, s in enumerate(zs)},
             **{s: pp[k] for k, s in enumerate(ps)}, **{s: u[k] for k, s in enumerate(us)}}
    conv = Converter(table)
    rows, sizes, kept = [], [], []
    for item in items:
        exprs = [_substitute_laws(system, S.as_expr(e)) for pt in item.exprs for e in pt]
        missing = set().union(*(e.free_symbols for e in exprs)) - table.keys()
        functions = set().union(*(e.atoms(sp.core.function.AppliedUndef) for e in exprs))
        if missing or functions:
            if item.span is None:  # a connector of the model itself that the picture cannot place: left out
                kept.append(False)
                continue
            what = ", ".join(sorted(f"`{s}`" for s in missing)) or "a neural network"
            raise PdslError.at("BadDrawing", f"`{item.label}` cannot be drawn: it uses {what}, which the lowered "
                               "model does not compute as a state, parameter or input", item.span,
                               "draw positions of the states (coordinates, body points), parameters, inputs and t")
        kept.append(True)
        rows += [conv(e) for e in exprs]
        sizes.append(len(exprs))
    if not rows:
        return [None if not k else np.zeros((0, n)) for k in kept]
    f = ca.Function("scene", [tt, x, z, pp, u], [ca.vertcat(*rows)])
    fm = f.map(n)
    P = np.repeat(np.asarray(p, dtype=float).reshape(-1, 1), n, axis=1) if len(ps) else np.zeros((0, n))
    values = np.asarray(fm(np.asarray(t, dtype=float)[None, :], np.asarray(X, dtype=float).T,
                           np.asarray(Z, dtype=float).T.reshape(len(zs), n), P,
                           np.asarray(U, dtype=float).T.reshape(len(us), n)))
    out, k, j = [], 0, 0
    for keep in kept:
        if not keep:
            out.append(None)
            continue
        out.append(values[k: k + sizes[j]])
        k += sizes[j]
        j += 1
    return out


def _planar(values: list, items: list[_Item]) -> tuple[list, tuple[str, str]]:
    """Each item's points as (n, 2) arrays on the picture's two axes: x, y in 2-D (1-D: y = 0); in 3-D the two
    axes along which the picture spans the most."""
    dims = {len(it.exprs[0]) for it, v in zip(items, values) if v is not None}
    d = max(dims) if dims else 2
    names = "xyz"
    if d == 3:
        stacked = np.concatenate([v.reshape(-1, 3, v.shape[1]).transpose(0, 2, 1).reshape(-1, 3)
                                  for it, v in zip(items, values) if v is not None and len(it.exprs[0]) == 3])
        spread = np.nanmax(stacked, axis=0) - np.nanmin(stacked, axis=0)
        axes = tuple(sorted(np.argsort(-spread, kind="stable")[:2]))
    else:
        axes = (0, 1)
    out = []
    for it, v in zip(items, values):
        if v is None:
            out.append(None)
            continue
        k = len(it.exprs[0])
        pts = []
        for j in range(len(it.exprs)):
            block = v[j * k:(j + 1) * k].T  # (n, k)
            if k == 1:
                block = np.column_stack([block, np.zeros(len(block))])
            pts.append(block[:, list(axes)] if k == 3 else block[:, :2])
        out.append(pts)
    return out, (names[axes[0]], names[axes[1]])


def _scene(system, t, X, Z, p, U) -> Scene:
    items = _items(system)
    values = _evaluate(system, items, t, X, Z, p, U)
    planar, axes = _planar(values, items)
    marks, lines = [], []
    for it, pts in zip(items, planar):
        if pts is None:
            continue
        if it.mark:
            marks.append((it.label, it.kind, pts[0]))
        else:
            lines.append((it.kind, tuple(pts)))
    return Scene(t=np.asarray(t, dtype=float), marks=tuple(marks), lines=tuple(lines), axes=axes)


def _run_params(system, result) -> np.ndarray:
    """The physical parameters a run used (``result.info["p"]``), or the model's defaults."""
    n = len(system.params)
    p = result.info.get("p") if getattr(result, "info", None) else None
    if p is not None and len(p) >= n:
        return np.asarray(p, dtype=float)[:n]
    return np.array([q.default for q in system.params], dtype=float)


def scene_of_run(result, system) -> Scene:
    """The picture of ``system`` along the run ``result`` (a :class:`~pdsl.sim.simulate.SimulationResult`)."""
    system = getattr(system, "system", system)
    require_picture(system, "a picture")
    n = len(result.t)
    Z = result.z if result.z is not None and result.z.size else np.zeros((n, len(system.algebraics)))
    nu = len(system.exogenous_inputs)
    U = result.u if getattr(result, "u", None) is not None and result.u.shape[1:] == (nu,) else np.zeros((n, nu))
    return _scene(system, result.t, result.x, Z, _run_params(system, result), U)


def scene_at(system, t: float, x, z, p) -> Scene:
    """The picture at one state (``show --plot-structure``: the start), inputs at zero."""
    nz, nu = len(system.algebraics), len(system.exogenous_inputs)
    z = np.zeros(nz) if z is None or len(z) != nz else z
    return _scene(system, np.array([t]), np.asarray(x, dtype=float)[None, :], np.asarray(z, dtype=float)[None, :],
                  np.asarray(p, dtype=float)[: len(system.params)], np.zeros((1, nu)))
