"""Experiment settings for ``pdsl fit``: one frozen :class:`FitPlan`, from defaults, a TOML file and flags.

The fields of :class:`FitPlan` are the one declaration of the settings: the TOML keys are its field names, the
command-line flags that set a field are ``--`` + its name with ``-`` for ``_`` (``pdsl.cli.fit_cmd`` derives the
mapping; no table to keep in step), and the Python API's keywords are the same names. A plan is built once
(:func:`settings` merges TOML and flags; ``FitPlan(**settings)``), checked once (:func:`check_options`), and
never changed: the defaults that depend on the method (:func:`resolve_defaults`) and on the data and model
(``pdsl.fit.run.prepare``) each return a new plan with ``dataclasses.replace``. ``None`` in a field means
"chosen by pdsl" until the plan is resolved. ``FitConfig`` is the former name, kept for scripts.

Precedence: flag > TOML file > default. A TOML file holds the keys of :class:`FitPlan` at top
level (``data``, ``free``, ``method``, ``epochs``, ``init`` — a previous fit's ``params.json`` to
start from, ...), an optional ``[param]`` table of start values and optional ``[equilibrium]`` /
``[sparsity]`` tables (the regularisers of :mod:`pdsl.fit.regularize`); relative ``data`` and
``init`` paths are relative to the TOML file. Unknown keys and wrong types are ``BadConfig``
errors located at their line.
"""

from __future__ import annotations

import hashlib
import math
import re
import tomllib
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path

from ..diagnostics import PdslError, Span, register_source
from ..limits import read_text, toml_loads
from ..vocab import IMPLICIT_FIXED_STEP

__all__ = ["FitPlan", "FitConfig", "load_toml", "fingerprint", "resolve_defaults", "check_options", "noise_spec"]


@dataclass(frozen=True)
class FitPlan:
    data: str | None = None
    free: list[str] = field(default_factory=list)
    observe: list[str] | None = None
    profile: list[str] | None = None  # profile-likelihood intervals of these free parameters (pdsl.fit.profile)
    param: dict[str, float] = field(default_factory=dict)  # start values (free) or fixed values
    method: str = "auto"  # auto | gauss-newton | ipopt | adamw
    # single (chunks, BENCHMARKS A5) | multiple (segments linked by continuity constraints; ipopt)
    shooting: str = "single"
    hessian: str = "gauss-newton"  # ipopt: gauss-newton (2 JᵀJ of the residuals) | exact | limited-memory
    epochs: int | None = None  # default: 50 (gauss-newton), 200 (ipopt iterations), 2000 (adamw, BENCHMARKS A5)
    batch: int = 200  # BENCHMARKS A5 minibatch
    # default 4 (BENCHMARKS A3/A5: 5 samples per chunk); 20 when unmeasured states are estimated
    chunk: int | None = None
    stride: int | None = None  # default: chunk (disjoint chunks, BENCHMARKS A4.2)
    integrator: str = "rk4"  # BENCHMARKS A5: fixed-step RK4 on the data grid, as the CHNN authors' code does
    # switching surfaces on the state (`if` on states, sign): step-through (default: the integrator steps across them,
    # as written) | locate (each step locates the first surface it crosses, Filippov sliding: pdsl.numerics.events)
    switches: str = "step-through"
    substeps: int | None = None  # default: chosen from the sample spacing and time scales (physical fits), else 1
    project: int = 0  # Newton steps projecting each chunk's first sample onto the constraints
    loss: str = "auto"  # l1 (adamw, BENCHMARKS A5) | mse (gauss-newton, ipopt)
    lr: float = 3e-3
    lr_min: float = 0.0
    weight_decay: float = 1e-4
    seed: int = 0
    val_fraction: float | None = None  # default: 0.2 with networks, 0 for physical parameters alone
    tol: float = 1e-10
    threads: int = 1
    formulation: str = "hamiltonian"
    network_seed: int | None = None  # default: seed
    backend: str = "auto"  # auto | casadi | torch: how chunk losses are evaluated (pdsl.fit.torch_loss)
    equilibrium: dict | None = None  # [equilibrium] weight, at (pdsl.fit.regularize)
    sparsity: dict | None = None  # [sparsity] flows, weight, mode, epsilon, alpha, lambda0
    constraints: dict | None = None  # [constraints] weight: the constraint-residual penalty (pdsl.fit.regularize)
    momentum: dict | None = None  # [momentum] weight: the teacher-forced momentum loss, Eq. 18 (pdsl.fit.regularize)
    plots: bool = True  # loss.png and validation.png in the output directory (--no-plots: not drawn)
    init: str | None = None  # params.json of a previous fit: start values of parameters and networks
    start: str = "auto"  # chunk starts: data (first samples) | estimate (latent, pdsl.fit.latent) | auto
    map: dict | None = None  # [map] file column -> model name (time = "t", run = "traj", ...)
    noise: dict | None = None  # [noise] column -> σ (weight 1/σ), "5%" (relative) or a column of σ per sample
    input: dict | None = None  # [input] exogenous input -> expression of t (pdsl syntax), when not a data column
    implicit_solver: str | None = None  # midpoint/gauss2: fpi | newton (default: fpi on torch, newton on CasADi)
    fpi_iters: int | None = None  # fixed-point sweeps per step (default 6, BENCHMARKS B3.2)
    fpi_tol: float | None = None  # stop the sweeps at this step change (at most fpi_iters sweeps)
    gradient: str | None = None  # adjoint (discrete adjoint) | unrolled (backprop through the sweeps)
    dtype: str = "float64"  # torch backend: float64 | float32
    device: str = "cpu"  # torch backend: cpu | cuda | cuda:K
    # chunks (all disjoint chunks, BENCHMARKS A5) | random (one random chunk per trajectory per epoch, BENCHMARKS B5)
    window: str = "chunks"
    # cosine (BENCHMARKS A5) | plateau (ReduceLROnPlateau on the validation loss, BENCHMARKS B5)
    schedule: str = "cosine"
    patience: int = 10  # plateau: epochs without improvement before the lr is reduced (x factor)
    warmup: int = 0  # adamw: the lr rises linearly over this many epochs (lr·(k+1)/warmup in epoch k), then the schedule
    factor: float = 0.5  # plateau: lr reduction factor
    early_stop: int | None = None  # stop when the validation loss has not improved for this many epochs
    dropout: float | None = None  # training only (torch backend): rate after every hidden layer; None: each mlp(dropout = …)


FitConfig = FitPlan  # the former name (scripts and benchmarks construct it with keywords)

_TYPES = {f.name: f.type for f in fields(FitPlan)}
_NO_FINGERPRINT = {"epochs", "threads", "backend", "device", "plots"}  # may change between a run and its resumption


def _toml_error(path: str, text: str, key: str | None, message: str, hint: str | None = None,
                sub: str | None = None) -> PdslError:
    """Located at ``key = ...`` or the table ``[key]`` (at its ``sub = ...`` line when given)."""
    line = 1
    if key is not None:
        m = re.search(rf"^[ \t]*(?:{re.escape(key)}[ \t]*=|\[{re.escape(key)}\])", text, re.MULTILINE)
        if m and sub is not None:
            m = re.compile(rf"^[ \t]*{re.escape(sub)}[ \t]*=", re.MULTILINE).search(text, m.end()) or m
        if m:
            line = text.count("\n", 0, m.start()) + 1
    width = len(text.splitlines()[line - 1]) if text.splitlines() else 1
    return PdslError.at("BadConfig", message, Span.point(path, line, 1, max(width, 1)), hint)


def load_toml(path: str | Path) -> dict:
    """The settings of a TOML file, checked against :class:`FitPlan` (paths made absolute)."""
    p = Path(path)
    try:
        text = read_text(p, what="config file")
    except OSError as exc:
        raise PdslError.at("FileNotFound", f"cannot read config {p}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise PdslError.at("BadConfig", f"{p} is not UTF-8 text (byte {exc.start})", Span.point(str(p), 1, 1)) from None
    register_source(str(p), text)
    try:
        raw = toml_loads(text, str(p), "BadConfig")
    except tomllib.TOMLDecodeError as exc:
        m = re.search(r"line (\d+), column (\d+)", str(exc))
        span = Span.point(str(p), int(m.group(1)), int(m.group(2))) if m else None
        raise PdslError.at("BadConfig", f"{p} is not valid TOML: {str(exc).split(' (at')[0]}", span) from None
    out = {}
    for key, value in raw.items():
        if key not in _TYPES:
            raise _toml_error(str(p), text, key, f"unknown setting `{key}`", "settings: " + ", ".join(_TYPES))
        out[key] = _check_type(str(p), text, key, value)
    for key in ("data", "init"):
        if isinstance(out.get(key), str) and not Path(out[key]).is_absolute():
            out[key] = str((p.parent / out[key]).resolve())
    return out


def _check_type(path: str, text: str, key: str, value):
    typ = str(_TYPES[key])
    bad = lambda want: _toml_error(path, text, key, f"`{key}` must be {want}, got {value!r}")  # noqa: E731
    if key in ("free", "observe", "profile"):
        if not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
            raise bad("a list of names")
        return value
    if key in ("equilibrium", "sparsity", "constraints", "momentum"):
        from .regularize import check_table

        try:
            return check_table(key, value)
        except ValueError as exc:
            raise _toml_error(path, text, key, exc.args[0], sub=exc.args[1] if len(exc.args) > 1 else None) from None
    if key in ("map", "input"):
        if not (isinstance(value, dict) and all(isinstance(v, str) for v in value.values())):
            raise bad('a table of names, e.g. [map] time = "t"' if key == "map" else 'a table of expressions, e.g. [input] tau = "sin(t)"')
        return dict(value)
    if key == "noise":
        if not isinstance(value, dict):
            raise bad('a table, e.g. [noise] theta = 0.01 (or "5%", or the name of a column of σ per sample)')
        out = {}
        for k, v in value.items():
            try:
                out[k] = noise_spec(v)
            except ValueError as exc:
                raise _toml_error(path, text, key, f"[noise] {k}: {exc}", sub=k) from None
        return out
    if key == "param":
        if not (isinstance(value, dict) and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value.values())):
            raise bad("a table of numbers, e.g. [param] m1 = 1.0")
        return {k: float(v) for k, v in value.items()}
    if typ.startswith("bool"):
        if not isinstance(value, bool):
            raise bad("true or false")
        return value
    if typ.startswith("int"):
        if not isinstance(value, int) or isinstance(value, bool):
            raise bad("an integer")
        return value
    if typ.startswith("float"):
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise bad("a number")
        return float(value)
    if not isinstance(value, str):
        raise bad("a string")
    return value


def check_options(cfg: FitPlan) -> None:
    """Names and ranges of the settings that do not depend on the model (checked before it is compiled)."""
    if cfg.method not in ("auto", "gauss-newton", "ipopt", "adamw"):
        raise PdslError.at("BadOption", f"--method {cfg.method}: unknown", hint="auto, gauss-newton, ipopt or adamw")
    for name in ("epochs", "batch", "chunk", "stride", "substeps", "threads"):
        value = getattr(cfg, name)
        if value is not None and value < 1:
            raise PdslError.at("BadOption", f"{name} must be a positive integer, got {value}")
    if cfg.project < 0:
        raise PdslError.at("BadOption", f"project must be a non-negative integer, got {cfg.project}")
    for name in ("lr", "lr_min", "weight_decay", "tol", "val_fraction"):
        value = getattr(cfg, name)
        if value is not None and not math.isfinite(value):
            raise PdslError.at("BadOption", f"{name.replace('_', '-')} must be a finite number, got {value}")
    if not (cfg.lr > 0 and cfg.lr_min >= 0 and cfg.weight_decay >= 0 and cfg.tol >= 0):
        raise PdslError.at("BadOption", "lr must be positive; lr_min, weight_decay and tol non-negative")
    if cfg.val_fraction is not None and not 0 <= cfg.val_fraction < 1:
        raise PdslError.at("BadOption", f"validation fraction must be in [0, 1), got {cfg.val_fraction}")
    for name, value in cfg.param.items():
        if not math.isfinite(value):
            raise PdslError.at("BadOption", f"--param {name}: {value} is not finite")
    if cfg.data is None:
        raise PdslError.at("BadOption", "no data: give --data CSV (or `data = ...` in the --config file)")
    if cfg.switches not in ("step-through", "locate"):
        raise PdslError.at("BadOption", f"--switches {cfg.switches}: unknown", hint="step-through or locate")
    if cfg.start not in ("auto", "data", "estimate"):
        raise PdslError.at("BadOption", f"--start {cfg.start}: unknown", hint="auto, data or estimate")
    for name, sigma in (cfg.noise or {}).items():
        try:
            noise_spec(sigma)
        except ValueError as exc:
            raise PdslError.at("BadOption", f"--noise {name}: {exc}",
                               hint="σ as a number (0.01), relative (5%), or the name of a column of σ per sample") from None
    check_training_options(cfg)


def check_training_options(cfg: FitPlan) -> None:
    """The implicit solver, gradient, dtype/device, windows and schedule settings (issue 15)."""
    choices = {"implicit_solver": (None, "fpi", "newton"), "gradient": (None, "adjoint", "unrolled"),
               "dtype": ("float64", "float32"), "window": ("chunks", "random"), "schedule": ("cosine", "plateau")}
    for name, allowed in choices.items():
        value = getattr(cfg, name)
        if value not in allowed:
            raise PdslError.at("BadOption", f"--{name.replace('_', '-')} {value}: unknown",
                               hint="one of: " + ", ".join(a for a in allowed if a))
    if not re.fullmatch(r"cpu|cuda(:\d+)?", str(cfg.device)):
        raise PdslError.at("BadOption", f"--device {cfg.device}: unknown", hint="cpu, cuda or cuda:K")
    if cfg.fpi_iters is not None and cfg.fpi_iters < 1:
        raise PdslError.at("BadOption", f"--fpi-iters must be a positive integer, got {cfg.fpi_iters}")
    if cfg.fpi_tol is not None and not (math.isfinite(cfg.fpi_tol) and cfg.fpi_tol > 0):
        raise PdslError.at("BadOption", f"--fpi-tol must be a positive number, got {cfg.fpi_tol}")
    if not isinstance(cfg.warmup, int) or isinstance(cfg.warmup, bool) or cfg.warmup < 0:
        raise PdslError.at("BadOption", f"--warmup must be a non-negative integer (epochs), got {cfg.warmup!r}")
    if cfg.patience < 1 or cfg.early_stop is not None and cfg.early_stop < 1:
        raise PdslError.at("BadOption", "--patience and --early-stop must be positive integers")
    if cfg.dropout is not None and not (math.isfinite(cfg.dropout) and 0 <= cfg.dropout < 1):
        raise PdslError.at("BadOption", f"--dropout must be in [0, 1), got {cfg.dropout}")
    if not (math.isfinite(cfg.factor) and 0 < cfg.factor < 1):
        raise PdslError.at("BadOption", f"--factor must be in (0, 1), got {cfg.factor}")
    if cfg.gradient == "unrolled" and cfg.implicit_solver == "newton":
        raise PdslError.at("BadOption", "--gradient unrolled backpropagates through fixed-point sweeps, not Newton",
                           hint="use --implicit-solver fpi, or --gradient adjoint")
    implicit = (cfg.implicit_solver, cfg.fpi_iters, cfg.fpi_tol, cfg.gradient)
    if cfg.integrator not in IMPLICIT_FIXED_STEP and any(v is not None for v in implicit):
        raise PdslError.at("BadOption", f"--implicit-solver, --fpi-iters, --fpi-tol and --gradient apply to the implicit "
                           f"integrators, not {cfg.integrator}", hint="use --integrator midpoint or gauss2")
    if cfg.implicit_solver == "newton" and cfg.fpi_iters is not None:
        raise PdslError.at("BadOption", "--fpi-iters sets fixed-point sweeps; the solver is newton",
                           hint="drop --fpi-iters, or use --implicit-solver fpi")


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.\[\]()]*")


def noise_spec(value):
    """A --noise value checked: σ > 0 (a float), "p%" with 0 < p (relative), or a column name (a string)."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a noise level")
    if isinstance(value, (int, float)):
        if not (math.isfinite(value) and value > 0):
            raise ValueError(f"σ must be a positive finite number, got {value}")
        return float(value)
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{value!r} is not a noise level")
    text = value.strip()
    if text.endswith("%"):
        try:
            p = float(text[:-1])
        except ValueError:
            raise ValueError(f"`{text}` is not a percentage") from None
        if not (math.isfinite(p) and 0 < p < 1000):
            raise ValueError(f"a relative noise must be between 0 and 1000 %, got {text}")
        return f"{p:g}%"
    try:
        return noise_spec(float(text))
    except ValueError as exc:
        if "σ must be" in str(exc):
            raise
    if not _NAME.fullmatch(text):
        raise ValueError(f"`{text}` is neither a number, a percentage nor a column name")
    return text


def step_options(cfg: FitPlan) -> dict:
    """The implicit schemes' settings the user gave (each backend fills its own defaults)."""
    out = {}
    for key, name in (("solver", "implicit_solver"), ("n_iter", "fpi_iters"), ("tol", "fpi_tol"), ("gradient", "gradient")):
        if getattr(cfg, name) is not None:
            out[key] = getattr(cfg, name)
    return out


def resolve_defaults(cfg: FitPlan, has_networks: bool) -> FitPlan:
    """The plan with its method-dependent defaults filled (a new frozen plan; the settings checked once)."""
    check_options(cfg)
    if cfg.shooting not in ("single", "multiple"):
        raise PdslError.at("BadOption", f"--shooting {cfg.shooting}: unknown", hint="single or multiple")
    if cfg.hessian not in ("gauss-newton", "exact", "limited-memory"):
        raise PdslError.at("BadOption", f"--hessian {cfg.hessian}: unknown", hint="gauss-newton, exact or limited-memory")
    regularized = bool(cfg.equilibrium or cfg.sparsity or cfg.constraints or cfg.momentum)
    if cfg.method == "auto":
        if cfg.shooting == "multiple":
            cfg = replace(cfg, method="ipopt")
        else:
            cfg = replace(cfg, method="adamw" if has_networks or regularized else "gauss-newton")
    if cfg.shooting == "multiple" and cfg.method != "ipopt":
        raise PdslError.at("BadOption", f"multiple shooting is solved by ipopt, not {cfg.method}",
                           hint="use --method ipopt (continuity between segments is a constraint IPOPT enforces)")
    if regularized and cfg.method != "adamw":
        raise PdslError.at("BadOption", "the equilibrium, sparsity and constraint regularisers are trained with adamw",
                           hint="use --method adamw (Gauss–Newton minimises a sum of squared residuals only)")
    if cfg.loss == "auto":
        cfg = replace(cfg, loss="mse" if cfg.method in ("gauss-newton", "ipopt") else "l1")
    if cfg.loss not in ("mse", "l1", "huber", "soft-l1"):
        raise PdslError.at("BadOption", f"--loss {cfg.loss}: unknown", hint="mse, huber, soft-l1 or l1 (adamw)")
    if cfg.method == "gauss-newton" and cfg.loss not in ("mse", "huber", "soft-l1"):
        raise PdslError.at("BadOption", f"gauss-newton minimises a sum of squares (mse, or robust: huber, soft-l1), "
                           f"not {cfg.loss}", hint="use --loss mse|huber|soft-l1, or --method adamw")
    if cfg.method == "ipopt" and cfg.loss not in ("mse", "huber", "soft-l1"):
        raise PdslError.at("BadOption", f"ipopt minimises a sum of squares (mse, or robust: huber, soft-l1), not {cfg.loss}",
                           hint="use --loss mse|huber|soft-l1, or --method adamw for l1")
    if cfg.method == "adamw" and cfg.loss not in ("mse", "l1"):
        raise PdslError.at("BadOption", f"adamw trains on the l1 or mse loss, not {cfg.loss}",
                           hint="use --loss l1|mse; the robust losses huber and soft-l1 go with gauss-newton and ipopt")
    if cfg.method == "adamw":
        _require_torch()
    return replace(cfg, epochs=cfg.epochs if cfg.epochs is not None else {"gauss-newton": 50, "ipopt": 200}.get(cfg.method, 2000),
                   stride=cfg.stride if cfg.stride is not None or cfg.chunk is None else cfg.chunk,
                   network_seed=cfg.network_seed if cfg.network_seed is not None else cfg.seed)


def _require_torch() -> None:
    try:
        import torch  # noqa: F401
    except ImportError:
        raise PdslError.at("MissingDependency", "--method adamw needs torch",
                           hint='install it with `pip install torch==2.13.0` (the "nn" extra), or use --method gauss-newton') from None


def _digest(path: str | None) -> str | None:
    if path is None:
        return None
    if hasattr(path, "data") and hasattr(path, "columns"):  # an in-memory table (the Python API)
        return hashlib.sha256(repr(tuple(path.columns)).encode() + path.data.tobytes()).hexdigest()
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return None


def fingerprint(cfg: FitPlan, model_path: str, model_name: str, model_text: str | None = None) -> dict:
    """What must not change between a run and its ``--resume``: settings, model and data contents."""
    d = {k: v for k, v in asdict(cfg).items() if k not in _NO_FINGERPRINT}
    d["data"] = _digest(cfg.data)
    if cfg.input:  # Python callables (the API) by name: a checkpoint header is JSON
        d["input"] = {k: v if isinstance(v, str) else f"<python {getattr(v, '__name__', 'callable')}>" for k, v in cfg.input.items()}
    if cfg.init:
        d["init"] = _digest(cfg.init)
    d["model"] = {"name": model_name, "sha256": hashlib.sha256(model_text.encode("utf-8", "surrogatepass")).hexdigest()
                  if model_text is not None else _digest(model_path)}
    return d
