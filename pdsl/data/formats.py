"""Trajectory tables in other formats than CSV, chosen by file extension: the one place that dispatches.

``read_table`` and ``write_table`` of :mod:`pdsl.data.csvio` call :func:`other_format` first and hand
Parquet (``.parquet``, ``.pq``), HDF5 (``.h5``, ``.hdf5``) and MATLAB (``.mat``) files to
:func:`read_other` / :func:`write_other`; every other name is CSV and stays with csvio's strict
parser (there is no second CSV parser). ``-`` as an output path is CSV on standard output.

Layouts (what pdsl writes, and what it reads):

* Parquet: one float64 column per table column, in order (pandas/pyarrow round trip).
* HDF5: one 1-D float64 dataset per column at the file's root, in the order of the root attribute
  ``columns`` (HDF5 lists names alphabetically). Reading a file without that attribute takes every
  1-D numeric dataset at the root, in HDF5's order; a 2-D dataset ``data`` with an attribute
  ``columns`` is read too.
* MATLAB ``.mat`` (v5): a matrix ``data`` (rows × columns) and a cell array ``columns`` with the
  column names (CSV names such as ``der(q1)`` or ``b1.x`` are not MATLAB variable names). Reading a
  file without that pair takes every numeric column vector of the same length, by variable name.

The readers need optional packages (``pip install "pdsl[formats]"``: pyarrow, h5py; scipy is a core
dependency); a missing one is a ``MissingDependency`` error naming it. Values are checked like CSV
cells (finite numbers, unique non-empty names) by :func:`pdsl.data.csvio.table_from_columns`.
"""

from __future__ import annotations

import contextlib
import csv
import sys
from pathlib import Path

import numpy as np

from ..diagnostics import PdslError, Span

__all__ = ["FORMATS", "other_format", "read_other", "write_other", "read_any", "write_any", "write_csv_stdout",
           "summary_to_stderr", "select_columns", "parse_columns"]

FORMATS = {".parquet": "parquet", ".pq": "parquet", ".h5": "hdf5", ".hdf5": "hdf5", ".mat": "mat"}
_PACKAGES = {"parquet": "pyarrow", "hdf5": "h5py", "mat": "scipy"}

_data_stdout = None  # the real standard output while summary_to_stderr() is active


def other_format(path) -> str | None:
    """``parquet``, ``hdf5`` or ``mat`` for a path with such an extension; None for CSV (everything else)."""
    return FORMATS.get(Path(str(path)).suffix.lower())


def read_any(path):
    """Read a table in any supported format (by extension); the same as ``csvio.read_table``."""
    from .csvio import read_table

    return read_table(path)


def write_any(path, columns, data) -> None:
    """Write a table in the format its extension names; ``-`` is CSV on standard output."""
    from .csvio import write_table

    write_table(path, columns, data)


def _need(fmt: str):
    name = _PACKAGES[fmt]
    try:
        return __import__(name)
    except ImportError:
        raise PdslError.at("MissingDependency", f"{fmt} files need the Python package `{name}`, which is not installed",
                           hint='pip install "pdsl[formats]"') from None


def _at(path) -> Span:
    return Span.point(str(path), 1, 1)


def read_other(path):
    """A :class:`~pdsl.data.csvio.Table` from a Parquet, HDF5 or MATLAB file; problems are located errors."""
    from .csvio import table_from_columns

    p = Path(path)
    fmt = other_format(p)
    if fmt is None:
        raise ValueError(f"{p} is a CSV name")  # a caller bug: csvio reads CSV
    if not p.exists():
        raise PdslError.at("FileNotFound", f"no such file: {p}", _at(p))
    if p.is_dir():
        raise PdslError.at("BadCsv", f"{p} is a directory, not a {fmt} file", _at(p))
    from ..diagnostics import register_source

    register_source(str(p), f"<{fmt} file {p.name}>")  # what an error shows as the line (not binary bytes)
    mod = _need(fmt)
    try:
        columns, data = {"parquet": _read_parquet, "hdf5": _read_hdf5, "mat": _read_mat}[fmt](mod, p)
    except PdslError:
        raise
    except Exception as exc:  # noqa: BLE001 - a library's complaint about a damaged or foreign file
        raise PdslError.at("BadCsv", f"cannot read {p} as {fmt}: {type(exc).__name__}: {str(exc)[:200]}", _at(p),
                           hint=f"a {fmt} table of numeric columns, as `pdsl simulate -o FILE{p.suffix}` writes") from None
    if not columns:
        raise PdslError.at("BadCsv", f"{p} holds no numeric columns", _at(p))
    return table_from_columns(columns, data, label=str(p))


def _read_parquet(pa, p: Path):
    import pyarrow.parquet as pq

    tab = pq.read_table(p)
    cols, arrays = [], []
    for name, col in zip(tab.column_names, tab.columns):
        try:
            arrays.append(np.asarray(col.to_numpy(zero_copy_only=False), dtype=float))
        except (TypeError, ValueError):
            raise PdslError.at("BadCsv", f"column `{name}` of {p} is not numeric ({col.type})", _at(p)) from None
        cols.append(str(name))
    return cols, np.column_stack(arrays) if arrays else np.zeros((0, 0))


def _read_hdf5(h5py, p: Path):
    with h5py.File(p, "r") as f:
        if "columns" in f.attrs:
            names = [n.decode() if isinstance(n, bytes) else str(n) for n in f.attrs["columns"]]
            if "data" in f and getattr(f["data"], "ndim", 0) == 2:
                return names, np.asarray(f["data"][...], dtype=float)
            missing = [n for n in names if n not in f]
            if missing:
                raise PdslError.at("BadCsv", f"{p}: column `{missing[0]}` is listed but has no dataset", _at(p))
            return names, np.column_stack([np.asarray(f[n][...], dtype=float) for n in names]) if names else np.zeros((0, 0))
        names, arrays = [], []
        for name, obj in f.items():
            if isinstance(obj, h5py.Dataset) and obj.ndim == 1 and np.issubdtype(obj.dtype, np.number):
                names.append(name)
                arrays.append(np.asarray(obj[...], dtype=float))
        _same_length(p, names, arrays)
        return names, np.column_stack(arrays) if arrays else np.zeros((0, 0))


def _read_mat(scipy, p: Path):
    from scipy.io import loadmat

    m = loadmat(p)
    if "data" in m and "columns" in m:
        names = [str(np.asarray(c).ravel()[0]) if np.asarray(c).size else "" for c in np.asarray(m["columns"]).ravel()]
        data = np.atleast_2d(np.asarray(m["data"], dtype=float))
        if data.shape[1] != len(names):
            raise PdslError.at("BadCsv", f"{p}: `data` has {data.shape[1]} columns but `columns` names {len(names)}", _at(p))
        return names, data
    names, arrays = [], []
    for name, value in m.items():
        if name.startswith("__"):
            continue
        a = np.asarray(value)
        if np.issubdtype(a.dtype, np.number) and a.ndim == 2 and 1 in a.shape:
            names.append(name)
            arrays.append(a.ravel().astype(float))
    _same_length(p, names, arrays)
    return names, np.column_stack(arrays) if arrays else np.zeros((0, 0))


def _same_length(p: Path, names, arrays) -> None:
    lengths = {len(a) for a in arrays}
    if len(lengths) > 1:
        raise PdslError.at("BadCsv", f"{p}: columns have different lengths ({', '.join(map(str, sorted(lengths)))})",
                           _at(p), hint="every column of a trajectory table has one value per sample")


def write_other(tmp: Path, fmt: str, columns, data: np.ndarray) -> None:
    """Write the table into ``tmp`` (csvio's atomic temporary path) in format ``fmt``."""
    mod = _need(fmt)
    names = [str(c) for c in columns]
    arr = np.asarray(data, dtype=float).reshape(-1, len(names)) if names else np.zeros((0, 0))
    if fmt == "parquet":
        import pyarrow.parquet as pq

        tab = mod.table({n: arr[:, k] for k, n in enumerate(names)})
        pq.write_table(tab, tmp)
    elif fmt == "hdf5":
        bad = [n for n in names if "/" in n or n in (".", "")]
        if bad:
            raise PdslError.at("BadOption", f"column `{bad[0]}` cannot be an HDF5 dataset name", hint="use CSV or Parquet")
        with mod.File(tmp, "w") as f:
            for k, n in enumerate(names):
                f.create_dataset(n, data=arr[:, k])
            f.attrs["columns"] = np.array(names, dtype=mod.string_dtype())
    else:
        from scipy.io import savemat

        cells = np.empty((1, len(names)), dtype=object)
        for k, n in enumerate(names):
            cells[0, k] = n
        savemat(tmp, {"data": arr, "columns": cells}, do_compression=True)


def write_csv_stdout(columns, data) -> None:
    """``-o -``: the CSV on standard output (the real one, also under :func:`summary_to_stderr`)."""
    out = _data_stdout or sys.stdout
    try:
        from .csvio import write_rows

        csv.writer(out, lineterminator="\n").writerow(list(columns))
        write_rows(out, data, "\n")
        out.flush()
    except BrokenPipeError:  # the reader (`head`) has what it wanted: stop quietly, like any filter
        import os

        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), out.fileno())
        except (OSError, ValueError, AttributeError):
            pass


@contextlib.contextmanager
def summary_to_stderr():
    """While active, ``print`` goes to standard error and ``-o -`` data to standard output."""
    global _data_stdout
    _data_stdout = sys.stdout
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        _data_stdout = None


def parse_columns(text: str, origin: str = "--columns") -> list[str]:
    """``q1,der(q1)`` -> ``["q1", "der(q1)"]``; commas inside brackets or parentheses do not split."""
    items, depth, cur = [], 0, []
    for ch in text:
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth = max(0, depth - 1)
        if ch == "," and depth == 0:
            items.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    items.append("".join(cur).strip())
    names = [i for i in items if i]
    if not names:
        raise PdslError.at("BadOption", f"{origin}: no column names given", hint="e.g. --columns q1,der(q1)")
    return names


def select_columns(names: list[str], data: np.ndarray, wanted: list[str], keep=("traj", "t"),
                   origin: str = "--columns") -> tuple[list[str], np.ndarray]:
    """The ``keep`` columns present (``traj``, ``t``) followed by ``wanted`` in the given order."""
    from .csvio import shown_value

    index = {n: k for k, n in enumerate(names)}
    for n in wanted:
        if n not in index:
            choices = [c for c in names if c not in keep]
            raise PdslError.at("BadOption", f"{origin}: no column `{shown_value(n)}`",
                               hint="columns: " + ", ".join(choices))
    seen, order = set(), []
    for n in [k for k in keep if k in index] + list(wanted):
        if n not in seen:
            seen.add(n)
            order.append(n)
    return order, np.asarray(data)[:, [index[n] for n in order]]
