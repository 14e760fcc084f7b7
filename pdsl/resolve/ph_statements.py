"""Port-Hamiltonian elements: stores, resistive elements, sources, transformers and gyrators,
junctions, structure matrices and power ports (LANGUAGE.md §5).

A mixin of :class:`pdsl.resolve.resolver._Resolver` (state and core methods through ``self``; see its STATEMENTS table)."""

from __future__ import annotations

import dataclasses
import difflib

import sympy as sp

from .. import symbols as S
from ..diagnostics import PdslError, Span
from ..parse import ast as A
from ..parse.queries import RESERVED as _RESERVED
from . import model as M
from .port_hamiltonian import JUNCTION_KINDS, port_symbols, resolve_ph
from .expressions import (
    IndexedArray,
    ElementRef,
    Evaluator,
    int_value,
)
from .common import (
    MAX_ARRAY,
    _element_kind,
)


class PortHamiltonianStatements:
    """Port-Hamiltonian elements, junctions, structures and power ports."""

    def _declare_elements(self, body) -> None:
        """Bind p-H element names (and store states) before any expression is evaluated.

        An indexed name (``cap[i]``, ``q[i]``) is expanded over the statement's ``for`` clause; every statement that
        declares ``cap[...]`` contributes to the one array ``cap`` (so a first or last section may be written apart).
        """
        arrays: dict[str, dict] = {}
        for stmt in body:
            if isinstance(stmt, A.StoreStmt | A.ResistiveStmt | A.SourceStmt | A.TwoPortStmt):
                ports = (stmt.port_a, stmt.port_b) if isinstance(stmt, A.TwoPortStmt) else ()
                kind = _element_kind(stmt)
                self._guard(self._declare_ph_name, stmt, stmt.name, stmt.index, stmt.name_span, "element",
                            lambda n, kind=kind, ports=ports: ElementRef(n, kind, ports), arrays)
            elif isinstance(stmt, A.JunctionStmt) and stmt.name:
                self._guard(self._declare_ph_name, stmt, stmt.name, stmt.index, stmt.name_span, "element",
                            lambda n: ElementRef(n, "junction"), arrays)
            elif isinstance(stmt, A.TerminalStmt):  # a port of a component written in equations (pdsl.compose)
                self._guard(lambda _s, stmt=stmt: self._bind(stmt.name, "element", stmt.span, ElementRef(stmt.name, "terminal")), None)
            elif isinstance(stmt, A.InterfaceStmt):  # the p-H side of an interface is a source named after the port
                self._guard(lambda _s, stmt=stmt: self._bind(stmt.port, "element", stmt.span, ElementRef(stmt.port, "source")), None)
            if isinstance(stmt, A.JunctionStmt) and stmt.name:
                for alias in stmt.aliases:  # a node of connected power ports: each port is one of its bonds
                    self._guard(lambda _s, alias=alias: self._bind(alias, "element", stmt.span, ElementRef(alias, "junction")), None)
            if isinstance(stmt, A.StoreStmt):
                self._guard(self._declare_ph_name, stmt, stmt.state, stmt.state_index, stmt.state_span, "var", S.sym, arrays)
        for name, a in arrays.items():
            indices = tuple(a["items"])
            items = tuple(v for v, _ in a["items"].values())
            what = "element" if a["kind"] == "element" else "store state"
            value = IndexedArray(name, min(indices, default=0), items, indices=indices, what=what)
            self._guard(lambda _s, name=name, a=a, value=value: self._bind(name, a["kind"], a["span"], value), None)

    def _declare_power_ports(self, body, out) -> None:
        """Each power port's values (``p.across``, ``p.T``; LANGUAGE.md §9), attached to its name: the port's bond
        variables ``p.e``, ``p.f`` (pdsl.compose says which is the across value and the port's sign in its junction;
        the through value is what flows into the port's model)."""
        found = out.setdefault("power_ports", [])
        for stmt in body:
            if not isinstance(stmt, A.PowerPortStmt):
                continue
            decl = self.names.get(stmt.name)
            if decl is None or not isinstance(decl.value, ElementRef):
                continue  # not part of a network: its connection failed (already reported)
            e, f = port_symbols(stmt.name)
            across, other = (e, f) if stmt.across_is_effort else (f, e)
            port = M.PowerPort(name=stmt.name, domain=stmt.domain, across=across, through=-stmt.sign * other,
                               owner=stmt.owner, terminal=f"{stmt.name}.terminal" in self.names, span=stmt.span)
            decl.value = dataclasses.replace(decl.value, port=port)
            found.append(port)
        self._scope_cache.clear()

    def _declare_ph_name(self, stmt, name: str, index: tuple, span: Span | None, kind: str, make, arrays: dict) -> None:
        """One element (or store state) name: a scalar, or the entries ``name[i]`` its ``for`` clause declares."""
        span = span or stmt.span
        if not index:
            if stmt.loops:
                n = len(self._expand(stmt.loops))
                if n != 1:
                    what = "a store state" if kind == "var" else "an element"
                    raise PdslError.at(
                        "DuplicateDefinition",
                        f"this `for` clause declares {what} `{name}` {n} times", span,
                        f"index the name, as `{name}[{stmt.loops[0].var}]`, to make an array",
                    )
            self._bind(name, kind, span, make(name))
            return
        if len(index) != 1:
            raise PdslError.at("WrongArity", f"`{name}` takes one index, got {len(index)}", span)
        entry = arrays.setdefault(name, {"kind": kind, "span": span, "items": {}})
        if entry["kind"] != kind:
            raise PdslError.at(
                "DuplicateDefinition", f"`{name}` is already declared on line {entry['span'].line}", span,
                "an array holds either elements or store states",
            )
        for bind in self._expand(stmt.loops):
            i = self._element_index(index[0], bind)
            if i in entry["items"]:
                first = entry["items"][i][1]
                raise PdslError.at(
                    "DuplicateDefinition", f"`{name}[{i}]` is declared twice (first on line {first.line})", span,
                    "each index of an element array is declared once",
                )
            entry["items"][i] = (make(f"{name}[{i}]"), span)

    def _ph_element(self, stmt, bind, out) -> None:
        """A p-H statement -> an Element (pdsl.resolve.port_hamiltonian); junction members are checked here."""
        ev = self._ev(bind)
        names = {}
        if getattr(stmt, "name", None):
            names["name"] = self._element_name(stmt.name, stmt.index, bind)
        if isinstance(stmt, A.StoreStmt):
            names["state"] = self._element_name(stmt.state, stmt.state_index, bind)
        if isinstance(stmt, A.JunctionStmt):
            names["members"] = self._junction_members(stmt, ev, bind)
            self._check_junction(stmt, names["members"], names.get("name"))
        out["elements"].append(resolve_ph(stmt, ev, **names))

    def _junction_members(self, stmt: A.JunctionStmt, ev: Evaluator, bind) -> list:
        """The members of a junction, each with the evaluator it is read in: ``cap[i] for i in 1..N`` gives N."""
        out = []
        for m in stmt.members:
            if not isinstance(m, A.MemberLoop):
                out.append((m, ev))
                continue
            if m.var in bind or m.var in self.declared or m.var in self.consts or m.var in _RESERVED:
                raise PdslError.at("DuplicateDefinition", f"the loop variable `{m.var}` is already a name here", m.span,
                                   "choose an index name that the model and the statement's `for` clause do not use")
            scope = Evaluator(self._const_scope(bind))
            lo = int_value(scope.eval(m.lo), m.lo.span, "a loop bound")
            hi = int_value(scope.eval(m.hi), m.hi.span, "a loop bound")
            if hi - lo + 1 > MAX_ARRAY:
                raise PdslError.at("BadArrayBounds", f"the loop {lo}..{hi} is too long", m.span)
            out += [(m.body, ev.with_names({m.var: sp.Integer(i)})) for i in range(lo, hi + 1)]
        return out

    def _check_junction(self, stmt: A.JunctionStmt, members: list, name: str | None) -> None:
        if stmt.kind not in JUNCTION_KINDS:
            close = difflib.get_close_matches(stmt.kind, JUNCTION_KINDS, n=1)
            hint = f"did you mean `{close[0]}`?" if close else "common_effort (0-junction) or common_flow (1-junction)"
            raise PdslError.at("UnknownJunctionKind", f"unknown junction kind `{stmt.kind}`", stmt.kind_span, hint)
        for member, ev in members:
            port = member.operand if isinstance(member, A.Neg) else member
            base = port.base if isinstance(port, A.Attr) else port
            if isinstance(base, A.Index) and isinstance(base.base, A.Name):
                array = ev.eval(base.base)
                if isinstance(array, ElementRef):
                    raise PdslError.at("TypeMismatch", f"`{array.name}` is a single element, not an array", base.span,
                                       f"write `{array.name}` without an index")
            target = ev.eval(base) if isinstance(base, A.Name | A.Index) else None
            if isinstance(target, IndexedArray) and target.what == "element":
                first = min(target.indices, default=1)
                raise PdslError.at("TypeMismatch", f"`{target.name}` is an array of elements: a junction takes one of them",
                                   member.span, f"index it, as `{target.name}[{first}]`")
            if isinstance(target, ElementRef) and name is not None and target.name == name:
                raise PdslError.at("TypeMismatch", f"junction `{name}` lists itself", member.span, "a bond joins two different junctions")
            if not isinstance(target, ElementRef):
                raise PdslError.at(
                    "TypeMismatch",
                    "a junction joins elements, other junctions or two-port ports (`tr.a`), optionally with a `-` sign",
                    member.span,
                )
            if isinstance(port, A.Attr) and port.name not in target.ports:
                ports = ", ".join(f"`{target.name}.{p}`" for p in target.ports) or "none"
                raise PdslError.at("UnknownName", f"`{target.name}` has no port `{port.name}`", port.span, f"its ports: {ports}")
            if target.ports and not isinstance(port, A.Attr):
                raise PdslError.at(
                    "TypeMismatch", f"`{target.name}` is a two-port: name the port, as `{target.name}.{target.ports[0]}`", member.span
                )
