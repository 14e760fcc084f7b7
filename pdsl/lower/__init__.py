"""Model -> SymbolicSystem. One lowering per formalism, all producing the same IR."""

from __future__ import annotations

from ..diagnostics import PdslError
from ..resolve.model import Model
from .ir import Algebraic, Constraint, Equation, State, SymbolicSystem
from dataclasses import replace

from .common import FORMULATIONS, derived_invariants, velocity_report

__all__ = ["lower", "formalism_of", "SymbolicSystem", "State", "Algebraic", "Equation", "Constraint", "FORMULATIONS"]


def formalism_of(model: Model) -> str:
    """Which lowering applies, judged from the statements present."""
    if model.elements:
        return "port-hamiltonian"
    if model.bodies:
        return "cartesian"
    if model.lagrangian is not None:
        return "lagrangian"
    if model.hamiltonian is not None:
        return "hamiltonian"
    return "plain"


def lower(model: Model, formulation: str = "hamiltonian", *, stabilize: str = "none") -> SymbolicSystem:
    """Lower a resolved model. ``formulation`` chooses Eq. 6 / Eq. 7 for Cartesian mechanics;
    ``stabilize="baumgarte"`` builds Baumgarte drift control into its constraint rows."""
    from . import cartesian, generalized, plain

    kind = formalism_of(model)
    if formulation not in FORMULATIONS:
        raise PdslError.at("BadOption", f"--formulation {formulation}: unknown", hint="one of: " + ", ".join(FORMULATIONS))
    if stabilize != "none" and kind != "cartesian":
        raise PdslError.at("BadOption", f"--stabilize {stabilize} applies to Cartesian models (bodies with explicit "
                           f"constraints); {model.name} is a {kind} model", model.span,
                           "use --stabilize project, which works for every model with constraints")
    if kind == "cartesian":
        system = cartesian.lower_cartesian(model, formulation, stabilize=stabilize)
        positions = {c for body in model.bodies for node in body.nodes for c in node}
        report = velocity_report(system, positions) if formulation == "hamiltonian" else ()
        return replace(system, invariants=derived_invariants(system, positions), report=report)
    if kind == "lagrangian":
        system = generalized.lower_lagrangian(model)
        velocity = tuple(
            Constraint(residual=c.residual, origin=c.span, label="velocity constraint")
            for c in model.constraints if c.kind == "velocity"
        )
        positions = {c.symbol for c in model.variables_of("coord")}
        return replace(system, invariants=derived_invariants(system, positions, velocity))
    if kind == "hamiltonian":
        return generalized.lower_hamiltonian(model)
    if kind == "plain":
        return plain.lower_plain(model)
    from .port_hamiltonian import lower_port_hamiltonian

    return lower_port_hamiltonian(model)
