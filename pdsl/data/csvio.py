"""Trajectory CSV files: strict reading (located errors) and atomic writing."""

from __future__ import annotations

import csv
import math
import os
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..diagnostics import PdslError, Span, register_source

__all__ = ["Table", "read_table", "write_table", "atomic_path"]


@dataclass(frozen=True)
class Table:
    path: str
    columns: tuple[str, ...]
    data: np.ndarray  # (rows, columns)

    def column(self, name: str) -> np.ndarray:
        return self.data[:, self.columns.index(name)]


def read_table(path: str | Path) -> Table:
    """Read a numeric CSV with a header; every cell must be a finite number."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise PdslError.at("FileNotFound", f"no such file: {p}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise PdslError.at("BadCsv", f"cannot read {p}: {exc}") from None
    register_source(str(p), text)
    rows = list(csv.reader(text.splitlines()))
    if not rows:
        raise PdslError.at("BadCsv", f"{p} is empty", hint="a trajectory CSV starts with a header line: t,x,...")
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
                v = float(cell)
            except ValueError:
                raise PdslError.at(
                    "BadCsv", f"`{cell.strip()}` in column `{header[c]}` is not a number", Span.point(str(p), r, col, max(len(cell), 1))
                ) from None
            if not math.isfinite(v):
                raise PdslError.at(
                    "BadCsv", f"{cell.strip()} in column `{header[c]}` is not finite", Span.point(str(p), r, col, max(len(cell), 1)),
                    "remove or interpolate missing samples before fitting",
                )
            data[r - 2, c] = v
            col += len(cell) + 1
    return Table(path=str(p), columns=tuple(header), data=data)


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
