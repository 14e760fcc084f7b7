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

__all__ = ["StepEvents", "make_event_step"]

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
    fsym = ca.SX.sym if f.is_a("SXFunction") else ca.MX.sym
    # the rest of a step: f rescaled to a unit step from t0 of length hr (q extended by t0, hr)
    s, xs, qe = fsym("s"), fsym("x", nx), fsym("qe", nq + 2)
    fs = ca.Function("f_rest", [s, xs, qe], [qe[nq + 1] * f(qe[nq] + s * qe[nq + 1], xs, qe[:nq])])
    rest = make_step(fs, method, 1.0, **step_options)
    if not rest.is_a("SXFunction"):
        sym = ca.MX.sym
    # the atoms with their derivatives in x and t
    asym = ca.SX.sym if events.atoms.is_a("SXFunction") else ca.MX.sym
    ta, xa, qa = asym("t"), asym("x", nx), asym("q", nq)
    ga = events.atoms(ta, xa, qa)
    dg = ca.Function("atoms_dg", [ta, xa, qa], [ga, ca.jacobian(ga, xa), ca.jacobian(ga, ta)])

    t, x0, q = sym("t"), sym("x", nx), sym("q", nq)
    x1 = full(t, x0, q)
    hf0, hf1 = h * f(t, x0, q), h * f(t + h, x1, q)
    g0, g1 = events.atoms(t, x0, q), events.atoms(t + h, x1, q)
    true0, true1 = _truth(g0, events.strict), _truth(g1, events.strict)

    theta_atom = []
    for k in range(na):
        d = g0[k] - g1[k]
        th = ca.fmin(ca.fmax(g0[k] / ca.if_else(d != 0, d, 1.0), 0.0), 1.0)  # the secant
        X, dX = _hermite(th, x0, x1, hf0, hf1)
        gk, gx, gt = dg(t + th * h, X, q)
        slope = ca.mtimes(gx[k, :], dX) + h * gt[k]
        th = ca.fmin(ca.fmax(th - gk[k] / ca.if_else(slope != 0, slope, 1.0), 0.0), 1.0)  # one Newton step
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
