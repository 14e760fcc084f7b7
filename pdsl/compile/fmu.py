"""`pdsl compile --target fmu`: an FMI 2.0 FMU (Model Exchange and Co-Simulation in one archive).

The FMU holds

* ``modelDescription.xml``: states (with their start values), state derivatives, parameters,
  exogenous inputs, and as outputs every column that ``pdsl simulate`` writes (the shown state —
  e.g. velocities of a Cartesian model — and the declared outputs), named exactly like the CSV
  columns, so that an FMI tool records them by default; ModelStructure dependencies are read off
  CasADi's Jacobian sparsity; units where the model declares them;
* ``sources/``: the C code — CasADi's generated code for one evaluation function (derivatives,
  shown columns, outputs) and its forward-mode derivative (``fmi2GetDirectionalDerivative``),
  plus a hand-written FMI 2.0 wrapper (``fmu.c``, from ``fmu_wrapper.c`` beside this module) with a fixed-step RK4 solver for Co-Simulation;
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
from importlib import resources
from pathlib import Path
from xml.etree import ElementTree as ET

import casadi as ca
import numpy as np

from .. import __version__
from ..backend.functions import NumericSystem
from ..diagnostics import PdslError
from .fmi_units import BASE_UNITS, FmiUnit, modelica_unit
from .ccode import event_support, generate_c, reset_function

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
    return (_wrapper_template()
            .replace("@HEAD@", head)
            .replace("@TABLES@", tables)
            .replace("@EVENTS@", ev_code)
            .replace("@EVAL@", f"{prefix}eval")
            .replace("@FWD@", f"{prefix}fwd")
            .replace("@MODES@", f"{prefix}modes" if events else "NULL")
            .replace("@SWITCHES@", f"{prefix}switches" if events else "NULL"))


def _wrapper_template() -> str:
    """The C of the FMI 2.0 wrapper, ``fmu_wrapper.c`` beside this module (package data), with the placeholders
    :func:`wrapper_source` fills: ``@HEAD@`` (the ``#define``s of the sizes), ``@TABLES@`` (value references, start
    values, GUID, the events' tables), ``@EVENTS@`` (the events' C functions) and the names of the generated
    functions ``@EVAL@``, ``@FWD@``, ``@MODES@``, ``@SWITCHES@``."""
    return (resources.files(__package__) / "fmu_wrapper.c").read_text(encoding="utf-8")


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
