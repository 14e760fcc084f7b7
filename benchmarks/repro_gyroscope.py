#!/usr/bin/env python
"""Reproduction study (BENCHMARKS A3.4, A4–A8, Part G item 19; issue 32 item 1): the CHNN paper's gyroscope
(Fig. 1) — a CHNN on the Cartesian rigid body + ball joint against a ZXZ Euler-angle HNN.

    python benchmarks/repro_gyroscope.py --quick                        # smoke run (a few minutes), report in the work dir
    python benchmarks/repro_gyroscope.py --work W --budget 3600         # the paper's scale, stops after an hour of training
    python benchmarks/repro_gyroscope.py --work W --resume              # continue it (as often as needed)
    python benchmarks/repro_gyroscope.py --work W --resume --budget 0   # only rewrite the report from what W holds

Defaults are the paper's scale (A4–A5): 800 training trajectories cut to one random 4-step chunk each,
100 test trajectories of 100 samples at dt = 0.02 s, every MLP 3 × 256 tanh, 2000 epochs. Such a run
takes hours on 2 shared cores: ``--budget SECONDS`` stops training at an epoch boundary (every fit
checkpoints each epoch), evaluates each model at the epoch it reached (marked partial in the report,
with the epoch) and ``--resume --work W`` continues where it stopped. ``--dtype float32`` trains on the
torch backend in float32. ``--quick`` writes its report into the work directory, never over the
committed ``benchmarks/results_gyroscope.md``.

Everything goes through pdsl's own tools (the machinery of benchmarks/repro_chnn.py, imported):

* data — ``pdsl simulate models/gyroscope.phm --random-init`` (the A3.4 initial states of
  ``models/gyroscope.sample``, CVODES rtol 1e-10, 100 samples at dt = 0.02): N_train trajectories cut to
  ONE random 5-sample chunk each (A4.2), N_test full test trajectories from another seed. The HNN gets
  the same trajectories as turned-frame ZXZ Euler angles with the canonical momenta of the TRUE moments
  about the pivot (``benchmarks/gyroscope_data.py``; tests/fit/test_repro_gyroscope.py checks that this
  data solves the Euler-angle Hamiltonian to 1e-6 and conserves energy, L_z and p_ψ).
* models — ``benchmarks/models/chnn_gyroscope.phm`` (Cartesian Obj3D, 6 rigidity constraints and the known
  ball joint, learned mass and moments, MLP potential of the 12 node coordinates) and
  ``benchmarks/models/hnn_gyroscope_euler.phm`` (ZXZ angles in a frame turned by π/2 against gimbal lock,
  MLP potential, MLP Cholesky factor of the inverse mass matrix).
* training — ``pdsl fit MODEL --const H=… --epochs … --val-fraction 0`` with the A5 defaults (AdamW lr
  3e-3, weight decay 1e-4, cosine, minibatch 200, RK4 on the data grid, L1 over the state columns).
* evaluation — ``pdsl evaluate`` (``--backend torch --integrator rk4 --substeps 8``: RK4 at h = 0.0025
  from each test trajectory's first sample over its 100 samples). The Euler predictions are mapped to the
  Cartesian (x, ẋ) with q̇ = ∂H/∂p of the LEARNED H; both models are scored on the full Cartesian state by
  the A6 bounded relative error, its geometric mean over t₁ … t₉₉ (trapezoid, t = 0 excluded), averaged
  over the test trajectories (the A8 column) and also as a geometric mean over them; the energy error
  uses the TRUE Hamiltonian. The true model rolled out the same way shows the integration floor; the
  true model from initial states perturbed by 1e-4 the chaos floor (A8's "pert. GT").
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import subprocess
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

import repro_chnn as RC  # noqa: E402  (fit, weight draw, sha256, pdsl runner: one machinery for both studies)
from benchutil import log, table  # noqa: E402
import gyroscope_data as gd  # noqa: E402
from pdsl.fit import metrics as M  # noqa: E402
from pdsl.fit.data import load_dataset  # noqa: E402
from pdsl.fit.evaluate import evaluate  # noqa: E402
from pdsl.fit.run import apply_fitted  # noqa: E402
from pdsl.pipeline import compile_model  # noqa: E402
from pendulum_data import one_chunk_per_trajectory, pdsl as run_pdsl, write_trajectories  # noqa: E402

MODELS = HERE / "models"
KINDS = ("chnn", "hnn")
FILE = {"chnn": "chnn_gyroscope", "hnn": "hnn_gyroscope_euler"}
LABEL = {"chnn": "CHNN", "hnn": "HNN (Euler angles)"}
COORDS = {"chnn": "Cartesian (x, ẋ) of 4 nodes, mass and moments learned",
          "hnn": "ZXZ angles (π/2-turned frame) and momenta, learned V and L (M⁻¹ = LLᵀ + εI)"}
RC.LABEL.update({FILE[k]: LABEL[k] for k in KINDS})  # repro_chnn.fit logs by model-file name
A8 = {"chnn": 2.07e-5, "hnn": 1.84e-2}  # authors' CSVs (A8: mean over 100 test ICs of the per-trajectory geo mean)
A8_PERT = 2.68e-5
PERT_EPS = 1e-4
EVAL = dict(backend="torch", integrator="rk4", substeps=8)
SEEDS = {"train": 301, "test": 302, "chunk": 3}


def pdsl_count(kind: str, hidden: int) -> int:
    from pdsl.fit.params import make_layout

    c = compile_model(MODELS / f"{FILE[kind]}.phm", consts={"H": hidden})
    return make_layout(c.numeric, c.model, []).n_theta


# ---------------------------------------------------------------- data
def make_data(work: Path, n_train: int, n_test: int) -> dict:
    d = work / "data"
    d.mkdir(parents=True, exist_ok=True)
    train_csv, test_csv = d / "train_trajectories.csv", d / "test_trajectories.csv"
    t, Z = gd.read_trajectories(train_csv if train_csv.is_file() else gd.simulate(n_train, SEEDS["train"], train_csv))
    tt, Zt = gd.read_trajectories(test_csv if test_csv.is_file() else gd.simulate(n_test, SEEDS["test"], test_csv))
    # convert whole trajectories (angles unwrapped in time), then cut both forms at the same chunk
    tc, both = one_chunk_per_trajectory(t, np.concatenate([Z, gd.to_euler(Z)], axis=-1), seed=SEEDS["chunk"])
    files = {"chnn": (write_trajectories(d / "train_chnn.csv", gd.cartesian_columns(), tc, both[..., :24]),
                      write_trajectories(d / "test_chnn.csv", gd.cartesian_columns(), tt, Zt)),
             "hnn": (write_trajectories(d / "train_hnn.csv", gd.EULER_COLUMNS, tc, both[..., 24:]),
                     write_trajectories(d / "test_hnn.csv", gd.EULER_COLUMNS, tt, gd.to_euler(Zt)))}
    sin_th = np.abs(np.sin(gd.to_euler(Zt)[..., 1]))
    return {"files": files, "t_test": tt, "Z_test": Zt, "min_sin_theta": float(sin_th.min()),
            "near_singular": int((sin_th.min(axis=1) < 0.1).sum())}


# ---------------------------------------------------------------- rollouts and scores
def predicted_cartesian(kind: str, hidden: int, fit_dir: Path | None, test_csv: Path, model: Path | None = None):
    """Rollouts of every test trajectory (pdsl evaluate's function, torch backend), as Cartesian (n, T, 24)."""
    c = compile_model(model or MODELS / f"{FILE[kind]}.phm", consts=None if model else {"H": hidden})
    num = apply_fitted(c.numeric, fit_dir / "params.json") if fit_dir else c.numeric
    data = load_dataset(str(test_csv), num)
    scores, summary = evaluate(num, data, **EVAL)
    pred = np.stack([s.predicted for s in scores])  # (n, T, shown columns, in the order of the CSV)
    if kind in ("chnn", "true"):
        return pred, summary
    from pdsl.backend.torch_backend import TorchSystem  # q̇ = ∂H/∂p of the learned Hamiltonian

    ts = TorchSystem(c.system)
    with torch.no_grad():
        x = torch.tensor(pred.reshape(-1, 6))
        qdot = ts.rhs(torch.zeros(len(x), dtype=torch.float64), x, ts.bind(torch.tensor(num.p_default)))[:, :3]
    return gd.euler_to_cartesian(pred[..., :3], qdot.numpy().reshape(pred.shape[:-1] + (3,))), summary


def score(pred: np.ndarray, Z: np.ndarray, t: np.ndarray) -> dict:
    geo, final = [], []
    for k in range(len(Z)):
        err, g = M.trajectory_error(pred[k], Z[k], t[k])
        geo.append(g)
        final.append(err[-1])
    E, E_hat = gd.true_energy(Z), gd.true_energy(pred)
    energy = [float(np.mean(M.energy_error(E[k], E_hat[k])[1:])) for k in range(len(Z))]
    geo = np.asarray(geo)
    with np.errstate(divide="ignore"):
        gg = float(np.exp(np.mean(np.log(geo))))
    return {"geo": M.summarize(geo), "geo_of_geo": gg, "median": float(np.median(geo)),
            "final": M.summarize(final), "energy": M.summarize(energy), "per_traj": geo.tolist()}


def perturbed_truth(t: np.ndarray, Z: np.ndarray, work: Path, eps: float = PERT_EPS) -> dict:
    """A6's chaos floor on OUR test set: the true model from every test initial state perturbed by eps·N(0, 1)
    in each (turned-frame) Euler angle and rate (so it stays on the constraints), against the unperturbed data."""
    Y = gd.to_euler(Z[:, :1])
    q = Y[..., :3]
    qdot = np.linalg.solve(gd.euler_mass(q), Y[..., 3:, None])[..., 0]
    rng = np.random.default_rng(7)
    q, qdot = q + eps * rng.standard_normal(q.shape), qdot + eps * rng.standard_normal(qdot.shape)
    Zp = Z.copy()
    Zp[:, :1] = gd.euler_to_cartesian(q, qdot)
    f = write_trajectories(work / "data" / "test_perturbed.csv", gd.cartesian_columns(), t, Zp)
    pred, _ = predicted_cartesian("true", 0, None, f, model=ROOT / "models" / "gyroscope.phm")
    return {"score": score(pred, Z, t), "eps": eps}


# ---------------------------------------------------------------- data efficiency (A4.4, A7.2)
def parse_sizes(items: list[str]) -> list[tuple[str, int]]:
    """``["chnn=10", "hnn=200"]`` -> ``[("chnn", 10), ("hnn", 200)]``; ValueError on anything else."""
    out = []
    for item in items:
        kind, _, n = item.partition("=")
        if kind not in KINDS or not n.isdigit() or not 1 <= int(n) <= 800:
            raise ValueError(f"{item!r}: expected KIND=N with KIND one of {', '.join(KINDS)} and 1 <= N <= 800")
        out.append((kind, int(n)))
    return out


def first_trajectories(src: Path, n: int, dst: Path) -> Path:
    """The first ``n`` trajectories of a trajectory CSV (in file order), written atomically to ``dst``: the
    training sets of the efficiency runs are prefixes of the N = 800 run's set, so they are nested (A4.4)."""
    lines = src.read_text().splitlines()
    keep, seen = [lines[0]], []
    for line in lines[1:]:
        traj = line.split(",", 1)[0]
        if not seen or seen[-1] != traj:
            if len(seen) == n:
                break
            seen.append(traj)
        keep.append(line)
    if len(seen) < n:
        raise SystemExit(f"{src} holds {len(seen)} trajectories, fewer than {n}")
    tmp = dst.with_suffix(".tmp")
    tmp.write_text("\n".join(keep) + "\n")
    tmp.replace(dst)
    return dst


def efficiency(args, ap, argv) -> int:
    """The gyroscope's data-efficiency claim: full-scale fits on the first N trajectories of the N = 800 run's
    training set (``--base``, whose data and fits are reused: the same test set, nested training sets), scored
    like the main run, one report. Each sub-run lives in ``WORK/<kind><N>`` and resumes."""
    try:
        sizes = parse_sizes(args.efficiency)
    except ValueError as e:
        ap.error(f"--efficiency {e}")
    if not args.work or not args.base:
        ap.error("--efficiency needs --work (its sub-runs) and --base (the N = 800 run's work directory)")
    work, base = Path(args.work), Path(args.base)
    if not (base / "data" / "train_chnn.csv").is_file():
        ap.error(f"--base {base}: no data/train_chnn.csv (run the main study with --work {base} first)")
    work.mkdir(parents=True, exist_ok=True)
    hidden = args.hidden or (16 if args.quick else 256)
    epochs = (args.epochs or ([3] if args.quick else [2000]))[0]
    deadline = time.time() + (args.budget if args.budget is not None else float("inf"))
    t_start, load0 = time.perf_counter(), os.getloadavg()
    torch.set_num_threads(1)
    with open(work / "calls.log", "a") as fh:
        fh.write(json.dumps({"utc": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S"),
                             "argv": " ".join(sys.argv[1:] if argv is None else argv)}) + "\n")
    t_test, Z_test = gd.read_trajectories(base / "data" / "test_trajectories.csv")
    res_path = work / "results.json"
    res = json.loads(res_path.read_text()) if res_path.is_file() else {}

    def save():
        tmp = res_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(RC._jsonable(res), indent=1))
        tmp.replace(res_path)

    for kind in KINDS:  # the N = 800 fits of the base run, scored here on the same test set
        key = f"{kind}800"
        fit_dir = base / f"fit_{FILE[kind]}"
        if key not in res and (fit_dir / "params.json").is_file():
            log(f"=== {LABEL[kind]} at 800 (the base run's fit)")
            pred, _ = predicted_cartesian(kind, 256, fit_dir, base / "data" / f"test_{kind}.csv")
            params = json.loads((fit_dir / "params.json").read_text())
            res[key] = {"kind": kind, "n": 800, "score": score(pred, Z_test, t_test), "base": True,
                        "fit": {"epochs": params["epochs"], "train_loss": params["train_loss"], "partial": False,
                                "dir": str(fit_dir)}}
            save()
    for i, (kind, n) in enumerate(sizes):
        warmup = args.warmups.get(kind, 0)
        key = f"{kind}{n}" + (f"w{warmup}" if warmup else "")
        sub = work / key
        sub.mkdir(exist_ok=True)
        train = sub / "train.csv"
        if not train.is_file():
            first_trajectories(base / "data" / f"train_{kind}.csv", n, train)
        log(f"=== {LABEL[kind]} on the first {n} training trajectories ({hidden} wide, {epochs} epochs)")
        share = time.time() + (deadline - time.time()) / (len(sizes) - i)
        f = RC.fit(sub, FILE[kind], "", hidden, epochs, train, args.seed, args.lr, share, args.dtype, warmup=warmup)
        old = res.get(key)
        if old and old["fit"].get("epochs") == f["epochs"]:
            continue
        pred, _ = predicted_cartesian(kind, hidden, f["dir"], base / "data" / f"test_{kind}.csv")
        res[key] = {"kind": kind, "n": n, "score": score(pred, Z_test, t_test), "fit": f,
                    "train_sha256": RC.sha256(train)}
        log(f"    test: geometric-mean Err {res[key]['score']['geo']['mean']:.3e}")
        save()
    out = Path(args.out) if args.out else (work / "results_gyroscope_efficiency_quick.md" if args.quick
                                           else HERE / "results_gyroscope_efficiency.md")
    write_efficiency_report(out, res, dict(argv=" ".join(sys.argv[1:] if argv is None else argv), hidden=hidden,
                                           epochs=epochs, dtype=args.dtype, quick=args.quick, base=str(base),
                                           seconds=time.perf_counter() - t_start, load0=load0))
    log(f"-> {out}")
    return 0


def efficiency_claim(errs: dict) -> dict:
    """From {(kind, n): mean error}: for each HNN size, the smallest CHNN size that beats it and the data-efficiency
    factor that implies (HNN size / CHNN size), and the accuracy ratio HNN/CHNN at equal sizes."""
    out = {"beats": {}, "ratio_equal_n": {}}
    chnn = sorted((n, e) for (k, n), e in errs.items() if k == "chnn")
    for (k, n), e in sorted(errs.items()):
        if k != "hnn":
            continue
        better = [m for m, c in chnn if c < e]
        out["beats"][n] = (min(better), n / min(better)) if better else None
        if ("chnn", n) in errs:
            out["ratio_equal_n"][n] = e / errs[("chnn", n)]
    return out


def write_efficiency_report(path: Path, res: dict, s: dict) -> None:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    entries = sorted(res.values(), key=lambda r: (KINDS.index(r["kind"]), r["n"], r["fit"].get("warmup") or 0))
    rows, errs, stalls = [], {}, []
    for r in entries:
        sc, f = r["score"], r["fit"]
        ratio = RC.stalled(f) if "loss_at" in f else None  # did not train: last/first loss above RC.STALL
        if ratio is not None:
            stalls.append(f"{LABEL[r['kind']]} at {r['n']}{' with warm-up' if f.get('warmup') else ''} "
                          f"(last/first training loss {ratio:.2f})")
        elif not f.get("partial"):  # several trained fits of one size (with and without warm-up): the lower error
            key = (r["kind"], r["n"])
            errs[key] = min(errs.get(key, float("inf")), sc["geo"]["mean"])
        rows.append([LABEL[r["kind"]], str(r["n"]), f"{f['warmup']} epochs" if f.get("warmup") else "–",
                     f"{f['epochs']}" + (" (**partial**)" if f.get("partial") else "") + (" (base run)" if r.get("base") else ""),
                     f"{f['wall'] / 60:.1f} min" if "wall" in f else "–",
                     f"{f['train_loss']:.3g}" + (f" (**did not train**: {ratio:.2f} of its first epoch's)" if ratio else ""),
                     f"**{sc['geo']['mean']:.2e}** ± {sc['geo']['ci95']:.1e}", f"{sc['geo_of_geo']:.2e}",
                     f"{sc['median']:.2e}", str(sc["geo"].get("diverged", 0)),
                     f"`{r['train_sha256'][:12]}`" if r.get("train_sha256") else "the base run's"])
    claim = efficiency_claim(errs)
    lines_claim = []
    for n, b in claim["beats"].items():
        lines_claim.append(f"- HNN at {n} trajectories ({errs[('hnn', n)]:.2e}): " +
                           (f"the smallest CHNN training set run here that beats it has {b[0]} trajectories: "
                            f"**{b[1]:.0f}× fewer data**." if b else "no CHNN training set run here beats it."))
    for n, r in claim["ratio_equal_n"].items():
        lines_claim.append(f"- at {n} trajectories the HNN's error is **{r:.0f}×** the CHNN's.")
    best = max((b[1] for b in claim["beats"].values() if b), default=0.0)
    md = [
        "# The gyroscope's data efficiency (BENCHMARKS A4.4, A7.2): CHNN vs Euler-angle HNN over training-set sizes",
        "",
        f"Generated by `python benchmarks/repro_gyroscope.py {s['argv']}` ({_dt.datetime.now(_dt.timezone.utc):%Y-%m-%d %H:%M UTC}, "
        f"pdsl @ {commit}, `{platform.platform()}`, {os.cpu_count()} cores shared with other jobs, load {s['load0'][0]:.1f} → "
        f"{os.getloadavg()[0]:.1f}; torch {torch.__version__}, one thread; last call {s['seconds'] / 60:.1f} min). "
        "Every number below was measured by the run.",
        "",
        ("**Smoke run** (`--quick`): the numbers say nothing about the claim. " if s["quick"] else "")
        + f"Protocol: that of `results_gyroscope.md` (width {s['hidden']}, {s['epochs']} epochs, AdamW lr 3e-3 with "
        f"cosine decay, minibatch 200 or the whole set when smaller, {s['dtype']}, orthogonal weights), the same 100 test "
        f"trajectories. The training sets are **nested** as A4.4 asks: the first N trajectories (one chunk each) of the "
        f"N = 800 run's set (`{s['base']}`), whose CHNN and HNN fits give the 800 rows (rescored here). The model files' "
        "sha256 and weight draws are in `results_gyroscope.md`; each sub-run's training file's sha256 is in the last column.",
        "",
        table(["model", "training trajectories", "lr warm-up (recorded by the fit)", "epochs", "training time",
               "final training loss",
               "geo-mean Err: mean ± 95 % CI", "geometric mean over ICs", "median", "diverged rollouts",
               "training file sha256"], rows),
        "",
        "The claim (\"CHNN can be 100 times more data efficient or 260 times more accurate\", Fig. 1 middle); where a "
        "size was trained both with and without a learning-rate warm-up, the lower of the two errors counts (the "
        "stronger baseline):",
        "",
        *lines_claim,
        *([f"- left out of the claim, because the fit did not train (its last training loss is above "
           f"{RC.STALL:g} of its first epoch's; an optimisation failure, not the model class's accuracy): "
           + "; ".join(stalls) + "."] if stalls else []),
        "",
        "summary: " + " ".join(f"{k}_{n}={e:.6g}" for (k, n), e in sorted(errs.items())) + f" efficiency={best:.6g}",
    ]
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text("\n".join(md) + "\n")
    tmp.replace(path)


# ---------------------------------------------------------------- main
def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smoke run: 40 training / 10 test trajectories, H = 16, 3 epochs")
    ap.add_argument("--hidden", type=int, default=None, help="hidden width of every MLP (default 256, the paper's)")
    ap.add_argument("--n-train", type=int, default=None, help="training trajectories, one chunk each (default 800, A4)")
    ap.add_argument("--n-test", type=int, default=None, help="test trajectories (default 100, A4)")
    ap.add_argument("--epochs", type=int, nargs="+", default=None, metavar="E",
                    help="epochs: one value for both models, or two for CHNN, HNN (default 2000, A5)")
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--seed", type=int, default=0, help="seed of network initialisation and minibatches")
    ap.add_argument("--kinds", nargs="+", choices=KINDS, default=list(KINDS))
    ap.add_argument("--work", default=None, help="work directory (default: a new temporary directory)")
    ap.add_argument("--out", default=None, help="report (default benchmarks/results_gyroscope.md; "
                                                  "with --quick results_gyroscope_quick.md in the work directory)")
    ap.add_argument("--resume", action="store_true", help="continue the run in --work")
    ap.add_argument("--budget", type=float, default=None, help="seconds of training in this call; then partial results")
    ap.add_argument("--dtype", choices=("float64", "float32"), default="float64")
    ap.add_argument("--warmup", nargs="*", metavar="KIND=EPOCHS", default=[],
                    help="`pdsl fit --warmup EPOCHS` for that kind's fits (hnn=50: the HNN's softplus Cholesky diagonal "
                         "of M⁻¹ can die in the first AdamW steps); efficiency sub-runs with a warm-up are their own "
                         "entries (WORK/<kind><N>w<EPOCHS>); recorded by each fit")
    ap.add_argument("--efficiency", nargs="+", metavar="KIND=N", default=None,
                    help="data efficiency (A4.4): each KIND trained on the first N trajectories of the --base run's "
                         "training set; report results_gyroscope_efficiency.md")
    ap.add_argument("--base", default=None, help="with --efficiency: the work directory of the N = 800 run")
    args = ap.parse_args(argv)
    args.warmups = RC.parse_warmups(args.warmup, ap, KINDS)
    if args.efficiency is not None:
        return efficiency(args, ap, argv)
    if args.resume and not args.work:
        ap.error("--resume needs the --work directory of the run to continue")
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="repro_gyroscope_"))
    out = Path(args.out) if args.out else (work / "results_gyroscope_quick.md" if args.quick else HERE / "results_gyroscope.md")
    argv_text = " ".join(sys.argv[1:] if argv is None else argv)
    deadline = time.time() + (args.budget if args.budget is not None else float("inf"))
    hidden = args.hidden or (16 if args.quick else 256)
    n_train = args.n_train or (40 if args.quick else 800)
    n_test = args.n_test or (10 if args.quick else 100)
    ep = args.epochs or ([3] if args.quick else [2000])
    epochs = dict(zip(KINDS, ep * 2 if len(ep) == 1 else ep))
    work.mkdir(parents=True, exist_ok=True)
    with open(work / "calls.log", "a") as fh:  # every call on this work directory, listed by the report
        fh.write(json.dumps({"utc": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S"),
                             "argv": argv_text, "budget": args.budget}) + "\n")
    torch.set_num_threads(1)
    t_start = time.perf_counter()
    load0 = os.getloadavg()
    log(f"work directory {work}; H = {hidden}, N_train = {n_train}, N_test = {n_test}, epochs {epochs}")

    log("=== data")
    data = make_data(work, n_train, n_test)
    t_test, Z_test = data["t_test"], data["Z_test"]
    res: dict = {"data": {k: data[k] for k in ("min_sin_theta", "near_singular")}}
    pred, _ = predicted_cartesian("true", hidden, None, data["files"]["chnn"][1], model=ROOT / "models" / "gyroscope.phm")
    res["true"] = {"score": score(pred, Z_test, t_test)}
    res["pert"] = perturbed_truth(t_test, Z_test, work)
    log(f"    floors: integration {res['true']['score']['geo']['mean']:.2e}, chaos {res['pert']['score']['geo']['mean']:.2e}")
    before = json.loads((work / "results.json").read_text()) if args.resume and (work / "results.json").is_file() else {}
    kinds = [k for k in KINDS if k in args.kinds]
    for i, kind in enumerate(kinds):
        train_csv, test_csv = data["files"][kind]
        log(f"=== {LABEL[kind]} ({hidden} wide, {epochs[kind]} epochs)")
        share = time.time() + (deadline - time.time()) / (len(kinds) - i)  # the budget left, split over the fits left
        f = RC.fit(work, FILE[kind], "", hidden, epochs[kind], train_csv, args.seed, args.lr, share, args.dtype,
                   warmup=args.warmups.get(kind, 0))
        log(f"    trained {f['epochs']} epochs in {f['wall']:.0f} s ({f['s_per_epoch']:.3g} s per epoch), "
            f"final loss {f['train_loss']:.4g}")
        old = before.get(kind)
        if old and old["fit"].get("epochs") == f["epochs"] and old["fit"].get("partial") == f["partial"]:
            res[kind] = {**old, "fit": {**old["fit"], "dir": str(f["dir"])}}  # scored in an earlier call at this epoch
            log(f"    test (earlier call): geometric-mean Err {old['score']['geo']['mean']:.3e}")
            continue
        pred, _ = predicted_cartesian(kind, hidden, f["dir"], test_csv)
        s = score(pred, Z_test, t_test)
        entry = {"fit": f, "score": s, "n_params": pdsl_count(kind, hidden), "n_full_pdsl": pdsl_count(kind, 256)}
        if kind == "chnn":  # the CLI on the same files: its Cartesian summary is the score above
            ev = work / "eval_chnn.json"
            run_pdsl("evaluate", MODELS / f"{FILE[kind]}.phm", "--const", f"H={hidden}", "--data", test_csv,
                     "--params", f["dir"] / "params.json", "--backend", "torch", "--integrator", "rk4",
                     "--substeps", EVAL["substeps"], "--json", ev)
            cli = json.loads(ev.read_text())["relative error (geometric mean over t>0)"]["mean"]
            entry["cli_geo_mean"] = cli
            assert abs(cli - s["geo"]["mean"]) <= 1e-9 * s["geo"]["mean"], (cli, s["geo"]["mean"])
        res[kind] = entry
        log(f"    test: geometric-mean Err {s['geo']['mean']:.3e} ± {s['geo']['ci95']:.1e} "
            f"(geometric mean over ICs {s['geo_of_geo']:.3e})")
        (work / "results.json").write_text(json.dumps(RC._jsonable(res), indent=1))

    write_report(out, res, dict(hidden=hidden, n_train=n_train, n_test=n_test, epochs=epochs, lr=args.lr, seed=args.seed,
                                quick=args.quick, work=str(work), dtype=args.dtype, kinds=kinds,
                                seconds=time.perf_counter() - t_start, load0=load0, argv=argv_text))
    log(f"-> {out} ({time.perf_counter() - t_start:.0f} s)")
    return 0


def _settings(f: dict) -> dict:
    try:
        return json.loads((Path(f["dir"]) / "params.json").read_text()).get("settings", {})
    except (OSError, ValueError, KeyError):
        return {}


def _calls(work: Path) -> list[dict]:
    try:
        return [json.loads(line) for line in (work / "calls.log").read_text().splitlines() if line.strip()]
    except (OSError, ValueError):
        return []


def write_report(path: Path, res: dict, s: dict) -> None:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    load1 = os.getloadavg()
    kinds = [k for k in KINDS if k in res]
    partial = [k for k in kinds if res[k]["fit"].get("partial")]
    files = [(LABEL[k], f"benchmarks/models/{FILE[k]}.phm", res[k]["fit"]["model_sha256"], res[k]["fit"]["init"]) for k in kinds]
    files += [("true model (data)", "models/gyroscope.phm", RC.sha256(ROOT / "models" / "gyroscope.phm"), "–"),
              ("initial states (data)", "models/gyroscope.sample", RC.sha256(ROOT / "models" / "gyroscope.sample"), "–"),
              ("Euler-angle data map", "benchmarks/gyroscope_data.py", RC.sha256(HERE / "gyroscope_data.py"), "–")]
    md = [
        "# Reproduction study: CHNN vs Euler-angle HNN on the gyroscope (BENCHMARKS A3.4, A4–A8; issue 32 item 1)",
        "",
        ("**PARTIAL RESULT**: " + "; ".join(f"{LABEL[k]} stopped at epoch {res[k]['fit']['epochs']} of "
                                            f"{res[k]['fit']['target_epochs']}" for k in partial)
         + " (the training budget ran out; the learning rate had not finished its cosine schedule). "
         "`--resume --work` continues the run." if partial else "All fits ran their full epoch count."),
        "",
        f"Generated by `python benchmarks/repro_gyroscope.py` (last call {s['seconds'] / 60:.1f} min, "
        f"{_dt.datetime.now(_dt.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}, pdsl @ {commit}, `{platform.platform()}`, "
        f"{os.cpu_count()} cores shared with other jobs, load average {s['load0'][0]:.1f} → {load1[0]:.1f}; torch "
        f"{torch.__version__}, one thread). Every number below was measured by the run; nothing is hand-written.",
        "",
        f"Command: `python benchmarks/repro_gyroscope.py {s['argv']}`".rstrip(),
        "",
        "Files (sha256 when each fit ran; the initial-weight draw is what the model file declared when the fit ran, "
        f"network and minibatch seed {s['seed']}):",
        "",
        table(["role", "file", "sha256", "initial weights"], [[a, b, f"`{c}`", d] for a, b, c, d in files]),
        "",
        "Settings each fit recorded itself (`params.json` of its output directory, written by `pdsl fit`):",
        "",
        table(["model", "dtype", "network seed", "minibatch seed", "torch threads", "lr", "weight decay", "batch",
               "integrator", "chunk"],
              [[LABEL[k]] + [str(_settings(res[k]["fit"]).get(key, "?")) for key in
                             ("dtype", "network_seed", "seed", "threads", "lr", "weight_decay", "batch", "integrator", "chunk")]
               for k in kinds]),
        "",
        "Calls on the work directory (`calls.log`, appended by each call of this script; the report is written by the last):",
        "",
        *[f"- {c['utc']} UTC: `python benchmarks/repro_gyroscope.py {c['argv']}`" for c in _calls(Path(s["work"]))],
        "",
        "## Settings",
        "",
        table(["", "this run", "paper (A4–A5)"], [
            ["training data", f"{s['n_train']} trajectories (A3.4 initial states, seed {SEEDS['train']}), one random "
             f"5-sample chunk each (seed {SEEDS['chunk']})", "800, one chunk each"],
            ["test data", f"{s['n_test']} trajectories × 100 samples (dt = 0.02 s, 1.98 s), seed {SEEDS['test']}", "100 × 100"],
            ["MLP width (3 hidden layers, tanh)", f"{s['hidden']}", "256"],
            ["epochs (" + " / ".join(LABEL[k] for k in kinds) + ")",
             " / ".join(f"{res[k]['fit']['epochs']} of {res[k]['fit']['target_epochs']}" for k in kinds), "2000"],
            ["optimiser", f"AdamW lr {s['lr']:g}, weight decay 1e-4, cosine to 0 over the target epochs, minibatch 200",
             "same"],
            ["training precision", s["dtype"], "float32 (torch default)"],
            ["loss", "L1 over the model's state columns, 4-step RK4 rollouts on the data grid", "same"],
            ["test rollout", f"RK4, {EVAL['substeps']} steps per sample (h = {0.02 / EVAL['substeps']:g}), torch backend, "
             "from the first sample", "dopri5"],
            ["metric", "bounded relative error ‖ẑ−z‖/(‖ẑ‖+‖z‖) on the Cartesian (x, ẋ) of the 4 nodes (24 numbers), "
             "geometric mean over t₁…t₉₉ (t = 0 excluded), mean over test trajectories",
             "the repo's ‖ẑ−z‖/‖ẑ+z‖ variant, eps 1e-8"],
        ]),
        "",
        "Models. CHNN (`chnn_gyroscope.phm`): H = Tr(P M⁻¹ Pᵀ)/2 + V(X) with M of Eq. 9 from a learned mass and three "
        "learned moments (log space, starting at 1), V an MLP of the 12 node coordinates, the 6 rigidity constraints and "
        "the ball joint known; pdsl's Cartesian-Hamiltonian lowering (Eq. 6). HNN (`hnn_gyroscope_euler.phm`): ZXZ "
        "angles of the body in a world frame turned by π/2 about x (the authors rotate the frame so that the top "
        "upright or hanging is not the singularity; here the singularity lies on the horizontal y axis), "
        "H = ½|Lᵀp|² + ½ε|p|² + V(q), networks of (sin, cos) of the three angles. Deviation from the paper: the HNN is "
        "trained on (q, p) with p the momenta of the TRUE moments about the pivot (pdsl's Hamiltonian models show (q, p)); "
        "the paper maps the data's q̇ to p with the learned mass matrix. Its predictions are mapped back to Cartesian "
        "with q̇ = ∂H/∂p of the learned H. "
        f"Test set: min |sin θ'| over all test samples {res['data']['min_sin_theta']:.3f}; "
        f"{res['data']['near_singular']} of {s['n_test']} test trajectories come within |sin θ'| < 0.1 of the turned "
        "frame's singularity.",
        "",
        "## Results",
        "",
    ]
    chnn = res["chnn"]["score"]["geo"]["mean"] if "chnn" in res else float("nan")
    rows = []
    for k in kinds:
        r, f = res[k], res[k]["fit"]
        sc = r["score"]
        rows.append([LABEL[k], COORDS[k], f"{r['n_params']:,}", f"{r['n_full_pdsl']:,}",
                     f"{f['epochs']}" + (f" of {f['target_epochs']} (**partial**)" if f.get("partial") else ""),
                     f"{f['wall'] / 60:.1f} min ({f['s_per_epoch']:.2f} s/epoch)", f"{f['train_loss']:.3g}",
                     f"**{sc['geo']['mean']:.2e}** ± {sc['geo']['ci95']:.1e}", f"{sc['geo_of_geo']:.2e}", f"{sc['median']:.2e}",
                     f"{sc['final']['mean']:.2e}", f"{sc['energy']['mean']:.2e}", f"{sc['geo']['mean'] / chnn:.1f}×",
                     f"{A8[k]:.2e}"])
    for key, name, ref in (("true", f"true model (gyroscope.phm), RK4 h = {0.02 / EVAL['substeps']:g}: integration floor", "–"),
                           ("pert", f"true model from ICs perturbed by {PERT_EPS:g} (chaos floor, A6)", f"{A8_PERT:.2e} (pert. GT)")):
        sc = res[key]["score"]
        rows.append([name, "Cartesian", "–", "–", "–", "–", "–", f"{sc['geo']['mean']:.2e} ± {sc['geo']['ci95']:.1e}",
                     f"{sc['geo_of_geo']:.2e}", f"{sc['median']:.2e}", f"{sc['final']['mean']:.2e}",
                     f"{sc['energy']['mean']:.2e}", "–", ref])
    md += [
        table(["model", "coordinates", "parameters (trained)", "parameters at H = 256 (pdsl)", "epochs", "training time",
               "final training loss", "geo-mean Err: mean ± 95 % CI", "geometric mean over ICs", "median",
               "Err at 1.98 s (mean)", "energy error (true H, mean)", "÷ CHNN", "authors (A8)"], rows),
        "",
    ]
    ratio = res["hnn"]["score"]["geo"]["mean"] / chnn if "hnn" in res and "chnn" in res else float("nan")
    if "hnn" in res and "chnn" in res:
        md += [f"HNN / CHNN error ratio by the mean: **{ratio:.1f}×**; by the geometric mean over ICs "
               f"{res['hnn']['score']['geo_of_geo'] / res['chnn']['score']['geo_of_geo']:.1f}×; by the median "
               f"{res['hnn']['score']['median'] / res['chnn']['score']['median']:.1f}× (target ≥ 20× by the mean; the "
               f"authors' CSVs: {A8['hnn'] / A8['chnn']:.0f}× by the mean, 86× by the medians). CHNN vs the authors' "
               f"{A8['chnn']:.2e}: {chnn / A8['chnn']:.1f}× (target within 3×).", ""]
    md += ["Training loss at epochs " + "; ".join(
        f"{LABEL[k]}: " + ", ".join(f"{e}: {v:.3g}" for e, v in res[k]["fit"]["loss_at"].items()) for k in kinds) + ".", ""]
    if "cli_geo_mean" in res.get("chnn", {}):
        md += [f"`pdsl evaluate` on the CHNN (CLI, `--backend torch --integrator rk4 --substeps {EVAL['substeps']}`) "
               f"printed a geometric-mean error of {res['chnn']['cli_geo_mean']:.6e}, the value in the table.", ""]
    summary = [f"{k}_err={res[k]['score']['geo']['mean']:.6g}" for k in kinds] + [f"ratio={ratio:.6g}"]
    summary += [f"{k}_epochs={res[k]['fit']['epochs']}" for k in kinds]
    md.append("summary: " + " ".join(summary))
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text("\n".join(md) + "\n")
    tmp.replace(path)


if __name__ == "__main__":
    sys.exit(main())
