"""``--integrator auto`` (the default): an explicit method that hands over to an implicit one where the problem stiffens.

**The choice.** A DAE goes to IDAS; a model with events or located switching surfaces, one with conditions on t
alone (restarts at the switch times), ``--stabilize project``, a right-hand side of more than
:data:`DOP853_MAX_INSTRUCTIONS` instructions, or an rtol below DOP853's floor go to CVODES (Adams), the default
before ``auto``; every other ODE starts with DOP853 (:mod:`pdsl.numerics.dop853`, scipy's method and step
control) with Hairer's stiffness test after every step. When the test fires :data:`STIFF_AFTER
<pdsl.numerics.dop853.STIFF_AFTER>` times in a row (steps whose size the stability region, not the accuracy,
limits: h·|λ| above 0.9 × 6.1), the run stops at the end of that step and CVODES BDF integrates from there to the end (LSODA's
switch, one way); DOP853 stopping for another reason (steps below the resolution of t, :data:`STEPS` steps towards
one output time, a right-hand side not finite inside a step) also hands over (to CVODES BDF after too many steps,
else Adams), so ``auto``
fails only where CVODES fails too, with its diagnosis. The accuracy contract is rtol/atol for both.

**Where DOP853 runs** changes the speed, never the numbers: the compiled driver (:mod:`pdsl.sim.native`, C around
the generated right-hand side) when its library is at hand (this process, the cache directory) or worth building
(a cache to keep it, ``--compile yes``, a batch, a system integrated again in this process), else
:class:`~pdsl.sim.native.VmDop853` (the same operations from Python over CasADi's VM: no compiler, no build), which
hands over to the compiled driver mid-run when its projected remaining time exceeds the build's. Both take the same
steps to the last bit, so a cached and an uncached run write the same bytes.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import casadi as ca
import numpy as np

from ..diagnostics import PdslError
from . import runs  # runs._sundials, runs._run_sundials: looked up at the call (tests spy on them there)
from .runs import _dae_exprs, _power_expr, iteration_for

__all__ = ["DOP853_MAX_INSTRUCTIONS", "choose", "refine", "integrate"]

# a larger right-hand side goes to CVODES: its C builds for long (1.5e-4 s per instruction, pdsl.sim.compiled) and
# DOP853's 12 evaluations a step cost more than CVODES' few (RLC ladder N = 1000, 16,002 instructions, 2,000 states:
# simulate 2.0 s from Python over the VM against 1.2 s with CVODES)
DOP853_MAX_INSTRUCTIONS = 5_000
# a library built before the run (a cache to keep it, a batch, a repeat) only when its predicted build is this short;
# a longer one is built only when the run itself is projected to repay it (the hand-over)
BUILD_UPFRONT_MAX_S = 1.0
# DOP853 steps towards one output time before CVODES takes over (a chattering switch the stiffness test misses:
# Coulomb friction stepped through); CVODES' first budget is the same (pdsl.sim.runs.STEPS_FIRST)
STEPS = 100_000
_QUAD = object()  # stands for "with ∫ power dt" among the identities that key a compiled library
_SEEN: dict = {}  # identities -> objects: systems integrated by auto in this process (a repeat builds the library)
_VM: dict = {}  # identities -> (objects, VmDop853)


def choose(num, rtol: float, stabilize: str) -> tuple[str, str]:
    """(integrator, why) from what the system is; :func:`refine` sees events and switch times later."""
    if num.nz:
        return "idas", f"a DAE ({num.nz} algebraic variable{'s' if num.nz > 1 else ''}): IDAS"
    if stabilize == "project":
        return "cvodes", "--stabilize project: CVODES from output to output"
    if not rtol >= 100 * np.finfo(float).eps:
        return "cvodes", f"rtol {rtol:g} is below DOP853's floor (100 machine epsilons): CVODES"
    size = num.dae.n_instructions()
    if size > DOP853_MAX_INSTRUCTIONS:
        return "cvodes", f"a right-hand side of {size:,} instructions (> {DOP853_MAX_INSTRUCTIONS:,}): CVODES"
    return "dop853", "DOP853 with a stiffness test, CVODES BDF from where the problem stiffens"


def refine(num, st, hybrid: bool):
    """``st`` with CVODES instead of DOP853 where the run stops at events, switching surfaces or switch times."""
    from .compiled import RhsPlan

    if not st.auto or st.integrator != "dop853":
        return st
    why = ""
    if hybrid:
        why = "events and switching surfaces, located by CVODES' root finding"
    elif st.switches:
        why = "conditions on t: CVODES restarted at each switch time"
    if not why:
        return st
    return replace(st, integrator="cvodes", iteration=iteration_for(num, "cvodes"),
                   rhs=RhsPlan(mode=st.rhs.mode, cache=st.rhs.cache), auto={**st.auto, "why": why})


def integrate(num, grid, X0, st, threads: int = 1) -> list[tuple[np.ndarray, np.ndarray]]:
    """Trajectories for the rows of X0: DOP853 with the stiffness test, CVODES from where it stops."""
    from ..numerics.dop853 import STIFF_AFTER
    from .native import NativeIntegrator, new_ctl

    sigs = tuple(st.inputs[name].fn for name in num.u_names)
    t, x, z, P, xdot, g = _dae_exprs(num, st, sigs)
    n, nx = X0.shape[0], num.nx
    quad = bool(st.quad.get("want")) and n == 1
    if quad:  # ∫ power dt rides along on the states' steps, outside the error test (the states are unchanged)
        q = type(x).sym("q")
        out = ca.vertcat(xdot, _power_expr(num, sigs, t, x, z, P))
        if isinstance(out, ca.SX):  # dE/dt = ∇E·ẋ repeats what ẋ computes: each distinct subexpression once (the same
            out = ca.cse(out)  # operations on the same values, so the same bits; double pendulum 195 -> 133 instructions)
        f = ca.Function("f", [t, ca.vertcat(x, q), P], [out])
        key = (num.dae, *sigs, _QUAD)
        starts = np.column_stack([X0, np.zeros(n)])
    else:
        f = ca.Function("f", [t, x, P], [xdot])
        key = (num.dae, *sigs)
        starts = X0
    eng, handover = _engine(st, f, key, n, nx)
    started = time.perf_counter()

    def one(x0):
        return eng.run_ctl(x0, st.p, grid, st.rtol, st.atol, new_ctl(len(x0), stiff_after=STIFF_AFTER), STEPS,
                           *([handover(started)] if handover is not None else []))

    if n > 1 and threads > 1 and isinstance(eng, NativeIntegrator):  # VmDop853's buffers are one run's
        with ThreadPoolExecutor(max_workers=threads) as pool:  # ctypes releases the GIL during the call
            stops = list(pool.map(one, starts))
    else:
        stops = [one(x0) for x0 in starts]
    runs, Q = [], None
    for stop in stops:
        for k, v in stop.counts.items():
            st.counts[k] = st.counts.get(k, 0) + v
        if stop.handover_t is not None:
            st.rhs.compiled = True
            st.rhs.reason = (f"{st.rhs.reason}; compiled C from t = {stop.handover_t:.6g}: the run's projected time "
                             f"exceeded the build's ({_library_how(eng)})")
        X = stop.X
        if stop.rc:
            X = _continue(num, st, grid, stop, (t, x, z, P, xdot, g), sigs, quad)
        if quad:
            Q = X[:, nx].copy()
            X = X[:, :nx]
        runs.append((np.ascontiguousarray(X), np.zeros((len(grid), 0))))
    if quad:
        st.quad.update(Q=[Q], how=st.quad.get("how") or "DOP853 on the states' steps, outside the error test")
    return runs


def _library_how(eng) -> str:
    return getattr(getattr(eng, "_handed", None), "how", "built now")


def _engine(st, f, key: tuple, n_runs: int, nerr: int):
    """(the DOP853 that runs, the hand-over callback or None); st.rhs says which and why."""
    from .compiled import BUILD_S_FIXED, BUILD_S_PER_INSTRUCTION, find_compiler, progress
    from .native import VmDop853, native_integrator

    plan = st.rhs
    ids = tuple(id(o) for o in key)
    if plan.mode != "no":
        nat = native_integrator(f, plan.cache, key, build=False, nerr=nerr)
        if nat is not None:
            plan.compiled, plan.reason = True, nat.how
            return nat, None
    seen = _SEEN.get(ids)
    repeat = seen is not None and all(a is b for a, b in zip(seen, key))
    if len(_SEEN) >= 64:
        _SEEN.pop(next(iter(_SEEN)))
    _SEEN[ids] = key
    cc = find_compiler() if plan.mode != "no" else None
    why_vm = "--compile no" if plan.mode == "no" else "no C compiler found ($CC, cc, gcc, clang)" if cc is None else ""
    build_s = BUILD_S_FIXED + BUILD_S_PER_INSTRUCTION * f.n_instructions()
    if cc is not None and build_s > BUILD_UPFRONT_MAX_S and plan.mode != "yes":
        why_vm = f"a C build of ~{build_s:.1f} s is made only when the run is projected to repay it"
    elif cc is not None:
        reasons = [r for r, on in (("--compile yes", plan.mode == "yes"), ("a cache to keep it", plan.cache is not None),
                                   ("a batch", n_runs > 1), ("a repeated run", repeat)) if on]
        if reasons:
            try:
                nat = native_integrator(f, plan.cache, key, nerr=nerr)
                plan.compiled, plan.reason = True, f"{nat.how}; built for {', '.join(reasons)}"
                return nat, None
            except PdslError as exc:
                why_vm = f"the C build failed: {exc.message[:120]}"
        else:
            why_vm = "no library for this system yet, and none kept without a cache (--compile yes builds one)"
    hit = _VM.get(ids)
    if hit is not None and all(a is b for a, b in zip(hit[0], key)):
        vm = hit[1]
    else:
        vm = VmDop853(f, nerr)
        if len(_VM) >= 16:
            _VM.pop(next(iter(_VM)))
        _VM[ids] = (key, vm)
    plan.compiled, plan.reason = False, f"DOP853 stepped from Python: {why_vm}"
    if cc is None or plan.mode != "auto":
        return vm, None

    def handover(started):
        def ask(t, t0, t_end):
            spent = time.perf_counter() - started
            if not (t > t0 and spent * (t_end - t) / (t - t0) > build_s):
                return None
            if build_s > 2.0:
                progress(f"the run is long: building its C integrator (~{build_s:.1f} s)")
            try:
                nat = native_integrator(f, plan.cache, key, nerr=nerr)
            except PdslError:
                return None
            vm._handed = nat
            return nat
        return ask

    return vm, handover


def _continue(num, st, grid, stop, exprs, sigs, quad: bool) -> np.ndarray:
    """The rows after ``stop`` (DOP853 stopped: stiff, or failed) by CVODES from where it stopped: BDF when the
    problem stiffened (or took :data:`STEPS` steps towards one output), Adams otherwise (a trial point where the right-hand side is not finite,
    steps below the resolution of t: CVODES retries smaller, or reports the failure it diagnoses)."""
    from ..numerics.dop853 import STIFF_AFTER, STIFF_H_LAMBDA
    from .compiled import RhsPlan

    t, x, z, P, xdot, g = exprs
    which = "cvodes-bdf" if stop.rc in (1, 5) else "cvodes"
    nx = num.nx
    y = stop.y[:nx]
    # a failure is diagnosed from where CVODES started (pdsl.sim.runs._diagnose re-integrates from st.start)
    st2 = replace(st, integrator=which, iteration=iteration_for(num, which),
                  rhs=RhsPlan(mode=st.rhs.mode, cache=st.rhs.cache), quad={}, counts={}, start=(stop.t, np.array(y)))
    tout = [stop.t, *[float(v) for v in grid[stop.rows:]]]
    qexpr = _power_expr(num, sigs, t, x, z, P) if quad else None

    def run(steps):
        F = runs._sundials(num, st2, t, x, z, P, xdot, g, stop.t, tout, (y, st.p, num.z_start), steps, quad=qexpr)
        return F(x0=y, p=st.p, z0=num.z_start)

    res = runs._run_sundials(num, st2, run, tout)
    X = stop.X.copy()
    X[stop.rows:, :nx] = np.asarray(res["xf"]).T[1:]
    if quad:
        X[stop.rows:, nx] = stop.y[nx] + np.asarray(res["qf"], dtype=float).ravel()[1:]
        st.quad["how"] = (f"DOP853 on the states' steps, outside the error test, then the {which.upper()} "
                          "quadrature")
    why = {5: f"stiff at t = {stop.t:.6g} (h·|λ| = {stop.hlamb:.3g} > {STIFF_H_LAMBDA:g} on {STIFF_AFTER} steps in a row)",
           1: f"{STEPS:,} steps towards one output time by t = {stop.t:.6g}"}.get(stop.rc, f"DOP853 stopped at t = {stop.t:.6g}: {stop.why}")
    switch = {"t": stop.t, "to": which, "why": why, "rhs": st2.rhs.describe() if st2.rhs.compiled is not None else "vm"}
    st.auto.setdefault("switches", []).append(switch)
    return X
