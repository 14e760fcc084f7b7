"""Units of the columns of a trajectory table: where they are stored, and conversion into the model's units.

A column is named as ``show`` names the quantity (``theta``, ``der(theta)``, ``b1.x``); its unit is metadata,
never part of the name:

* CSV: a sidecar ``OUT.units.csv`` beside ``OUT.csv`` (``run.csv`` -> ``run.units.csv``), a CSV with the header
  ``column,unit`` and one row per column that has a unit. The data file stays a plain numeric CSV that any
  reader (pandas, numpy, a spreadsheet) takes as it is. A header cell ``theta [rad]`` (what pdsl wrote before)
  is still read as the column ``theta`` in ``rad``.
* Parquet: the field metadata ``unit`` of each column.
* HDF5: the attribute ``units`` of each column's dataset (the netCDF/CF name, which xarray shows).
* MATLAB ``.mat``: a cell array ``units`` beside ``columns`` (``''`` where a column has none).

:func:`to_model_units` converts the columns of a table read as data into the units the model declares: with
pint (``pip install "pdsl[units]"``) any two units of one dimension (``mm`` -> ``m``, ``deg`` -> ``rad``,
``rpm`` -> ``rad/s``); without it, a unit that differs from the model's only in spelling is accepted and any
other is refused (never taken as the model's unit silently). A different dimension is always refused.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from ..diagnostics import PdslError, Span
from .table import Table, atomic_path, cell_span, shown_value, units_mapping

__all__ = ["UNITS_SUFFIX", "units_path", "write_units_file", "read_units_file", "to_model_units", "conversion_factor",
           "pint_expression", "units_mapping"]  # units_mapping: pdsl.data.table's, named here too

UNITS_SUFFIX = ".units.csv"
_HEADER = ["column", "unit"]


def units_path(path: str | Path) -> Path:
    """The sidecar of a CSV: ``run.csv`` -> ``run.units.csv`` (``run`` -> ``run.units.csv``)."""
    p = Path(path)
    stem = p.name[: -len(p.suffix)] if p.suffix else p.name
    return p.with_name(stem + UNITS_SUFFIX)


def write_units_file(data_path: str | Path, units: Mapping[str, str]) -> None:
    """Write (atomically) the sidecar of ``data_path`` with ``units``; with no units, remove a sidecar left by an
    earlier write of the same table, so that it cannot be read with the new data."""
    side = units_path(data_path)
    if not units:
        try:
            side.unlink()
        except FileNotFoundError:
            pass
        return
    with atomic_path(side) as tmp:
        with open(tmp, "w", newline="", encoding="utf-8") as fh:
            w = csv.writer(fh)
            w.writerow(_HEADER)
            for name, unit in units.items():
                w.writerow([name, unit])


def read_units_file(data_path: str | Path, columns) -> dict[str, tuple[str, Span]] | None:
    """``{column: (unit, span)}`` from the sidecar of ``data_path``; None when there is none. Problems (another
    header, a row of other than two cells, a column the data lacks, a column twice) are ``BadCsv`` errors at
    the sidecar's line."""
    from ..diagnostics import register_source
    from ..limits import read_text

    side = units_path(data_path)
    if not side.is_file():
        return None
    text = read_text(side, what="units file")
    register_source(str(side), text)
    rows = list(csv.reader(text.splitlines()))
    if not rows or [c.strip() for c in rows[0]] != _HEADER:
        raise PdslError.at("BadCsv", f"{side.name}: the units file of {Path(data_path).name} starts with the line "
                           "`column,unit`", Span.point(str(side), 1, 1, max(len(rows[0]) if rows else 1, 1)),
                           "one line per column follows: theta,rad")
    out: dict[str, tuple[str, Span]] = {}
    for line, row in enumerate(rows[1:], start=2):
        if not row or not "".join(row).strip():
            continue
        if len(row) != 2:
            raise PdslError.at("BadCsv", f"a line of a units file has two cells (column,unit), this one has {len(row)}",
                               Span.point(str(side), line, 1), "e.g. der(theta),rad/s")
        name, unit = row[0].strip(), row[1].strip()
        if name not in columns:
            raise PdslError.at("BadCsv", f"`{shown_value(name)}` is not a column of {Path(data_path).name}",
                               cell_span(str(side), line, 0), "columns: " + ", ".join(columns))
        if name in out:
            raise PdslError.at("BadCsv", f"column `{shown_value(name)}` has two units", cell_span(str(side), line, 0))
        if unit:
            out[name] = (unit, cell_span(str(side), line, 1))
    return out


# ---------------------------------------------------------------- conversion
_REGISTRY = None


def _pint():
    """pint's unit registry (made once), or None when pint is not installed."""
    global _REGISTRY
    if _REGISTRY is None:
        try:
            import pint
        except ImportError:
            return None
        _REGISTRY = pint.UnitRegistry()
    return _REGISTRY


_PINT_NAMES = {"Ohm": "ohm"}


def pint_expression(text: str) -> str:
    """A pdsl unit (``kg·m²/s²``, ``N m``, ``m/s2``, ``kOhm``) in pint's syntax (``kg*m**2/s**2``); the tokens
    are pdsl's own (:func:`pdsl.resolve.units.parse_unit` reads the same text), so both read one unit."""
    from ..resolve.units import _tokens

    out: list[str] = []
    for tok in _tokens(text):
        if tok == "^":
            out.append("**")
        elif tok == "·":
            out.append("*")
        elif tok[0].isalpha() or tok[0] in "Ωµμ":
            if out and (out[-1][:1].isalnum() or out[-1] in ")Ωµμ"):
                out.append("*")
            head = next((p for p in ("k", "M", "G", "m", "u", "µ", "μ", "n", "p") if tok.startswith(p) and
                         tok[len(p):] in _PINT_NAMES), "")
            out.append(head + _PINT_NAMES.get(tok[len(head):], tok[len(head):]))
        elif tok[0].isdigit() or tok[0] == "-":
            power = out and out[-1] not in ("**", "*", "/", "(")
            out.append(("**" if power else "") + (f"({tok})" if tok.startswith("-") else tok))
        else:
            out.append(tok)
    return "".join(out)


def _same_spelling(a: str, b: str) -> bool:
    from ..resolve.units import UnitSyntax, _tokens

    try:
        return pint_expression(a) == pint_expression(b) or _tokens(a) == _tokens(b)
    except UnitSyntax:
        return False


def conversion_factor(unit: str, target: str) -> float:
    """The factor f with value_in_target = f · value_in_unit. Raises ``ValueError`` with the reason: a unit pdsl
    does not read, two dimensions, or (without pint) two units of one dimension that differ."""
    from ..resolve.units import UnitSyntax, format_dim, parse_unit

    if unit.replace(" ", "") == target.replace(" ", "") or _same_spelling(unit, target):
        return 1.0
    try:
        have = parse_unit(unit)
    except UnitSyntax as exc:
        raise ValueError(f"`{unit}` is not a unit pdsl reads ({exc})") from None
    want = parse_unit(target)
    if have != want:
        raise ValueError(f"`{unit}` ({format_dim(have)}) is a different dimension from the model's `{target}` "
                         f"({format_dim(want)})")
    ureg = _pint()
    if ureg is None:
        raise _NoPint(f"`{unit}` differs from the model's `{target}` (the same dimension, {format_dim(want)}); "
                      "converting needs pint")
    try:
        ratio = (ureg.parse_expression(pint_expression(unit)) / ureg.parse_expression(pint_expression(target)))
        factor = float(ratio.to("dimensionless").magnitude)
    except Exception as exc:  # noqa: BLE001 - pint's complaint about a unit it does not know
        raise ValueError(f"pint cannot convert `{unit}` to `{target}`: {type(exc).__name__}: {str(exc)[:120]}") from None
    if not (math.isfinite(factor) and factor != 0):
        raise ValueError(f"pint gives the factor {factor} from `{unit}` to `{target}`")
    return factor


class _NoPint(ValueError):
    pass


def to_model_units(table, declared: Mapping[str, str], *, code: str = "BadCsv"):
    """``table`` with every column that has a unit in the data and one in the model (``declared``; ``t`` is in
    seconds) converted into the model's unit; its ``units`` then read the model's. Columns without a unit on
    either side are taken as they are. A column that cannot be converted is a ``code`` error at the cell that
    gives its unit (the header cell, or the sidecar's line)."""
    if not table.units or not any(table.units):
        return table
    declared = dict(declared)
    declared.setdefault("t", "s")
    data = table.data
    units = list(table.units)
    changed: list[tuple[str, str, str, float]] = []
    for k, (name, unit) in enumerate(zip(table.columns, table.units)):
        want = declared.get(name)
        if not unit or not want:
            continue
        try:
            factor = conversion_factor(unit, want)
        except ValueError as exc:
            span = table.unit_spans[k] if table.unit_spans and table.unit_spans[k] is not None \
                else cell_span(table.path, 1, k)
            hint = ('install pint to convert it (pip install "pdsl[units]"), or give the data in the model\'s units'
                    if isinstance(exc, _NoPint) else "give the column in the model's unit, or change the model's unit")
            raise PdslError.at(code, f"column `{shown_value(name)}`: {exc}", span, hint) from None
        if factor != 1.0:
            if data is table.data:
                data = np.array(table.data, dtype=float)
            data[:, k] *= factor
            changed.append((name, unit, want, factor))
        units[k] = want
    return Table(path=table.path, columns=table.columns, data=data, units=tuple(units), unit_spans=table.unit_spans,
                 converted=tuple(changed))
