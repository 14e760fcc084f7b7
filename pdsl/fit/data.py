"""Trajectory data for fitting: the CSV format ``pdsl simulate`` writes, checked cell by cell.

A file has a ``t`` column, the model's *shown* state columns (``b1.x``, ``b1.vx`` — the
names ``show`` and the CSV header use), optionally a ``traj`` column that numbers several
trajectories (``simulate --random-init`` writes it first), declared ``output`` columns, and
one column per exogenous ``input`` (sampled at the same times, linear in between).

What is fitted: the loss runs over the *observed* columns (by default every state and output
column present; ``observe`` narrows it). Every chunk starts from its first sample, so the
shown state columns must all be present (BENCHMARKS A5: z0 is a data sample).

Every problem is a ``BadTrajectoryData`` error located at file, row and column: unknown or
missing columns, non-increasing time, a trajectory shorter than one chunk, non-uniform
sampling (the fixed-step chunk loss of BENCHMARKS A5 takes one step per data interval). NaN, inf and
non-numbers are caught by :func:`pdsl.data.csvio.read_table` (``BadCsv``).

Measured data (``latent=True``, issue 16): columns are renamed first by a column map
(:func:`pdsl.data.csvio.map_columns`: ``time=t``, ``run=traj``, ...); shown state columns may be
missing (their values are ``NaN`` in ``Trajectory.S`` and the fit estimates every chunk's start
state, see :mod:`pdsl.fit.latent`); sampling may be irregular and differ between trajectories
(``Dataset.uniform`` is then False and ``dt`` is the median interval); inputs missing from the
file can be given as functions of time (``inputs``).
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, replace

import numpy as np

from ..backend.functions import NumericSystem
from ..data.csvio import Table, cell_span, map_columns, read_table, shown_value
from ..diagnostics import PdslError, Span

__all__ = ["Trajectory", "Dataset", "Chunks", "load_dataset", "split_validation", "make_chunks", "whole_trajectories"]

CODE = "BadTrajectoryData"
_DT_RTOL = 1e-6  # relative tolerance on the sampling interval


@dataclass(frozen=True)
class Trajectory:
    label: int  # the traj value in the file (0 when there is no traj column)
    first_line: int  # file line of its first sample
    t: np.ndarray  # (n,)
    S: np.ndarray  # (n, n_shown): the shown state columns, in the model's order
    Y: np.ndarray  # (n, n_obs): the observed columns
    U: np.ndarray  # (n, n_u): exogenous inputs
    # (n, n_obs): per-sample residual factors 1/σ_i of the columns with relative (--noise theta=5%) or per-sample
    # (--noise theta=COLUMN) noise, 1 elsewhere; None: no such column
    weights: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.t)


@dataclass(frozen=True)
class Dataset:
    path: str
    shown: tuple[str, ...]
    observed: tuple[str, ...]
    inputs: tuple[str, ...]
    dt: float
    trajectories: tuple[Trajectory, ...]
    uniform: bool = True  # one sampling interval dt everywhere; else dt is the median interval
    measured: tuple[str, ...] | None = None  # shown columns present in the data (None: all)

    @property
    def latent(self) -> tuple[str, ...]:
        """Shown state columns that are not measured (their start values are estimated)."""
        return () if self.measured is None else tuple(n for n in self.shown if n not in self.measured)

    def subset(self, indices) -> "Dataset":
        return replace(self, trajectories=tuple(self.trajectories[i] for i in indices))


@dataclass(frozen=True)
class Chunks:
    """Windows of n steps (n + 1 samples) cut from trajectories (BENCHMARKS A4.2)."""

    S0: np.ndarray  # (N, n_shown): shown state at the chunk's first sample
    Y: np.ndarray  # (N, n_obs, n): observed columns at the n later samples
    U: np.ndarray  # (N, n_u, n + 1): inputs at every sample of the chunk
    T: np.ndarray  # (N, n + 1): sample times
    origin: np.ndarray  # (N, 2): trajectory index and first sample of each chunk
    Y0: np.ndarray | None = None  # (N, n_obs): observed columns at the first sample (latent starts compare it too)
    W: np.ndarray | None = None  # (N, n_obs, n + 1): per-sample residual factors, first sample included (None: all 1;
    # 0 marks the padding of a trajectory shorter than its chunk, :func:`whole_trajectories`)

    def __len__(self) -> int:
        return self.S0.shape[0]

    @property
    def steps(self) -> int:
        return self.T.shape[1] - 1

    def take(self, idx) -> "Chunks":
        return Chunks(self.S0[idx], self.Y[idx], self.U[idx], self.T[idx], self.origin[idx],
                      None if self.Y0 is None else self.Y0[idx], None if self.W is None else self.W[idx])

    @property
    def compared(self) -> int:
        """How many residual entries carry data (padding excluded; the first sample included)."""
        n_obs = self.Y.shape[1]
        return int(np.count_nonzero(self.W)) if self.W is not None else len(self) * n_obs * (self.steps + 1)


# ---------------------------------------------------------------- locating cells
def _cell_span(path: str, line: int, column: int) -> Span:
    """The span of cell ``column`` (0-based) on file line ``line`` (1-based)."""
    return cell_span(path, line, column)


def _error(path: str, line: int, column: int | None, message: str, hint: str | None = None) -> PdslError:
    span = _cell_span(path, line, column) if column is not None else Span.point(path, line, 1)
    return PdslError.at(CODE, message, span, hint)


# ---------------------------------------------------------------- loading
def load_dataset(path, num: NumericSystem, *, observe=None, min_samples: int = 2, columns=None,
                 inputs=None, latent: bool = False, noise=None) -> Dataset:
    """Read and check trajectory data against the model ``num`` (see the module docstring).

    ``path`` is a CSV path or a :class:`~pdsl.data.csvio.Table` (what the Python API builds from a
    DataFrame or arrays); ``columns`` maps file columns to model names (``{"time": "t"}``);
    ``inputs`` maps input names to functions of a time array, for inputs that are not columns;
    ``latent=True`` accepts missing state columns and irregular sampling (measured data); ``noise`` maps observed
    columns to their noise: σ (a number, used as a column weight by the loss), ``"5%"`` (relative: σ_i = 5 % of
    |value|) or the name of a column of σ_i per sample — the last two give :attr:`Trajectory.weights`."""
    table = path if isinstance(path, Table) else read_table(path)
    table = map_columns(table, columns)
    inputs = dict(inputs or {})
    per_sample = {k: v for k, v in (noise or {}).items() if isinstance(v, str)}
    sigma_columns = tuple(v for v in per_sample.values() if not v.endswith("%"))
    cols = _check_columns(table, num, observe, latent=latent, given_inputs=tuple(inputs), extra=sigma_columns)
    table = _model_units(table, num)
    observed = cols["observed"]
    measured = tuple(n for n in num.report_names if n in table.columns)
    groups = _split_trajectories(table)
    trajs = []
    dt = None
    intervals = []
    uniform = True
    for label, rows in groups:
        t = table.data[rows, table.columns.index("t")]
        first_line = int(rows[0]) + 2
        _check_time(table, t, first_line)
        if latent:
            intervals.append(np.diff(t))
            if len(t) >= 2:
                ref = float(intervals[0][0]) if dt is None else dt
                dt = ref
                if np.any(np.abs(np.diff(t) - ref) > _DT_RTOL * ref + 1e-12):
                    uniform = False
        else:
            dt = _check_sampling(table, t, first_line, dt)
        if len(t) < min_samples:
            where = table.columns.index("traj") if "traj" in table.columns else table.columns.index("t")
            raise _error(
                table.path, first_line, where,
                f"trajectory {label} has {len(t)} samples; a chunk of {min_samples - 1} steps needs {min_samples}",
                "use a shorter --chunk, or drop this trajectory",
            )
        pick = lambda names: table.data[np.ix_(rows, [table.columns.index(c) for c in names])]  # noqa: E731
        S = np.full((len(rows), len(num.report_names)), np.nan)
        for k, name in enumerate(num.report_names):
            if name in table.columns:
                S[:, k] = table.data[rows, table.columns.index(name)]
        U = np.zeros((len(rows), len(num.u_names)))
        for k, name in enumerate(num.u_names):
            U[:, k] = table.data[rows, table.columns.index(name)] if name in table.columns else _input_values(inputs, name, t)
        trajs.append(Trajectory(label, first_line, t, S, pick(observed), U,
                                _sample_weights(table, rows, observed, per_sample, first_line)))
    if per_sample:
        _check_relative(table, trajs, observed, per_sample)
    if latent and not uniform:
        dt = float(np.median(np.concatenate(intervals)))
    return Dataset(table.path, num.report_names, observed, num.u_names, float(dt if dt is not None else 1.0), tuple(trajs),
                   uniform=uniform, measured=measured if latent else None)


def _sample_weights(table: Table, rows, observed, per_sample: dict, first_line: int) -> np.ndarray | None:
    """(n, n_obs) factors 1/σ_i for the columns with relative or per-sample noise (1 for the others)."""
    if not per_sample:
        return None
    W = np.ones((len(rows), len(observed)))
    for name, spec in per_sample.items():
        if name not in observed:
            raise PdslError.at("BadOption", f"--noise {name}: `{name}` is not an observed column",
                               hint="observed columns: " + ", ".join(observed))
        k = observed.index(name)
        y = table.data[rows, table.columns.index(name)]
        if spec.endswith("%"):
            W[:, k] = 1.0 / (float(spec[:-1]) / 100.0 * np.abs(np.where(y == 0, np.nan, y)))
            continue
        col = table.columns.index(spec)
        sig = table.data[rows, col]
        bad = np.flatnonzero(~(np.isfinite(sig) & (sig > 0)))
        if bad.size:
            r = int(bad[0])
            raise _error(table.path, first_line + r, col,
                         f"noise column `{shown_value(spec)}` holds {sig[r]:g}: a noise level σ must be a positive number",
                         f"every sample of `{shown_value(name)}` needs its σ in `{shown_value(spec)}` (> 0)")
        W[:, k] = 1.0 / sig
    return W


def _check_relative(table: Table, trajs, observed, per_sample: dict) -> None:
    """A relative noise (σ_i = p % of |value|) needs a column that keeps one sign and never reaches 0."""
    for name, spec in per_sample.items():
        if not spec.endswith("%"):
            continue
        k = observed.index(name)
        col = table.columns.index(name)
        values = np.concatenate([tr.Y[:, k] for tr in trajs])
        sign = np.sign(values[np.flatnonzero(values)[0]]) if np.any(values != 0) else 0.0
        for tr in trajs:
            y = tr.Y[:, k]
            bad = np.flatnonzero((y == 0) | (np.sign(y) != sign))
            if bad.size:
                r = int(bad[0])
                raise _error(table.path, tr.first_line + r, col,
                             f"--noise {name}={spec}: `{shown_value(name)}` is {y[r]:g} here; a relative noise needs a "
                             "column that stays on one side of zero (σ = p % of |value| would be 0 or meaningless)",
                             f"give an absolute σ (--noise {name}=0.01) or a column of σ per sample (--noise {name}=COLUMN)")


def _input_values(inputs, name: str, t: np.ndarray) -> np.ndarray:
    """An input given as a function of time, sampled at ``t`` (a scalar or an array of len(t))."""
    fn = inputs[name]
    try:
        v = np.asarray(fn(t), dtype=float)
    except PdslError:
        raise
    except Exception as exc:  # a user's callable failing
        raise PdslError.at("BadOption", f"input `{name}`: the function raised {type(exc).__name__}: {exc}",
                           hint="an input function takes an array of times and returns one value per time") from None
    if v.ndim == 0:
        v = np.full(len(t), float(v))
    if v.shape != (len(t),) or not np.all(np.isfinite(v)):
        raise PdslError.at("BadOption", f"input `{name}`: expected {len(t)} finite values, got shape {v.shape}",
                           hint="an input function takes an array of times and returns one value per time")
    return v


def _model_units(table: Table, num: NumericSystem) -> Table:
    """``table`` with its columns in the units the model declares (pdsl.data.units.to_model_units: converted with
    pint, ``mm`` -> ``m``, ``deg`` -> ``rad``; a different dimension, or without pint a different unit, is an
    error at the cell that names the column's unit)."""
    from ..data.units import to_model_units

    return to_model_units(table, dict(getattr(num.system, "units", ()) or ()), code=CODE)


def _check_columns(table: Table, num: NumericSystem, observe, latent: bool = False, given_inputs=(), extra=()) -> dict:
    """Every column known (``extra``: the noise columns), the required ones present; returns the observed column names."""
    for name in extra:
        if name not in table.columns:
            raise PdslError.at("BadOption", f"--noise: `{shown_value(name)}` is neither a number, a percentage nor a "
                               f"column of {table.path}", _cell_span(table.path, 1, 0),
                               "give σ as a number (0.01), relative (5%), or name a column of σ per sample")
    known = {"t", "traj", *num.report_names, *num.y_names, *num.u_names, *extra}
    for k, name in enumerate(table.columns):
        if name not in known:
            unused = sorted(known - set(table.columns)) or sorted(known)
            close = difflib.get_close_matches(name, unused, n=1)
            hint = f"did you mean `{close[0]}`?" if close else "columns: t, traj, " + ", ".join(
                [*num.report_names, *num.y_names, *num.u_names])
            if latent:
                hint += f"; rename columns with --map {shown_value(name)}=NAME"
            raise _error(table.path, 1, k, f"unknown column `{shown_value(name)}`: not a state, output or input of {num.system.name}", hint)
    if "t" not in table.columns:
        raise _error(table.path, 1, None, "no `t` column",
                     "a trajectory CSV starts with the time: t,b1.x,...; name another time column with --map time=t")
    for name in given_inputs:
        if name not in num.u_names:
            raise PdslError.at("BadOption", f"--input {name}: the model has no exogenous input `{name}`",
                               hint="exogenous inputs: " + (", ".join(num.u_names) or "none"))
        if name in table.columns:
            raise _error(table.path, 1, table.columns.index(name), f"input `{name}` is both a column of the data and given as --input",
                         "give each input once: drop the column or the --input")
    for role, names, hint in (
        ("state", () if latent else num.report_names,
         "every chunk starts from a full data sample: fit with --start estimate to estimate unmeasured states"),
        ("input", tuple(n for n in num.u_names if n not in given_inputs),
         "exogenous inputs are read from the data, one column per input, or given as --input NAME=EXPR"),
    ):
        missing = [n for n in names if n not in table.columns]
        if missing:
            listed = ", ".join(f"`{n}`" for n in missing)
            raise _error(table.path, 1, None, f"missing {role} column{'s' if len(missing) > 1 else ''} {listed}", hint)
    candidates = [c for c in table.columns if c in num.report_names or c in num.y_names]
    if observe:
        for name in observe:
            if name not in candidates:
                raise PdslError.at(
                    CODE, f"observe: `{name}` is not a state or output column of {table.path}",
                    _cell_span(table.path, 1, 0), "observed columns: " + ", ".join(candidates),
                )
        candidates = [c for c in candidates if c in observe]
    if not candidates:
        raise _error(table.path, 1, None, f"no state or output column of {num.system.name} in the data: nothing to compare",
                     "columns: " + ", ".join([*num.report_names, *num.y_names]) + "; rename file columns with --map FILE=NAME")
    return {"observed": tuple(candidates)}


def _split_trajectories(table: Table) -> list[tuple[int, np.ndarray]]:
    """Row indices of each trajectory: contiguous blocks of equal ``traj`` values."""
    n = table.data.shape[0]
    if n == 0:
        raise _error(table.path, 1, None, "no data rows", "the file holds only a header")
    if "traj" not in table.columns:
        return [(0, np.arange(n))]
    c = table.columns.index("traj")
    traj = table.data[:, c]
    bad = np.nonzero(traj != np.round(traj))[0]
    if bad.size:
        raise _error(table.path, int(bad[0]) + 2, c, f"traj {float(traj[bad[0]])!r} is not an integer", "traj numbers the trajectories 0, 1, ...")
    starts = np.concatenate([[0], np.nonzero(np.diff(traj))[0] + 1])
    seen = set()
    groups = []
    for k, s in enumerate(starts):
        e = starts[k + 1] if k + 1 < len(starts) else n
        label = int(traj[s])
        if label in seen:
            raise _error(table.path, int(s) + 2, c, f"trajectory {label} continues here after other trajectories",
                         "keep each trajectory's rows together")
        seen.add(label)
        groups.append((label, np.arange(s, e)))
    return groups


def _check_time(table: Table, t: np.ndarray, first_line: int) -> None:
    bad = np.nonzero(np.diff(t) <= 0)[0]
    if bad.size:
        k = int(bad[0]) + 1
        raise _error(table.path, first_line + k, table.columns.index("t"),
                     f"time does not increase within a trajectory: t = {float(t[k])!r} after {float(t[k - 1])!r}",
                     "sort the samples by t; start a new trajectory with a new traj number")


def _check_sampling(table: Table, t: np.ndarray, first_line: int, dt: float | None) -> float:
    if len(t) < 2:
        return dt if dt is not None else 1.0
    steps = np.diff(t)
    ref = float(steps[0]) if dt is None else dt
    bad = np.nonzero(np.abs(steps - ref) > _DT_RTOL * ref + 1e-12)[0]
    if bad.size:
        k = int(bad[0]) + 1
        raise _error(table.path, first_line + k, table.columns.index("t"),
                     f"sampling interval {steps[k - 1]:.6g} differs from {ref:.6g}",
                     "fixed-step chunk losses take one step per data interval: resample to a uniform grid")
    return ref


# ---------------------------------------------------------------- splitting and chunking
def split_validation(ds: Dataset, fraction: float, seed: int) -> tuple[Dataset, Dataset]:
    """Hold out ``round(fraction · n)`` whole trajectories (at least one when fraction > 0 and n ≥ 2)."""
    n = len(ds.trajectories)
    if not 0 <= fraction < 1:
        raise PdslError.at("BadOption", f"validation fraction must be in [0, 1), got {fraction}")
    n_val = int(round(fraction * n))
    if fraction > 0 and n >= 2:
        n_val = min(max(n_val, 1), n - 1)
    else:
        n_val = 0
    order = np.random.default_rng(seed).permutation(n)
    val, train = sorted(order[:n_val].tolist()), sorted(order[n_val:].tolist())
    return ds.subset(train), ds.subset(val)


def add_noise(names, data: np.ndarray, sigma: float, seed: int, spare_t0: bool = False) -> np.ndarray:
    """``data`` with Gaussian noise σ·N(0, 1) on every column but ``t`` and ``traj`` (BENCHMARKS
    B5: additive noise at every time step), drawn from ``default_rng(seed)``; with ``spare_t0`` the
    first sample of every trajectory is left exact. Returns a new array."""
    out = np.array(data, dtype=float, copy=True)
    cols = [k for k, n in enumerate(names) if n not in ("t", "traj")]
    noise = sigma * np.random.default_rng(seed).standard_normal((out.shape[0], len(cols)))
    if spare_t0 and "t" in names:
        t = out[:, list(names).index("t")]
        first = np.ones(len(t), dtype=bool)
        if "traj" in names:
            tr = out[:, list(names).index("traj")]
            first[1:] = tr[1:] != tr[:-1]
        else:
            first[1:] = False
        noise[first] = 0.0
    out[:, cols] += noise
    return out


def random_windows(ds: Dataset, steps: int, rng: np.random.Generator) -> Chunks:
    """One window of ``steps`` intervals per trajectory, at a start drawn uniformly from ``rng``
    (BENCHMARKS B5: a random time step along each trajectory, a fresh draw every epoch)."""
    starts = [(j, int(rng.integers(0, len(tr) - steps))) for j, tr in enumerate(ds.trajectories) if len(tr) > steps]
    return _windows(ds, starts, steps) if starts else make_chunks(ds, steps)


def make_chunks(ds: Dataset, steps: int, stride: int | None = None) -> Chunks:
    """Every window of ``steps`` intervals starting at 0, stride, 2·stride, ... (stride = steps: disjoint)."""
    stride = steps if stride is None else stride
    return _windows(ds, [(j, s) for j, tr in enumerate(ds.trajectories) for s in range(0, len(tr) - steps, stride)], steps)


def whole_trajectories(ds: Dataset) -> Chunks:
    """One chunk per trajectory, from its first sample to its last: every sample is compared once. Trajectories
    shorter than the longest are padded (times continued at their last interval, inputs held, data 0) and the
    padding carries the residual factor 0 (:attr:`Chunks.W`), so it adds nothing to the fit."""
    trs = ds.trajectories
    if not trs:
        return _windows(ds, [], 1)
    L = max(len(tr) for tr in trs)
    n_obs = len(ds.observed)
    S0, Y, U, T, Y0, W = [], [], [], [], [], []
    for tr in trs:
        k = len(tr)
        pad = L - k
        dt_last = float(tr.t[-1] - tr.t[-2]) if k >= 2 else 1.0
        T.append(np.concatenate([tr.t, tr.t[-1] + dt_last * np.arange(1, pad + 1)]))
        Yt = np.zeros((n_obs, L - 1))
        Yt[:, : k - 1] = tr.Y[1:].T
        Y.append(Yt)
        U.append(np.concatenate([tr.U, np.repeat(tr.U[-1:], pad, axis=0)]).T if tr.U.size else np.zeros((0, L)))
        w = np.zeros((n_obs, L))
        w[:, :k] = 1.0 if tr.weights is None else tr.weights.T
        W.append(w)
        S0.append(tr.S[0])
        Y0.append(tr.Y[0])
    return Chunks(np.array(S0), np.array(Y), np.array(U), np.array(T), np.array([(j, 0) for j in range(len(trs))], dtype=int),
                  np.array(Y0), np.array(W) if any(len(tr) < L or tr.weights is not None for tr in trs) else None)


def _windows(ds: Dataset, starts, steps: int) -> Chunks:
    """The windows of ``steps`` intervals at ``starts`` ((trajectory, sample) pairs), stacked."""
    if not starts:
        n_obs, n_u = len(ds.observed), len(ds.inputs)
        return Chunks(np.zeros((0, len(ds.shown))), np.zeros((0, n_obs, steps)), np.zeros((0, n_u, steps + 1)),
                      np.zeros((0, steps + 1)), np.zeros((0, 2), dtype=int), np.zeros((0, n_obs)))
    trs = ds.trajectories
    weighted = any(tr.weights is not None for tr in trs)
    W = (np.array([(trs[j].weights if trs[j].weights is not None else np.ones_like(trs[j].Y))[s : s + steps + 1].T
                   for j, s in starts]) if weighted else None)
    return Chunks(np.array([trs[j].S[s] for j, s in starts]), np.array([trs[j].Y[s + 1 : s + steps + 1].T for j, s in starts]),
                  np.array([trs[j].U[s : s + steps + 1].T for j, s in starts]),
                  np.array([trs[j].t[s : s + steps + 1] for j, s in starts]), np.array(starts, dtype=int),
                  np.array([trs[j].Y[s] for j, s in starts]), W)
