"""Which parameters are fitted, and in which coordinates the optimiser sees them.

The optimiser works on an unconstrained vector θ = (θ_phys, θ_w): one entry per free
physical parameter, then every network weight (BENCHMARKS A1.4: the networks are always
learned). Bounds from ``param k = 1 {lower = 0, upper = 10}`` are kept by reparametrisation,
never by clipping:

* ``lower = a`` only:   p = a + exp(θ)           (``lower = 0``: log space, as [REPO-P0] does
  for the CHNN masses, A1.4)
* ``upper = b`` only:   p = b − exp(θ)
* both:                 p = a + (b − a)·σ(θ)     (σ the logistic function)
* neither:              p = θ

Network weights are identity-mapped; their layout is that of :mod:`pdsl.backend.neural`.
"""

from __future__ import annotations

from dataclasses import dataclass

import casadi as ca
import numpy as np

from ..backend.functions import NumericSystem
from ..backend.neural import n_weights
from ..diagnostics import PdslError

__all__ = ["Transform", "ParamLayout", "make_layout"]

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
