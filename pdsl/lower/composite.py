"""One model, several formalisms (LANGUAGE.md §10): lower each part with its own plugin, then assemble.

A model that holds more than one kind of part — bodies (Cartesian mechanics), generalized
coordinates (a Lagrangian or Hamiltonian), a port-Hamiltonian network, plain equations — is split
by statement kind into sub-models; each is lowered by the formalism plugin that claims it (the
registry chooses; nothing here names a formalism), and the contributions are merged into one
linear-implicit :class:`~pdsl.lower.ir.SymbolicSystem`: states, rows, multipliers, energy,
constraints and invariants side by side.

Parts share symbols: a plain equation may use a body coordinate, a force may use a p-H state.
A velocity ``der(x)`` of a mechanical coordinate used outside its part is replaced by the
velocity the mechanics lowered it to (``v`` or M⁻¹p): the row ``der(x) = v(state)`` of that part.

**Interfaces.** A kinematic port y = J(x)·ẋ connected to a p-H power port (``connect motor.shaft,
axle``) is a source of the network named after the port. Its causality is chosen here:

* where the network accepts the across value, the source imposes it (a flow source of the
  velocity under the default analogy); the port's other variable, an expression of the network's
  states, is the through value T, and the mechanics receives the generalized force −JᵀT;
* where a store fixes the port's across value (a rotor inertia on the shaft), the source imposes
  the through value instead: an **interface multiplier** λ, with the tie across(z) = y(x, ẋ) kept
  as an invariant (projected by ``simulate``) and its time derivative as the row that determines λ.

Either way the power λ·y that leaves one part enters the other: the interface ports are listed in
the system's ``ports`` (role ``interface``), and ``show --power`` / ``simulate --power`` show that
they cancel.
"""

from __future__ import annotations

from dataclasses import replace

import sympy as sp

from .. import symbols as S
from ..diagnostics import PdslError
from ..resolve.model import GeneralizedForce, Input, Model, Source, Structure
from ..resolve.model import port_forces as _port_forces
from .ir import Constraint, Equation, Port, SymbolicSystem
from .registry import Formalism, LowerOptions, formalism_for, register

__all__ = ["parts_of", "lower_composite", "COMPOSITE"]

_EMPTY = dict(
    equations=(), constraints=(), lagrangian=None, hamiltonian=None, bodies=(), connectors=(), gravity=(),
    potentials=(), forces=(), generalized_forces=(), elements=(), interfaces=(), ties=(), variables=(), outputs=(), groups=(),
)
_RETRY = {"DependentStorage", "UnbalancedSystem", "ConflictingSources", "AlgebraicSwitch"}


def _node_coordinates(model: Model) -> set:
    return {c for b in model.bodies for node in b.nodes for c in node}


def parts_of(model: Model) -> dict[str, Model]:
    """The model split by statement kind: ``bodies``, ``coordinates``, ``network``, ``equations``."""
    nodes = _node_coordinates(model)
    on_bodies, others = _split_constraints(model, nodes)
    generalized = model.lagrangian is not None or model.hamiltonian is not None
    parts: dict[str, Model] = {}
    if model.bodies:
        parts["bodies"] = replace(model, **{**_EMPTY, "bodies": model.bodies, "connectors": model.connectors,
                                            "gravity": model.gravity, "potentials": model.potentials, "forces": model.forces,
                                            "constraints": on_bodies + (() if generalized else others),
                                            "generalized_forces": tuple(g for g in model.generalized_forces if g.coord in nodes)})
    if generalized:
        parts["coordinates"] = replace(model, **{
            **_EMPTY, "lagrangian": model.lagrangian, "hamiltonian": model.hamiltonian,
            "constraints": others if model.bodies else model.constraints,
            "groups": model.groups,
            "variables": tuple(v for v in model.variables if v.kind in ("coord", "momentum")),
            "generalized_forces": tuple(g for g in model.generalized_forces if g.coord not in nodes)})
    plain_vars = tuple(v for v in model.variables if v.kind == "var")
    equations, variables = model.equations, plain_vars
    if model.elements:
        taken, taken_vars = _port_equations(model, plain_vars)
        parts["network"] = replace(model, **{**_EMPTY, "elements": model.elements, "equations": taken,
                                             "variables": taken_vars})
        equations = tuple(e for e in model.equations if e not in set(taken))
        variables = tuple(v for v in plain_vars if v not in set(taken_vars))
    if equations or (variables and "network" not in parts):
        parts["equations"] = replace(model, **{**_EMPTY, "equations": equations, "variables": variables})
    return parts


def _port_equations(model: Model, plain_vars: tuple) -> tuple[tuple, tuple]:
    """The plain equations that read power ports' values (``p.v - n.v = R*p.i``; LANGUAGE.md §9), with every
    equation that shares a variable with them, and those variables: they are solved with the network."""
    port_values = set()
    for p in model.power_ports:
        port_values |= p.across.free_symbols | p.through.free_symbols
    if not port_values or not model.equations:
        return (), ()
    var_of = {v.symbol: v for v in plain_vars}
    var_of.update({S.der(v.symbol): v for v in plain_vars})
    free = [e.lhs.free_symbols | e.rhs.free_symbols for e in model.equations]
    taken = {k for k, f in enumerate(free) if f & port_values}
    seen_vars: set = set()
    pending = list(taken)
    while pending:
        k = pending.pop()
        new = {var_of[x].symbol for x in free[k] if x in var_of} - seen_vars
        seen_vars |= new
        for j, f in enumerate(free):
            if j not in taken and any(var_of[x].symbol in new for x in f if x in var_of):
                taken.add(j)
                pending.append(j)
    return (tuple(e for k, e in enumerate(model.equations) if k in taken),
            tuple(v for v in plain_vars if v.symbol in seen_vars))


def _split_constraints(model: Model, nodes: set) -> tuple[tuple, tuple]:
    """`constraint`s on body coordinates (or their velocities) belong to the bodies (LANGUAGE.md §3), the others to
    the generalized coordinates; one that mixes the two is not lowered yet."""
    if not model.bodies:
        return (), model.constraints
    moving = nodes | {S.der(x) for x in nodes}
    generalized = {v.symbol for v in model.variables if v.kind in ("coord", "momentum")}
    generalized |= {S.der(x) for x in generalized}
    on_bodies, others = [], []
    for c in model.constraints:
        free = S.as_expr(c.residual).free_symbols
        if free & moving and free & generalized:
            raise PdslError.at("NotYetSupported", "a constraint between generalized coordinates (`coord`) and bodies",
                               c.span, "describe the whole mechanism with bodies (constraints on b.x, b.y, …), or tie "
                               "them through a kinematic port (LANGUAGE.md §10)")
        (on_bodies if free & moving else others).append(c)
    return tuple(on_bodies), tuple(others)


def _claims(model: Model) -> bool:
    if any(isinstance(e, Structure) for e in model.elements):
        return False  # the input-state-output form is one formalism (var + hamiltonian + structure)
    return bool(model.interfaces or model.ties) or len(parts_of(model)) > 1


def _lower_part(model: Model, options: LowerOptions) -> SymbolicSystem:
    plugin = formalism_for(model)
    stabilize = options.stabilize if options.stabilize in plugin.stabilizations else "none"
    return plugin.lower(model, LowerOptions(options.formulation, stabilize))


def _through(itf) -> sp.Symbol:
    """The interface multiplier: the through value a port imposes where a store fixes its across value."""
    return S.sym(f"{itf.port}.through")


def _with_interfaces(net: Model, model: Model, imposed: dict[str, str]) -> Model:
    """The network with each interface source imposing ``across`` or ``through`` (its value: the placeholder)."""
    by_port = {i.port: i for i in model.interfaces}
    elements = []
    for el in net.elements:
        itf = by_port.get(el.name) if isinstance(el, Source) and el.interface else None
        if itf is not None:
            if imposed[itf.port] == "across":
                var, value = itf.across_is, itf.placeholder
            else:
                var, value = ("effort" if itf.across_is == "flow" else "flow"), _through(itf)
            el = replace(el, imposes=var, value=value)
        elements.append(el)
    # an imposed across value is an input of the network: a store it would fix is then a located DependentStorage
    # (its derivative would be needed), which sends the interface to the multiplier form
    extra = tuple(Input(name=str(i.placeholder), symbol=i.placeholder, law=None, span=i.span)
                  for i in model.interfaces if imposed[i.port] == "across")
    return replace(net, elements=tuple(elements), inputs=net.inputs + extra)


def _lower_network(net: Model, model: Model, options: LowerOptions) -> tuple[SymbolicSystem, dict[str, str]]:
    """The network with every interface imposing its across value where it can, else its through value."""
    ports = [i.port for i in model.interfaces]
    tries = [{p: "across" for p in ports}]
    tries += [{p: ("through" if p == q else "across") for p in ports} for q in ports]
    if len(ports) > 1:
        tries.append({p: "through" for p in ports})
    first_error = None
    for imposed in tries:
        try:
            return _lower_part(_with_interfaces(net, model, imposed), options), imposed
        except PdslError as err:
            if not ports or not (set(err.codes) & _RETRY):
                raise
            first_error = first_error or err
    raise first_error


def _velocities(system: SymbolicSystem) -> dict:
    """der(x) -> the velocity of x in the part's state, read off its rows ``der(x) (+ multiplier terms) = v``."""
    out = {}
    rates = {s.rate: s for s in system.states}
    multipliers = set(system.multipliers)
    states = {s.symbol for s in system.states}
    for eq in system.differential:
        lhs = sp.expand(eq.lhs)
        present = [r for r in rates if lhs.has(r)]
        if len(present) != 1:
            continue
        r = present[0]
        coef = lhs.coeff(r)
        rest = lhs - coef * r
        if coef.free_symbols or sp.expand(rest.xreplace({m: 0 for m in multipliers})) != 0 or eq.rhs.free_symbols & set(rates):
            continue
        x = rates[r].symbol
        d = S.der(x)
        if d in states or d in out:
            continue
        out[d] = (eq.rhs.xreplace({m: 0 for m in multipliers}) / coef)
    return out


def lower_composite(model: Model, options: LowerOptions) -> SymbolicSystem:
    parts = parts_of(model)
    systems: dict[str, SymbolicSystem] = {}
    imposed: dict[str, str] = {}
    interface_rows: list[Equation] = []
    interface_ports: list[Port] = []
    ties: list[Constraint] = []
    lambdas: list[sp.Symbol] = []
    across_subst: dict = {}
    extra_forces: list[GeneralizedForce] = []
    if "network" in parts:
        systems["network"], imposed = _lower_network(parts["network"], model, options)
        ports = {p.name: p for p in systems["network"].ports}
        for itf in model.interfaces:
            pt = ports.get(itf.port)
            if pt is None:
                raise PdslError.at("NotYetSupported", f"the power of interface `{itf.port}` is not available (the network "
                                   "has an algebraic loop)", itf.span)
            across_ph = pt.flow if itf.across_is == "flow" else pt.effort
            other = pt.effort if itf.across_is == "flow" else pt.flow
            through_ph = -pt.sign * other  # through value into the network: power in = across · through
            if imposed[itf.port] == "across":
                across_subst[itf.placeholder] = itf.across
            else:
                lambdas.append(_through(itf))
            extra_forces += _port_forces(itf.across, -through_ph, itf.span)
            interface_ports.append((itf, across_ph, through_ph))
    for tie in model.ties:  # y_a = y_b with through values λ (into a's part) and −λ (into b's)
        lam = S.sym(f"{tie.a}.through")
        lambdas.append(lam)
        extra_forces += _port_forces(tie.across_a, lam, tie.span) + _port_forces(tie.across_b, -lam, tie.span)
    mech_parts = [k for k in ("bodies", "coordinates") if k in parts]
    if extra_forces:
        nodes = _node_coordinates(model)
        for g in extra_forces:
            key = "bodies" if g.coord in nodes else "coordinates"
            if key not in parts:
                raise PdslError.at("BadPort", f"the velocity of the kinematic port involves `{g.coord}`, which is not a "
                                   "mechanical coordinate", g.span)
            parts[key] = replace(parts[key], generalized_forces=parts[key].generalized_forces
                                 + (replace(g, force=g.force.xreplace(across_subst)),))
    for key in mech_parts + [k for k in ("equations",) if k in parts]:
        systems[key] = _lower_part(parts[key], options)
    velocity: dict = {}
    for key in mech_parts:
        velocity.update(_velocities(systems[key]))

    def to_state(e):
        return S.as_expr(e).xreplace(across_subst).xreplace(velocity)

    order = [k for k in ("bodies", "coordinates", "network", "equations") if k in systems]
    states = tuple(s for k in order for s in systems[k].states)
    multipliers = tuple(m for k in order for m in systems[k].multipliers) + tuple(lambdas)
    rows = []
    for k in order:
        sysk = systems[k]
        for eq in sysk.differential:
            rows.append(eq if k in mech_parts else replace(eq, lhs=to_state(eq.lhs), rhs=to_state(eq.rhs)))
    alg_rows = tuple(replace(eq, lhs=to_state(eq.lhs), rhs=to_state(eq.rhs)) for k in order for eq in systems[k].algebraic)
    rate_of = {s.symbol: s.rate for s in states}
    ports_out = []
    for itf, across_ph, through_ph in interface_ports:
        y = to_state(itf.across)
        across_ph, through_ph = to_state(across_ph), to_state(through_ph)
        if imposed[itf.port] == "through":
            g = across_ph - y
            if _through(itf) in g.free_symbols:
                interface_rows.append(Equation(lhs=g, rhs=sp.Integer(0), origin=itf.span,
                                               label=f"interface {itf.port} = {itf.kinematic}"))
            else:
                dg = sum((sp.diff(g, x) * rate_of[x] for x in g.free_symbols if x in rate_of), sp.Integer(0))
                if S.TIME in g.free_symbols:
                    dg += sp.diff(g, S.TIME)
                if dg == 0:
                    raise PdslError.at("UnbalancedSystem", f"the tie of `{itf.port}` to `{itf.kinematic}` involves no "
                                       "state: the interface force is not determined", itf.span)
                interface_rows.append(Equation(lhs=dg, rhs=sp.Integer(0), origin=itf.span,
                                               label=f"interface tie d/dt({itf.port} = {itf.kinematic}) = 0 (multiplier {_through(itf)})"))
                ties.append(Constraint(residual=g, origin=itf.span, label=f"interface tie {itf.port} = {itf.kinematic}"))
        # the port seen from each side: the network takes y·T, the mechanics −y·T
        ports_out.append(Port(name=itf.port, role="interface", sign=1, effort=through_ph, flow=y, span=itf.span))
        ports_out.append(Port(name=itf.kinematic, role="interface", sign=1, effort=-through_ph, flow=y, span=itf.span))
    for tie in model.ties:
        g = to_state(tie.across_a) - to_state(tie.across_b)
        dg = sum((sp.diff(g, x) * rate_of[x] for x in g.free_symbols if x in rate_of), sp.Integer(0))
        interface_rows.append(Equation(lhs=dg, rhs=sp.Integer(0), origin=tie.span,
                                       label=f"tie d/dt({tie.a} = {tie.b}) = 0 (multiplier {tie.a}.through)"))
        ties.append(Constraint(residual=g, origin=tie.span, label=f"tie {tie.a} = {tie.b}"))
    energies = [systems[k].energy for k in order if systems[k].energy is not None]
    heats = [systems[k].heat_energy for k in order if systems[k].heat_energy is not None]
    values = {k: v for k_ in order for k, v in systems[k_].port_values}  # port values (`p.T`), in the network's solution

    def closed(e):
        return to_state(e.xreplace(values) if values and e.free_symbols & values.keys() else e)

    outputs = tuple(replace(o, expr=closed(o.expr)) for o in model.outputs)
    inputs = tuple(replace(u, law=closed(u.law)) if u.law is not None and values else u for u in model.inputs)
    report = ()
    if any(systems[k].report for k in order):
        report = tuple(c for k in order for c in (systems[k].report or tuple((s.name, s.symbol) for s in systems[k].states)))
    mech = systems[mech_parts[0]] if mech_parts else None
    other_ports = tuple(replace(p, effort=to_state(p.effort), flow=to_state(p.flow))
                        for k in order for p in systems[k].ports if p.name not in {i.port for i in model.interfaces})
    power_terms = tuple(replace(t, power=to_state(t.power)) for k in order for t in systems[k].power_terms)
    params = model.params + tuple(p for k in order for p in systems[k].params if p not in model.params)
    return SymbolicSystem(
        readoff=True,  # rows of sums of coefficient × unknown (ir.readoff_linear), as the parts build them
        name=model.name, doc=model.doc, path=model.path,
        formalism="+".join(systems[k].formalism for k in order),
        states=states, algebraics=tuple(a for k in order for a in systems[k].algebraics), multipliers=multipliers,
        params=params, inputs=inputs, outputs=outputs,
        neural=model.neural, differential=tuple(rows) + tuple(interface_rows), algebraic=alg_rows,
        energy=sp.Add(*energies) if energies else None, energy_origin=model.span,
        constraints=tuple(c for k in order for c in systems[k].constraints) + tuple(ties), span=model.span,
        invariants=tuple(c for k in order for c in systems[k].invariants) + tuple(ties),
        report=report, ports=other_ports + tuple(ports_out), power_terms=power_terms,
        heat_energy=sp.Add(*heats) if heats else None,
        components=tuple(replace(c, power_in=to_state(c.power_in), heat_out=to_state(c.heat_out),
                                 energy=None if c.energy is None else to_state(c.energy))
                         for k in order for c in systems[k].components),
        port_values=tuple((k, to_state(v)) for k, v in values.items()),
        bodies=mech.bodies if mech is not None else (), segments=mech.segments if mech is not None else (),
        space=mech.space if mech is not None else 0,
        stabilization=mech.stabilization if mech is not None else "none",
        stabilization_params=mech.stabilization_params if mech is not None else (),
        constraints_title="Constraints (monitored)",
    )


COMPOSITE = register(Formalism(
    name="composite", precedence=100, claims=_claims, lower=lower_composite, stabilizations=("none", "baumgarte"),
    describe="several formalisms in one model, joined by shared symbols and power-conserving interfaces (LANGUAGE.md §10)",
))
