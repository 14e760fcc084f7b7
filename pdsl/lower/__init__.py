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
    from . import cartesian, generalized, plain

    kind = formalism_of(model)
    if formulation not in FORMULATIONS:
        raise PdslError.at("BadOption", f"--formulation {formulation}: unknown", hint="one of: " + ", ".join(FORMULATIONS))
    if kind == "cartesian":
        return cartesian.lower_cartesian(model, formulation)
    if kind == "lagrangian":
        return generalized.lower_lagrangian(model)
    if kind == "hamiltonian":
        return generalized.lower_hamiltonian(model)
    if kind == "plain":
        return plain.lower_plain(model)
    raise PdslError.at(
        "NotYetSupported",
        "models with port-Hamiltonian elements (flow_store, junction, ...) parse and resolve, "
        "but their lowering is not implemented yet",
        model.elements[0].span,
        "`pdsl check` validates such a model; `show` and `simulate` need the lowering",
    )
