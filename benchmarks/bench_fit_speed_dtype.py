#!/usr/bin/env python
"""Training speed in float32 and float64 (issue 36.3): one epoch of the CHNN protocol of bench_fit_speed.py, pdsl
(`pdsl fit --dtype float32|float64`, torch backend) against the hand-written torch CHNN in the same precision, at
hidden widths 64 and 256.

    python benchmarks/bench_fit_speed_dtype.py              # widths 64 and 256, 3 timed rounds (a few minutes)
    python benchmarks/bench_fit_speed_dtype.py --rounds 2   # shorter

The protocol, the model and the hand-written module are those of ``benchmarks/bench_fit_speed.py`` (800 chunks of 4
RK4 steps, batch 200, L1, AdamW): the hand-written module is cast to the precision (``module.to(dtype)``) and fed the
chunks in it. One thread (the faster setting on these 2 shared cores in bench_fit_speed.py); per width, the four
variants (pdsl/hand × float32/float64) run in interleaved rounds after a warm-up round. Reported per precision: the
median of the per-round ratios hand / pdsl (the two epochs of a round ran back to back, under the same load: the
headline), the ratio of the medians, and the ratio of the median process CPU times (time this process was on a core:
less sensitive to other work on shared cores than wall time). The same θ and batches for both; the first batch's
loss and gradient are compared between them in each precision. Then, per width and precision, where one batch's time
goes (value + gradient, torch profiler self time: dense matrix products vs everything else) and the dense products'
floor (the same products timed alone). Appends to ``benchmarks/results_fit_speed.md`` (a section of its own).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from bench_fit_speed import BATCH, MODEL, STEPS, HandCHNN, make_data, pdsl_epoch, profile_split  # noqa: E402
from benchutil import git, loadavg, log, table  # noqa: E402
from pdsl.fit.config import FitConfig  # noqa: E402
from pdsl.fit.data import make_chunks  # noqa: E402
from pdsl.fit.run import prepare  # noqa: E402

DTYPES = {"float32": torch.float32, "float64": torch.float64}


def hand_epoch(model, chunks, seed: int, dtype) -> float:
    """bench_fit_speed.hand_epoch with the chunks in ``dtype``."""
    decay = [p for n, p in model.named_parameters() if n != "logm"]
    opt = torch.optim.AdamW([{"params": [model.logm], "weight_decay": 0.0}, {"params": decay, "weight_decay": 1e-4}],
                            lr=3e-3)
    order = np.random.default_rng([seed, 0]).permutation(len(chunks))
    total = 0.0
    for start in range(0, len(order), BATCH):
        part = chunks.take(order[start : start + BATCH])
        L = model.loss(torch.from_numpy(part.S0).to(dtype), torch.from_numpy(part.Y).to(dtype))
        opt.zero_grad()
        L.backward()
        opt.step()
        total += float(L.detach()) * len(part)
    return total / len(chunks)


def one_width(data: Path, hidden: int, rounds: int, seed: int = 0) -> tuple[list, list]:
    runs = {}
    for name in DTYPES:
        cfg = FitConfig(data=str(data), method="adamw", epochs=1, batch=BATCH, chunk=STEPS, val_fraction=0.0, threads=1,
                        backend="auto", dtype=name)
        runs[name] = prepare(str(MODEL), None, cfg, consts={"H": hidden})
        assert type(runs[name].loss).__name__ == "TorchChunkLoss"
    chunks = make_chunks(runs["float64"].train, STEPS, STEPS)
    theta0 = runs["float64"].layout.theta_from_p(runs["float64"].p_start)
    hands = {name: HandCHNN(hidden).to(dt) for name, dt in DTYPES.items()}
    first = chunks.take(np.arange(BATCH))
    checks, profiles = {}, {}
    torch.set_num_threads(1)
    for name, dt in DTYPES.items():
        L_p, g_p = runs[name].loss.value_grad(theta0, first)
        hands[name].load_pdsl_theta(theta0)
        hands[name].zero_grad()
        L_h = hands[name].loss(torch.from_numpy(first.S0).to(dt), torch.from_numpy(first.Y).to(dt))
        L_h.backward()
        g_h = hands[name].pdsl_grad()
        checks[name] = (abs(float(L_h.detach()) - L_p) / abs(L_p), float(np.abs(g_h - g_p).max() / np.abs(g_h).max()))

        def hand_batch(h=hands[name], d=dt):
            h.zero_grad()
            h.loss(torch.from_numpy(first.S0).to(d), torch.from_numpy(first.Y).to(d)).backward()

        profiles[name] = (_best_profile(lambda r=runs[name]: r.loss.value_grad(theta0, first)), _best_profile(hand_batch),
                          dense_floor(hidden, dt))
    variants = {}
    for name, dt in DTYPES.items():
        variants[("pdsl", name)] = lambda r=runs[name]: pdsl_epoch(r, chunks, theta0, seed, 0)
        variants[("hand", name)] = lambda h=hands[name], d=dt: (h.load_pdsl_theta(theta0), hand_epoch(h, chunks, seed, d))[1]
    keys = list(variants)
    samples = {k: [] for k in keys}
    cpu = {k: [] for k in keys}
    for r in range(rounds + 1):
        for k in keys[r % len(keys):] + keys[: r % len(keys)]:
            t0, c0 = time.perf_counter(), time.process_time()
            variants[k]()
            dt_, dc = time.perf_counter() - t0, time.process_time() - c0
            if r:
                samples[k].append(dt_)
                cpu[k].append(dc)
            log(f"  H = {hidden} round {r} {k[0]} {k[1]}: {dt_:.3f} s, CPU {dc:.3f} s (load {loadavg()})")
    med = {k: statistics.median(v) for k, v in samples.items()}
    rows, summary, prof_rows = [], [], []
    for name in DTYPES:
        p, h = samples[("pdsl", name)], samples[("hand", name)]
        per_round = statistics.median(b / a for a, b in zip(p, h))
        ratio = med[("hand", name)] / med[("pdsl", name)]
        cpu_ratio = statistics.median(cpu[("hand", name)]) / statistics.median(cpu[("pdsl", name)])
        rows.append([f"H = {hidden}, {name}", _fmt(p), _fmt(h), f"**{per_round:.2f}×**", f"{ratio:.2f}×",
                     f"{cpu_ratio:.2f}×", f"{checks[name][0]:.1e} / {checks[name][1]:.1e}"])
        summary.append([f"one epoch, H = {hidden}, {name}", f"{per_round:.2f}×", "≥ 1.5×",
                        "met" if per_round >= 1.5 else "**not met**"])
        pp, ph, floor = profiles[name]
        prof_rows.append([f"H = {hidden}, {name}", f"{pp['blas'] + pp['other']:.3f} s", f"{pp['blas']:.3f} s",
                          f"{pp['other']:.3f} s", f"{pp['ops']}", f"{ph['blas'] + ph['other']:.3f} s", f"{ph['blas']:.3f} s",
                          f"{ph['other']:.3f} s", f"{ph['ops']}", f"{floor:.3f} s"])
    return rows, summary, prof_rows


def _best_profile(fn, n: int = 3) -> dict:
    """profile_split of ``fn``, the least-disturbed (smallest total) of ``n`` profiled calls."""
    return min((profile_split(fn) for _ in range(n)), key=lambda d: d["blas"] + d["other"])


def dense_floor(hidden: int, dtype) -> float:
    """Process CPU time of the dense products one batch of pdsl's network needs, run alone (best of 3): per right-hand
    side (16 per batch: 4 RK4 steps × 4 stages) 2 hidden-to-hidden products forward, 2 for the input gradient, and 8 in
    the backward pass (the gradient pass reversed, its weight products, and ordinary backpropagation with its weight
    products), of (200 × H) by (H × H) — the operand sizes of the run, fresh operands each time."""
    g = torch.Generator().manual_seed(0)
    W = torch.randn(hidden, hidden, generator=g, dtype=torch.float64).to(dtype) / hidden**0.5
    A = [torch.randn(BATCH, hidden, generator=g, dtype=torch.float64).to(dtype) for _ in range(16)]

    def run():
        kept = []
        for e in range(16):  # forward and input gradient: 4 products chained
            x = A[e]
            for _ in range(4):
                x = torch.mm(x, W)
                kept.append(x)
        for e in range(16):  # backward: 4 chained products and 4 weight products (hᵀ z̄)
            x = kept[4 * e + 3]
            for k in range(4):
                x = torch.mm(x, W.t())
                torch.mm(kept[4 * e + k].t(), x)
    run()
    best = float("inf")
    for _ in range(3):
        c0 = time.process_time()
        run()
        best = min(best, time.process_time() - c0)
    return best


def _device_note() -> str:
    if torch.cuda.is_available():
        return f"A GPU is visible ({torch.cuda.get_device_name(0)}) but this script times the CPU only."
    return "No GPU on this machine: `--device cuda` not measured."


def _fmt(v) -> str:
    return f"{statistics.median(v):.3g} s ({min(v):.3g}–{max(v):.3g}, n={len(v)})"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--widths", type=int, nargs="+", default=[64, 256])
    ap.add_argument("--out", default=str(HERE / "results_fit_speed.md"))
    args = ap.parse_args(argv)
    started, load0 = time.perf_counter(), loadavg()
    work = Path(tempfile.mkdtemp(prefix="bench_fit_dtype_"))
    log(f"data: 800 trajectories of the 3-pendulum, one chunk each, in {work}")
    data = make_data(work, 800, 0)
    rows, summary, prof = [], [], []
    for hidden in args.widths:
        r, s, pr = one_width(data, hidden, args.rounds)
        rows += r
        summary += s
        prof += pr
    text = (
        f"\n\n## float32 and float64 against the hand-written CHNN in the same precision (issue 36.3)\n\n"
        f"Generated by `python benchmarks/bench_fit_speed_dtype.py --rounds {args.rounds}` in "
        f"{time.perf_counter() - started:.0f} s on {_dt.datetime.now(_dt.timezone.utc):%Y-%m-%d %H:%M UTC}, pdsl @ "
        f"{git('rev-parse', '--short', 'HEAD')}, torch {torch.__version__}, one thread, load {load0} → {loadavg()}. "
        "One epoch of the protocol above (800 chunks, batch 200, 4 RK4 steps, L1, AdamW); pdsl with `--dtype` on the "
        "torch backend, the hand-written module cast to the same dtype; interleaved rounds after a warm-up. "
        f"{_device_note()}\n\n"
        + table(["width, precision", "pdsl epoch (wall)", "hand-written torch epoch (wall)",
                 "hand / pdsl: median of per-round ratios", "ratio of medians", "ratio of median CPU times",
                 "first batch: loss / gradient, relative difference"], rows)
        + "\n\n" + table(["measure", "hand / pdsl (per-round)", "goal", "met?"], summary)
        + "\n\nWhere one batch goes (200 chunks, value + gradient, one thread, torch profiler self CPU time, the "
        "least disturbed of 3 profiled calls; the profiler inflates small operations; dense products = mm/addmm/bmm/matmul and their in-place forms), and the dense "
        "products of pdsl's network alone (`dense_floor`: 12 products of (200 × H)·(H × H) per right-hand side, 16 per "
        "batch, process CPU time, best of 3):\n\n"
        + table(["width, precision", "pdsl total", "pdsl dense", "pdsl rest", "pdsl ops", "hand total", "hand dense",
                 "hand rest", "hand ops", "pdsl's dense products alone"], prof) + "\n"
    )
    out = Path(args.out)
    out.write_text(out.read_text(encoding="utf-8").rstrip("\n") + text if out.exists() else text, encoding="utf-8")
    log(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
