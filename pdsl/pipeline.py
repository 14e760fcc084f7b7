"""The pipeline as a table of contents: parse -> resolve -> lower -> to_casadi."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Mapping

from .diagnostics import PdslError
from .lower import lower
from .lower.ir import SymbolicSystem
from .parse.parser import parse_file, parse_text
from .resolve.model import Model
from .resolve.resolver import resolve_file

if TYPE_CHECKING:  # casadi is imported only by the stages that need it (`check` does not)
    from .backend.functions import NumericSystem

__all__ = ["load_models", "select_model", "compile_model", "Compiled"]


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
    numeric: "NumericSystem"


def compile_model(
    source: str | Path,
    model: str | None = None,
    *,
    text: str | None = None,
    consts: Mapping[str, int] | None = None,
    formulation: str = "hamiltonian",
    seed: int = 0,
) -> Compiled:
    m = select_model(load_models(source, text=text, consts=consts), model, str(source))
    from .backend.functions import to_casadi

    system = lower(m, formulation)
    return Compiled(model=m, system=system, numeric=to_casadi(system, seed=seed))
