"""Table 1's metric (BENCHMARKS B6): the error of a learned energy H against a reference H on an
evenly spaced grid of states.

``q=-2:2:101,p=-2:2:101`` spans each named state from its lower to its upper end with that many
points (``x=0.5``: held at one value); every state of the model must be named. The learned and
the reference model are evaluated with their own ``energy`` functions (the ``hamiltonian`` of a
canonical model) on the same grid, states matched by name. H is identifiable only up to an
additive constant, so two errors are reported: the raw mean absolute error, and the error after
removing the mean offset mean(H_learned − H_ref) over the grid (BENCHMARKS B6's recommendation).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from ..backend.functions import NumericSystem
from ..diagnostics import PdslError

__all__ = ["parse_grid", "energy_on_grid", "grid_errors", "GridErrors"]

_MAX_POINTS = 5_000_000


def parse_grid(spec: str, state_names: tuple[str, ...]) -> dict[str, np.ndarray]:
    """``NAME=LO:HI:N`` or ``NAME=VALUE`` entries, comma-separated -> name -> grid values."""
    out: dict[str, np.ndarray] = {}
    for item in (s.strip() for s in spec.split(",")):
        if not item:
            continue
        m = re.fullmatch(r"([A-Za-z_][\w.\[\]]*)\s*=\s*(.+)", item)
        if not m:
            raise PdslError.at("BadOption", f"--energy-grid: `{item}` is not NAME=LO:HI:N or NAME=VALUE",
                               hint="e.g. --energy-grid q=-2:2:101,p=-2:2:101")
        name, rest = m.group(1), m.group(2).split(":")
        if name not in state_names:
            raise PdslError.at("BadOption", f"--energy-grid: `{name}` is not a state of the model",
                               hint="states: " + ", ".join(state_names))
        if name in out:
            raise PdslError.at("BadOption", f"--energy-grid: `{name}` is given twice")
        try:
            vals = [float(v) for v in rest[:2]]
            n = int(rest[2]) if len(rest) == 3 else 1
        except ValueError:
            raise PdslError.at("BadOption", f"--energy-grid: `{item}`: LO, HI must be numbers and N an integer") from None
        if len(rest) not in (1, 3) or not all(math.isfinite(v) for v in vals) or n < 1 or (len(rest) == 3 and n < 2):
            raise PdslError.at("BadOption", f"--energy-grid: `{item}` is not NAME=LO:HI:N (N ≥ 2, finite ends) or NAME=VALUE")
        if len(rest) == 3 and not vals[0] < vals[1]:
            raise PdslError.at("BadOption", f"--energy-grid: `{item}`: LO must be below HI")
        out[name] = np.linspace(vals[0], vals[1], n) if len(rest) == 3 else np.array(vals[:1])
    missing = [n for n in state_names if n not in out]
    if missing:
        raise PdslError.at("BadOption", f"--energy-grid: no values for {', '.join(missing)}",
                           hint="name every state: a range LO:HI:N, or one value NAME=VALUE")
    size = int(np.prod([len(v) for v in out.values()]))
    if size > _MAX_POINTS:
        raise PdslError.at("BadOption", f"--energy-grid: {size} points (more than {_MAX_POINTS})", hint="use fewer points per state")
    return out


def energy_on_grid(num: NumericSystem, grid: dict[str, np.ndarray], what: str) -> np.ndarray:
    """H of ``num`` (its default parameters and weights) at every grid point, states by name."""
    if num.energy is None:
        raise PdslError.at("NotYetSupported", f"{what} {num.system.name} has no energy (hamiltonian) to compare",
                           num.system.span, "the energy grid compares models with a `hamiltonian` or an energy")
    missing = [n for n in grid if n not in num.x_names]
    if missing or len(num.x_names) != len(grid):
        raise PdslError.at("BadOption", f"{what} {num.system.name} has states {', '.join(num.x_names)}, the grid "
                           f"{', '.join(grid)}", num.system.span, "the two models must have the same state names")
    mesh = np.meshgrid(*[grid[n] for n in num.x_names], indexing="ij")
    X = np.stack([m.ravel() for m in mesh])  # (nx, N)
    N = X.shape[1]
    p = num.p_default
    out = np.empty(N)
    step = 100_000
    fn = num.energy.map(min(N, step))
    for a in range(0, N, step):
        b = min(a + step, N)
        k = b - a
        f = fn if k == min(N, step) else num.energy.map(k)
        out[a:b] = np.asarray(f(np.zeros((1, k)), X[:, a:b], p, np.zeros((len(num.u_names), k)))).ravel()
    return out


@dataclass(frozen=True)
class GridErrors:
    points: int
    mae: float  # mean |H_learned − H_ref|
    offset: float  # mean (H_learned − H_ref)
    mae_offset_corrected: float  # mean |H_learned − H_ref − offset|
    max_offset_corrected: float

    def to_dict(self) -> dict:
        return {"points": self.points, "mae": self.mae, "offset": self.offset,
                "mae_offset_corrected": self.mae_offset_corrected, "max_offset_corrected": self.max_offset_corrected}


def grid_errors(H: np.ndarray, H_ref: np.ndarray) -> GridErrors:
    d = np.asarray(H, dtype=float) - np.asarray(H_ref, dtype=float)
    if not np.all(np.isfinite(d)):
        raise PdslError.at("NonFiniteLoss", "the energy is not finite at some grid points", hint="shrink the grid")
    off = float(d.mean())
    return GridErrors(len(d), float(np.abs(d).mean()), off, float(np.abs(d - off).mean()), float(np.abs(d - off).max()))
