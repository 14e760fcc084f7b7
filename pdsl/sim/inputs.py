"""Exogenous input signals: an expression of t, the states and the parameters (``--input "F=sin(t)"``), or a column
of a CSV file interpolated linearly in time (``--input-data``).

sympy, the parser and the resolver are imported where an expression is read (:func:`input_from_expression`):
simulating a cached model imports none of them.
"""

from __future__ import annotations

from pathlib import Path

import casadi as ca
import numpy as np

from ..backend.functions import NumericSystem
from ..diagnostics import PdslError
from ..records import record

__all__ = ["InputSignal", "input_from_expression", "inputs_from_csv"]


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
