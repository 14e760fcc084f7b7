"""The in-memory trajectory table and what every reader and writer of one shares.

:class:`Table` is the record that the CSV reader (:mod:`pdsl.data.csvio`), the Parquet/HDF5/MATLAB readers
(:mod:`pdsl.data.formats`) and the unit conversion (:mod:`pdsl.data.units`) all produce or read; the helpers
here are the ones they share: header cells with a unit, a cell's span for a located error, a value shortened
for a message, in-memory columns checked like a file's cells, the atomic temporary path every output is written
through, and the rows of numbers as CSV text. This module imports none of the three, which import it.
"""

from __future__ import annotations

import csv
import io
import os
import re
from collections.abc import Mapping
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from ..diagnostics import PdslError, Span, register_source, source_text
from ..records import record

__all__ = ["Table", "split_header", "header_with_unit", "shown_value", "field_limit", "cell_span", "units_mapping",
           "table_from_columns", "atomic_path", "write_rows"]


@record(kw_only=False, slots=False)
class Table:
    path: str
    columns: tuple[str, ...]
    data: np.ndarray  # (rows, columns)
    # per column (empty: no column has a unit): the file's metadata (pdsl.data.units), or a header `theta [rad]`
    units: tuple[str | None, ...] = ()
    unit_spans: tuple = ()  # per column, where its unit was read when not from the header cell (a sidecar's line)
    converted: tuple = ()  # (column, from unit, to unit, factor) of the columns pdsl.data.units converted

    def column(self, name: str) -> np.ndarray:
        return self.data[:, self.columns.index(name)]


_UNIT_SUFFIX = re.compile(r"^(.*\S)\s+\[([^\[\]]*)\]$")


def split_header(cell: str) -> tuple[str, str | None]:
    """``theta [rad]`` -> (``theta``, ``rad``); ``b[1].x`` (no space before the bracket) -> (``b[1].x``, None).
    The one place a column's unit is read from a header (written by :func:`header_with_unit`)."""
    m = _UNIT_SUFFIX.match(cell.strip())
    return (m.group(1), m.group(2).strip() or None) if m else (cell.strip(), None)


def header_with_unit(name: str, unit: str | None) -> str:
    """The header cell of a column: ``theta [rad]``, or the bare name without a unit."""
    return f"{name} [{unit}]" if unit else name


def shown_value(text: str, limit: int = 40) -> str:
    """A cell or option value for a message: stripped, long ones cut (``1111…`` with their length)."""
    s = text.strip()
    return s if len(s) <= limit else f"{s[:limit]}… ({len(s)} characters)"


@contextmanager
def field_limit(n: int):
    """csv's field size limit raised to ``n`` for one read: the text is in memory already, so a
    field can be no longer than it; the process-wide limit is restored afterwards."""
    old = csv.field_size_limit()
    csv.field_size_limit(max(old, n))
    try:
        yield
    finally:
        csv.field_size_limit(old)


def cell_span(path: str, line: int, column: int) -> Span:
    """The span of cell ``column`` (0-based) on file line ``line`` (1-based) of a CSV read before."""
    text = source_text(path)
    lines = text.splitlines() if text else []
    if not 1 <= line <= len(lines):
        return Span.point(path, line, 1)
    with field_limit(len(lines[line - 1]) + 1):
        cells = next(csv.reader([lines[line - 1]]), [])
    if column >= len(cells):
        return Span.point(path, line, 1, max(len(lines[line - 1]), 1))
    col = 1 + sum(len(c) + 1 for c in cells[:column])
    return Span.point(path, line, col, max(len(cells[column]), 1))


def units_mapping(columns, units) -> dict[str, str]:
    """``units`` as ``{column: unit}`` for the given columns: a mapping (names not among ``columns`` are dropped),
    a sequence aligned with ``columns`` (``None``/``''`` for no unit), or None."""
    if not units:
        return {}
    if isinstance(units, Mapping):
        return {str(c): str(units[c]) for c in columns if units.get(c)}
    return {str(c): str(u) for c, u in zip(columns, units) if u}


def table_from_columns(columns, data, label: str = "<data>", units=None) -> Table:
    """A :class:`Table` from in-memory columns (a DataFrame's, or arrays'), checked like a file's cells:
    the text of an equivalent CSV is registered under ``label`` so that errors are located in it. ``units``: per
    column (a sequence aligned with ``columns``, or a mapping by name), from a file's metadata or a DataFrame's
    ``attrs["units"]``."""
    header = [str(c) for c in columns]
    arr = np.asarray(data, dtype=float)
    if arr.ndim != 2 or arr.shape[1] != len(header):
        raise PdslError.at("BadCsv", f"{label}: expected a table with {len(header)} columns, got shape {arr.shape}")
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(header)
    for row in arr:
        w.writerow([repr(float(v)) for v in row])
    text = buf.getvalue()
    register_source(label, text)
    for k, h in enumerate(header):
        if not h.strip():
            raise PdslError.at("BadCsv", f"column {k + 1} has an empty name", Span.point(label, 1, 1))
        if header.index(h) != k:
            raise PdslError.at("BadCsv", f"column `{h}` appears twice", cell_span(label, 1, k))
    bad = np.argwhere(~np.isfinite(arr))
    if bad.size:
        r, c = (int(v) for v in bad[0])
        raise PdslError.at("BadCsv", f"`{arr[r, c]}` in column `{header[c]}` is not a finite number", cell_span(label, r + 2, c),
                           "cells must be finite: remove or interpolate missing samples")
    names = tuple(h.strip() for h in header)
    given = units_mapping(names, units)
    return Table(path=label, columns=names, data=arr, units=tuple(given.get(n) for n in names) if given else ())


@contextmanager
def atomic_path(path: str | Path):
    """Yield a temporary path next to ``path``; it replaces ``path`` only on success.

    The temporary is ``.<name>.tmp-<pid>-<random>/<name>``: a file of the output's own name (writers that choose
    a format by the suffix see it), created empty with the permissions a plain ``open()`` gives, in a private
    directory made by :func:`pdsl.cache.temporary_dir` and locked (the directory, not the file: HDF5 locks the
    file it writes) until the file is renamed into place. A writer killed with ``kill -9`` leaves the directory
    behind: the next write into the same directory removes it (:func:`pdsl.cache.sweep_output_temporaries`; a
    live writer's is kept)."""
    from .. import cache as C

    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    C.sweep_output_temporaries(target.parent, target)
    with C.temporary_dir(target.parent, C.output_temp_prefix(target)) as work:
        tmp = work / target.name
        os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))  # the umask applies, as to open()
        yield tmp
        os.replace(tmp, target)


def write_rows(fh, data, newline: str, block: int = 4096) -> None:
    """The numbers of a table as CSV lines: each value as Python's shortest round-trip ``repr`` (exact, and the
    same text as ``csv.writer`` of ``repr(float(v))``), formatted from ``ndarray.tolist()`` a block of rows at
    a time rather than value by value through ``csv.writer`` (numbers never need quoting)."""
    a = np.asarray(data, dtype=float)
    if a.ndim != 2:
        a = a.reshape(len(a), -1)
    for start in range(0, len(a), block):
        rows = a[start : start + block].tolist()
        fh.write(newline.join(",".join(map(repr, row)) for row in rows))
        fh.write(newline)
