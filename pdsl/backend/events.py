"""Switches of a model in time: the conditions of ``if ... then ... else`` that depend on ``t`` alone.

A condition such as ``t < 1`` (or ``t >= t_on``, ``sin(w*t) > 0``, with parameters) changes its truth
value at instants that do not depend on the solution, so the integrator can be stopped there
(:func:`switch_times`, used by :func:`pdsl.sim.simulate.simulate`). Between two such instants the
mode is frozen: the right-hand side is evaluated with these conditions at a *mode time* ``t_mode``
(the middle of the interval) instead of ``t``, so that even the integrator's last evaluation at the
end of the interval sees the branch of that interval, not the next one.

A condition that depends on the state (``abs(x) < 1``) is not a switch in this sense: the
integrator steps through it under its error control (docs/language.md, "Conditionals").

The sympy part (:func:`time_conditions`, :func:`mode_substitution`) serves
:func:`pdsl.backend.functions.to_casadi` and ``--input`` expressions; :func:`switch_times` finds the
roots numerically from a CasADi Function of (t, p).
"""

from __future__ import annotations

import math

import numpy as np
import sympy as sp

from .. import symbols as S

__all__ = ["MODE_TIME", "time_conditions", "mode_substitution", "switch_functions", "switch_times"]

# The time at which time-only conditions are evaluated (a name no model can spell).
MODE_TIME = sp.Symbol("t·mode", real=True)

_RELATIONAL = sp.core.relational.Relational


def relationals(exprs) -> set:
    """Every comparison in ``exprs``, each shared subexpression visited once (a sympy preorder traversal visits
    every occurrence, which is exponential in the depth of shared subtrees of large multibody rows)."""
    out: set = set()
    seen: set = set()
    stack = [e for e in exprs if isinstance(e, sp.Basic)]
    while stack:
        e = stack.pop()
        if e in seen or e.is_Atom:
            continue
        seen.add(e)
        if isinstance(e, _RELATIONAL):
            out.add(e)
        stack.extend(e.args)
    return out


def time_conditions(exprs, fixed: set) -> list:
    """The comparisons in ``exprs`` that depend on ``t`` and otherwise only on ``fixed`` symbols (parameters)."""
    allowed = set(fixed) | {S.TIME}
    out: list = []
    for r in relationals(exprs):
        fs = r.free_symbols
        if S.TIME in fs and fs <= allowed and not r.has(sp.core.function.AppliedUndef, sp.Derivative):
            out.append(r)
    return sorted(out, key=sp.default_sort_key)


def mode_substitution(conditions) -> dict:
    """``{t < 1: t·mode < 1, ...}``: the conditions evaluated at the mode time."""
    return {r: r.xreplace({S.TIME: MODE_TIME}) for r in conditions}


def switch_functions(conditions) -> list:
    """g(t, p) per condition: its truth value changes where g changes sign (lhs − rhs)."""
    return [r.lhs - r.rhs for r in conditions]


def switch_times(switches, p: np.ndarray, t0: float, t1: float, *, samples: int = 4000) -> list[float]:
    """The instants in (t0, t1) where a switch function ``switches(t, p) -> g`` (CasADi) changes sign.

    g is sampled at ``samples`` + 1 equally spaced times; each sign change is refined by Brent's
    method to machine precision, and a sample where g is exactly zero is a switch itself. A switch
    function that changes sign twice between two samples (faster than (t1 − t0)/samples) is missed.
    """
    from scipy.optimize import brentq

    n = switches.size1_out(0)
    if n == 0 or not t1 > t0:
        return []
    ts = np.linspace(t0, t1, samples + 1)
    G = np.asarray(switches.map(len(ts))(ts[None, :], np.tile(np.asarray(p, dtype=float)[:, None], len(ts))))
    G = G.reshape(n, len(ts))
    roots: list[float] = []
    for k in range(n):
        g = G[k]

        def f(s, k=k):
            return float(np.asarray(switches(s, p)).ravel()[k])

        for i in range(len(ts) - 1):
            a, b = g[i], g[i + 1]
            if not (math.isfinite(a) and math.isfinite(b)):
                continue
            if a == 0.0:
                roots.append(float(ts[i]))
            elif a * b < 0:
                roots.append(float(brentq(f, ts[i], ts[i + 1], xtol=1e-15, rtol=4 * np.finfo(float).eps, maxiter=200)))
    tol = 1e-12 * max(1.0, abs(t0), abs(t1))
    out: list[float] = []
    for r in sorted(roots):
        if t0 + tol < r < t1 - tol and (not out or r - out[-1] > tol):
            out.append(r)
    return out
