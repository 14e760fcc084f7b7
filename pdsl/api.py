"""The notebook-first Python API: the verbs of the ``pdsl`` command on a :class:`Model` object.

>>> import pdsl
>>> m = pdsl.load("models/driven_pendulum.phm")            # or pdsl.Model.from_text("model ... end")
>>> m.show()                                                # the derived equations (LaTeX in Jupyter)
>>> run = m.simulate(10, 0.05, init={"theta": 0.4}, inputs={"tau": "0.5*sin(t)"})
>>> df = run.to_pandas(); fig = run.plot()
>>> fit = m.fit(df, free=["k", "c"])                        # a DataFrame, arrays or a CSV path
>>> fit.params, fit.stderr, fit.notes
>>> rhs = m.torch_module()                                  # the right-hand side as a torch.nn.Module

Everything heavy (sympy, CasADi, torch, matplotlib) is imported on first use, not by ``import pdsl``.
User errors are :class:`pdsl.diagnostics.PdslError` with located diagnostics, as on the command line.
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .diagnostics import PdslError

__all__ = ["load", "Model", "SimulationRun", "FitResult", "Equations"]


def load(path: str | Path, model: str | None = None, *, consts: Mapping[str, int] | None = None,
         formulation: str = "hamiltonian") -> Model:
    """Load a model from a ``.phm`` file (``model`` picks one when the file holds several).

    ``consts`` overrides ``const`` declarations (``{"N": 3}``); ``formulation`` chooses the
    Cartesian-mechanics form (``hamiltonian`` or ``lagrangian``). Errors in the file raise a
    :class:`~pdsl.diagnostics.PdslError` that prints ``file:line:col`` and the offending line."""
    from .limits import read_text

    p = Path(path)
    return Model(p, read_text(p, what="model file") if p.is_file() else None, model, consts, formulation)


@dataclass(frozen=True)
class Equations:
    """The derived equations of a model, rendered as text, Markdown or LaTeX (shown by Jupyter)."""

    text: str
    markdown: str
    latex: str

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return self.text

    def _repr_markdown_(self) -> str:
        return self.markdown

    def _repr_latex_(self) -> str:
        return self.latex


class Model:
    """A pdsl model: compiled on first use; ``show``, ``simulate``, ``fit``, ``evaluate``, ``torch_module``.

    Create one with :func:`pdsl.load` or :meth:`Model.from_text`."""

    def __init__(self, path: str | Path, text: str | None = None, model: str | None = None,
                 consts: Mapping[str, int] | None = None, formulation: str = "hamiltonian"):
        self.path = Path(path)
        self._text = text
        self._model_name = model
        self._consts = dict(consts or {})
        self._formulation = formulation
        self._compiled = None
        self._numeric = None
        self._check()

    @classmethod
    def from_text(cls, text: str, model: str | None = None, *, name: str = "model.phm",
                  consts: Mapping[str, int] | None = None, formulation: str = "hamiltonian") -> Model:
        """A model from ``.phm`` source text (errors are located in ``name``)."""
        return cls(Path(name), text, model, consts, formulation)

    # ---- compilation (lazy)
    def _options(self, numeric: bool = False):
        from .pipeline import CompileOptions

        return CompileOptions(model=self._model_name, consts=tuple(sorted(self._consts.items())),
                              formulation=self._formulation, numeric=numeric)

    def _check(self) -> None:
        from .pipeline import load_models, select_model

        if self._text is None and not self.path.is_file():
            from .diagnostics import Span

            raise PdslError.at("FileNotFound", f"no such file: {self.path}", Span.point(str(self.path), 1, 1))
        models = load_models(self.path, text=self._text, consts=self._consts)
        self.model = select_model(models, self._model_name, str(self.path))

    @property
    def compiled(self):
        """The :class:`pdsl.pipeline.Compiled` stages (model, symbolic system)."""
        if self._compiled is None:
            from .pipeline import compile_model

            self._compiled = compile_model(self.path, self._options(), text=self._text) if self._text is not None \
                else compile_model(self.path, self._options())
        return self._compiled

    @property
    def system(self):
        """The lowered :class:`~pdsl.lower.ir.SymbolicSystem` (sympy equations with their origins)."""
        from . import show  # noqa: F401 (registers how Jupyter shows the system: the IR does not import its display)

        return self.compiled.system

    @property
    def numeric(self):
        """The CasADi functions (:class:`~pdsl.backend.functions.NumericSystem`)."""
        if self._numeric is None:
            from .backend.functions import to_casadi

            self._numeric = to_casadi(self.system)
        return self._numeric

    @property
    def name(self) -> str:
        return self.model.name

    @property
    def params(self) -> dict[str, float]:
        """Parameter names and default values."""
        num = self.numeric
        return {n: float(v) for n, v in zip(num.p_names[: len(num.system.params)], num.p_default)}

    @property
    def states(self) -> tuple[str, ...]:
        """The state columns as ``show`` and the CSV files name them."""
        return tuple(self.numeric.report_names)

    @property
    def inputs(self) -> tuple[str, ...]:
        """Exogenous inputs (to give to ``simulate``/``fit``)."""
        return tuple(self.numeric.u_names)

    # ---- show
    def show(self, format: str | None = None, *, simplify: bool = True) -> Equations | str:
        """The derived equations, each traced to its model line.

        Without ``format`` an :class:`Equations` object (Jupyter renders its LaTeX; ``print`` gives
        text); with ``format`` one of ``text``, ``markdown``, ``latex`` the string itself."""
        from .show import render_system

        if format is not None:
            return render_system(self.system, format, simplify=simplify)
        return Equations(render_system(self.system, "text", simplify=simplify),
                         render_system(self.system, "markdown", simplify=simplify),
                         render_system(self.system, "latex", simplify=simplify))

    def _repr_markdown_(self) -> str:
        return self.show()._repr_markdown_()

    def _repr_latex_(self) -> str:
        return self.show()._repr_latex_()

    def __repr__(self) -> str:
        src = "text" if self._text is not None and not self.path.is_file() else str(self.path)
        return f"<pdsl.Model {self.model.name} from {src}>"

    # ---- simulate
    def _input_signals(self, num, inputs, grid):
        from .sim.simulate import input_from_expression

        out = {}
        for name, value in (inputs or {}).items():
            if name not in num.u_names:
                raise PdslError.at("BadOption", f"input `{name}`: the model has no exogenous input `{name}`",
                                   hint="exogenous inputs: " + (", ".join(num.u_names) or "none"))
            if isinstance(value, str):
                out[name] = input_from_expression(num, name, value)
            elif callable(value) or np.ndim(value) == 0:
                out[name] = _sampled_input(name, value, grid)
            else:
                raise PdslError.at("BadOption", f"input `{name}`: give an expression (str), a function of t or a number")
        return out

    def simulate(self, t_end: float, dt: float, *, init: Mapping[str, float] | None = None,
                 params: Mapping[str, float] | None = None, inputs: Mapping[str, Any] | None = None,
                 integrator: str | None = None, rtol: float = 1e-8, atol: float | None = None,
                 substeps: int = 1) -> SimulationRun:
        """Integrate from t = 0 to ``t_end``, sampled every ``dt``.

        ``init``: start values by state name (``{"theta": 0.4, "der(theta)": 0}``; the others
        keep their model defaults); ``params``: parameter values; ``inputs``: per exogenous
        input an expression of t in pdsl syntax (``"0.5*sin(t)"``), a Python function of t
        (sampled ten times per ``dt`` and interpolated linearly) or a number. ``integrator``:
        ``auto`` (the default: DOP853 with a stiffness test that hands over to CVODES BDF, IDAS for DAEs, CVODES for
        events; :mod:`pdsl.sim.auto`), ``cvodes``, ``cvodes-bdf``, ``idas``, ``dop853``, ``rk4``, ``midpoint``,
        ``gauss2``...
        Returns a :class:`SimulationRun` (``to_pandas``, ``to_numpy``, ``plot``)."""
        from .sim.simulate import simulate, time_grid

        num = self.numeric
        grid = time_grid(float(t_end), float(dt))
        res = simulate(num, grid, x0=dict(init or {}), params=dict(params or {}),
                       inputs=self._input_signals(num, inputs, grid), rtol=rtol, atol=atol,
                       integrator=integrator, substeps=substeps)
        return SimulationRun(self, res)

    # ---- linearize
    def linearize(self, at: Mapping[str, Any] | None = None, inputs: Mapping[str, Any] | None = None, *,
                  trim: bool = False, open_loop: bool = False, params: Mapping[str, float] | None = None):
        """State-space matrices about an operating point (``pdsl linearize``, LANGUAGE.md §12).

        ``at``: state values (``{"theta": "pi"}``: a number, or text — a constant expression of the parameters);
        ``inputs``: exogenous input values (default 0); what is not given comes from the start values, or with
        ``trim`` from a steady-state solve; ``open_loop`` frees the inputs that have a feedback law; ``params``:
        parameter values. Returns a :class:`pdsl.linearize.Linearization` (``A``, ``B``, ``C``, ``D``,
        ``eigenvalues``, ``natural_frequency``, ``damping``, the ranks, ``point``; ``symbolic()``,
        ``to_control()``, ``to_dict()``). A point that is not an equilibrium gives a ``UserWarning``."""
        import warnings

        from .linearize.output import residual_text
        from .linearize.run import linearize_numeric

        lin = linearize_numeric(self.numeric, at=at, inputs=inputs, params=params, trim=trim, open_loop=open_loop)
        if not lin.is_equilibrium:
            warnings.warn(f"{self.name}: the operating point is not an equilibrium: {residual_text(lin)}", stacklevel=2)
        return lin

    # ---- fit and evaluate
    def fit(self, data, free=(), *, map: Mapping[str, str] | None = None, inputs: Mapping[str, Any] | None = None,
            noise: Mapping[str, float] | None = None, params: Mapping[str, float] | None = None,
            out: str | Path | None = None, verbose: bool = False, **options) -> FitResult:
        """Fit free parameters (and networks) to measured trajectories.

        ``data``: a CSV path, a pandas DataFrame, a dict of equal-length arrays, or a
        ``(columns, array)`` pair; columns as ``pdsl simulate`` writes them, or renamed with
        ``map={"time": "t", "run": "traj", "angle": "theta"}``. Unmeasured states (velocities)
        may be missing and samples irregular: every chunk's start state is then estimated.
        ``free``: parameter names; ``params``: start (free) or fixed values; ``inputs``: inputs
        that are not data columns, as expressions of t or Python functions of a time array;
        ``noise``: measurement σ per column (residual weights 1/σ); ``out``: output directory
        (default: a new temporary one). Other keywords are the settings of ``pdsl fit`` /
        :class:`pdsl.fit.FitConfig` (``chunk``, ``epochs``, ``method``, ``start``, ``shooting``...).
        Returns a :class:`FitResult`; its ``notes`` say what the data cannot determine."""
        from .fit import FitConfig, run_fit

        cfg_fields = set(FitConfig.__dataclass_fields__)
        unknown = sorted(set(options) - cfg_fields)
        if unknown:
            raise PdslError.at("BadOption", f"fit: unknown setting{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}",
                               hint="settings: " + ", ".join(sorted(cfg_fields - {'data', 'free', 'param', 'map', 'input', 'noise'})))
        table = _as_table(data)
        cfg = FitConfig(data=table if table is not None else str(data), free=sorted(set(free) if not isinstance(free, str)
                                                                                     else {free}),
                        param={k: float(v) for k, v in (params or {}).items()}, map=dict(map) if map else None,
                        input=dict(inputs) if inputs else None, noise=dict(noise) if noise else None, **options)
        out_dir = Path(out) if out is not None else Path(tempfile.mkdtemp(prefix="pdsl-fit-"))
        lines: list[str] = []
        label = self.path if self.path.suffix == ".phm" else self.path.with_suffix(".phm")
        summary = run_fit(str(label), self._model_name, cfg, out_dir, text=self._text,  # the text itself: no temp file
                          consts=self._consts or None, progress=verbose,
                          log=print if verbose else lines.append)
        return FitResult(summary, out_dir, "\n".join(lines))

    def evaluate(self, data, *, params: str | Path | Mapping[str, float] | FitResult | None = None,
                 map: Mapping[str, str] | None = None, integrator: str | None = None, rtol: float = 1e-9) -> dict:
        """The BENCHMARKS A6 metrics (``pdsl evaluate``) of rollouts from each trajectory's first sample.

        ``params``: a ``params.json`` path, a :class:`FitResult`, or a dict of values. Returns the
        summary dict (mean, 95 % half-width, min, max per metric) with ``scores`` (per trajectory)."""
        from .fit.data import load_dataset
        from .fit.evaluate import evaluate

        num = self.numeric
        if isinstance(params, FitResult):
            params = params.params_file
        if isinstance(params, (str, Path)):
            from .fit.run import apply_fitted

            num = apply_fitted(num, params)
        elif params:
            num = _with_defaults(num, params)
        table = _as_table(data)
        ds = load_dataset(table if table is not None else str(data), num, columns=dict(map) if map else None)
        scores, summary = evaluate(num, ds, integrator=integrator, rtol=rtol)
        return {**summary, "scores": scores}

    # ---- torch
    def torch_module(self, params: Mapping[str, float] | None = None, *, trainable: bool = True):
        """The right-hand side f(t, x, u) as a ``torch.nn.Module`` (float64, batched: x is (B, nx)).

        The physical parameters (and network weights) are one ``nn.Parameter`` vector ``p`` in the
        CasADi layout (``module.p_names``); ``params`` overrides default values. Needs torch."""
        try:
            import torch
        except ImportError:
            raise PdslError.at("MissingDependency", "torch_module needs torch",
                               hint='install it with `pip install torch` (the "nn" extra)') from None
        from .backend.torch_backend import DTYPE, TorchSystem

        num = self.numeric
        p0 = num.param_vector(dict(params or {}))
        ts = TorchSystem(self.system)
        return _make_rhs_module(torch, ts, p0, tuple(num.p_names), DTYPE, trainable)


def _make_rhs_module(torch, ts, p0, p_names, dtype, trainable):
    class RHS(torch.nn.Module):
        """dx/dt = f(t, x, u; p) of a pdsl model; ``forward(t, x, u=None)`` with x of shape (B, nx)."""

        def __init__(self):
            super().__init__()
            self.system = ts
            self.p_names = p_names
            self.x_names, self.u_names = ts.x_names, ts.u_names
            p = torch.tensor(np.asarray(p0, dtype=float), dtype=dtype)
            if trainable:
                self.p = torch.nn.Parameter(p)
            else:
                self.register_buffer("p", p)

        def forward(self, t, x, u=None):
            x = torch.as_tensor(x, dtype=dtype)
            squeeze = x.ndim == 1
            if squeeze:
                x = x[None, :]
            t = torch.as_tensor(t, dtype=dtype).reshape(-1).expand(x.shape[0]) if np.ndim(t) == 0 or \
                torch.as_tensor(t).numel() == 1 else torch.as_tensor(t, dtype=dtype)
            if u is not None:
                u = torch.as_tensor(u, dtype=dtype)
                u = u[None, :] if u.ndim == 1 else u
            elif ts.u_names:
                u = torch.zeros(x.shape[0], len(ts.u_names), dtype=dtype)
            out = ts.rhs(t, x, ts.bind(self.p), u)
            return out[0] if squeeze else out

        def extra_repr(self) -> str:
            return f"states={list(self.x_names)}, inputs={list(self.u_names)}, params={len(self.p_names)}"

    return RHS()


def _with_defaults(num, values: Mapping[str, float]):
    from dataclasses import replace

    p = num.param_vector(dict(values))
    return replace(num, p_default=p)


def _sampled_input(name: str, value, grid: np.ndarray):
    """A Python function of t (or a number) as an input signal: sampled 10× per output step, linear in between."""
    import casadi as ca

    from .sim.simulate import InputSignal

    fine = np.linspace(grid[0], grid[-1], 10 * (len(grid) - 1) + 1) if len(grid) > 1 else np.asarray(grid, dtype=float)
    if callable(value):
        try:
            v = np.asarray([float(value(float(t))) for t in fine])
        except Exception as exc:
            raise PdslError.at("BadOption", f"input `{name}`: the function raised {type(exc).__name__}: {exc}",
                               hint="an input function takes t (a float) and returns a number") from None
    else:
        v = np.full(len(fine), float(value))
    if not np.all(np.isfinite(v)):
        raise PdslError.at("BadOption", f"input `{name}`: the function returned a value that is not finite")
    if len(fine) < 2:
        const = float(v[0])
        return InputSignal(name, lambda t, x, p: const, f"{name} = {const}")
    f = ca.interpolant(f"u_{name}", "linear", [fine], v)
    return InputSignal(name, lambda t, x, p: f(t), f"python function {getattr(value, '__name__', 'value')}")


def _as_table(data):
    """A DataFrame, dict of arrays or (columns, array) as an in-memory table; None for a path."""
    from .data.csvio import table_from_columns

    if isinstance(data, (str, Path)):
        return None
    if hasattr(data, "data_vars") and hasattr(data, "to_dataframe"):  # xarray Dataset (SimulationRun.to_xarray)
        names = [*map(str, data.coords), *map(str, data.data_vars)]
        units = {n: str(data[n].attrs["units"]) for n in names if data[n].attrs.get("units")}
        df = data.to_dataframe().reset_index()
        return table_from_columns(list(map(str, df.columns)), df.to_numpy(dtype=float), "<Dataset>", units=units)
    if hasattr(data, "columns") and hasattr(data, "to_numpy"):  # pandas DataFrame (units in attrs["units"])
        units = getattr(data, "attrs", {}).get("units")
        return table_from_columns(list(data.columns), data.to_numpy(dtype=float), "<DataFrame>",
                                  units=units if isinstance(units, Mapping) else None)
    if isinstance(data, Mapping):
        cols = list(data)
        return table_from_columns(cols, np.column_stack([np.asarray(data[c], dtype=float) for c in cols]), "<arrays>")
    if isinstance(data, tuple) and len(data) == 2:
        return table_from_columns(list(data[0]), np.asarray(data[1], dtype=float), "<arrays>")
    raise PdslError.at("BadOption", f"fit: data must be a CSV path, a DataFrame, a dict of arrays or (columns, array), "
                       f"not {type(data).__name__}")


class SimulationRun:
    """The result of :meth:`Model.simulate`: columns as ``pdsl simulate`` writes them."""

    def __init__(self, model: Model, result):
        self.model, self.result = model, result
        self.columns, self.data = result.columns()
        self.units = result.column_units()  # {column: unit} (t in s) for a model with units; names never carry them

    @property
    def t(self) -> np.ndarray:
        return self.result.t

    def __getitem__(self, name: str) -> np.ndarray:
        """One column by name (``run["theta"]``)."""
        if name not in self.columns:
            raise KeyError(f"{name!r}: columns are {self.columns}")
        return self.data[:, self.columns.index(name)]

    def to_numpy(self) -> np.ndarray:
        """(samples, columns) array; column names in ``.columns``."""
        return self.data.copy()

    def to_pandas(self):
        """A pandas DataFrame with the CSV's columns (t, states, outputs, inputs); the units in
        ``df.attrs["units"]`` (``{column: unit}``), which :meth:`Model.fit` reads back."""
        import pandas as pd

        df = pd.DataFrame(self.data, columns=list(self.columns))
        df.attrs["units"] = dict(self.units)
        return df

    def to_xarray(self):
        """An ``xarray.Dataset`` with the coordinate ``t`` and one variable per other column, each with its unit
        as the attribute ``units`` (the netCDF/CF name, as in the HDF5 files pdsl writes). Needs xarray."""
        try:
            import xarray as xr
        except ImportError:
            raise PdslError.at("MissingDependency", "to_xarray needs the Python package `xarray`, which is not installed",
                               hint='pip install "pdsl[xarray]" (or to_pandas(), which needs pandas only)') from None
        t = self.data[:, self.columns.index("t")]
        variables = {c: ("t", self.data[:, k], {"units": self.units[c]} if c in self.units else {})
                     for k, c in enumerate(self.columns) if c != "t"}
        return xr.Dataset(variables, coords={"t": ("t", t, {"units": "s"} if "t" in self.units else {})},
                          attrs={"model": self.model.name})

    def to_csv(self, path: str | Path) -> Path:
        """Write the table ``pdsl fit`` reads (atomically): CSV, or Parquet/HDF5/MATLAB by the extension; the units
        in the format's metadata (for CSV the sidecar ``NAME.units.csv``)."""
        from .data.csvio import write_table

        write_table(path, self.columns, self.data, self.units)
        return Path(path)

    def plot(self, names=None, *, ax=None, **kw):
        """Trajectories against time as a matplotlib Figure: states, outputs (and ``--power`` columns), the energy
        drift E(t) − E(0) or the energy balance, inputs. ``names``: only these columns (``"energy"`` too), one
        panel each; ``ax``: all of them in that Axes (returns its Figure)."""
        from .sim.plot import trajectory_figure

        return trajectory_figure(self.result, title=self.model.name, names=names, ax=ax, **kw)

    def plot_path(self, x: str | None = None, y: str | None = None, *, ax=None):
        """A planar path: column ``y`` against column ``x``; without them the paths of the model's drawn points and
        bodies (its picture), or the columns ``x``, ``y``."""
        from .sim.plot import path_figure

        return path_figure(self.result, self.model.system, x, y, ax=ax, title=self.model.name)

    def plot_phase(self, pairs=None, *, ax=None):
        """Phase portraits: each coordinate against its rate (``q``/``der(q)``, ``b.x``/``b.vx``) or momentum;
        ``pairs``: ``("theta", "der(theta)")`` or a list of such pairs."""
        from .sim.plot import phase_figure

        return phase_figure(self.result, self.model.system, pairs, ax=ax, title=self.model.name)

    def animate(self, path: str | Path | None = None, **kw):
        """The model's picture (bodies, ``draw`` statements) animated: written as a GIF or an HTML page when
        ``path`` ends in ``.gif`` or ``.html``; the animation object (a player in Jupyter)."""
        from .sim.plot import animate_bodies

        return animate_bodies(self.result, self.model.system, path, **kw)

    def snapshots(self, n: int = 4, *, ax=None):
        """The model's picture at ``n`` instants, as a Figure (one panel each, or overlaid in ``ax``)."""
        from .sim.plot import mechanism_figure

        return mechanism_figure(self.result, self.model.system, n=n, ax=ax)

    def __repr__(self) -> str:
        return f"<SimulationRun {self.model.name}: {len(self.t)} samples, columns {', '.join(self.columns)}>"

    def _repr_markdown_(self) -> str:
        rows = [0, 1, 2, len(self.t) - 1] if len(self.t) > 4 else list(range(len(self.t)))
        head = "| " + " | ".join(f"`{c}`" for c in self.columns) + " |"
        lines = [f"**{self.model.name}**: {len(self.t)} samples, t = {self.t[0]:g} … {self.t[-1]:g}", "", head,
                 "|" + "---|" * len(self.columns)]
        for k, i in enumerate(rows):
            if k and i != rows[k - 1] + 1:
                lines.append("| " + " | ".join("…" for _ in self.columns) + " |")
            lines.append("| " + " | ".join(f"{v:.6g}" for v in self.data[i]) + " |")
        return "\n".join(lines)


@dataclass
class FitResult:
    """What :meth:`Model.fit` returns: values, standard errors, what the data cannot determine."""

    summary: dict
    out_dir: Path
    log: str = ""
    params: dict = field(init=False)
    stderr: dict = field(init=False)
    notes: list = field(init=False)

    def __post_init__(self):
        self.params = {n: self.summary["params"][n] for n in self.summary["free"]}
        self.stderr = dict(self.summary.get("stderr") or {})
        self.notes = list(self.summary.get("notes") or [])

    @property
    def params_file(self) -> Path:
        """``params.json`` of this fit (for ``evaluate``, ``compile --params``, ``fit --init``)."""
        return self.out_dir / "params.json"

    @property
    def all_params(self) -> dict:
        """Every physical parameter's value after the fit (free and fixed)."""
        return dict(self.summary["params"])

    def _rows(self):
        for n, v in self.params.items():
            se = self.stderr.get(n)
            yield n, v, se

    def __repr__(self) -> str:
        lines = [f"FitResult({self.summary['model']}: {'converged' if self.summary['converged'] else 'not converged'} "
                 f"after {self.summary['epochs']} epochs)"]
        lines += [f"  {n} = {v:.8g}" + (f" ± {se:.2g}" if se is not None else "") for n, v, se in self._rows()]
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)

    def _repr_markdown_(self) -> str:
        rows = ["| parameter | fitted | std. error |", "|---|---|---|"]
        rows += [f"| `{n}` | {v:.8g} | {'–' if se is None else f'{se:.2g}'} |" for n, v, se in self._rows()]
        notes = "".join(f"\n- {_md_text(n)}" for n in self.notes)
        return (f"**{self.summary['model']}**: {'converged' if self.summary['converged'] else 'not converged'} after "
                f"{self.summary['epochs']} epochs; training loss {self.summary['train_loss']:.4g}\n\n" + "\n".join(rows)
                + (f"\n\n**What the data determine:**{notes}" if notes else "") + f"\n\nOutputs: `{self.out_dir}`")


def _md_text(text: str) -> str:
    """Prose for a markdown cell: ``*`` and ``_`` of parameter combinations (``m1*l1``) kept, not emphasis."""
    return text.replace("\\", "\\\\").replace("*", "\\*").replace("_", "\\_")
