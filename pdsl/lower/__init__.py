"""Model -> SymbolicSystem, through the formalism registry (:mod:`pdsl.lower.registry`).

Each formalism is a plugin that registers itself; :func:`lower` asks the registry which one
lowers a model and checks the options against what that plugin offers. This module imports no
formalism by name.
"""

from __future__ import annotations

from ..diagnostics import PdslError
from ..resolve.model import Model
from .ir import Algebraic, Constraint, Equation, State, SymbolicSystem
from .registry import FORMULATIONS, LowerOptions, formalism_for
from .structural import check_structure, reduce_index

__all__ = ["lower", "formalism_of", "LowerOptions", "SymbolicSystem", "State", "Algebraic", "Equation", "Constraint",
           "FORMULATIONS"]


def formalism_of(model: Model) -> str:
    """The name of the formalism that lowers ``model`` (as `pdsl check` lists it)."""
    return formalism_for(model).name


def lower(model: Model, options: LowerOptions | str = "hamiltonian", *, stabilize: str | None = None) -> SymbolicSystem:
    """Lower a resolved model with the formalism plugin that claims it.

    ``options`` is a :class:`LowerOptions`, or for brevity the formulation (Eq. 6 ``"hamiltonian"`` /
    Eq. 7 ``"lagrangian"`` for Cartesian mechanics) with ``stabilize`` (``"baumgarte"`` builds drift
    control into the constraint rows where the formalism offers it)."""
    if not isinstance(options, LowerOptions):
        options = LowerOptions(options, stabilize or "none")
    elif stabilize is not None:
        raise TypeError("lower: give either LowerOptions or formulation/stabilize, not both")
    plugin = formalism_for(model)
    if options.stabilize not in plugin.stabilizations:
        raise PdslError.at("BadOption", f"--stabilize {options.stabilize} applies to Cartesian models (bodies with explicit "
                           f"constraints); {model.name} is a {plugin.name} model", model.span,
                           "use --stabilize project, which works for every model with constraints")
    system = plugin.lower(model, options)
    if model.units:  # units of measure travel with the IR (show, CSV headers, plots)
        from dataclasses import replace

        system = replace(system, units=model.units)
    if model.drawn_points or model.drawn_lines:  # the picture travels with the IR (animations, snapshots)
        from dataclasses import replace

        system = replace(system, drawn_points=model.drawn_points, drawn_lines=model.drawn_lines)
    # the shared structural passes, on every system whichever formalism lowered it: index reduction of constraints
    # between states (`0 = g(x)`), then structural balance (rows matched to unknowns)
    system = reduce_index(system)
    check_structure(system)
    if model.events:
        from .events import attach_events

        system = attach_events(model, system)
    return system
