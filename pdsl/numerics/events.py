"""A fixed step that locates state events inside it (LANGUAGE.md §11, "Sensitivities and fitting through events").

The step of :func:`pdsl.numerics.make_step` is taken from (t, x₀) to (t + h, x₁). An event's condition is a monotone
and/or tree of atoms (atom k true where its indicator g_k < 0, or ≤ 0 when not strict, :mod:`pdsl.backend.hybrid`); it
fires in the step when it is false at the step's start and true at its end (edge-triggered: a condition true at the
start has fired already, or was true from the beginning, and is not armed). Then, as one CasADi graph:

1. each atom that turned true in the step is located on the step's cubic Hermite interpolant
   X(θ) = h₀₀x₀ + h₁₀hf₀ + h₀₁x₁ + h₁₁hf₁ (θ ∈ [0, 1]) by the secant θ₀ = g(0)/(g(0) − g(1)) and ONE Newton step
   θ = θ₀ − g(X(θ₀))/(g_x X'(θ₀) + h g_t), clipped to [0, 1]; the condition's crossing is the max over the atoms of an
   ``and`` and the min over those of an ``or``; the earliest firing event is taken (ties: the first declared);
2. its reset is applied at x(τ) = X(θ), τ = t + θh (the reset reads the values just before, x(τ));
3. the rest of the step, (1 − θ)h, is integrated from τ with the same scheme (time rescaled to a unit step).

Every branch is built and the crossing selects one (``if_else``), so CasADi's AD differentiates the discrete
solution exactly, the event-time term dτ/dp included (θ is a smooth function of x₀, p through x₁, f₀, f₁).

One event per step: a condition that fires again in the rest of the step (events closer together than a step: an
accumulation, Zeno) makes the step's result NaN, as does a ``terminate`` event — the fit counts a non-finite prediction
as a failed evaluation (the trial step is rejected). Rounds of events at one instant are not taken.
"""

from __future__ import annotations

from dataclasses import dataclass

import casadi as ca

from .fixed_step import make_step, rhs_dims

__all__ = ["StepEvents", "StepSwitches", "make_event_step", "make_switch_step"]

_NEVER = 2.0  # the θ of a condition that does not become true in the step


@dataclass(frozen=True)
class StepEvents:
    """The events in the time variable of the step's right-hand side f(t, x, q)."""

    atoms: ca.Function  # (t, x, q) -> g: atom k true where g_k < 0 (strict) or g_k <= 0
    strict: tuple[bool, ...]
    conditions: tuple  # per event: ("atom", k) | ("and" | "or", (subtrees)) — negation normal form
    # per event: (indices of the reset states in x, Function (t, x, q) -> their new values), or None: no reset
    resets: tuple
    terminate: tuple[bool, ...]


def _truth(g, strict: tuple[bool, ...]) -> list:
    return [g[k] < 0 if strict[k] else g[k] <= 0 for k in range(len(strict))]


def _cond(tree, values, combine):
    kind, arg = tree
    if kind == "atom":
        return values[arg]
    subs = [_cond(s, values, combine) for s in arg]
    out = subs[0]
    for s in subs[1:]:
        out = combine[kind](out, s)
    return out


_LOGIC = {"and": ca.logic_and, "or": ca.logic_or}
_THETA = {"and": ca.fmax, "or": ca.fmin}  # a conjunction is true from its last atom's crossing, a disjunction from its first


def _hermite(theta, x0, x1, hf0, hf1):
    """The cubic Hermite interpolant of the step and its derivative in θ."""
    t2, t3 = theta * theta, theta * theta * theta
    X = (2 * t3 - 3 * t2 + 1) * x0 + (t3 - 2 * t2 + theta) * hf0 + (-2 * t3 + 3 * t2) * x1 + (t3 - t2) * hf1
    dX = (6 * t2 - 6 * theta) * x0 + (3 * t2 - 4 * theta + 1) * hf0 + (-6 * t2 + 6 * theta) * x1 + (3 * t2 - 2 * theta) * hf1
    return X, dX


def _locate(dg, k, g0k, g1k, t, h, q, x0, x1, hf0, hf1):
    """θ ∈ [0, 1] where indicator k (``dg(t, x, q) -> (g, g_x, g_t)``) crosses zero on the step's Hermite
    interpolant: the secant, then ONE Newton step (so θ is a smooth function of the step's data)."""
    d = g0k - g1k
    th = ca.fmin(ca.fmax(g0k / ca.if_else(d != 0, d, 1.0), 0.0), 1.0)  # the secant
    X, dX = _hermite(th, x0, x1, hf0, hf1)
    gk, gx, gt = dg(t + th * h, X, q)
    slope = ca.mtimes(gx[k, :], dX) + h * gt[k]
    return ca.fmin(ca.fmax(th - gk[k] / ca.if_else(slope != 0, slope, 1.0), 0.0), 1.0)  # one Newton step


def _indicator_derivatives(fn: ca.Function, name: str, nx: int, nq: int) -> ca.Function:
    """``(t, x, q) -> (g, g_x, g_t)`` of the indicators ``fn(t, x, q) -> g``."""
    sym = ca.SX.sym if fn.is_a("SXFunction") else ca.MX.sym
    ta, xa, qa = sym("t"), sym("x", nx), sym("q", nq)
    ga = fn(ta, xa, qa)
    return ca.Function(name, [ta, xa, qa], [ga, ca.jacobian(ga, xa), ca.jacobian(ga, ta)])


def _rest_step(f, method: str, nx: int, nq: int, extra: int, **step_options) -> ca.Function:
    """One unit step of f(t, x, q) rescaled to the rest of a step: ``rest(0, x, [q; t0; hr])`` integrates
    f from t0 over hr. ``extra`` further entries of q after t0, hr are passed on to f (a mode vector)."""
    fsym = ca.SX.sym if f.is_a("SXFunction") else ca.MX.sym
    s, xs, qe = fsym("s"), fsym("x", nx), fsym("qe", nq + 2 + extra)
    args = [qe[nq] + s * qe[nq + 1], xs, qe[:nq]] + ([qe[nq + 2:]] if extra else [])
    fs = ca.Function("f_rest", [s, xs, qe], [qe[nq + 1] * f(*args)])
    return make_step(fs, method, 1.0, **step_options)


def make_event_step(f: ca.Function, method: str, h: float, events: StepEvents, **step_options) -> ca.Function:
    """``step(t, x, q) -> x_next``: one step of ``method`` (size ``h``) of f(t, x, q) with the events located in it
    (module docstring). Without events it is :func:`pdsl.numerics.make_step`."""
    full = make_step(f, method, h, **step_options)
    if not events.conditions:
        return full
    nx, nq = rhs_dims(f)
    na = len(events.strict)
    resets = [r for r in events.resets if r is not None]
    sx = all(fn.is_a("SXFunction") for fn in [f, full, events.atoms] + [fn for _, fn in resets])
    sym = ca.SX.sym if sx else ca.MX.sym
    # the rest of a step: f rescaled to a unit step from t0 of length hr (q extended by t0, hr)
    rest = _rest_step(f, method, nx, nq, 0, **step_options)
    if not rest.is_a("SXFunction"):
        sym = ca.MX.sym
    dg = _indicator_derivatives(events.atoms, "atoms_dg", nx, nq)  # the atoms with their derivatives in x and t

    t, x0, q = sym("t"), sym("x", nx), sym("q", nq)
    x1 = full(t, x0, q)
    hf0, hf1 = h * f(t, x0, q), h * f(t + h, x1, q)
    g0, g1 = events.atoms(t, x0, q), events.atoms(t + h, x1, q)
    true0, true1 = _truth(g0, events.strict), _truth(g1, events.strict)

    theta_atom = []
    for k in range(na):
        th = _locate(dg, k, g0[k], g1[k], t, h, q, x0, x1, hf0, hf1)
        # when the atom becomes true: θ if it turned true in the step, 0 if true throughout, never if false at the end
        theta_atom.append(ca.if_else(true1[k], ca.if_else(true0[k], 0.0, th), _NEVER))

    fire, theta = [], []
    for tree in events.conditions:
        start = _cond(tree, true0, _LOGIC)
        th = _cond(tree, theta_atom, _THETA)
        fires = ca.logic_and(ca.logic_not(start), th <= 1.0)
        fire.append(fires)
        theta.append(ca.if_else(fires, th, _NEVER))
    first = theta[0]
    for th in theta[1:]:
        first = ca.fmin(first, th)

    def rest_of_step(j):
        th = ca.fmin(theta[j], 1.0)  # (θ = 2 where it does not fire: the branch is not taken, but stays finite)
        X, _ = _hermite(th, x0, x1, hf0, hf1)
        tau = t + th * h
        xp = X
        if events.resets[j] is not None:
            idx, fn = events.resets[j]
            vals = fn(tau, X, q)
            rows = [X[i] for i in range(nx)]
            for r, i in enumerate(idx):
                rows[i] = vals[r]
            xp = ca.vertcat(*rows)
        if events.terminate[j]:  # the run ends here: data after it cannot be compared
            return ca.DM.nan(nx, 1)
        x_end = rest(0.0, xp, ca.vertcat(q, tau, (1.0 - th) * h))
        # a second firing in the rest of the step: events closer than a step (an accumulation): not taken, NaN
        tp, te = _truth(events.atoms(tau, xp, q), events.strict), _truth(events.atoms(t + h, x_end, q), events.strict)
        again = [ca.logic_and(ca.logic_not(_cond(tree, tp, _LOGIC)), _cond(tree, te, _LOGIC)) for tree in events.conditions]
        while len(again) > 1:
            again = [ca.logic_or(again[0], again[1])] + again[2:]
        return ca.if_else(again[0], ca.DM.nan(nx, 1), x_end)

    x_next = x1
    for j in reversed(range(len(events.conditions))):
        x_next = ca.if_else(ca.logic_and(fire[j], theta[j] <= first), rest_of_step(j), x_next)
    return ca.Function(f"{method}_event_step", [t, x0, q], [x_next], ["t", "x", "q"], ["x_next"])


# ---------------------------------------------------------------- switching surfaces (no reset, a mode change)
@dataclass(frozen=True)
class StepSwitches:
    """The switching surfaces of f (pdsl.backend.switching) in the time variable of the step: ``f_modes(t, x, q, m)``
    is f with the modes frozen at m; ``indicators(t, x, q) -> s``; ``kinds[k]`` "if" (mode 1 where s_k < 0, or
    ≤ 0 when not strict, else 0), "sign" (mode sign(s_k), +1 at s_k = 0) or "kink" (no mode: located only);
    ``slide[k](t, x, q, m)`` the Filippov field on surface k (None for a kink); ``rate(t, x, q, m) -> ṡ``."""

    f_modes: ca.Function
    indicators: ca.Function
    kinds: tuple[str, ...]
    strict: tuple[bool, ...]
    slide: tuple
    rate: ca.Function


_BELOW = {"if": 1.0, "sign": -1.0}
_ABOVE = {"if": 0.0, "sign": 1.0}


def _mode_of(kind: str, strict: bool, s):
    """The mode on the side of surface s where the state is."""
    if kind == "if":
        return ca.if_else(s < 0 if strict else s <= 0, 1.0, 0.0)
    return ca.if_else(s < 0, -1.0, 1.0)


def make_switch_step(sw: StepSwitches, method: str, h: float, **step_options) -> ca.Function:
    """``step(t, x, q) -> x_next``: one step of ``method`` (size ``h``) of a right-hand side with switching surfaces,
    the first surface crossed in the step located (LANGUAGE.md §11, "Sensitivities and fitting through events"):

    1. the modes are read from the side of each surface the step starts on, and the step is taken with them frozen;
    2. each surface whose side changed (a kink: whose s changed sign) is located on the step's Hermite interpolant
       (secant and one Newton step, as for an event), the earliest taken;
    3. from τ, the rest of the step is integrated with that surface's mode flipped — or, where the field points into
       the surface from both sides (ṡ⁻ > 0 > ṡ⁺, Coulomb sticking), with the Filippov sliding field.

    A state on the surface (sliding) crosses it at θ = 0 of the next step and slides on; a sliding phase ends where
    the field stops pointing into it from one side (the next step's crossing is then transversal). The jump of the
    sensitivities, s⁺ = s⁻ + (f⁻ − f⁺)·dτ/dp, is what AD of this graph gives: τ is a smooth function of the step's
    data and each branch is smooth. One surface per step is located; a second crossing in the rest of the step is
    stepped through."""
    f = sw.f_modes
    if f.n_in() != 4:
        raise ValueError("f_modes must map (t, x, q, m) to xdot")
    nx, nq, n = f.sparsity_in(1).numel(), f.sparsity_in(2).numel(), f.sparsity_in(3).numel()
    if not n:
        raise ValueError("no switching surfaces: use make_step")
    fsym = ca.SX.sym if f.is_a("SXFunction") else ca.MX.sym
    tq, xq, qm = fsym("t"), fsym("x", nx), fsym("qm", nq + n)
    f_qm = ca.Function("f_qm", [tq, xq, qm], [f(tq, xq, qm[:nq], qm[nq:])])  # the modes appended to q
    full = make_step(f_qm, method, h, **step_options)
    rest = _rest_step(f, method, nx, nq, n, **step_options)
    slides = [None if fn is None else _rest_step(fn, method, nx, nq, n, **step_options) for fn in sw.slide]
    graphs = [f, full, rest, sw.indicators, sw.rate] + [fn for fn in slides if fn is not None]
    sym = ca.SX.sym if all(g.is_a("SXFunction") for g in graphs) else ca.MX.sym
    ds = _indicator_derivatives(sw.indicators, "switches_ds", nx, nq)

    t, x0, q = sym("t"), sym("x", nx), sym("q", nq)
    s0 = sw.indicators(t, x0, q)
    m0 = ca.vertcat(*[0.0 if kind == "kink" else _mode_of(kind, sw.strict[k], s0[k]) for k, kind in enumerate(sw.kinds)])
    x1 = full(t, x0, ca.vertcat(q, m0))
    hf0, hf1 = h * f(t, x0, q, m0), h * f(t + h, x1, q, m0)
    s1 = sw.indicators(t + h, x1, q)
    theta = []
    for k, kind in enumerate(sw.kinds):
        crossed = s0[k] * s1[k] < 0 if kind == "kink" else _mode_of(kind, sw.strict[k], s1[k]) != m0[k]
        theta.append(ca.if_else(crossed, _locate(ds, k, s0[k], s1[k], t, h, q, x0, x1, hf0, hf1), _NEVER))
    first = theta[0]
    for th in theta[1:]:
        first = ca.fmin(first, th)

    def rest_of_step(j):
        th = ca.fmin(theta[j], 1.0)
        X, _ = _hermite(th, x0, x1, hf0, hf1)
        tau = t + th * h
        kind = sw.kinds[j]
        if kind == "kink":  # no mode: the step is split at the kink for accuracy
            return rest(0.0, X, ca.vertcat(q, tau, (1.0 - th) * h, m0))
        m1 = ca.vertcat(*[(_BELOW[kind] + _ABOVE[kind]) - m0[i] if i == j else m0[i] for i in range(n)])
        qe = ca.vertcat(q, tau, (1.0 - th) * h, m1)
        crossing = rest(0.0, X, qe)
        below = ca.vertcat(*[_BELOW[kind] if i == j else m0[i] for i in range(n)])
        above = ca.vertcat(*[_ABOVE[kind] if i == j else m0[i] for i in range(n)])
        into = ca.logic_and(sw.rate(tau, X, q, below)[j] > 0, sw.rate(tau, X, q, above)[j] < 0)
        return ca.if_else(into, slides[j](0.0, X, qe), crossing)

    x_next = x1
    for j in reversed(range(n)):
        x_next = ca.if_else(ca.logic_and(theta[j] <= 1.0, theta[j] <= first), rest_of_step(j), x_next)
    return ca.Function(f"{method}_switch_step", [t, x0, q], [x_next], ["t", "x", "q"], ["x_next"])
