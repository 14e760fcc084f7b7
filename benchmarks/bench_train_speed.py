#!/usr/bin/env python
"""Training speed on the torch backend (issue 15): implicit midpoint vs RK4, float32 vs hand-written torch.

    python benchmarks/bench_train_speed.py            # both parts (about 10 minutes on 2 shared cores)
    python benchmarks/bench_train_speed.py --part hnn # part A only (about 2 minutes)

**A. Implicit midpoint vs RK4** (BENCHMARKS B1, B3.2, B4; acceptance: a midpoint epoch with FPI,
6 sweeps and the discrete adjoint costs ≤ 3× an RK4 epoch on the same data, ratio measured in one
run). The HNN of B1 (MLP 2-16-32-16-1, tanh, 1,137 weights) on the double well: 4,096 chunks of
τ = 6 steps (dt = 0.01) from as many trajectories, minibatch 512, MSE, AdamW — one epoch is 8
optimiser steps. Variants: rk4 (autograd through the steps); midpoint FPI-6 + discrete adjoint (the
default); midpoint FPI-6 unrolled backprop; midpoint Newton + adjoint. Interleaved rounds; medians.

**B. float32 3-pendulum CHNN** (acceptance: a pdsl float32 epoch at least as fast as a hand-written
float32 torch CHNN on the same data; goal 1.5×): the protocol of `bench_fit_speed.py` (800
chunks of 4 RK4 steps, batch 200, L1, AdamW, `benchmarks/models/chnn3.phm` at H = 256, 133,636
weights) with `--dtype float32` against `bench_fit_speed.HandCHNN` cast to float32.

Results: stdout and `benchmarks/results_train_speed.md`.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
for p in (str(ROOT), str(HERE)):
    if p not in sys.path:
        sys.path.insert(0, p)

import numpy as np  # noqa: E402
import torch  # noqa: E402

from pdsl.fit.checkpoint import State  # noqa: E402
from pdsl.fit.config import FitConfig  # noqa: E402
from pdsl.fit.data import make_chunks  # noqa: E402
from pdsl.fit.run import prepare  # noqa: E402
from pdsl.fit.train import TrainOptions, adamw  # noqa: E402
sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchutil, also when loaded by path
from benchutil import log  # noqa: E402

HNN1 = """\
model HNN1 "1-DOF HNN (BENCHMARKS B1: MLP 2-16-32-16-1, tanh)"
  coord q
  momentum p
  nn H: mlp(hidden = [16, 32, 16], act = tanh)
  hamiltonian H(q, p)
end
"""


def med(v) -> float:
    return statistics.median(v)


def fmt(v) -> str:
    return f"{med(v):.4g} s ({min(v):.3g}–{max(v):.3g}, n={len(v)})"


def epoch(run, chunks, theta0, batch: int, seed: int = 0, lr: float = 0.01) -> tuple[float, float]:
    state = State(theta=theta0.copy())
    opts = TrainOptions(epochs=1, batch=batch, seed=seed, progress=False, lr=lr)
    t0 = time.perf_counter()
    res = adamw(run.loss, chunks, chunks.take(slice(0, 0)), state, opts)
    return time.perf_counter() - t0, res.state.history["train"][-1]


# ---------------------------------------------------------------- part A
def part_hnn(work: Path, rounds: int) -> tuple[list[str], dict]:
    from hamiltonian_data import noisy, trajectories, write_csv

    n, steps, batch = 4096, 6, 512
    Z = noisy(trajectories("double_well", n, steps + 1, seed=0), 0.01, 0)
    data = write_csv(work / "dw.csv", "double_well", Z)
    model = work / "hnn1.phm"
    model.write_text(HNN1)
    variants = {
        "rk4": dict(integrator="rk4"),
        "midpoint, FPI 6 + discrete adjoint (default)": dict(integrator="midpoint"),
        "midpoint, FPI 6 + unrolled backprop": dict(integrator="midpoint", gradient="unrolled"),
        "midpoint, Newton + discrete adjoint": dict(integrator="midpoint", implicit_solver="newton"),
    }
    runs = {}
    for name, kw in variants.items():
        cfg = FitConfig(data=str(data), method="adamw", epochs=1, batch=batch, chunk=steps, val_fraction=0.0,
                        loss="mse", lr=0.01, backend="torch", **kw)
        runs[name] = prepare(str(model), None, cfg)
    chunks = make_chunks(runs["rk4"].train, steps, steps)
    theta0 = runs["rk4"].layout.theta_from_p(runs["rk4"].p_start)
    times = {k: [] for k in runs}
    losses = {}
    torch.set_num_threads(1)
    for run in runs.values():  # warm-up
        epoch(run, chunks.take(slice(0, batch)), theta0, batch)
    for r in range(rounds):
        names = list(runs)
        names = names[r % len(names):] + names[: r % len(names)]
        for name in names:
            dt, L = epoch(runs[name], chunks, theta0, batch)
            times[name].append(dt)
            losses[name] = L
        log(f"  round {r + 1}: " + ", ".join(f"{k.split(',')[0]}{'' if k == 'rk4' else ' ' + k.split(', ')[1][:12]} {times[k][-1]:.3f}s" for k in names))
    # CasADi midpoint on one batch (the "before" of issue 15)
    from pdsl.fit.loss import ChunkLoss

    base = runs["midpoint, FPI 6 + discrete adjoint (default)"]
    t0 = time.perf_counter()
    cl = ChunkLoss(base.num, base.layout, base.loss.spec, base.loss.observed)
    part = chunks.take(slice(0, batch))
    cl.value_grad_function(batch)
    build = time.perf_counter() - t0
    ct = []
    for _ in range(2):
        t0 = time.perf_counter()
        cl.value_grad(theta0, part)
        ct.append(time.perf_counter() - t0)
    rk4 = med(times["rk4"])
    rows = [f"| {k} | {fmt(v)} | {med(v) / rk4:.2f}× | {losses[k]:.6g} |" for k, v in times.items()]
    ratio = med(times["midpoint, FPI 6 + discrete adjoint (default)"]) / rk4
    lines = [
        "## A. Implicit midpoint vs RK4 on the torch backend (HNN of B1, double well)",
        "",
        f"{n} chunks of τ = {steps} steps (dt = 0.01, noise σ = 0.01), minibatch {batch} (8 AdamW steps per epoch), "
        f"MSE, MLP 2-16-32-16-1 tanh ({base.layout.n_theta} weights), 1 torch thread, {rounds} interleaved rounds "
        "after a warm-up batch; each epoch from the same θ with a fresh optimiser.",
        "",
        "| variant | time per epoch: median (min–max, n) | ratio to rk4 (medians) | epoch loss |",
        "|---|---|---|---|",
        *rows,
        "",
        f"**Acceptance (midpoint FPI-6 + adjoint ≤ 3× rk4): {ratio:.2f}× — {'met' if ratio <= 3 else 'missed'}.**",
        "",
        f"For reference, the CasADi backend's midpoint (Newton rootfinder) on one batch of {batch}: "
        f"{min(ct):.3g} s per batch (graph built in {build:.3g} s), i.e. ≈ {min(ct) * 8:.3g} s for the 8 batches of an epoch.",
        "",
    ]
    return lines, {"ratio": ratio, "times": times}


# ---------------------------------------------------------------- part B
def part_chnn(work: Path, rounds: int, hidden: int) -> tuple[list[str], dict]:
    import bench_fit_speed as bfs

    data = bfs.make_data(work, 800, 0)
    runs = {}
    for dtype in ("float32", "float64"):
        cfg = FitConfig(data=str(data), method="adamw", epochs=1, batch=bfs.BATCH, chunk=bfs.STEPS, val_fraction=0.0,
                        threads=1, backend="torch", dtype=dtype)
        runs[dtype] = prepare(str(bfs.MODEL), None, cfg, consts={"H": hidden})
    run = runs["float32"]
    chunks = make_chunks(run.train, bfs.STEPS, bfs.STEPS)
    theta0 = run.layout.theta_from_p(run.p_start)
    hand = bfs.HandCHNN(hidden)
    hand.load_pdsl_theta(theta0)
    hand = hand.float()

    def hand_epoch() -> tuple[float, float]:
        hand.load_pdsl_theta(theta0)  # every epoch from the same θ, as pdsl's
        decay = [p for nm, p in hand.named_parameters() if nm != "logm"]
        opt = torch.optim.AdamW([{"params": [hand.logm], "weight_decay": 0.0}, {"params": decay, "weight_decay": 1e-4}], lr=3e-3)
        order = np.random.default_rng([0, 0]).permutation(len(chunks))
        t0 = time.perf_counter()
        total = 0.0
        for start in range(0, len(order), bfs.BATCH):
            part = chunks.take(order[start : start + bfs.BATCH])
            L = hand.loss(torch.from_numpy(part.S0).float(), torch.from_numpy(part.Y).float())
            opt.zero_grad()
            L.backward()
            opt.step()
            total += float(L.detach()) * len(part)
        return time.perf_counter() - t0, total / len(chunks)

    # same model and loss: first batch, same θ
    part = chunks.take(slice(0, bfs.BATCH))
    L32, g32 = run.loss.value_grad(theta0, part)
    L64, g64 = runs["float64"].loss.value_grad(theta0, part)
    hand.load_pdsl_theta(theta0)
    hand.zero_grad()
    Lh = hand.loss(torch.from_numpy(part.S0).float(), torch.from_numpy(part.Y).float())
    Lh.backward()
    gh = hand.pdsl_grad()
    times = {"pdsl float32": [], "hand-written torch float32": [], "pdsl float64": []}
    losses = {}
    torch.set_num_threads(1)
    fns = {"pdsl float32": lambda: epoch(run, chunks, theta0, bfs.BATCH, lr=3e-3), "hand-written torch float32": hand_epoch,
           "pdsl float64": lambda: epoch(runs["float64"], chunks, theta0, bfs.BATCH, lr=3e-3)}
    for f in fns.values():  # warm-up
        f()
    for r in range(rounds):
        names = list(fns)
        names = names[r % len(names):] + names[: r % len(names)]
        for name in names:
            dt, L = fns[name]()
            times[name].append(dt)
            losses[name] = L
        log(f"  round {r + 1}: " + ", ".join(f"{k} {times[k][-1]:.3f}s" for k in names))
    ratio = med(times["hand-written torch float32"]) / med(times["pdsl float32"])
    lines = [
        f"## B. float32: 3-pendulum CHNN epoch, pdsl vs hand-written torch (H = {hidden}, {run.layout.n_theta:,} weights)",
        "",
        f"The protocol of `bench_fit_speed.py`: {len(chunks)} chunks of {bfs.STEPS} RK4 steps, batch {bfs.BATCH}, L1, "
        f"AdamW; 1 torch thread; {rounds} interleaved rounds after a warm-up, every epoch from the same θ. pdsl with "
        f"`--dtype float32` runs its networks in float32 around the compiled scalar glue (float64 C: mixed precision; "
        f"core `{run.loss.system.core}`); the hand-written model is `bench_fit_speed.HandCHNN` cast to float32.",
        "",
        f"float32 vs float64 pdsl loss on the first batch: {abs(L32 - L64) / abs(L64):.1e} relative; gradient "
        f"{np.abs(g32 - g64).max() / np.abs(g64).max():.1e} (max, relative to the largest entry). Hand-written float32 vs "
        f"pdsl float32 on the same batch: loss {abs(float(Lh.detach()) - L32) / abs(L32):.1e} relative, gradient "
        f"{np.abs(gh - g32).max() / np.abs(g32).max():.1e}.",
        "",
        "| variant | time per epoch: median (min–max, n) | epoch loss |",
        "|---|---|---|",
        *[f"| {k} | {fmt(v)} | {losses[k]:.6g} |" for k, v in times.items()],
        "",
        f"**Acceptance (pdsl float32 at least as fast as hand-written float32; goal 1.5×): hand / pdsl = {ratio:.2f}× — "
        f"{'met' if ratio >= 1 else 'missed'}{' (goal met)' if ratio >= 1.5 else ' (goal 1.5× missed)'}.**",
        "",
    ]
    return lines, {"ratio": ratio}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--part", choices=("all", "hnn", "chnn"), default="all")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--out", default=str(HERE / "results_train_speed.md"))
    args = ap.parse_args(argv)
    t_start = time.perf_counter()
    load0 = " / ".join(f"{v:.2f}" for v in os.getloadavg())
    body: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        if args.part in ("all", "hnn"):
            log("A. midpoint vs rk4 (HNN, double well)")
            body += part_hnn(work, args.rounds)[0]
        if args.part in ("all", "chnn"):
            log("B. float32 CHNN vs hand-written float32")
            body += part_chnn(work, args.rounds, args.hidden)[0]
    load1 = " / ".join(f"{v:.2f}" for v in os.getloadavg())
    head = [
        "# Training speed on the torch backend: implicit midpoint, float32 (issue 15)",
        "",
        f"Generated by `python benchmarks/bench_train_speed.py{'' if args.part == 'all' else ' --part ' + args.part}` in "
        f"{time.perf_counter() - t_start:.0f} s on {_dt.datetime.now(_dt.timezone.utc):%Y-%m-%d %H:%M} UTC; "
        f"`{platform.platform()}`, os.cpu_count() = {os.cpu_count()}, torch {torch.__version__}; load average "
        f"(1/5/15 min) {load0} → {load1} (the 2 cores are shared with other sessions: absolute times are noisy, "
        "ratios within a round less so).",
        "",
    ]
    text = "\n".join(head + body)
    out = Path(args.out)
    if args.part != "all" and out.is_file():  # keep the other part's section
        old = out.read_text(encoding="utf-8")
        keep = "## B." if args.part == "hnn" else "## A."
        if keep in old:
            section = old[old.index(keep):]
            if keep == "## A.":
                section = section[: section.index("## B.")] if "## B." in section else section
                text = "\n".join(head) + "\n" + section + "\n".join(body)
            else:
                text = text + "\n" + section
    tmp = out.with_suffix(".md.tmp")
    tmp.write_text(text.rstrip() + "\n", encoding="utf-8")
    os.replace(tmp, out)
    log(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
