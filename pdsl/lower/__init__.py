"""Model -> SymbolicSystem. One lowering per formalism, all producing the same IR."""

from __future__ import annotations

from ..diagnostics import PdslError
from ..resolve.model import Model
from .ir import Algebraic, Constraint, Equation, State, SymbolicSystem
from .common import FORMULATIONS

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


def lower(model: Model, formulation: str = "hamiltonian") -> SymbolicSystem:
    """Lower a resolved model. ``formulation`` chooses Eq. 6 / Eq. 7 for Cartesian mechanics."""
    from . import generalized, plain

    kind = formalism_of(model)
    if kind == "lagrangian":
        return generalized.lower_lagrangian(model)
    if kind == "hamiltonian":
        return generalized.lower_hamiltonian(model)
    if kind == "plain":
        return plain.lower_plain(model)
    first = (model.elements[0].span if model.elements else model.bodies[0].span)
    what = {
        "port-hamiltonian": "port-Hamiltonian elements (flow_store, junction, ...)",
        "cartesian": "Cartesian bodies (body, link, joint, ...)",
    }[kind]
    raise PdslError.at(
        "NotYetSupported",
        f"models with {what} parse and resolve, but their lowering is not implemented yet",
        first,
        "`pdsl check` validates such a model; `show` and `simulate` need the lowering",
    )
