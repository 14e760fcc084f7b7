#!/usr/bin/env python
"""How much the A8 metric of a trained model moves with the draw of its 100 test trajectories (issue 32 item 2).

    python benchmarks/study_chnn_test_draws.py --work W [--fits DIR ...] [--draws 5] [--systems 2]
    python benchmarks/study_chnn_test_draws.py --work W --quick     # 2 draws of 10 trajectories, report in W

The CHNN paper scores a model by the MEAN over 100 test trajectories of each one's geometric-mean bounded
relative error (A6/A8). On the chaotic pendulums that mean is carried by the few test trajectories of
highest energy, so it depends on which 100 are drawn. This study takes the fits of a finished
``repro_chnn.py`` run (``W/fit_<kind><N>``, and any further fit directories ``--fits``, e.g. another network
seed), draws ``--draws`` further test sets of 100 trajectories with ``pdsl simulate --random-init`` (the A3.1
initial states of ``models/pendulumN.phm``; seeds 2000 + 10·N + k, none used by the study itself), and scores
every fit on every draw with the study's own functions (``repro_chnn.predicted_cartesian``: ``pdsl evaluate``'s
rollouts, RK4 h = dt/4, torch backend; ``repro_chnn.score``). The run's own test set (seed 200 + N) is
draw 0. The pooled row scores all drawn trajectories together.

Output: ``benchmarks/results_chnn_test_draws.md`` (``--out``; ``--quick`` writes into the work directory),
whose last line is ``summary: …`` (numbers only).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import os
import platform
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import repro_chnn as RC  # noqa: E402

np = RC.np
OUT = HERE / "results_chnn_test_draws.md"


def test_files(work: Path, N: int, k: int, n: int) -> tuple[dict, np.ndarray, np.ndarray]:
    """Draw k's test trajectories (k = 0: the run's own set) in each kind's columns."""
    d = work / f"draws{N}" / f"draw{k}"
    d.mkdir(parents=True, exist_ok=True)
    if k == 0:
        src = work / f"data{N}" / "test_trajectories.csv"
    else:
        src = d / "test_trajectories.csv"
        if not src.is_file():
            tmp = d / "test_trajectories.tmp.csv"
            RC.simulate(N, n, 2000 + 10 * N + k, tmp)
            tmp.replace(src)
    tt, Zt = RC.read_trajectories(src, N)
    files = {}
    for kind in RC.KINDS:
        if RC.DATA_KIND[kind] is None:
            cols, Z = RC.cartesian_columns(N), Zt
        else:
            cols, Z = RC.angle_columns(N, RC.DATA_KIND[kind]), RC.to_angles(Zt, N, RC.DATA_KIND[kind])
        files[kind] = RC.write_trajectories(d / f"test_{kind}.csv", cols, tt, Z)
    return files, tt, Zt


def fmt(x: float) -> str:
    return f"{x:.2e}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", required=True, help="the work directory of a finished repro_chnn.py run")
    ap.add_argument("--fits", nargs="*", default=[], help="further fit directories (fit_<kind><N> of other runs)")
    ap.add_argument("--systems", type=int, nargs="+", default=[2], choices=[2, 3])
    ap.add_argument("--draws", type=int, default=5, help="test sets drawn besides the run's own (default 5)")
    ap.add_argument("--n-test", type=int, default=100)
    ap.add_argument("--hidden", type=int, default=None,
                    help="the run's network width (default 256, --full's; 16 with --quick, repro_chnn.py --quick's)")
    ap.add_argument("--quick", action="store_true", help="2 draws of 10 trajectories; report in the work directory")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    work = Path(args.work)
    draws, n_test = (2, 10) if args.quick else (args.draws, args.n_test)
    args.hidden = args.hidden or (16 if args.quick else 256)
    out = Path(args.out) if args.out else (work / "results_chnn_test_draws_quick.md" if args.quick else OUT)
    if args.quick and out.resolve() == OUT.resolve():
        ap.error("--quick never writes the committed results file")
    t0, load0 = time.perf_counter(), os.getloadavg()
    sections, summary = [], {}
    for N in args.systems:
        fits = []
        for d in [work / f"fit_{k}{N}" for k in RC.KINDS] + [Path(f) for f in args.fits]:
            kind = next((k for k in RC.KINDS if d.name == f"fit_{k}{N}"), None)
            if kind and (d / "params.json").is_file():
                label = RC.LABEL[kind] + ("" if d.parent == work else f" ({d.parent.name})")
                fits.append((kind, label, d))
        if not fits:
            ap.error(f"no fit_<kind>{N}/params.json in {work} or --fits")
        rows, pooled = [], {label: [] for _, label, _ in fits}
        for k in range(draws + 1):
            files, tt, Zt = test_files(work, N, k, n_test)
            if k == 0 and args.quick:
                tt, Zt = tt[:n_test], Zt[:n_test]
                files = {kind: _head(files[kind], n_test) for kind in files}
            for kind, label, d in fits:
                pred, _ = RC.predicted_cartesian(kind, N, args.hidden, d, files[kind])
                sc = RC.score(pred, Zt, tt, N)
                pooled[label] += sc["per_traj"]
                rows.append([f"{k}" + (" (the run's own)" if k == 0 else ""), label,
                             f"**{fmt(sc['geo']['mean'])}** ± {sc['geo']['ci95']:.1e}", fmt(sc["median"]),
                             fmt(sc["geo_of_geo"]), fmt(max(sc["per_traj"]))])
                summary.setdefault(f"n{N}_{kind}_{d.parent.name if d.parent != work else 'run'}", []).append(
                    sc["geo"]["mean"])
                RC.log(f"  {N}-pendulum draw {k}: {label} mean {sc['geo']['mean']:.3e}")
        for label, v in pooled.items():
            v = np.asarray(v)
            rows.append([f"pooled ({len(v)} trajectories)", label, f"**{fmt(v.mean())}** ± {1.96 * v.std(ddof=1) / np.sqrt(len(v)):.1e}",
                         fmt(float(np.median(v))), fmt(float(np.exp(np.mean(np.log(v))))), fmt(float(v.max()))])
        ref = RC.A8[N]
        sections += [f"## {N}-pendulum", "",
                     RC.table(["test draw", "model", "geo-mean Err: mean ± 95 % CI", "median", "geometric mean over ICs",
                               "worst trajectory"], rows), "",
                     "Authors (A8, their one test set): " + ", ".join(f"{RC.LABEL[k]} {fmt(v)}" for k, v in ref.items()) + ".", ""]
    sha = {p: RC.sha256(p) for p in [Path(__file__).resolve(), HERE / "repro_chnn.py"]
           + sorted({RC.MODELS / f"{k}{N}.phm" for N in args.systems for k in RC.KINDS})}
    flat = {}
    for key, v in summary.items():
        flat[f"{key}_min"], flat[f"{key}_max"], flat[f"{key}_mean"] = min(v), max(v), float(np.mean(v))
    md = [
        "# The A8 mean over test draws: how much the CHNN study's headline metric moves with the 100 test trajectories",
        "",
        "Machine-generated by `benchmarks/study_chnn_test_draws.py` (do not edit by hand).",
        "",
        f"- command: `python benchmarks/study_chnn_test_draws.py {' '.join(sys.argv[1:] if argv is None else argv)}`",
        f"- written: {_dt.datetime.now().isoformat(timespec='seconds')}; python {platform.python_version()}; "
        f"{(time.perf_counter() - t0) / 60:.1f} min; load average {load0[0]:.2f} → {os.getloadavg()[0]:.2f}",
        f"- {draws} further test sets of {n_test} trajectories (`pdsl simulate models/pendulumN.phm --random-init {n_test} "
        "--seed 2000+10N+k --rtol 1e-10`), draw 0 the run's own; every fit scored on every draw.",
        "",
        "| file | sha256 |",
        "|---|---|",
        *[f"| {p.relative_to(RC.ROOT)} | `{h}` |" for p, h in sha.items()],
        "",
        *sections,
        "summary: " + " ".join(f"{k}={v:.6g}" for k, v in flat.items()),
    ]
    tmp = out.with_suffix(out.suffix + ".tmp")
    tmp.write_text("\n".join(md) + "\n")
    tmp.replace(out)
    RC.log(f"-> {out}")
    return 0


def _head(path: Path, n: int) -> Path:
    """The first n trajectories of a test file (quick mode)."""
    lines = path.read_text().splitlines()
    keep = [lines[0]] + [ln for ln in lines[1:] if int(float(ln.split(",", 1)[0])) < n]
    out = path.with_name(path.stem + f"_first{n}.csv")
    out.write_text("\n".join(keep) + "\n")
    return out


if __name__ == "__main__":
    raise SystemExit(main())
