"""The pipeline as a table of contents: parse -> compose -> resolve -> lower -> to_casadi.

:func:`compile_model` with a frozen :class:`CompileOptions` is the one composer: the CLI
commands, ``fit``, ``evaluate``, ``show`` and the tests reach the lowered system through it.
The lowering it calls asks the formalism registry (:mod:`pdsl.lower.registry`) which plugin
lowers the model; nothing here knows a formalism by name.
"""

from __future__ import annotations

from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Mapping

from .diagnostics import PdslError
from .records import record
from .vocab import FORMULATIONS, STABILIZE_LOWER

if TYPE_CHECKING:  # the stages are imported where they run: a cached compilation needs neither sympy nor lark
    from .backend.functions import NumericSystem
    from .cache import ModelCache
    from .lower.ir import SymbolicSystem
    from .lower.registry import LowerOptions
    from .resolve.model import Model

__all__ = ["CompileOptions", "load_models", "resolve_file", "select_model", "compile_model", "Compiled"]


_FORMULATIONS = FORMULATIONS  # pdsl.vocab (pdsl.lower.registry reads the same)
_STABILIZATIONS = STABILIZE_LOWER


@record(kw_only=False, slots=False)
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

    def __post_init__(self):
        consts = self.consts.items() if isinstance(self.consts, Mapping) else self.consts
        object.__setattr__(self, "consts", tuple(sorted((str(k), int(v)) for k, v in consts)))
        if self.formulation not in _FORMULATIONS or self.stabilize not in _STABILIZATIONS:
            self.lowering  # noqa: B018 - LowerOptions says what is wrong, as a located diagnostic

    def __getstate__(self):  # pickled (the model cache) without the derived LowerOptions (it imports sympy)
        state = dict(self.__dict__)
        state.pop("lowering", None)
        return state

    @cached_property
    def lowering(self) -> LowerOptions:
        from .lower.registry import LowerOptions

        return LowerOptions(self.formulation, self.stabilize)

    @property
    def const_map(self) -> dict[str, int]:
        return dict(self.consts)


def load_models(source: str | Path, *, text: str | None = None, consts: Mapping[str, int] | None = None) -> tuple[Model, ...]:
    """Parse, compose and resolve every model of a file (or of ``text``, named ``source``)."""
    from .compose import compose
    from .parse.parser import parse_file, parse_text
    from .resolve.resolver import resolve_models

    parsed = parse_text(text, str(source)) if text is not None else parse_file(source)  # text -> syntax tree
    flat = compose(parsed, consts)  # imports read, instances/ports/connections flattened
    return resolve_models(flat, consts)  # names bound: the Model records


def resolve_file(file, const_overrides: Mapping[str, int] | None = None) -> tuple[Model, ...]:
    """Compose, then resolve, every model of a parsed file (the two stages of :func:`load_models` after parsing)."""
    from .compose import compose
    from .resolve.resolver import resolve_models

    return resolve_models(compose(file, const_overrides), const_overrides)


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


@record(kw_only=False, slots=False)
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
    cache: ModelCache | bool | None = None,
) -> Compiled:
    """Parse, resolve, lower and (unless ``options.numeric`` is false) translate to CasADi.

    ``options`` is a :class:`CompileOptions`; for brevity a model name, or the keyword arguments
    ``consts``/``formulation``/``seed``, build one (they may not be mixed with an options object).

    ``cache``: a :class:`~pdsl.cache.ModelCache` to read and fill, ``False`` for none, ``None`` (default)
    for the active one (:func:`pdsl.cache.default_cache`: the CLI's, none in a plain library call). Only
    compilations of a file (not of ``text``) are cached; a numeric hit returns the model and the symbolic system as
    :class:`~pdsl.cache.Deferred` objects that unpickle their sympy parts on first use (a symbolic-only
    compilation, ``numeric=False``, gets them unpickled)."""
    if not isinstance(options, CompileOptions):
        options = CompileOptions(model=options, consts=consts or (), formulation=formulation or "hamiltonian",
                                 seed=seed or 0)
    elif consts is not None or formulation is not None or seed is not None:
        raise TypeError("compile_model: give either a CompileOptions or keyword options, not both")
    from . import cache as C

    store = C.default_cache() if cache is None or cache is True else (cache or None)
    if cache is True and store is None:
        store = C.ModelCache()
    key = None
    if store is not None and text is None:
        from .limits import read_text

        try:
            main_text = read_text(source)
        except (OSError, UnicodeDecodeError, PdslError):
            main_text = None  # parse_file reports it, located
        if main_text is not None:
            key = store.key(source, main_text, options)
            hit = store.load(key)
            if hit is not None:
                if not options.numeric:  # show, check, fit work on the symbolic system itself: unpickle it now
                    hit = Compiled(model=C.unwrap(hit.model), system=C.unwrap(hit.system), numeric=None, options=options)
                return hit
    with C.record_sources() as sources:
        compiled = _compile(source, options, text)
    if key is not None:
        store.store(key, _deferred(compiled), sources)
    return compiled


def _compile(source, options: CompileOptions, text: str | None) -> Compiled:
    from .lower import lower

    m = select_model(load_models(source, text=text, consts=options.const_map), options.model, str(source))
    system = lower(m, options.lowering)
    numeric = None
    if options.numeric:
        from .backend.functions import to_casadi

        numeric = to_casadi(system, seed=options.seed)
    return Compiled(model=m, system=system, numeric=numeric, options=options)


# what a cached entry answers without unpickling sympy objects (see pdsl.cache.Deferred)
MODEL_FACTS = ("name", "doc", "path", "span", "consts", "space", "units")
SYSTEM_FACTS = ("name", "doc", "path", "span", "formalism", "stabilization", "stabilization_params", "units", "space")


def _deferred(compiled: Compiled) -> Compiled:
    """The entry to store: model and system deferred, the numeric system pointing at the deferred system."""
    from dataclasses import replace

    from .cache import Deferred

    model = Deferred.wrap(compiled.model, MODEL_FACTS)
    system = Deferred.wrap(compiled.system, SYSTEM_FACTS)
    numeric = replace(compiled.numeric, system=system) if compiled.numeric is not None else None
    return Compiled(model=model, system=system, numeric=numeric, options=compiled.options)
