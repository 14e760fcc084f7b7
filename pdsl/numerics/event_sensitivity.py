"""CVODES forward sensitivities through events and switching surfaces (LANGUAGE.md §11, "Sensitivities and fitting
through events").

The trajectory is integrated phase by phase with CVODES and its forward sensitivities S = dx/dz, z = (x0, p) (start
states count as parameters). A phase is a set of frozen modes of the switching surfaces, or a Filippov sliding on one
of them; within a phase the field is smooth. Its indicators — the events' atoms, the switching functions of the
surfaces it is not sliding on, and while sliding α − 1 and −α (the sliding field's weight leaving [0, 1]) — are
sampled on a sub-grid of the output grid; a sign change is located by Brent's method on CVODES runs from the last
sample, and at the instant τ where the indicator g crosses:

    dτ/dz = −(g_x S⁻ + g_z)/(g_x f⁻ + g_t),   S⁺ = R_x S⁻ + R_z + (R_x f⁻ + R_t − f⁺)·dτ/dz,

with R the event's reset (the identity at a switch, whose field changes from f⁻ to f⁺). Transversality
(g_x f⁻ + g_t ≠ 0) is checked: a grazing crossing is recorded as such and its sensitivity is not trusted
(``EventRecord.grazing``). Crossings closer than the sub-grid spacing (two in one sample interval of the same
indicator) are missed, as by any sampled root finder; ``substeps`` refines the sub-grid.

The events and switches are described as for the fixed-step schemes (:class:`pdsl.numerics.events.StepEvents`,
:class:`~pdsl.numerics.events.StepSwitches`) with q = p.
"""

from __future__ import annotations

from dataclasses import dataclass

import casadi as ca
import numpy as np
from scipy.optimize import brentq

from .events import _ABOVE, _BELOW, StepEvents, StepSwitches, _cond

__all__ = ["EventRecord", "EventTrajectory", "event_sensitivities"]

_ON_SURFACE = 1e-9  # an indicator this close to 0 at a segment's start has just crossed: read a little later
_GRAZING = 1e-8  # |g_x f⁻ + g_t| below this (relative to |g_x||f⁻| + |g_t|): a tangential touch


@dataclass(frozen=True)
class EventRecord:
    t: float
    kind: str  # "event" | "switch" | "sliding" | "left"
    index: int  # the event or the surface
    grazing: bool = False


@dataclass(frozen=True)
class EventTrajectory:
    X: np.ndarray  # (M, nx): the states at t_grid[1:]
    S: np.ndarray  # (M, nx, nx + np): their sensitivities to (x0, p)
    log: tuple[EventRecord, ...]


class _Phases:
    """The field, the indicators and the integrator of each phase kind (frozen modes; sliding on surface j)."""

    def __init__(self, f, events: StepEvents | None, switches: StepSwitches | None, options: dict):
        self.nx = f.sparsity_in(1).numel() if switches is None else switches.f_modes.sparsity_in(1).numel()
        fm = switches.f_modes if switches is not None else None
        self.np = (f if fm is None else fm).sparsity_in(2).numel()
        self.n_sw = 0 if switches is None else fm.sparsity_in(3).numel()
        self.events, self.sw, self.options = events, switches, options
        t, x, p, m = ca.SX.sym("t"), ca.SX.sym("x", self.nx), ca.SX.sym("p", self.np), ca.SX.sym("m", self.n_sw)
        self.syms = (t, x, p, m)
        self.base = fm(t, x, p, m) if fm is not None else f(t, x, p)
        self._cache: dict = {}

    def field_expr(self, slide):
        t, x, p, m = self.syms
        return self.base if slide is None else self.sw.slide[slide](t, x, p, m)

    def alpha_expr(self, j):
        t, x, p, m = self.syms
        kind = self.sw.kinds[j]
        below = ca.vertcat(*[_BELOW[kind] if i == j else m[i] for i in range(self.n_sw)])
        above = ca.vertcat(*[_ABOVE[kind] if i == j else m[i] for i in range(self.n_sw)])
        d_minus, d_plus = self.sw.rate(t, x, p, below)[j], self.sw.rate(t, x, p, above)[j]
        return d_minus / (d_minus - d_plus)

    def get(self, slide):
        """(integrate, indicators, field) Functions of the phase kind; ``indicators(t, x, p, m) -> (g, g_x, g_p, g_t)``
        with the rows: event atoms, then switching functions (those of surfaces with a mode), then α − 1, −α."""
        if slide in self._cache:
            return self._cache[slide]
        t, x, p, m = self.syms
        rhs = self.field_expr(slide)
        t0, T, s = ca.SX.sym("t0"), ca.SX.sym("T"), ca.SX.sym("s")
        P = ca.vertcat(p, m, t0, T)
        dae = {"t": s, "x": x, "p": P, "ode": T * ca.substitute(rhs, t, t0 + s * T)}
        integ = ca.integrator(f"phase_{slide}", "cvodes", dae, 0.0, 1.0, self.options)
        xs, Ps = ca.MX.sym("x", self.nx), ca.MX.sym("P", P.numel())
        xf = integ(x0=xs, p=Ps)["xf"]
        step = ca.Function("segment", [xs, Ps], [xf, ca.jacobian(xf, xs), ca.jacobian(xf, Ps)[:, : self.np]])
        rows = []
        if self.events is not None:
            rows.append(self.events.atoms(t, x, p))
        if self.sw is not None:
            rows.append(self.sw.indicators(t, x, p))
            if slide is not None:
                a = self.alpha_expr(slide)
                rows.append(ca.vertcat(a - 1.0, -a))
        g = ca.vertcat(*rows) if rows else ca.SX(0, 1)
        ind = ca.Function("indicators", [t, x, p, m], [g, ca.jacobian(g, x), ca.jacobian(g, p), ca.jacobian(g, t)])
        field = ca.Function("field", [t, x, p, m], [rhs])
        self._cache[slide] = (step, ind, field)
        return self._cache[slide]


def _mode(kind: str, strict: bool, s: float) -> float:
    if kind == "if":
        return 1.0 if (s < 0 if strict else s <= 0) else 0.0
    return -1.0 if s < 0 else 1.0


def event_sensitivities(f: ca.Function | None, t_grid, x0, p, *, events: StepEvents | None = None,
                        switches: StepSwitches | None = None, rtol: float = 1e-10, atol: float = 1e-12,
                        substeps: int = 8, max_events: int = 10_000) -> EventTrajectory:
    """The states and their forward sensitivities at ``t_grid[1:]`` of f(t, x, p) (or of ``switches.f_modes``)
    from x0 at ``t_grid[0]``, through the events and switching surfaces (module docstring)."""
    ph = _Phases(f, events, switches, {"abstol": atol, "reltol": rtol})
    nx, n_p = ph.nx, ph.np
    grid = np.asarray(t_grid, dtype=float)
    p = np.asarray(p, dtype=float).ravel()
    x = np.asarray(x0, dtype=float).ravel().copy()
    S = np.hstack([np.eye(nx), np.zeros((nx, n_p))])
    dp = np.hstack([np.zeros((n_p, nx)), np.eye(n_p)])  # dp/dz
    n_ev = 0 if events is None else len(events.strict)
    sw = switches
    m = np.zeros(ph.n_sw)
    slide = None
    if sw is not None:
        s0 = np.asarray(sw.indicators(grid[0], x, p)).ravel()
        for k, kind in enumerate(sw.kinds):
            m[k] = 0.0 if kind == "kink" else _mode(kind, sw.strict[k], s0[k])
        for k, kind in enumerate(sw.kinds):
            if kind != "kink" and s0[k] == 0.0 and _attractive(ph, k, grid[0], x, p, m):
                slide = k
                break
    armed = truth = None  # per event: its condition was false since it last fired (edge-triggered); the atoms' truth
    if events is not None:
        truth = _truth(np.asarray(events.atoms(grid[0], x, p)).ravel(), events.strict)
        armed = [not _cond(tree, truth, _OR_AND) for tree in events.conditions]
    log: list[EventRecord] = []
    X_out, S_out = [], []
    t = grid[0]
    fine = np.unique(np.concatenate([np.linspace(a, b, substeps + 1) for a, b in zip(grid[:-1], grid[1:])]))
    outputs = set(grid[1:].tolist())
    i = 1
    while i < fine.size:
        tb = fine[i]
        step, ind, field = ph.get(slide)
        P = np.concatenate([p, m])
        xb, Jx, Jp = (np.asarray(v) for v in step(x, np.concatenate([P, [t, tb - t]])))
        xb = xb.ravel()
        ga = np.asarray(ind(t, x, p, m)[0]).ravel()
        gb = np.asarray(ind(tb, xb, p, m)[0]).ravel()
        side = _sides(ga, n_ev, truth, sw, m, slide)
        watched = _watched(side, gb, n_ev, sw, slide)
        if watched:
            def g_at(tt, k):
                xt = np.asarray(step(x, np.concatenate([P, [t, tt - t]]))[0]).ravel()
                return float(np.asarray(ind(tt, xt, p, m)[0]).ravel()[k])

            hits = [(_root(g_at, k, t, tb, ga[k], side[k]), k) for k in watched]
            tau, k = min(hits)
            xm, Jx, Jp = (np.asarray(v) for v in step(x, np.concatenate([P, [t, tau - t]])))
            xm = xm.ravel()
            S = Jx @ S + Jp @ dp
            x, t = xm, tau
            x, S, m, slide, armed, rec, after = _transition(ph, k, t, x, S, p, m, slide, armed, events, dp)
            truth = after if after is not None else truth
            if rec is not None:
                log.append(rec)
                if len(log) > max_events:
                    raise RuntimeError(f"more than {max_events} events by t = {t:.6g} (an accumulation: Zeno)")
                if rec.kind == "terminate":
                    break
            continue  # from τ to the same sample
        S = Jx @ S + Jp @ dp
        x, t = xb, tb
        if events is not None:
            truth = _truth(gb[:n_ev], events.strict)
            armed = [a or not _cond(tree, truth, _OR_AND) for a, tree in zip(armed, events.conditions)]
        if tb in outputs:
            X_out.append(x.copy())
            S_out.append(S.copy())
        i += 1
    return EventTrajectory(np.array(X_out).reshape(-1, nx), np.array(S_out).reshape(-1, nx, nx + n_p), tuple(log))


_OR_AND = {"and": lambda a, b: a and b, "or": lambda a, b: a or b}


def _truth(g, strict) -> list[bool]:
    return [bool(g[k] < 0) if strict[k] else bool(g[k] <= 0) for k in range(len(strict))]


def _sides(ga, n_ev, truth, sw, m, slide) -> np.ndarray:
    """The sign of each indicator at a segment's start; one at 0 (it has just crossed: an event, a mode change, the
    start or end of sliding) is on the side the phase says: an atom's truth, a surface's mode, α inside [0, 1]."""
    side = np.where(ga > 0, 1.0, -1.0)
    for k in np.flatnonzero(np.abs(ga) <= _ON_SURFACE):
        j = k - n_ev
        if k < n_ev:
            side[k] = -1.0 if truth[k] else 1.0
        elif sw is not None and j < len(sw.kinds):
            kind = sw.kinds[j]
            if kind == "sign":
                side[k] = 1.0 if m[j] > 0 else -1.0
            elif kind == "if":
                side[k] = -1.0 if m[j] > 0.5 else 1.0
        else:
            side[k] = -1.0  # α − 1 and −α while sliding
    return side


def _watched(side, gb, n_ev, sw, slide) -> list[int]:
    """The indicators that end the sample interval on the other side, and that matter in this phase (not a kink's,
    not the surface being slid on)."""
    out = []
    for k in range(side.size):
        j = k - n_ev
        if sw is not None and 0 <= j < len(sw.kinds) and (sw.kinds[j] == "kink" or j == slide):
            continue
        if abs(gb[k]) > _ON_SURFACE and (gb[k] > 0) != (side[k] > 0):
            out.append(k)
    return out


def _root(g_at, k, t, tb, g0, side) -> float:
    """Where indicator k leaves its side in (t, tb]: Brent's method from the last point still clearly on it (an
    indicator at 0 at t, leaving tangentially, is read further on first)."""
    a = t
    if abs(g0) <= _ON_SURFACE or (g0 > 0) != (side > 0):
        a = None
        for frac in (1e-6, 1e-4, 1e-2, 0.1, 0.3, 0.6):
            ta = t + frac * (tb - t)
            ga = g_at(ta, k)
            if (ga > 0) != (side > 0) and abs(ga) > _ON_SURFACE:
                break  # already across: the root lies before ta
            if abs(ga) > _ON_SURFACE:
                a = ta
        if a is None:
            return t  # across at once
    return brentq(g_at, a, tb, args=(k,), xtol=1e-14, rtol=1e-15, maxiter=200)


def _attractive(ph: _Phases, j, t, x, p, m) -> bool:
    kind = ph.sw.kinds[j]
    below = m.copy()
    below[j] = _BELOW[kind]
    above = m.copy()
    above[j] = _ABOVE[kind]
    r_below = float(np.asarray(ph.sw.rate(t, x, p, below)).ravel()[j])
    r_above = float(np.asarray(ph.sw.rate(t, x, p, above)).ravel()[j])
    return r_below > 0 > r_above


def _jump(ph: _Phases, k, t, x, S, p, m, slide, dp, new_x, R_x, R_z, R_t, new_m, new_slide):
    """S⁺ by the jump formula for the crossing of indicator row k of the phase (module docstring)."""
    _, ind, field = ph.get(slide)
    _, g_x, g_p, g_t = (np.asarray(v) for v in ind(t, x, p, m))
    g_x, g_z, g_t = g_x[k], g_p[k] @ dp, float(g_t[k, 0])
    f_minus = np.asarray(field(t, x, p, m)).ravel()
    f_plus = np.asarray(ph.get(new_slide)[2](t, new_x, p, new_m)).ravel()
    denom = float(g_x @ f_minus) + g_t
    scale = float(np.linalg.norm(g_x) * np.linalg.norm(f_minus)) + abs(g_t)
    grazing = abs(denom) <= _GRAZING * max(scale, 1e-300)
    dtau = -(g_x @ S + g_z) / (denom if denom != 0 else 1e-300)
    S_new = R_x @ S + R_z + np.outer(R_x @ f_minus + R_t - f_plus, dtau)
    return S_new, grazing


def _transition(ph: _Phases, k, t, x, S, p, m, slide, armed, events, dp):
    """What the crossing of indicator row k does at t: an event fires (its reset), a mode changes, sliding starts or
    ends. Returns the new (x, S, m, slide, armed, record or None)."""
    n_ev = 0 if events is None else len(events.strict)
    nx = x.size
    eye, zero_z, zero_t = np.eye(nx), np.zeros((nx, S.shape[1])), np.zeros(nx)
    if k < n_ev:
        after = _after(events, k, ph, t, x, p, m, slide)
        firing = [j for j, tree in enumerate(events.conditions) if armed[j] and _cond(tree, after, _OR_AND)]
        if not firing or events.terminate[firing[0]]:
            armed = [not _cond(tree, after, _OR_AND) for tree in events.conditions]
            return x, S, m, slide, armed, (EventRecord(t, "terminate", firing[0]) if firing else None), after
        j = firing[0]
        new_x, R_x, R_z, R_t = x.copy(), eye.copy(), zero_z.copy(), zero_t.copy()
        if events.resets[j] is not None:
            idx, fn = events.resets[j]
            ts, xs, ps = ca.SX.sym("t"), ca.SX.sym("x", nx), ca.SX.sym("p", ph.np)
            r = fn(ts, xs, ps)
            jac = ca.Function("reset_jac", [ts, xs, ps], [r, ca.jacobian(r, xs), ca.jacobian(r, ps), ca.jacobian(r, ts)])
            rv, rx, rp, rt = (np.asarray(v) for v in jac(t, x, p))
            for row, i in enumerate(idx):
                new_x[i] = float(rv.ravel()[row])
                R_x[i] = rx[row]
                R_z[i] = rp[row] @ dp
                R_t[i] = float(rt[row, 0])
        after = _after(events, k, ph, t, new_x, p, m, slide)  # re-armed where the reset made the condition false
        armed = [not _cond(tree, after, _OR_AND) for tree in events.conditions]
        S_new, grazing = _jump(ph, k, t, x, S, p, m, slide, dp, new_x, R_x, R_z, R_t, m, slide)
        return new_x, S_new, m, slide, armed, EventRecord(t, "event", j, grazing), after
    sw = ph.sw
    row = k - n_ev
    new_m, new_slide = m.copy(), None
    if slide is not None and row >= len(sw.kinds):  # α left [0, 1]: sliding ends on the side the field leaves to
        j = slide
        kind = sw.kinds[j]
        # through α = 1 (ṡ⁺ turns positive): to the side above; through α = 0 (ṡ⁻ turns negative): below
        new_m[j] = _ABOVE[kind] if row == len(sw.kinds) else _BELOW[kind]
        kind_out = "left"
    else:
        j = row
        kind = sw.kinds[j]
        new_m[j] = _BELOW[kind] + _ABOVE[kind] - m[j]
        if _attractive(ph, j, t, x, p, m):
            new_slide, kind_out = j, "sliding"
        else:
            kind_out = "switch"
    S_new, grazing = _jump(ph, k, t, x, S, p, m, slide, dp, x, eye, zero_z, zero_t, new_m, new_slide)
    return x, S_new, new_m, new_slide, armed, EventRecord(t, kind_out, j, grazing), None


def _after(events, k, ph, t, x, p, m, slide) -> list[bool]:
    """The atoms' truth just after τ; atom k reads 0 there: its side from the sign of its rate along the field."""
    _, ind, field = ph.get(slide)
    g, g_x, _, g_t = (np.asarray(v) for v in ind(t, x, p, m))
    truth = _truth(g.ravel()[: len(events.strict)], events.strict)
    rate = float(g_x[k] @ np.asarray(field(t, x, p, m)).ravel()) + float(g_t[k, 0])
    truth[k] = rate < 0 or (rate == 0 and not events.strict[k])
    return truth
