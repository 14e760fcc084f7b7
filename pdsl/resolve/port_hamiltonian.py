"""Resolution of port-Hamiltonian statements into :class:`Element` records (sympy data).

Port variables are symbols named ``elem.e`` / ``elem.f`` (one-ports) and
``tp.a.e`` / ``tp.a.f`` (two-port ports); inside a relation they are written
``e``, ``f`` or ``e_a``, ``f_a``, ``e_b``, ``f_b``.
"""

from __future__ import annotations

import sympy as sp

from .. import symbols as S
from ..diagnostics import PdslError
from ..parse import ast as A
from .expressions import ElementRef, Evaluator
from .model import Element, Junction, Resistive, Source, Store, Structure, TwoPort

__all__ = ["resolve_ph", "port_symbols", "JUNCTION_KINDS"]

JUNCTION_KINDS = ("common_effort", "common_flow")


def port_symbols(port: str) -> tuple[sp.Symbol, sp.Symbol]:
    """(effort, flow) symbols of a port named ``elem`` or ``tp.a``."""
    return S.sym(f"{port}.e"), S.sym(f"{port}.f")


def _flags(attrs, allowed: set[str]) -> set[str]:
    out = set()
    for a in attrs:
        if a.name not in allowed or a.value is not None:
            raise PdslError.at("UnknownAttribute", f"`{a.name}` is not a flag here", a.span, "flags: " + ", ".join(sorted(allowed)))
        out.add(a.name)
    return out


def resolve_ph(stmt: A.Stmt, ev: Evaluator, *, name: str | None = None, state: str | None = None,
               members: list | None = None) -> Element:
    """One p-H statement -> its typed record (Store, Resistive, Source, TwoPort, Junction, Structure).

    ``name`` (and ``state`` for a store) is the element's name in this iteration of the statement's ``for`` clause
    (``cap[3]``, ``q[3]``); the resolver computes it. Without one, the statement's own name is used. ``members`` are a
    junction's members as (expression, evaluator) pairs, with member loops (``cap[i] for i in 1..N``) expanded.
    """
    name = name if name is not None else getattr(stmt, "name", None)
    if isinstance(stmt, A.StoreStmt):
        state_name = state if state is not None else stmt.state
        energy = ev.scalar(stmt.energy, f"the energy of `{name}`")
        state = S.sym(state_name)
        rates = sorted(str(v) for v in energy.free_symbols if S.is_der(v))
        if rates:  # a stored energy is a function of the state; its rate comes from the network, not the energy
            raise PdslError.at("BadElement", f"the energy of `{name}` reads the rate `{rates[0]}`: a stored energy is a "
                               f"function of the state `{state_name}` (and parameters)", stmt.energy.span,
                               f"write it in `{state_name}`; the network gives its rate")
        if state not in energy.free_symbols:
            raise PdslError.at("BadElement", f"the energy of `{name}` does not depend on its state `{state_name}`", stmt.energy.span)
        return Store(name=name, integrates=stmt.kind.split("_")[0], state=state, energy=energy, span=stmt.span)
    if isinstance(stmt, A.ResistiveStmt):
        e, f = port_symbols(name)
        local = ev.with_names({"e": e, "f": f})
        relation = local.scalar(stmt.lhs, "a relation") - local.scalar(stmt.rhs, "a relation")
        if not relation.free_symbols & {e, f}:
            raise PdslError.at("BadElement", f"the relation of `{name}` does not involve its port (e, f)", stmt.span)
        flags = _flags(stmt.attrs, {"dissipative"})
        return Resistive(name=name, relation=relation, e=e, f=f, dissipative="dissipative" in flags, span=stmt.span)
    if isinstance(stmt, A.SourceStmt):
        value = ev.scalar(stmt.value, f"the value of source `{name}`")
        return Source(name=name, imposes=stmt.kind.split("_")[0], value=value, open_port=stmt.open_port, span=stmt.span,
                      domain=stmt.domain)
    if isinstance(stmt, A.TwoPortStmt):
        if stmt.port_a == stmt.port_b:
            raise PdslError.at("DuplicateDefinition", f"the two ports of `{name}` have the same name", stmt.span)
        ea, fa = port_symbols(f"{name}.{stmt.port_a}")
        eb, fb = port_symbols(f"{name}.{stmt.port_b}")
        pa, pb = stmt.port_a, stmt.port_b  # the relation's variables follow the declared port names (LANGUAGE.md §6)
        local = ev.with_names({f"e_{pa}": ea, f"f_{pa}": fa, f"e_{pb}": eb, f"f_{pb}": fb})
        relation = local.scalar(stmt.lhs, "a relation") - local.scalar(stmt.rhs, "a relation")
        _flags(stmt.attrs, set())
        return TwoPort(name=name, form=stmt.kind, ports=(stmt.port_a, stmt.port_b), relation=relation,
                       e_a=ea, f_a=fa, e_b=eb, f_b=fb, span=stmt.span)
    if isinstance(stmt, A.JunctionStmt):
        if stmt.kind not in JUNCTION_KINDS:
            raise PdslError.at("UnknownJunctionKind", f"unknown junction kind `{stmt.kind}`", stmt.kind_span,
                               "common_effort (0-junction) or common_flow (1-junction)")
        pairs = members if members is not None else [(m, ev) for m in stmt.members]
        members = tuple(_member(m, local) for m, local in pairs)
        if len(members) < 2 and not stmt.node and not stmt.name:  # a named junction's bonds count too (lowering)
            raise PdslError.at("BadJunction", "a junction connects at least two ports", stmt.span)
        return Junction(name=name, form=stmt.kind, members=members, aliases=tuple(stmt.aliases), span=stmt.span,
                        domain=stmt.domain)
    if isinstance(stmt, A.StructureStmt):
        if stmt.args:
            raise PdslError.at("WrongArity", "structure takes named matrices: J = ..., R = ..., B = ...", stmt.args[0].span)
        data = {}
        for kw in stmt.kwargs:
            if kw.name not in ("J", "R", "B"):
                raise PdslError.at("UnknownArgument", f"`structure` has no matrix `{kw.name}`", kw.span, "J, R, B")
            v = ev.number(kw.value)
            if not isinstance(v, sp.MatrixBase):
                v = sp.ImmutableMatrix([[v]])
            data[kw.name] = (v, kw.value.span)
        if "J" not in data:
            raise PdslError.at("MissingArgument", "`structure` needs at least J", stmt.span)
        return Structure(J=data["J"], R=data.get("R"), B=data.get("B"), span=stmt.span)
    raise AssertionError(type(stmt))


def _member(m: A.Expr, ev: Evaluator) -> tuple[int, str, object]:
    """A junction member: ``name``, ``cap[i]``, ``tp.a``, ``tp[i].a``, optionally negated -> (sign, port, span).

    A name that is not declared stays as written (the lowering reports it, with every other unknown member)."""
    sign = 1
    if isinstance(m, A.Neg):
        sign, m = -1, m.operand
    base = m.base if isinstance(m, A.Attr) else m
    if isinstance(base, A.Name | A.Index):
        element = _element_name(base, ev)
        return sign, (f"{element}.{m.name}" if isinstance(m, A.Attr) else element), m.span
    raise PdslError.at("BadJunction", "a junction member is an element, a two-port port (`tr.a`) or a named junction, "
                       "optionally with a minus sign", m.span)


def _element_name(e: A.Expr, ev: Evaluator) -> str:
    if isinstance(e, A.Name) and e.id not in ev.scope.names:
        return e.id
    target = ev.eval(e)
    if isinstance(target, ElementRef):
        return target.name
    raise PdslError.at("BadJunction", "a junction member is an element, a two-port port (`tr.a`) or a named junction, "
                       "optionally with a minus sign", e.span)
