"""The stages of a linearization in order, for the CLI and the Python API: open the loops, read the operating
point's values, find the point, linearize."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

import numpy as np

from ..backend.functions import NumericSystem
from ..diagnostics import PdslError
from .core import Linearization, linearize
from .point import PointValue, operating_point, parse_value

__all__ = ["linearize_numeric", "point_values"]


def point_values(num: NumericSystem, values: Mapping[str, object] | None, option: str, p: np.ndarray) -> dict[str, PointValue]:
    """``{name: PointValue}`` of ``--at``/``--input`` values: text (a number or a constant expression of the
    parameters, parsed by the model grammar) or a Python number."""
    out = {}
    for name, v in (values or {}).items():
        if isinstance(v, str):
            out[name] = parse_value(num, f"{option} {name}", v, p)
        elif isinstance(v, (int, float, np.integer, np.floating)) and np.isfinite(float(v)):
            out[name] = PointValue(float(v))
        else:
            raise PdslError.at("BadOperatingPoint", f"{option} {name}: give a finite number or an expression (text), "
                               f"not {v!r:.60}")
    return out


def linearize_numeric(num: NumericSystem, *, at: Mapping[str, object] | None = None,
                      inputs: Mapping[str, object] | None = None, params: Mapping[str, float] | None = None,
                      trim: bool = False, open_loop: bool = False) -> Linearization:
    """Linearize a compiled system (LANGUAGE.md §12): ``open_loop`` frees the feedback-law inputs first; ``params``
    overrides parameter values; ``at``/``inputs`` give state (or shown column) and input values; ``trim`` solves for
    a steady state in what is not given."""
    from . import open_loop as make_open

    if open_loop:
        num = make_open(num)
    unknown = sorted(set(params or {}) - set(num.p_names))
    if unknown:
        raise PdslError.at("BadOption", f"--param {unknown[0]}: the model has no parameter `{unknown[0]}`",
                           hint="parameters: " + ", ".join(num.p_names[:40]))
    p = num.param_vector({k: float(v) for k, v in (params or {}).items()})
    point = operating_point(num, point_values(num, at, "--at", p), point_values(num, inputs, "--input", p),
                            params=p, trim=trim)
    lin = linearize(num, point, open_loop=open_loop)
    from ..cache import unwrap

    return replace(lin, system=unwrap(num.system))
