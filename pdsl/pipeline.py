"""The pipeline as a table of contents: parse -> resolve -> lower -> to_casadi.

:func:`compile_model` with a frozen :class:`CompileOptions` is the one composer: the CLI
commands, ``fit``, ``evaluate``, ``show`` and the tests reach the lowered system through it.
The lowering it calls asks the formalism registry (:mod:`pdsl.lower.registry`) which plugin
lowers the model; nothing here knows a formalism by name.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Mapping

from .diagnostics import PdslError
from .lower import lower
from .lower.ir import SymbolicSystem
from .lower.registry import LowerOptions
from .parse.parser import parse_file, parse_text
from .resolve.model import Model
from .resolve.resolver import resolve_file

if TYPE_CHECKING:  # casadi is imported only by the stages that need it (`check` does not)
    from .backend.functions import NumericSystem

__all__ = ["CompileOptions", "load_models", "select_model", "compile_model", "Compiled"]


@dataclass(frozen=True)
class CompileOptions:
    """Everything that decides what :func:`compile_model` builds (hashable: a cache key part).

    ``consts`` overrides structural consts (``--const N=5``); ``formulation`` and ``stabilize``
    go to the lowering; ``seed`` initialises network weights; ``numeric=False`` stops after the
    symbolic system (``show``, ``check``: no CasADi)."""

    model: str | None = None
    consts: tuple[tuple[str, int], ...] = ()
    formulation: str = "hamiltonian"
    stabilize: str = "none"
    seed: int = 0
    numeric: bool = True
    lowering: LowerOptions = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        consts = self.consts.items() if isinstance(self.consts, Mapping) else self.consts
        object.__setattr__(self, "consts", tuple(sorted((str(k), int(v)) for k, v in consts)))
        object.__setattr__(self, "lowering", LowerOptions(self.formulation, self.stabilize))

    @property
    def const_map(self) -> dict[str, int]:
        return dict(self.consts)


def load_models(source: str | Path, *, text: str | None = None, consts: Mapping[str, int] | None = None) -> tuple[Model, ...]:
    """Parse and resolve every model of a file (or of ``text``, named ``source``)."""
    ast = parse_text(text, str(source)) if text is not None else parse_file(source)
    return resolve_file(ast, consts)


def select_model(models: tuple[Model, ...], name: str | None, path: str = "") -> Model:
    if not models:
        raise PdslError.at("EmptyFile", f"{path} defines no model", hint="a file holds `model Name ... end` blocks")
    if name is None:
        if len(models) > 1:
            names = ", ".join(m.name for m in models)
            raise PdslError.at("AmbiguousModel", f"{path} defines several models ({names})", hint="choose one with --model NAME")
        return models[0]
    for m in models:
        if m.name == name:
            return m
    names = ", ".join(m.name for m in models)
    raise PdslError.at("UnknownModel", f"no model `{name}` in {path}", hint=f"models in this file: {names}")


@dataclass(frozen=True)
class Compiled:
    model: Model
    system: SymbolicSystem
    numeric: "NumericSystem | None"
    options: CompileOptions = CompileOptions()


def compile_model(
    source: str | Path,
    options: CompileOptions | str | None = None,
    *,
    text: str | None = None,
    consts: Mapping[str, int] | None = None,
    formulation: str | None = None,
    seed: int | None = None,
) -> Compiled:
    """Parse, resolve, lower and (unless ``options.numeric`` is false) translate to CasADi.

    ``options`` is a :class:`CompileOptions`; for brevity a model name, or the keyword arguments
    ``consts``/``formulation``/``seed``, build one (they may not be mixed with an options object)."""
    if not isinstance(options, CompileOptions):
        options = CompileOptions(model=options, consts=consts or (), formulation=formulation or "hamiltonian",
                                 seed=seed or 0)
    elif consts is not None or formulation is not None or seed is not None:
        raise TypeError("compile_model: give either a CompileOptions or keyword options, not both")
    m = select_model(load_models(source, text=text, consts=options.const_map), options.model, str(source))
    system = lower(m, options.lowering)
    numeric = None
    if options.numeric:
        from .backend.functions import to_casadi

        numeric = to_casadi(system, seed=options.seed)
    return Compiled(model=m, system=system, numeric=numeric, options=options)
