"""Plain statements: equations, constraints, `when` events and the model's one Lagrangian or
Hamiltonian (LANGUAGE.md §2, §4, §11).

A mixin of :class:`pdsl.resolve.resolver._Resolver` (state and core methods through ``self``; see its STATEMENTS table)."""

from __future__ import annotations

from ..diagnostics import PdslError
from ..parse import ast as A
from . import model as M
from .common import (
    _pairs,
    classify_constraint,
)


class PlainStatements:
    """Equations, constraints, `when` events, the Lagrangian or Hamiltonian."""

    def _equation(self, stmt: A.EquationStmt, bind, out) -> None:
        ev = self._ev(bind)
        lhs, rhs = ev.number(stmt.lhs), ev.number(stmt.rhs)
        for a, b in _pairs(lhs, rhs, stmt.span):
            out["equations"].append(M.Equation(lhs=a, rhs=b, span=stmt.span))

    def _constraint(self, stmt: A.ConstraintStmt, bind, out) -> None:
        ev = self._ev(bind)
        lhs, rhs = ev.number(stmt.lhs), ev.number(stmt.rhs)
        for a, b in _pairs(lhs, rhs, stmt.span):
            residual = a - b
            out["constraints"].append(M.Constraint(residual=residual, kind=classify_constraint(residual, stmt.span), span=stmt.span))

    def _when(self, stmt: A.WhenStmt, bind, out) -> None:
        from .events import resolve_when

        out["events"].append(resolve_when(stmt, self._ev(bind)))

    def _single(self, stmt, out, single) -> None:
        key = "lagrangian" if isinstance(stmt, A.LagrangianStmt) else "hamiltonian"
        if stmt.loops:
            raise PdslError.at("BadLoop", f"`{key}` cannot have a `for` clause; use sum(... for i in 1..N)", stmt.loops[0].span)
        if single[key] is not None:
            raise PdslError.at("DuplicateDefinition", f"the model has two `{key}` statements (first at line {single[key].span.line})", stmt.span, f"add the terms into one `{key}`")
        expr = self._ev().scalar(stmt.expr, f"the {key}")
        single[key] = M.Located(expr=expr, span=stmt.span)
