"""Plain equations: ``der(x) = f`` and ``0 = g`` rows, taken as written."""

from __future__ import annotations

import dataclasses
import itertools

import sympy as sp

from .. import symbols as S
from ..diagnostics import Collector, PdslError
from ..resolve.model import Model
from .common import check_no_unsupported, make_state, resolve_input_laws, scan
from .ir import Algebraic, Equation, SymbolicSystem
from .registry import Formalism, register


def lower_plain(model: Model) -> SymbolicSystem:
    check_no_unsupported(model, {"equations"}, "plain")
    resolve_input_laws(model)
    diags = Collector()
    for v in model.variables:
        if v.kind != "var":
            diags.error(
                "MixedFormalism",
                f"`{v.name}` is declared `{v.kind}` but the model has no "
                + ("`lagrangian` or `hamiltonian`" if v.kind == "coord" else "`hamiltonian`"),
                v.span,
                "use `var` for plain equations",
            )
    diags.raise_if_any()

    ders = {S.der(v.symbol): v for v in model.variables}
    # the free symbols of each side (and whether it is finite), once, each shared subtree visited once: sympy walks
    # the whole tree for every `free_symbols` (N-body sums are large trees), so the passes below reuse these sets
    scans = [(scan(e.lhs), scan(e.rhs)) for e in model.equations]
    free = [(a[0], b[0]) for a, b in scans]
    used_ders = set().union(*(a | b for a, b in free)) if model.equations else set()
    for u in model.inputs:
        if u.law is not None and u.law.free_symbols & set(ders):
            raise PdslError.at(
                "AlgebraicLoop",
                f"the feedback law of input `{u.name}` uses a derivative der(...)",
                u.span,
                "feedback laws may use states, parameters, other inputs and t",
            )
    state_vars = [v for v in model.variables if S.der(v.symbol) in used_ders]
    alg_vars = [v for v in model.variables if S.der(v.symbol) not in used_ders]
    states = tuple(make_state(v.name, v.symbol, v.start, v.span) for v in state_vars)
    to_rate = {S.der(s.symbol): s.rate for s in states}
    rates = set(to_rate.values())

    differential, algebraic = [], []
    rhs_rates: list[bool] = []  # per differential equation: its right side holds a rate
    for eq, (lhs_free, rhs_free), (lhs_scan, rhs_scan) in zip(model.equations, free, scans):
        lhs = eq.lhs.xreplace(to_rate) if lhs_free & to_rate.keys() else eq.lhs
        rhs = eq.rhs.xreplace(to_rate) if rhs_free & to_rate.keys() else eq.rhs
        if not (lhs_scan[1] and rhs_scan[1]):  # check_finite (replacing der(x) by its rate changes nothing there)
            raise PdslError.at("NotANumber", "this equation is not finite (a division by zero?)", eq.span)
        present = sorted({to_rate[d] for d in (lhs_free | rhs_free) & to_rate.keys()}, key=lambda s: s.name)
        if not present:
            if (lhs - rhs) == 0:
                diags.error("TrivialEquation", "this equation is always true (0 = 0)", eq.span)
                continue
            algebraic.append(Equation(lhs=lhs, rhs=rhs, origin=eq.span, label="algebraic"))
            continue
        if lhs in rates and not (rhs_free & to_rate.keys()):
            nonlinear = []  # der(x) = f with f free of derivatives: linear, without differentiating f twice
        else:
            residual = lhs - rhs
            nonlinear = [
                (a, b) for a, b in itertools.combinations_with_replacement(present, 2) if sp.diff(residual, a, b) != 0
            ]
        if nonlinear:
            a, b = nonlinear[0]
            diags.error(
                "NonlinearDerivative",
                "this equation is nonlinear in the derivatives " + ", ".join(
                    f"der({S.der_base(x).name if S.is_der(x) else x.name[3:-1]})" for x in {a, b}
                ),
                eq.span,
                "pdsl integrates equations that are linear in der(...): A(x)·der(x) = f(x)",
            )
            continue
        differential.append(Equation(lhs=lhs, rhs=rhs, origin=eq.span, label="ode"))
        rhs_rates.append(bool(rhs_free & to_rate.keys()))
    if any(d.code == "NonlinearDerivative" for d in diags.items):
        diags.raise_if_any()  # the counts below would only repeat the same problem

    if len(differential) != len(states):
        have = len(differential)
        diags.error(
            "UnbalancedSystem",
            f"{len(states)} variable{'s' if len(states) != 1 else ''} appear under der(...) "
            f"({', '.join(s.name for s in states) or 'none'}) but {have} equation{'s' if have != 1 else ''} contain der(...)",
            model.span,
            "every state needs exactly one differential equation",
        )
    if len(algebraic) != len(alg_vars):
        diags.error(
            "UnbalancedSystem",
            f"{len(alg_vars)} algebraic variable{'s' if len(alg_vars) != 1 else ''} "
            f"({', '.join(v.name for v in alg_vars) or 'none'}) but {len(algebraic)} algebraic equation"
            f"{'s' if len(algebraic) != 1 else ''}",
            (algebraic[len(alg_vars)].origin if len(algebraic) > len(alg_vars) else alg_vars[-1].span),
            "a variable that never appears under der(...) is algebraic and needs an equation `0 = ...`",
        )
    if not states and not alg_vars and not diags and not model.outputs:  # outputs only: a signal block (std:signals)
        diags.error("EmptyModel", f"model `{model.name}` has no equations", model.span, "add `var x` and `der(x) = ...`")
    diags.raise_if_any()
    outputs = _outputs_without_derivatives(model, differential, to_rate, rhs_rates)

    return SymbolicSystem(
        name=model.name,
        doc=model.doc,
        path=model.path,
        formalism="plain" if not alg_vars else "plain-dae",
        states=states,
        algebraics=tuple(Algebraic(name=v.name, symbol=v.symbol, start=v.start, span=v.span) for v in alg_vars),
        multipliers=(),
        params=model.params,
        inputs=model.inputs,
        outputs=outputs,
        neural=model.neural,
        differential=tuple(differential),
        algebraic=tuple(algebraic),
        energy=None,
        energy_origin=None,
        constraints=(),
        span=model.span,
    )


def _outputs_without_derivatives(model: Model, differential, to_rate, rhs_rates=None) -> tuple:
    """Outputs may use der(x) of a state when its equation is explicit (``der(x) = f``): f replaces it.

    Outputs are functions of (t, x, p, u); a derivative that is only defined implicitly, or the
    derivative of an algebraic variable, is a located error.
    """
    explicit = {}
    rates = set(to_rate.values())
    if not model.outputs:
        return ()
    for k, eq in enumerate(differential):
        has_rate = rhs_rates[k] if rhs_rates is not None else bool(eq.rhs.free_symbols & rates)
        if eq.lhs in rates and not has_rate:
            explicit[eq.lhs] = eq.rhs
    ders = {S.der(v.symbol): v for v in model.variables}
    out = []
    for o in model.outputs:
        used = o.expr.free_symbols & set(ders)
        if not used:
            out.append(o)
            continue
        repl = {}
        for d in sorted(used, key=lambda s: s.name):
            rate = to_rate.get(d)
            if rate is None or rate not in explicit:
                name = ders[d].name
                why = "an algebraic variable" if rate is None else "a state whose equation is not of the form der(x) = ..."
                raise PdslError.at(
                    "NotAllowedHere",
                    f"output `{o.name}` uses der({name}), the derivative of {why}",
                    o.span,
                    f"write `der({name}) = ...` explicitly, or introduce a var for the quantity with its own equation",
                )
            repl[d] = explicit[rate]
        out.append(dataclasses.replace(o, expr=o.expr.xreplace(repl)))
    return tuple(out)


PLAIN = register(Formalism(
    name="plain", precedence=0, claims=lambda model: True,
    lower=lambda model, options: lower_plain(model),
    describe="plain equations `der(x) = f`, `0 = g` (LANGUAGE.md §7); lowers whatever no other formalism claims",
))
