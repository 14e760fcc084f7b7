"""Simulation of a model with events (``when``, LANGUAGE.md §11): integrate to the next event, act, restart.

Every integrator here stops at the first downward crossing of an event indicator (pdsl.backend.hybrid): CVODES and
IDAS by their root functions (CasADi's ``zero`` output; a *freeze* state, set by the transition, stops the motion
at the first root, so that one integrator call returns the event's time and state); the fixed-step schemes and
the compiled DOP853 by bracketing the crossing between two of their points and refining it with the Illinois
method on the integrator itself (a partial step from the bracket's start). A located crossing is refined by one
Newton step of the indicator along the flow, which puts it at machine precision in time.

At a crossing the conditions are evaluated just before (the crossing atom false) and just after (true): an event
fires on an edge false -> true. Its resets read the values before the event; then every condition is evaluated
again, and one that became true fires at the same instant (rounds, at most MAX_ROUNDS). A velocity reset of a
constrained mechanical part is an impulse (pdsl.backend.hybrid), a position reset is followed by a projection
onto the invariants (reset components held), and the algebraic variables are recomputed by the next DAE start.
"""

from __future__ import annotations

import math
from dataclasses import field

import casadi as ca
import numpy as np

from ..diagnostics import PdslError
from ..records import record
from ..vocab import FIXED_STEP, SUNDIALS
from .runs import STEPS_FIRST, SUNDIALS_PLUGINS, _native_for, _native_runs, _quiet_call, _run_sundials

__all__ = ["EventLog", "integrate_events", "MAX_EVENTS", "EVENT_ROWS", "SWITCHES"]

MAX_EVENTS = 10_000  # --max-events: more events than this in one run is an accumulation (Zeno)
MAX_ROUNDS = 100  # rounds of events at one instant
BLOCK = 64  # output intervals per integrator call between events
EVENT_ROWS = ("none", "after", "both")
SWITCHES = ("locate", "step-through")
# the indicator function of a crossing atom must be this small (relative to its scale) after the Newton refinement
_FLAT = 1e-12
# an indicator this close to zero (relative, plus absolute 1e-10) at the start of an integration is "on the surface"
_ZONE = 1e-10
# two events closer than this many machine epsilons (relative to t) are at one time (the Zeno rule)
_SAME_TIME = 64


@record(kw_only=False, slots=False)
class EventLog:
    """What happened at the events of one run (info["events"] of the result)."""

    times: list
    names: list  # `when h < 0 (line 6)` per event
    lines: list
    energy_jumps: list  # E⁺ − E⁻ per event (NaN without an energy)
    terminated: dict | None = None
    notes: list = field(default_factory=list)
    switches: list = field(default_factory=list)  # (t, switch, what happened): crossed, sliding, left the surface

    def rows(self) -> list[tuple[float, int, str]]:
        return list(zip(self.times, self.lines, self.names))


# ------------------------------------------------------------------------------------------------ the field
class _Field:
    """The vector field the integrators follow and the indicators they watch, with the discrete state as parameters.

    ``pe`` = (p, m, slide): the model's parameters, the mode of each switch (pdsl.backend.switching) and, per switch,
    1 while the motion slides on its surface (Filippov's field replaces the mode's). The indicators are the events'
    atoms, then each switch's s_k (masked while sliding on it), then per switch α_k and 1 − α_k (watched only while
    sliding: sliding ends where α leaves [0, 1])."""

    def __init__(self, num, st, sigs, switches):
        self.num, self.sigs = num, sigs
        self.hy = num.hybrid
        self.sw = switches
        self.n_ev = len(self.hy.strict)
        self.n_sw = switches.n if switches is not None else 0
        self.np = len(st.p)
        T = ca.SX if num.kind == "SX" else ca.MX
        t, x, z, pe = T.sym("t"), T.sym("x", num.nx), T.sym("z", num.nz), T.sym("pe", self.np + 2 * self.n_sw)
        u = ca.vertcat(*[fn(t, x, pe[: self.np]) for fn in sigs]) if sigs else T(0, 1)
        xdot, g = self.dynamics(t, x, z, pe, u)
        self.f = ca.Function("field", [t, x, z, pe], [xdot, g], ["t", "x", "z", "pe"], ["xdot", "g"])
        self.ind = ca.Function("indicators", [t, x, z, pe], [self.indicators(t, x, z, pe, u)], ["t", "x", "z", "pe"],
                               ["g"])

    @property
    def n_ind(self) -> int:
        return self.n_ev + 3 * self.n_sw

    def dynamics(self, t, x, z, pe, u):
        p = pe[: self.np]
        if self.sw is None:
            return self.num.dae(t, x, z, p, u)
        n = self.n_sw
        m, sl = pe[self.np : self.np + n], pe[self.np + n :]
        xdot, g = self.sw.dae(t, x, z, p, u, m)
        for k, slide in enumerate(self.sw.slide):
            if slide is not None:
                xs, _alpha, gs = slide(t, x, z, p, u, m)
                xdot = ca.if_else(sl[k] > 0.5, xs, xdot)
                g = ca.if_else(sl[k] > 0.5, gs, g) if g.shape[0] else g
        return xdot, g

    def indicators(self, t, x, z, pe, u):
        p = pe[: self.np]
        parts = [self.hy.atoms(t, x, z, p, u)]
        if self.sw is not None:
            n = self.n_sw
            m, sl = pe[self.np : self.np + n], pe[self.np + n :]
            parts.append(self.sw.indicators(t, x, z, p, u))
            alphas = []
            for k, slide in enumerate(self.sw.slide):
                alphas.append(ca.if_else(sl[k] > 0.5, slide(t, x, z, p, u, m)[1], 0.5) if slide is not None else 0.5)
            alpha = ca.vertcat(*alphas)
            parts += [alpha, 1 - alpha]
        return ca.vertcat(*parts)

    # numeric
    def u(self, t, x, p):
        return np.array([float(np.asarray(fn(t, x, p)).ravel()[0]) for fn in self.sigs]) if self.sigs else np.zeros(0)

    def rate(self, t, x, z, pe) -> np.ndarray:
        return np.asarray(self.f(t, x, z, pe)[0]).ravel()

    def values(self, t, x, z, pe) -> np.ndarray:
        return np.asarray(self.ind(t, x, z, pe)).ravel()


# ------------------------------------------------------------------------------------------------ steppers
class _Stop:
    __slots__ = ("t", "x", "z", "atom")

    def __init__(self, t, x, z, atom):
        self.t, self.x, self.z, self.atom = t, x, z, atom


class _SundialsStepper:
    """CVODES/IDAS over [ta, tb] in the normalised time s = (t − ta)/(tb − ta), with the indicators as root
    functions; a root freezes the motion (ẋ = 0) and records the clock t − ta and the atom in extra states.
    ``self.pe`` (the parameters with the discrete state) is set by the loop before each call."""

    def __init__(self, num, st, field: _Field, steps: int):
        T = ca.SX if num.kind == "SX" else ca.MX
        nx, nz, npe = num.nx, num.nz, field.np + 2 * field.n_sw
        s, x, z = T.sym("s"), T.sym("x", nx), T.sym("z", nz)
        fr = T.sym("frozen", 3)  # frozen flag, the clock t − ta (stopped with the motion), the atom
        na = field.n_ind
        # pe, ta, tb − ta, then per indicator its sign (−1: watch it rise, 0: not watched) and an offset (_watch)
        P = T.sym("P", npe + 2 + 2 * na)
        pe, ta, h, sign, offset = P[:npe], P[npe], P[npe + 1], P[npe + 2:npe + 2 + na], P[npe + 2 + na:]
        t = ta + s * h
        u = ca.vertcat(*[fn(t, x, pe[: field.np]) for fn in field.sigs]) if field.sigs else T(0, 1)
        xdot, g = field.dynamics(t, x, z, pe, u)
        run = 1 - fr[0]
        zero = field.indicators(t, x, z, pe, u) * sign + offset
        zero = ca.if_else(fr[0] > 0.5, ca.DM.ones(zero.shape[0]), zero) if zero.shape[0] else zero
        dae = {"t": s, "x": ca.vertcat(x, fr), "p": P, "ode": ca.vertcat(xdot * h * run, 0, h * run, 0), "zero": zero}
        if nz:
            dae.update({"z": z, "alg": g})
        idx, uu = T.sym("index"), T.sym("u", 0, 1)
        post = ca.vertcat(x, 1, fr[1], idx)  # the clock, not s: the state is the root's, s the step's
        transition = ca.Function("transition", [idx, s, ca.vertcat(x, fr), z, P, uu], [post, z],
                                 ca.event_in(), ca.event_out())
        plugin, plugin_opts = SUNDIALS_PLUGINS[st.integrator]
        opts = {"abstol": st.atol, "reltol": st.rtol, "max_num_steps": steps, "show_eval_warnings": False,
                "transition": transition, "event_tol": 1e-14, "max_event_iter": 200, **plugin_opts}
        from .. import quiet

        with quiet.capture(tally=False):  # CasADi warns that its event support is experimental
            self.F = ca.integrator("F_events", plugin, dae, 0.0, [1.0], opts)
            plain = {k: v for k, v in dae.items() if k != "zero"}
            self.F_plain = ca.integrator("F_plain", plugin, plain, 0.0, [1.0],
                                         {k: v for k, v in opts.items() if k not in ("transition", "event_tol",
                                                                                      "max_event_iter")})
        self.num, self.st, self.field = num, st, field
        self.pe = np.asarray(st.p, dtype=float)
        self.plugin, self.dae, self.opts, self._blocks = plugin, dae, opts, {}
        self.fallbacks = 0  # segments located by bracketing after CasADi's root finding failed

    def advance(self, ta, x, z, tb, signs, offsets):
        p = np.concatenate([self.pe, [ta, tb - ta], signs, offsets])
        try:
            res = _run_sundials(self.num, self.st, lambda steps: self.F(x0=np.append(x, [0.0, 0.0, 0.0]), p=p, z0=z),
                                [ta, tb])
        except PdslError:
            # CasADi's event location (experimental in 3.8) can fail on a root close to the start of a step
            # ("tout too far back in direction of integration"): this segment by bracketing on the same CVODES/IDAS
            self.fallbacks += 1
            return self._bracket().advance(ta, x, z, tb, signs, offsets)
        xf = np.asarray(res["xf"]).ravel()
        zf = np.asarray(res["zf"]).ravel()
        if xf[self.num.nx] > 0.5:
            return xf[: self.num.nx], zf, _Stop(ta + xf[self.num.nx + 1], xf[: self.num.nx], zf,
                                               int(round(xf[self.num.nx + 2])))
        w0 = np.maximum(self._watched(ta, x, z, signs, offsets), 0.0)
        if np.any((w0 >= 0) & (self._watched(tb, xf[: self.num.nx], zf, signs, offsets) < 0)):  # a missed root
            return self._bracket().advance(ta, x, z, tb, signs, offsets)
        return xf[: self.num.nx], zf, None

    def advance_grid(self, ta, x, z, ts, signs, offsets):
        """(rows (t, x, z) reached before any event, x, z, stop) over the output times ``ts`` (uniform, ts[0] > ta)
        in one call: after a root the motion and the clock are frozen, so an output whose clock is behind its time
        comes after the event."""
        n = len(ts)
        if n == 1 or not np.allclose(np.diff(np.concatenate([[ta], ts])), ts[0] - ta, rtol=1e-9, atol=0):
            return _one_by_one(self, ta, x, z, ts, signs, offsets)
        F = self._block(n)
        p = np.concatenate([self.pe, [ta, float(ts[-1]) - ta], signs, offsets])
        try:
            res = _run_sundials(self.num, self.st, lambda steps: F(x0=np.append(x, [0.0, 0.0, 0.0]), p=p, z0=z),
                                [ta, *map(float, ts)])
        except PdslError:
            self.fallbacks += 1
            return _one_by_one(self._bracket(), ta, x, z, ts, signs, offsets)
        nx = self.num.nx
        X = np.asarray(res["xf"]).reshape(nx + 3, n)
        Z = np.asarray(res["zf"]).reshape(self.num.nz, n)
        rows = []
        w_prev = np.maximum(self._watched(ta, x, z, signs, offsets), 0.0)
        for j in range(n):
            if X[nx, j] > 0.5:
                stop = _Stop(ta + X[nx + 1, j], X[:nx, j].copy(), Z[:, j].copy(), int(round(X[nx + 2, j])))
                return rows, stop.x, stop.z, stop
            # a crossing the root functions did not report (CasADi 3.8 misses a root that falls exactly on an
            # output time): located by bracketing inside this output interval
            w = self._watched(float(ts[j]), X[:nx, j], Z[:, j], signs, offsets)
            if np.any((w_prev >= 0) & (w < 0)):
                t0_, x0_, z0_ = (rows[-1] if rows else (ta, x, z))
                xb, zb, stop = self._bracket().advance(t0_, x0_, z0_, float(ts[j]), signs, offsets)
                if stop is not None:
                    return rows, xb, zb, stop
            w_prev = w
            rows.append((float(ts[j]), X[:nx, j].copy(), Z[:, j].copy()))
        return rows, rows[-1][1], rows[-1][2], None

    def _watched(self, t, x, z, signs, offsets):
        zz = z if self.num.nz else self.num.z_start
        return self.field.values(t, x, zz, self.pe) * signs + offsets

    def _block(self, n: int):
        F = self._blocks.get(n)
        if F is None:
            from .. import quiet

            with quiet.capture(tally=False):
                F = ca.integrator("F_events", self.plugin, self.dae, 0.0, [(j + 1) / n for j in range(n)], self.opts)
            self._blocks[n] = F
        return F

    def _bracket(self):
        num, st, field = self.num, self.st, self.field

        def shoot(ta_, x_, tb_, pe):
            if tb_ <= ta_:
                return x_
            p = np.concatenate([pe, [ta_, tb_ - ta_], np.zeros(field.n_ind), np.ones(field.n_ind)])
            res = _run_sundials(num, st, lambda steps: self.F_plain(x0=np.append(x_, [0.0, 0.0, 0.0]), p=p,
                                                                     z0=num.z_start), [ta_, tb_])
            return np.asarray(res["xf"]).ravel()[: num.nx]

        def points(ta_, tb_, n=64):
            return [ta_ + (tb_ - ta_) * (j + 1) / n for j in range(n)]

        br = _BracketStepper(num, st, field, shoot, points)
        br.pe = self.pe
        return br


def _one_by_one(stepper, ta, x, z, ts, signs, offsets):
    rows = []
    for tk in ts:
        xb, zb, stop = stepper.advance(ta, x, z, float(tk), signs, offsets)
        if stop is not None:
            return rows, xb, zb, stop
        rows.append((float(tk), xb, zb))
        ta, x, z = float(tk), xb, zb
    return rows, x, z, None


class _BracketStepper:
    """An integrator ``shoot(ta, x, tb, pe) -> x(tb)`` sampled at ``points(ta, tb)``; a downward crossing of a
    watched indicator between two samples is refined by the Illinois method on shoot from the earlier sample."""

    def __init__(self, num, st, field: _Field, shoot, points, many=None):
        self.num, self.st, self.field, self._shoot, self.points, self._many = num, st, field, shoot, points, many
        self.pe = np.asarray(st.p, dtype=float)

    def shoot(self, ta, x, tb):
        return self._shoot(ta, x, tb, self.pe)

    def advance(self, ta, x, z, tb, signs, offsets):
        ts = self.points(ta, tb)
        xs = self.shoot_many(ta, x, ts)

        def watched(t, x_):
            return self.field.values(t, x_, self.num.z_start, self.pe) * signs + offsets

        g0 = np.maximum(watched(ta, x), 0.0)  # the start counts as on the watched side
        prev_t, prev_x = ta, x
        for tk, xk in zip(ts, xs):
            g1 = watched(tk, xk)
            crossed = [k for k in range(len(g0)) if g0[k] >= 0 > g1[k]]
            if crossed:
                return self._locate(prev_t, prev_x, tk, g0, crossed, z, watched)
            prev_t, prev_x, g0 = tk, xk, g1
        return xs[-1], z, None

    def advance_grid(self, ta, x, z, ts, signs, offsets):
        return _one_by_one(self, ta, x, z, ts, signs, offsets)

    def shoot_many(self, ta, x, ts):
        if self._many is not None:
            return self._many(ta, x, ts, self.pe)
        out, t, xc = [], ta, x
        for tk in ts:
            xc = self.shoot(t, xc, tk)
            out.append(xc)
            t = tk
        return out

    def _locate(self, ta, xa, tb, ga, crossed, z, watched):
        """The earliest downward crossing in (ta, tb] among the indicators ``crossed`` (Illinois on each)."""
        best = None
        for k in crossed:
            a, fa, b = ta, ga[k], tb
            fb = watched(tb, self.shoot(ta, xa, tb))[k]
            side = 0
            for _ in range(100):
                c = b - fb * (b - a) / (fb - fa) if fb != fa else 0.5 * (a + b)
                if not a < c < b:
                    c = 0.5 * (a + b)
                fc = watched(c, self.shoot(ta, xa, c))[k]
                if fc < 0:
                    b, fb = c, fc
                    if side == -1:
                        fa *= 0.5
                    side = -1
                else:
                    a, fa = c, fc
                    if side == 1:
                        fb *= 0.5
                    side = 1
                if b - a <= 4 * np.finfo(float).eps * max(1.0, abs(b)):
                    break
            if best is None or b < best[0]:
                best = (b, k)
        tb, k = best
        xb = self.shoot(ta, xa, tb)
        return xb, z, _Stop(tb, xb, z, k)


def _fixed_stepper(num, st, field: _Field, grid):
    from ..numerics.fixed_step import make_step

    T = ca.SX if num.kind == "SX" else ca.MX
    npe = field.np + 2 * field.n_sw
    s, x, P = T.sym("s"), T.sym("x", num.nx), T.sym("P", npe + 2)
    pe, ta, h = P[:npe], P[npe], P[npe + 1]
    t = ta + s * h
    u = ca.vertcat(*[fn(t, x, pe[: field.np]) for fn in field.sigs]) if field.sigs else T(0, 1)
    xdot, _ = field.dynamics(t, x, T(0, 1), pe, u)
    step = make_step(ca.Function("f", [s, x, P], [xdot * h]), st.integrator, 1.0)
    nominal = float(grid[1] - grid[0]) / st.substeps if len(grid) > 1 else 1.0

    def shoot(ta_, x_, tb_, pe_):
        n = max(1, math.ceil((tb_ - ta_) / nominal - 1e-9))
        hk = (tb_ - ta_) / n
        xc = x_
        for j in range(n):
            xc = np.asarray(_quiet_call(num, st, step, 0.0, xc, np.append(pe_, [ta_ + j * hk, hk]))).ravel()
        return xc

    def points(ta_, tb_):  # every step's end
        n = max(1, math.ceil((tb_ - ta_) / nominal - 1e-9))
        return [ta_ + (tb_ - ta_) * (j + 1) / n for j in range(n)]

    return shoot, points


def _native_stepper(num, st, field: _Field, samples: int = 16):

    T = ca.SX if num.kind == "SX" else ca.MX
    t, x, P = T.sym("t"), T.sym("x", num.nx), T.sym("pe", field.np + 2 * field.n_sw)
    u = ca.vertcat(*[fn(t, x, P[: field.np]) for fn in field.sigs]) if field.sigs else T(0, 1)
    xdot, _ = field.dynamics(t, x, T(0, 1), P, u)
    nat = _native_for(st, t, x, P, xdot, (num.dae, field.f, *field.sigs))

    def shoot(ta_, x_, tb_, pe_):
        if tb_ <= ta_:
            return x_
        return _native_runs(num, st, nat, x_[None, :], pe_, [ta_, tb_], 1)[0][-1]

    def points(ta_, tb_):
        return [ta_ + (tb_ - ta_) * (j + 1) / samples for j in range(samples)]

    def many(ta_, x_, ts_, pe_):  # one run through every sample (DOP853's dense output), not one run per sample
        return list(_native_runs(num, st, nat, x_[None, :], pe_, [ta_, *ts_], 1)[0][1:])

    return shoot, points, many


# ------------------------------------------------------------------------------------------------ switches
class _Modes:
    """The discrete state of the switches: the mode of each, and the surface the motion slides on (or None)."""

    def __init__(self, field: _Field):
        self.field = field
        n = field.n_sw
        self.m = np.zeros(n)
        self.sliding: int | None = None
        self.log: list = []  # (t, switch text, what happened)

    def pe(self, p) -> np.ndarray:
        sl = np.zeros(self.field.n_sw)
        if self.sliding is not None:
            sl[self.sliding] = 1.0
        return np.concatenate([p, self.m, sl])

    def settle(self, t, x, z, p, span) -> None:
        """Modes read from the state (at the start, after a reset): by the sign of each switching function; one on
        its surface by where the field on each side points: into it from both sides (attractive): sliding; away
        on both sides (repulsive): an error; else the side the motion goes to."""
        sw, field = self.field.sw, self.field
        if sw is None:
            return
        s = np.asarray(sw.indicators(t, x, z, p, field.u(t, x, p))).ravel()
        self.sliding = None
        for k in range(sw.n):
            if sw.kinds[k] == "kink":
                continue
            self.m[k] = sw.mode_below(k) if s[k] < 0 else sw.mode_above(k)
        for k in range(sw.n):
            if sw.kinds[k] == "kink" or abs(s[k]) > _ZONE * (1.0 + abs(s[k])) * 1e3:
                continue
            below, above = self._rates(t, x, z, p, k)
            if below > 0 and above < 0:
                self._slide(t, k, span)
            elif below < 0 and above > 0:
                raise PdslError.at("RepulsiveSurface", f"the state sits on the switching surface of `{sw.texts[k]}` at "
                                   f"t = {t:.10g}, and the field points away from it on both sides (ds/dt = {below:.3g} "
                                   f"below, {above:.3g} above): the solution is not unique", span,
                                   "start the state off the surface, on the side it should take")
            elif above > 0:
                self.m[k] = sw.mode_above(k)
            elif below < 0:
                self.m[k] = sw.mode_below(k)

    def _rates(self, t, x, z, p, k) -> tuple[float, float]:
        """ṡ_k with mode k set to its value below the surface, and above (the other modes as they are)."""
        sw, field = self.field.sw, self.field
        u = field.u(t, x, p)
        out = []
        for mode in (sw.mode_below(k), sw.mode_above(k)):
            m = self.m.copy()
            m[k] = mode
            out.append(float(np.asarray(sw.rate(t, x, z, p, u, m)).ravel()[k]))
        return out[0], out[1]

    def _slide(self, t, k, span) -> None:
        sw = self.field.sw
        if self.sliding is not None and self.sliding != k:
            raise PdslError.at("NotYetSupported", f"sliding on two surfaces at once, `{sw.texts[self.sliding]}` and "
                               f"`{sw.texts[k]}` (t = {t:.10g}): the Filippov field of an intersection is not "
                               "implemented", span, "smooth one of the switches (tanh, smoothstep)")
        self.sliding = k
        self.log.append((t, sw.texts[k], "sliding"))

    def cross(self, t, x, z, p, k, downward: bool, span) -> None:
        """Switch k's function crossed zero (downward: into s < 0): a transversal crossing changes the mode; where
        the field on the far side points back, the surface is attractive and the motion slides on it."""
        sw = self.field.sw
        if sw.kinds[k] == "kink":
            return
        below, above = self._rates(t, x, z, p, k)
        if downward:
            if below <= 0:
                self.m[k] = sw.mode_below(k)
                self.log.append((t, sw.texts[k], "crossed"))
            else:
                self._slide(t, k, span)
        else:
            if above >= 0:
                self.m[k] = sw.mode_above(k)
                self.log.append((t, sw.texts[k], "crossed"))
            else:
                self._slide(t, k, span)

    def leave(self, t, x, z, p, k, through_one: bool) -> None:
        """Sliding on surface k ends: α left [0, 1] through 1 (the field above no longer points into the surface:
        the motion leaves upwards) or through 0 (downwards)."""
        sw = self.field.sw
        self.sliding = None
        self.m[k] = sw.mode_above(k) if through_one else sw.mode_below(k)
        self.log.append((t, sw.texts[k], "left the surface to s " + ("> 0" if through_one else "< 0")))

    def watch(self, t, x, z, p) -> tuple[np.ndarray, np.ndarray]:
        """(signs, offsets) of the switch part of the indicators: s_k watched towards the other side of its mode
        (not while sliding on it), α and 1 − α only while sliding."""
        field, sw = self.field, self.field.sw
        n = field.n_sw
        if n == 0:
            return np.zeros(0), np.zeros(0)
        vals = field.values(t, x, z, self.pe(p))[field.n_ev:]
        s, alpha, beta = vals[:n], vals[n : 2 * n], vals[2 * n :]
        signs = np.zeros(3 * n)
        sdot = None
        for k in range(n):
            if k == self.sliding:
                signs[n + k] = signs[2 * n + k] = 1.0
            elif sw.kinds[k] == "kink":
                if abs(s[k]) <= _ZONE * (1.0 + abs(s[k])):  # at the kink: the side the motion goes to
                    if sdot is None:
                        sdot = np.asarray(sw.rate(t, x, z, p, field.u(t, x, p), self.m)).ravel()
                    signs[k] = 1.0 if sdot[k] >= 0 else -1.0
                else:
                    signs[k] = 1.0 if s[k] > 0 else -1.0
            else:
                signs[k] = 1.0 if self.m[k] == sw.mode_above(k) else -1.0
        g = np.concatenate([s, alpha, beta]) * signs
        offsets = np.where(signs == 0, 1.0, np.where(g > 0, 0.0, 2 * np.abs(g) + 1e-30))
        return signs, offsets


# ------------------------------------------------------------------------------------------------ the loop
def integrate_events(num, grid, x0, st, *, max_events: int = MAX_EVENTS, event_rows: str = "none",
                     switches: str = "locate"):
    """(t, X, Z, log) of one run from ``x0`` over ``grid`` with the model's events and switching surfaces; ``t`` is
    the grid, with event rows added by ``event_rows`` ("after": the state after each event, "both": before and
    after). ``switches="step-through"`` leaves the switching surfaces to the integrator's error control."""
    from .initial import Projector

    hy = num.hybrid
    if event_rows not in EVENT_ROWS:
        raise PdslError.at("BadOption", f"--event-rows {event_rows}: unknown", hint="one of: " + ", ".join(EVENT_ROWS))
    if switches not in SWITCHES:
        raise PdslError.at("BadOption", f"--switches {switches}: unknown", hint="one of: " + ", ".join(SWITCHES))
    if not (isinstance(max_events, int) and max_events >= 1):
        raise PdslError.at("BadOption", f"--max-events must be a positive integer, got {max_events}")
    if st.stabilize == "project":
        raise PdslError.at("NotYetSupported", "--stabilize project with events or located switches: the run already "
                           "projects after each reset", num.system.span, "use --stabilize none")
    sigs = tuple(st.inputs[name].fn for name in num.u_names)
    p = st.p
    z0 = num.z_start.copy()
    field = _Field(num, st, sigs, hy.switches if switches == "locate" else None)
    modes = _Modes(field)
    n_ev = field.n_ev

    def u_at(t, x):
        return field.u(t, x, p)

    def all_values(t, x, z=None):
        return field.values(t, x, z0 if z is None else z, modes.pe(p))

    def atoms(t, x, z=None):  # the events' atoms
        return all_values(t, x, z)[:n_ev]

    def f_at(t, x, z=None):
        return field.rate(t, x, z0 if z is None else z, modes.pe(p))

    if st.integrator in SUNDIALS:
        stepper = _SundialsStepper(num, st, field, STEPS_FIRST)
    elif st.integrator in FIXED_STEP:
        stepper = _BracketStepper(num, st, field, *_fixed_stepper(num, st, field, grid))
    else:
        stepper = _BracketStepper(num, st, field, *_native_stepper(num, st, field))
    projector = Projector(num) if num.invariants.size1_out(0) else None

    def truth(g, keep=None):
        out = [(g[k] < 0) if hy.strict[k] else (g[k] <= 0) for k in range(n_ev)]
        if keep is not None:  # an indicator at zero (to rounding) keeps its truth value
            for k in range(n_ev):
                if abs(g[k]) <= _FLAT * (1.0 + abs(g[k])) * 1e3:
                    out[k] = keep[k]
        return out

    from ..backend.hybrid import condition_value

    def cond_values(tr):
        return [condition_value(c, tr) for c in hy.conditions]

    T_rows, X_rows, Z_rows = [float(grid[0])], [np.array(x0, dtype=float)], [z0.copy()]
    log = EventLog(times=[], names=[], lines=[], energy_jumps=[], switches=modes.log)
    t, x, z = float(grid[0]), np.array(x0, dtype=float), z0.copy()
    modes.settle(t, x, z, p, num.system.span)
    # the truth of each atom, carried along the run: an integrator watches a false atom for a downward crossing of
    # its indicator and a true one for an upward crossing (sign −1), so that a rebound that starts a hair inside
    # the region (h⁺ = −1e-17 < 0) and leaves it within one step is not missed
    tr = truth(atoms(t, x))  # a condition true at the start does not fire until it has been false
    k = 1
    same_time = 0
    switch_same = 0

    def partial(exc):
        exc.partial_rows = (np.array(T_rows), np.array(X_rows), np.array(Z_rows), log)
        return exc

    while k < len(grid):
        tb = float(grid[k])
        signs, offsets, tr_now, cap = _watch(hy, t, x, z, tr, atoms, f_at)
        s_signs, s_offsets = modes.watch(t, x, z if num.nz else z0, p)
        signs, offsets = np.concatenate([signs, s_signs]), np.concatenate([offsets, s_offsets])
        stepper.pe = modes.pe(p)
        rising = [j for j, (a, b) in enumerate(zip(cond_values(tr), cond_values(tr_now))) if b and not a]
        tr = tr_now
        if rising:  # a condition became true at a restart: a crossing that ended exactly on an output time
            if event_rows == "both":
                T_rows.append(t), X_rows.append(x.copy()), Z_rows.append(z.copy())
            try:
                x, tr, terminated = _act(num, st, hy, projector, t, x, z, rising, tr, truth, atoms, u_at, f_at, log,
                                         max_events, same_time)
                modes.settle(t, x, z, p, num.system.span)
            except PdslError as exc:
                raise partial(exc)
            if event_rows in ("after", "both") or terminated:
                T_rows.append(t), X_rows.append(x.copy()), Z_rows.append(z.copy())
            if terminated:
                log = _terminated(log, terminated)
                break
            continue
        if cap < tb:  # to the apex of a bounce first (_watch)
            xb, zb, stop = stepper.advance(t, x, z, cap, signs, offsets)
            if stop is None:
                t, x, z = cap, xb, (zb if num.nz else z)
                continue
        else:
            # on the grid, several output intervals in one integrator call (fewer restarts: faster, and CVODES
            # keeps its order and step across them); off the grid (after an event), to the next output time
            ts = grid[k : k + BLOCK] if t == float(grid[k - 1]) else grid[k : k + 1]
            rows, xb, zb, stop = stepper.advance_grid(t, x, z, ts, signs, offsets)
            for tk, xk, zk in rows:
                T_rows.append(float(tk)), X_rows.append(xk.copy()), Z_rows.append(zk.copy() if num.nz else z.copy())
            k += len(rows)
            if rows:
                t, x = float(rows[-1][0]), rows[-1][1].copy()
                z = rows[-1][2].copy() if num.nz else z
            if stop is None:  # the truth of the atoms is read at the next restart (_watch), edges fired there
                continue
        te, xe, ze = _refine(num, stop, all_values, f_at, t, signs[stop.atom])
        ze = ze if num.nz else z
        if stop.atom >= n_ev:  # a switching surface: a mode changes, or sliding starts or ends
            if te - t <= _SAME_TIME * np.finfo(float).eps * max(1.0, abs(te)):
                switch_same += 1
                if switch_same > 100:
                    raise partial(PdslError.at(
                        "IntegratorFailure", f"the switches chatter at t = {te:.10g}: their crossings no longer "
                        "advance in time", num.system.span, "a switch the motion keeps touching; smooth it (tanh)"))
            else:
                switch_same = 0
            j = stop.atom - n_ev
            n_sw = field.n_sw
            if j < n_sw:
                modes.cross(te, xe, ze, p, j, downward=signs[stop.atom] > 0, span=num.system.span)
            else:
                modes.leave(te, xe, ze, p, (j - n_sw) % n_sw, through_one=j >= 2 * n_sw)
            t, x, z = te, xe, ze
            continue
        tr_before = truth(atoms(te, xe, ze), keep=tr)
        tr_before[stop.atom] = tr[stop.atom]
        tr_after = list(tr_before)
        tr_after[stop.atom] = not tr[stop.atom]
        before, after = cond_values(tr_before), cond_values(tr_after)
        fired = [j for j in range(len(before)) if after[j] and not before[j]]
        # events that no longer advance beyond rounding (a few ulps of t: the explicit methods' bouncing ball at its
        # accumulation point advances 5 ulps per event, forever) count towards the Zeno stop of _act
        if te - t <= _SAME_TIME * np.finfo(float).eps * max(1.0, abs(te)):
            same_time += 1
        else:
            same_time = 0
        if not fired:  # an atom changed, no condition became true: go on from here
            if same_time > 50:
                raise partial(PdslError.at("IntegratorFailure", f"an event indicator chatters at t = {te:.10g} (its "
                                           "crossings no longer advance in time)", num.system.span,
                                           "a condition that the motion keeps touching: check it, or end the run before"))
            t, x, z, tr = te, xe, ze, tr_after
            continue
        if event_rows == "both":
            T_rows.append(te), X_rows.append(xe.copy()), Z_rows.append(ze.copy())
        try:
            x_new, tr, terminated = _act(num, st, hy, projector, te, xe, ze, fired, tr_after, truth, atoms, u_at, f_at,
                                         log, max_events, same_time)
            modes.settle(te, x_new, ze, p, num.system.span)
        except PdslError as exc:  # a Zeno stop: what was integrated up to there goes with the error
            raise partial(exc)
        t, x, z = te, x_new, ze
        if event_rows in ("after", "both") or terminated:
            T_rows.append(te), X_rows.append(x.copy()), Z_rows.append(z.copy())
        if terminated:
            log = _terminated(log, terminated)
            break
    T_arr = np.array(T_rows)
    return T_arr, np.array(X_rows), (np.array(Z_rows) if num.nz else np.zeros((len(T_arr), 0))), log


def _terminated(log: EventLog, terminated: dict) -> EventLog:
    return EventLog(log.times, log.names, log.lines, log.energy_jumps, terminated, log.notes, log.switches)


def _watch(hy, t, x, z, tr, atoms, f_at):
    """(signs, offsets, truth, cap) for the next integration from (t, x). A false atom is watched for a downward
    crossing of its indicator (sign +1), a true one for an upward crossing (−1).

    An indicator within rounding of zero at the start (the floor, just after a bounce) is read by its sign, unless
    the motion would carry it through zero within the resolution of t: then by the side the motion goes to (ġ, or
    g̈ when ġ = 0); and when the start is not strictly on the watched side its watched indicator
    is offset by twice its value (plus 1e-30): the crossing is then located at g = −offset and the Newton
    refinement (_refine, on the true indicator) moves it onto g = 0. An atom that leaves the surface and is pulled
    back (a bounce) returns after ≈ 2ġ/|g̈|: the integration then ends at the apex first (``cap``), so that no
    step can straddle the whole arc and the return starts strictly on the watched side."""
    g = atoms(t, x, z)
    zone = _ZONE * (1.0 + np.abs(g))
    cap = math.inf
    near = np.abs(g) <= zone
    # away from zero an atom's truth is its indicator's sign
    tr = [bool(tr[k]) if near[k] else bool(g[k] < 0 if hy.strict[k] else g[k] <= 0) for k in range(len(g))]
    gdot = gddot = np.zeros(len(g))
    if near.any():
        f = f_at(t, x, z)

        def path(h):  # a second-order (Heun) path along the flow
            return x + h * 0.5 * (f + f_at(t + h, x + h * f, z))

        dd = 1e-4 * max(1.0, abs(t))
        gp, gm = atoms(t + dd, path(dd), z), atoms(t - dd, path(-dd), z)
        gdot, gddot = (gp - gm) / (2 * dd), (gp - 2 * g + gm) / dd**2
        tau = 1e3 * np.finfo(float).eps * max(1.0, abs(t))  # below the resolution of t
        for k in np.flatnonzero(near):
            if g[k] != 0 and not (g[k] * gdot[k] < 0 and abs(g[k]) < abs(gdot[k]) * tau):
                tr[k] = bool(g[k] < 0)  # moving away from zero, or reaching it only after a resolvable time
            elif gdot[k] != 0:
                tr[k] = bool(gdot[k] < 0)  # on the surface: the side the motion goes to
            elif gddot[k] != 0:
                tr[k] = bool(gddot[k] < 0)
    signs = np.array([-1.0 if v else 1.0 for v in tr])
    offsets = np.where(signs * g > 0, 0.0, 2 * np.abs(g) + 1e-30)
    for k in np.flatnonzero(near):
        away, pull = signs[k] * gdot[k], signs[k] * gddot[k]
        if away > 0 and pull < 0:
            apex = away / -pull  # half of the time to come back
            if apex > 1e3 * np.finfo(float).eps * max(1.0, abs(t)):
                cap = min(cap, t + apex)
    return signs, offsets, tr, cap


def _refine(num, stop, all_values, f_at, t_start, sign: float = 1.0):
    """One Newton step of the crossing indicator (times ``sign``: −1 for an upward crossing) along the flow: (t, x,
    z) at its root, on the side the crossing leads to."""
    te, xe, ze = stop.t, stop.x, stop.z
    if num.nz:
        return te, xe, ze
    f = f_at(te, xe, ze)
    g = sign * float(all_values(te, xe, ze)[stop.atom])
    # d g / dt along the flow, by a central difference of g(t + δ, x + δ f) (the indicator may read t and inputs)
    d = 1e-7 * max(1.0, abs(te))
    gp = float(all_values(te + d, xe + d * f, ze)[stop.atom])
    gm = float(all_values(te - d, xe - d * f, ze)[stop.atom])
    gdot = sign * (gp - gm) / (2 * d)
    if not gdot < 0 or not math.isfinite(g):
        return te, xe, ze
    dt = -g / gdot
    if abs(dt) > 1e-6 * max(1.0, abs(te)) or te + dt < t_start:
        return te, xe, ze
    return te + dt, xe + dt * f, ze


def _act(num, st, hy, projector, te, xe, ze, fired, truth_now, truth, atoms, u_at, f_at, log, max_events,
         same_time):
    """Apply the fired events (and the rounds they trigger): (x⁺, atom truth values after, terminated or None)."""
    from ..backend.hybrid import condition_value

    p = st.p
    if projector is not None and hy.velocity_rows is not None and any(hy.resets[j] is not None for j in fired):
        # the state just before an impulse onto the invariants first: the drift the integrator left there (Φ̇ ≈ 1e-11
        # at rtol 1e-12) would otherwise pass into the impulse (an elastic stop, e = 1, changed the kinetic energy by
        # 1e-9 relative); the reset targets are held (the rows show der(x)⁺ = −e·der(x)⁻ exactly), the others move;
        # this is drift, so the energy change counted for the event starts after it
        keep = tuple(n for j in fired for n in hy.targets[j] if n in num.x_names)  # the reset targets held
        xe = projector.project(xe, p, te, keep=keep).x
    x = xe.copy()
    tr = list(truth_now)
    for _round in range(MAX_ROUNDS):
        u = u_at(te, x)
        E0 = float(np.asarray(num.energy(te, x, p, u)).ravel()[0]) if num.energy is not None else math.nan
        values: dict[str, float] = {}
        origin: dict[str, int] = {}
        terminate = None
        for j in fired:
            if len(log.times) >= max_events or same_time > 50:
                count = len(log.times)
                raise PdslError.at(
                    "ZenoEvents",
                    f"{hy.labels[j]}: {count:,} events by t = {te:.10g}"
                    + (" (the event times no longer advance)" if same_time > 50 else f" (--max-events {max_events:,})")
                    + ": the events accumulate (Zeno behaviour)", _span(num, hy.lines[j]),
                    "a bouncing ball coming to rest has infinitely many bounces before a finite time: end the run "
                    "before it (--t-end), add a `when` that stops the bouncing (terminate, or reset to rest when the "
                    "rebound is small), or raise --max-events")
            log.times.append(te), log.names.append(hy.labels[j]), log.lines.append(hy.lines[j])
            if hy.resets[j] is not None:
                vals = np.asarray(hy.resets[j](te, xe if _round == 0 else x, ze, p, u)).ravel()
                for name, v in zip(hy.targets[j], vals):
                    if name in values:
                        raise PdslError.at("BadEvent", f"`{name}` is reset twice at t = {te:.10g}: by "
                                           f"{hy.labels[origin[name]]} and {hy.labels[j]}", _span(num, hy.lines[j]),
                                           "two resets of one state at one instant are ambiguous")
                    values[name], origin[name] = float(v), j
            if hy.terminate[j] and terminate is None:
                terminate = {"t": te, "line": hy.lines[j], "name": hy.labels[j]}
        if values:
            x = _apply_resets(num, hy, projector, te, x, values, origin, p)
        E1 = float(np.asarray(num.energy(te, x, p, u_at(te, x))).ravel()[0]) if num.energy is not None else math.nan
        log.energy_jumps.extend([E1 - E0] + [0.0] * (len(fired) - 1))
        if terminate:
            return x, tr, terminate
        # the conditions again, with the new values: one that became true fires in the next round
        before = [condition_value(c, tr) for c in hy.conditions]
        tr = truth(atoms(te, x, ze), keep=tr)
        after = [condition_value(c, tr) for c in hy.conditions]
        fired = [j for j in range(len(after)) if after[j] and not before[j]]
        if not fired:
            _check_leaves(hy, te, xe, x, ze, tr, atoms, f_at, log, num)
            return x, tr, None
    raise PdslError.at("ZenoEvents", f"{MAX_ROUNDS} rounds of events at t = {te:.10g} without an end: "
                       + ", ".join(sorted({hy.labels[j] for j in fired})), _span(num, hy.lines[fired[0]]),
                       "two events that keep re-triggering each other: make one of the conditions exclusive")


def _apply_resets(num, hy, projector, t, x, values: dict, origin: dict, p) -> np.ndarray:
    """x with the reset ``values`` (target name -> value): states set directly, velocity targets of a constrained
    part by the impulse rule, then projected onto the invariants."""
    names = list(hy.target_names)
    state_index = {n: i for i, n in enumerate(num.x_names)}
    kin = list(hy.kinetic)
    x = x.copy()
    r_now = np.asarray(hy.target_value(t, x, p)).ravel()
    R = np.asarray(hy.target_jac(t, x, p)) if hy.target_jac is not None else np.zeros((len(names), 0))
    R = R.reshape(len(names), len(kin))
    impulse_rows, impulse_d, direct = [], [], []
    for name, v in values.items():
        i = names.index(name)
        if kin and np.any(R[i] != 0) and (hy.velocity_rows is not None or name not in state_index):
            impulse_rows.append(R[i])
            impulse_d.append(v - r_now[i])
        elif name in state_index:
            direct.append((state_index[name], v))
        else:
            raise PdslError.at("BadEvent", f"`reinit({name}, ...)`: `{name}` is a shown column that no state can be set "
                               "to directly", _span(num, hy.lines[origin[name]]))
    for i, v in direct:
        x[i] = v
    if impulse_rows:
        x = _impulse(num, hy, t, x, p, np.array(impulse_rows), np.array(impulse_d), origin)
    if projector is not None:
        keep = tuple(values)
        x = projector.project(x, p, t, keep=tuple(k for k in keep if k in state_index)).x
    return x


def _impulse(num, hy, t, x, p, R, d, origin) -> np.ndarray:
    """y⁺ = y⁻ + Δy with Δy minimising ½ΔyᵀWΔy subject to R Δy = d and c(x, y⁺) = 0 (the velocity rows)."""
    kin = list(hy.kinetic)
    ny = len(kin)
    W = np.asarray(hy.metric(t, x, p)).reshape(ny, ny) if hy.metric is not None else np.eye(ny)
    if hy.velocity_rows is not None:
        c, G = hy.velocity_rows(t, x, p)
        c, G = np.asarray(c).ravel(), np.asarray(G).reshape(-1, ny)
    else:
        c, G = np.zeros(0), np.zeros((0, ny))
    A = np.vstack([G, R])
    b = np.concatenate([-c, d])
    m = A.shape[0]
    K = np.block([[W, A.T], [A, np.zeros((m, m))]])
    rhs = np.concatenate([np.zeros(ny), b])
    sol, *_ = np.linalg.lstsq(K, rhs, rcond=None)
    dy = sol[:ny]
    miss = A @ dy - b
    scale = 1.0 + np.max(np.abs(b)) if len(b) else 1.0
    if np.max(np.abs(miss)) > 1e-8 * scale:
        involved = [hy.velocity_labels[i] for i in range(G.shape[0]) if np.any(np.abs(G[i]) > 0) and
                    np.any((np.abs(G[i]) > 0) & np.any(np.abs(R) > 0, axis=0))] or list(hy.velocity_labels)
        first = next(iter(origin.values()))
        raise PdslError.at("BadEvent", f"the reset at t = {t:.10g} cannot satisfy the velocity constraint"
                           f"{'s' if len(involved) > 1 else ''} {', '.join(involved)}: the constrained part cannot move "
                           "as the reset demands", _span(num, hy.lines[first]),
                           "reset a velocity the constraints leave free, or fewer components at once")
    x = x.copy()
    x[kin] += dy
    return x


def _check_leaves(hy, t, x_pre, x, z, tr, atoms, f_at, log, num) -> None:
    """A reset meant to turn the motion around that leaves its condition true with the motion still going in (a
    rebound too small to leave the floor: the bounces have accumulated) stops the run: integrating on would pass
    through the floor unseen. A reset that does not change how the indicator moves (a counter) is not checked."""
    from ..backend.hybrid import atoms_of, condition_value

    def rate(xs):
        f = f_at(t, xs, z)
        d = 1e-7 * max(1.0, abs(t))
        return (atoms(t + d, xs + d * f, z) - atoms(t - d, xs - d * f, z)) / (2 * d)

    g = atoms(t, x, z)
    r_pre, r_post = rate(x_pre), rate(x)
    for j, cond in enumerate(hy.conditions):
        if not condition_value(cond, tr):
            continue
        for k in atoms_of(cond):
            if not (tr[k] and abs(g[k]) <= 1e-6 * (1.0 + abs(g[k]))):
                continue
            turned = abs(r_post[k] - r_pre[k]) > 1e-9 * (abs(r_pre[k]) + abs(r_post[k]))
            if turned and r_post[k] <= 0:
                count = len(log.times)
                raise PdslError.at(
                    "ZenoEvents", f"{hy.labels[j]}: after {count:,} events, at t = {t:.10g}, the reset leaves the "
                    f"condition true and the motion still going into it (rate {r_post[k]:.3g}): a rebound too small "
                    "to leave the floor: the events accumulate (Zeno behaviour)", _span(num, hy.lines[j]),
                    "end the run before this time (--t-end), or add a `when` that brings the motion to rest")


def _span(num, line: int):
    from ..diagnostics import Span

    return Span.point(num.system.path, line, 1) if num.system.path else num.system.span
