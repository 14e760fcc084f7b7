"""`pdsl compile --target fmu`: an FMI 2.0 FMU (Model Exchange and Co-Simulation in one archive).

The FMU holds

* ``modelDescription.xml``: states (with their start values), state derivatives, parameters,
  exogenous inputs, and as outputs every column that ``pdsl simulate`` writes (the shown state —
  e.g. velocities of a Cartesian model — and the declared outputs), named exactly like the CSV
  columns, so that an FMI tool records them by default; ModelStructure dependencies are read off
  CasADi's Jacobian sparsity; units where the model declares them;
* ``sources/``: the C code — CasADi's generated code for one evaluation function (derivatives,
  shown columns, outputs) and its forward-mode derivative (``fmi2GetDirectionalDerivative``),
  plus a hand-written FMI 2.0 wrapper (``fmu.c``) with a fixed-step RK4 solver for Co-Simulation;
* ``binaries/<platform>/<id>.so``: the wrapper compiled for this platform.

State events (``when``, LANGUAGE.md §11): the comparisons of the conditions are the FMI event indicators
(``numberOfEventIndicators``, ``fmi2GetEventIndicators``: atom k is true where g_k < 0, or <= 0); each condition is
generated as C over the atoms' truth values; ``fmi2NewDiscreteStates`` fires the events whose condition went from
false (the truth values carried from the last event or the start) to true, applies their resets (read before the
event) and asks for another round (``newDiscreteStatesNeeded``) when the resets made a condition true; an indicator
within rounding of zero counts on the side the motion goes to, as in ``pdsl simulate``. Co-Simulation locates an
atom's change by bisection on its RK4 step. Impulse resets (constrained models, shown columns as targets) are
refused at compile time (``NotYetSupported``).

Traps handled here:

* a state may itself be called ``der(q1)`` (Lagrangian velocities): FMI's conventional derivative
  name ``der(q1)`` would clash with it, so derivative variables are named ``d/dt(NAME)`` under the
  flat naming convention (``/`` never occurs in a pdsl name);
* CasADi's generated C exports global symbols: every generated function is named with the prefix
  ``pdsl_<id>_`` (CasADi's ``prefix`` option covers its internal helpers), and the library is built
  with hidden visibility, so only the ``fmi2*`` entry points are exported; two pdsl FMUs can be
  loaded into one process.

Generated C never contains a model name: variables are addressed by value reference, the
identifier is sanitised to ``[A-Za-z0-9_]``; names appear only in the XML, escaped by ElementTree.
Neural network weights (and fitted values, ``--params``) are baked in as the parameter vector's
start; the physical parameters are tunable FMI parameters, the weights are not exposed.
"""

from __future__ import annotations

import hashlib
import math
import os
import platform
import re
import shutil
import subprocess
import sys
import time
import uuid
import zipfile
from dataclasses import dataclass
from pathlib import Path
from xml.etree import ElementTree as ET

import casadi as ca
import numpy as np

from .. import __version__
from ..backend.functions import NumericSystem
from ..diagnostics import PdslError
from .fmi_units import BASE_UNITS, FmiUnit, modelica_unit
from .targets import event_support, generate_c, reset_function

__all__ = ["write_fmu", "fmu_identifier", "FmuLayout", "layout", "Experiment", "DEFAULT_CS_STEP", "DEFAULT_STOP_TIME",
           "CS_STEP_NAME"]

DEFAULT_CS_STEP = 1e-3
DEFAULT_STOP_TIME = 10.0  # <DefaultExperiment stopTime> when `compile --t-end` is not given (a model has no end time)
CS_STEP_NAME = "pdsl:cs_max_step"  # ':' never occurs in a pdsl name

# value-reference kinds (shared by the XML and the C tables)
K_TIME, K_STATE, K_DER, K_REPORT, K_OUTPUT, K_PARAM, K_INPUT, K_CSSTEP = range(8)


def fmu_identifier(name: str) -> str:
    """The FMU's modelIdentifier: the model name as a C identifier (also the binary's file name)."""
    ident = re.sub(r"[^A-Za-z0-9_]", "_", name) or "model"
    if ident[0].isdigit():
        ident = f"m_{ident}"
    return ident[:64]


def _platform() -> tuple[str, str]:
    """(binaries folder, shared-library suffix) of this platform, as FMI 2.0 names them."""
    bits = "64" if sys.maxsize > 2**32 else "32"
    system = platform.system()
    if system == "Linux":
        return f"linux{bits}", ".so"
    if system == "Darwin":
        return f"darwin{bits}", ".dylib"
    if system == "Windows":
        return f"win{bits}", ".dll"
    raise PdslError.at("NotYetSupported", f"FMU binaries for platform {system!r} are not supported",
                       hint="FMI 2.0 defines binaries for Linux, macOS and Windows")


@dataclass(frozen=True)
class Experiment:
    """The FMU's ``<DefaultExperiment>``: what a tool runs when told nothing else (fmpy otherwise stops at t = 1).
    As ``pdsl simulate`` without options: the output interval ``stop_time``/1000 and the relative tolerance 1e-8."""

    stop_time: float = DEFAULT_STOP_TIME
    step_size: float | None = None  # None: stop_time / 1000
    tolerance: float = 1e-8

    def __post_init__(self):
        if not (math.isfinite(self.stop_time) and self.stop_time > 0):
            raise PdslError.at("BadOption", f"--t-end must be positive, got {self.stop_time}")
        if self.step_size is None:
            object.__setattr__(self, "step_size", self.stop_time / 1000)
        if not (math.isfinite(self.step_size) and 0 < self.step_size <= self.stop_time):
            raise PdslError.at("BadOption", f"--dt must be positive and at most --t-end, got {self.step_size}")


@dataclass(frozen=True)
class Var:
    name: str
    kind: int
    index: int  # position within its kind
    causality: str
    variability: str
    initial: str | None
    start: float | None = None
    derivative: int | None = None  # 1-based index of the state (derivatives)
    unit: str | None = None  # Modelica form (pdsl.compile.fmi_units)
    description: str | None = None


@dataclass(frozen=True)
class FmuLayout:
    """The FMI variables of a model, in ModelVariables order (value reference = position)."""

    variables: tuple[Var, ...]
    report_rows: tuple[int, ...]  # rows of the report vector that are separate outputs (not states)
    n_phys: int  # physical parameters (FMI parameters); the rest of p (network weights) is baked in
    units: tuple[FmiUnit, ...] = ()  # every unit the variables use, with its base units (<UnitDefinitions>)

    def names(self) -> list[str]:
        return [v.name for v in self.variables]

    def of_kind(self, kind: int) -> list[Var]:
        return [v for v in self.variables if v.kind == kind]


def _units(system):
    """name -> its unit in Modelica form (``N.m``, ``m/s2``: :mod:`pdsl.compile.fmi_units`), for the quantities whose
    unit the model declares or derives (none otherwise); ``derivative=True``: the unit of its time derivative."""
    of = getattr(system, "unit_of", None)

    def unit(name: str, derivative: bool = False) -> FmiUnit | None:
        u = of(name) if of is not None else None
        text = str(u).strip() if u is not None else ""
        if not text:
            return None
        return modelica_unit(f"({text})/s" if derivative else text)

    return unit


def layout(num: NumericSystem) -> FmuLayout:
    """Map the numeric system to FMI variables; every CSV column of ``pdsl simulate`` is an output."""
    sys_ = num.system
    if num.nz:
        raise PdslError.at("NotYetSupported", f"{sys_.name} is a DAE ({num.nz} algebraic variables): the FMU target "
                           "exports ODEs only", sys_.span, hint="the C and CasADi targets export DAEs")
    report = sys_.report_columns()
    state_of = {s.name: s for s in sys_.states}
    shown_states: set[str] = set()
    extra_rows: list[int] = []
    for row, (name, expr) in enumerate(report):
        if name in state_of:
            if expr != state_of[name].symbol:
                raise PdslError.at("NotYetSupported", f"the shown column `{name}` has a state's name but another value",
                                   sys_.span)
            shown_states.add(name)
        else:
            extra_rows.append(row)
    n_phys = len(sys_.params)
    fmi_unit = _units(sys_)
    used: dict[str, FmiUnit] = {}

    def _unit(name: str, derivative: bool = False) -> str | None:
        u = fmi_unit(name, derivative)
        if u is None:
            return None
        used.setdefault(u.name, u)
        return u.name
    variables: list[Var] = [Var("time", K_TIME, 0, "independent", "continuous", None,
                                description="simulation time")]
    for i, s in enumerate(sys_.states):
        variables.append(Var(s.name, K_STATE, i, "output" if s.name in shown_states else "local", "continuous",
                             "exact", float(num.x_start[i]), unit=_unit(s.name)))
    for i, s in enumerate(sys_.states):
        variables.append(Var(f"d/dt({s.name})", K_DER, i, "local", "continuous", "calculated",
                             derivative=2 + i, description=f"time derivative of {s.name}",
                             unit=_unit(s.name, derivative=True)))
    for k, row in enumerate(extra_rows):
        variables.append(Var(report[row][0], K_REPORT, k, "output", "continuous", "calculated",
                             unit=_unit(report[row][0])))
    for k, o in enumerate(sys_.outputs):
        variables.append(Var(o.name, K_OUTPUT, k, "output", "continuous", "calculated", unit=_unit(o.name)))
    for k, q in enumerate(sys_.params):
        variables.append(Var(q.name, K_PARAM, k, "parameter", "tunable", "exact", float(num.p_default[k]),
                             unit=_unit(q.name)))
    for k, v in enumerate(sys_.exogenous_inputs):
        variables.append(Var(v.name, K_INPUT, k, "input", "continuous", None, 0.0, unit=_unit(v.name)))
    variables.append(Var(CS_STEP_NAME, K_CSSTEP, 0, "parameter", "tunable", "exact", DEFAULT_CS_STEP,
                         description="Co-Simulation: largest internal RK4 step"))
    seen: dict[str, int] = {}
    for v in variables:
        if v.name in seen:
            raise PdslError.at("BadOption", f"the FMU would have two variables called `{v.name}`", sys_.span,
                               hint="rename the output or parameter that repeats a state's or column's name")
        seen[v.name] = 1
    return FmuLayout(tuple(variables), tuple(extra_rows), n_phys, tuple(used[k] for k in sorted(used)))


# ---------------------------------------------------------------- CasADi functions
def _time_events(num: NumericSystem, prefix: str) -> tuple[ca.Function, ca.Function] | None:
    """For models whose conditions switch in time (issue 11): ``modes(t, t_mode, x, p, u) -> xdot`` with the
    conditions read at ``t_mode``, and ``switches(t, p) -> g`` whose sign changes are the switch times."""
    dae_modes, switches = getattr(num, "dae_modes", None), getattr(num, "switches", None)
    if dae_modes is None or switches is None or switches.size1_out(0) == 0:
        return None
    T = ca.SX if num.kind == "SX" else ca.MX
    t, tm = T.sym("t"), T.sym("t_mode")
    x, p, u = T.sym("x", num.nx), T.sym("p", len(num.p_names)), T.sym("u", len(num.u_names))
    xdot = dae_modes(t, tm, x, T(0, 1), p, u)[0]
    modes = ca.Function(f"{prefix}modes", [t, tm, x, p, u], [xdot], ["t", "t_mode", "x", "p", "u"], ["xdot"])
    sw = ca.Function(f"{prefix}switches", [t, p], [switches(t, p)], ["t", "p"], ["g"])
    return modes, sw


def _event_functions(num: NumericSystem, prefix: str) -> list[ca.Function] | None:
    """For a model with `when`: ``PREFIX_indicators(t, x, p, u) -> g`` and, per event with resets,
    ``PREFIX_reset_J(t, x, p, u) -> x_next`` (None without events)."""
    hy = getattr(num, "hybrid", None)
    if hy is None:
        return None
    T = ca.SX if num.kind == "SX" else ca.MX
    t, x = T.sym("t"), T.sym("x", num.nx)
    p, u = T.sym("p", len(num.p_names)), T.sym("u", len(num.u_names))
    g = hy.atoms(t, x, T(0, 1), p, u)
    out = [ca.Function(f"{prefix}indicators", [t, x, p, u], [g], ["t", "x", "p", "u"], ["g"])]
    out += [reset_function(num, j, f"{prefix}reset_{j}", with_z=False)
            for j in range(len(hy.conditions)) if hy.resets[j] is not None]
    return out


def _functions(num: NumericSystem, lay: FmuLayout, prefix: str) -> tuple[ca.Function, ca.Function]:
    """The CasADi Functions ``PREFIX_eval(t, x, p, u) -> (xdot, r, y)`` and its forward derivative
    ``fwd(t, x, p, u, dx, dp, du) -> (dxdot, dr, dy)`` (r: the shown columns that are not states).

    An explicit model's rates are its expressions (SX, common subexpressions shared: CasADi's ``cse``), and so are a
    small linear-implicit model's, solved symbolically. A larger linear-implicit one (a mass matrix, multipliers) is
    not: the generated C assembles the sparse A(x) and b(x) of A·w = b and solves it with CasADi's sparse QR at run
    time (:func:`_linear_parts`) — the symbolic solution grows with the coupling of the rows (the composed
    motor–pendulum, 35 unknowns: 368 KB of C solved symbolically, 77 KB assembled and factorised), the
    factorisation with the rows' number of nonzeros."""
    linear = _linear_parts(num, prefix)
    T = ca.MX if linear is not None or num.kind != "SX" else ca.SX
    t = T.sym("t")
    x = T.sym("x", num.nx)
    p = T.sym("p", len(num.p_names))
    u = T.sym("u", len(num.u_names))
    z = T(0, 1)
    rep_all = num.report(t, x, p)
    r = ca.vertcat(*[rep_all[i] for i in lay.report_rows]) if lay.report_rows else T(0, 1)
    if linear is None:
        xdot = num.rhs(t, x, p, u)
        y = num.outputs(t, x, z, p, u)
    else:
        assemble, outputs = linear
        A, b = assemble(t, x, p, u)
        w = ca.solve(A, b, "qr")
        xdot = w[: num.nx]
        y = outputs(t, x, p, u, w)
    opts = {"cse": True} if T is ca.SX else {}
    ev = ca.Function(f"{prefix}eval", [t, x, p, u], [xdot, r, y], ["t", "x", "p", "u"], ["xdot", "r", "y"], opts)
    dx, dp, du = T.sym("dx", num.nx), T.sym("dp", len(num.p_names)), T.sym("du", len(num.u_names))
    v, dv = ca.vertcat(x, p, u), ca.vertcat(dx, dp, du)
    outs = [ca.jtimes(e, v, dv) if e.numel() and v.numel() else T.zeros(e.shape) for e in (xdot, r, y)]
    fwd = ca.Function(f"{prefix}fwd", [t, x, p, u, dx, dp, du], outs,
                      ["t", "x", "p", "u", "dx", "dp", "du"], ["dxdot", "dr", "dy"], opts)
    return ev, fwd


# a linear-implicit model whose symbolic solution (num.rhs) has this many instructions or more is solved at run time
# instead: below it the solution is shorter than the assembly plus the sparse QR code (a double pendulum's 2×2 mass
# matrix: 12 KB of C solved symbolically, 23 KB assembled and factorised)
_SOLVE_AT_RUN_TIME_FROM = 1000


def _linear_parts(num: NumericSystem, prefix: str) -> tuple[ca.Function, ca.Function] | None:
    """For a linear-implicit ODE (SX, no networks, no conditions on t alone) whose symbolic solution is long: ``assemble(t, x, p, u) -> (A, b)`` with
    A sparse (its structural zeros left out) and ``outputs(t, x, p, u, w) -> y`` (outputs may read the multipliers,
    w's tail), both SX with common subexpressions shared; None for the other models (they keep ``num.rhs``)."""
    from .. import symbols as S
    from ..backend.sympy_to_casadi import Converter

    system = num.system
    if (num.kind != "SX" or system.neural or system.is_explicit() or num.dae_modes is not None
            or system.algebraics or num.nx == 0 or num.rhs.n_instructions() < _SOLVE_AT_RUN_TIME_FROM):
        return None
    A, b = system.linear_system()
    laws = system.input_laws()
    t, x = ca.SX.sym("t"), ca.SX.sym("x", num.nx)
    p, u = ca.SX.sym("p", len(num.p_names)), ca.SX.sym("u", len(num.u_names))
    w = ca.SX.sym("w", A.shape[1])
    table = {S.TIME: t, **{s.symbol: x[i] for i, s in enumerate(system.states)},
             **{q.symbol: p[i] for i, q in enumerate(system.params)},
             **{v.symbol: u[i] for i, v in enumerate(system.exogenous_inputs)}}
    conv = Converter(table)

    def c(e):
        e = S.as_expr(e)
        return conv(e.xreplace(laws) if laws else e)

    nonzero = [(i, j) for i in range(A.shape[0]) for j in range(A.shape[1]) if A[i, j] != 0]
    entries = [c(A[i, j]) for i, j in nonzero]
    A_sx = ca.SX.triplet([i for i, _ in nonzero], [j for _, j in nonzero], ca.vertcat(*entries), *A.shape) \
        if nonzero else ca.SX(*A.shape)
    b_sx = ca.vertcat(*[c(e) for e in b]) if b.shape[0] else ca.SX(0, 1)
    assemble = ca.Function(f"{prefix}assemble", [t, x, p, u], [A_sx, b_sx], ["t", "x", "p", "u"], ["A", "b"],
                           {"cse": True})
    conv.symbols.update({m: w[num.nx + k] for k, m in enumerate(system.multipliers)})
    y = ca.vertcat(*[c(o.expr) for o in system.outputs]) if system.outputs else ca.SX(0, 1)
    outputs = ca.Function(f"{prefix}outputs", [t, x, p, u, w], [y], ["t", "x", "p", "u", "w"], ["y"], {"cse": True})
    return assemble, outputs


def _dependencies(ev: ca.Function, lay: FmuLayout) -> dict[int, list[int]]:
    """1-based variable index of each output / derivative -> the states and inputs it depends on."""
    index = {(v.kind, v.index): k + 1 for k, v in enumerate(lay.variables)}
    states, inputs = lay.of_kind(K_STATE), lay.of_kind(K_INPUT)
    deps: dict[int, list[int]] = {}
    for out_i, kind in ((0, K_DER), (1, K_REPORT), (2, K_OUTPUT)):
        n_out = ev.size1_out(out_i)
        if n_out == 0:
            continue
        rows: list[set[int]] = [set() for _ in range(n_out)]
        for in_i, knowns in ((1, states), (3, inputs)):
            if not knowns:
                continue
            sp_ = ev.sparsity_jac(in_i, out_i)
            for row, col in zip(*sp_.get_triplet()):
                rows[row].add(index[(knowns[0].kind, col)])
        for k in range(n_out):
            deps[index[(kind, k)]] = sorted(rows[k])
    for s in states:
        deps.setdefault(index[(K_STATE, s.index)], [index[(K_STATE, s.index)]])
    return deps


# ---------------------------------------------------------------- modelDescription.xml
def _fmt(v: float) -> str:
    return repr(float(v))


# characters XML 1.0 does not allow, not even as character references: C0 controls but tab, newline and
# carriage return; lone surrogates; U+FFFE and U+FFFF
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def xml_text(s: str) -> str:
    """``s`` with every character XML 1.0 does not allow replaced by U+FFFD (ElementTree escapes the rest)."""
    return _NOT_XML.sub("\ufffd", s)


def _xml_safe(root: ET.Element) -> None:
    """Every attribute value and text of the tree made XML 1.0 (a model's description may hold control characters)."""
    for el in root.iter():
        el.attrib = {xml_text(k): xml_text(v) for k, v in el.attrib.items()}
        if el.text:
            el.text = xml_text(el.text)
        if el.tail:
            el.tail = xml_text(el.tail)


def model_description(num: NumericSystem, lay: FmuLayout, ident: str, guid: str, deps: dict[int, list[int]],
                      sources: list[str], experiment: Experiment | None = None) -> bytes:
    hy = getattr(num, "hybrid", None)
    n_ind = len(hy.strict) if hy is not None else 0
    sys_ = num.system
    root = ET.Element("fmiModelDescription", {
        "fmiVersion": "2.0", "modelName": sys_.name, "guid": guid,
        "description": sys_.doc or f"{sys_.name} (pdsl)", "generationTool": f"pdsl {__version__}",
        "variableNamingConvention": "flat", "numberOfEventIndicators": str(n_ind),
    })
    for tag, extra in (("ModelExchange", {"completedIntegratorStepNotNeeded": "true"}),
                       ("CoSimulation", {"canHandleVariableCommunicationStepSize": "true"})):
        el = ET.SubElement(root, tag, {"modelIdentifier": ident, "providesDirectionalDerivative": "true", **extra})
        files = ET.SubElement(el, "SourceFiles")
        for s in sources:
            ET.SubElement(files, "File", {"name": s})
    if lay.units:
        ud = ET.SubElement(root, "UnitDefinitions")
        for u in lay.units:
            unit = ET.SubElement(ud, "Unit", {"name": u.name})
            base = {b: str(k) for b, k in zip(BASE_UNITS, u.exponents) if k}
            if u.factor != 1.0:
                base["factor"] = _fmt(u.factor)
            if base:
                ET.SubElement(unit, "BaseUnit", base)
    exp = experiment or Experiment()
    ET.SubElement(root, "DefaultExperiment", {"startTime": "0.0", "stopTime": _fmt(exp.stop_time),
                                              "tolerance": _fmt(exp.tolerance), "stepSize": _fmt(exp.step_size)})
    mv = ET.SubElement(root, "ModelVariables")
    for vr, v in enumerate(lay.variables):
        attrs = {"name": v.name, "valueReference": str(vr), "causality": v.causality, "variability": v.variability}
        if v.initial is not None and not (v.causality == "parameter" and v.initial == "exact"):
            attrs["initial"] = v.initial
        if v.description:
            attrs["description"] = v.description
        sv = ET.SubElement(mv, "ScalarVariable", attrs)
        real = {}
        if v.unit:
            real["unit"] = v.unit
        if v.start is not None:
            real["start"] = _fmt(v.start)
        if v.derivative is not None:
            real["derivative"] = str(v.derivative)
        ET.SubElement(sv, "Real", real)
    ms = ET.SubElement(root, "ModelStructure")
    idx = {id(v): k + 1 for k, v in enumerate(lay.variables)}

    def unknown(parent, k: int, with_deps: bool) -> None:
        attrs = {"index": str(k)}
        if with_deps and k in deps:
            attrs["dependencies"] = " ".join(map(str, deps[k]))
            attrs["dependenciesKind"] = " ".join("dependent" for _ in deps[k])
        ET.SubElement(parent, "Unknown", attrs)

    outputs = [v for v in lay.variables if v.causality == "output"]
    if outputs:
        el = ET.SubElement(ms, "Outputs")
        for v in outputs:
            unknown(el, idx[id(v)], True)
    ders = lay.of_kind(K_DER)
    if ders:
        el = ET.SubElement(ms, "Derivatives")
        for v in ders:
            unknown(el, idx[id(v)], True)
    initial = [v for v in lay.variables if v.kind in (K_DER, K_REPORT, K_OUTPUT)]
    if initial:
        el = ET.SubElement(ms, "InitialUnknowns")
        for v in sorted(initial, key=lambda v: idx[id(v)]):
            unknown(el, idx[id(v)], False)
    _xml_safe(root)
    ET.indent(root)
    return b'<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="utf-8") + b"\n"


# ---------------------------------------------------------------- C wrapper
def _c_array(values, ctype: str, name: str) -> str:
    vals = list(values)
    if not vals:
        return f"static const {ctype} {name}[1] = {{0}};"
    body = ", ".join(vals)
    return f"static const {ctype} {name}[{len(vals)}] = {{{body}}};"


def _c_double(v: float) -> str:
    if not math.isfinite(v):
        raise PdslError.at("BadOption", f"a start value or parameter is not finite ({v}); the FMU needs finite values")
    return repr(float(v))


def _c_condition(tree) -> str:
    """A condition tree as a C expression over the atoms' truth values ``a[k]`` (indices only, no names)."""
    kind, arg = tree
    if kind == "atom":
        return f"a[{int(arg)}]"
    op = " && " if kind == "and" else " || "
    return "(" + op.join(_c_condition(sub) for sub in arg) + ")"


def _event_source(num: NumericSystem, prefix: str, hybrid: list[ca.Function] | None) -> tuple[dict, str, str]:
    """(#defines, tables, C functions) of the events: the indicators, each condition as C, each event's reset."""
    hy = getattr(num, "hybrid", None) if hybrid else None
    if hy is None:
        return {"HAS_EVENTS": 0, "NA": 0, "NEV": 0}, "", ""
    nev, nx = len(hy.conditions), num.nx
    where = {n: i for i, n in enumerate(num.x_names)}
    mask = [0] * (nev * nx)
    for j in range(nev):
        for target in hy.targets[j]:
            mask[j * nx + where[target]] = 1
    tables = "\n".join([
        _c_array((str(int(v)) for v in hy.strict), "int", "ATOM_STRICT"),
        _c_array((str(int(v)) for v in hy.terminate), "int", "EV_TERMINATE"),
        _c_array((str(int(r is not None)) for r in hy.resets), "int", "EV_HAS_RESET"),
        _c_array((str(int(v)) for v in hy.lines), "int", "EV_LINE"),
        _c_array((str(v) for v in mask), "int", "EV_RESETS"),
    ])
    cases = "\n".join(f"    case {j}: return {_c_condition(tree)};" for j, tree in enumerate(hy.conditions))
    resets = "\n".join(f"    case {j}: fn = {prefix}reset_{j}; break;" for j in range(nev) if hy.resets[j] is not None)
    code = f"""
static int indicators_at(Inst *c, double t, const double *x, double *g) {{
  c->arg[0] = &t; c->arg[1] = x; c->arg[2] = c->p; c->arg[3] = c->u;
  c->res[0] = g;
  if ({prefix}indicators(c->arg, c->res, c->iw, c->w, 0)) {{
    say(c, fmi2Error, "event indicator evaluation failed");
    return 1;
  }}
  return 0;
}}

/* the condition of event j from the atoms' truth values a[] */
static int cond_value(int j, const int *a) {{
  switch (j) {{
{cases}
    default: return 0;
  }}
}}

/* the state after event j's resets, every value read at (t, x) */
static int reset_at(Inst *c, int j, double t, const double *x, double *xn) {{
  int (*fn)(const casadi_real **, casadi_real **, casadi_int *, casadi_real *, int) = 0;
  switch (j) {{
{resets}
    default: break;
  }}
  if (!fn) {{ if (NX) memcpy(xn, x, NX * sizeof(double)); return 0; }}
  c->arg[0] = &t; c->arg[1] = x; c->arg[2] = c->p; c->arg[3] = c->u;
  c->res[0] = xn;
  if (fn(c->arg, c->res, c->iw, c->w, 0)) {{ say(c, fmi2Error, "event reset evaluation failed"); return 1; }}
  return 0;
}}
"""
    return {"HAS_EVENTS": 1, "NA": len(hy.strict), "NEV": nev}, tables, code


def wrapper_source(num: NumericSystem, lay: FmuLayout, ev: ca.Function, fwd: ca.Function, prefix: str,
                   guid: str, events: tuple[ca.Function, ca.Function] | None = None,
                   hybrid: list[ca.Function] | None = None) -> str:
    fns = [ev, fwd, *(events or ()), *(hybrid or ())]
    ev_consts, ev_tables, ev_code = _event_source(num, prefix, hybrid)
    sz = {k: max(getattr(f, k)() for f in fns) for k in ("sz_arg", "sz_res", "sz_iw", "sz_w")}
    consts = {
        "NX": num.nx, "NP": len(num.p_names), "NU": len(num.u_names), "NR": len(lay.report_rows),
        "NY": len(num.y_names), "NVR": len(lay.variables), "NPHYS": lay.n_phys,
        "SZ_ARG": max(sz["sz_arg"], 7), "SZ_RES": max(sz["sz_res"], 3), "SZ_IW": max(sz["sz_iw"], 1),
        "SZ_W": max(sz["sz_w"], 1),
        "HAS_SWITCHES": int(events is not None), "NSW": events[1].size1_out(0) if events else 0,
        **ev_consts,
    }
    head = "\n".join(f"#define {k} {v}" for k, v in consts.items())
    tables = "\n".join([
        _c_array((str(v.kind) for v in lay.variables), "int", "VR_KIND"),
        _c_array((str(v.index) for v in lay.variables), "int", "VR_INDEX"),
        _c_array((_c_double(v) for v in num.x_start), "double", "X_START"),
        _c_array((_c_double(v) for v in num.p_default), "double", "P_START"),
        f'static const char GUID[] = "{guid}";',
        f"#define CS_STEP_DEFAULT {_c_double(DEFAULT_CS_STEP)}",
        ev_tables,
    ])
    return (_C_WRAPPER
            .replace("@HEAD@", head)
            .replace("@TABLES@", tables)
            .replace("@EVENTS@", ev_code)
            .replace("@EVAL@", f"{prefix}eval")
            .replace("@FWD@", f"{prefix}fwd")
            .replace("@MODES@", f"{prefix}modes" if events else "NULL")
            .replace("@SWITCHES@", f"{prefix}switches" if events else "NULL"))


_C_WRAPPER = r"""/* FMI 2.0 wrapper (Model Exchange and Co-Simulation) generated by pdsl.
 * Variables are addressed by value reference; modelDescription.xml names them.
 * Co-Simulation integrates with classical RK4, at most `pdsl:cs_max_step` per internal step,
 * inputs held constant over a communication step. */
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "model.h"

#if defined(_WIN32)
#define FMI_EXPORT __declspec(dllexport)
#else
#define FMI_EXPORT __attribute__((visibility("default")))
#endif

typedef void *fmi2Component;
typedef void *fmi2ComponentEnvironment;
typedef void *fmi2FMUstate;
typedef unsigned int fmi2ValueReference;
typedef double fmi2Real;
typedef int fmi2Integer;
typedef int fmi2Boolean;
typedef char fmi2Char;
typedef const fmi2Char *fmi2String;
typedef char fmi2Byte;
#define fmi2True 1
#define fmi2False 0
typedef enum { fmi2OK, fmi2Warning, fmi2Discard, fmi2Error, fmi2Fatal, fmi2Pending } fmi2Status;
typedef enum { fmi2ModelExchange, fmi2CoSimulation } fmi2Type;
typedef enum { fmi2DoStepStatus, fmi2PendingStatus, fmi2LastSuccessfulTime, fmi2Terminated } fmi2StatusKind;
typedef void (*fmi2CallbackLogger)(fmi2ComponentEnvironment, fmi2String, fmi2Status, fmi2String, fmi2String, ...);
typedef void *(*fmi2CallbackAllocateMemory)(size_t, size_t);
typedef void (*fmi2CallbackFreeMemory)(void *);
typedef void (*fmi2StepFinished)(fmi2ComponentEnvironment, fmi2Status);
typedef struct {
  const fmi2CallbackLogger logger;
  const fmi2CallbackAllocateMemory allocateMemory;
  const fmi2CallbackFreeMemory freeMemory;
  const fmi2StepFinished stepFinished;
  const fmi2ComponentEnvironment componentEnvironment;
} fmi2CallbackFunctions;
typedef struct {
  fmi2Boolean newDiscreteStatesNeeded;
  fmi2Boolean terminateSimulation;
  fmi2Boolean nominalsOfContinuousStatesChanged;
  fmi2Boolean valuesOfContinuousStatesChanged;
  fmi2Boolean nextEventTimeDefined;
  fmi2Real nextEventTime;
} fmi2EventInfo;

@HEAD@
#define K_TIME 0
#define K_STATE 1
#define K_DER 2
#define K_REPORT 3
#define K_OUTPUT 4
#define K_PARAM 5
#define K_INPUT 6
#define K_CSSTEP 7
#define A1(n) ((n) > 0 ? (n) : 1)

@TABLES@

typedef struct {
  fmi2Type type;
  fmi2CallbackLogger logger;
  fmi2CallbackFreeMemory freeMemory;
  fmi2ComponentEnvironment env;
  int logging;
  char name[128];
  double t;
  double seg_start, seg_end, stop_time; /* Model Exchange: the segment between time events */
  int stop_defined;
  double ga[A1(NSW)], gb[A1(NSW)], gm[A1(NSW)];
  double x[A1(NX)], p[A1(NP)], u[A1(NU)];
  double cs_step;
  double xdot[A1(NX)], r[A1(NR)], y[A1(NY)];
  int dirty;
  const casadi_real *arg[SZ_ARG];
  casadi_real *res[SZ_RES];
  casadi_int iw[SZ_IW];
  casadi_real w[SZ_W];
  double k1[A1(NX)], k2[A1(NX)], k3[A1(NX)], k4[A1(NX)], xs[A1(NX)];
  double dx[A1(NX)], dp[A1(NP)], du[A1(NU)], dxdot[A1(NX)], dr[A1(NR)], dy[A1(NY)];
  /* events (`when`): the atoms' truth values carried from the last event (or the start), the events a round's
     resets made true, the event round at this instant */
  int tr[A1(NA)], tr_new[A1(NA)], tr_mid[A1(NA)], fire[A1(NEV)], owner[A1(NX)];
  int round, init_event, terminated;
  double g[A1(NA)], gp[A1(NA)], gq[A1(NA)], ef[A1(NX)], ef2[A1(NX)], ex[A1(NX)], xr[A1(NX)], xn[A1(NX)];
  double xa[A1(NX)], xb[A1(NX)];
} Inst;

static void say(Inst *c, fmi2Status st, const char *msg) {
  if (c && c->logger && (c->logging || st >= fmi2Error))
    c->logger(c->env, c->name, st, st >= fmi2Error ? "logStatusError" : "logAll", "%s", msg);
}

static void reset_values(Inst *c) {
  int i;
  for (i = 0; i < NX; ++i) c->x[i] = X_START[i];
  for (i = 0; i < NP; ++i) c->p[i] = P_START[i];
  for (i = 0; i < NU; ++i) c->u[i] = 0.0;
  c->cs_step = CS_STEP_DEFAULT;
  c->dirty = 1;
}

/* derivatives, shown columns and outputs at (t, x, p, u) into xdot, r, y */
static int eval_at(Inst *c, double t, const double *x, double *xdot, double *r, double *y) {
  c->arg[0] = &t; c->arg[1] = x; c->arg[2] = c->p; c->arg[3] = c->u;
  c->res[0] = xdot; c->res[1] = r; c->res[2] = y;
  if (@EVAL@(c->arg, c->res, c->iw, c->w, 0)) { say(c, fmi2Error, "evaluation failed"); return 1; }
  return 0;
}

/* derivatives with the time conditions read at t_mode (exact within a segment between switches) */
static int rates_at(Inst *c, double t, double t_mode, const double *x, double *xdot) {
#if HAS_SWITCHES
  c->arg[0] = &t; c->arg[1] = &t_mode; c->arg[2] = x; c->arg[3] = c->p; c->arg[4] = c->u;
  c->res[0] = xdot;
  if (@MODES@(c->arg, c->res, c->iw, c->w, 0)) { say(c, fmi2Error, "evaluation failed"); return 1; }
  return 0;
#else
  (void)t_mode;
  return eval_at(c, t, x, xdot, c->dr, c->dy);
#endif
}

#if HAS_SWITCHES
static int switch_values(Inst *c, double t, double *g) {
  c->arg[0] = &t; c->arg[1] = c->p;
  c->res[0] = g;
  if (@SWITCHES@(c->arg, c->res, c->iw, c->w, 0)) { say(c, fmi2Error, "switch evaluation failed"); return 1; }
  return 0;
}

/* the first time in (a, b] where a switch function changes sign or reaches 0 from a nonzero value at a
   (*found = 1), to a relative 1e-15; b when there is none (*found = 0) */
static int first_switch(Inst *c, double a, double b, double *root, int *found) {
  int i, k;
  *root = b;
  *found = 0;
  if (switch_values(c, a, c->ga) || switch_values(c, b, c->gb)) return 1;
  for (i = 0; i < NSW; ++i) {
    double lo = a, hi = b, glo = c->ga[i];
    if (glo == 0.0 || !(glo * c->gb[i] <= 0.0)) continue;
    *found = 1;
    for (k = 0; k < 200 && hi - lo > 1e-15 * (1.0 + fabs(hi)); ++k) {
      double mid = 0.5 * (lo + hi);
      if (switch_values(c, mid, c->gm)) return 1;
      if (c->gm[i] * glo > 0.0) lo = mid; else hi = mid;
    }
    if (hi < *root) *root = hi;
  }
  return 0;
}
#endif

/* the mode time of Model Exchange: the middle of the current segment between time events */
static double me_mode_time(Inst *c) {
  if (isfinite(c->seg_end)) return 0.5 * (c->seg_start + c->seg_end);
  return c->t > c->seg_start ? c->t : c->seg_start + 1e-9 * (1.0 + fabs(c->seg_start));
}

static int refresh(Inst *c) {
  if (!c->dirty) return 0;
  if (eval_at(c, c->t, c->x, c->xdot, c->r, c->y)) return 1;
#if HAS_SWITCHES
  if (rates_at(c, c->t, me_mode_time(c), c->x, c->xdot)) return 1;
#endif
  c->dirty = 0;
  return 0;
}

#if HAS_EVENTS
@EVENTS@
#define EV_ZONE 1e-10 /* an indicator this close to zero (relative, plus absolute) is on its surface */
#define EV_MAX_ROUNDS 100

/* the indicators at t + h along a second-order (Heun) path of the flow from (t, x) */
static int flow_point(Inst *c, double t, const double *x, double h, double *g) {
  int i;
  if (eval_at(c, t, x, c->ef, c->dr, c->dy)) return 1;
  for (i = 0; i < NX; ++i) c->ex[i] = x[i] + h * c->ef[i];
  if (eval_at(c, t + h, c->ex, c->ef2, c->dr, c->dy)) return 1;
  for (i = 0; i < NX; ++i) c->ex[i] = x[i] + 0.5 * h * (c->ef[i] + c->ef2[i]);
  return indicators_at(c, t + h, c->ex, g);
}

/* the truth of each atom at (t, x), read as `pdsl simulate` reads it: by the indicator's sign (g < 0, or g <= 0 when
   not strict), except that an indicator within rounding of zero that the motion carries through zero below the
   resolution of t (or that is exactly zero) counts on the side the motion goes to (dg/dt, or d2g/dt2 when that is
   zero): a located crossing is on its new side, a rebound that starts a hair inside the region is outside */
static int truth_at(Inst *c, double t, const double *x, int *tr) {
  int k, near = 0;
  double d, tau;
  if (indicators_at(c, t, x, c->g)) return 1;
  for (k = 0; k < NA; ++k) {
    tr[k] = ATOM_STRICT[k] ? (c->g[k] < 0.0) : (c->g[k] <= 0.0);
    if (fabs(c->g[k]) <= EV_ZONE * (1.0 + fabs(c->g[k]))) near = 1;
  }
  if (!near) return 0;
  d = 1e-4 * fmax(1.0, fabs(t));
  tau = 1e3 * 2.220446049250313e-16 * fmax(1.0, fabs(t));
  if (flow_point(c, t, x, d, c->gp) || flow_point(c, t, x, -d, c->gq)) return 1;
  for (k = 0; k < NA; ++k) {
    double g = c->g[k], gdot, gddot;
    if (!(fabs(g) <= EV_ZONE * (1.0 + fabs(g)))) continue;
    gdot = (c->gp[k] - c->gq[k]) / (2.0 * d);
    gddot = (c->gp[k] - 2.0 * g + c->gq[k]) / (d * d);
    if (g != 0.0 && !(g * gdot < 0.0 && fabs(g) < fabs(gdot) * tau)) continue; /* its sign */
    if (gdot != 0.0) tr[k] = gdot < 0.0;
    else if (gddot != 0.0) tr[k] = gddot < 0.0;
  }
  return 0;
}

/* the events in c->fire: their resets read the state before this round and apply together */
static int apply_round(Inst *c, int *changed, int *terminate) {
  int i, j;
  *changed = 0;
  *terminate = 0;
  for (i = 0; i < NX; ++i) { c->xr[i] = c->x[i]; c->owner[i] = -1; }
  for (j = 0; j < NEV; ++j) {
    if (!c->fire[j]) continue;
    if (EV_TERMINATE[j]) *terminate = 1;
    if (!EV_HAS_RESET[j]) continue;
    if (reset_at(c, j, c->t, c->x, c->xn)) return 1;
    for (i = 0; i < NX; ++i) {
      if (!EV_RESETS[j * NX + i]) continue;
      if (c->owner[i] >= 0) {
        char msg[160];
        snprintf(msg, sizeof msg, "a state is reset twice at t = %.10g: by the events of lines %d and %d", c->t,
                 EV_LINE[c->owner[i]], EV_LINE[j]);
        say(c, fmi2Error, msg);
        return 1;
      }
      c->owner[i] = j;
      c->xr[i] = c->xn[i];
      *changed = 1;
    }
  }
  if (*changed) { if (NX) memcpy(c->x, c->xr, NX * sizeof(double)); c->dirty = 1; }
  return 0;
}

/* one round of the event iteration at (c->t, c->x). The first round at an instant fires the events whose condition
   went from false (the truth values carried from before) to true; a later round those that the previous round's
   resets made true. *needed: another round is due */
static int event_round(Inst *c, int *changed, int *terminate, int *needed) {
  int j, any = 0;
  *needed = 0;
  if (c->round == 0) {
    if (truth_at(c, c->t, c->x, c->tr_new)) return 1;
    for (j = 0; j < NEV; ++j) c->fire[j] = cond_value(j, c->tr_new) && !cond_value(j, c->tr);
    memcpy(c->tr, c->tr_new, sizeof(c->tr));
  }
  if (apply_round(c, changed, terminate)) return 1;
  if (*terminate) c->terminated = 1;
  if (*terminate || !*changed) { c->round = 0; return 0; }
  if (truth_at(c, c->t, c->x, c->tr_new)) return 1;
  for (j = 0; j < NEV; ++j) { c->fire[j] = cond_value(j, c->tr_new) && !cond_value(j, c->tr); any |= c->fire[j]; }
  memcpy(c->tr, c->tr_new, sizeof(c->tr));
  if (!any) { c->round = 0; return 0; }
  if (++c->round >= EV_MAX_ROUNDS) {
    say(c, fmi2Error, "100 rounds of events at one instant without an end: two events keep re-triggering each other");
    c->round = 0;
    return 1;
  }
  *needed = 1;
  return 0;
}

/* the start: the truth values the first edges are read against (a condition true at the start does not fire) */
static int events_start(Inst *c) {
  c->round = 0;
  c->init_event = 1;
  c->terminated = 0;
  return truth_at(c, c->t, c->x, c->tr);
}
#endif

FMI_EXPORT const char *fmi2GetTypesPlatform(void) { return "default"; }
FMI_EXPORT const char *fmi2GetVersion(void) { return "2.0"; }

FMI_EXPORT fmi2Status fmi2SetDebugLogging(fmi2Component comp, fmi2Boolean on, size_t n, const fmi2String cats[]) {
  (void)n; (void)cats;
  if (!comp) return fmi2Error;
  ((Inst *)comp)->logging = on;
  return fmi2OK;
}

FMI_EXPORT fmi2Component fmi2Instantiate(fmi2String name, fmi2Type type, fmi2String guid, fmi2String location,
                                         const fmi2CallbackFunctions *cb, fmi2Boolean visible, fmi2Boolean logging) {
  Inst *c;
  (void)location; (void)visible;
  if (!guid || strcmp(guid, GUID) != 0) {
    if (cb && cb->logger) cb->logger(cb->componentEnvironment, name, fmi2Error, "logStatusError", "%s",
                                     "GUID does not match this FMU's binary");
    return NULL;
  }
  c = (cb && cb->allocateMemory) ? (Inst *)cb->allocateMemory(1, sizeof(Inst)) : (Inst *)calloc(1, sizeof(Inst));
  if (!c) return NULL;
  memset(c, 0, sizeof(Inst));
  c->type = type;
  if (cb) { c->logger = cb->logger; c->env = cb->componentEnvironment; }
  /* free with the environment's function only what its allocateMemory gave */
  c->freeMemory = (cb && cb->allocateMemory) ? cb->freeMemory : NULL;
  c->logging = logging;
  if (name) { strncpy(c->name, name, sizeof(c->name) - 1); }
  reset_values(c);
  c->t = 0.0;
  c->seg_start = 0.0;
  c->seg_end = INFINITY;
  return c;
}

FMI_EXPORT void fmi2FreeInstance(fmi2Component comp) {
  Inst *c = (Inst *)comp;
  if (!c) return;
  if (c->freeMemory) c->freeMemory(c); else free(c);
}

FMI_EXPORT fmi2Status fmi2SetupExperiment(fmi2Component comp, fmi2Boolean tolDefined, fmi2Real tol,
                                          fmi2Real startTime, fmi2Boolean stopDefined, fmi2Real stopTime) {
  Inst *c = (Inst *)comp;
  (void)tolDefined; (void)tol;
  if (!c) return fmi2Error;
  c->t = startTime;
  c->seg_start = startTime;
  c->seg_end = INFINITY;
  c->stop_defined = stopDefined;
  c->stop_time = stopTime;
  c->dirty = 1;
  return fmi2OK;
}

FMI_EXPORT fmi2Status fmi2EnterInitializationMode(fmi2Component comp) { return comp ? fmi2OK : fmi2Error; }
FMI_EXPORT fmi2Status fmi2ExitInitializationMode(fmi2Component comp) {
  if (!comp || refresh((Inst *)comp)) return fmi2Error;
#if HAS_EVENTS
  if (events_start((Inst *)comp)) return fmi2Error;
#endif
  return fmi2OK;
}
FMI_EXPORT fmi2Status fmi2Terminate(fmi2Component comp) { return comp ? fmi2OK : fmi2Error; }
FMI_EXPORT fmi2Status fmi2Reset(fmi2Component comp) {
  Inst *c = (Inst *)comp;
  if (!c) return fmi2Error;
  reset_values(c);
  c->t = 0.0;
  c->seg_start = 0.0;
  c->seg_end = INFINITY;
  c->round = 0;
  c->init_event = 0;
  c->terminated = 0;
  return fmi2OK;
}

FMI_EXPORT fmi2Status fmi2GetReal(fmi2Component comp, const fmi2ValueReference vr[], size_t n, fmi2Real value[]) {
  Inst *c = (Inst *)comp;
  size_t i;
  if (!c) return fmi2Error;
  for (i = 0; i < n; ++i) {
    unsigned int k = vr[i];
    int j;
    if (k >= NVR) { say(c, fmi2Error, "fmi2GetReal: unknown value reference"); return fmi2Error; }
    j = VR_INDEX[k];
    switch (VR_KIND[k]) {
      case K_TIME: value[i] = c->t; break;
      case K_STATE: value[i] = c->x[j]; break;
      case K_DER: if (refresh(c)) return fmi2Error; value[i] = c->xdot[j]; break;
      case K_REPORT: if (refresh(c)) return fmi2Error; value[i] = c->r[j]; break;
      case K_OUTPUT: if (refresh(c)) return fmi2Error; value[i] = c->y[j]; break;
      case K_PARAM: value[i] = c->p[j]; break;
      case K_INPUT: value[i] = c->u[j]; break;
      case K_CSSTEP: value[i] = c->cs_step; break;
      default: return fmi2Error;
    }
  }
  return fmi2OK;
}

FMI_EXPORT fmi2Status fmi2SetReal(fmi2Component comp, const fmi2ValueReference vr[], size_t n, const fmi2Real value[]) {
  Inst *c = (Inst *)comp;
  size_t i;
  if (!c) return fmi2Error;
  for (i = 0; i < n; ++i) {
    unsigned int k = vr[i];
    int j;
    if (k >= NVR) { say(c, fmi2Error, "fmi2SetReal: unknown value reference"); return fmi2Error; }
    j = VR_INDEX[k];
    switch (VR_KIND[k]) {
      case K_STATE: c->x[j] = value[i]; break;
      case K_PARAM: c->p[j] = value[i]; break;
      case K_INPUT: c->u[j] = value[i]; break;
      case K_CSSTEP:
        if (!(value[i] > 0.0)) { say(c, fmi2Error, "pdsl:cs_max_step must be positive"); return fmi2Error; }
        c->cs_step = value[i]; break;
      default: say(c, fmi2Error, "fmi2SetReal: variable cannot be set"); return fmi2Error;
    }
  }
  c->dirty = 1;
  return fmi2OK;
}

#define NO_VALUES(Fn, T) \
  FMI_EXPORT fmi2Status Fn(fmi2Component comp, const fmi2ValueReference vr[], size_t n, T value[]) { \
    (void)vr; (void)value; return (comp && n == 0) ? fmi2OK : fmi2Error; }
NO_VALUES(fmi2GetInteger, fmi2Integer)
NO_VALUES(fmi2GetBoolean, fmi2Boolean)
NO_VALUES(fmi2GetString, fmi2String)
NO_VALUES(fmi2SetInteger, const fmi2Integer)
NO_VALUES(fmi2SetBoolean, const fmi2Boolean)
NO_VALUES(fmi2SetString, const fmi2String)

FMI_EXPORT fmi2Status fmi2GetFMUstate(fmi2Component c, fmi2FMUstate *s) { (void)c; (void)s; return fmi2Error; }
FMI_EXPORT fmi2Status fmi2SetFMUstate(fmi2Component c, fmi2FMUstate s) { (void)c; (void)s; return fmi2Error; }
FMI_EXPORT fmi2Status fmi2FreeFMUstate(fmi2Component c, fmi2FMUstate *s) { (void)c; (void)s; return fmi2Error; }
FMI_EXPORT fmi2Status fmi2SerializedFMUstateSize(fmi2Component c, fmi2FMUstate s, size_t *n) {
  (void)c; (void)s; (void)n; return fmi2Error; }
FMI_EXPORT fmi2Status fmi2SerializeFMUstate(fmi2Component c, fmi2FMUstate s, fmi2Byte b[], size_t n) {
  (void)c; (void)s; (void)b; (void)n; return fmi2Error; }
FMI_EXPORT fmi2Status fmi2DeSerializeFMUstate(fmi2Component c, const fmi2Byte b[], size_t n, fmi2FMUstate *s) {
  (void)c; (void)s; (void)b; (void)n; return fmi2Error; }

/* J·dvKnown by CasADi's forward mode; knowns: states, inputs, parameters; unknowns: derivatives, outputs */
FMI_EXPORT fmi2Status fmi2GetDirectionalDerivative(fmi2Component comp, const fmi2ValueReference vUnknown[], size_t nU,
                                                   const fmi2ValueReference vKnown[], size_t nK,
                                                   const fmi2Real dvKnown[], fmi2Real dvUnknown[]) {
  Inst *c = (Inst *)comp;
  size_t i;
  if (!c) return fmi2Error;
  memset(c->dx, 0, sizeof(c->dx)); memset(c->dp, 0, sizeof(c->dp)); memset(c->du, 0, sizeof(c->du));
  for (i = 0; i < nK; ++i) {
    unsigned int k = vKnown[i];
    if (k >= NVR) return fmi2Error;
    switch (VR_KIND[k]) {
      case K_STATE: c->dx[VR_INDEX[k]] += dvKnown[i]; break;
      case K_PARAM: c->dp[VR_INDEX[k]] += dvKnown[i]; break;
      case K_INPUT: c->du[VR_INDEX[k]] += dvKnown[i]; break;
      default: say(c, fmi2Error, "fmi2GetDirectionalDerivative: a known must be a state, input or parameter");
        return fmi2Error;
    }
  }
  c->arg[0] = &c->t; c->arg[1] = c->x; c->arg[2] = c->p; c->arg[3] = c->u;
  c->arg[4] = c->dx; c->arg[5] = c->dp; c->arg[6] = c->du;
  c->res[0] = c->dxdot; c->res[1] = c->dr; c->res[2] = c->dy;
  if (@FWD@(c->arg, c->res, c->iw, c->w, 0)) { say(c, fmi2Error, "directional derivative failed"); return fmi2Error; }
  for (i = 0; i < nU; ++i) {
    unsigned int k = vUnknown[i];
    if (k >= NVR) return fmi2Error;
    switch (VR_KIND[k]) {
      case K_DER: dvUnknown[i] = c->dxdot[VR_INDEX[k]]; break;
      case K_REPORT: dvUnknown[i] = c->dr[VR_INDEX[k]]; break;
      case K_OUTPUT: dvUnknown[i] = c->dy[VR_INDEX[k]]; break;
      case K_STATE: dvUnknown[i] = c->dx[VR_INDEX[k]]; break;
      default: say(c, fmi2Error, "fmi2GetDirectionalDerivative: an unknown must be a derivative or an output");
        return fmi2Error;
    }
  }
  return fmi2OK;
}

/* ---- Model Exchange */
FMI_EXPORT fmi2Status fmi2EnterEventMode(fmi2Component comp) {
  if (!comp) return fmi2Error;
#if HAS_EVENTS
  ((Inst *)comp)->round = 0;
#endif
  return fmi2OK;
}
FMI_EXPORT fmi2Status fmi2NewDiscreteStates(fmi2Component comp, fmi2EventInfo *info) {
  Inst *c = (Inst *)comp;
  if (!c || !info) return fmi2Error;
  info->newDiscreteStatesNeeded = fmi2False;
  info->terminateSimulation = fmi2False;
  info->nominalsOfContinuousStatesChanged = fmi2False;
  info->valuesOfContinuousStatesChanged = fmi2False;
  info->nextEventTimeDefined = fmi2False;
  info->nextEventTime = 0.0;
#if HAS_EVENTS
  if (c->init_event) { /* the initial event iteration: no event fires at the start */
    c->init_event = 0;
    if (truth_at(c, c->t, c->x, c->tr)) return fmi2Error;
  } else {
    int changed, terminate, needed;
    if (event_round(c, &changed, &terminate, &needed)) return fmi2Error;
    if (changed) info->valuesOfContinuousStatesChanged = fmi2True;
    if (terminate) { info->terminateSimulation = fmi2True; return fmi2OK; }
    if (needed) { info->newDiscreteStatesNeeded = fmi2True; return fmi2OK; }
  }
#endif
  c->seg_start = c->t;
  c->seg_end = INFINITY;
#if HAS_SWITCHES
  {
    /* the next switch in time: sampled (4000 intervals up to the stop time, else 1000 time units), refined */
    double horizon = c->stop_defined && c->stop_time > c->t ? c->stop_time : c->t + 1000.0;
    double step = (horizon - c->t) / 4000.0, a = c->t, root;
    int k;
    for (k = 0; k < 4000; ++k) {
      double b = k == 3999 ? horizon : c->t + (k + 1) * step;
      int found;
      if (first_switch(c, a, b, &root, &found)) return fmi2Error;
      if (found) {
        c->seg_end = root;
        info->nextEventTimeDefined = fmi2True;
        info->nextEventTime = root;
        break;
      }
      a = b;
    }
  }
#endif
  c->dirty = 1;
  return fmi2OK;
}
FMI_EXPORT fmi2Status fmi2EnterContinuousTimeMode(fmi2Component comp) { return comp ? fmi2OK : fmi2Error; }
FMI_EXPORT fmi2Status fmi2CompletedIntegratorStep(fmi2Component comp, fmi2Boolean noSet, fmi2Boolean *enterEvent,
                                                  fmi2Boolean *terminate) {
  (void)noSet;
  if (!comp) return fmi2Error;
  if (enterEvent) *enterEvent = fmi2False;
  if (terminate) *terminate = fmi2False;
  return fmi2OK;
}
FMI_EXPORT fmi2Status fmi2SetTime(fmi2Component comp, fmi2Real t) {
  Inst *c = (Inst *)comp;
  if (!c) return fmi2Error;
  c->t = t; c->dirty = 1;
  return fmi2OK;
}
FMI_EXPORT fmi2Status fmi2SetContinuousStates(fmi2Component comp, const fmi2Real x[], size_t n) {
  Inst *c = (Inst *)comp;
  if (!c || n != NX) return fmi2Error;
  if (n) memcpy(c->x, x, n * sizeof(double));
  c->dirty = 1;
  return fmi2OK;
}
FMI_EXPORT fmi2Status fmi2GetDerivatives(fmi2Component comp, fmi2Real d[], size_t n) {
  Inst *c = (Inst *)comp;
  if (!c || n != NX) return fmi2Error;
  if (refresh(c)) return fmi2Error;
  if (n) memcpy(d, c->xdot, n * sizeof(double));
  return fmi2OK;
}
FMI_EXPORT fmi2Status fmi2GetEventIndicators(fmi2Component comp, fmi2Real g[], size_t n) {
  Inst *c = (Inst *)comp;
  if (!c || n != NA) return fmi2Error;
#if HAS_EVENTS
  if (indicators_at(c, c->t, c->x, g)) return fmi2Error;
#else
  (void)g;
#endif
  return fmi2OK;
}
FMI_EXPORT fmi2Status fmi2GetContinuousStates(fmi2Component comp, fmi2Real x[], size_t n) {
  Inst *c = (Inst *)comp;
  if (!c || n != NX) return fmi2Error;
  if (n) memcpy(x, c->x, n * sizeof(double));
  return fmi2OK;
}
FMI_EXPORT fmi2Status fmi2GetNominalsOfContinuousStates(fmi2Component comp, fmi2Real x[], size_t n) {
  size_t i;
  if (!comp || n != NX) return fmi2Error;
  for (i = 0; i < n; ++i) x[i] = 1.0;
  return fmi2OK;
}

/* ---- Co-Simulation */
FMI_EXPORT fmi2Status fmi2SetRealInputDerivatives(fmi2Component c, const fmi2ValueReference vr[], size_t n,
                                                  const fmi2Integer order[], const fmi2Real v[]) {
  (void)c; (void)vr; (void)n; (void)order; (void)v; return fmi2Error;
}
FMI_EXPORT fmi2Status fmi2GetRealOutputDerivatives(fmi2Component c, const fmi2ValueReference vr[], size_t n,
                                                   const fmi2Integer order[], fmi2Real v[]) {
  (void)c; (void)vr; (void)n; (void)order; (void)v; return fmi2Error;
}

/* one classical RK4 step of length dt from (t, x) to xo, the time conditions read at tm */
static int rk4_step(Inst *c, double t, double dt, double tm, const double *x, double *xo) {
  int i;
  if (rates_at(c, t, tm, x, c->k1)) return 1;
  for (i = 0; i < NX; ++i) c->xs[i] = x[i] + 0.5 * dt * c->k1[i];
  if (rates_at(c, t + 0.5 * dt, tm, c->xs, c->k2)) return 1;
  for (i = 0; i < NX; ++i) c->xs[i] = x[i] + 0.5 * dt * c->k2[i];
  if (rates_at(c, t + 0.5 * dt, tm, c->xs, c->k3)) return 1;
  for (i = 0; i < NX; ++i) c->xs[i] = x[i] + dt * c->k3[i];
  if (rates_at(c, t + dt, tm, c->xs, c->k4)) return 1;
  for (i = 0; i < NX; ++i) xo[i] = x[i] + dt / 6.0 * (c->k1[i] + 2.0 * c->k2[i] + 2.0 * c->k3[i] + c->k4[i]);
  return 0;
}

#if HAS_EVENTS
/* Co-Simulation: the RK4 step from (ta, c->xa) reached (tb, c->x). When an atom's truth changed in it, the first
   change is located by bisection on the step (RK4 from ta to the trial time, to a relative 1e-15), the state is
   put there and the events at that instant applied (all rounds). *t_event: where the step now ends (tb when
   nothing changed) */
static int cs_events(Inst *c, double ta, double tb, double tm, double *t_event) {
  int k, changed, terminate, needed;
  double lo = ta, hi = tb;
  *t_event = tb;
  if (truth_at(c, tb, c->x, c->tr_new)) return 1;
  if (memcmp(c->tr_new, c->tr, sizeof(c->tr)) == 0) return 0;
  for (k = 0; k < 200 && hi - lo > 1e-15 * (1.0 + fabs(hi)); ++k) {
    double mid = 0.5 * (lo + hi);
    if (rk4_step(c, ta, mid - ta, tm, c->xa, c->xb)) return 1;
    if (truth_at(c, mid, c->xb, c->tr_mid)) return 1;
    if (memcmp(c->tr_mid, c->tr, sizeof(c->tr)) != 0) hi = mid; else lo = mid;
  }
  if (hi < tb && rk4_step(c, ta, hi - ta, tm, c->xa, c->x)) return 1;
  *t_event = hi;
  c->t = hi;
  c->round = 0;
  do {
    if (event_round(c, &changed, &terminate, &needed)) return 1;
  } while (needed && !terminate);
  return 0;
}
#endif

FMI_EXPORT fmi2Status fmi2DoStep(fmi2Component comp, fmi2Real t0, fmi2Real H, fmi2Boolean noSetPrior) {
  Inst *c = (Inst *)comp;
  long steps, s;
  int i;
  double h;
  (void)noSetPrior;
  if (!c) return fmi2Error;
#if HAS_EVENTS
  if (c->init_event) c->init_event = 0; /* Co-Simulation has no initial event iteration */
  if (c->terminated) { say(c, fmi2Error, "fmi2DoStep: the simulation was terminated by an event"); return fmi2Error; }
#endif
  if (!(H >= 0.0)) { say(c, fmi2Error, "fmi2DoStep: negative communication step"); return fmi2Error; }
  steps = (long)ceil(H / c->cs_step - 1e-9);
  if (steps < 1) steps = 1;
  h = H / (double)steps;
  c->t = t0;
  for (s = 0; s < steps; ++s) {
    double ta = t0 + s * h, tb = s == steps - 1 ? t0 + H : t0 + (s + 1) * h;
    while (ta < tb) {
      double t = ta, dt, tm, seg_b = tb;
#if HAS_SWITCHES
      int found;
      if (first_switch(c, ta, tb, &seg_b, &found)) return fmi2Error; /* a switch inside: step to it, then on */
#endif
      dt = seg_b - ta;
      tm = 0.5 * (ta + seg_b); /* conditions on t read in the middle of the segment, as `pdsl simulate` does */
#if HAS_EVENTS
      if (NX) memcpy(c->xa, c->x, NX * sizeof(double));
#endif
      if (rk4_step(c, t, dt, tm, c->x, c->x)) return fmi2Error;
      for (i = 0; i < NX; ++i)
        if (!isfinite(c->x[i])) { say(c, fmi2Error, "fmi2DoStep: the state is no longer finite"); return fmi2Error; }
#if HAS_EVENTS
      if (cs_events(c, ta, seg_b, tm, &seg_b)) return fmi2Error;
      if (c->terminated) { c->t = seg_b; c->dirty = 1; return fmi2Discard; }
#endif
      ta = seg_b;
    }
  }
  c->t = t0 + H;
  c->dirty = 1;
  return fmi2OK;
}
FMI_EXPORT fmi2Status fmi2CancelStep(fmi2Component c) { (void)c; return fmi2Error; }
FMI_EXPORT fmi2Status fmi2GetStatus(fmi2Component c, const fmi2StatusKind s, fmi2Status *v) {
  (void)c; (void)s; (void)v; return fmi2Discard; }
FMI_EXPORT fmi2Status fmi2GetRealStatus(fmi2Component c, const fmi2StatusKind s, fmi2Real *v) {
  Inst *ci = (Inst *)c;
  if (ci && s == fmi2LastSuccessfulTime && v) { *v = ci->t; return fmi2OK; }
  return fmi2Discard;
}
FMI_EXPORT fmi2Status fmi2GetIntegerStatus(fmi2Component c, const fmi2StatusKind s, fmi2Integer *v) {
  (void)c; (void)s; (void)v; return fmi2Discard; }
FMI_EXPORT fmi2Status fmi2GetBooleanStatus(fmi2Component c, const fmi2StatusKind s, fmi2Boolean *v) {
#if HAS_EVENTS
  if (c && s == fmi2Terminated && v) { *v = ((Inst *)c)->terminated ? fmi2True : fmi2False; return fmi2OK; }
#endif
  (void)c; (void)s; (void)v; return fmi2Discard; }
FMI_EXPORT fmi2Status fmi2GetStringStatus(fmi2Component c, const fmi2StatusKind s, fmi2String *v) {
  (void)c; (void)s; (void)v; return fmi2Discard; }
"""


# ---------------------------------------------------------------- build and pack
def _guid(*parts: bytes) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part)
        h.update(b"\0")
    return "{" + str(uuid.UUID(bytes=h.digest()[:16], version=4)) + "}"


# above this size of generated C, -O1: gcc's -O2 grows faster than linearly on one long function (a 4.9 MB model.c
# took ~14 min at -O2 and 2 min at -O1 on a loaded 2-core machine); the shortcut hardly changes straight-line code
_O1_ABOVE_BYTES = 2_000_000
_HEARTBEAT_S = 15.0  # a "still compiling" line this often while the compiler runs (with progress)


def _compile(cc: str, out_lib: Path, src_dir: Path, progress=None) -> None:
    size = (src_dir / "model.c").stat().st_size
    opt = "-O1" if size > _O1_ABOVE_BYTES else "-O2"
    cmd = [cc, opt, "-fPIC", "-shared", "-fvisibility=hidden", "-DCASADI_SYMBOL_EXPORT=", "-o", str(out_lib),
           "fmu.c", "model.c", "-lm"]
    if progress:
        why = f" (model.c above {_O1_ABOVE_BYTES // 1_000_000} MB: -O2 would take minutes)" if opt == "-O1" else ""
        progress(f"compiling: {Path(cc).name} {opt}{why} ...")
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=src_dir, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        while True:
            try:
                _out, err = proc.communicate(timeout=_HEARTBEAT_S if progress else None)
                break
            except subprocess.TimeoutExpired:
                progress(f"still compiling ({time.perf_counter() - start:.0f} s)")
    finally:
        if proc.poll() is None:  # interrupted: no compiler left running
            proc.kill()
            proc.wait()
    if proc.returncode != 0:
        raise PdslError.at("CompilerFailure", f"`{' '.join(cmd)}` failed: {err.strip()[:500]}")
    if progress:
        progress(f"compiled in {time.perf_counter() - start:.1f} s")


def _kb(n: int) -> str:
    return f"{n / 1000:,.0f} KB" if n >= 10_000 else f"{n:,} bytes"


def _instructions(f: ca.Function) -> int:
    """Instructions of a Function and of the Functions it calls (an MX eval calls the SX assembly of A and b)."""
    total = f.n_instructions() if f.is_a("SXFunction") else 0
    if f.is_a("MXFunction"):
        seen = set()
        for k in range(f.n_instructions()):
            if f.instruction_id(k) == ca.OP_CALL:
                g = f.instruction_MX(k).which_function()
                if g.name() not in seen:
                    seen.add(g.name())
                    total += _instructions(g)
    return total


def write_fmu(num: NumericSystem, out_path: str | Path, *, cc: str | None = None,
              experiment: Experiment | None = None, progress=None) -> Path:
    """Write ``num`` as an FMI 2.0 FMU (ME + CS) at ``out_path`` (atomically). Returns the path.

    ``experiment``: the ``<DefaultExperiment>`` (default: :class:`Experiment`, stop time 10 s); ``progress``: a
    callable given one line per phase (functions, C code, each compiler run with its time, the archive), each
    prefixed with the time since the build began — the CLI passes one on a terminal or with ``-v``."""
    if progress is not None:
        began, say = time.perf_counter(), progress

        def progress(msg: str) -> None:  # noqa: F811 - the caller's, with the elapsed time
            say(f"[{time.perf_counter() - began:6.1f} s] {msg}")
    out = Path(out_path)
    if out.suffix.lower() != ".fmu":
        raise PdslError.at("BadOption", f"-o {out}: an FMU is one file ending in .fmu",
                           hint=f"e.g. -o {out.with_suffix('.fmu') if out.suffix else str(out) + '.fmu'}")
    if out.is_dir():
        raise PdslError.at("BadOption", f"-o {out}: is a directory")
    if num.rhs is None:
        raise PdslError.at("NotYetSupported", f"{num.system.name} is a DAE: the FMU target exports ODEs only",
                           num.system.span, hint="the C and CasADi targets export DAEs")
    event_support(num, "fmu")
    compiler = cc or shutil.which("cc") or shutil.which("gcc")
    if not compiler:
        raise PdslError.at("CompilerFailure", "no C compiler found (cc or gcc): an FMU holds a compiled binary",
                           hint="install a C compiler (e.g. gcc), or use --target c for the sources only")
    folder, suffix = _platform()
    ident = fmu_identifier(num.system.name)
    prefix = f"pdsl_{ident}_"
    lay = layout(num)
    ev, fwd = _functions(num, lay, prefix)
    events = _time_events(num, prefix)
    hybrid = _event_functions(num, prefix)
    deps = _dependencies(ev, lay)
    if progress:
        how = "A·w = b assembled, solved by sparse QR at run time" if ev.is_a("MXFunction") else "explicit rates"
        progress(f"functions: {num.nx} states, {how}; {_instructions(ev):,} instructions, their derivative "
                 f"{_instructions(fwd):,}")
    out.parent.mkdir(parents=True, exist_ok=True)
    from ..cache import sweep_temporaries, temporary_dir, temporary_file

    # the build folder and the half-zipped FMU are .<name>.tmp-<pid>-<hex>, locked while this build runs: those
    # of a killed build (kill -9 skips the cleanup below) are removed by the next build of the same FMU
    tag = f".{out.name}.tmp-"
    sweep_temporaries(out.parent, tag)
    with temporary_dir(out.parent, tag) as build:
        tmp = build.resolve()
        src = tmp / "sources"
        src.mkdir()
        generate_c([ev, fwd, *(events or ()), *(hybrid or ())], src, prefix)
        model_c = (src / "model.c").read_bytes()
        names = "\n".join(lay.names()).encode("utf-8")
        guid = _guid(model_c, names, np.asarray(num.x_start).tobytes(), np.asarray(num.p_default).tobytes())
        (src / "fmu.c").write_text(wrapper_source(num, lay, ev, fwd, prefix, guid, events, hybrid), encoding="utf-8")
        if progress:
            progress(f"C code: model.c {_kb(len(model_c))}, fmu.c {_kb((src / 'fmu.c').stat().st_size)}")
        bindir = tmp / "binaries" / folder
        bindir.mkdir(parents=True)
        _compile(compiler, bindir / f"{ident}{suffix}", src, progress)
        (tmp / "modelDescription.xml").write_bytes(
            model_description(num, lay, ident, guid, deps, ["fmu.c", "model.c"], experiment))
        fd, zpath = temporary_file(out.parent, tag, ".fmu")
        try:
            with zipfile.ZipFile(zpath, "w", zipfile.ZIP_DEFLATED) as zf:
                for f in sorted(p for p in tmp.rglob("*") if p.is_file()):
                    zf.write(f, f.relative_to(tmp).as_posix())
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(zpath, 0o666 & ~umask)
            os.replace(zpath, out)
        except BaseException:
            Path(zpath).unlink(missing_ok=True)
            raise
        finally:
            os.close(fd)  # the lock goes with it
    if progress:
        progress(f"written: {out} ({_kb(out.stat().st_size)})")
    return out
