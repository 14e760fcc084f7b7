"""Trajectory tables in other formats than CSV, chosen by file extension: the one place that dispatches.

``read_table`` and ``write_table`` of :mod:`pdsl.data.csvio` call :func:`other_format` first and hand
Parquet (``.parquet``, ``.pq``), HDF5 (``.h5``, ``.hdf5``) and MATLAB (``.mat``) files to
:func:`read_other` / :func:`write_other`; every other name is CSV and stays with csvio's strict
parser (there is no second CSV parser). ``-`` as an output path is CSV on standard output.

Layouts (what pdsl writes, and what it reads). Columns are named as ``show`` names the quantities; units are
metadata (:mod:`pdsl.data.units`), never part of a name:

* Parquet: one float64 column per table column, in order; a column's unit in its field metadata ``unit``
  (``pandas.read_parquet`` reads the table; ``pyarrow.parquet.read_schema(path).field(name).metadata``, the unit).
* HDF5, netCDF-4 compatible (``xarray.open_dataset(path, engine="h5netcdf")`` reads it, with ``units`` attributes):
  one 1-D float64 dataset per column at the file's root, each with the attribute ``units`` where it has one, and
  the root attribute ``columns`` with their order; the dataset ``t`` is the dimension (a netCDF coordinate) of a
  table with one trajectory, a dimension ``row`` without values that of a table with a ``traj`` column (its ``t``
  repeats) or without ``t``. The file tracks creation order, so HDF5 lists the columns in order too. Reading a file
  without ``columns`` takes every 1-D numeric dataset at the root (a netCDF dimension without values excepted),
  in HDF5's order; a 2-D dataset ``data`` with an attribute ``columns`` is read too.
* MATLAB ``.mat`` (v5): a matrix ``data`` (rows × columns), a cell array ``columns`` with the column names (CSV
  names such as ``der(q1)`` or ``b1.x`` are not MATLAB variable names) and a cell array ``units`` (``''`` where
  a column has none): ``m = scipy.io.loadmat(path, simplify_cells=True); pandas.DataFrame(m["data"],
  columns=m["columns"])``, or ``array2table(data, 'VariableNames', columns)`` in MATLAB. Reading a file without
  that pair takes every numeric column vector of the same length, by variable name.

The readers need optional packages (``pip install "pdsl[formats]"``: pyarrow, h5py; scipy is a core
dependency); a missing one is a ``MissingDependency`` error naming it. Values are checked like CSV
cells (finite numbers, unique non-empty names) by :func:`pdsl.data.table.table_from_columns`.
"""

from __future__ import annotations

import contextlib
import csv
import sys
from pathlib import Path

import numpy as np

from ..diagnostics import PdslError, Span, register_source
from .table import shown_value, table_from_columns, write_rows

__all__ = ["FORMATS", "other_format", "read_other", "write_other", "write_csv_stdout",
           "summary_to_stderr", "select_columns", "parse_columns"]

FORMATS = {".parquet": "parquet", ".pq": "parquet", ".h5": "hdf5", ".hdf5": "hdf5", ".mat": "mat"}
_PACKAGES = {"parquet": "pyarrow", "hdf5": "h5py", "mat": "scipy"}

_data_stdout = None  # the real standard output while summary_to_stderr() is active


def other_format(path) -> str | None:
    """``parquet``, ``hdf5`` or ``mat`` for a path with such an extension; None for CSV (everything else)."""
    return FORMATS.get(Path(str(path)).suffix.lower())


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
    """A :class:`~pdsl.data.table.Table` from a Parquet, HDF5 or MATLAB file; problems are located errors."""
    p = Path(path)
    fmt = other_format(p)
    if fmt is None:
        raise ValueError(f"{p} is a CSV name")  # a caller bug: csvio reads CSV
    if not p.exists():
        raise PdslError.at("FileNotFound", f"no such file: {p}", _at(p))
    if p.is_dir():
        raise PdslError.at("BadCsv", f"{p} is a directory, not a {fmt} file", _at(p))
    register_source(str(p), f"<{fmt} file {p.name}>")  # what an error shows as the line (not binary bytes)
    mod = _need(fmt)
    try:
        columns, data, *units = {"parquet": _read_parquet, "hdf5": _read_hdf5, "mat": _read_mat}[fmt](mod, p)
    except PdslError:
        raise
    except Exception as exc:  # noqa: BLE001 - a library's complaint about a damaged or foreign file
        raise PdslError.at("BadCsv", f"cannot read {p} as {fmt}: {type(exc).__name__}: {str(exc)[:200]}", _at(p),
                           hint=f"a {fmt} table of numeric columns, as `pdsl simulate -o FILE{p.suffix}` writes") from None
    if not columns:
        raise PdslError.at("BadCsv", f"{p} holds no numeric columns", _at(p))
    return table_from_columns(columns, data, label=str(p), units=units[0] if units else None)


def _read_parquet(pa, p: Path):
    import pyarrow.parquet as pq

    tab = pq.read_table(p)
    cols, arrays, units = [], [], []
    for field, col in zip(tab.schema, tab.columns):
        try:
            arrays.append(np.asarray(col.to_numpy(zero_copy_only=False), dtype=float))
        except (TypeError, ValueError):
            raise PdslError.at("BadCsv", f"column `{field.name}` of {p} is not numeric ({col.type})", _at(p)) from None
        cols.append(str(field.name))
        unit = (field.metadata or {}).get(b"unit")
        units.append(unit.decode("utf-8", "replace") if unit else None)
    return cols, np.column_stack(arrays) if arrays else np.zeros((0, 0)), units


def _text(v) -> str:
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    if isinstance(v, np.ndarray) and v.size == 1:
        return _text(v.reshape(-1)[0])
    return str(v)


_NETCDF_DIMENSION = "This is a netCDF dimension but not a netCDF variable"


def _read_hdf5(h5py, p: Path):
    with h5py.File(p, "r") as f:
        def unit(name):
            u = f[name].attrs.get("units") if name in f else None
            return _text(u).strip() or None if u is not None else None

        if "columns" in f.attrs:
            names = [_text(n) for n in f.attrs["columns"]]
            if "data" in f and getattr(f["data"], "ndim", 0) == 2:
                units = f["data"].attrs.get("units")
                units = [_text(u) or None for u in units] if units is not None and len(units) == len(names) else None
                return names, np.asarray(f["data"][...], dtype=float), units
            missing = [n for n in names if n not in f]
            if missing:
                raise PdslError.at("BadCsv", f"{p}: column `{missing[0]}` is listed but has no dataset", _at(p))
            data = np.column_stack([np.asarray(f[n][...], dtype=float) for n in names]) if names else np.zeros((0, 0))
            return names, data, [unit(n) for n in names]
        names, arrays = [], []
        for name, obj in f.items():
            if _text(obj.attrs.get("NAME", b"")).startswith(_NETCDF_DIMENSION):
                continue  # a netCDF dimension without values (xarray writes one per dimension without coordinate)
            if isinstance(obj, h5py.Dataset) and obj.ndim == 1 and np.issubdtype(obj.dtype, np.number):
                names.append(name)
                arrays.append(np.asarray(obj[...], dtype=float))
        _same_length(p, names, arrays)
        return names, np.column_stack(arrays) if arrays else np.zeros((0, 0)), [unit(n) for n in names]


def _read_mat(scipy, p: Path):
    from scipy.io import loadmat

    m = loadmat(p)

    def strings(cells):
        return [str(np.asarray(c).ravel()[0]) if np.asarray(c).size else "" for c in np.asarray(cells).ravel()]

    if "data" in m and "columns" in m:
        names = strings(m["columns"])
        data = np.atleast_2d(np.asarray(m["data"], dtype=float))
        if data.shape[1] != len(names):
            raise PdslError.at("BadCsv", f"{p}: `data` has {data.shape[1]} columns but `columns` names {len(names)}", _at(p))
        units = strings(m["units"]) if "units" in m else []
        if units and len(units) != len(names):
            raise PdslError.at("BadCsv", f"{p}: `units` has {len(units)} entries but `columns` names {len(names)}", _at(p))
        return names, data, [u.strip() or None for u in units] or None
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


def write_other(tmp: Path, fmt: str, columns, data: np.ndarray, units=None) -> None:
    """Write the table into ``tmp`` (csvio's atomic temporary path) in format ``fmt``; ``units`` (``{column: unit}``)
    into the format's metadata (see the module's docstring)."""
    mod = _need(fmt)
    names = [str(c) for c in columns]
    units = dict(units or {})
    arr = np.asarray(data, dtype=float).reshape(-1, len(names)) if names else np.zeros((0, 0))
    if fmt == "parquet":
        import pyarrow.parquet as pq

        fields = [mod.field(n, mod.float64(), metadata={"unit": units[n]} if units.get(n) else None) for n in names]
        tab = mod.table([mod.array(arr[:, k], type=mod.float64()) for k in range(len(names))], schema=mod.schema(fields))
        pq.write_table(tab, tmp)
    elif fmt == "hdf5":
        bad = [n for n in names if "/" in n or n in (".", "") or n == _ROW]
        if bad:
            raise PdslError.at("BadOption", f"column `{bad[0]}` cannot be an HDF5 dataset name", hint="use CSV or Parquet")
        _write_hdf5(mod, tmp, names, arr, units)
    else:
        from scipy.io import savemat

        def cells(values):
            out = np.empty((1, len(values)), dtype=object)
            for k, v in enumerate(values):
                out[0, k] = v
            return out

        savemat(tmp, {"data": arr, "columns": cells(names), "units": cells([units.get(n, "") for n in names])},
                do_compression=True)


_ROW = "row"  # the HDF5 dimension of a table whose `t` is not one increasing time axis


def _write_hdf5(h5py, tmp: Path, names: list[str], arr: np.ndarray, units: dict) -> None:
    """One dataset per column, netCDF-4 compatible: dimension scales, ``units`` attributes, creation order."""
    t = arr[:, names.index("t")] if "t" in names else None
    axis = "t" if t is not None and "traj" not in names and (len(t) < 2 or bool(np.all(np.diff(t) > 0))) else None
    with h5py.File(tmp, "w", track_order=True) as f:
        if axis is None:  # a netCDF dimension without values (what netCDF-4 and h5netcdf write for one)
            dim = f.create_dataset(_ROW, shape=(len(arr),), dtype="f4")
            dim.make_scale(f"{_NETCDF_DIMENSION}.{len(arr):10d}")
        for k, n in enumerate(names):
            ds = f.create_dataset(n, data=arr[:, k])
            if units.get(n):
                ds.attrs["units"] = units[n]
            if n == axis:
                ds.make_scale(n)
                dim = ds
        for n in names:
            if n != axis:
                f[n].dims[0].attach_scale(dim)
        f.attrs["columns"] = np.array(names, dtype=h5py.string_dtype())


def write_csv_stdout(columns, data) -> None:
    """``-o -``: the CSV on standard output (the real one, also under :func:`summary_to_stderr`)."""
    out = _data_stdout or sys.stdout
    try:
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
