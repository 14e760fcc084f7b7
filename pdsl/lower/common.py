"""Checks and helpers shared by every lowering."""

from __future__ import annotations

import sympy as sp

from .. import symbols as S
from ..diagnostics import Collector, PdslError, Span
from ..resolve.model import Model
from .ir import State

FORMULATIONS = ("hamiltonian", "lagrangian")


def rate_symbol(name: str) -> sp.Symbol:
    """The unknown ẋ of state ``name`` (its spelling cannot clash with a model name)."""
    return S.sym(f"dt({name})")


def rate_name(rate: sp.Symbol) -> str:
    """``dt(x)`` -> ``der(x)``: how a rate is shown to users."""
    return "der(" + rate.name[3:-1] + ")"


def make_state(name: str, symbol: sp.Symbol, start: float | None, span: Span) -> State:
    return State(name=name, symbol=symbol, rate=rate_symbol(name), start=start, span=span)


def check_no_unsupported(model: Model, allowed: set[str], formalism: str) -> None:
    """Report statements that this formalism does not use (they would be silently ignored)."""
    diags = Collector()
    groups = {
        "equations": ("a plain equation", [e.span for e in model.equations]),
        "constraints": ("a `constraint`", [c.span for c in model.constraints]),
        "gravity": ("`gravity`", [g.span for g in model.gravity]),
        "potentials": ("`potential`", [p.span for p in model.potentials]),
        "forces": ("`force ... on` a point", [f.span for f in model.forces]),
        "generalized_forces": ("`force ... on` a coordinate", [f.span for f in model.generalized_forces]),
        "connectors": ("a connector", [c.span for c in model.connectors]),
        "lagrangian": ("`lagrangian`", [model.lagrangian.span] if model.lagrangian else []),
        "hamiltonian": ("`hamiltonian`", [model.hamiltonian.span] if model.hamiltonian else []),
    }
    for key, (what, spans) in groups.items():
        if key in allowed:
            continue
        for span in spans:
            diags.error(
                "MixedFormalism",
                f"{what} has no meaning in a {formalism} model",
                span,
                _MIX_HINTS.get((key, formalism)),
            )
    diags.raise_if_any()


_MIX_HINTS = {
    ("equations", "lagrangian"): "a model is written either as equations or with a lagrangian; use `force ... on q` for non-conservative forces",
    ("equations", "hamiltonian"): "a model is written either as equations or with a hamiltonian",
    ("constraints", "plain"): "in a plain model write `0 = ...` for an algebraic equation",
    ("lagrangian", "plain"): "a `lagrangian` needs `coord` declarations",
    ("hamiltonian", "plain"): "a `hamiltonian` needs `coord` and `momentum` declarations",
}


def check_finite(expr: sp.Expr, span: Span, what: str) -> None:
    if expr.has(sp.zoo, sp.nan, sp.oo, -sp.oo):
        raise PdslError.at("NotANumber", f"{what} is not finite (a division by zero?)", span)


def resolve_input_laws(model: Model) -> None:
    """Feedback laws may use each other, but not in a cycle."""
    laws = {u.symbol: u for u in model.inputs if u.law is not None}
    state: dict = {}

    def visit(sym, chain):
        if state.get(sym) == "done":
            return
        if state.get(sym) == "active":
            u = laws[sym]
            names = " -> ".join(c.name for c in chain + [sym])
            raise PdslError.at("CyclicDefinition", f"input laws form a cycle: {names}", u.span)
        state[sym] = "active"
        for dep in laws[sym].law.free_symbols & set(laws):
            visit(dep, chain + [sym])
        state[sym] = "done"

    for sym in laws:
        visit(sym, [])
