"""The composition stage: a parsed file in, a file of flat models out (parse -> **compose** -> resolve).

:func:`compose` reads everything the file imports once (:func:`~pdsl.compose.flatten.load_program`) and replaces
each model that uses instances, ports or connections by its flattened form
(:func:`~pdsl.compose.flatten.flatten`); a model without composition passes through unchanged, so a file of
plain models costs nothing here. The result is an ordinary :class:`pdsl.parse.ast.File`: resolution never
needs to know that a model was composed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from ..diagnostics import Collector, PdslError
from ..parse import ast as A
from ..parse.queries import uses_composition

__all__ = ["compose"]


def compose(file: A.File, const_overrides: Mapping[str, int] | None = None) -> A.File:
    """``file`` with every model that uses composition flattened; the errors of all models are raised together.

    A model name defined twice is left for resolution to report (only its first definition is flattened)."""
    if not (file.imports or any(uses_composition(m) or any(isinstance(s, A.ImportStmt) for s in m.body)
                                for m in file.models)):
        return file
    from .flatten import flatten, load_program  # only a file that composes pays for importing the flattener

    diags = Collector()
    try:
        program = load_program(file)
    except PdslError as err:
        diags.extend(err)
        diags.raise_if_any()
    seen: set[str] = set()
    models = []
    for m in file.models:
        first = m.name not in seen
        seen.add(m.name)
        if first and uses_composition(m):
            try:
                m = flatten(program, m, const_overrides or {})
            except PdslError as err:
                diags.extend(err)
        models.append(m)
    diags.raise_if_any()
    return replace(file, models=tuple(models))
