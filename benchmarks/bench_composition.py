#!/usr/bin/env python
"""Front-end cost of composition: the RLC ladder of N `Section` instances vs the hand-written flat ladder.

    python benchmarks/bench_composition.py            # N = 50, 100, 200 (about 2 minutes on 2 shared cores)
    python benchmarks/bench_composition.py --quick    # N = 50

Both models are the same network (LANGUAGE.md §10 A2 `LadderComposed` from `models/composition/a2_ladder.phm`
and `models/rlc_ladder.phm`); each is compiled to the symbolic system (parse, imports, flattening, resolve,
p-H lowering and the structural checks: `CompileOptions(numeric=False)`), best of three, in one process.
The ratio composed / flat is the price of instances and connections (acceptance: ≤ 2 at N = 200).
Results: stdout and `benchmarks/results_composition.md`.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from pdsl.pipeline import CompileOptions, compile_model

REPO = Path(__file__).resolve().parents[1]
COMPOSED = REPO / "models/composition/a2_ladder.phm"
FLAT = REPO / "models/rlc_ladder.phm"


def _best(path: Path, n: int, repeats: int = 3) -> tuple[float, int]:
    best, states = float("inf"), 0
    for _ in range(repeats):
        t0 = time.perf_counter()
        c = compile_model(path, CompileOptions(consts={"N": n}, numeric=False))
        best = min(best, time.perf_counter() - t0)
        states = len(c.system.states)
    return best, states


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    sizes = [50] if args.quick else [50, 100, 200]
    rows = []
    for n in sizes:
        tc, sc = _best(COMPOSED, n)
        tf, sf = _best(FLAT, n)
        assert sc == sf == 2 * n, (sc, sf)
        rows.append((n, tc, tf, tc / tf))
        print(f"N = {n}: composed {tc:.3f} s, flat {tf:.3f} s, ratio {tc / tf:.2f}", flush=True)
    lines = [
        "# Composition front-end cost (benchmarks/bench_composition.py)",
        "",
        "RLC ladder of N `Section` instances (`models/composition/a2_ladder.phm`) vs the hand-written flat ladder",
        "(`models/rlc_ladder.phm`): parse, imports, flattening, resolve, p-H lowering and structural checks",
        "(`compile_model(..., CompileOptions(numeric=False))`), best of 3, same process, 2 shared cores.",
        "",
        "| N | composed (s) | flat (s) | ratio composed / flat |",
        "|---|---|---|---|",
        *[f"| {n} | {tc:.3f} | {tf:.3f} | {r:.2f} |" for n, tc, tf, r in rows],
        "",
    ]
    if not args.quick:
        (REPO / "benchmarks/results_composition.md").write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
