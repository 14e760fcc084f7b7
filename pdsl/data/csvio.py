"""Trajectory CSV files: strict reading (located errors) and atomic writing."""

from __future__ import annotations

import csv
import math
import re
from pathlib import Path

import numpy as np

from ..diagnostics import PdslError, Span, register_source
from ..limits import MAX_DATA_BYTES, read_bytes
from .formats import other_format, read_other, write_csv_stdout, write_other
from .table import (Table, atomic_path, cell_span, field_limit, header_with_unit, shown_value, split_header,
                    table_from_columns, units_mapping, write_rows)
from .units import conversion_factor, read_units_file, write_units_file

# Table and its helpers live in pdsl.data.table (the formats and units modules read them too); they are named
# here as well, where callers have always imported them from.
__all__ = ["Table", "read_table", "map_columns", "parse_column_map", "write_table", "atomic_path", "strict_float",
           "shown_value", "cell_span", "split_header", "header_with_unit", "table_from_columns", "write_rows"]


_NUMBER = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_NONFINITE = re.compile(r"[+-]?(?:inf|infinity|nan)", re.IGNORECASE)
MAX_NUMBER_CHARS = 1000  # no decimal number of a data file is longer; a longer cell is refused unparsed


def strict_float(text: str) -> float:
    """A decimal number (``12``, ``-0.5``, ``.5e-3``; surrounding blanks allowed) as a float.

    Stricter than ``float()``: no ``_`` digit separators (``-0_9`` is not −9), no ``inf``/``nan``.
    Raises ``ValueError`` with the reason: "not a number", "not a finite number" or "too long
    to be a number".
    """
    s = text.strip()
    if len(s) > MAX_NUMBER_CHARS:
        raise ValueError("too long to be a number")
    if not _NUMBER.fullmatch(s):
        if _NONFINITE.fullmatch(s):
            raise ValueError("not a finite number")
        raise ValueError("not a number")
    v = float(s)
    if not math.isfinite(v):  # 1e999
        raise ValueError("not a finite number")
    return v


def _decode(p: Path, raw: bytes) -> str:
    """UTF-8 text without a byte-order mark; an undecodable byte is an error at its line and column."""
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        bom = 3 if raw.startswith(b"\xef\xbb\xbf") else 0
        before = raw[bom: exc.start]
        line = before.count(b"\n") + 1
        line_start = before.rfind(b"\n") + 1
        col = len(before[line_start:].decode("utf-8", errors="replace")) + 1
        register_source(str(p), raw[bom:].decode("utf-8", errors="replace"))
        raise PdslError.at(
            "BadCsv", f"byte 0x{raw[exc.start]:02x} is not UTF-8", Span.point(str(p), line, col),
            "save the file as UTF-8 (it looks like Latin-1 or another legacy encoding)",
        ) from None


def read_table(path: str | Path) -> Table:
    """Read a numeric CSV with a header; every cell must be a finite decimal number.

    Every problem is a located ``BadCsv`` (or ``FileNotFound``) error: a missing file, a
    directory or an empty file at 1:1, a byte that is not UTF-8 at its line and column, a
    cell at its line and column. A UTF-8 byte-order mark is dropped.
    """
    if other_format(path):  # Parquet, HDF5, MATLAB: by extension (pdsl/data/formats.py)
        return read_other(path)
    p = Path(path)
    at_start = Span.point(str(p), 1, 1)
    try:
        raw = read_bytes(p, MAX_DATA_BYTES, what="CSV file", hint="split the data into several CSV files")
    except FileNotFoundError:
        raise PdslError.at("FileNotFound", f"no such file: {p}", at_start) from None
    except IsADirectoryError:
        raise PdslError.at("BadCsv", f"{p} is a directory, not a CSV file", at_start) from None
    except OSError as exc:
        raise PdslError.at("BadCsv", f"cannot read {p}: {exc.strerror or exc}", at_start) from None
    text = _decode(p, raw)
    register_source(str(p), text)
    with field_limit(len(text) + 1):
        rows = list(csv.reader(text.splitlines()))
    if not rows:
        raise PdslError.at("BadCsv", f"{p} is empty", at_start, hint="a trajectory CSV starts with a header line: t,x,...")
    header_units = [split_header(h) for h in rows[0]]  # `theta [rad]`: the name is `theta`
    header = [h for h, _ in header_units]
    units = tuple(u for _, u in header_units) if any(u for _, u in header_units) else ()
    seen = set()
    for k, h in enumerate(header):
        col = 1 + sum(len(x) + 1 for x in rows[0][:k])
        if not h:
            raise PdslError.at("BadCsv", f"column {k + 1} has an empty name", Span.point(str(p), 1, col))
        if h in seen:
            raise PdslError.at("BadCsv", f"column `{h}` appears twice", Span.point(str(p), 1, col, len(h)))
        seen.add(h)
    data = np.empty((len(rows) - 1, len(header)))
    for r, row in enumerate(rows[1:], start=2):
        if len(row) != len(header):
            raise PdslError.at(
                "BadCsv", f"row has {len(row)} fields but the header has {len(header)}", Span.point(str(p), r, 1)
            )
        col = 1
        for c, cell in enumerate(row):
            try:
                v = strict_float(cell)
            except ValueError as exc:
                finite = str(exc) == "not a finite number"
                raise PdslError.at(
                    "BadCsv", f"`{shown_value(cell)}` in column `{header[c]}` is {exc}",
                    Span.point(str(p), r, col, max(len(cell), 1)),
                    "cells must be finite: remove or interpolate missing samples, keep |values| below 1e308" if finite else
                    "cells are decimal numbers such as 0.5, -3 or 1e-3 (no digit separators)",
                ) from None
            data[r - 2, c] = v
            col += len(cell) + 1
    units, spans = _sidecar_units(p, header, units)
    return Table(path=str(p), columns=tuple(header), data=data, units=units, unit_spans=spans)


def _sidecar_units(p: Path, header: list[str], units: tuple) -> tuple[tuple, tuple]:
    """The units of a CSV's columns from its sidecar ``NAME.units.csv`` (:mod:`pdsl.data.units`) merged with
    those of ``name [unit]`` header cells; a column given two different units is an error at the sidecar's line."""
    side = read_units_file(p, header)
    if not side:
        return units, ()
    merged = list(units) if units else [None] * len(header)
    spans: list = [None] * len(header)
    for name, (unit, span) in side.items():
        k = header.index(name)
        if merged[k] and merged[k] != unit:
            try:
                same = conversion_factor(merged[k], unit) == 1.0
            except ValueError:
                same = False
            if not same:
                raise PdslError.at("BadCsv", f"column `{shown_value(name)}` is in `{merged[k]}` by the header of {p.name} "
                                   f"but in `{unit}` by its units file", span, "give each column one unit")
        merged[k] = unit
        spans[k] = span
    return tuple(merged), tuple(spans)


def parse_column_map(text: str, origin: str = "--map") -> dict[str, str]:
    """``time=t,x=cart.x,run=traj`` as ``{"time": "t", "x": "cart.x", "run": "traj"}`` (file column -> name).

    Every problem is a ``BadOption`` naming the offending item: an item without ``=``, an empty
    side, a file column given twice."""
    out: dict[str, str] = {}
    for item in (i.strip() for i in text.split(",")):
        if not item:
            continue
        if "=" not in item:
            raise PdslError.at("BadOption", f"{origin} {shown_value(item)!s}: expected FILE_COLUMN=NAME",
                               hint="e.g. --map time=t,run=traj,angle=theta")
        src, dst = (s.strip() for s in item.split("=", 1))
        if not src or not dst:
            raise PdslError.at("BadOption", f"{origin} {shown_value(item)}: both sides of `=` must be column names",
                               hint="e.g. --map time=t,run=traj,angle=theta")
        if src in out:
            raise PdslError.at("BadOption", f"{origin}: column `{shown_value(src)}` is mapped twice")
        out[src] = dst
    return out


def map_columns(table: Table, mapping: dict[str, str] | None, origin: str = "--map") -> Table:
    """``table`` with its columns renamed by ``mapping`` (file column -> model name: ``t``, ``traj``,
    a state, output or input). The one place where data columns are renamed (``fit``, ``evaluate``
    and the Python API all read through it). A mapped column missing from the file, or a rename that
    makes two columns share a name, is a ``BadCsv`` error located at the header."""
    if not mapping:
        return table
    header = list(table.columns)
    for src in mapping:
        if src not in header:
            raise PdslError.at("BadCsv", f"{origin}: the file has no column `{shown_value(src)}`",
                               Span.point(table.path, 1, 1, max(len(",".join(header)), 1)),
                               "columns of the file: " + ", ".join(header))
    renamed = [mapping.get(h, h) for h in header]
    seen: dict[str, int] = {}
    for k, name in enumerate(renamed):
        if name in seen:
            j = seen[name]
            raise PdslError.at("BadCsv", f"{origin}: columns `{header[j]}` and `{header[k]}` would both be called `{name}`",
                               cell_span(table.path, 1, k), "map each column to a different name, or drop one")
        seen[name] = k
    return Table(path=table.path, columns=tuple(renamed), data=table.data, units=table.units,
                 unit_spans=table.unit_spans, converted=table.converted)


def write_table(path: str | Path, columns, data: np.ndarray, units=None) -> None:
    """Write a CSV atomically, full precision (repr of float64); ``-`` is standard output, and a
    ``.parquet``/``.h5``/``.mat`` name writes that format instead (pdsl/data/formats.py).

    ``units`` (a mapping by column name, or a sequence aligned with ``columns``) go into the format's metadata,
    for CSV into the sidecar ``NAME.units.csv`` (:mod:`pdsl.data.units`); the header holds the bare names."""
    if str(path) == "-":
        return write_csv_stdout(columns, data)
    units = units_mapping([str(c) for c in columns], units)
    fmt = other_format(path)
    if fmt:
        with atomic_path(path) as tmp:
            write_other(tmp, fmt, columns, data, units)
        return
    with atomic_path(path) as tmp:
        with open(tmp, "w", newline="", encoding="utf-8") as fh:
            csv.writer(fh).writerow(columns)
            write_rows(fh, data, "\r\n")
    write_units_file(path, units)


