"""Which parameters are fitted, and in which coordinates the optimiser sees them.

The optimiser works on an unconstrained vector θ = (θ_phys, θ_w): one entry per free
physical parameter, then every network weight (BENCHMARKS A1.4: the networks are always
learned). Bounds from ``param k = 1 {lower = 0, upper = 10}`` are kept by reparametrisation,
never by clipping:

* ``lower = a`` only:   p = a + exp(θ)           (``lower = 0``: log space, as the CHNN authors' code (Finzi et al.) does
  for the CHNN masses, BENCHMARKS A1.4)
* ``upper = b`` only:   p = b − exp(θ)
* both:                 p = a + (b − a)·σ(θ)     (σ the logistic function)
* neither:              p = θ

Network weights are identity-mapped; their layout is that of :mod:`pdsl.backend.neural`.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

import casadi as ca
import numpy as np

from ..backend.functions import NumericSystem
from ..backend.neural import n_weights
from ..diagnostics import PdslError, Span, register_source, source_text
from ..limits import json_loads, read_bytes

__all__ = ["Transform", "ParamLayout", "make_layout", "FittedParams", "read_params_file", "apply_params_file"]

_NUDGE = 1e-9  # how far inside a bound a start value sitting on it is moved


@dataclass(frozen=True)
class Transform:
    """p = transform(θ) for one physical parameter with optional bounds."""

    lower: float | None
    upper: float | None

    @property
    def kind(self) -> str:
        if self.lower is not None and self.upper is not None:
            return "logistic"
        if self.lower is not None:
            return "exp-lower"
        if self.upper is not None:
            return "exp-upper"
        return "identity"

    def forward(self, theta):
        """θ -> p; works on floats, numpy arrays and CasADi symbols."""
        k = self.kind
        if k == "logistic":
            return self.lower + (self.upper - self.lower) / (1 + _exp(-theta))
        if k == "exp-lower":
            return self.lower + _exp(theta)
        if k == "exp-upper":
            return self.upper - _exp(theta)
        return theta

    def inverse(self, p: float) -> float:
        """p -> θ; a value on a bound is first moved just inside it."""
        k = self.kind
        if k == "logistic":
            span = self.upper - self.lower
            s = min(max((p - self.lower) / span, _NUDGE), 1 - _NUDGE)
            return float(np.log(s / (1 - s)))
        if k == "exp-lower":
            return float(np.log(max(p - self.lower, _NUDGE * max(1.0, abs(self.lower)))))
        if k == "exp-upper":
            return float(np.log(max(self.upper - p, _NUDGE * max(1.0, abs(self.upper)))))
        return float(p)

    def derivative(self, theta: float) -> float:
        """dp/dθ at θ (for standard errors by the delta method)."""
        k = self.kind
        if k == "logistic":
            s = 1 / (1 + np.exp(-theta))
            return float((self.upper - self.lower) * s * (1 - s))
        if k == "exp-lower":
            return float(np.exp(theta))
        if k == "exp-upper":
            return float(-np.exp(theta))
        return 1.0


def _exp(v):
    return ca.exp(v) if isinstance(v, (ca.SX, ca.MX, ca.DM)) else np.exp(v)


@dataclass(frozen=True)
class Network:
    """One neural component's slice of p: ``p[offset : offset + size]``."""

    name: str
    offset: int
    size: int


@dataclass(frozen=True)
class ParamLayout:
    """Maps θ (what the optimiser sees) to the model's full parameter vector p."""

    p_names: tuple[str, ...]
    p_base: np.ndarray  # values of the fixed parameters (and start values of the free ones)
    free_names: tuple[str, ...]  # free physical parameters
    free_index: tuple[int, ...]  # their positions in p
    transforms: tuple[Transform, ...]
    n_phys: int  # physical parameters in p (networks follow)
    networks: tuple[Network, ...]

    @property
    def n_free(self) -> int:
        return len(self.free_index)

    @property
    def n_weights(self) -> int:
        return len(self.p_names) - self.n_phys

    @property
    def n_theta(self) -> int:
        return self.n_free + self.n_weights

    def theta_from_p(self, p: np.ndarray) -> np.ndarray:
        phys = [tr.inverse(float(p[i])) for i, tr in zip(self.free_index, self.transforms)]
        return np.concatenate([np.array(phys, dtype=float), np.asarray(p[self.n_phys :], dtype=float)])

    def p_from_theta(self, theta: np.ndarray) -> np.ndarray:
        theta = np.asarray(theta, dtype=float).ravel()
        p = self.p_base.copy()
        for k, (i, tr) in enumerate(zip(self.free_index, self.transforms)):
            p[i] = tr.forward(theta[k])
        p[self.n_phys :] = theta[self.n_free :]
        return p

    def casadi_p(self, theta: ca.MX) -> ca.MX:
        """The MX expression of p in terms of θ (fixed parameters are constants)."""
        phys = self._phys_function()(theta[: self.n_free]) if self.n_free else ca.DM(self.p_base[: self.n_phys])
        if self.n_weights == 0:
            return phys
        return ca.vertcat(phys, theta[self.n_free :])

    def _phys_function(self) -> ca.Function:
        th = ca.SX.sym("theta", self.n_free)
        entries = [ca.SX(v) for v in self.p_base[: self.n_phys]]
        for k, (i, tr) in enumerate(zip(self.free_index, self.transforms)):
            entries[i] = tr.forward(th[k])
        return ca.Function("theta_to_p", [th], [ca.vertcat(*entries)])

    def free_values(self, p: np.ndarray) -> dict[str, float]:
        return {name: float(p[i]) for name, i in zip(self.free_names, self.free_index)}


def make_layout(num: NumericSystem, model, free: list[str] | tuple[str, ...], p_start: np.ndarray | None = None) -> ParamLayout:
    """Free parameters: those marked ``{free}`` in the model plus ``free`` (names, in p order)."""
    params = {q.name: q for q in model.params}
    n_phys = len(num.system.params)
    phys_names = num.p_names[:n_phys]
    wanted = {q.name for q in model.params if q.free}
    for name in free:
        if name not in params:
            hint = "parameters: " + (", ".join(phys_names) or "none")
            raise PdslError.at("BadOption", f"--free {name}: `{name}` is not a parameter of {num.system.name}", hint=hint)
        wanted.add(name)
    index = tuple(i for i, n in enumerate(phys_names) if n in wanted)
    transforms = tuple(Transform(params[phys_names[i]].lower, params[phys_names[i]].upper) for i in index)
    nets, offset = [], n_phys
    for nn in num.system.neural:
        if nn.n_in is None:
            continue
        size = n_weights(nn)
        nets.append(Network(nn.name, offset, size))
        offset += size
    base = np.array(num.p_default if p_start is None else p_start, dtype=float)
    layout = ParamLayout(
        p_names=num.p_names, p_base=base, free_names=tuple(phys_names[i] for i in index), free_index=index,
        transforms=transforms, n_phys=n_phys, networks=tuple(nets),
    )
    if layout.n_theta == 0:
        raise PdslError.at(
            "NothingToFit", f"{num.system.name} has no free parameters and no neural components",
            num.system.span, "mark parameters `{free}` in the model, or list them: --free m1,m2",
        )
    return layout


# ---------------------------------------------------------------- params.json (written by `pdsl fit`)
_MAX_PARAMS_BYTES = 64 * 2**20  # a params.json is a few kB; refuse anything absurd before parsing it


@dataclass(frozen=True)
class FittedParams:
    """A checked ``params.json``: finite values of known parameters, and the networks file (or None)."""

    path: str
    values: dict[str, float]
    networks: Path | None


def _json_span(path: str, text: str, pos: int, width: int = 1) -> Span:
    pos = max(0, min(pos, len(text)))
    line = text.count("\n", 0, pos) + 1
    col = pos - (text.rfind("\n", 0, pos) + 1) + 1
    end = text.find("\n", pos)
    room = (len(text) if end < 0 else end) - pos
    return Span.point(path, line, col, max(1, min(width, room)) if room > 0 else 1)


def _value_end(text: str, pos: int) -> int:
    """End of the JSON value starting at ``pos`` (a scalar or a bracketed value; strings respected)."""
    if pos >= len(text):
        return pos
    if text[pos] not in "[{\"":
        m = re.compile(r"[^,\]}\s]+").match(text, pos)
        return m.end() if m else pos + 1
    depth, k, in_str = 0, pos, False
    while k < len(text):
        c = text[k]
        if in_str:
            if c == "\\":
                k += 1
            elif c == '"':
                in_str = False
                if depth == 0:
                    return k + 1
        elif c == '"':
            in_str = True
        elif c in "[{":
            depth += 1
        elif c in "]}":
            depth -= 1
            if depth == 0:
                return k + 1
        k += 1
    return k


def _locate(path: str, text: str, *keys: str, key: bool = False) -> Span:
    """The value of ``"k1": {... "k2": VALUE ...}`` in the text (searched, not parsed), or with ``key``
    the last key itself; 1:1 when not found."""
    pos = start = 0
    for k in keys:
        m = re.compile(re.escape(json.dumps(k)) + r"\s*:\s*").search(text, pos)
        if m is None:
            return _json_span(path, text, pos if pos else 0)
        start, pos = m.start(), m.end()
    if key and keys:
        return _json_span(path, text, start, len(json.dumps(keys[-1])))
    return _json_span(path, text, pos, _value_end(text, pos) - pos)


def _bad(path: str, text: str, message: str, *keys: str, hint: str | None = None, code: str = "BadParams",
         key: bool = False) -> PdslError:
    return PdslError.at(code, message, _locate(path, text, *keys, key=key), hint)


def bounds_violation(param, value: float) -> str | None:
    """The declared bounds ``"[a, b]"`` of ``param`` when ``value`` lies outside them (inclusive), else None."""
    if (param.lower is not None and value < param.lower) or (param.upper is not None and value > param.upper):
        lo = "−∞" if param.lower is None else f"{param.lower:g}"
        hi = "∞" if param.upper is None else f"{param.upper:g}"
        return f"[{lo}, {hi}]"
    return None


def read_params_file(path: str | Path, num: NumericSystem) -> FittedParams:
    """Read and check a ``params.json`` against ``num``; every problem is a located error.

    ``values`` must be an object of known physical parameter names -> finite numbers (not
    booleans) within the declared ``{lower, upper}`` bounds; ``networks``, when present, a file
    name inside the directory of ``params.json`` (``UnsafePath`` otherwise) that exists.
    """
    p = Path(path)
    name = str(p)
    at_start = Span.point(name, 1, 1)
    try:
        if p.is_dir():
            raise PdslError.at("FileUnreadable", f"{p} is a directory, not a params.json", hint="give DIR/params.json")
        text = read_bytes(p, _MAX_PARAMS_BYTES, what="params.json",
                          hint="give the params.json a `pdsl fit` run wrote").decode("utf-8")
    except FileNotFoundError:
        raise PdslError.at("FileNotFound", f"no such file: {p}", hint="give the params.json a `pdsl fit` run wrote") from None
    except UnicodeDecodeError as exc:
        raise PdslError.at("BadParams", f"{p} is not UTF-8 text (byte {exc.start})") from None
    except OSError as exc:
        raise PdslError.at("FileUnreadable", f"cannot read {p}: {exc.strerror or exc}") from None
    register_source(name, text)
    not_ours = "give the params.json a `pdsl fit` run wrote"
    try:
        data = json_loads(text, name, "BadParams")
    except json.JSONDecodeError as exc:
        raise PdslError.at("BadParams", f"{p} is not valid JSON: {exc.msg}", _json_span(name, text, exc.pos), not_ours) from None
    except RecursionError:
        register_source(name, text[:80])  # quote the start of the line, not all of it
        raise PdslError.at("BadParams", f"{p} is nested too deeply to be a params.json", at_start, not_ours) from None
    if not isinstance(data, dict):
        first = len(text) - len(text.lstrip())
        raise PdslError.at("BadParams", f"{p} is not a params.json written by `pdsl fit`: a JSON {type(data).__name__}, "
                           "not an object", _json_span(name, text, first, _value_end(text, first) - first), not_ours)
    if "values" not in data:
        raise PdslError.at("BadParams", f"{p} has no `values`: not a params.json written by `pdsl fit`", at_start, not_ours)
    values = data["values"]
    if not isinstance(values, dict):
        raise _bad(name, text, "`values` must be an object of parameter names and numbers", "values",
                   hint='e.g. "values": {"m1": 1.3, "m2": 0.7}')
    phys = num.system.params
    known = {q.name: q for q in phys}
    out: dict[str, float] = {}
    for key, v in values.items():
        if key not in known:
            import difflib

            close = difflib.get_close_matches(key, list(known), n=1)
            hint = f"did you mean `{close[0]}`?" if close else "parameters: " + (", ".join(known) or "none")
            raise _bad(name, text, f"`{key}` is not a parameter of {num.system.name}", "values", key, hint=hint,
                       key=True)
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise _bad(name, text, f"`{key}` must be a number, got {json.dumps(v)[:40]}", "values", key)
        try:
            x = float(v)
        except OverflowError:  # an integer literal too large for a float
            x = math.inf
        if not math.isfinite(x):
            raise _bad(name, text, f"`{key}` must be a finite number, got {x}", "values", key)
        q = known[key]
        outside = bounds_violation(q, x)
        if outside:
            raise _bad(name, text, f"`{key}` = {x:g} is outside its declared bounds {outside}", "values", key,
                       hint=f"declared at {q.span}" if q.span is not None else None)
        out[key] = x
    nets = data.get("networks")
    net_path = None
    if nets is not None:
        if not isinstance(nets, str) or not nets:
            raise _bad(name, text, "`networks` must be the name of a .npz file next to params.json (or null)", "networks")
        base = p.parent.resolve()
        rel = Path(nets)
        target = (p.parent / rel).resolve()
        if rel.is_absolute() or not target.is_relative_to(base):
            raise _bad(name, text, f"`networks` {nets!r} is outside the directory of {p}", "networks", code="UnsafePath",
                       hint="a params.json names its networks.npz by a file name in its own directory")
        if not target.exists():
            raise _bad(name, text, f"`networks`: no such file: {p.parent / rel}", "networks",
                       hint="keep networks.npz next to params.json")
        if not target.is_file():
            raise _bad(name, text, f"`networks`: {p.parent / rel} is not a file", "networks")
        net_path = target
    return FittedParams(name, out, net_path)


def load_network_weights(num: NumericSystem, p: np.ndarray, fitted: FittedParams) -> np.ndarray:
    """``p`` with the weights of ``fitted.networks`` (an ``.npz`` of flat vectors per network)."""
    import zipfile

    path = fitted.networks
    text = source_text(fitted.path) or ""
    where = _locate(fitted.path, text, "networks")
    p = p.copy()
    try:
        z = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        raise PdslError.at("BadParams", f"cannot read network weights {path}: {exc}", where,
                           "networks.npz as `pdsl fit` wrote it") from None
    if not isinstance(z, np.lib.npyio.NpzFile):
        raise PdslError.at("BadParams", f"{path} is not an .npz archive of network weights", where,
                           "networks.npz as `pdsl fit` wrote it")
    with z:
        offset = len(num.system.params)
        for nn in num.system.neural:
            if nn.n_in is None:
                continue
            size = n_weights(nn)
            try:
                w = np.asarray(z[nn.name], dtype=float).ravel() if nn.name in z.files else None
            except (OSError, ValueError, TypeError, EOFError, zipfile.BadZipFile) as exc:
                raise PdslError.at("BadParams", f"{path}: cannot read the weights of `{nn.name}`: {exc}", where) from None
            if w is None or w.size != size:
                raise PdslError.at("BadParams", f"{path}: no weights of size {size} for network `{nn.name}`", where)
            if not np.all(np.isfinite(w)):
                raise PdslError.at("BadParams", f"{path}: the weights of network `{nn.name}` are not all finite", where)
            p[offset : offset + size] = w
            offset += size
    return p


def apply_params_file(num: NumericSystem, path: str | Path) -> NumericSystem:
    """``num`` with the checked values of a ``params.json`` (and its networks) as defaults."""
    from dataclasses import replace

    fitted = read_params_file(path, num)
    p = num.p_default.copy()
    for key, value in fitted.values.items():
        p[num.p_names.index(key)] = value
    if fitted.networks is not None and any(nn.n_in is not None for nn in num.system.neural):
        p = load_network_weights(num, p, fitted)
    return replace(num, p_default=p)
