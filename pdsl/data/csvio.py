"""Trajectory CSV files: strict reading (located errors) and atomic writing."""

from __future__ import annotations

import csv
import math
import os
import re
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..diagnostics import PdslError, Span, register_source, source_text

__all__ = ["Table", "read_table", "write_table", "atomic_path", "strict_float", "shown_value", "cell_span"]


@dataclass(frozen=True)
class Table:
    path: str
    columns: tuple[str, ...]
    data: np.ndarray  # (rows, columns)

    def column(self, name: str) -> np.ndarray:
        return self.data[:, self.columns.index(name)]


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


def shown_value(text: str, limit: int = 40) -> str:
    """A cell or option value for a message: stripped, long ones cut (``1111…`` with their length)."""
    s = text.strip()
    return s if len(s) <= limit else f"{s[:limit]}… ({len(s)} characters)"


@contextmanager
def _field_limit(n: int):
    """csv's field size limit raised to ``n`` for one read: the text is in memory already, so a
    field can be no longer than it; the process-wide limit is restored afterwards."""
    old = csv.field_size_limit()
    csv.field_size_limit(max(old, n))
    try:
        yield
    finally:
        csv.field_size_limit(old)


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
    p = Path(path)
    at_start = Span.point(str(p), 1, 1)
    try:
        raw = p.read_bytes()
    except FileNotFoundError:
        raise PdslError.at("FileNotFound", f"no such file: {p}", at_start) from None
    except IsADirectoryError:
        raise PdslError.at("BadCsv", f"{p} is a directory, not a CSV file", at_start) from None
    except OSError as exc:
        raise PdslError.at("BadCsv", f"cannot read {p}: {exc.strerror or exc}", at_start) from None
    text = _decode(p, raw)
    register_source(str(p), text)
    with _field_limit(len(text) + 1):
        rows = list(csv.reader(text.splitlines()))
    if not rows:
        raise PdslError.at("BadCsv", f"{p} is empty", at_start, hint="a trajectory CSV starts with a header line: t,x,...")
    header = [h.strip() for h in rows[0]]
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
    return Table(path=str(p), columns=tuple(header), data=data)


def cell_span(path: str, line: int, column: int) -> Span:
    """The span of cell ``column`` (0-based) on file line ``line`` (1-based) of a CSV read before."""
    text = source_text(path)
    lines = text.splitlines() if text else []
    if not 1 <= line <= len(lines):
        return Span.point(path, line, 1)
    with _field_limit(len(lines[line - 1]) + 1):
        cells = next(csv.reader([lines[line - 1]]), [])
    if column >= len(cells):
        return Span.point(path, line, 1, max(len(lines[line - 1]), 1))
    col = 1 + sum(len(c) + 1 for c in cells[:column])
    return Span.point(path, line, col, max(len(cells[column]), 1))


@contextmanager
def atomic_path(path: str | Path):
    """Yield a temporary path next to ``path``; it replaces ``path`` only on success."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=target.suffix, dir=target.parent)
    os.close(fd)
    try:
        # mkstemp creates the file 0600; give it the permissions a plain open() would have
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        yield Path(tmp)
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def write_table(path: str | Path, columns, data: np.ndarray) -> None:
    """Write a CSV atomically, full precision (repr of float64)."""
    with atomic_path(path) as tmp:
        with open(tmp, "w", newline="", encoding="utf-8") as fh:
            w = csv.writer(fh)
            w.writerow(columns)
            for row in np.asarray(data, dtype=float):
                w.writerow([repr(float(v)) for v in row])
