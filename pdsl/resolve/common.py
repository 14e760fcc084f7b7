"""What the resolver's domains share: the record of a declared name, the tables of options and kinds,
and the checks and helpers more than one domain calls (pdsl.resolve.resolver and its domain modules)."""

from __future__ import annotations

import itertools
import sys
from dataclasses import dataclass
from typing import Mapping

import sympy as sp

from .. import symbols as S
from ..diagnostics import PdslError, Span
from ..parse import ast as A
from ..vocab import ACTIVATIONS
from .expressions import Unusable


MAX_ARRAY = 100_000
_ACTIVATIONS = ACTIVATIONS  # pdsl.vocab: the one list of activations
_PH_KINDS = ("flow_store", "effort_store", "resistive", "flow_source", "effort_source", "transformer", "gyrator")


# Keyword options of each connector: name -> required?
_CONNECTOR_OPTIONS: Mapping[str, Mapping[str, bool]] = {
    "link": {"length": False},
    "joint": {},
    "hinge": {"axis": True},
    "slider": {"axis": True},
    "spring": {"k": True, "rest": False},
    "damper": {"c": True},
}


@dataclass
class _Decl:
    kind: str
    span: Span
    value: object  # what the name denotes in expressions


_MOMENT_HINTS = {
    "moments": "moments are the eigenvalues of the body's mass covariance: positive numbers",
    "inertia": "principal moments of inertia obey the triangle inequality: I1 < I2 + I3, I2 < I1 + I3, I3 < I1 + I2",
}


def _check_option_sign(kind: str, kw: A.KwArg, value: sp.Expr) -> None:
    """A numeric link length must be positive, a rest length, stiffness or damping not negative."""
    if not value.is_number:
        return
    if kw.name == "length" and value.is_extended_positive is False:
        raise PdslError.at(
            "BadArgument", f"a link length must be positive, but it is {value}", kw.value.span, "for coincident points use `joint A, B`"
        )
    if kw.name in ("rest", "k", "c") and value.is_extended_negative:
        raise PdslError.at("BadArgument", f"`{kw.name}` of a {kind} must not be negative, but it is {value}", kw.value.span)


def _shape_text(v: sp.MatrixBase) -> str:
    return f"{v.shape[0]}x{v.shape[1]}"


def _check_constant(value: sp.Expr, params: Mapping, what: str, span: Span) -> None:
    """Masses and moments are constants of the model: numbers and parameters, not t, states or inputs."""
    others = sorted(str(x) for x in value.free_symbols if x not in params)
    if others:
        names = ", ".join(f"`{n}`" for n in others)
        raise PdslError.at(
            "NotAllowedHere", f"{what} must be constant in time, but it depends on {names}", span, "use numbers and `param`s only"
        )


def _check_positive(value: sp.Expr, defaults: Mapping, what: str, span: Span, hint: str | None = None) -> None:
    """A mass or moment that is a number (possibly after default parameter values) must be > 0."""
    v = value.xreplace(defaults)
    if v.is_number and v.is_extended_positive is False:
        at_defaults = " with the default parameter values" if value.free_symbols else ""
        raise PdslError.at("BadArgument", f"{what} must be positive, but it is {sp.nsimplify(v)}{at_defaults}", span, hint)
    if v.is_number and v.is_extended_positive:
        f = float(v)  # 0.0 below the doubles, inf above: M⁻¹ = 1/m would not be finite
        if not sys.float_info.min <= f <= sys.float_info.max:
            at_defaults = " with the default parameter values" if value.free_symbols else ""
            raise PdslError.at("BadArgument", f"{what} is {sp.Float(v, 4)}{at_defaults}, outside the range of normal "
                               "floating-point numbers (about 2.2e-308 to 1.8e308)", span,
                               "choose units in which masses and moments are moderate numbers")


def _element_kind(stmt) -> str:
    return "resistive" if isinstance(stmt, A.ResistiveStmt) else stmt.kind


_NOT_YET_SUPPORTED_NAMES = {
    A.ImportStmt: "`import`",
    A.PortStmt: "`port`",
    A.UseStmt: "`use` (model instances)",
    A.ConnectStmt: "`connect`",
}


_NOT_YET_SUPPORTED = tuple(_NOT_YET_SUPPORTED_NAMES)
_DRAW = A.DrawPointStmt | A.DrawLineStmt  # resolved after everything else (pdsl.resolve.drawing)


class _PendingOutput:
    """Placeholder bound to an output's name until its value is known."""

    def __init__(self, name: str):
        self.name = name


def classify_constraint(residual: sp.Expr, span: Span) -> str:
    """holonomic (no der), velocity (affine in der(...)), or an error explaining why not."""
    ders = sorted((s for s in residual.free_symbols if S.is_der(s)), key=lambda s: s.name)
    if not ders:
        return "holonomic"
    for a, b in itertools.combinations_with_replacement(ders, 2):
        if sp.simplify(sp.diff(residual, a, b)) != 0:
            raise PdslError.at(
                "BadConstraint",
                f"this constraint is not linear in the velocities (it is nonlinear in `{a}`"
                + (f" and `{b}`" if a != b else "") + ")",
                span,
                "constraints are holonomic Φ(q) = 0 or linear velocity constraints a(q)·der(q) = 0",
            )
    affine = residual.xreplace({d: sp.Integer(0) for d in ders})  # ders are symbols: subs without its search
    if sp.simplify(affine) != 0:
        raise PdslError.at(
            "BadConstraint",
            "this velocity constraint has a term without any der(...): it is affine, not linear, in the velocities",
            span,
            "write it as a(q)·der(q) = 0 (a rheonomic constraint is not supported)",
        )
    return "velocity"


def _pairs(lhs, rhs, span: Span):
    lv, rv = isinstance(lhs, sp.MatrixBase), isinstance(rhs, sp.MatrixBase)
    if lv and rv:
        if lhs.shape != rhs.shape:
            raise PdslError.at("TypeMismatch", f"the two sides have shapes {lhs.shape} and {rhs.shape}", span)
        return list(zip(lhs, rhs))
    if lv or rv:
        if (lv and rhs == 0) or (rv and lhs == 0):
            return [(a, sp.Integer(0)) for a in (lhs if lv else rhs)]
        raise PdslError.at("TypeMismatch", "one side is an array and the other a scalar", span)
    return [(lhs, rhs)]


class _ConstView(Mapping):
    """The consts as sympy integers, read through (not copied)."""

    def __init__(self, consts: Mapping[str, int]):
        self._consts = consts

    def __getitem__(self, name: str):
        return sp.Integer(self._consts[name])

    def __contains__(self, name) -> bool:
        return name in self._consts

    def __iter__(self):
        return iter(self._consts)

    def __len__(self) -> int:
        return len(self._consts)


class _NotConstantView(Mapping):
    """Why each declared name (and t, ground) is unusable where only constants are allowed; made on lookup."""

    _SPECIAL = {"t": "the time", "ground": "the fixed frame"}

    def __init__(self, declared: Mapping[str, str]):
        self._declared = declared

    def __getitem__(self, name: str) -> Unusable:
        if name in self._SPECIAL:
            return _not_constant(name, self._SPECIAL[name])
        return _not_constant(name, self._declared[name])

    def __contains__(self, name) -> bool:
        return name in self._SPECIAL or name in self._declared

    def __iter__(self):
        yield from self._SPECIAL
        yield from (n for n in self._declared if n not in self._SPECIAL)

    def __len__(self) -> int:
        return len(self._SPECIAL) + sum(1 for n in self._declared if n not in self._SPECIAL)


def _not_constant(name: str, kind: str) -> Unusable:
    """Why ``name`` cannot appear in an array bound, loop bound, const or default value."""
    article = "" if kind.startswith("the ") else ("an " if kind[0] in "aeio" else "a ")
    return Unusable(
        "NotConstant",
        f"`{name}` is {article}{kind}, but array bounds, loop bounds, consts and default values "
        "must be numbers known when the model is compiled",
        f"declare it `const {name} = ...` (a `param` is a run-time value)" if kind == "param" else "use numbers and `const`s only",
    )
