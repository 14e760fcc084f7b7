"""The symbolic IR every formalism lowers to: :class:`SymbolicSystem`.

Dynamics are kept in *linear-implicit* form, never inverted symbolically::

    A(x, t) · w = b(x, z, t),      w = (ẋ, λ)         (``differential`` rows)
    0 = g(x, z, t)                                     (``algebraic`` rows)

``x`` are the differential states, ``λ`` Lagrange multipliers that are
eliminated numerically by a linear solve, ``z`` algebraic variables left to a
DAE solver. An explicit ODE is the special case A = I. Each row is an
:class:`Equation` that remembers the model line it came from.
"""

from __future__ import annotations

from typing import Callable

import sympy as sp

from ..diagnostics import Span
from ..records import record
from ..resolve.model import DrawnLine, DrawnPoint, Input, Neural, Output, Param


@record
class State:
    """A differential state; ``rate`` is the unknown standing for its time derivative."""

    name: str
    symbol: sp.Symbol
    rate: sp.Symbol
    start: float | None
    span: Span


@record
class Algebraic:
    name: str
    symbol: sp.Symbol
    start: float | None
    span: Span


@record
class Equation:
    """``lhs = rhs``; for a differential row, lhs is linear in the rates and multipliers."""

    lhs: sp.Expr
    rhs: sp.Expr
    origin: Span
    label: str = ""


@record
class Constraint:
    """A holonomic constraint Φ(x) = 0 kept for drift monitoring and projection."""

    residual: sp.Expr
    origin: Span
    label: str = ""


@record
class Port:
    """A power port of the lowered system: effort and flow in terms of states, inputs and parameters.

    ``effort·flow`` is the power the port's element takes in; ``sign`` is the element's sign in its
    junction. Filled by formalisms whose elements exchange power at ports (p-H networks); read by
    ``simulate --power`` (CSV columns), ``show --power`` and the sparsity regulariser of ``fit``."""

    name: str
    role: str  # store | resistive | source | twoport | bond | interface | terminal
    sign: int
    effort: sp.Expr
    flow: sp.Expr
    span: Span
    domain: str = ""  # "thermal": effort is the temperature, flow the heat flow (not a power pair)
    owner: str = ""  # a terminal: the component (instance) written in equations that owns the port

    @property
    def power(self) -> sp.Expr:
        """What the element takes in, in W: effort·flow, or for a thermal port the heat flow itself (the first law
        counts Q̇, never T·Q̇; LANGUAGE.md "Port domains")."""
        return self.flow if self.domain == "thermal" else self.effort * self.flow


@record
class PowerTerm:
    """One term of the power balance dE/dt = Σ supplied − Σ dissipated (supplied > 0, dissipated < 0)."""

    role: str  # source | resistive | terminal (taken in by a component written in equations)
    name: str
    power: sp.Expr
    span: Span
    kind: str = "power"  # "heat": a heat flow of the thermal part (dU/dt = Σ Q̇ in), never added to the power


@record
class ComponentPorts:
    """A component with a thermal port and ports of another domain (a heating resistor): its first law
    Σ P_in = Σ Q̇_out + dE/dt (LANGUAGE.md "Port domains"), in the states, inputs and parameters."""

    name: str  # the instance ("" for the model itself)
    power_in: sp.Expr  # Σ across·through over its non-thermal ports (power into it)
    heat_out: sp.Expr  # Σ heat flow out of it over its thermal ports
    energy: sp.Expr | None  # what its stores hold (thermal stores: U); None where it has states of plain equations
    span: Span


@record
class BodySummary:
    """What ``show`` lists for a body of a multibody part (the formalism fills it; show only prints)."""

    name: str
    kind: str  # "point mass" or "rigid, dim 2"
    mass: sp.Expr
    moments: tuple[sp.Expr, ...]
    nodes: tuple[str, ...]
    node_mass_matrix: sp.Matrix | None  # Eq. 9, rigid bodies
    coordinates: int  # Cartesian coordinates of its nodes
    span: Span
    positions: tuple[tuple[sp.Symbol, ...], ...] = ()  # per node, its coordinate symbols (pictures of the mechanism)


@record
class Segment:
    """A connector as a picture draws it: from point ``a`` to point ``b`` (expressions of the states)."""

    kind: str  # link | joint | hinge | spring | damper (a label for the picture)
    a: sp.ImmutableMatrix
    b: sp.ImmutableMatrix
    fixed: bool  # one end on the ground


@record
class DerivationItem:
    """One derived quantity a formalism shows (``label = value``): an expression or a matrix."""

    label: str
    value: sp.Basic

    @classmethod
    def of(cls, label: str, value) -> "DerivationItem":
        return cls(label=label, value=value)


@record
class DerivationSection:
    """A titled list of derived quantities for ``show`` (a Hamel reduction's connection, frame, momenta, …).
    Display only: nothing numeric reads it."""

    title: str
    items: tuple[DerivationItem, ...]
    note: str = ""

    @classmethod
    def of(cls, title: str, items, note: str = "") -> "DerivationSection":
        return cls(title=title, items=tuple(items), note=note)


@record
class Balance:
    """A relation ``d/dt quantity = rate`` that every solution satisfies (both sides expressions of the states and
    parameters): ``simulate`` reports its residual along the trajectory, fit losses may use it."""

    name: str
    quantity: sp.Expr
    rate: sp.Expr
    origin: Span
    label: str = ""


@record
class EventReset:
    """``reinit(target, value)``: ``target`` names a state, a shown column (``b.vx``) or a body's rate (``der(b.x)``);
    ``quantity`` is what it names, as an expression of the states; ``value`` reads the values just before the
    event."""

    target: str
    value: sp.Expr
    span: Span
    quantity: sp.Expr | None = None


@record
class Event:
    """A state event (LANGUAGE.md §11): fires when ``condition`` (a Boolean of comparisons of the states, parameters,
    inputs and t) goes from false to true along the solution; then the resets apply, or the run ends."""

    condition: sp.Basic
    resets: tuple[EventReset, ...]
    terminate: bool
    span: Span
    text: str

    @property
    def label(self) -> str:
        return f"when {self.text} (line {self.span.line})"


def readoff_linear(system: "SymbolicSystem"):
    """(A, b) of the differential rows read off their terms: each term of a side is a product holding one unknown
    (its coefficient goes to A) or none (to b). None when a row does not have that form (a product of unknowns, an
    unknown inside a nested sum): the caller differentiates instead."""
    w = system.unknowns
    index = {u: i for i, u in enumerate(w)}
    unknowns = set(w)
    A = sp.zeros(len(system.differential), len(w))
    b = sp.zeros(len(system.differential), 1)
    for r, eq in enumerate(system.differential):
        known = []
        for sign, side in ((1, eq.lhs), (-1, eq.rhs)):
            for term in sp.Add.make_args(side):
                factors = sp.Mul.make_args(term)
                hits = [k for k, f in enumerate(factors) if f in index]
                if len(hits) > 1:
                    return None
                rest = sp.Mul(*(f for k, f in enumerate(factors) if not hits or k != hits[0]))
                if rest.free_symbols & unknowns:
                    return None
                if hits:
                    A[r, index[factors[hits[0]]]] += sign * rest
                else:
                    known.append(-sign * term)
        b[r] = sp.Add(*known)
    return A, b


def closed_input_laws(inputs) -> dict[sp.Symbol, sp.Expr]:
    """``{input: law}`` of the inputs with an in-model law, substituted into each other until no law refers to
    another input (the lowering has already rejected cycles)."""
    laws = {u.symbol: u.law for u in inputs if u.law is not None}
    for _ in range(len(laws) + 1):
        new = {k: v.xreplace(laws) for k, v in laws.items()}
        if new == laws:
            break
        laws = new
    return laws


@record
class SymbolicSystem:
    name: str
    doc: str | None
    path: str
    formalism: str  # plain | lagrangian | hamiltonian | ...
    states: tuple[State, ...]
    algebraics: tuple[Algebraic, ...]
    multipliers: tuple[sp.Symbol, ...]
    params: tuple[Param, ...]
    inputs: tuple[Input, ...]
    outputs: tuple[Output, ...]
    neural: tuple[Neural, ...]
    differential: tuple[Equation, ...]
    algebraic: tuple[Equation, ...]
    energy: sp.Expr | None
    energy_origin: Span | None
    constraints: tuple[Constraint, ...]
    span: Span
    # zero on the constraint manifold: Φ, and Φ̇ or velocity constraints (for projection)
    invariants: tuple[Constraint, ...] = ()
    # what a trajectory CSV shows, as (name, expression of the states); empty: the states
    report: tuple[tuple[str, sp.Expr], ...] = ()
    # directions (columns of nx expressions) along which start values are moved onto the invariants;
    # empty: minimum-norm (Euclidean) projection. Port-Hamiltonian index reduction sets them to the
    # junctions' redistribution (charge/momentum conserving), see lower.port_hamiltonian._redistribution
    projection: tuple[tuple[sp.Expr, ...], ...] = ()
    # power ports (effort, flow) and the terms of the power balance, where the formalism has them
    ports: tuple[Port, ...] = ()
    power_terms: tuple[PowerTerm, ...] = ()
    # the internal energy U of the thermal stores (relative to their start), a part of ``energy``: their p-H energy
    # only gives the temperature (T = ∂H/∂x) and is not counted; None without thermal stores
    heat_energy: sp.Expr | None = None
    components: tuple[ComponentPorts, ...] = ()  # components with thermal and other power ports (first-law checks)
    # what a power port's values (``p.T`` reads the symbol ``p.e``) and the eliminated variables of equations are in
    # the states, inputs and parameters: events (conditions, resets) read them through this map
    port_values: tuple[tuple[sp.Symbol, sp.Expr], ...] = ()
    # how `show` tidies expressions: "simplify" (budgeted sympy simplify) or "expand-rational"
    # (networks: rational expressions expanded, which simplify would find slowly)
    display: str = "simplify"
    constraints_title: str = "Holonomic constraints (monitored)"
    bodies: tuple[BodySummary, ...] = ()
    segments: tuple[Segment, ...] = ()  # the connectors of the multibody part, for pictures
    space: int = 0  # spatial dimension of the multibody part (0: none)
    # parameters a stabilisation adds (Baumgarte gains), set by the simulator, not the model
    stabilization: str = "none"
    stabilization_params: tuple[str, ...] = ()
    # (name, unit text) of the quantities with a unit (pdsl.resolve.units); empty for a model without units
    units: tuple[tuple[str, str], ...] = ()
    # derived quantities `show` prints after the equations (display only), and relations d/dt q = r to check
    derivation: tuple[DerivationSection, ...] = ()
    balances: tuple[Balance, ...] = ()
    # state events (`when`), and the states of the kinetic part (velocities or momenta) whose reset is an impulse
    # through the velocity constraints: the formalism names them (empty: a reset sets the state, nothing else)
    events: tuple[Event, ...] = ()
    kinetic: tuple[str, ...] = ()
    # rows built as sums of (coefficient × one unknown) and known terms (Cartesian mechanics, composites): A and b
    # are read off the terms (readoff_linear) instead of differentiating each row by each unknown (a composite
    # slider-crank with 77 unknowns: 12–16 s -> 0.02 s, the same A and b)
    readoff: bool = False
    # dE/dt ≡ 0 by the formalism's construction (Noether: an autonomous Lagrangian or Hamiltonian, nothing else acting;
    # pdsl.lower.generalized.conserves_energy): ``power`` is the constant 0 and ∫ power dt is 0, never integrated
    conservative: bool = False
    # the model's picture (`draw point`, `draw line`; LANGUAGE.md §13), expressions of the states: read by animations,
    # snapshots and structure plots only (pdsl.sim.drawing), beside the bodies and segments that draw themselves
    drawn_points: tuple[DrawnPoint, ...] = ()
    drawn_lines: tuple[DrawnLine, ...] = ()

    def unit_of(self, name: str) -> str | None:
        return dict(self.units).get(name) if self.units else None

    # ------------------------------------------------------------ views
    @property
    def unknowns(self) -> tuple[sp.Symbol, ...]:
        """w = (ẋ, λ): the unknowns of the linear-implicit differential rows."""
        return tuple(s.rate for s in self.states) + self.multipliers

    @property
    def exogenous_inputs(self) -> tuple[Input, ...]:
        return tuple(u for u in self.inputs if u.law is None)

    @property
    def is_dae(self) -> bool:
        return bool(self.algebraics)

    def state_names(self) -> list[str]:
        return [s.name for s in self.states]

    def report_columns(self) -> tuple[tuple[str, sp.Expr], ...]:
        return self.report or tuple((s.name, s.symbol) for s in self.states)

    def linear_system(self) -> tuple[sp.Matrix, sp.Matrix]:
        """(A, b) with A·w = b, read off the differential rows (which are linear in w)."""
        from .calculus import derivative  # residual.jacobian(w), the same entries without sympy's Derivative

        if self.readoff:
            fast = readoff_linear(self)
            if fast is not None:
                return fast
        w = self.unknowns
        residual = sp.Matrix([e.lhs - e.rhs for e in self.differential])
        A = sp.Matrix(len(residual), len(w), lambda i, j: derivative(residual[i], w[j]))
        b = -residual.xreplace({s: sp.Integer(0) for s in w})  # w are symbols: xreplace is subs without its search
        return A, b

    def is_explicit(self) -> bool:
        """True when every differential row reads ``der(x_i) = f_i`` (A is the identity)."""
        if self.multipliers:
            return False
        rates = [s.rate for s in self.states]
        return all(e.lhs == r for e, r in zip(self.differential, rates)) and all(
            not (e.rhs.free_symbols & set(rates)) for e in self.differential
        )

    def input_laws(self) -> dict[sp.Symbol, sp.Expr]:
        """In-model feedback laws, resolved so that no law refers to another input."""
        return closed_input_laws(self.inputs)

    # ------------------------------------------------------------ notebooks
    def _repr_markdown_(self) -> str | None:
        """Jupyter shows a system as its derived equations (``pdsl show --format markdown``)."""
        return _NOTEBOOK_RENDERER(self, "markdown") if _NOTEBOOK_RENDERER else None

    def _repr_latex_(self) -> str | None:
        return _NOTEBOOK_RENDERER(self, "latex") if _NOTEBOOK_RENDERER else None


# How a notebook renders a system. The IR does not import its display (pdsl.show depends on the IR, never the
# reverse): pdsl.show registers its renderer here when it is imported, as a formalism registers in
# pdsl.lower.registry. Until then a system has no rich form (None: Jupyter shows the plain repr); pdsl.api, which
# hands systems to notebooks, imports pdsl.show.
_NOTEBOOK_RENDERER: Callable[[SymbolicSystem, str], str] | None = None


def set_notebook_renderer(render: Callable[[SymbolicSystem, str], str]) -> None:
    """Register ``render(system, fmt)`` (``fmt``: ``"markdown"`` or ``"latex"``) for a system's notebook display."""
    global _NOTEBOOK_RENDERER
    _NOTEBOOK_RENDERER = render
