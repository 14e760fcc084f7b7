"""Simulation on a fixed output grid: by default DOP853 with a stiffness test that hands over to CVODES BDF
(pdsl.sim.auto), IDAS for DAEs, CVODES for events; or the integrator asked for.

Exogenous inputs are bound before integration, each to an expression of
``t`` (and the states) given on the command line, or to a column of a CSV
file (linear interpolation in time).
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import field, replace
from pathlib import Path
from typing import Mapping

import casadi as ca
import numpy as np

from ..backend.functions import NumericSystem
from ..diagnostics import PdslError
from ..options import parse_assignment, parse_float  # noqa: F401 (re-exported; casadi-free home)
from ..records import record

# sympy, the parser and the resolver are imported where an expression is read (input_from_expression):
# simulating a cached model imports none of them.

__all__ = ["SimulationResult", "simulate", "time_grid", "parse_assignment", "InputSignal", "input_from_expression", "inputs_from_csv"]

# the default: DOP853 with a stiffness test that hands over to CVODES BDF, IDAS for DAEs, CVODES where the run
# stops at events or switch times (pdsl.sim.auto)
AUTO = "auto"
# name -> (CasADi plugin, options)
INTEGRATORS = {
    "cvodes": ("cvodes", {"linear_multistep_method": "adams"}),  # non-stiff: Adams–Moulton
    "cvodes-bdf": ("cvodes", {"linear_multistep_method": "bdf"}),  # stiff: BDF
    "idas": ("idas", {}),  # DAEs
}
# fixed-step schemes of pdsl.numerics (unrolled CasADi graphs; symplectic: midpoint, gauss2)
FIXED_STEP = ("euler", "rk4", "midpoint", "gauss2")
# adaptive explicit schemes compiled to C around the generated rhs (pdsl.sim.native): small non-stiff ODEs
NATIVE = ("dop853",)
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
class InputSignal:
    """An exogenous input bound to ``fn(t, x, p) -> value`` (CasADi-callable)."""

    name: str
    fn: object
    description: str
    # with conditions on t alone (``--input "F=if t < 1 then 0 else 2"``): fn_mode(t, t_mode, x, p) reads them
    # at t_mode, and switches(t, p) -> g changes sign at the switching times (pdsl.backend.events)
    fn_mode: object = None
    switches: object = None


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


def input_from_expression(num: NumericSystem, name: str, text: str) -> InputSignal:
    """``--input F=sin(t)``: an expression of t, states and parameters (pdsl syntax)."""
    from .. import symbols as S
    from ..backend.sympy_to_casadi import Converter
    from ..parse.parser import parse_expression
    from ..resolve.expressions import Evaluator, Scope

    origin = f"--input {name}"
    expr_ast = parse_expression(text, origin)
    sys = num.system
    names: dict[str, object] = {"t": S.TIME}
    names.update({s.name: s.symbol for s in sys.states})
    names.update({q.name: q.symbol for q in sys.params})
    expr = Evaluator(Scope(names)).scalar(expr_ast, f"input `{name}`")
    t = ca.SX.sym("t")
    x = ca.SX.sym("x", num.nx)
    p = ca.SX.sym("p", len(num.p_names))
    symbols = {S.TIME: t}
    symbols.update({s.symbol: x[i] for i, s in enumerate(sys.states)})
    symbols.update({q.symbol: p[i] for i, q in enumerate(sys.params)})
    fn = ca.Function(f"u_{len(name)}", [t, x, p], [Converter(symbols)(expr)])
    from ..backend.events import MODE_TIME, mode_substitution, switch_functions, time_conditions

    conditions = time_conditions([expr], {q.symbol for q in sys.params})
    if not conditions:
        return InputSignal(name=name, fn=fn, description=text)
    tm = ca.SX.sym("t_mode")
    conv = Converter({**symbols, MODE_TIME: tm})
    fn_mode = ca.Function(f"u_mode_{len(name)}", [t, tm, x, p], [conv(expr.xreplace(mode_substitution(conditions)))])
    switches = ca.Function(f"u_switches_{len(name)}", [t, p], [ca.vertcat(*[conv(g) for g in switch_functions(conditions)])])
    return InputSignal(name=name, fn=fn, description=text, fn_mode=fn_mode, switches=switches)


def inputs_from_csv(path: str | Path, wanted: tuple[str, ...], *,
                    cover: tuple[float, float] | None = None, units=None) -> dict[str, InputSignal]:
    """Columns of a CSV with a ``t`` column, interpolated linearly in time.

    Every column is ``t`` or one of ``wanted``; at least two rows with increasing ``t``;
    ``cover = (t0, t_end)``: the samples must span that interval (no extrapolation).
    Problems are ``BadCsv`` errors at the file's cell. ``units``: the model's ``{name: unit}``, into which columns
    with a unit in the file's metadata are converted (pdsl.data.units).
    """
    from ..data.csvio import cell_span, read_table, shown_value
    from ..data.units import to_model_units
    from ..diagnostics import Span

    table = to_model_units(read_table(path), dict(units or ()))
    p = table.path
    inputs = ", ".join(wanted) or "none"
    for k, name in enumerate(table.columns):
        if name != "t" and name not in wanted:
            raise PdslError.at("BadCsv", f"column `{shown_value(name)}` is not an exogenous input of the model",
                               cell_span(p, 1, k), f"input data has a `t` column and one column per input; inputs: {inputs}")
    if "t" not in table.columns:
        raise PdslError.at("BadCsv", "no `t` column", Span.point(p, 1, 1),
                           hint="the first column of a trajectory CSV is the time t")
    tc = table.columns.index("t")
    if len(table.data) < 2:
        raise PdslError.at("BadCsv", f"input data needs at least 2 rows to interpolate, {p} has {len(table.data)}",
                           cell_span(p, 1 + len(table.data), tc),
                           "give the input at two or more times covering the simulated interval (linear in between)")
    t = table.column("t")
    steps = np.diff(t)
    if np.any(steps <= 0):
        row = int(np.argmax(steps <= 0)) + 3
        raise PdslError.at("BadCsv", f"time does not increase: t = {float(t[row - 2])!r} after {float(t[row - 3])!r}",
                           cell_span(p, row, tc), "input data must be sorted by t, each time once")
    if cover is not None:
        t0, t1 = cover
        tol = 1e-9 * max(1.0, abs(t0), abs(t1))
        if t[0] > t0 + tol:
            raise PdslError.at("BadCsv", f"input data starts at t = {float(t[0])!r}, after the simulation start t = {t0:g}",
                               cell_span(p, 2, tc), "inputs are not extrapolated: add a sample at or before the start")
        if t[-1] < t1 - tol:
            raise PdslError.at("BadCsv", f"input data ends at t = {float(t[-1])!r}, before the simulation end t = {t1:g}",
                               cell_span(p, len(table.data) + 1, tc),
                               "inputs are not extrapolated: add samples up to --t-end, or shorten --t-end")
    out = {}
    for name in wanted:
        if name not in table.columns:
            continue
        interp = ca.interpolant(f"u_{len(out)}", "linear", [t], table.column(name))
        out[name] = InputSignal(name=name, fn=_lift_interp(interp), description=f"column `{name}` of {path}")
    return out


class _Interpolated:
    """An interpolant of t as an input signal ``fn(t, x, p)``."""

    def __init__(self, interp):
        self.interp = interp

    def __call__(self, t, x, p):
        return self.interp(t)


def _lift_interp(interp):
    return _Interpolated(interp)


STABILIZERS = ("none", "project", "baumgarte")
BAUMGARTE_FACTOR = 3.0  # default gains: critically damped, this many times the fastest rate of the motion


@record(kw_only=False, slots=False)
class BaumgarteGains:
    """α, β of Φ̈ + 2αΦ̇ + β²Φ = 0 and how they were chosen."""

    alpha: float
    beta: float
    how: str


def baumgarte_gains(num: NumericSystem, X0: np.ndarray, p: np.ndarray, grid: np.ndarray, *,
                    alpha: float | None = None, beta: float | None = None, fixed_step: float | None = None) -> BaumgarteGains:
    """Gains for Baumgarte stabilisation; the defaults come from the time scale of the motion.

    α = β = ω (critical damping: a violation decays like (1 + ωt)e^(−ωt)) with
    ω = BAUMGARTE_FACTOR·ρ, ρ the fastest rate of the motion over the starts X0 (at most
    100 of them), the largest of

    * the spectral radius of ∂f/∂x (a spring's √(k/m), a potential's curvature);
    * max |ẋ|/L and √(max |ẍ|/L), L the length scale of the constraints (the smallest
      ‖∇Φ_k‖/‖∇²Φ_k‖ over the quadratic rows: a link length, a body's axis length):
      a rotation rate, and √(g/l) for a pendulum even where ∂f/∂x vanishes (at rest,
      horizontal);

    floored at 1/(t_end − t0). For a fixed-step scheme ω is capped at 1/h to keep the step
    stable. One gain given: the other takes the same value (critical damping).
    """
    for name, v in (("--baumgarte-alpha", alpha), ("--baumgarte-beta", beta)):
        if v is not None and not (math.isfinite(v) and v >= 0):
            raise PdslError.at("BadOption", f"{name} must be a non-negative number, got {v}",
                               hint="α damps Φ̇ and β² pulls Φ back; α = β (critical damping) is the usual choice")
    if alpha is not None or beta is not None:
        a = alpha if alpha is not None else beta
        b = beta if beta is not None else alpha
        return BaumgarteGains(alpha=float(a), beta=float(b), how="given")
    rho = max(_motion_rate(num, x0, p, float(grid[0])) for x0 in np.atleast_2d(X0)[:100])
    floor = 1.0 / float(grid[-1] - grid[0])
    omega = BAUMGARTE_FACTOR * max(rho, floor)
    how = f"{BAUMGARTE_FACTOR:g} × the fastest rate of the motion at the start, {max(rho, floor):.4g}/s"
    if fixed_step is not None and omega * fixed_step > 1.0:
        omega = 1.0 / fixed_step
        how = f"capped at 1/h for the fixed step h = {fixed_step:g}"
    return BaumgarteGains(alpha=omega, beta=omega, how=how)


def _motion_rate(num: NumericSystem, x0: np.ndarray, p: np.ndarray, t0: float) -> float:
    """ρ of :func:`baumgarte_gains` at one state (gains set to zero)."""
    T = ca.SX if num.kind == "SX" else ca.MX
    x = T.sym("x", num.nx)
    q = p.copy()
    q[[num.p_names.index(n) for n in num.system.stabilization_params]] = 0.0
    f = num.dae(t0, x, num.z_start, q, ca.DM.zeros(len(num.u_names), 1))[0]
    phi = num.constraints(t0, x, q)
    symbols = set().union(*(c.residual.free_symbols for c in num.system.constraints))
    pos = [i for i, s in enumerate(num.system.states) if s.symbol in symbols]
    vel = f[pos]
    outs = [ca.jacobian(f, x), vel, ca.jtimes(vel, x, f), ca.jacobian(phi, x)]
    outs += [ca.hessian(phi[k], x)[0] for k in range(phi.shape[0])]
    vals = [np.asarray(v) for v in ca.Function("rates", [x], outs)(x0)]
    J, v, a, D, H = vals[0], vals[1].ravel(), vals[2].ravel(), vals[3], vals[4:]
    if not all(np.all(np.isfinite(m)) for m in vals):
        return 0.0
    rate = float(np.max(np.abs(np.linalg.eigvals(J)))) if J.size else 0.0
    lengths = [np.linalg.norm(D[k]) / np.linalg.norm(Hk, 2) for k, Hk in enumerate(H) if np.any(Hk != 0)]
    lengths = [L for L in lengths if L > 0 and np.isfinite(L)]
    if lengths and v.size:
        L = min(lengths)
        rate = max(rate, float(np.max(np.abs(v))) / L, math.sqrt(float(np.max(np.abs(a))) / L))
    return rate


def _stabilization(num: NumericSystem) -> str:
    return num.system.stabilization


def _apply_gains(num, st: "_Setup", X0, grid, alpha, beta, params) -> tuple["_Setup", dict]:
    """Put the Baumgarte gains into the parameter vector (unless given as parameters)."""
    if st.stabilize != "baumgarte":
        if alpha is not None or beta is not None:
            raise PdslError.at("BadOption", "--baumgarte-alpha/--baumgarte-beta need --stabilize baumgarte")
        return st, {}
    names = num.system.stabilization_params
    given = {n: (params or {})[n] for n in names if n in (params or {})}
    if given and (alpha is not None or beta is not None):
        raise PdslError.at("BadOption", "give the Baumgarte gains either as --baumgarte-alpha/-beta or as --param, not both")
    if given:
        alpha, beta = given.get(names[0]), given.get(names[1])
    h = float(grid[1] - grid[0]) / st.substeps if st.integrator in FIXED_STEP and len(grid) > 1 else None
    gains = baumgarte_gains(num, X0, st.p, grid, alpha=alpha, beta=beta, fixed_step=h)
    p = st.p.copy()
    p[num.p_names.index(names[0])], p[num.p_names.index(names[1])] = gains.alpha, gains.beta
    return replace(st, p=p), {"baumgarte": gains}


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
    if integrator not in INTEGRATORS and integrator not in FIXED_STEP and integrator not in NATIVE:
        raise PdslError.at("BadOption", f"--integrator {integrator}: unknown",
                           hint="one of: " + ", ".join([AUTO, *INTEGRATORS, *NATIVE, *FIXED_STEP]))
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
    if stabilize == "baumgarte" and lowered != "baumgarte":
        raise PdslError.at("BadOption", "stabilize='baumgarte' needs the Baumgarte rows in the lowered system",
                           num.system.span, "lower the model with lower(model, formulation, stabilize='baumgarte')")
    if lowered == "baumgarte" and stabilize != "baumgarte":
        raise PdslError.at("BadOption", f"this system was lowered with Baumgarte rows: simulate it with "
                           f"stabilize='baumgarte', not {stabilize!r}", num.system.span)
    if num.nx == 0:
        raise PdslError.at("EmptyModel", f"{num.system.name} has no differential states to integrate", num.system.span)
    from ..cache import default_cache

    iteration = ("functional" if num.nx >= FUNCTIONAL_FROM else "newton") if integrator == "cvodes" else ""
    if integrator in NATIVE:
        if not rtol >= 100 * np.finfo(float).eps:  # scipy's floor for DOP853 (rounding dominates below it)
            raise PdslError.at("BadOption", f"--rtol {rtol:g} is below 100 machine epsilons (2.2e-14) for {integrator}")
        # auto: the compiled driver or the same steps from Python over the VM, as the build pays (pdsl.sim.auto)
        rhs = RhsPlan(mode=compile if auto else "yes", cache=default_cache())
    else:
        rhs = RhsPlan(mode=compile, cache=default_cache()) if integrator in INTEGRATORS else None
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
    if not fns or (st.integrator not in INTEGRATORS and st.integrator not in NATIVE) or st.stabilize == "project" \
            or len(grid) < 2:
        return st
    from ..backend.events import switch_times

    times = sorted({r for f in fns for r in switch_times(f, st.p, float(grid[0]), float(grid[-1]))})
    tol = 1e-12 * max(1.0, abs(float(grid[0])), abs(float(grid[-1])))
    merged = [r for k, r in enumerate(times) if k == 0 or r - times[k - 1] > tol]
    return replace(st, switches=tuple(merged))


def _dae_exprs(num, st: _Setup, sigs: tuple):
    """Symbols (t, x, z, P) and the model's (xdot, g) with the input signals ``sigs`` bound in."""
    T = ca.SX if num.kind == "SX" else ca.MX
    t, x, z, P = T.sym("t"), T.sym("x", num.nx), T.sym("z", num.nz), T.sym("p", len(st.p))
    u = ca.vertcat(*[fn(t, x, P) for fn in sigs]) if sigs else T(0, 1)
    return (t, x, z, P, *num.dae(t, x, z, P, u))


def _integrate(num, grid, X0, st: _Setup, threads: int = 1) -> list[tuple[np.ndarray, np.ndarray]]:
    """Trajectories (len(grid) × nx states, len(grid) × nz algebraics) for each row of X0."""
    if st.stabilize != "project" and st.integrator in INTEGRATORS and not st.switches:
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
                           how=f"{INTEGRATORS[st.integrator][0].upper()} quadrature")
        return [(np.asarray(res["xf"]).T, np.asarray(res["zf"]).T if num.nz else np.zeros((len(grid), 0)))]
    xf = np.asarray(res["xf"])  # nx × (len(grid) · n), trajectory after trajectory
    zf = np.asarray(res["zf"])
    m = len(grid)
    return [
        (xf[:, k * m : (k + 1) * m].T, zf[:, k * m : (k + 1) * m].T if num.nz else np.zeros((m, 0)))
        for k in range(n)
    ]


def _sundials(num, st, t, x, z, P, xdot, g, t0, tout, start=None, steps: int = STEPS_MAX, quad=None):
    """The CVODES/IDAS integrator over ``tout``; ``start`` = (x0, p, z0) for the probe of ``--compile auto``;
    at most ``steps`` steps towards each output time; ``quad``: an integrand integrated with the states (a
    quadrature: the solver's own steps and method, outside its error test, so the states do not change by a bit)."""
    plugin, plugin_opts = INTEGRATORS[st.integrator]
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


def _first_line(exc: Exception) -> str:
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    for ln in lines:
        if "failed" in ln.lower() or "error" in ln.lower():
            return ln[:300]
    return (lines[-1] if lines else "unknown error")[:300]
