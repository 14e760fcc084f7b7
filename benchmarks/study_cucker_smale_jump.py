#!/usr/bin/env python
"""How far below the Cucker–Smale protocol's own floor the paper's validation MSE lies (issue 33 item 2).

    python benchmarks/study_cucker_smale_jump.py --work W          # a few minutes on one core
    python benchmarks/study_cucker_smale_jump.py --work W --quick  # smoke run (4 series), report in W

The true pairwise force of the 1D model (BENCHMARKS C6.1, ``models/cucker_smale.phm``) has a jump at q = 0:
its potential part is U'(|q|)·sign(q) with |U'(0)| = C_R/l_R − C_A/l_A = 248, and in 1D agents pass through
each other (every crossing flips that force). A learned F (an MLP, smooth) can only approximate the jump by a
steep ramp. This study replaces ``sign(q)`` in the TRUE model by ``tanh(q/eps)`` — the best a smooth F of that
form could do — and scores each variant with the validation protocol of ``benchmarks/repro_cucker_smale.py``
(50 series from random initial states, 40 s at 0.1 s, explicit midpoint one step per sample, ``pdsl.fit.evaluate``
on the torch backend; MSE over t_1 … t_400 and the 60 states, mean ± std over the series), against validation
data made both ways that script offers: exact (CVODES rtol 1e-10) and explicit midpoint at 0.1 s (the scheme of
training and scoring, so that the unmodified true model scores 0). If even the true force smoothed over a width
eps scores far above the paper's 0.06, a smooth learned F cannot reach it under this protocol.

Output: ``benchmarks/results_cucker_smale_jump.md`` (``--out``; ``--quick`` writes into the work directory),
last line ``summary: …`` (numbers only). Data come from ``pdsl simulate`` (``repro_cucker_smale.make_data``).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import repro_cucker_smale as R  # noqa: E402

OUT = HERE / "results_cucker_smale_jump.md"
EPS = (None, 0.001, 0.003, 0.01, 0.03, 0.1, 0.5)  # None: the true model as it is (sign)
TARGET = 0.06  # the paper's validation MSE (C6.4)


def variant(eps: float | None, work: Path) -> Path:
    """The true model with sign(q) replaced by tanh(q/eps) (None: unchanged), written into ``work``."""
    text = R.TRUE.read_text()
    if eps is None:
        return R.TRUE
    new = text.replace("*sign(x[i] - x[j])", f"*tanh((x[i] - x[j])/{eps!r})")
    if new.count("tanh(") != 2:
        raise SystemExit(f"{R.TRUE}: expected two `*sign(x[i] - x[j])` terms to replace")
    path = work / f"cucker_smale_tanh_{eps!r}.phm"
    path.write_text(new)
    return path


def _reading(summary: dict) -> str:
    """What the rows say, from the numbers."""
    exact = summary["exact_sign"]
    ok = [e for e in EPS[1:] if summary[f"rk2_eps{e:g}"] <= TARGET]
    bad = [e for e in EPS[1:] if summary[f"rk2_eps{e:g}"] > TARGET]
    text = (f"Reading: with exact data the true model itself scores {exact:.3g} under the paper's solver and grid "
            f"({exact / TARGET:.0f}× the paper's {TARGET:g}): no model can reach {TARGET:g} on that reading of the protocol. "
            "With midpoint-made data the unchanged true model scores 0; ")
    if ok and bad:
        text += (f"a force whose jump is resolved to a width of {max(ok):g} still meets {TARGET:g}, one smoothed over "
                 f"{min(bad):g} or more does not ({summary[f'rk2_eps{min(bad):g}']:.3g}). A smooth learned F must "
                 f"therefore rise by 2·248 over |q| ≲ {max(ok):g} — in a tanh layer fed q as it is (range ±95), a unit "
                 f"of input weight about 1/{max(ok):g}.")
    elif bad:
        text += f"every smoothing tried ({', '.join(f'{e:g}' for e in bad)}) misses {TARGET:g}."
    else:
        text += f"every smoothing tried meets {TARGET:g}."
    return text


def crossings(Z: np.ndarray, n: int) -> int:
    """Sign changes of x_j − x_i over all pairs, summed over the series (each is one jump of the true force)."""
    total = 0
    for S in Z:
        x = S[:, :n]
        d = np.sign(x[:, None, :] - x[:, :, None])
        total += int(np.sum(d[1:] * d[:-1] < 0) // 2)
    return total


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", default=None, help="work directory (data kept there; default a new temporary one)")
    ap.add_argument("--quick", action="store_true", help="smoke run: 4 validation series; report in the work directory")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="cs_jump_"))
    work.mkdir(parents=True, exist_ok=True)
    out = Path(args.out) if args.out else (work / "results_cucker_smale_jump_quick.md" if args.quick else OUT)
    if args.quick and out.resolve() == OUT.resolve():
        ap.error("--quick never writes the committed results file")
    n_val = 4 if args.quick else R.N_VAL
    t0, load0 = time.perf_counter(), os.getloadavg()
    rows, summary, info = [], {}, {}
    for solver in ("exact", "rk2"):
        d = work / solver
        d.mkdir(exist_ok=True)
        files = R.make_data(d, 1, n_val, solver)
        _, Zv = R.read_series(files["val"])
        info[solver] = crossings(Zv, R.N)
        for eps in EPS:
            pred, _ = R.rollouts(variant(eps, work), files["val"], None)
            m = R.mse_per_series(pred, Zv)
            st = R.stats(m)
            label = "sign(q) (the true model)" if eps is None else f"tanh(q/{eps:g})"
            rows.append([solver, label, f"{st['mean']:.3g} ± {st['std']:.2g}", f"{st['median']:.3g}", f"{st['max']:.3g}",
                         str(st["nonfinite"]), f"{st['mean'] / TARGET:.3g}×"])
            summary[f"{solver}_{'sign' if eps is None else f'eps{eps:g}'}"] = st["mean"]
            print(f"  {solver:5s} {label:26s} val MSE {st['mean']:.4g}", flush=True)
    sha = {p: R.sha256(p) for p in (R.TRUE, Path(__file__).resolve(), HERE / "repro_cucker_smale.py")}
    md = [
        "# Cucker–Smale: the protocol's floor when the true force's jump at q = 0 is smoothed (issue 33 item 2)",
        "",
        "Machine-generated by `benchmarks/study_cucker_smale_jump.py` (do not edit by hand).",
        "",
        f"- command: `python benchmarks/study_cucker_smale_jump.py {' '.join(sys.argv[1:] if argv is None else argv)}`",
        f"- written: {_dt.datetime.now().isoformat(timespec='seconds')}; git {R._git()}; python {platform.python_version()}; "
        f"{time.perf_counter() - t0:.0f} s; load average {load0[0]:.2f} → {os.getloadavg()[0]:.2f}",
        "",
        "| file | sha256 |",
        "|---|---|",
        *[f"| {R.rel(p)} | `{h}` |" for p, h in sha.items()],
        "",
        f"Validation data: {n_val} series by `pdsl simulate models/cucker_smale.phm` (seed {R.SEEDS['val']}, the "
        "initial states of `repro_cucker_smale.py`), made exactly (CVODES rtol 1e-10) or by explicit midpoint at 0.1 s. "
        f"Pair crossings in them (each flips the true force by 2·248/N): exact {info['exact']}, midpoint {info['rk2']}. "
        "Each row rolls a variant of the TRUE model out from every series' first sample by explicit midpoint at 0.1 s "
        "(`pdsl.fit.evaluate`, torch backend) — the protocol that scores the learned F — and gives the validation MSE "
        "(mean over t_1 … t_400 and the 60 states; mean ± std, median, max over the series).",
        "",
        R.table(["data made by", "potential force's sign factor", "val MSE mean ± std", "median", "max",
                 "non-finite rollouts", "÷ the paper's 0.06"], rows),
        "",
        _reading(summary),
        "",
        "summary: " + " ".join(f"{k}={v:.6g}" for k, v in summary.items()) + f" target={TARGET:g}",
    ]
    tmp = out.with_suffix(out.suffix + ".tmp")
    tmp.write_text("\n".join(md) + "\n")
    tmp.replace(out)
    print(f"-> {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
