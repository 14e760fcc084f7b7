"""Linearization about an operating point (LANGUAGE.md §12): ``pdsl linearize`` and ``Model.linearize``.

:func:`operating_point` finds the point (given values, start values, or a steady-state solve with ``trim``),
:func:`linearize` turns a compiled :class:`~pdsl.backend.functions.NumericSystem` and the point into a frozen
:class:`Linearization` (A, B, C, D in independent coordinates, eigenvalues, ranks); :func:`open_loop_system` makes
the feedback-law inputs of a symbolic system free inputs; :func:`symbolic_matrices` gives A, B, C, D as sympy
matrices of the parameters for small models.
"""

from .core import Linearization, linearize
from .point import OperatingPoint, PointValue, operating_point, parse_value

__all__ = ["Linearization", "linearize", "OperatingPoint", "PointValue", "operating_point", "parse_value",
           "open_loop_system", "open_loop", "symbolic_matrices"]


def open_loop_system(system):
    """The symbolic system with every feedback-law input made an exogenous input (``--open-loop``)."""
    from dataclasses import replace

    from ..cache import unwrap

    system = unwrap(system)  # a cached compilation defers it
    return replace(system, inputs=tuple(replace(u, law=None) if u.law is not None else u for u in system.inputs))


def open_loop(num):
    """``num`` recompiled with its feedback-law inputs free (its parameter values and weights kept)."""
    from dataclasses import replace

    from ..backend.functions import to_casadi

    if not any(u.law is not None for u in num.system.inputs):
        return num
    new = to_casadi(open_loop_system(num.system), kind=num.kind)
    return replace(new, p_default=num.p_default.copy())


def symbolic_matrices(system, lin, **kw):
    from .symbolic import symbolic_matrices as build

    return build(system, lin, **kw)
