"""Simulation on a fixed output grid: by default DOP853 with a stiffness test that hands over to CVODES BDF
(pdsl.sim.auto), IDAS for DAEs, CVODES for events; or the integrator asked for.

This module checks the options (:func:`_setup`), runs :func:`simulate` / :func:`simulate_batch` and evaluates the
model along the trajectory (:class:`SimulationResult`). The parts live beside it: input signals in
:mod:`pdsl.sim.inputs`, Baumgarte gains in :mod:`pdsl.sim.baumgarte`, which integrator runs a trajectory in
:mod:`pdsl.sim.dispatch`, CVODES/IDAS and the native runs with their failure diagnosis in :mod:`pdsl.sim.runs`,
event to event in :mod:`pdsl.sim.hybrid`; the integrators themselves are records of :mod:`pdsl.vocab`. Their
names stay importable from here.
"""

from __future__ import annotations

import math
from dataclasses import field, replace
from typing import Mapping

import casadi as ca
import numpy as np

from ..backend.functions import NumericSystem
from ..diagnostics import PdslError
from ..options import parse_assignment, parse_float  # noqa: F401 (re-exported; casadi-free home)
from ..records import record
from ..vocab import AUTO, FIXED_STEP, NATIVE, SIMULATE_INTEGRATORS, STABILIZE_SIMULATE, SUNDIALS, Stabilize
from .baumgarte import BAUMGARTE_FACTOR, BaumgarteGains, _apply_gains, _stabilization, baumgarte_gains  # noqa: F401
from .dispatch import _INTEGRATORS, _integrate  # noqa: F401 (_INTEGRATORS: the built integrators, for tools to clear)
from .inputs import InputSignal, _Interpolated, input_from_expression, inputs_from_csv  # noqa: F401
from .runs import (  # noqa: F401 (re-exported: the names this module had)
    FUNCTIONAL_FROM,
    STEPS_FIRST,
    STEPS_HOPELESS,
    STEPS_MAX,
    _failure,
    _quiet_call,
    _Setup,
    iteration_for,
)
from .runs import SUNDIALS_PLUGINS as INTEGRATORS  # noqa: F401 name -> (CasADi plugin, options), the name it had here

__all__ = ["SimulationResult", "simulate", "time_grid", "parse_assignment", "InputSignal", "input_from_expression", "inputs_from_csv"]

# what simulate accepts (pdsl.vocab): AUTO, then the integrators by name; --stabilize
STABILIZERS = STABILIZE_SIMULATE


@record(kw_only=False, slots=False)
class SimulationResult:
    t: np.ndarray
    x: np.ndarray  # (len(t), nx)
    z: np.ndarray  # (len(t), nz)
    x_names: tuple[str, ...]
    z_names: tuple[str, ...]
    y: np.ndarray  # outputs (len(t), ny)
    y_names: tuple[str, ...]
    energy: np.ndarray | None
    constraint_rms: np.ndarray | None  # per time, RMS of the holonomic constraints
    info: dict = field(default_factory=dict)
    shown: np.ndarray | None = None  # the state as a CSV shows it (velocities for Cartesian momenta)
    shown_names: tuple[str, ...] = ()
    power: np.ndarray | None = None  # dE/dt along the flow (supplied − dissipated), with ``energy``
    u: np.ndarray | None = None  # exogenous inputs used (len(t), nu), so that `fit` can read them back
    u_names: tuple[str, ...] = ()
    units: tuple[tuple[str, str], ...] = ()  # (name, unit) of quantities with a unit: the tables' metadata (pdsl.data.units)
    # ∫₀ᵗ power ds integrated with the states (a quadrature of CVODES/IDAS, an augmented state of a fixed-step
    # scheme; simulate(power_integral=True)), None when it was not (energy_balance then uses the output grid)
    power_integral: np.ndarray | None = None

    def columns(self) -> tuple[list[str], np.ndarray]:
        """CSV columns: t, the shown state, algebraic variables, outputs, then the exogenous inputs used."""
        shown, names = (self.shown, self.shown_names) if self.shown is not None else (self.x, self.x_names)
        u = self.u if self.u is not None else np.zeros((len(self.t), 0))
        header = ["t", *names, *self.z_names, *self.y_names, *self.u_names]
        data = np.column_stack([self.t, shown, self.z, self.y, u]) if len(self.t) else np.zeros((0, len(header)))
        return header, data

    def column_units(self) -> dict[str, str]:
        """``{column: unit}`` of the columns with a unit (``t`` in s), for a table's metadata; empty for a model
        without units. Column names never carry the unit (pdsl.data.units)."""
        if not self.units:
            return {}
        unit = dict(self.units, t="s")
        names = self.shown_names if self.shown is not None else self.x_names
        return {h: unit[h] for h in ("t", *names, *self.z_names, *self.y_names, *self.u_names) if unit.get(h)}


MAX_OUTPUT_STEPS = 10_000_000  # output intervals of one trajectory (10^7 + 1 rows: 80 MB per column)
MAX_OUTPUT_ROWS = 100_000_000  # rows of all trajectories of one run together (--random-init, --init-data)


def time_grid(t_end: float, dt: float) -> np.ndarray:
    if not (math.isfinite(t_end) and t_end > 0):
        raise PdslError.at("BadOption", f"--t-end must be positive, got {t_end}")
    if not (math.isfinite(dt) and dt > 0):
        raise PdslError.at("BadOption", f"--dt must be positive, got {dt}")
    n = t_end / dt  # inf for --t-end 1e300 --dt 1e-300: checked before round(), which would overflow
    if not n <= MAX_OUTPUT_STEPS + 0.5:
        many = f"{n:.3g}" if math.isfinite(n) else "more than 1e308"
        raise PdslError.at("BadOption", f"--t-end {t_end:g} / --dt {dt:g} is {many} output steps: at most "
                           f"{MAX_OUTPUT_STEPS:,} steps ({MAX_OUTPUT_STEPS + 1:,} samples) are written",
                           hint=f"increase --dt to at least {t_end / MAX_OUTPUT_STEPS:.3g}, or shorten --t-end")
    steps = round(n)
    if steps < 1:
        raise PdslError.at("BadOption", f"--dt {dt:g} is longer than --t-end {t_end:g}",
                           hint="--dt is the output interval: at most --t-end")
    if abs(n - steps) > 1e-9 * max(1.0, n):
        raise PdslError.at("BadOption", f"--t-end {t_end} is not a whole number of --dt {dt} steps")
    return np.linspace(0.0, steps * dt, steps + 1)




def _setup(num, params, inputs, integrator, rtol, atol, substeps, stabilize, compile="auto") -> _Setup:
    from .compiled import COMPILE_MODES, RhsPlan

    if compile not in COMPILE_MODES:
        raise PdslError.at("BadOption", f"--compile {compile}: unknown", hint="one of: " + ", ".join(COMPILE_MODES))
    inputs = dict(inputs or {})
    missing = [u for u in num.u_names if u not in inputs]
    if missing:
        raise PdslError.at(
            "MissingInput",
            f"input{'s' if len(missing) > 1 else ''} {', '.join(f'`{m}`' for m in missing)} "
            f"{'have' if len(missing) > 1 else 'has'} no value",
            num.system.inputs[0].span if num.system.inputs else None,
            'give one on the command line (--input "F=sin(t)") or from a CSV (--input-data FILE)',
        )
    extra = [u for u in inputs if u not in num.u_names]
    if extra:
        raise PdslError.at("BadOption", f"--input {extra[0]}: the model has no exogenous input `{extra[0]}`",
                           hint=f"exogenous inputs: {', '.join(num.u_names) or 'none'}")
    for name in params or {}:
        if name not in num.p_names:
            raise PdslError.at("BadOption", f"--param {name}: `{name}` is not a parameter of {num.system.name}",
                               hint="parameters: " + (", ".join(n for n in num.p_names if ".w[" not in n) or "none"))
    auto: dict = {}
    if integrator is None or integrator == AUTO:
        from .auto import choose

        integrator, why = choose(num, rtol, stabilize)
        auto = {"why": why}
    if integrator not in SIMULATE_INTEGRATORS:
        raise PdslError.at("BadOption", f"--integrator {integrator}: unknown",
                           hint="one of: " + ", ".join([AUTO, *SIMULATE_INTEGRATORS]))
    if integrator in NATIVE and compile == "no" and not auto:
        raise PdslError.at("BadOption", f"--integrator {integrator} is compiled C: it cannot run with --compile no",
                           hint="use --integrator cvodes for CasADi's VM")
    if num.nz and integrator != "idas":
        raise PdslError.at("BadOption", f"this model is a DAE ({num.nz} algebraic variables): use --integrator idas")
    if not (isinstance(substeps, int) and 1 <= substeps <= 100_000):
        raise PdslError.at("BadOption", f"--substeps must be a positive integer, got {substeps}")
    if stabilize not in STABILIZERS:
        raise PdslError.at("BadOption", f"--stabilize {stabilize}: unknown", hint="one of: " + ", ".join(STABILIZERS))
    if stabilize != "none" and num.invariants.size1_out(0) == 0:
        raise PdslError.at("BadOption", "--stabilize needs a model with constraints")
    lowered = _stabilization(num)
    if stabilize == Stabilize.BAUMGARTE and lowered != Stabilize.BAUMGARTE:
        raise PdslError.at("BadOption", "stabilize='baumgarte' needs the Baumgarte rows in the lowered system",
                           num.system.span, "lower the model with lower(model, formulation, stabilize='baumgarte')")
    if lowered == Stabilize.BAUMGARTE and stabilize != Stabilize.BAUMGARTE:
        raise PdslError.at("BadOption", f"this system was lowered with Baumgarte rows: simulate it with "
                           f"stabilize='baumgarte', not {stabilize!r}", num.system.span)
    if num.nx == 0:
        raise PdslError.at("EmptyModel", f"{num.system.name} has no differential states to integrate", num.system.span)
    from ..cache import default_cache

    iteration = iteration_for(num, integrator)
    if integrator in NATIVE:
        if not rtol >= 100 * np.finfo(float).eps:  # scipy's floor for DOP853 (rounding dominates below it)
            raise PdslError.at("BadOption", f"--rtol {rtol:g} is below 100 machine epsilons (2.2e-14) for {integrator}")
        # auto: the compiled driver or the same steps from Python over the VM, as the build pays (pdsl.sim.auto)
        rhs = RhsPlan(mode=compile if auto else "yes", cache=default_cache())
    else:
        rhs = RhsPlan(mode=compile, cache=default_cache()) if integrator in SUNDIALS else None
    return _Setup(
        p=num.param_vector(dict(params or {})), integrator=integrator, rtol=rtol,
        atol=rtol * 1e-2 if atol is None else atol, substeps=substeps, stabilize=stabilize, inputs=inputs,
        rhs=rhs, iteration=iteration, auto=auto,
    )


def simulate(
    num: NumericSystem,
    grid: np.ndarray,
    *,
    x0: Mapping[str, float] | None = None,
    params: Mapping[str, float] | None = None,
    inputs: Mapping[str, InputSignal] | None = None,
    rtol: float = 1e-8,
    atol: float | None = None,
    integrator: str | None = None,
    substeps: int = 1,
    project: bool = True,
    stabilize: str = "none",
    baumgarte_alpha: float | None = None,
    baumgarte_beta: float | None = None,
    compile: str = "auto",
    max_events: int | None = None,
    event_rows: str = "none",
    power_integral: bool = False,
    switches: str = "locate",
) -> SimulationResult:
    """Integrate ``num`` over ``grid`` (grid[0] is the initial time).

    ``x0`` overrides start values (states or shown columns such as ``b.vx``); with
    constraints, the start is projected onto Φ = 0, Φ̇ = 0 (``project``) and the
    changes are listed in ``info["projection"]``. ``integrator``: None or ``"auto"`` (:mod:`pdsl.sim.auto`: the
    choice in ``info["auto"]``, a hand-over to CVODES in ``info["stiff_switch"]``), or one by name.
    ``stabilize="project"`` also
    projects after every output interval; ``stabilize="baumgarte"`` (for a system
    lowered with ``stabilize="baumgarte"``) integrates Φ̈ + 2αΦ̇ + β²Φ = 0, with the
    gains of :func:`baumgarte_gains` recorded in ``info["baumgarte"]``. ``compile`` ("auto", "yes", "no"):
    CVODES/IDAS evaluate the right-hand side in CasADi's VM or as compiled C (:mod:`pdsl.sim.compiled`); the
    choice and its reason are in ``info["rhs"]``. ``power_integral``: ∫ power dt integrated with the states (a
    CVODES/IDAS quadrature, an augmented state of a fixed-step scheme) in ``result.power_integral``, what the
    energy balance reads (:func:`energy_balance`); models with events, switch times, ``stabilize="project"`` and
    dop853 leave it None (the balance then integrates on the output grid).
    """
    from .initial import Projector, initial_state

    if num.nx == 0 and num.nz == 0:
        raise PdslError.at("EmptyModel", f"model `{num.system.name}` has no states: it is a signal block (outputs of its "
                           "inputs)", num.system.span, "use it as an instance in a model with dynamics")
    st = _setup(num, params, inputs, integrator, rtol, atol, substeps, stabilize, compile)
    x_init = initial_state(num, dict(x0 or {}), st.p, float(grid[0]))
    info: dict = {}
    if project and num.invariants.size1_out(0):
        proj = Projector(num).project(x_init, st.p, float(grid[0]), keep=tuple(x0 or {}))
        x_init = proj.x
        info["projection"] = proj
    st, extra = _apply_gains(num, st, x_init[None, :], grid, baumgarte_alpha, baumgarte_beta, params)
    st = _locate_switches(num, st, grid)
    st = replace(st, start=(float(grid[0]), np.array(x_init, dtype=float)))
    info.update(extra)
    st = _switch_note(num, replace(st, switches_mode=switches))
    hybrid = _hybrid(num, switches)
    st = _refine_auto(num, st, hybrid)
    if hybrid:  # events (`when`), switching surfaces: from event to event (pdsl.sim.hybrid)
        from .hybrid import MAX_EVENTS, integrate_events

        try:
            grid, X, Z, log = integrate_events(num, grid, x_init, st,
                                               max_events=MAX_EVENTS if max_events is None else max_events,
                                               event_rows=event_rows, switches=switches)
        except PdslError as exc:  # a Zeno stop: the trajectory up to there travels with the error (the CLI writes it)
            rows = getattr(exc, "partial_rows", None)
            if rows is not None:
                T_, X_, Z_, log_ = rows
                exc.partial = _result(num, T_, X_, Z_ if num.nz else np.zeros((len(T_), 0)), st.p, st.inputs,
                                      {**info, **_describe(st), "events": log_}, st.rhs)
            raise
        if num.system.events:
            info["events"] = log
        info["switches"] = log.switches
    else:
        if (max_events is not None or event_rows != "none") and not num.system.events:
            raise PdslError.at("BadOption", f"--max-events and --event-rows apply to a model with events (`when`); "
                               f"{num.system.name} has none")
        if power_integral and num.power is not None:
            if num.conservative:  # ∫ 0 dt: exact, nothing to integrate
                st.quad.update(Q=[np.zeros(len(grid))], how="0: dE/dt ≡ 0 by the formalism (an autonomous "
                               "Lagrangian or Hamiltonian, nothing else acting)")
            else:
                st.quad["want"] = True
        (X, Z), = _integrate(num, grid, x_init[None, :], st)
    res = _result(num, grid, X, Z, st.p, st.inputs, {**info, **_describe(st)}, st.rhs)
    if st.quad.get("Q"):
        res = replace(res, power_integral=st.quad["Q"][0])
        res.info["power_integral"] = st.quad["how"]
    if num.balances is not None:  # relations the formalism derived (Hamel's full-frame momenta), along the flow
        from .balances import check_balances

        res.info["balances"] = check_balances(num, grid, X, st.p, res.u)
    return res


def simulate_batch(
    num: NumericSystem,
    grid: np.ndarray,
    x0s: np.ndarray,
    *,
    params: Mapping[str, float] | None = None,
    inputs: Mapping[str, InputSignal] | None = None,
    rtol: float = 1e-8,
    atol: float | None = None,
    integrator: str | None = None,
    substeps: int = 1,
    stabilize: str = "none",
    threads: int = 2,
    baumgarte_alpha: float | None = None,
    baumgarte_beta: float | None = None,
    compile: str = "auto",
    switches: str = "locate",
) -> list[SimulationResult]:
    """Integrate many initial states (rows of ``x0s``, already consistent) in parallel threads.

    With ``stabilize="baumgarte"`` the default gains come from the fastest start (one set for all).
    """
    st = _setup(num, params, inputs, integrator, rtol, atol, substeps, stabilize, compile)
    st, extra = _apply_gains(num, st, np.atleast_2d(x0s), grid, baumgarte_alpha, baumgarte_beta, params)
    st = _locate_switches(num, st, grid)
    st = replace(st, start=(float(grid[0]), np.array(np.atleast_2d(x0s)[0], dtype=float)))
    st = _switch_note(num, replace(st, switches_mode=switches))
    hybrid = _hybrid(num, switches)
    st = _refine_auto(num, st, hybrid)
    if hybrid:  # events, switches: one run after another (each from event to event)
        from .hybrid import integrate_events

        out = []
        for x0 in np.atleast_2d(x0s):
            T_, X, Z, log = integrate_events(num, grid, x0, st, switches=switches)
            ev = {"events": log} if num.system.events else {}
            out.append(_result(num, T_, X, Z, st.p, st.inputs, {**_describe(st), **extra, **ev, "switches": log.switches},
                               st.rhs))
        return out
    runs = _integrate(num, grid, np.atleast_2d(x0s), st, threads=threads)
    return [_result(num, grid, X, Z, st.p, st.inputs, {**_describe(st), **extra}, st.rhs) for X, Z in runs]


def _switch_note(num, st: _Setup) -> _Setup:
    """The count behind the "stepped through" note: none when the switching surfaces are located; all of them (the
    sign and abs terms too) when there are more than MAX_SWITCHES."""
    from ..backend.switching import MAX_SWITCHES

    if num.hybrid is not None and num.hybrid.switches is not None and st.switches_mode == "locate":
        return replace(st, state_conditions=0)  # located, not stepped through
    if len(num.switching_names) > MAX_SWITCHES:
        return replace(st, state_conditions=len(num.switching_names))
    return st


def _refine_auto(num, st: _Setup, hybrid: bool) -> _Setup:
    if not st.auto:
        return st
    from .auto import refine

    return refine(num, st, hybrid)


def _hybrid(num, switches: str) -> bool:
    """Integrate from event to event (pdsl.sim.hybrid): a model with events, or with switching surfaces on the
    state located (``switches="locate"``, the default; ``"step-through"`` leaves them to the error control)."""
    from .hybrid import SWITCHES

    if switches not in SWITCHES:
        raise PdslError.at("BadOption", f"--switches {switches}: unknown", hint="one of: " + ", ".join(SWITCHES))
    hy = num.hybrid
    return hy is not None and (bool(hy.conditions) or (hy.switches is not None and switches == "locate"))


def _describe(st: _Setup) -> dict:
    events = {}
    if st.switches:
        events["switch_times"] = list(st.switches)
    if st.state_conditions:
        from ..backend.switching import MAX_SWITCHES

        why = (f"more than {MAX_SWITCHES} switching surfaces (pairwise terms of a swarm?): " if st.state_conditions
               > MAX_SWITCHES else "") if st.switches_mode == "locate" else "--switches step-through: "
        events["state_conditions"] = (f"{why}{st.state_conditions} condition(s) on the state: the integrator steps "
                                      "through their switches under error control; they are not located as events")
    if st.integrator in FIXED_STEP:
        return {"integrator": st.integrator, "substeps": st.substeps, "stabilize": st.stabilize, **events}
    solver = {"iteration": st.iteration} if st.iteration else {}
    if st.counts:
        solver["counts"] = dict(st.counts)
    rhs = {"rhs": st.rhs.describe()} if st.rhs is not None and st.rhs.compiled is not None else {}
    if st.auto:  # --integrator auto: why this integrator, and where DOP853 handed over to CVODES
        events["auto"] = st.auto["why"]
        if st.auto.get("switches"):
            events["stiff_switch"] = list(st.auto["switches"])
    return {"integrator": st.integrator, "rtol": st.rtol, "atol": st.atol, "stabilize": st.stabilize, **solver, **rhs,
            **events}


def _locate_switches(num, st: _Setup, grid) -> _Setup:
    """The switching times of conditions on t alone (pdsl.backend.events) inside the grid, for CVODES/IDAS
    (which then stop there); conditions on the state are counted for the record."""
    st = replace(st, state_conditions=num.state_conditions) if num.state_conditions else st
    fns = [num.switches] if num.switches is not None else []
    fns += [sig.switches for sig in st.inputs.values() if getattr(sig, "switches", None) is not None]
    if not fns or (st.integrator not in SUNDIALS and st.integrator not in NATIVE) or st.stabilize == Stabilize.PROJECT \
            or len(grid) < 2:
        return st
    from ..backend.events import switch_times

    times = sorted({r for f in fns for r in switch_times(f, st.p, float(grid[0]), float(grid[-1]))})
    tol = 1e-12 * max(1.0, abs(float(grid[0])), abs(float(grid[-1])))
    merged = [r for k, r in enumerate(times) if k == 0 or r - times[k - 1] > tol]
    return replace(st, switches=tuple(merged))


def _result(num, grid, X, Z, p, inputs, info, rhs=None) -> SimulationResult:
    if not np.all(np.isfinite(X)):
        raise PdslError.at("IntegratorFailure", "the solution is not finite (NaN or inf)", num.system.span)
    x_init = X[0]
    fns = {"outputs": num.outputs if num.y_names else None, "energy": num.energy, "power": num.power,
           "report": num.report if num.report_names != num.x_names else None,
           "constraints": num.constraints if num.constraints.size1_out(0) else None}
    if rhs is not None:  # compiled too when the right-hand side is (the same trajectory, to the last bit)
        fns = rhs.grid_functions(fns)
    g = _GridArgs(grid, X, Z, p)
    U = _eval_inputs(num, inputs, grid, X, p, g)
    g.set_u(U)
    Y = g.eval(fns["outputs"], with_z=True) if num.y_names else np.zeros((len(grid), 0))
    E = g.eval(fns["energy"], with_z=False)[:, 0] if num.energy is not None else None
    P = g.eval(fns["power"], with_z=True)[:, 0] if num.power is not None else None
    shown = X if num.report_names == num.x_names else g.eval(fns["report"], with_z=False, with_u=False)
    C = None
    if num.constraints.size1_out(0):
        phi = g.eval(fns["constraints"], with_z=False, with_u=False)
        C = np.sqrt(np.mean(phi**2, axis=1))
    # the start, and the parameter vector the run used (pictures evaluate the model's `draw` positions with it)
    info = {**info, "x0": dict(zip(num.x_names, x_init.tolist())), "p": np.asarray(p, dtype=float).ravel()}
    return SimulationResult(
        t=grid, x=X, z=Z, x_names=num.x_names, z_names=num.z_names, y=Y, y_names=num.y_names,
        energy=E, constraint_rms=C, info=info, shown=shown, shown_names=num.report_names, power=P,
        u=U, u_names=tuple(num.u_names), units=num.system.units,
    )


def energy_balance(t: np.ndarray, energy: np.ndarray, power: np.ndarray,
                   integral: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(∫₀ᵗ P ds, E(t) − E(0) − ∫₀ᵗ P ds) on the output grid, P = dE/dt along the flow.

    P is the net power into the system (inputs and forces supply, dampers and resistors
    dissipate); the residual is zero for the exact solution, so it measures the integration
    error of driven and damped models the way the drift |E(t) − E(0)| does for conservative
    ones. ``integral``: ∫ P ds integrated with the states (``SimulationResult.power_integral``: a quadrature of
    the integrator, its steps and method), so that the residual measures the simulation; without it, Simpson's
    rule on the output grid (O(dt⁴) for smooth P, which then dominates the residual of an accurate run: a
    drivetrain right to 1.3e-7 showed 1.1e-2): :func:`cumulative_simpson`, scipy's rule in numpy (importing
    scipy.integrate costs 0.3–0.8 s)."""
    if integral is not None:
        integral = np.asarray(integral, dtype=float)
        return integral, energy - energy[0] - integral
    if len(t) < 2:
        return np.zeros_like(t), np.zeros_like(t)
    integral = cumulative_simpson(power, t)
    return integral, energy - energy[0] - integral


def cumulative_simpson(y: np.ndarray, x: np.ndarray) -> np.ndarray:
    """∫_{x0}^{x_k} y for every k (0 first), exactly as ``scipy.integrate.cumulative_simpson(y, x=x, initial=0)``
    computes it (the same operations in the same order: equal to the last bit, tested): each interval by the
    quadratic through it and its right neighbour, averaged with the left neighbour's where both exist; two
    samples: the trapezoid."""
    y = np.asarray(y, dtype=float)
    x = np.asarray(x, dtype=float)
    if len(y) < 3:
        out = np.zeros(len(y))
        if len(y) == 2:
            out[1] = (x[1] - x[0]) * (y[0] + y[1]) / 2.0
        return out
    dx = np.diff(x)
    h1 = _simpson_pieces(y, dx)
    h2 = _simpson_pieces(y[::-1], dx[::-1])[::-1]
    pieces = np.empty(len(dx))
    pieces[:-1:2] = h1[::2]
    pieces[1::2] = h2[::2]
    pieces[-1] = h2[-1]
    return np.concatenate(([0.0], np.cumsum(pieces) + 0.0))


def _simpson_pieces(y: np.ndarray, dx: np.ndarray) -> np.ndarray:
    """Integral over [x_k, x_{k+1}] of the quadratic through samples k, k+1, k+2 (unequal steps; scipy's eq. 8)."""
    x21, x32 = dx[:-1], dx[1:]
    f1, f2, f3 = y[:-2], y[1:-1], y[2:]
    x31 = x21 + x32
    x21_x31 = x21 / x31
    x21_x32 = x21 / x32
    x21x21_x31x32 = x21_x31 * x21_x32
    coeff1 = 3 - x21_x31
    coeff2 = 3 + x21x21_x31x32 + x21_x31
    coeff3 = -x21x21_x31x32
    return x21 / 6 * (coeff1 * f1 + coeff2 * f2 + coeff3 * f3)


class _GridArgs:
    """The grid, states, algebraics, parameters and inputs as CasADi matrices, converted once (numpy → DM costs
    ~50 ns per element, more than most functions' evaluation) for every function evaluated on the whole grid
    in one mapped call; the parameters are one shared column (not repeated per sample)."""

    def __init__(self, grid, X, Z, p):
        self.n = len(grid)
        self.t = ca.DM(np.asarray(grid, dtype=float)[None, :])
        self.x = ca.DM(np.asarray(X, dtype=float).T)
        self.z = ca.DM(np.asarray(Z, dtype=float).T) if Z.shape[1] else ca.DM(0, self.n)
        self.p = ca.DM(np.asarray(p, dtype=float))
        self.u = ca.DM(0, self.n)

    def set_u(self, U) -> None:
        self.u = ca.DM(np.asarray(U, dtype=float).T) if U.shape[1] else ca.DM(0, self.n)

    def eval(self, fn, *, with_z: bool, with_u: bool = True) -> np.ndarray:
        """fn(t, x, [z,] p, [u]) at every sample: (n, rows of fn's output)."""
        args = [self.t, self.x] + ([self.z] if with_z else []) + [self.p] + ([self.u] if with_u else [])
        shared = [False] * len(args)
        shared[2 + with_z] = True  # p
        return np.asarray(_mapped(fn, self.n, tuple(shared))(*args)).T


_MAPS: dict = {}  # (id(fn), n, shared) -> (fn, fn mapped over n samples): building a map costs 0.1–0.2 ms


def _mapped(fn, n: int, shared: tuple):
    key = (id(fn), n, shared)
    hit = _MAPS.get(key)
    if hit is not None and hit[0] is fn:
        return hit[1]
    if len(_MAPS) >= 64:
        _MAPS.pop(next(iter(_MAPS)))
    m = fn.map(n, list(shared), [False] * fn.n_out())
    _MAPS[key] = (fn, m)
    return m


def _eval_shown(num, grid, X, p):
    if num.report_names == num.x_names:
        return X
    return _GridArgs(grid, X, np.zeros((len(grid), 0)), p).eval(num.report, with_z=False, with_u=False)


def _eval_inputs(num, inputs, grid, X, p, g: _GridArgs | None = None):
    if not num.u_names:
        return np.zeros((len(grid), 0))
    cols = []
    n = len(grid)
    for name in num.u_names:
        fn = inputs[name].fn
        if isinstance(fn, ca.Function) and fn.n_in() == 3:  # the whole grid in one call, not one per sample
            g = g if g is not None else _GridArgs(grid, X, np.zeros((n, 0)), p)
            cols.append(np.asarray(_mapped(fn, n, (False, False, True))(g.t, g.x, g.p), dtype=float).reshape(n))
        elif isinstance(fn, _Interpolated):  # a CSV column: the interpolant on the whole grid at once
            cols.append(np.asarray(fn.interp.map(n)(np.asarray(grid, dtype=float)[None, :]), dtype=float).reshape(n))
        else:
            cols.append(np.array([float(fn(ti, xi, p)) for ti, xi in zip(grid, X)], dtype=float))
    return np.array(cols).T


def _eval_map(fn, grid, X, Z, p, U, *, with_z):
    g = _GridArgs(grid, X, Z, p)
    g.set_u(U)
    return g.eval(fn, with_z=with_z)


