"""Energy drift of the Hénon–Heiles model against the integrator tolerance.

Uses the Python API: compile a bundled model once, simulate it at several
tolerances, report max |E(t) − E(0)| / |E(0)|. Run: python examples/tolerance_study.py
(``--fast`` shortens the horizon; the test suite runs it that way).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

import pdsl
from pdsl.sim.simulate import simulate, time_grid

MODEL = Path(__file__).resolve().parents[1] / "models" / "henon_heiles.phm"


def main(argv=None) -> list[tuple[str, float, float]]:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--fast", action="store_true")
    args = ap.parse_args(argv)
    compiled = pdsl.compile_model(MODEL)
    grid = time_grid(10.0 if args.fast else 100.0, 0.1)
    rows = []
    print(f"{'integrator':<12} {'rtol':>8} {'relative energy drift':>22}")
    for integrator in ("cvodes", "cvodes-bdf"):
        for rtol in (1e-6, 1e-8, 1e-10):
            res = simulate(compiled.numeric, grid, rtol=rtol, integrator=integrator)
            drift = float(np.max(np.abs(res.energy - res.energy[0])) / abs(res.energy[0]))
            rows.append((integrator, rtol, drift))
            print(f"{integrator:<12} {rtol:>8.0e} {drift:>22.3e}")
    return rows


if __name__ == "__main__":
    main()
