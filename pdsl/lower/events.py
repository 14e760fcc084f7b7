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
    subs.update(system.port_values)  # a power port's values (`when body.port.T > 340`), in the states
    # the rate of a body coordinate (`der(b.x)`, as expressions read `b.vx`): ẋ in the state (v, or M⁻¹p), the map
    # that puts outputs and velocity constraints in the state. Not for generalized coordinates: a Hamiltonian
    # model resets its momenta (LANGUAGE.md §11)
    positions = {c for body in system.bodies for node in body.positions for c in node}
    if positions:
        from .common import position_rates

        for xsym, rate in position_rates(system, positions).items():
            if S.der_name(xsym.name) not in states:
                shown[S.der_name(xsym.name)] = rate
                subs[S.der(xsym)] = rate
    by_name = {s.name: s.symbol for s in system.states}
    laws = system.input_laws()
    events = []
    for ev in model.events:
        resets = []
        for r in ev.resets:
            if r.target not in states and r.target not in shown:
                kind = _kind_of(model, r.target)
                raise PdslError.at("BadEvent", f"`reinit` of `{r.target}`: it is {kind + ', ' if kind else ''}not a state "
                                   f"of this {system.formalism} model", r.span, _target_hint(r.target, system, states, shown))
            resets.append(EventReset(target=r.target, value=_in_states(r.value, subs, laws), span=r.span,
                                     quantity=by_name.get(r.target, shown.get(r.target))))
        cond = _in_states(ev.condition, subs, laws)
        events.append(Event(condition=cond, resets=tuple(resets), terminate=ev.terminate, span=ev.span, text=ev.text))
    return replace(system, events=tuple(events))


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
