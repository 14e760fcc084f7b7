#!/usr/bin/env python
"""Where the CHNN's test error comes from: per-trajectory error against the energy of the initial state.

    python benchmarks/chnn_energy_tail.py WORK [WORK2]

WORK is a `repro_chnn.py --full` work directory (its `data3/` and `results.json`); WORK2 optionally a second
run on the same data (another seed). Prints the training energies' quantiles, the worst test trajectories
with their energies, the correlation of log Err with the energy, and the mean Err above/below the training
set's 95th-percentile energy. Quoted in `results_chnn_full.md`.
"""

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
for p in (str(HERE.parent), str(HERE)):
    if p not in sys.path:
        sys.path.insert(0, p)

import numpy as np  # noqa: E402
from pendulum_data import read_trajectories  # noqa: E402
from repro_chnn import true_energy  # noqa: E402

N = 3


def per_traj(work: Path) -> np.ndarray:
    return np.array(json.loads((work / "results.json").read_text())["3"]["chnn"]["score"]["per_traj"])


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__)
        return 2
    w = Path(argv[0])
    _, Zt = read_trajectories(w / "data3" / "test_chnn.csv", N)
    _, Ztr = read_trajectories(w / "data3" / "train_chnn.csv", N)
    Et, Etr = true_energy(Zt[:, 0], N), true_energy(Ztr[:, 0], N)
    r0 = per_traj(w)
    r1 = per_traj(Path(argv[1])) if len(argv) > 1 else r0
    print(f"training E: min {Etr.min():.2f}  median {np.median(Etr):.2f}  p95 {np.percentile(Etr, 95):.2f}  max {Etr.max():.2f}")
    for k in np.argsort(-r0)[:8]:
        print(f"test {k:3d}: Err {r0[k]:.3f} (second run {r1[k]:.3f})  E {Et[k]:7.2f}  "
              f"training ICs at higher E {(Etr >= Et[k]).mean():.3f}")
    print(f"correlation of log Err with E: {np.corrcoef(np.log(r0), Et)[0, 1]:.2f}")
    hi = Et > np.percentile(Etr, 95)
    print(f"test ICs above the training p95 energy: {hi.sum()}, mean Err {r0[hi].mean():.2e}; the others {r0[~hi].mean():.2e}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
