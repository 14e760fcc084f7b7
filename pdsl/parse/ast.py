"""The abstract syntax tree of a ``.phm`` file: frozen dataclasses, one span each.

This module is the readable specification of every node the parser produces.
Expressions are :class:`Expr` subclasses; statements are :class:`Stmt`
subclasses. Nothing downstream of the parser ever sees a lark ``Tree``.
"""

from __future__ import annotations

from ..diagnostics import Span
from ..records import record


# ---------------------------------------------------------------- expressions
@record
class Expr:
    span: Span


@record
class Num(Expr):
    value: float
    text: str


@record
class Name(Expr):
    id: str


@record
class Neg(Expr):
    operand: Expr


@record
class BinOp(Expr):
    op: str  # one of + - * / ^
    left: Expr
    right: Expr


@record
class KwArg:
    span: Span
    name: str
    value: Expr


@record
class Call(Expr):
    func: Expr  # a Name, or an Attr for methods such as ``body.at(...)``
    args: tuple[Expr, ...]
    kwargs: tuple[KwArg, ...]


@record
class Generator(Expr):
    """``sum(body for var in lo..hi)``."""

    func: Expr
    body: Expr
    var: str
    lo: Expr
    hi: Expr


@record
class MemberLoop(Expr):
    """``cap[i] for i in 1..N`` in a junction's member list: the member repeated over a range."""

    body: Expr
    var: str
    lo: Expr
    hi: Expr


@record
class Index(Expr):
    base: Expr
    indices: tuple[Expr, ...]


@record
class Attr(Expr):
    base: Expr
    name: str


@record
class Vector(Expr):
    items: tuple[Expr, ...]


@record
class IfExpr(Expr):
    """``if cond then a else b``."""

    cond: Expr
    then: Expr
    orelse: Expr


@record
class Compare(Expr):
    op: str  # one of < <= > >= == !=
    left: Expr
    right: Expr


@record
class BoolOp(Expr):
    op: str  # and | or
    left: Expr
    right: Expr


@record
class Not(Expr):
    operand: Expr


@record
class Text(Expr):
    """A string literal; only an attribute value (``{unit = "kg"}``), never a number."""

    value: str


# ---------------------------------------------------------------- statements
@record
class Range:
    span: Span
    lo: Expr
    hi: Expr


@record
class Loop:
    span: Span
    var: str
    lo: Expr
    hi: Expr


@record
class Attribute:
    """``{free, lower = 0}``: a flag (value None) or a keyed value."""

    span: Span
    name: str
    value: Expr | None


@record
class Decl:
    span: Span
    name: str
    range: Range | None
    value: Expr | None
    attrs: tuple[Attribute, ...]


@record
class Stmt:
    span: Span
    loops: tuple[Loop, ...] = ()


@record
class DeclStmt(Stmt):
    kind: str  # const | param | input | output | var | coord | momentum
    decls: tuple[Decl, ...]


@record
class SpaceStmt(Stmt):
    dim: Expr


@record
class NNStmt(Stmt):
    name: str
    name_span: Span
    arch: str
    args: tuple[Expr, ...]
    kwargs: tuple[KwArg, ...]


@record
class BodyStmt(Stmt):
    name: str
    name_span: Span
    range: Range | None
    kind: str
    kind_span: Span
    args: tuple[Expr, ...]
    kwargs: tuple[KwArg, ...]


@record
class ConnectorStmt(Stmt):
    kind: str  # link | joint | hinge | slider | spring | damper
    args: tuple[Expr, ...]
    kwargs: tuple[KwArg, ...]
    name: str | None = None  # ``joint pivot: A, B``: a named joint (``pivot.angle``, ``pivot.rate``)
    name_span: Span | None = None


@record
class GravityStmt(Stmt):
    g: Expr
    along: Expr | None


@record
class PotentialStmt(Stmt):
    expr: Expr


@record
class ForceStmt(Stmt):
    force: Expr
    target: Expr


@record
class LagrangianStmt(Stmt):
    expr: Expr


@record
class HamiltonianStmt(Stmt):
    expr: Expr


@record
class ConstraintStmt(Stmt):
    lhs: Expr
    rhs: Expr


@record
class EquationStmt(Stmt):
    lhs: Expr
    rhs: Expr


@record
class WhenStmt(Stmt):
    """``when CONDITION then ACTION, ...`` (LANGUAGE.md §11): the actions are calls (``reinit(x, e)``) or the name
    ``terminate``, checked by the resolver."""

    condition: Expr
    actions: tuple[Expr, ...]


@record
class DrawPointStmt(Stmt):
    """``draw point NAME = [x, y(, z)]`` (LANGUAGE.md §13): a point of the model's picture, an expression of the
    state; ``draw point p[i] = … for i in 1..N`` declares the entries of an array of points."""

    name: str
    name_span: Span
    position: Expr
    index: tuple[Expr, ...] = ()


@record
class DrawLineStmt(Stmt):
    """``draw line A, B(, C …)``: a line (a polyline through more points) between drawn points, body points,
    ``ground`` or literal positions ``[x, y]``; nothing but the picture reads it."""

    points: tuple[Expr, ...]
    kwargs: tuple[KwArg, ...] = ()


@record
class DistributionStmt(Stmt):
    name: str
    arch: str
    args: tuple[Expr, ...]
    kwargs: tuple[KwArg, ...]


@record
class ConstraintLearnStmt(Stmt):
    """``constraint learn a: mlp(...) on der(x), der(y) given der(theta)``: der(x_k) = Σ_j a_kj(q) der(g_j)."""

    name: str
    name_span: Span
    arch: str
    args: tuple[Expr, ...]
    kwargs: tuple[KwArg, ...]
    on: tuple[Expr, ...]
    given: tuple[Expr, ...]


@record
class GroupStmt(Stmt):
    name: str
    coords: tuple[str, ...]


@record
class StoreStmt(Stmt):
    kind: str  # flow_store | effort_store
    name: str
    state: str
    energy: Expr
    index: tuple[Expr, ...] = ()  # ``cap[i](q[i])``: the index of the element's name ...
    state_index: tuple[Expr, ...] = ()  # ... and of its state's name
    name_span: Span | None = None
    state_span: Span | None = None


@record
class ResistiveStmt(Stmt):
    name: str
    attrs: tuple[Attribute, ...]
    lhs: Expr
    rhs: Expr
    index: tuple[Expr, ...] = ()
    name_span: Span | None = None


@record
class SourceStmt(Stmt):
    kind: str  # flow_source | effort_source
    name: str
    value: Expr
    index: tuple[Expr, ...] = ()
    name_span: Span | None = None
    open_port: bool = False  # made by pdsl.compose for a power port left open: the lowering picks its causality
    domain: str = ""  # made by pdsl.compose (open port): the port's domain (``thermal`` ports carry heat, not power)


@record
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


@record
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
    domain: str = ""  # the domain of the connected ports (a node made by `connect`)


@record
class StructureStmt(Stmt):
    args: tuple[Expr, ...]
    kwargs: tuple[KwArg, ...]


@record
class ImportStmt(Stmt):
    path: str
    alias: str | None = None  # ``import "x.phm" as lib``: its models are ``lib.Name``


@record
class PortDecl:
    """``pivot`` (a point port), ``p: electrical`` (a power port), ``axle: rotational = pivot.rate``
    (a kinematic port: its across value is a velocity of the model's mechanics)."""

    span: Span
    name: str
    domain: str | None
    domain_span: Span | None
    across: Expr | None
    attrs: tuple[Attribute, ...] = ()  # ``{unit = "rad/s"}``: the unit of the across value


@record
class PortStmt(Stmt):
    ports: tuple[PortDecl, ...]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.ports)


@record
class UseStmt(Stmt):
    name: str
    range: Range | None
    model: str  # ``Link`` or ``lib.Link``
    args: tuple[Expr, ...]
    kwargs: tuple[KwArg, ...]
    name_span: Span | None = None
    model_span: Span | None = None


@record
class ConnectStmt(Stmt):
    members: tuple[Expr, ...]


@record
class AnalogyStmt(Stmt):
    """``analogy force = flow`` (mobility) or ``force = effort`` (the default, bond-graph)."""

    quantity: str
    variable: str


@record
class KinematicPortStmt(Stmt):
    """Made by :mod:`pdsl.compose` from ``port axle: rotational = pivot.rate``: a velocity of the mechanics whose
    conjugate (the through value) enters the mechanics as a generalized force (``force … on axle``)."""

    name: str
    domain: str
    across: Expr
    unit: Text | None = None  # the declared unit of the velocity, checked by pdsl.resolve.units


@record
class InterfaceStmt(Stmt):
    """Made by :mod:`pdsl.compose` from ``connect`` of a kinematic port and a power port of a p-H part: the p-H
    port ``port`` (a member of its junction) meets the velocity ``across``; ``across_is`` says which of the p-H
    port's variables is the across value (``flow`` for mechanical ports under the default analogy)."""

    port: str
    kinematic: str
    domain: str
    across: Expr
    across_is: str  # effort | flow


@record
class PowerPortStmt(Stmt):
    """Made by :mod:`pdsl.compose` for every power port (``port p: thermal``): how its values ``p.across``,
    ``p.through`` and the domain's aliases (``p.T``, ``p.Q_flow``) read the port's bond variables ``p.e``, ``p.f``.
    ``sign`` is the port's sign in its model's junction (−1 for ``-p``: the bond's power flows into the model);
    ``owner`` is the instance that declares it (``heater`` for ``heater.heat``; "" for the top model)."""

    name: str
    domain: str
    across_is_effort: bool
    sign: int
    owner: str


@record
class TerminalStmt(Stmt):
    """Made by :mod:`pdsl.compose` for a power port that no junction of its model lists (a component written in
    equations, ``p.v - n.v = R*p.i``): a one-port with no relation of its own, bonded to the port, whose effort and
    flow the model's equations fix."""

    name: str
    domain: str
    owner: str


@record
class KinematicTieStmt(Stmt):
    """Made by :mod:`pdsl.compose` from ``connect`` of two kinematic ports: their velocities are equal and their
    through values sum to zero (a rigid tie between two velocities of the mechanics)."""

    a: str
    b: str


# ---------------------------------------------------------------- file level
@record
class ModelDef:
    span: Span
    name: str
    name_span: Span
    doc: str | None
    body: tuple[Stmt, ...]


@record
class File:
    path: str
    imports: tuple[ImportStmt, ...]
    models: tuple[ModelDef, ...]
