#!/usr/bin/env python
"""Training speed in float32 and float64 (issue 36.3): one epoch of the CHNN protocol of bench_fit_speed.py, pdsl
(`pdsl fit --dtype float32|float64`, torch backend) against the hand-written torch CHNN in the same precision, at
hidden widths 64 and 256.

    python benchmarks/bench_fit_speed_dtype.py              # widths 64 and 256, 3 timed rounds (a few minutes)
    python benchmarks/bench_fit_speed_dtype.py --rounds 2   # shorter

The protocol, the model and the hand-written module are those of ``benchmarks/bench_fit_speed.py`` (800 chunks of 4
RK4 steps, batch 200, L1, AdamW): the hand-written module is cast to the precision (``module.to(dtype)``) and fed the
chunks in it. One thread (the faster setting on these 2 shared cores in bench_fit_speed.py); per width, the four
variants (pdsl/hand × float32/float64) run in interleaved rounds after a warm-up round; medians. The same θ and
batches for both; the first batch's loss is compared between them in each precision. Appends to
``benchmarks/results_fit_speed.md`` (a section of its own).
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

from bench_fit_speed import BATCH, MODEL, STEPS, HandCHNN, make_data, pdsl_epoch  # noqa: E402
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
    checks = {}
    for name, dt in DTYPES.items():
        L_p, _ = runs[name].loss.value_grad(theta0, first)
        hands[name].load_pdsl_theta(theta0)
        L_h = float(hands[name].loss(torch.from_numpy(first.S0).to(dt), torch.from_numpy(first.Y).to(dt)))
        checks[name] = abs(L_h - L_p) / abs(L_p)
    variants = {}
    for name, dt in DTYPES.items():
        variants[("pdsl", name)] = lambda r=runs[name]: pdsl_epoch(r, chunks, theta0, seed, 0)
        variants[("hand", name)] = lambda h=hands[name], d=dt: (h.load_pdsl_theta(theta0), hand_epoch(h, chunks, seed, d))[1]
    keys = list(variants)
    samples = {k: [] for k in keys}
    torch.set_num_threads(1)
    for r in range(rounds + 1):
        for k in keys[r % len(keys):] + keys[: r % len(keys)]:
            t0 = time.perf_counter()
            variants[k]()
            dt_ = time.perf_counter() - t0
            if r:
                samples[k].append(dt_)
            log(f"  H = {hidden} round {r} {k[0]} {k[1]}: {dt_:.3f} s (load {loadavg()})")
    med = {k: statistics.median(v) for k, v in samples.items()}
    rows, summary = [], []
    for name in DTYPES:
        p, h = samples[("pdsl", name)], samples[("hand", name)]
        ratio = med[("hand", name)] / med[("pdsl", name)]
        rows.append([f"H = {hidden}, {name}", _fmt(p), _fmt(h), f"**{ratio:.2f}×**", f"{min(h) / min(p):.2f}×",
                     f"{checks[name]:.1e}"])
        summary.append([f"one epoch, H = {hidden}, {name}", f"{ratio:.2f}×", "≥ 1.5×", "met" if ratio >= 1.5 else
                        "**not met**"])
    return rows, summary


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
    rows, summary = [], []
    for hidden in args.widths:
        r, s = one_width(data, hidden, args.rounds)
        rows += r
        summary += s
    text = (
        f"\n\n## float32 and float64 against the hand-written CHNN in the same precision (issue 36.3)\n\n"
        f"Generated by `python benchmarks/bench_fit_speed_dtype.py --rounds {args.rounds}` in "
        f"{time.perf_counter() - started:.0f} s on {_dt.datetime.now(_dt.timezone.utc):%Y-%m-%d %H:%M UTC}, pdsl @ "
        f"{git('rev-parse', '--short', 'HEAD')}, torch {torch.__version__}, one thread, load {load0} → {loadavg()}. "
        "One epoch of the protocol above (800 chunks, batch 200, 4 RK4 steps, L1, AdamW); pdsl with `--dtype` on the "
        "torch backend, the hand-written module cast to the same dtype; interleaved rounds after a warm-up, medians. "
        "No GPU on this machine: `--device cuda` not measured.\n\n"
        + table(["width, precision", "pdsl epoch", "hand-written torch epoch", "hand / pdsl (medians)",
                 "ratio of minima", "first-batch loss, relative difference"], rows)
        + "\n\n" + table(["measure", "hand / pdsl", "goal", "met?"], summary) + "\n"
    )
    out = Path(args.out)
    out.write_text(out.read_text(encoding="utf-8").rstrip("\n") + text if out.exists() else text, encoding="utf-8")
    log(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
