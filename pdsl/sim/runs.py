"""Running the integrators: CVODES/IDAS built with a step budget and retried, the compiled DOP853's runs, and
every failure turned into a located ``IntegratorFailure`` with what the state near it shows.

The layer below :mod:`pdsl.sim.dispatch` (which integrator runs a trajectory), :mod:`pdsl.sim.auto` (DOP853
handing over to CVODES) and :mod:`pdsl.sim.hybrid` (event to event); it imports none of them. ``_Setup`` is
the checked run configuration that :func:`pdsl.sim.simulate.simulate` builds and they all read.
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import field

import casadi as ca
import numpy as np

from ..diagnostics import PdslError
from ..records import record
from ..vocab import Engine, integrator as integrator_record, integrators

__all__ = ["SUNDIALS_PLUGINS", "FUNCTIONAL_FROM", "STEPS_FIRST", "STEPS_MAX", "STEPS_HOPELESS", "iteration_for"]

# name -> (CasADi plugin, options) of the SUNDIALS integrators (pdsl.vocab: cvodes Adams–Moulton for non-stiff
# problems, cvodes-bdf for stiff ones, idas for DAEs)
SUNDIALS_PLUGINS: dict[str, tuple[str, dict]] = {
    name: (integrator_record(name).plugin, dict(integrator_record(name).plugin_options))
    for name in integrators(engine=Engine.SUNDIALS)
}

# Adams (``cvodes``) solves its corrector by functional (fixed-point) iteration from this many states on, by
# Newton's method below: a non-stiff system needs no Jacobian, and for larger ones its evaluation and dense LU
# cost more than the extra steps (measured, docs/simulate.md: double pendulum, 4 states, Newton 6.6 ms vs
# functional 8.0 ms; 5-link chain, 20 states, 50 vs 41 ms; Cucker–Smale, 200 states, 3.3× faster). Not below
# 64 states: at tight tolerances functional iteration's corrector is less accurate (the rigid rotor, 24 states,
# rtol 1e-11: energy drift 4e-9 relative with it, < 1e-9 with Newton), and small systems gain little.
FUNCTIONAL_FROM = 64
# CVODES/IDAS take at most this many steps towards one output time: STEPS_FIRST, and when that is not enough the
# run is redone with STEPS_MAX, unless the solver stalled (t + h = t: a finite-time blow-up, a singularity) or its
# progress projects more than STEPS_HOPELESS steps for the interval (sign() chattering: Coulomb friction). A
# blow-up used to take all 1,000,000 steps at t = 1, and print a warning at each (issue 26; pdsl.quiet).
STEPS_FIRST = 100_000
STEPS_MAX = 1_000_000
STEPS_HOPELESS = 10 * STEPS_MAX


@record(kw_only=False, slots=False)
class _Setup:
    p: np.ndarray
    integrator: str
    rtol: float
    atol: float
    substeps: int
    stabilize: str
    inputs: dict
    switches: tuple[float, ...] = ()  # times where a condition on t alone changes (integration stops there)
    state_conditions: int = 0  # conditions on the state: stepped through, not located
    rhs: object = None  # pdsl.sim.compiled.RhsPlan: VM or compiled C (CVODES/IDAS), decided by the first integrator
    iteration: str = ""  # CVODES Adams: "newton" or "functional" (FUNCTIONAL_FROM)
    counts: dict = field(default_factory=dict)  # native integrators: evaluations and steps, summed over runs
    # power_integral: {"want": True} asks the integrator for ∫ power dt; it answers "Q" (per run) and "how"
    quad: dict = field(default_factory=dict)
    start: tuple | None = None  # (t0, x0) of the (first) run: what a failure's diagnosis integrates from
    switches_mode: str = "locate"  # switching surfaces on the state: located (pdsl.sim.hybrid) or stepped through
    # --integrator auto (pdsl.sim.auto): {"why": the choice, "switches": [where DOP853 handed over to CVODES]}
    auto: dict = field(default_factory=dict)


def _dae_exprs(num, st: _Setup, sigs: tuple):
    """Symbols (t, x, z, P) and the model's (xdot, g) with the input signals ``sigs`` bound in."""
    T = ca.SX if num.kind == "SX" else ca.MX
    t, x, z, P = T.sym("t"), T.sym("x", num.nx), T.sym("z", num.nz), T.sym("p", len(st.p))
    u = ca.vertcat(*[fn(t, x, P) for fn in sigs]) if sigs else T(0, 1)
    return (t, x, z, P, *num.dae(t, x, z, P, u))


def _native_for(st: _Setup, t, x, P, xdot, key_objs: tuple = ()):
    """The compiled integrator (pdsl.sim.native) of ``xdot(t, x, P)``; the build is reported in st.rhs."""
    from .native import native_integrator

    nat = native_integrator(ca.Function("f", [t, x, P], [xdot]), st.rhs.cache, key_objs)
    if st.rhs.compiled is None:
        st.rhs.compiled, st.rhs.reason = True, nat.how
    return nat


def _native_runs(num, st: _Setup, nat, X0, p, tout, threads: int) -> list[np.ndarray]:
    """States at ``tout`` for each row of X0; the counts are added to st.counts."""
    try:
        runs = nat.run_many(np.atleast_2d(X0), p, np.asarray(tout, dtype=float), st.rtol, st.atol, threads)
    except RuntimeError as exc:
        raise _failure(num, st, exc) from None
    for _, counts in runs:
        for k, v in counts.items():
            st.counts[k] = st.counts.get(k, 0) + v
    return [X for X, _ in runs]


def _sundials(num, st, t, x, z, P, xdot, g, t0, tout, start=None, steps: int = STEPS_MAX, quad=None):
    """The CVODES/IDAS integrator over ``tout``; ``start`` = (x0, p, z0) for the probe of ``--compile auto``;
    at most ``steps`` steps towards each output time; ``quad``: an integrand integrated with the states (a
    quadrature: the solver's own steps and method, outside its error test, so the states do not change by a bit)."""
    plugin, plugin_opts = SUNDIALS_PLUGINS[st.integrator]
    dae = {"t": t, "x": x, "p": P, "ode": xdot}
    if num.nz:
        dae.update({"z": z, "alg": g})
    if quad is not None:
        dae["quad"] = quad
    size = num.dae.n_instructions()
    if size > BIG_RHS and id(num.dae) not in _ANNOUNCED:
        _ANNOUNCED.add(id(num.dae))
        from .compiled import progress

        progress(f"the right-hand side is {size:,} instructions: building the {plugin.upper()} integrator (its "
                 "Jacobian) and each evaluation take long")
    # show_eval_warnings: a right-hand side that is inf or NaN at a trial step (a blow-up) is a rejected step
    # that CVODES retries smaller, and CasADi printed a warning line for each (hundreds of thousands)
    opts = {"abstol": st.atol, "reltol": st.rtol, "max_num_steps": steps, "show_eval_warnings": False, **plugin_opts}
    if st.iteration == "functional":
        opts["nonlinear_solver_iteration"] = "functional"
    if quad is not None and QUAD_ERR_CON:
        opts["quad_err_con"] = True
    # the output grid includes t0, so that z(t0) is the consistent value IDAS computes, not the guess
    try:
        built = time.perf_counter()
        F = ca.integrator("F", plugin, dae, t0, tout, opts)
        took = time.perf_counter() - built
        if took > _progress_s():
            from .compiled import progress

            progress(f"building the {plugin.upper()} integrator took {took:.1f} s (right-hand side {size:,} "
                     f"instructions{_jacobian_size(F)})")
        if st.rhs is None or start is None:
            return F
        return st.rhs.integrator(F, plugin, t0, tout, opts, lambda Fp, h: _probe(Fp, start, h),
                                 time.perf_counter() - built)
    except RuntimeError as exc:
        raise _failure(num, st, exc) from None


QUAD_ERR_CON = True
BIG_RHS = 200_000  # a right-hand side of more VM instructions says so before its integrator is built (progress)
_ANNOUNCED: set = set()  # ids of dae Functions already announced as big


def _progress_s() -> float:
    from .compiled import PROGRESS_S

    return PROGRESS_S


def _jacobian_size(F) -> str:
    try:
        return f", its Jacobian {F.get_function('jacF').n_instructions():,}"
    except RuntimeError:
        return ""


def _power_expr(num, sigs: tuple, t, x, z, P):
    """The model's power (dE/dt along the flow: supplied − dissipated) with the input signals ``sigs`` bound in."""
    u = ca.vertcat(*[fn(t, x, P) for fn in sigs]) if sigs else type(x)(0, 1)
    return num.power(t, x, z, P, u)


def _probe(F, start, h: float) -> tuple[dict, bool]:
    """(statistics, stopped at max_num_steps) of a short VM run over a span ``h`` (pdsl.sim.compiled's scaled probe)
    from ``start`` = (x0, p, z0[, repeats]); the counts are multiplied by ``repeats``: how many integrations like
    this one the run makes (segments, intervals)."""
    from .. import quiet

    x0, p, z0, *more = start
    repeats = more[0] if more else 1.0
    try:
        with quiet.capture(tally=False):  # a probe stopped at its step cap says so ("mxstep steps taken"): expected
            F(x0=x0, p=np.append(p, h), z0=z0)
        capped = False
    except RuntimeError:
        capped = True
    try:
        stats = dict(F.stats())
    except RuntimeError:
        return {}, capped
    return {k: v * repeats for k, v in stats.items() if k in ("nfevals", "nlinsetups", "nsteps")}, capped


def _run_sundials(num, st: _Setup, run, edges: list[float]):
    """``run(steps)``: build and call a CVODES/IDAS integrator taking at most ``steps`` steps per output time, with
    what it prints captured (pdsl.quiet). First STEPS_FIRST; on CV_TOO_MUCH_WORK again with STEPS_MAX unless
    :func:`_more_steps_may_help` says no. ``edges``: the start and the output times of the integration.

    What the first attempt printed counts in the CLI's note (pdsl.quiet) only when it is the last one: a run
    redone with more steps prints it all again, and a redone run that succeeds printed nothing worth a note
    (Robertson's ``At t = ..., mxstep steps taken before reaching tout.`` of the first attempt)."""
    from .. import quiet

    for steps in (STEPS_FIRST, STEPS_MAX):
        with quiet.capture(tally=steps == STEPS_MAX) as out:
            try:
                return run(steps)
            except RuntimeError as exc:
                err = exc
        verdict = _more_steps_may_help(err, out, edges, steps)
        if steps == STEPS_MAX or verdict is not True:
            if steps != STEPS_MAX:
                _tally(out)
            raise _failure(num, st, err, out, steps, verdict if isinstance(verdict, str) else "")


def _tally(out) -> None:
    """Add a captured call's output (pdsl.quiet.Output: counts, head, tail) to the process-wide tally the CLI notes."""
    from .. import quiet

    if not out or quiet._passthrough:
        return
    total = quiet.total()
    with quiet._feed_lock:
        total.feed(out.head)
        if not out.complete:
            total.feed(out.tail)  # then the counts of what neither kept (or twice, where they overlap)
            total.chars += out.chars - len(out.head) - len(out.tail)
            total.newlines += out.newlines - out.head.count("\n") - out.tail.count("\n")


_AT_T = re.compile(r"At t = ?([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)")
_MXSTEP = re.compile(r"At t = ?([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?),+ *mxstep")


def _more_steps_may_help(exc: Exception, out, edges: list[float], steps: int) -> bool | str:
    """After a run stopped at ``steps`` steps: could STEPS_MAX reach the output times? Not when the solver stalled
    (``t + h = t``: the step size is below the resolution of t) nor when the progress made in the interval where it
    stopped (``At t = ..., mxstep steps taken``, from the captured messages) projects more than STEPS_HOPELESS
    steps for it (then the answer is that projection, in words). Only a progress well above the 6 digits of the
    printed t counts; otherwise: True (retry)."""
    if "TOO_MUCH_WORK" not in str(exc):
        return False
    said = out.text()
    if "t + h = t" in said:
        return False
    import bisect

    for m in _MXSTEP.finditer(said):
        ts = float(m.group(1))
        k = bisect.bisect_right(edges, ts) - 1
        if not 0 <= k < len(edges) - 1 or not math.isfinite(ts):
            continue
        a, b = edges[k], edges[k + 1]
        done = ts - a
        if done > 1e-4 * max(abs(ts), abs(a)) and steps * (b - a) / done > STEPS_HOPELESS:
            return (f"{steps:,} steps advanced only from t = {a:.6g} to {m.group(1)}, towards the output time "
                    f"{b:.6g}: at that pace about {steps * (b - a) / done:.1g} steps")
    return True


# SUNDIALS return flags -> what happened, in words
_FLAGS = {
    "ERR_FAIL": "the error test failed repeatedly",
    "CONV_FAIL": "the corrector did not converge",
    "RHSFUNC_FAIL": "the right-hand side failed (inf or NaN?)",
    "RHSFUNC_ERR": "the right-hand side is inf or NaN at every trial step",
    "RES_FAIL": "the residual failed (inf or NaN?)",
    "REP_RES_ERR": "the residual is inf or NaN at every trial step",
    "LSETUP_FAIL": "the linear solver's setup failed (a singular Jacobian?)",
    "LSOLVE_FAIL": "the linear solve failed (a singular Jacobian?)",
    "TOO_CLOSE": "the output times are too close together",
    "CONSTR_FAIL": "the inequality constraints could not be met",
    "NO_RECOVERY": "no recovery from a failed residual or linear solve",
}


def _failure(num, st, exc, out=None, steps: int | None = None, pace: str = "") -> PdslError:
    """The located IntegratorFailure for ``exc`` (a CasADi RuntimeError); ``out``: what the solver printed
    (pdsl.quiet.Output), read for where it stopped and why; ``pace``: the projection of _more_steps_may_help."""
    said = out.text() if out else ""
    text = str(exc)
    flag = re.search(r'returned "([A-Z_]+)"', text)
    at = _AT_T.findall(said)
    where = f" at t = {at[-1]}" if at else ""
    hint = "check the initial state and parameters (a singular mass matrix or an escape to infinity?), or loosen --rtol"
    measured = _diagnose(num, st, float(at[-1])) if at and st.start is not None else None
    if measured is not None:  # what the state near the failure shows: chattering, a blow-up, stiffness
        why, hint = measured
        if "t + h = t" in said:
            why += " (the step size fell below the resolution of t: t + h = t)"
        if pace:
            why = f"{pace}; {why}"
        return PdslError.at("IntegratorFailure", f"{st.integrator} failed on {num.system.name}{where}: {why}",
                            num.system.span, hint)
    if flag:
        name = flag.group(1)
        if name.endswith("TOO_MUCH_WORK"):
            if "t + h = t" in said:
                why = "the step size fell below the resolution of t (t + h = t): the solution escapes to infinity or " \
                      "meets a singularity there"
                hint = "check the model near that time (a finite-time blow-up?), or end the simulation before it"
            else:
                why = pace or f"{steps or STEPS_MAX:,} steps did not reach the next output time"
                hint = "a stiff system (try --integrator cvodes-bdf), a discontinuity the solver chatters on " \
                       "(sign, abs, if), or an escape to infinity"
        else:
            why = next((words for key, words in _FLAGS.items() if name.endswith(key)), "")
        why = f"{why} ({name})" if why else name
    elif "rootfinder" in text:
        why = "the implicit stage equations did not converge"
        hint = "use more --substeps, or an adaptive integrator (cvodes); does the solution escape to infinity?"
    else:
        why = _first_line(exc)
    return PdslError.at("IntegratorFailure", f"{st.integrator} failed on {num.system.name}{where}: {why}",
                        num.system.span, hint)


def _diagnose(num, st, t_fail: float) -> tuple[str, str] | None:
    """(why, hint) measured on the state just before ``t_fail`` (re-integrated from st.start, bounded): the solution
    sitting on a switching surface (chattering: Coulomb friction sticking), a state that grew without bound (a
    finite-time blow-up), or a Jacobian far stiffer than the run (Adams on a stiff problem); None when none shows."""
    from .. import quiet

    t0, x0 = st.start
    if not (math.isfinite(t_fail) and t_fail > t0) or num.nz:
        return None
    T = ca.SX if num.kind == "SX" else ca.MX
    t, x, P = T.sym("t"), T.sym("x", num.nx), T.sym("p", len(st.p))
    sigs = [st.inputs[n].fn for n in num.u_names]
    u = ca.vertcat(*[fn(t, x, P) for fn in sigs]) if sigs else T(0, 1)
    xdot = num.dae(t, x, T(0, 1), P, u)[0]
    x_near = t_near = None
    for frac in (1e-4, 1e-3, 1e-2, 1e-1):
        t_try = t_fail - frac * (t_fail - t0)
        try:
            with quiet.capture(tally=False):
                F = ca.integrator("diagnose", "cvodes", {"t": t, "x": x, "p": P, "ode": xdot}, t0, [t_try],
                                  {"max_num_steps": 50_000, "reltol": max(st.rtol, 1e-6), "abstol": max(st.atol, 1e-8),
                                   "show_eval_warnings": False, "linear_multistep_method": "bdf"})
                x_near, t_near = np.asarray(F(x0=x0, p=st.p)["xf"]).ravel(), t_try
            break
        except RuntimeError:
            continue
    if x_near is None or not np.all(np.isfinite(x_near)):
        return None
    uu = np.array([float(np.asarray(fn(t_near, x_near, st.p)).ravel()[0]) for fn in sigs]) if sigs else np.zeros(0)
    scale = 1.0 + float(np.max(np.abs(x_near)))
    if num.switching is not None:
        sv = np.asarray(num.switching(t_near, x_near, np.zeros(0), st.p, uu)).ravel()
        k = int(np.argmin(np.abs(sv)))
        if abs(sv[k]) <= 1e-4 * scale:
            # which way the field points on each side of the surface: ṡ = ∇s·f just above and just below it
            zz = T(0, 1)
            s_k = num.switching(t, x, zz, P, u)[k]
            grad = np.asarray(ca.Function("g", [t, x, P], [ca.gradient(s_k, x)])(t_near, x_near, st.p)).ravel()
            rate = ca.Function("r", [t, x, P], [ca.dot(ca.gradient(s_k, x), xdot)])
            d = 1e-6 * scale
            n2 = float(grad @ grad) or 1.0
            up = float(rate(t_near, x_near + (d - sv[k]) * grad / n2, st.p))
            down = float(rate(t_near, x_near + (-d - sv[k]) * grad / n2, st.p))
            attractive = up < 0 < down
            return (f"the solution reached the switching surface of `{num.switching_names[k]}` (its argument is "
                    f"{sv[k]:.2g} at t = {t_near:.6g}) and chatters on it: "
                    + ("the field points into the surface from both sides (ds/dt = "
                       f"{up:.3g} above, {down:.3g} below), so the solution should slide along it, which no step can "
                       "follow" if attractive else f"ds/dt = {up:.3g} above it, {down:.3g} below it"),
                    ("sticking (Coulomb friction, a relay): " if attractive else "")
                    + "smooth the switch (tanh(v/eps), smoothstep) or model the sticking with events (`when`); "
                    "loosening --rtol only hides the error")
    growth = np.abs(x_near) / np.maximum(1.0, np.abs(x0))
    i = int(np.argmax(growth))
    if growth[i] > 1e3:
        return (f"`{num.x_names[i]}` grew from {x0[i]:.4g} to {x_near[i]:.4g} by t = {t_near:.6g}: the solution "
                f"escapes to infinity (a finite-time blow-up near t = {t_fail:.6g})",
                f"end the simulation before t = {t_fail:.6g} (--t-end), or check the model's signs and parameters")
    J = np.asarray(ca.Function("J", [t, x, P], [ca.jacobian(xdot, x)])(t_near, x_near, st.p)).reshape(num.nx, num.nx)
    if np.all(np.isfinite(J)) and num.nx:
        lam = np.linalg.eigvals(J)
        fast = float(np.max(-lam.real))
        if fast > 0 and fast * (t_fail - t0) > 1e4 and st.integrator == "cvodes":
            return (f"the problem is stiff: at t = {t_near:.6g} the Jacobian has an eigenvalue {-fast:.3g} (time scale "
                    f"{1 / fast:.2g}) against a run of {t_fail - t0:.3g}: the non-stiff Adams method needs steps that "
                    "small", "use --integrator cvodes-bdf")
    return None


def _quiet_call(num, st, fn, *args):
    """``fn(*args)`` (a fixed-step rollout or step, with rootfinders when implicit) with its output captured;
    a failed implicit stage solve is a located IntegratorFailure."""
    from .. import quiet

    with quiet.capture() as out:
        try:
            return fn(*args)
        except RuntimeError as exc:
            err = exc
    raise _failure(num, st, err, out)


def _first_line(exc: Exception) -> str:
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    for ln in lines:
        if "failed" in ln.lower() or "error" in ln.lower():
            return ln[:300]
    return (lines[-1] if lines else "unknown error")[:300]


def iteration_for(num, integrator: str) -> str:
    """CVODES Adams' corrector iteration for ``num`` (FUNCTIONAL_FROM); "" for the other integrators."""
    return ("functional" if num.nx >= FUNCTIONAL_FROM else "newton") if integrator == "cvodes" else ""
