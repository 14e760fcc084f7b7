#!/usr/bin/env python
"""Study: what limits the double well's Table 1 error (BENCHMARKS B6) — noise, data or optimisation steps?

    python benchmarks/study_double_well_steps.py N_TRAIN N_VAL SAMPLES SIGMA EPOCHS [INTEGRATOR] [JSON]

One HNN fit of the double well exactly as `repro_symplectic.py` trains it (MLP 2-16-32-16-1 tanh,
τ = 6, one random window per trajectory per epoch, batch 512, MSE, Adam lr 0.01 + ReduceLROnPlateau,
torch backend, implicit midpoint with FPI 6 + discrete adjoint), with the data size, trajectory length
(SAMPLES at dt = 0.01), noise σ and epochs given, and JSON overriding any `FitConfig` field (e.g.
'{"batch": 64}'). Prints the training time and B6's grid MAE (101² on [−2, 2]², raw and offset-corrected).
The rows of `results_double_well_steps.md` are runs of this script. A slow study: never part of the tests.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
for p in (str(HERE.parent), str(HERE)):
    if p not in sys.path:
        sys.path.insert(0, p)

import numpy as np  # noqa: E402
import torch  # noqa: E402
from hamiltonian_data import noisy, trajectories  # noqa: E402
from repro_symplectic import SYSTEMS, grid_mae, hnn_text  # noqa: E402

from pdsl.data.csvio import Table  # noqa: E402
from pdsl.fit import FitConfig  # noqa: E402
from pdsl.fit.run import run_fit  # noqa: E402


def main(argv: list[str]) -> int:
    if len(argv) < 5:
        print(__doc__)
        return 2
    torch.set_num_threads(1)
    n_train, n_val, samples, sigma, epochs = int(argv[0]), int(argv[1]), int(argv[2]), float(argv[3]), int(argv[4])
    integ = argv[5] if len(argv) > 5 else "midpoint"
    extra = json.loads(argv[6]) if len(argv) > 6 else {}
    system = "double_well"
    _, names, _, dt = SYSTEMS[system]
    n = n_train + n_val
    Z = noisy(trajectories(system, n, samples, 1), sigma, 1)
    m = Z.shape[1]
    data = np.column_stack([np.repeat(np.arange(n), m), np.tile(dt * np.arange(m), n), Z.reshape(n * m, -1)])
    table = Table(path=f"<double well: {n} noisy trajectories>", columns=("traj", "t", *names), data=data)
    work = Path(tempfile.mkdtemp(prefix="dw_steps_"))
    model = work / "hnn.phm"
    model.write_text(hnn_text(system))
    cfg = dict(data=table, method="adamw", integrator=integ, chunk=6, batch=512, loss="mse", lr=0.01, weight_decay=0.0,
               window="random", schedule="plateau", patience=3, factor=0.5, epochs=epochs, val_fraction=n_val / n, seed=0)
    cfg.update(extra)
    t0 = time.perf_counter()
    run_fit(str(model), None, FitConfig(**cfg), work / "fit", resume=False, progress=False)
    seconds = time.perf_counter() - t0
    r = grid_mae(system, work / "fit", model)
    steps = epochs * -(-n_train // cfg["batch"])
    print(json.dumps({"n_train": n_train, "n_val": n_val, "samples": samples, "sigma": sigma, "epochs": epochs,
                      "integrator": integ, "overrides": extra, "adam_steps": steps, "train_s": round(seconds, 1),
                      "mae_raw": r["mae"], "mae_offset_corrected": r["mae_offset_corrected"]}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
