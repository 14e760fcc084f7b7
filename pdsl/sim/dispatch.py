"""Which integrator runs a trajectory: CVODES/IDAS over the whole grid (their built integrators kept for a repeated
run), the compiled DOP853 (:mod:`pdsl.sim.native`, or :mod:`pdsl.sim.auto` with its hand-over to CVODES), a
fixed-step rollout of :mod:`pdsl.numerics`, segment by segment between switch times, or interval by interval with
a projection after each (``--stabilize project``). The integrators' families come from :mod:`pdsl.vocab`.

Models with events or located switching surfaces go through :mod:`pdsl.sim.hybrid` instead.
"""

from __future__ import annotations

import casadi as ca
import numpy as np

from ..vocab import FIXED_STEP, NATIVE, SUNDIALS
from .runs import (
    STEPS_FIRST,
    SUNDIALS_PLUGINS,
    _dae_exprs,
    _native_for,
    _native_runs,
    _power_expr,
    _quiet_call,
    _run_sundials,
    _Setup,
    _sundials,
)


def _integrate(num, grid, X0, st: _Setup, threads: int = 1) -> list[tuple[np.ndarray, np.ndarray]]:
    """Trajectories (len(grid) × nx states, len(grid) × nz algebraics) for each row of X0."""
    if st.stabilize != "project" and st.integrator in SUNDIALS and not st.switches:
        return _integrate_sundials(num, grid, X0, st, threads)
    if st.stabilize != "project" and st.integrator in NATIVE and not st.switches:
        if st.auto:
            from .auto import integrate

            return integrate(num, grid, X0, st, threads)
        return _integrate_native(num, grid, X0, st, threads)
    t, x, z, P, xdot, g = _dae_exprs(num, st, tuple(st.inputs[name].fn for name in num.u_names))
    n = X0.shape[0]
    if st.stabilize == "project":
        return [_integrate_projected(num, grid, x0, st, t, x, z, P, xdot, g) for x0 in X0]
    if st.integrator in FIXED_STEP:
        from ..numerics.fixed_step import make_rollout

        h = float(grid[1] - grid[0]) / st.substeps
        quad = bool(st.quad.get("want")) and n == 1
        if quad:  # ∫ power dt as one more state of the scheme: its own stages and steps (the states do not depend on it)
            q = type(x).sym("q")
            f = ca.Function("f", [t, ca.vertcat(x, q), P],
                            [ca.vertcat(xdot, _power_expr(num, tuple(st.inputs[k].fn for k in num.u_names), t, x, z, P))])
            X0 = np.column_stack([X0, np.zeros(n)])
        else:
            f = ca.Function("f", [t, x, P], [xdot])
        rollout = make_rollout(f, st.integrator, h, (len(grid) - 1) * st.substeps)
        F = rollout.map(n, "thread", threads) if n > 1 else rollout
        steps = (len(grid) - 1) * st.substeps
        out = np.asarray(_quiet_call(num, st, F, float(grid[0]), X0.T, st.p))  # nx × (steps · n), run after run
        if quad:
            st.quad.update(Q=[np.concatenate([[0.0], out[-1, st.substeps - 1 :: st.substeps]])],
                           how=f"one more state of {st.integrator}")
            out, X0 = out[:-1], X0[:, :-1]
        runs = []
        for k in range(n):
            Xk = out[:, k * steps : (k + 1) * steps]
            Xk = np.column_stack([X0[k], Xk[:, st.substeps - 1 :: st.substeps]]).T
            runs.append((Xk, np.zeros((len(grid), 0))))
        return runs
    return _integrate_segments(num, grid, X0, st, t, x, z, P, threads)


# CVODES/IDAS integrators built in this process, for a repeated simulate of the same system on the same grid
# (a sweep, a benchmark): building one costs ~1 ms (double pendulum) to ~8 ms (5-link chain, with the
# Jacobian and the key of its compiled library). Keyed by the identity of the system's dae Function and of the
# input signals (kept in the entry and compared with ``is``), the options and the grid.
_INTEGRATORS: dict = {}
_INTEGRATORS_MAX = 16


def _main_integrator(num, grid, X0, st: _Setup, steps: int = STEPS_FIRST):
    from . import compiled

    sigs = tuple(st.inputs[name].fn for name in num.u_names)
    objs = (num.dae, *sigs)
    quad = bool(st.quad.get("want"))
    key = (tuple(id(o) for o in objs), num.kind, st.integrator, st.iteration, st.rtol, st.atol, steps, quad,
           st.rhs.mode if st.rhs is not None else None,
           str(getattr(st.rhs.cache, "root", "")) if st.rhs is not None else "", grid.tobytes())
    hit = _INTEGRATORS.get(key)
    if hit is not None and all(a is b for a, b in zip(hit["objs"], objs)) and hit["generation"] in (None, compiled.generation()):
        if st.rhs is not None:
            st.rhs.compiled, st.rhs.reason = hit["compiled"], hit["reason"]
        return hit["F"]
    t, x, z, P, xdot, g = _dae_exprs(num, st, sigs)
    F = _sundials(num, st, t, x, z, P, xdot, g, float(grid[0]), [float(v) for v in grid], (X0[0], st.p, num.z_start),
                  steps, quad=_power_expr(num, sigs, t, x, z, P) if quad else None)
    rhs = st.rhs
    if len(_INTEGRATORS) >= _INTEGRATORS_MAX:
        _INTEGRATORS.pop(next(iter(_INTEGRATORS)))
    _INTEGRATORS[key] = {"objs": objs, "F": F, "compiled": rhs.compiled if rhs else None, "reason": rhs.reason if rhs else "",
                         # a VM run chosen by the auto rule is redone once a library gets built in this process
                         "generation": compiled.generation() if rhs is not None and rhs.mode == "auto" and not rhs.compiled
                         else None}
    return F


def _integrate_native(num, grid, X0, st: _Setup, threads: int):
    sigs = tuple(st.inputs[name].fn for name in num.u_names)
    t, x, _, P, xdot, _ = _dae_exprs(num, st, sigs)
    nat = _native_for(st, t, x, P, xdot, (num.dae, *sigs))
    m = len(grid)
    return [(X, np.zeros((m, 0))) for X in _native_runs(num, st, nat, X0, st.p, grid, threads)]


def _integrate_sundials(num, grid, X0, st: _Setup, threads: int):
    n = X0.shape[0]

    def run(steps):
        F = _main_integrator(num, grid, X0, st, steps)
        if n == 1:
            return F(x0=X0[0], p=st.p, z0=num.z_start)
        return F.map(n, "thread", threads)(x0=X0.T, p=st.p, z0=np.tile(num.z_start[:, None], n))

    res = _run_sundials(num, st, run, [float(v) for v in grid])
    if n == 1:
        if st.quad.get("want"):  # ∫ power dt, integrated by the solver with the states (a quadrature)
            st.quad.update(Q=[np.asarray(res["qf"], dtype=float).ravel()],
                           how=f"{SUNDIALS_PLUGINS[st.integrator][0].upper()} quadrature")
        return [(np.asarray(res["xf"]).T, np.asarray(res["zf"]).T if num.nz else np.zeros((len(grid), 0)))]
    xf = np.asarray(res["xf"])  # nx × (len(grid) · n), trajectory after trajectory
    zf = np.asarray(res["zf"])
    m = len(grid)
    return [
        (xf[:, k * m : (k + 1) * m].T, zf[:, k * m : (k + 1) * m].T if num.nz else np.zeros((m, 0)))
        for k in range(n)
    ]


def _integrate_segments(num, grid, X0, st: _Setup, t, x, z, P, threads):
    """CVODES/IDAS from switch to switch (st.switches): each segment is a fresh integration that ends exactly
    at the switch, with the conditions on t alone (of the model and of --input expressions) frozen at their
    value inside the segment (its middle)."""
    tm = type(x).sym("t_mode")
    sigs = [st.inputs[name] for name in num.u_names]
    u = ca.vertcat(*[sig.fn_mode(t, tm, x, P) if getattr(sig, "fn_mode", None) is not None else sig.fn(t, x, P)
                     for sig in sigs]) if sigs else type(x)(0, 1)
    xdot, g = num.dae_modes(t, tm, x, z, P, u) if num.dae_modes is not None else num.dae(t, x, z, P, u)
    n, m = X0.shape[0], len(grid)
    tol = 1e-12 * max(1.0, abs(float(grid[0])), abs(float(grid[-1])))
    edges = [float(grid[0]), *st.switches, float(grid[-1])]
    Xs = np.zeros((n, m, num.nx))
    Zs = np.zeros((n, m, num.nz))
    Xs[:, 0], Zs[:, 0] = X0, num.z_start
    xa, za = X0.T.copy(), np.tile(num.z_start[:, None], n)
    nat = _native_for(st, t, x, ca.vertcat(P, tm), xdot) if st.integrator in NATIVE else None
    for a, b in zip(edges[:-1], edges[1:]):
        inside = [k for k in range(1, m) if a + tol < grid[k] < b - tol]
        at_end = [k for k in range(1, m) if abs(grid[k] - b) <= tol]
        tout = [float(grid[k]) for k in inside] + [b]
        if nat is not None:  # an ODE (native integrators refuse DAEs)
            runs = _native_runs(num, st, nat, xa.T, np.append(st.p, 0.5 * (a + b)), [a, *tout], threads)
            xf = np.stack([X[1:].T for X in runs], axis=1)  # nx × n × len(tout)
            zf = np.zeros((0, n, len(tout)))
        else:
            def run(steps, a=a, b=b, tout=tout, xa=xa, za=za):
                F = _sundials(num, st, t, x, z, ca.vertcat(P, tm), xdot, g, a, tout,
                              (xa[:, 0], np.append(st.p, 0.5 * (a + b)), za[:, 0], (edges[-1] - edges[0]) / (b - a)),
                              steps)
                if n > 1:
                    F = F.map(n, "thread", threads)
                return F(x0=xa, p=np.append(st.p, 0.5 * (a + b)), z0=za)

            res = _run_sundials(num, st, run, [a, *tout])
            xf = np.asarray(res["xf"]).reshape(num.nx, n, len(tout)) if n > 1 else np.asarray(res["xf"])[:, None, :]
            zf = (np.asarray(res["zf"]).reshape(num.nz, n, len(tout)) if n > 1 else np.asarray(res["zf"])[:, None, :]) \
                if num.nz else np.zeros((0, n, len(tout)))
        for j, k in enumerate(inside + at_end[:1]):
            Xs[:, k] = xf[:, :, j if k in inside else -1].T
            Zs[:, k] = zf[:, :, j if k in inside else -1].T
        xa, za = xf[:, :, -1], zf[:, :, -1]
    return [(Xs[i], Zs[i]) for i in range(n)]


def _integrate_projected(num, grid, x0, st, t, x, z, P, xdot, g):
    """Integrate interval by interval, projecting onto the invariants after each one."""
    from .initial import Projector

    proj = Projector(num)
    T = type(x)
    s, tk = T.sym("s"), T.sym("tk")
    local = ca.Function("local", [t, x, z, P], [xdot, g])
    xd, gg = local(tk + s, x, z, P)
    dt = float(grid[1] - grid[0])
    X, Z = [np.array(x0, dtype=float)], [num.z_start.copy()]
    if st.integrator in NATIVE:
        nat = _native_for(st, s, x, ca.vertcat(P, tk), xd)
        for k in range(len(grid) - 1):
            xk = _native_runs(num, st, nat, X[-1], np.append(st.p, grid[k]), [0.0, dt], 1)[0][-1]
            X.append(proj.project(xk, st.p, float(grid[k + 1])).x)
        return np.array(X), np.zeros((len(grid), 0))
    if st.integrator in FIXED_STEP:
        from ..numerics.fixed_step import make_step

        step = make_step(ca.Function("f", [s, x, ca.vertcat(P, tk)], [xd]), st.integrator, dt / st.substeps)
        for k in range(len(grid) - 1):
            xk = X[-1]
            for j in range(st.substeps):
                xk = np.asarray(_quiet_call(num, st, step, j * dt / st.substeps, xk, np.append(st.p, grid[k]))).ravel()
            X.append(proj.project(xk, st.p, float(grid[k + 1])).x)
            Z.append(Z[-1])
        return np.array(X), np.zeros((len(grid), 0))
    built: dict = {}

    def run(steps, k=0):
        if steps not in built:
            built[steps] = _sundials(num, st, s, x, z, ca.vertcat(P, tk), xd, gg, 0.0, [dt],
                                     (X[0], np.append(st.p, grid[0]), Z[0], len(grid) - 1), steps)
        return built[steps](x0=X[-1], p=np.append(st.p, grid[k]), z0=Z[-1])

    for k in range(len(grid) - 1):
        res = _run_sundials(num, st, lambda steps, k=k: run(steps, k), [float(grid[k]), float(grid[k + 1])])
        X.append(proj.project(np.asarray(res["xf"]).ravel(), st.p, float(grid[k + 1])).x)
        Z.append(np.asarray(res["zf"]).ravel())
    return np.array(X), (np.array(Z) if num.nz else np.zeros((len(grid), 0)))
