#!/usr/bin/env python
"""Training speed: one epoch of the 3-pendulum CHNN protocol, `pdsl fit` vs hand-written torch.

    python benchmarks/bench_fit_speed.py            # full run (about 15 minutes on 2 shared cores)
    python benchmarks/bench_fit_speed.py --quick    # H = 64, fewer repeats (about 3 minutes)

The protocol (BENCHMARKS A3.1, A4, A5): 800 training chunks of 4 steps (one random chunk from each
of 800 simulated 3-pendulum trajectories, `pdsl simulate --random-init`), minibatches of 200,
RK4 on the data grid (dt = 0.03), the L1 loss over the Cartesian state (x, ẋ), AdamW (lr 3e-3,
weight decay 1e-4 on the network), the CHNN of `benchmarks/models/chnn3.phm`: learned masses
(log space) and a 6 → 256 → 256 → 256 → 1 tanh potential, 133,636 parameters in all.

* **pdsl**: `pdsl.fit.run.prepare` (the model compiled, the data read and chunked as `pdsl fit`
  does), then one epoch of `pdsl.fit.train.adamw` — exactly what `pdsl fit` runs per epoch
  (validation off). The loss is on the torch backend (`--backend auto` picks it for networks
  trained by AdamW): pdsl's symbolic IR lowered to batched torch (`pdsl/backend/torch_backend.py`).
* **hand-written torch** (this file, `HandCHNN`): the same model written directly — H(x, p) =
  Σ|p_i|²/(2m_i) + V(x), ∇_x V by `autograd.grad(create_graph=True)`, the closed-form link
  Jacobians DΦ and d(DΦ ẋ)/dx of A2.8, DΨ, and Eq. 6 ż = P J∇H with P = I − J DΨᵀ(DΨ J DΨᵀ)⁻¹DΨ
  (batched `linalg.solve`), RK4, v -> p = m v at the chunk start and back, autograd through it.
  Same weights, same data, same batches: its loss and gradient are checked equal to pdsl's.

Both are timed with torch's default thread count (2 here) and with one thread, in interleaved
rounds; the faster setting of each counts. An extra section times the CasADi backend on the same
batch at a smaller width (its per-sample graphs cannot build the 256-wide model in reasonable
time; the full run tries, with a time limit). Results: stdout and `benchmarks/results_fit_speed.md`.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import statistics
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

import casadi as ca  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

import pdsl  # noqa: E402
from pdsl.fit.checkpoint import State  # noqa: E402
from pdsl.fit.config import FitConfig  # noqa: E402
from pdsl.fit.data import make_chunks  # noqa: E402
from pdsl.fit.run import prepare  # noqa: E402
from pdsl.fit.train import TrainOptions, adamw  # noqa: E402
from pendulum_data import (cartesian_columns, one_chunk_per_trajectory, read_trajectories, simulate,  # noqa: E402
                           write_trajectories)
sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchutil, also when loaded by path
from benchutil import loadavg, log, table  # noqa: E402

MODEL = HERE / "models" / "chnn3.phm"
N, DT, STEPS, BATCH = 3, 0.03, 4, 200
LENGTHS = [1.1167, 0.9389, 1.0359]


def fmt(samples, unit="s") -> str:
    scale = {"s": 1.0, "ms": 1e3}[unit]
    med = statistics.median(samples) * scale
    return f"{med:.4g} {unit} ({min(samples) * scale:.3g}–{max(samples) * scale:.3g}, n={len(samples)})"


# ---------------------------------------------------------------- hand-written CHNN (Eq. 6)
class HandCHNN(torch.nn.Module):
    """CHNN of A1.4 for an N-pendulum chain, written directly in torch (float64)."""

    def __init__(self, hidden: int):
        super().__init__()
        self.logm = torch.nn.Parameter(torch.zeros(N, dtype=torch.float64))
        layers, sizes = [], [2 * N, hidden, hidden, hidden, 1]
        for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
            layers.append(torch.nn.Linear(a, b, dtype=torch.float64))
            if i < len(sizes) - 2:
                layers.append(torch.nn.Tanh())
        self.V = torch.nn.Sequential(*layers)

    def load_pdsl_theta(self, theta: np.ndarray) -> None:
        """θ in pdsl's layout: log-masses, then per layer W (column-major, fan_out × fan_in) and b."""
        with torch.no_grad():
            self.logm.copy_(torch.from_numpy(theta[:N]))
            k = N
            for lin in (m for m in self.V if isinstance(m, torch.nn.Linear)):
                fo, fi = lin.weight.shape
                lin.weight.copy_(torch.from_numpy(theta[k : k + fo * fi].reshape(fi, fo).T.copy()))
                k += fo * fi
                lin.bias.copy_(torch.from_numpy(theta[k : k + fo]))
                k += fo

    def pdsl_grad(self) -> np.ndarray:
        def grad(p):  # the output bias does not enter the dynamics: no gradient (None), 0 in pdsl
            return np.zeros(p.shape) if p.grad is None else p.grad.numpy()

        g = [grad(self.logm)]
        for lin in (m for m in self.V if isinstance(m, torch.nn.Linear)):
            g += [grad(lin.weight).T.ravel(), grad(lin.bias)]
        return np.concatenate(g)

    def dynamics(self, x, p):
        """ż = P J ∇H (Eq. 6) for x, p of shape (B, N, 2)."""
        B, D, C = x.shape[0], 2 * N, N
        m = self.logm.exp()
        minv = (1 / m)[None, :, None]
        with torch.enable_grad():
            xr = x if x.requires_grad else x.detach().requires_grad_(True)
            dV = torch.autograd.grad(self.V(xr.reshape(B, D)).sum(), xr, create_graph=True)[0]
        v = p * minv
        # link k joins node k−1 (the ground for k = 0) and node k: Φ_k = |x_k − x_{k−1}|² − l_k²
        d = torch.cat([x[:, :1], x[:, 1:] - x[:, :-1]], 1)
        dv = torch.cat([v[:, :1], v[:, 1:] - v[:, :-1]], 1)
        idx = torch.arange(N)
        DPhi = x.new_zeros(B, C, N, 2)
        DPhid = x.new_zeros(B, C, N, 2)  # d(DΦ ẋ)/dx
        DPhi[:, idx, idx] = 2 * d
        DPhid[:, idx, idx] = 2 * dv
        DPhi[:, idx[1:], idx[1:] - 1] = -2 * d[:, 1:]
        DPhid[:, idx[1:], idx[1:] - 1] = -2 * dv[:, 1:]
        DPhi, DPhid = DPhi.reshape(B, C, D), DPhid.reshape(B, C, D)
        Minv = (1 / m).repeat_interleave(2)
        DPsi = torch.cat([torch.cat([DPhi, torch.zeros_like(DPhi)], 2), torch.cat([DPhid, DPhi * Minv], 2)], 1)
        gH = torch.cat([dV.reshape(B, D), v.reshape(B, D)], 1)  # (∂H/∂x, ∂H/∂p)
        JgH = torch.cat([gH[:, D:], -gH[:, :D]], 1)
        JDPsiT = torch.cat([DPsi[:, :, D:], -DPsi[:, :, :D]], 2).transpose(1, 2)  # J DΨᵀ
        lam = torch.linalg.solve(DPsi @ JDPsiT, DPsi @ JgH.unsqueeze(-1))
        zdot = JgH - (JDPsiT @ lam).squeeze(-1)
        return zdot[:, :D].reshape(x.shape), zdot[:, D:].reshape(x.shape)

    def rk4(self, x, p, h):
        k1 = self.dynamics(x, p)
        k2 = self.dynamics(x + h / 2 * k1[0], p + h / 2 * k1[1])
        k3 = self.dynamics(x + h / 2 * k2[0], p + h / 2 * k2[1])
        k4 = self.dynamics(x + h * k3[0], p + h * k3[1])
        return (x + h / 6 * (k1[0] + 2 * k2[0] + 2 * k3[0] + k4[0]), p + h / 6 * (k1[1] + 2 * k2[1] + 2 * k3[1] + k4[1]))

    def loss(self, S0, Y):
        """L1 over (x, v) at the chunk's later samples; S0 (B, 4N), Y (B, 4N, n) in pdsl's column order."""
        B = S0.shape[0]
        m = self.logm.exp()[None, :, None]
        x, p = S0[:, : 2 * N].reshape(B, N, 2), S0[:, 2 * N :].reshape(B, N, 2) * m
        total = 0
        for k in range(Y.shape[2]):
            x, p = self.rk4(x, p, DT)
            total = total + (x.reshape(B, -1) - Y[:, : 2 * N, k]).abs().sum() + (
                (p / m).reshape(B, -1) - Y[:, 2 * N :, k]).abs().sum()
        return total / Y.numel()


def hand_epoch(model: HandCHNN, chunks, seed: int, epoch: int) -> float:
    decay = [p for n, p in model.named_parameters() if n != "logm"]
    opt = torch.optim.AdamW([{"params": [model.logm], "weight_decay": 0.0}, {"params": decay, "weight_decay": 1e-4}], lr=3e-3)
    order = np.random.default_rng([seed, epoch]).permutation(len(chunks))
    total = 0.0
    for start in range(0, len(order), BATCH):
        part = chunks.take(order[start : start + BATCH])
        L = model.loss(torch.from_numpy(part.S0), torch.from_numpy(part.Y))
        opt.zero_grad()
        L.backward()
        opt.step()
        total += float(L.detach()) * len(part)
    return total / len(chunks)


# ---------------------------------------------------------------- data and runs
def make_data(work: Path, n_traj: int, seed: int) -> Path:
    full = simulate(N, n_traj, seed, work / "trajectories.csv")
    t, Z = read_trajectories(full, N)
    tc, Zc = one_chunk_per_trajectory(t, Z, seed)
    return write_trajectories(work / "chunks.csv", cartesian_columns(N), tc, Zc)


def pdsl_run(data: Path, hidden: int, threads: int, backend: str = "auto"):
    cfg = FitConfig(data=str(data), method="adamw", epochs=1, batch=BATCH, chunk=STEPS, val_fraction=0.0,
                    threads=threads, backend=backend)
    return prepare(str(MODEL), None, cfg, consts={"H": hidden})


def pdsl_epoch(run, chunks, theta0, seed: int, epoch: int) -> float:
    state = State(theta=theta0.copy())  # epoch 0: the minibatch order of the hand-written loop
    empty = chunks.take(slice(0, 0))
    opts = TrainOptions(epochs=1, batch=BATCH, seed=seed, progress=False)
    res = adamw(run.loss, chunks, empty, state, opts)
    return res.state.history["train"][-1]


def profile_split(fn) -> dict:
    """Self CPU time of one call, split into dense matrix products (BLAS) and everything else."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    blas = other = 0.0
    calls = 0
    for ev in prof.key_averages():
        t = ev.self_cpu_time_total / 1e6
        calls += ev.count
        if ev.key in ("aten::mm", "aten::addmm", "aten::addmm_", "aten::bmm", "aten::baddbmm", "aten::matmul", "aten::mv",
                      "aten::addmv", "aten::addmv_"):
            blas += t
        else:
            other += t
    return {"blas": blas, "other": other, "ops": calls}


def casadi_batch_subprocess(data: Path, hidden: int, timeout: float) -> dict:
    """Build the CasADi chunk loss (value + gradient, batch 200) and time it, in a fresh process."""
    code = f"""
import json, sys, time
sys.path.insert(0, {str(ROOT)!r}); sys.path.insert(0, {str(HERE)!r})
from bench_fit_speed import pdsl_run
from pdsl.fit.data import make_chunks
import numpy as np
t0 = time.perf_counter()
run = pdsl_run({str(data)!r}, {hidden}, 1, backend="casadi")
chunks = make_chunks(run.train, {STEPS}, {STEPS}).take(slice(0, {BATCH}))
theta = run.layout.theta_from_p(run.p_start)
fn = run.loss.value_grad_function({BATCH})
build = time.perf_counter() - t0
times = []
for _ in range(3):
    t0 = time.perf_counter(); L, g = run.loss.value_grad(theta, chunks); times.append(time.perf_counter() - t0)
print(json.dumps({{"build": build, "times": times, "loss": L, "kind": run.num.kind}}))
"""
    t0 = time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return {"timeout": timeout, "elapsed": time.perf_counter() - t0}
    if proc.returncode != 0:
        return {"error": proc.stderr[-2000:]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="H = 64, 2 rounds, no CasADi build at H = 256")
    ap.add_argument("--hidden", type=int, default=None, help="hidden width (default 256; 64 with --quick)")
    ap.add_argument("--rounds", type=int, default=None, help="timed epochs per variant (default 5; 2 with --quick)")
    ap.add_argument("--thread-rounds", type=int, default=1, help="timed epochs of the multi-threaded variants (default 1)")
    ap.add_argument("--casadi-timeout", type=float, default=600.0, help="seconds allowed to build the CasADi loss at H = 256")
    ap.add_argument("--out", default=str(HERE / "results_fit_speed.md"))
    args = ap.parse_args(argv)
    hidden = args.hidden or (64 if args.quick else 256)
    rounds = args.rounds or (2 if args.quick else 5)
    seed = 0
    t_start = time.perf_counter()
    load_start = loadavg()
    default_threads = torch.get_num_threads()
    work = Path(tempfile.mkdtemp(prefix="bench_fit_speed_"))
    log(f"data: 800 trajectories of the 3-pendulum, one chunk each (A4) in {work}")
    data = make_data(work, 800, seed)

    t0 = time.perf_counter()
    runs = {th: pdsl_run(data, hidden, th) for th in sorted({1, default_threads})}
    compile_s = (time.perf_counter() - t0) / len(runs)
    run = runs[1]
    assert type(run.loss).__name__ == "TorchChunkLoss", "auto backend should be torch here"
    chunks = make_chunks(run.train, STEPS, STEPS)
    assert len(chunks) == 800, len(chunks)
    theta0 = run.layout.theta_from_p(run.p_start)
    n_params = run.layout.n_theta
    log(f"pdsl: {n_params} parameters, model + loss prepared in {compile_s:.2f} s")

    hand = HandCHNN(hidden)
    n_hand = sum(p.numel() for p in hand.parameters())

    # ---- the same loss and gradient on the first batch
    first = chunks.take(np.arange(BATCH))
    L_p, g_p = run.loss.value_grad(theta0, first)
    hand.load_pdsl_theta(theta0)
    hand.zero_grad()
    L_h = hand.loss(torch.from_numpy(first.S0), torch.from_numpy(first.Y))
    L_h.backward()
    g_h = hand.pdsl_grad()
    loss_rel = abs(float(L_h) - L_p) / abs(L_p)
    grad_rel = float(np.abs(g_h - g_p).max() / np.abs(g_p).max())
    log(f"same model: loss {L_p:.12g} (pdsl) vs {float(L_h):.12g} (hand), rel. diff {loss_rel:.1e}; "
        f"gradient max rel. diff {grad_rel:.1e}")

    # ---- interleaved timing of one epoch
    variants = {}
    for th in sorted(runs):
        variants[f"pdsl, {th} thread{'s' if th > 1 else ''}"] = (
            "pdsl", th, lambda e, r=runs[th]: pdsl_epoch(r, chunks, theta0, seed, e))
        variants[f"hand-written torch, {th} thread{'s' if th > 1 else ''}"] = (
            "hand", th, lambda e: (hand.load_pdsl_theta(theta0), hand_epoch(hand, chunks, seed, 0))[1])
    names = list(variants)
    samples = {n: [] for n in names}
    losses = {n: None for n in names}
    for r in range(rounds + 1):  # round 0 is the warm-up
        order = names[r % len(names):] + names[: r % len(names)]
        for name in order:
            kind, th, fn = variants[name]
            if th > 1 and r > args.thread_rounds:  # several threads on shared cores: slow, timed less often
                continue
            torch.set_num_threads(th)
            t0 = time.perf_counter()
            losses[name] = fn(r)
            dt_ = time.perf_counter() - t0
            if r > 0:
                samples[name].append(dt_)
            log(f"  round {r} {name}: {dt_:.2f} s (epoch loss {losses[name]:.6g}; load {loadavg()})")
    torch.set_num_threads(default_threads)
    best = {}
    for kind in ("pdsl", "hand"):
        cands = [n for n in names if variants[n][0] == kind]
        best[kind] = min(cands, key=lambda n: statistics.median(samples[n]))
    med = {k: statistics.median(samples[best[k]]) for k in best}
    mins = {k: min(samples[best[k]]) for k in best}
    ratio, ratio_min = med["hand"] / med["pdsl"], mins["hand"] / mins["pdsl"]
    log(f"ratio (hand / pdsl, medians of the best thread setting): {ratio:.2f}x")

    # ---- where the time goes (one batch, one thread)
    torch.set_num_threads(1)
    th0 = torch.tensor(theta0, requires_grad=True)
    prof_p = profile_split(lambda: run.loss.objective(th0, first).backward())
    hand.load_pdsl_theta(theta0)
    prof_h = profile_split(lambda: hand.loss(torch.from_numpy(first.S0), torch.from_numpy(first.Y)).backward())
    torch.set_num_threads(default_threads)

    # ---- the CasADi backend on the same batch
    small = 64 if hidden != 64 else 32
    log(f"CasADi backend, H = {small}: one batch of {BATCH} chunks (value + gradient) in a subprocess")
    cas_small = casadi_batch_subprocess(data, small, 900)
    run_small = pdsl_run(data, small, 1)
    hand_small = HandCHNN(small)
    th_small = run_small.layout.theta_from_p(run_small.p_start)
    torch.set_num_threads(1)
    t_small_p, t_small_h = [], []
    th_s = torch.tensor(th_small, requires_grad=True)
    for _ in range(4):
        t0 = time.perf_counter()
        run_small.loss.objective(th_s, first).backward()
        t_small_p.append(time.perf_counter() - t0)
        hand_small.load_pdsl_theta(th_small)
        t0 = time.perf_counter()
        hand_small.loss(torch.from_numpy(first.S0), torch.from_numpy(first.Y)).backward()
        t_small_h.append(time.perf_counter() - t0)
    torch.set_num_threads(default_threads)
    cas_full = None
    if not args.quick and hidden == 256:
        log(f"CasADi backend, H = 256: building the loss graph (limit {args.casadi_timeout:.0f} s)")
        cas_full = casadi_batch_subprocess(data, 256, args.casadi_timeout)

    # ---- report
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, capture_output=True,
                           text=True).stdout.strip()
    env = table(["", ""], [
        ["date", _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")],
        ["mode", "quick (`--quick`)" if args.quick else "full"],
        ["machine", f"`{platform.platform()}`, {platform.machine()}, os.cpu_count() = {os.cpu_count()}"],
        ["load average at start / end (1/5/15 min)", f"{load_start} → {loadavg()}"],
        ["python", platform.python_version()],
        ["pdsl", f"{getattr(pdsl, '__version__', '?')} @ {commit}{' (uncommitted changes in the tree)' if dirty else ''}"],
        ["torch", f"{torch.__version__} ({default_threads} intra-op threads by default)"],
        ["casadi / numpy", f"{ca.__version__} / {np.__version__}"],
    ])
    target = "met" if ratio >= 1.0 else "missed"
    moon = "met" if ratio >= 3.0 else "missed"
    rows = [[n, fmt(samples[n]), f"{losses[n]:.6g}"] for n in names]

    def split_row(label, pr):
        tot = pr["blas"] + pr["other"]
        return [label, f"{tot:.3f} s", f"{pr['blas']:.3f} s ({100 * pr['blas'] / tot:.0f} %)", f"{pr['other']:.3f} s",
                pr["ops"]]

    def cas_text(res, h):
        if res is None:
            return "not run"
        if "timeout" in res:
            return f"the loss graph was not built within {res['timeout']:.0f} s (process stopped)"
        if "error" in res:
            return "failed: " + res["error"].splitlines()[-1]
        return f"{statistics.median(res['times']):.3g} s per batch ({res['kind']} graphs; built in {res['build']:.1f} s)"

    md = [
        "# Training speed: `pdsl fit` vs hand-written torch (3-pendulum CHNN)",
        "",
        f"Generated by `python benchmarks/bench_fit_speed.py{' --quick' if args.quick else ''}` in "
        f"{time.perf_counter() - t_start:.0f} s. See [docs/benchmarks.md](../docs/benchmarks.md).",
        "",
        env,
        "",
        "## Summary",
        "",
        table(["", "pdsl (`adamw` epoch, torch backend)", "hand-written torch", "ratio hand / pdsl (medians)",
               "ratio of minima", "target ≥ 1×", "moonshot ≥ 3×"],
              [[f"one epoch: 800 chunks, batch 200, 4 RK4 steps, L1, AdamW, H = {hidden} ({n_params:,} parameters)",
                f"{med['pdsl']:.3g} s ({best['pdsl']})", f"{med['hand']:.3g} s ({best['hand']})", f"**{ratio:.2f}×**",
                f"{ratio_min:.2f}×", target, moon]]),
        "",
        "## Setting",
        "",
        f"- data: 800 trajectories of `models/pendulum3.phm` from `pdsl simulate --random-init 800 --seed {seed}` "
        "(the A3.1 sampler `models/pendulum3.sample`), 100 samples at dt = 0.03, CVODES rtol 1e-10; one random "
        "5-sample chunk kept per trajectory (A4.2) → 800 chunks.",
        f"- model: `benchmarks/models/chnn3.phm` with `H = {hidden}`: {n_params:,} parameters in pdsl, "
        f"{n_hand:,} in the hand-written module (3 log-masses + the same MLP).",
        f"- same model and loss: on the first batch of 200 chunks at the same θ the losses differ by "
        f"{loss_rel:.1e} (relative) and the gradients by {grad_rel:.1e} (max, relative to the largest entry).",
        "- timing: one warm-up round, then " + f"{rounds} rounds; in each round every variant runs one epoch (4 AdamW "
        "steps from the same starting θ, a fresh optimiser, the same minibatch order), variants rotated from round "
        f"to round (the {default_threads}-thread variants, much slower on these shared cores, in {args.thread_rounds} "
        "timed round(s) only). pdsl's time includes its per-epoch work (minibatch order, optimiser set-up, the state copy); "
        f"model compilation and loss construction (once, {compile_s:.2f} s) are not included.",
        "",
        "## One epoch, every variant",
        "",
        table(["variant", "time per epoch: median (min–max, n)", "epoch loss"], rows),
        "",
        "## Where the time goes (one batch of 200 chunks, value + gradient, 1 thread, torch profiler self time)",
        "",
        table(["", "total", "dense products (mm/addmm/bmm)", "everything else", "profiled ops"],
              [split_row("pdsl (torch backend)", prof_p), split_row("hand-written torch", prof_h)]),
        "",
        "## The CasADi backend on the same batch",
        "",
        "The first backend of `pdsl fit` evaluates each chunk's rollout as a CasADi graph (`Function.map` over "
        "the batch): the network is a chain of matrix–vector products per sample, the CasADi virtual machine's "
        "dense product is not a BLAS kernel, and networks of up to 20,000 weights are expanded to scalar SX graphs.",
        "",
        table(["", f"H = {small}, one batch (value + gradient)", "H = 256"],
              [["CasADi backend (`--backend casadi`)", cas_text(cas_small, small), cas_text(cas_full, 256)],
               ["torch backend (`--backend auto`), 1 thread", f"{statistics.median(t_small_p):.3g} s", "see above"],
               ["hand-written torch, 1 thread", f"{statistics.median(t_small_h):.3g} s", "see above"]]),
        "",
    ]
    Path(args.out).write_text("\n".join(md))
    log(f"-> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
