"""The operating point of a linearization (LANGUAGE.md §12): given values, start values, or a steady-state solve.

``--at NAME=VALUE`` names a state or a shown column (``b.vx`` of a Cartesian body in the momentum formulation) and
``--input NAME=VALUE`` an exogenous input; a value is a number or a constant expression of the parameters in the
model's expression language (``pi``, ``-l[1]``), parsed by the model grammar and never evaluated as Python. What is
not given comes from the start values (inputs: 0), projected onto the constraints, or with ``trim`` from a
Gauss–Newton solve of ẋ = 0 (with the algebraic equations, the invariants and the given shown columns) whose
minimum-norm steps start from the start values: it moves the unknowns as little as the equations need, and an
unknown that the equations do not determine (a cart's position) keeps its start value and is reported.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import replace

import casadi as ca
import numpy as np

from ..backend.functions import NumericSystem
from ..diagnostics import PdslError
from ..records import record

__all__ = ["OperatingPoint", "PointValue", "parse_value", "operating_point"]

TRIM_TOL = 1e-10  # trim: converged when max |residual| ≤ TRIM_TOL · (1 + max |unknown|)
_TRIM_STEPS = 200
_NULL_TOL = 1e-7  # an unknown with a null-space component above this (unit vectors) is undetermined


@record(kw_only=False, slots=False)
class PointValue:
    """A value of ``--at``/``--input``: the number, and the sympy expression it was written as (``pi``), which the
    symbolic matrices keep exact; None for a value a solver found."""

    value: float
    expr: object = None


@record(kw_only=False, slots=False)
class OperatingPoint:
    """Where a system is linearized: states x, algebraic variables z, exogenous inputs u, parameters p at time t.

    ``given``: the names whose values were given; ``trimmed``: the unknowns a steady-state solve found;
    ``undetermined``: those it could not determine (they kept their start values); ``exact``: the sympy
    expressions of the given values (by state or input name); ``moved``: states the projection onto the
    constraints changed, (name, before, after)."""

    t: float
    x: np.ndarray
    z: np.ndarray
    u: np.ndarray
    p: np.ndarray
    given: tuple[str, ...] = ()
    trimmed: tuple[str, ...] = ()
    undetermined: tuple[str, ...] = ()
    exact: tuple[tuple[str, object], ...] = ()
    moved: tuple[tuple[str, float, float], ...] = ()
    trim_iterations: int = 0


# ---------------------------------------------------------------- values of the options
def parse_value(num: NumericSystem, option: str, text: str, params: np.ndarray) -> PointValue:
    """A number (``0.5``), or a constant expression of the parameters (``pi``, ``2*pi/3``, ``-l[1]``) parsed with
    the model grammar; its value uses the parameter values ``params``."""
    from ..data.csvio import strict_float

    try:
        v = strict_float(text)
        import sympy as sp

        return PointValue(v, sp.Float(v) if v != int(v) else sp.Integer(int(v)))
    except ValueError:
        pass
    import sympy as sp

    from ..parse.parser import parse_expression
    from ..resolve.expressions import Evaluator, Scope

    sys_ = num.system
    try:
        expr = Evaluator(Scope(_param_scope(sys_.params))).scalar(parse_expression(text, option), option)
    except PdslError as err:  # the resolver's hints speak of declarations: say what a value may name here
        names = ", ".join(q.name for q in sys_.params[:30])
        raise PdslError([replace(d, hint=f"a value is a number or a constant expression of the parameters "
                                          f"({names or 'none'}) and pi") if d.code == "UnknownName" else d
                         for d in err.diagnostics]) from None
    values = {q.symbol: sp.Float(float(params[k]), 17) for k, q in enumerate(sys_.params)}
    try:
        v = float(expr.xreplace(values).evalf())
    except TypeError:
        v = float("nan")
    if not np.isfinite(v):
        raise PdslError.at("BadOperatingPoint", f"{option}: `{text[:80]}` is not a finite number",
                           hint="a number, or a constant expression of the parameters such as pi/2 or -l[1]")
    return PointValue(v, expr)


def _param_scope(params) -> dict:
    """Scalar parameters by name, array parameters (``m[1]``, ``m[2]``) as arrays ``m``."""
    from ..resolve.expressions import IndexedArray

    names, arrays = {}, {}
    for q in params:
        m = re.fullmatch(r"(\w+)\[(\d+)\]", q.name)
        if m:
            arrays.setdefault(m.group(1), []).append((int(m.group(2)), q.symbol))
        else:
            names[q.name] = q.symbol
    for base, items in arrays.items():
        items.sort()
        names[base] = IndexedArray(base, items[0][0], tuple(s for _, s in items),
                                   indices=tuple(i for i, _ in items), what="parameter array")
    return names


def _check_names(num: NumericSystem, at: Mapping, inputs: Mapping) -> None:
    """Every ``--at`` name a state or shown column, every ``--input`` name an exogenous input: collected, raised
    once, each with what the name is instead when it is something else."""
    from ..diagnostics import Collector

    states = list(dict.fromkeys([*num.x_names, *num.report_names]))
    params = set(num.p_names)
    laws = {u.name for u in num.system.inputs if u.law is not None}
    bad = Collector()
    for name in at:
        if name in states:
            continue
        if name in num.u_names or name in laws:
            hint = f"`{name}` is an input: give it with --input {name}=VALUE"
        elif name in params:
            hint = f"`{name}` is a parameter: give it with --param {name}=VALUE"
        else:
            hint = "states: " + ", ".join(states[:40]) + (", …" if len(states) > 40 else "")
        bad.error("BadOperatingPoint", f"--at {name}: `{name}` is not a state of {num.system.name}", hint=hint)
    for name in inputs:
        if name in num.u_names:
            continue
        if name in laws:
            hint = (f"`{name}` is computed by the model's feedback law; --open-loop makes it a free input")
        else:
            hint = "exogenous inputs: " + (", ".join(num.u_names) or "none")
        bad.error("BadOperatingPoint", f"--input {name}: the model has no exogenous input `{name}`", hint=hint)
    bad.raise_if_any()


# ---------------------------------------------------------------- the point
def operating_point(num: NumericSystem, at: Mapping[str, PointValue] | None = None,
                    inputs: Mapping[str, PointValue] | None = None, *, params: np.ndarray | None = None,
                    trim: bool = False, t: float = 0.0) -> OperatingPoint:
    """The operating point of ``num``: given values, the rest from the start values (projected onto the
    constraints), or with ``trim`` from the steady-state solve."""
    at, inputs = dict(at or {}), dict(inputs or {})
    _check_names(num, at, inputs)
    p = num.p_default.copy() if params is None else np.asarray(params, dtype=float)
    u = np.zeros(len(num.u_names))
    for name, v in inputs.items():
        u[num.u_names.index(name)] = v.value
    exact = tuple((n, v.expr) for n, v in {**at, **inputs}.items() if v.expr is not None)
    given = tuple(at) + tuple(inputs)
    if trim:
        return _trim(num, at, inputs, p, u, t, exact, given)
    from ..sim.initial import Projector, initial_state

    x = initial_state(num, {n: v.value for n, v in at.items()}, p, t)
    moved: tuple = ()
    if num.invariants.size1_out(0):
        proj = Projector(num).project(x, p, t, keep=[n for n in at if n in num.x_names])
        x, moved = proj.x, proj.changes
        gone = {n for n, _, _ in moved}
        exact = tuple((n, e) for n, e in exact if n not in gone)  # a given value the projection moved is not exact
    z = _algebraic(num, x, u, p, t)
    return OperatingPoint(t=t, x=x, z=z, u=u, p=p, given=given, exact=exact, moved=moved)


def _algebraic(num: NumericSystem, x, u, p, t) -> np.ndarray:
    """z with g(t, x, z, p, u) = 0 (Newton from the start values); the start values of an ODE's (empty) z."""
    z = num.z_start.copy()
    if not num.nz:
        return z
    T = ca.SX if num.kind == "SX" else ca.MX
    zs = T.sym("z", num.nz)
    g = num.dae(t, x, zs, p, u)[1]
    f = ca.Function("g", [zs], [g, ca.jacobian(g, zs)])
    for _ in range(50):
        gv, J = (np.asarray(v, dtype=float) for v in f(z))
        gv = gv.ravel()
        if np.max(np.abs(gv)) <= 1e-13 * (1 + np.max(np.abs(z))):
            return z
        z = z - np.linalg.lstsq(J, gv, rcond=None)[0]
    if not np.max(np.abs(gv)) <= 1e-8 * (1 + np.max(np.abs(z))):
        worst = int(np.argmax(np.abs(gv)))
        eq = num.system.algebraic[worst]
        raise PdslError.at("BadOperatingPoint", f"the algebraic equations have no solution at this operating point "
                           f"(residual {gv[worst]:.3g} in this equation)", eq.origin,
                           "choose another operating point (--at), or --trim")
    return z


def _trim(num, at, inputs, p, u, t, exact, given) -> OperatingPoint:
    """Gauss–Newton with minimum-norm steps on (ẋ, g, invariants, shown columns − given values) = 0 in the states
    and inputs not given and the algebraic variables, from the start values (projected first, where the start
    violates the constraints: a body at the origin has no constraint gradient to step along)."""
    from ..sim.initial import Projector, initial_state

    x0 = initial_state(num, {n: v.value for n, v in at.items() if n in num.x_names}, p, t)
    held_states = [n for n in at if n in num.x_names]
    shown = {n: v.value for n, v in at.items() if n not in num.x_names}
    if num.invariants.size1_out(0):
        x0 = Projector(num).project(x0, p, t, keep=held_states).x
    free_x = [i for i, n in enumerate(num.x_names) if n not in at]
    free_u = [i for i, n in enumerate(num.u_names) if n not in inputs]
    names = [num.x_names[i] for i in free_x] + list(num.z_names) + [num.u_names[i] for i in free_u]
    residual = _trim_residual(num, p, t, shown, free_x, free_u)
    w = np.concatenate([x0[free_x], num.z_start, u[free_u]])
    base_x, base_u = x0.copy(), u.copy()
    w, r, J, steps = _gauss_newton(residual, w, base_x, base_u)
    x, z, u = _unpack(w, base_x, base_u, free_x, free_u, num.nz)
    tol = TRIM_TOL * (1 + max(float(np.max(np.abs(v), initial=0.0)) for v in (x, z, u)))
    if not (r.size == 0 or np.max(np.abs(r)) <= tol):
        raise _no_steady_state(num, r, steps, shown, given)
    undetermined = _undetermined(J, names)
    return OperatingPoint(t=t, x=x, z=z, u=u, p=p, given=given, exact=exact,
                          trimmed=tuple(n for n in names if n not in undetermined),
                          undetermined=undetermined, trim_iterations=steps)


def _trim_residual(num, p, t, shown: dict, free_x, free_u) -> ca.Function:
    """(w, x_held, u_held) -> (r, dr/dw): ẋ, g, the invariants and the given shown columns, in the unknowns w."""
    T = ca.SX if num.kind == "SX" else ca.MX
    xs, us = T.sym("x", num.nx), T.sym("u", len(num.u_names))
    nfx, nfu = len(free_x), len(free_u)
    w = T.sym("w", nfx + num.nz + nfu)
    x = ca.vertcat(*[w[free_x.index(i)] if i in free_x else xs[i] for i in range(num.nx)]) if num.nx else xs
    z = w[nfx:nfx + num.nz]
    u = ca.vertcat(*[w[nfx + num.nz + free_u.index(i)] if i in free_u else us[i] for i in range(len(num.u_names))]) \
        if num.u_names else us
    xdot, g = num.dae(t, x, z, p, u)
    parts = [xdot, g, num.invariants(t, x, p)]
    if shown:
        y = num.report(t, x, p)
        parts.append(ca.vertcat(*[y[num.report_names.index(n)] - v for n, v in shown.items()]))
    r = ca.vertcat(*parts)
    return ca.Function("trim", [w, xs, us], [r, ca.jacobian(r, w)])


def _gauss_newton(residual, w, x, u):
    """Minimum-norm Gauss–Newton steps (least squares, so a singular Jacobian takes the smallest step), halved
    until the residual decreases; stops when no step decreases it."""
    def ev(v):
        r, J = residual(v, x, u)
        return np.asarray(r, dtype=float).ravel(), np.asarray(J, dtype=float)

    r, J = ev(w)
    steps = 0
    for steps in range(1, _TRIM_STEPS + 1):
        if r.size == 0 or not np.all(np.isfinite(r)) or np.max(np.abs(r)) <= 0.01 * TRIM_TOL * (1 + np.max(np.abs(w), initial=0)):
            break
        dw = -np.linalg.lstsq(J, r, rcond=None)[0]
        norm, alpha = float(np.linalg.norm(r)), 1.0
        while alpha > 1e-6:
            r_new, J_new = ev(w + alpha * dw)
            if np.all(np.isfinite(r_new)) and np.linalg.norm(r_new) < norm:
                break
            alpha /= 2
        else:
            break
        w = w + alpha * dw
        r, J = r_new, J_new
    return w, r, J, steps


def _unpack(w, x, u, free_x, free_u, nz):
    x, u = x.copy(), u.copy()
    x[free_x] = w[:len(free_x)]
    z = w[len(free_x):len(free_x) + nz]
    u[free_u] = w[len(free_x) + nz:]
    return x, np.asarray(z, dtype=float), u


def _undetermined(J, names) -> tuple[str, ...]:
    """The unknowns along which the equations' Jacobian has a null direction (a cyclic coordinate)."""
    if J.size == 0:
        return tuple(names)
    _, s, vt = np.linalg.svd(J)
    rank = int(np.sum(s > 1e-9 * max(s[0], 1.0))) if s.size else 0
    null = vt[rank:]
    return tuple(n for k, n in enumerate(names) if null.size and np.linalg.norm(null[:, k]) > _NULL_TOL)


def _no_steady_state(num, r, steps, shown, given) -> PdslError:
    """TrimFailed at the equation whose residual is largest: a state's rate (its declaration), an algebraic equation,
    an invariant (its constraint) or a given shown column."""
    nx, nz = num.nx, num.nz
    ni = num.invariants.size1_out(0)
    k = int(np.nanargmax(np.abs(np.nan_to_num(r, nan=np.inf))))
    sys_ = num.system
    if k < nx:
        what, span = f"der({num.x_names[k]}) = {r[k]:.6g}", sys_.states[k].span
    elif k < nx + nz:
        eq = sys_.algebraic[k - nx]
        what, span = f"the algebraic equation's residual is {r[k]:.6g}", eq.origin
    elif k < nx + nz + ni:
        c = sys_.invariants[k - nx - nz]
        what, span = f"the constraint's residual is {r[k]:.6g}", c.origin
    else:
        name = list(shown)[k - nx - nz - ni]
        what, span = f"`{name}` misses its given value by {r[k]:.6g}", None
    held = ", ".join(given) if given else "nothing"
    return PdslError.at(
        "TrimFailed", f"--trim: no steady state of {sys_.name} found: after {steps} Gauss–Newton steps the largest "
        f"residual is {what}", span,
        f"held fixed: {held}; a steady state needs every rate to vanish with these values — free some of them, "
        "or linearize at a point of your choice without --trim (a point that is not an equilibrium is reported)")
