#!/usr/bin/env python
"""An independent route for the CHNN study: the hand-written torch CHNN, trained on `repro_chnn.py`'s data.

    python benchmarks/chnn_hand_train.py WORK --init uniform      # torch's nn.Linear default draw
    python benchmarks/chnn_hand_train.py WORK --init orthogonal   # the CHNN authors' orthogonal_ draw

WORK is a `repro_chnn.py --full` work directory (its `data3/train_chnn.csv` and `data3/test_chnn.csv`). The
model is `bench_fit_speed.HandCHNN` (H = Σ|p_i|²/2m_i + V(x), Eq. 6 projection, RK4, float64 — written
without pdsl), trained by the A5 protocol (AdamW lr 3e-3, weight decay 1e-4 on the network, cosine to 0
over --epochs, minibatches of 200, L1 over (x, ẋ) of the 4-step chunks) and scored as `repro_chnn.py`
scores: RK4 at h = dt/4 from each test trajectory's first sample, the A6 bounded relative error, its
geometric mean over t₁…t₉₉ (`pdsl.fit.metrics.trajectory_error`), mean and median over the test set.
``--load-pdsl CHECKPOINT`` instead scores a pdsl fit's weights with this rollout (a check of the scorer:
it reproduces `repro_chnn.py`'s number). A slow study (about 11 minutes per 1000 epochs on 2 cores), not
part of the test suite; quoted in `results_chnn_full.md`.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
for p in (str(HERE.parent), str(HERE)):
    if p not in sys.path:
        sys.path.insert(0, p)

import numpy as np  # noqa: E402
import torch  # noqa: E402
from bench_fit_speed import DT, HandCHNN, N  # noqa: E402
from pendulum_data import read_trajectories  # noqa: E402

from pdsl.fit.metrics import trajectory_error  # noqa: E402

BATCH, SUBSTEPS = 200, 4


def score(model: HandCHNN, test_csv: Path) -> np.ndarray:
    """Per-test-trajectory geometric-mean Err of the model's RK4 rollout (h = dt/4) from the first sample."""
    t, Z = read_trajectories(test_csv, N)
    B = Z.shape[0]
    m = model.logm.exp().detach()[None, :, None]
    z = torch.from_numpy(Z[:, 0].copy())
    x, p = z[:, : 2 * N].reshape(B, N, 2), z[:, 2 * N :].reshape(B, N, 2) * m
    out = [Z[:, 0]]
    for _ in range(1, Z.shape[1]):
        for _ in range(SUBSTEPS):
            x, p = (v.detach() for v in model.rk4(x, p, DT / SUBSTEPS))
        out.append(torch.cat([x.reshape(B, -1), (p / m).reshape(B, -1)], 1).numpy())
    P = np.stack(out, 1)
    return np.array([trajectory_error(P[i], Z[i], t[i])[1] for i in range(B)])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("work", type=Path, help="a repro_chnn.py --full work directory")
    ap.add_argument("--init", choices=("uniform", "orthogonal"), default="uniform")
    ap.add_argument("--epochs", type=int, default=1000)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--eval-every", type=int, default=250)
    ap.add_argument("--load-pdsl", type=Path, default=None, metavar="CHECKPOINT",
                    help="score a pdsl fit's checkpoint.npz (θ in pdsl's layout) instead of training")
    ap.add_argument("--json", type=Path, default=None, help="write the scores here")
    a = ap.parse_args(argv)
    data = a.work / "data3"
    torch.manual_seed(a.seed)
    model = HandCHNN(a.hidden)
    if a.init == "orthogonal":
        for lin in (m for m in model.V if isinstance(m, torch.nn.Linear)):
            torch.nn.init.orthogonal_(lin.weight)
    if a.load_pdsl:
        model.load_pdsl_theta(np.load(a.load_pdsl)["theta"])
        e = score(model, data / "test_chnn.csv")
        print(f"pdsl weights, hand rollout: mean {e.mean():.4e}, median {np.median(e):.4e}")
        return 0
    _, Z = read_trajectories(data / "train_chnn.csv", N)
    S0 = torch.from_numpy(Z[:, 0].copy())
    Y = torch.from_numpy(np.ascontiguousarray(Z[:, 1:].transpose(0, 2, 1)))
    decay = [p for n, p in model.named_parameters() if n != "logm"]
    opt = torch.optim.AdamW([{"params": [model.logm], "weight_decay": 0.0}, {"params": decay, "weight_decay": 1e-4}], lr=3e-3)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=a.epochs)
    rng = np.random.default_rng(a.seed)
    log, t0 = [], time.perf_counter()
    for ep in range(1, a.epochs + 1):
        order, total = rng.permutation(len(S0)), 0.0
        for s in range(0, len(order), BATCH):
            idx = torch.from_numpy(order[s : s + BATCH])
            L = model.loss(S0[idx], Y[idx])
            opt.zero_grad()
            L.backward()
            opt.step()
            total += float(L.detach()) * len(idx)
        sched.step()
        if ep % a.eval_every == 0 or ep == a.epochs:
            e = score(model, data / "test_chnn.csv")
            log.append({"epoch": ep, "train_loss": total / len(S0), "mean": float(e.mean()), "median": float(np.median(e)),
                        "seconds": time.perf_counter() - t0})
            print(f"epoch {ep}: training loss {total / len(S0):.3e}; test geometric-mean Err mean {e.mean():.4e}, "
                  f"median {np.median(e):.4e} ({time.perf_counter() - t0:.0f} s)", flush=True)
    if a.json:
        a.json.write_text(json.dumps({"init": a.init, "epochs": a.epochs, "seed": a.seed, "log": log,
                                      "per_traj": e.tolist()}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
