"""The abstract syntax tree of a ``.phm`` file: frozen dataclasses, one span each.

This module is the readable specification of every node the parser produces.
Expressions are :class:`Expr` subclasses; statements are :class:`Stmt`
subclasses. Nothing downstream of the parser ever sees a lark ``Tree``.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..diagnostics import Span

_FROZEN = dict(frozen=True, slots=True, kw_only=True)


# ---------------------------------------------------------------- expressions
@dataclass(**_FROZEN)
class Expr:
    span: Span


@dataclass(**_FROZEN)
class Num(Expr):
    value: float
    text: str


@dataclass(**_FROZEN)
class Name(Expr):
    id: str


@dataclass(**_FROZEN)
class Neg(Expr):
    operand: Expr


@dataclass(**_FROZEN)
class BinOp(Expr):
    op: str  # one of + - * / ^
    left: Expr
    right: Expr


@dataclass(**_FROZEN)
class KwArg:
    span: Span
    name: str
    value: Expr


@dataclass(**_FROZEN)
class Call(Expr):
    func: Expr  # a Name, or an Attr for methods such as ``body.at(...)``
    args: tuple[Expr, ...]
    kwargs: tuple[KwArg, ...]


@dataclass(**_FROZEN)
class Generator(Expr):
    """``sum(body for var in lo..hi)``."""

    func: Expr
    body: Expr
    var: str
    lo: Expr
    hi: Expr


@dataclass(**_FROZEN)
class MemberLoop(Expr):
    """``cap[i] for i in 1..N`` in a junction's member list: the member repeated over a range."""

    body: Expr
    var: str
    lo: Expr
    hi: Expr


@dataclass(**_FROZEN)
class Index(Expr):
    base: Expr
    indices: tuple[Expr, ...]


@dataclass(**_FROZEN)
class Attr(Expr):
    base: Expr
    name: str


@dataclass(**_FROZEN)
class Vector(Expr):
    items: tuple[Expr, ...]


@dataclass(**_FROZEN)
class IfExpr(Expr):
    """``if cond then a else b``."""

    cond: Expr
    then: Expr
    orelse: Expr


@dataclass(**_FROZEN)
class Compare(Expr):
    op: str  # one of < <= > >= == !=
    left: Expr
    right: Expr


@dataclass(**_FROZEN)
class BoolOp(Expr):
    op: str  # and | or
    left: Expr
    right: Expr


@dataclass(**_FROZEN)
class Not(Expr):
    operand: Expr


@dataclass(**_FROZEN)
class Text(Expr):
    """A string literal; only an attribute value (``{unit = "kg"}``), never a number."""

    value: str


# ---------------------------------------------------------------- statements
@dataclass(**_FROZEN)
class Range:
    span: Span
    lo: Expr
    hi: Expr


@dataclass(**_FROZEN)
class Loop:
    span: Span
    var: str
    lo: Expr
    hi: Expr


@dataclass(**_FROZEN)
class Attribute:
    """``{free, lower = 0}``: a flag (value None) or a keyed value."""

    span: Span
    name: str
    value: Expr | None


@dataclass(**_FROZEN)
class Decl:
    span: Span
    name: str
    range: Range | None
    value: Expr | None
    attrs: tuple[Attribute, ...]


@dataclass(**_FROZEN)
class Stmt:
    span: Span
    loops: tuple[Loop, ...] = ()


@dataclass(**_FROZEN)
class DeclStmt(Stmt):
    kind: str  # const | param | input | output | var | coord | momentum
    decls: tuple[Decl, ...]


@dataclass(**_FROZEN)
class SpaceStmt(Stmt):
    dim: Expr


@dataclass(**_FROZEN)
class NNStmt(Stmt):
    name: str
    name_span: Span
    arch: str
    args: tuple[Expr, ...]
    kwargs: tuple[KwArg, ...]


@dataclass(**_FROZEN)
class BodyStmt(Stmt):
    name: str
    name_span: Span
    range: Range | None
    kind: str
    kind_span: Span
    args: tuple[Expr, ...]
    kwargs: tuple[KwArg, ...]


@dataclass(**_FROZEN)
class ConnectorStmt(Stmt):
    kind: str  # link | joint | hinge | spring | damper
    args: tuple[Expr, ...]
    kwargs: tuple[KwArg, ...]
    name: str | None = None  # ``joint pivot: A, B``: a named joint (``pivot.angle``, ``pivot.rate``)
    name_span: Span | None = None


@dataclass(**_FROZEN)
class GravityStmt(Stmt):
    g: Expr
    along: Expr | None


@dataclass(**_FROZEN)
class PotentialStmt(Stmt):
    expr: Expr


@dataclass(**_FROZEN)
class ForceStmt(Stmt):
    force: Expr
    target: Expr


@dataclass(**_FROZEN)
class LagrangianStmt(Stmt):
    expr: Expr


@dataclass(**_FROZEN)
class HamiltonianStmt(Stmt):
    expr: Expr


@dataclass(**_FROZEN)
class ConstraintStmt(Stmt):
    lhs: Expr
    rhs: Expr


@dataclass(**_FROZEN)
class EquationStmt(Stmt):
    lhs: Expr
    rhs: Expr


@dataclass(**_FROZEN)
class DistributionStmt(Stmt):
    name: str
    arch: str
    args: tuple[Expr, ...]
    kwargs: tuple[KwArg, ...]


@dataclass(**_FROZEN)
class ConstraintLearnStmt(Stmt):
    """``constraint learn a: mlp(...) on der(x), der(y) given der(theta)``: der(x_k) = Σ_j a_kj(q) der(g_j)."""

    name: str
    name_span: Span
    arch: str
    args: tuple[Expr, ...]
    kwargs: tuple[KwArg, ...]
    on: tuple[Expr, ...]
    given: tuple[Expr, ...]


@dataclass(**_FROZEN)
class GroupStmt(Stmt):
    name: str
    coords: tuple[str, ...]


@dataclass(**_FROZEN)
class StoreStmt(Stmt):
    kind: str  # flow_store | effort_store
    name: str
    state: str
    energy: Expr
    index: tuple[Expr, ...] = ()  # ``cap[i](q[i])``: the index of the element's name ...
    state_index: tuple[Expr, ...] = ()  # ... and of its state's name
    name_span: Span | None = None
    state_span: Span | None = None


@dataclass(**_FROZEN)
class ResistiveStmt(Stmt):
    name: str
    attrs: tuple[Attribute, ...]
    lhs: Expr
    rhs: Expr
    index: tuple[Expr, ...] = ()
    name_span: Span | None = None


@dataclass(**_FROZEN)
class SourceStmt(Stmt):
    kind: str  # flow_source | effort_source
    name: str
    value: Expr
    index: tuple[Expr, ...] = ()
    name_span: Span | None = None
    open_port: bool = False  # made by pdsl.compose for a power port left open: the lowering picks its causality


@dataclass(**_FROZEN)
class TwoPortStmt(Stmt):
    kind: str  # transformer | gyrator
    name: str
    port_a: str
    port_b: str
    attrs: tuple[Attribute, ...]
    lhs: Expr
    rhs: Expr
    index: tuple[Expr, ...] = ()
    name_span: Span | None = None


@dataclass(**_FROZEN)
class JunctionStmt(Stmt):
    name: str | None
    kind: str
    kind_span: Span
    members: tuple[Expr, ...]  # names, ``tr.a``, ``cap[i]``, ``-x``, or a MemberLoop of these
    index: tuple[Expr, ...] = ()
    name_span: Span | None = None
    # made by `connect` (pdsl.compose): a node of power ports. Its bonds are the ports themselves, each listed
    # in its own model's junction: the junction's name is the first port, ``aliases`` are the others
    aliases: tuple[str, ...] = ()
    node: bool = False


@dataclass(**_FROZEN)
class StructureStmt(Stmt):
    args: tuple[Expr, ...]
    kwargs: tuple[KwArg, ...]


@dataclass(**_FROZEN)
class ImportStmt(Stmt):
    path: str
    alias: str | None = None  # ``import "x.phm" as lib``: its models are ``lib.Name``


@dataclass(**_FROZEN)
class PortDecl:
    """``pivot`` (a point port), ``p: electrical`` (a power port), ``axle: rotational = pivot.rate``
    (a kinematic port: its across value is a velocity of the model's mechanics)."""

    span: Span
    name: str
    domain: str | None
    domain_span: Span | None
    across: Expr | None
    attrs: tuple[Attribute, ...] = ()  # ``{unit = "rad/s"}``: the unit of the across value


@dataclass(**_FROZEN)
class PortStmt(Stmt):
    ports: tuple[PortDecl, ...]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.ports)


@dataclass(**_FROZEN)
class UseStmt(Stmt):
    name: str
    range: Range | None
    model: str  # ``Link`` or ``lib.Link``
    args: tuple[Expr, ...]
    kwargs: tuple[KwArg, ...]
    name_span: Span | None = None
    model_span: Span | None = None


@dataclass(**_FROZEN)
class ConnectStmt(Stmt):
    members: tuple[Expr, ...]


@dataclass(**_FROZEN)
class AnalogyStmt(Stmt):
    """``analogy force = flow`` (mobility) or ``force = effort`` (the default, bond-graph)."""

    quantity: str
    variable: str


@dataclass(**_FROZEN)
class KinematicPortStmt(Stmt):
    """Made by :mod:`pdsl.compose` from ``port axle: rotational = pivot.rate``: a velocity of the mechanics whose
    conjugate (the through value) enters the mechanics as a generalized force (``force … on axle``)."""

    name: str
    domain: str
    across: Expr
    unit: Text | None = None  # the declared unit of the velocity, checked by pdsl.resolve.units


@dataclass(**_FROZEN)
class InterfaceStmt(Stmt):
    """Made by :mod:`pdsl.compose` from ``connect`` of a kinematic port and a power port of a p-H part: the p-H
    port ``port`` (a member of its junction) meets the velocity ``across``; ``across_is`` says which of the p-H
    port's variables is the across value (``flow`` for mechanical ports under the default analogy)."""

    port: str
    kinematic: str
    domain: str
    across: Expr
    across_is: str  # effort | flow


@dataclass(**_FROZEN)
class KinematicTieStmt(Stmt):
    """Made by :mod:`pdsl.compose` from ``connect`` of two kinematic ports: their velocities are equal and their
    through values sum to zero (a rigid tie between two velocities of the mechanics)."""

    a: str
    b: str


# ---------------------------------------------------------------- file level
@dataclass(**_FROZEN)
class ModelDef:
    span: Span
    name: str
    name_span: Span
    doc: str | None
    body: tuple[Stmt, ...]


@dataclass(**_FROZEN)
class File:
    path: str
    imports: tuple[ImportStmt, ...]
    models: tuple[ModelDef, ...]
