"""``when CONDITION then ACTION, ...`` resolved into a :class:`pdsl.resolve.model.Event` (LANGUAGE.md §11).

The condition is a comparison, or comparisons joined by ``and``/``or``/``not``; ``==`` and ``!=`` are refused (a
crossing of an equality is an instant the integrator cannot see). An action is ``reinit(TARGET, VALUE)`` or
``terminate``; ``pre(x)`` in a value means ``x`` (every value reads the state just before the event). Which names
a reset may target depends on the formalism, and is checked when the model is lowered (pdsl.lower.events).
"""

from __future__ import annotations

import dataclasses

import sympy as sp

from ..diagnostics import PdslError
from ..parse import ast as A
from . import model as M

__all__ = ["resolve_when"]


def resolve_when(stmt: A.WhenStmt, ev) -> M.Event:
    _check_condition(stmt.condition)
    if _calls(stmt.condition, "pre"):
        raise PdslError.at("BadEvent", "`pre(...)` belongs in the actions of a `when`: the condition reads the "
                           "current values", _calls(stmt.condition, "pre")[0].span)
    cond = ev.condition(stmt.condition)
    if cond in (sp.true, sp.false):
        raise PdslError.at("BadEvent", f"the condition of this `when` is always {str(cond).lower()}: it never changes "
                           "from false to true", stmt.condition.span, "compare something that changes: `h < 0`")
    resets: list[M.Reinit] = []
    terminate = False
    for action in stmt.actions:
        if isinstance(action, A.Name) and action.id == "terminate":
            terminate = True
            continue
        if isinstance(action, A.KwArg):
            raise PdslError.at("BadEvent", f"`{action.name} = ...` is not an action", action.span,
                               "an action is `reinit(state, value)` or `terminate`")
        if not (isinstance(action, A.Call) and isinstance(action.func, A.Name) and action.func.id == "reinit"):
            raise PdslError.at("BadEvent", "an action of `when` is `reinit(state, value)` or `terminate`", action.span)
        if len(action.args) != 2 or action.kwargs:
            raise PdslError.at("WrongArity", "`reinit` takes two arguments: the state and its new value", action.span,
                               "reinit(v, -e*v)")
        target = _target_name(action.args[0], ev)
        if any(r.target == target for r in resets):
            raise PdslError.at("BadEvent", f"`{target}` is reset twice by this `when`", action.span,
                               "two resets of one state at one instant are ambiguous: keep one")
        value = ev.scalar(_without_pre(action.args[1]), f"the new value of `{target}`")
        resets.append(M.Reinit(target=target, value=value, span=action.span))
    if not resets and not terminate:
        raise PdslError.at("BadEvent", "this `when` has no action", stmt.span, "give `reinit(state, value)` or `terminate`")
    return M.Event(condition=cond, resets=tuple(resets), terminate=terminate, span=stmt.span, text=str(cond))


def _check_condition(e: A.Expr) -> None:
    """Comparisons joined by and/or/not; no `==`/`!=`, no `if` inside (a number is not a condition)."""
    if isinstance(e, A.Compare):
        if e.op in ("==", "!="):
            raise PdslError.at("BadEvent", f"`{e.op}` cannot start an event: the solution crosses a value between two "
                               "steps and almost never equals it", e.span,
                               "write the crossing as an inequality: `h < 0` fires when h falls below 0")
    elif isinstance(e, A.BoolOp):
        _check_condition(e.left)
        _check_condition(e.right)
    elif isinstance(e, A.Not):
        _check_condition(e.operand)


def _target_name(e: A.Expr, ev) -> str:
    if _calls(e, "pre"):
        raise PdslError.at("BadEvent", "the target of `reinit` is a state, not `pre(...)`", e.span)
    value = ev.number(e)
    if isinstance(value, sp.Symbol):
        return value.name
    raise PdslError.at("BadEvent", "the first argument of `reinit` must be a state (a `var`, a coordinate `q` or its "
                       "velocity `der(q)`, a momentum, a body coordinate such as `b.x` or `b.vx`)", e.span)


def _calls(e, name: str) -> list:
    """Every call of ``name`` in the expression tree ``e`` (AST)."""
    found = []
    stack = [e]
    while stack:
        node = stack.pop()
        if isinstance(node, A.Call) and isinstance(node.func, A.Name) and node.func.id == name:
            found.append(node)
        if dataclasses.is_dataclass(node):
            for f in dataclasses.fields(node):
                v = getattr(node, f.name)
                stack.extend(v if isinstance(v, tuple) else [v])
    return found


def _without_pre(e):
    """The expression with each ``pre(x)`` replaced by ``x`` (values read before the event either way)."""
    if isinstance(e, A.Call) and isinstance(e.func, A.Name) and e.func.id == "pre":
        if len(e.args) != 1 or e.kwargs:
            raise PdslError.at("WrongArity", "`pre` takes one argument", e.span)
        return _without_pre(e.args[0])
    if not dataclasses.is_dataclass(e) or isinstance(e, type):
        return e
    changes = {}
    for f in dataclasses.fields(e):
        v = getattr(e, f.name)
        if isinstance(v, tuple):
            new = tuple(_without_pre(i) for i in v)
            if new != v:
                changes[f.name] = new
        elif dataclasses.is_dataclass(v):
            new = _without_pre(v)
            if new is not v:
                changes[f.name] = new
    return dataclasses.replace(e, **changes) if changes else e
