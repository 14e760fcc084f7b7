"""The events of a model (``when``, LANGUAGE.md §11) carried into the lowered system, whichever formalism lowered it.

A reset's target must be a state of the lowered system or one of its shown columns (the velocity ``b.vx`` of a
body whose state is its momentum); conditions and values are rewritten in the states (a shown column is replaced by
its expression, ``b.vx`` -> ``b.px/m``).
"""

from __future__ import annotations

import difflib
from dataclasses import replace

import sympy as sp

from .. import symbols as S
from ..diagnostics import PdslError
from ..resolve.model import Model
from .ir import Event, EventReset, SymbolicSystem

__all__ = ["attach_events"]


def attach_events(model: Model, system: SymbolicSystem) -> SymbolicSystem:
    states = {s.name for s in system.states}
    shown = {name: expr for name, expr in system.report_columns()}
    subs = {S.sym(name): expr for name, expr in shown.items() if name not in states}
    # a body's velocity reads `der(b.x)` in expressions and is the column (state or shown) `b.vx`
    velocity = _body_velocities(states, shown)
    for der_name, column in velocity.items():
        subs[S.sym(der_name)] = shown[column] if column in shown else S.sym(column)
    laws = system.input_laws()
    events = []
    for ev in model.events:
        resets = []
        for r in ev.resets:
            if r.target in velocity:
                r = replace(r, target=velocity[r.target])
            if r.target not in states and r.target not in shown:
                kind = _kind_of(model, r.target)
                raise PdslError.at("BadEvent", f"`reinit` of `{r.target}`: it is {kind + ', ' if kind else ''}not a state "
                                   f"of this {system.formalism} model", r.span, _target_hint(r.target, system, states, shown))
            resets.append(EventReset(target=r.target, value=_in_states(r.value, subs, laws), span=r.span))
        cond = _in_states(ev.condition, subs, laws)
        events.append(Event(condition=cond, resets=tuple(resets), terminate=ev.terminate, span=ev.span, text=ev.text))
    return replace(system, events=tuple(events))


def _body_velocities(states: set, shown: dict) -> dict[str, str]:
    """``{"der(b.x)": "b.vx"}``: the velocity column of each body coordinate ``P.c`` (a state) is ``P.vc``, a state
    (velocity formulation) or a shown column (momentum formulation) — the Cartesian formalism's naming."""
    out = {}
    for name in states:
        head, dot, comp = name.rpartition(".")
        if dot and f"{head}.v{comp}" in (states | set(shown)):
            out[f"der({name})"] = f"{head}.v{comp}"
    return out


def _in_states(expr: sp.Basic, subs: dict, laws: dict) -> sp.Basic:
    if laws:
        expr = expr.xreplace(laws)
    return expr.xreplace(subs) if subs else expr


def _kind_of(model: Model, name: str) -> str:
    """`a parameter`, `an input` ... for a name the model declares as something other than a state ('' if not)."""
    for kind, decls in (("a parameter", model.params), ("an input", model.inputs), ("an output", model.outputs)):
        if any(getattr(d, "name", None) == name for d in decls):
            return kind
    return ""


def _target_hint(target: str, system: SymbolicSystem, states: set, shown: dict) -> str:
    names = list(dict.fromkeys([*(s.name for s in system.states), *shown]))  # in state order (a set has none)
    if target.startswith("der(") and system.kinetic and not any(n.startswith("der(") for n in names):
        return (f"this model's states are coordinates and momenta: reset the momentum ({', '.join(system.kinetic)}), "
                "not a velocity")
    close = difflib.get_close_matches(target, names, n=1)
    return (f"did you mean `{close[0]}`? " if close else "") + "a reset may target: " + ", ".join(names)
