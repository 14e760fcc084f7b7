"""The resolved model: names bound, constants substituted, arrays and loops expanded.

Every expression here is already a sympy expression over :mod:`pdsl.symbols`
symbols. Every record keeps the span of the statement it came from.
"""

from __future__ import annotations

from dataclasses import field
from typing import ClassVar, Mapping

import sympy as sp

from ..diagnostics import Span
from ..records import record


@record
class Param:
    name: str
    symbol: sp.Symbol
    default: float
    lower: float | None
    upper: float | None
    free: bool
    span: Span


@record
class Input:
    name: str
    symbol: sp.Symbol
    law: sp.Expr | None  # in-model feedback law, or None for an exogenous signal
    span: Span


@record
class Output:
    name: str
    expr: sp.Expr
    span: Span


@record
class Variable:
    name: str
    kind: str  # var | coord | momentum
    symbol: sp.Symbol
    start: float | None
    span: Span


@record
class Neural:
    """A neural component: an opaque function ``fn(k, *inputs)`` for output k (0-based)."""

    name: str
    arch: str
    hidden: tuple[int, ...]
    act: str  # the activation of every hidden layer, or a display text "[sin, sin, elu]" when they differ
    n_out: int
    n_in: int | None
    fn: object  # sympy UndefinedFunction
    span: Span
    acts: tuple[str, ...] = ()  # per layer, the output layer last; empty: `act` on hidden layers, linear output
    dropout: float = 0.0  # training only (pdsl fit, torch backend): dropout rate after every hidden layer
    init: str = "uniform"  # initial weights: one of WEIGHT_INITS (drawn by pdsl.backend.neural.init_weights)

    def layer_acts(self) -> tuple[str, ...]:
        """One activation name per layer (len(hidden) + 1), the output layer's last ("identity": linear)."""
        return self.acts or (*([self.act] * len(self.hidden)), "identity")


# How a network's initial weights are drawn (`mlp(init = …)`); every layer's bias is U(−1/√fan_in, 1/√fan_in):
#   uniform     torch.nn.Linear's default, W ~ U(−1/√fan_in, 1/√fan_in)
#   orthogonal  torch.nn.init.orthogonal_ (gain 1): W has orthonormal rows or columns, as the CHNN authors' networks
WEIGHT_INITS = ("uniform", "orthogonal")


def network_derivative(e: sp.Derivative):
    """``(call, k, positions)`` of a first derivative of a network output, ``d/da fn(k, ..., a, ...)``: the call,
    the output index and the input positions where the variable appears (its gradient is their sum). Every
    backend reads network derivatives through this one function."""
    from ..diagnostics import InternalError, PdslError

    f = e.expr
    if not isinstance(f, sp.core.function.AppliedUndef):
        raise InternalError("derivative of a non-network expression reached the backend")
    variables = [v for v, n in e.variable_count for _ in range(n)]
    if len(variables) != 1:
        raise PdslError.at("NotYetSupported", "second derivatives of neural components are not supported yet")
    return f, int(f.args[0]), tuple(i for i, a in enumerate(f.args[1:]) if a == variables[0])


@record
class Equation:
    lhs: sp.Expr
    rhs: sp.Expr
    span: Span


@record
class Constraint:
    residual: sp.Expr  # lhs - rhs
    kind: str  # holonomic | velocity
    span: Span


@record
class Reinit:
    """``reinit(target, value)`` of a ``when``: ``target`` as the model names it (``v``, ``der(q)``, ``b.vx``); its value
    reads the values just before the event."""

    target: str
    value: sp.Expr
    span: Span


@record
class Event:
    """``when CONDITION then ACTION, ...`` (LANGUAGE.md §11): fires when ``condition`` (a sympy Boolean of
    comparisons) goes from false to true along the solution."""

    condition: sp.Basic
    resets: tuple[Reinit, ...]
    terminate: bool
    span: Span
    text: str  # the condition as written, for reports (`h < 0`)


@record
class Group:
    """``group SE2(phi, x, y)``: a Lie group acting on some coordinates (pdsl.groups has the library)."""

    kind: str  # a key of pdsl.groups.GROUPS
    coords: tuple[sp.Symbol, ...]
    span: Span


@record
class Located:
    expr: sp.Expr
    span: Span


@record
class Body:
    """A body in Cartesian coordinates. ``nodes[0]`` is the centre; rigid bodies add axis points."""

    name: str
    kind: str  # point | rigid
    dim: int  # 0 for a point mass
    mass: sp.Expr
    moments: tuple[sp.Expr, ...]  # eigenvalues of the mass covariance (lambda_i), rigid only
    nodes: tuple[tuple[sp.Symbol, ...], ...]  # per node, its coordinates
    node_names: tuple[str, ...]
    span: Span


@record
class PointRef:
    """A point a connector attaches to: a body node/body-fixed point, or a fixed world point."""

    body: str | None  # None for ground
    local: tuple[sp.Expr, ...] | None  # body-fixed coordinates (``body.at``), None for the centre
    position: sp.ImmutableMatrix
    text: str
    span: Span


@record
class Connector:
    """``link A, B, length = l`` / ``joint`` / ``hinge …, axis = u`` / ``spring …, k, rest`` / ``damper …, c``: the
    options a connector kind takes are typed fields (None where not given)."""

    kind: str  # link | joint | hinge | slider | spring | damper
    a: PointRef
    b: PointRef
    span: Span
    length: sp.Expr | None = None  # link (None: the distance at the start)
    axis: sp.ImmutableMatrix | None = None  # hinge
    k: sp.Expr | None = None  # spring
    rest: sp.Expr | None = None  # spring (None: 0)
    c: sp.Expr | None = None  # damper
    name: str | None = None  # a named joint or hinge


@record
class Gravity:
    g: sp.Expr
    direction: sp.ImmutableMatrix
    span: Span


@record
class Force:
    force: sp.ImmutableMatrix
    at: PointRef
    span: Span


@record
class GeneralizedForce:
    """``force Q on q``: a non-conservative generalized force on coordinate ``q``."""

    coord: sp.Symbol
    force: sp.Expr
    span: Span


def port_forces(across: sp.Expr, through: sp.Expr, span: Span) -> list[GeneralizedForce]:
    """A through value F on a kinematic port y = J(x)·ẋ (``across``, linear in der(...)): the generalized force
    JᵀF on each coordinate, whose power F·y is exactly what the port delivers."""
    from .. import symbols as S

    out = []
    for d in sorted((x for x in across.free_symbols if S.is_der(x)), key=lambda s: s.name):
        out.append(GeneralizedForce(coord=S.der_base(d), force=sp.diff(across, d) * through, span=span))
    return out


# ---- port-Hamiltonian elements: one typed record per statement kind (LANGUAGE.md §6). Port variables are the
# symbols ``NAME.e`` / ``NAME.f`` (two-ports: ``NAME.PORT.e``); ``kind`` names the record for listings only.
@record
class Store:
    """``flow_store`` (ẋ = f, e = ∂H/∂x) or ``effort_store`` (ẋ = e, f = ∂H/∂x)."""

    kind: ClassVar[str] = "store"
    name: str
    integrates: str  # flow | effort
    state: sp.Symbol
    energy: sp.Expr
    span: Span


@record
class Resistive:
    """An algebraic relation R(e, f) = 0 (``{dissipative}``: f = e·g² by construction)."""

    kind: ClassVar[str] = "resistive"
    name: str
    relation: sp.Expr
    e: sp.Symbol
    f: sp.Symbol
    dissipative: bool
    span: Span


@record
class Source:
    """A source imposing its flow or effort; ``open_port``: a power port left open, whose causality the lowering
    picks (pdsl.compose); ``interface``: the p-H side of a kinematic-port interface (LANGUAGE.md §10)."""

    kind: ClassVar[str] = "source"
    name: str
    imposes: str  # flow | effort
    value: sp.Expr
    span: Span
    open_port: bool = False
    interface: bool = False
    domain: str = ""  # the domain of an open port (``thermal``: the source supplies heat, not power)


@record
class TwoPort:
    """A transformer ``e_a = n·e_b`` or gyrator ``e_a = r·f_b`` (a, b: the declared port names)."""

    kind: ClassVar[str] = "twoport"
    name: str
    form: str  # transformer | gyrator
    ports: tuple[str, str]
    relation: sp.Expr
    e_a: sp.Symbol
    f_a: sp.Symbol
    e_b: sp.Symbol
    f_b: sp.Symbol
    span: Span


@record
class Junction:
    """A 0-junction (``common_effort``) or 1-junction (``common_flow``); ``members`` are (sign, port, span);
    ``aliases`` are the other ports of a `connect` node (each bonds to this junction)."""

    kind: ClassVar[str] = "junction"
    name: str | None
    form: str  # common_effort | common_flow
    members: tuple[tuple[int, str, Span], ...]
    span: Span
    aliases: tuple[str, ...] = ()
    domain: str = ""  # a node of connected ports: their domain


@record
class Structure:
    """The input-state-output form ``structure J = …, R = …, B = …``: each matrix with the span of its value."""

    kind: ClassVar[str] = "structure"
    J: tuple[sp.MatrixBase, Span]
    R: tuple[sp.MatrixBase, Span] | None
    B: tuple[sp.MatrixBase, Span] | None
    span: Span
    name: None = None


@record
class Terminal:
    """A power port of a component written in equations (``p.v - n.v = R*p.i``): a one-port with no relation of its
    own, bonded to the port; the model's equations fix its effort and flow (LANGUAGE.md §9)."""

    kind: ClassVar[str] = "terminal"
    name: str
    domain: str
    owner: str  # the instance that declares the port ("" for the top model)
    span: Span


Element = Store | Resistive | Source | TwoPort | Junction | Structure | Terminal


@record
class PowerPort:
    """A power port's values (LANGUAGE.md §9): ``p.across`` and ``p.through`` (through = into the port's model) in
    the symbols of the port's bond; ``terminal``: a component written in equations fixes them."""

    name: str
    domain: str
    across: sp.Symbol
    through: sp.Expr
    owner: str
    terminal: bool
    span: Span


@record
class Interface:
    """A kinematic port of the mechanics connected to a power port of a p-H part (LANGUAGE.md §10).

    The p-H port is a source element named ``port`` whose value is ``placeholder``; the lowering decides its
    causality: it imposes the across value (``placeholder`` := the velocity ``across``) where the network accepts
    it, else it imposes the through value, which becomes an interface multiplier with the tie as invariant."""

    port: str
    kinematic: str
    across: sp.Expr  # linear in der(...) of the mechanics
    across_is: str  # effort | flow: which variable of the p-H port is the across value
    placeholder: sp.Symbol
    span: Span


@record
class KinematicTie:
    """Two kinematic ports connected: y_a = y_b, through values λ and −λ (a multiplier of the assembled system)."""

    a: str
    b: str
    across_a: sp.Expr
    across_b: sp.Expr
    span: Span


@record
class DrawnPoint:
    """``draw point NAME = [x, y(, z)]`` (LANGUAGE.md §13): a point of the picture, an expression of the states,
    parameters, inputs and t."""

    name: str
    position: sp.ImmutableMatrix  # 2 or 3 rows
    span: Span


@record
class DrawnLine:
    """``draw line A, B(, C …)``: a line through points (drawn points, body points, ground), each with its label."""

    points: tuple[tuple[str, sp.ImmutableMatrix], ...]
    span: Span


@record
class Model:
    name: str
    doc: str | None
    path: str
    span: Span
    consts: Mapping[str, int]
    space: int
    params: tuple[Param, ...] = ()
    inputs: tuple[Input, ...] = ()
    outputs: tuple[Output, ...] = ()
    variables: tuple[Variable, ...] = ()
    neural: tuple[Neural, ...] = ()
    equations: tuple[Equation, ...] = ()
    constraints: tuple[Constraint, ...] = ()
    lagrangian: Located | None = None
    hamiltonian: Located | None = None
    bodies: tuple[Body, ...] = ()
    connectors: tuple[Connector, ...] = ()
    gravity: tuple[Gravity, ...] = ()
    potentials: tuple[Located, ...] = ()
    forces: tuple[Force, ...] = ()
    generalized_forces: tuple[GeneralizedForce, ...] = ()
    elements: tuple[Element, ...] = ()
    interfaces: tuple[Interface, ...] = ()
    ties: tuple[KinematicTie, ...] = ()
    groups: tuple[Group, ...] = ()
    events: tuple[Event, ...] = ()
    power_ports: tuple[PowerPort, ...] = ()
    unsupported: tuple[tuple[str, Span], ...] = field(default=())
    # the picture (`draw point`, `draw line`): read by animations and snapshots only, never by the equations
    drawn_points: tuple[DrawnPoint, ...] = ()
    drawn_lines: tuple[DrawnLine, ...] = ()
    # (name, unit text) of the quantities with a unit (declared `{unit = "..."}`, or derived): pdsl.resolve.units
    units: tuple[tuple[str, str], ...] = ()

    def variables_of(self, kind: str) -> tuple[Variable, ...]:
        return tuple(v for v in self.variables if v.kind == kind)
