"""Formalisms as plugins: each one says which statements it lowers and how.

A formalism module registers a :class:`Formalism` at import (``register(Formalism(...))`` at its
end). The composer (:func:`pdsl.lower.lower`, reached through :func:`pdsl.pipeline.compile_model`)
imports only this registry: it asks which registered formalisms claim a model and hands the model
to the one that lowers it. Nothing downstream of lowering knows formalisms by name; what a
formalism wants later stages to know travels in the IR (:class:`~pdsl.lower.ir.SymbolicSystem`:
power terms, display style, stabilisation parameters).

Until composition lands (LANGUAGE.md §9/§10) a model is lowered by exactly one formalism: the
claiming one with the highest ``precedence`` (p-H elements, then bodies, then a Lagrangian, then a
Hamiltonian, then plain equations), which reports statements it does not use as
``MixedFormalism``.
"""

from __future__ import annotations

import importlib
from typing import Callable

from ..diagnostics import PdslError
from ..records import record
from ..resolve.model import Model
from ..vocab import FORMULATIONS as _FORMULATIONS
from ..vocab import STABILIZE_LOWER
from .ir import SymbolicSystem

__all__ = ["LowerOptions", "Formalism", "register", "formalisms", "formalism_for", "FORMULATIONS", "STABILIZATIONS"]

FORMULATIONS = _FORMULATIONS  # pdsl.vocab
STABILIZATIONS = STABILIZE_LOWER  # pdsl.vocab: what lowering builds into the rows (not "project")

# the formalisms that ship with pdsl; each module registers itself when imported
_BUILTIN = ("pdsl.lower.composite", "pdsl.lower.port_hamiltonian", "pdsl.lower.cartesian", "pdsl.lower.hamel", "pdsl.lower.generalized", "pdsl.lower.plain")


@record(kw_only=False)
class LowerOptions:
    """What a lowering may be asked for, checked once here."""

    formulation: str = "hamiltonian"  # Cartesian mechanics: Eq. 6 (momenta) or Eq. 7 (velocities)
    stabilize: str = "none"  # "baumgarte": drift control built into the constraint rows

    def __post_init__(self):
        if self.formulation not in FORMULATIONS:
            raise PdslError.at("BadOption", f"--formulation {self.formulation}: unknown", hint="one of: " + ", ".join(FORMULATIONS))
        if self.stabilize not in STABILIZATIONS:
            raise PdslError.at("BadOption", f"stabilize={self.stabilize!r}: unknown", hint="one of: " + ", ".join(STABILIZATIONS))


@record(kw_only=False)
class Formalism:
    """A formalism plugin."""

    name: str  # shown by `pdsl check`, recorded in SymbolicSystem.formalism
    precedence: int  # which claiming formalism lowers a model (highest first)
    claims: Callable[[Model], bool]  # does the model hold statements of this formalism?
    lower: Callable[[Model, LowerOptions], SymbolicSystem]
    stabilizations: tuple[str, ...] = ("none",)  # the `stabilize` values its lowering builds in
    describe: str = ""  # one line for `pdsl check`'s listing and the docs


_REGISTRY: dict[str, Formalism] = {}
_loaded = False


def register(formalism: Formalism) -> Formalism:
    """Add (or replace, by name) a formalism; returns it, so a module can keep a handle."""
    _REGISTRY[formalism.name] = formalism
    return formalism


def formalisms() -> tuple[Formalism, ...]:
    """Every registered formalism, highest precedence first (the built-in ones are imported on first use)."""
    global _loaded
    if not _loaded:
        _loaded = True
        for module in _BUILTIN:
            importlib.import_module(module)
    return tuple(sorted(_REGISTRY.values(), key=lambda f: -f.precedence))


def formalism_for(model: Model) -> Formalism:
    """The formalism that lowers ``model``; plain equations when nothing else claims it."""
    for f in formalisms():
        if f.claims(model):
            return f
    raise PdslError.at("NotYetSupported", f"no formalism lowers model {model.name}", model.span)
