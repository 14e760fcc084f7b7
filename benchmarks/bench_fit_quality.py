#!/usr/bin/env python
"""Fit quality of `pdsl fit` against an independent maximum-likelihood reference (issue 27).

    python benchmarks/bench_fit_quality.py --quick                 # one noise draw per case (a few minutes)
    python benchmarks/bench_fit_quality.py                         # 30 noise draws per case (coverage)
    python benchmarks/bench_fit_quality.py --quick --problems pendulum,fhn --out benchmarks/results_fit_quality.md
    # another pdsl, e.g. the baseline before the issue-27 fit defaults (results_fit_quality_baseline.md):
    git archive 0669098 pdsl grammars models | tar -x -C /tmp/pdsl_0669098
    python benchmarks/bench_fit_quality.py --quick --pdsl-src /tmp/pdsl_0669098 --pdsl-label "0669098"

The problems (models in benchmarks/fit_quality/, data generated HERE without pdsl: a hand-written
right-hand side, `rhs(t, x, p, u, M)` below, integrated by scipy's solve_ivp (DOP853, rtol 1e-10,
atol 1e-12) with seeded Gaussian noise of known σ):

* `pendulum`   driven damped pendulum m l² θ'' = −m g l sin θ − c θ' + τ(t), only θ measured, τ known
               (`--input tau=EXPR`); free m, l, c (g known). 4 trajectories × 201 samples, dt 0.05, σ 0.01.
* `fhn`        FitzHugh–Nagumo (Ramsay et al. 2007), only V measured; free a, b, c. 3 × 201, dt 0.1, σ 0.05.
* `fhn_far`    the same data, start guesses 5× off (a, b × 5, c / 5).
* `lv`         Lotka–Volterra with 5 % multiplicative noise x·exp(0.05 ε), sparse samples (dt 0.5, the
               period is ≈ 6–8): written in log populations u = ln x, v = ln y, so the noise is additive
               σ = 0.05 (`--noise u=0.05`; pdsl's `--noise COL=5%` would be the other way to say it, but
               relative noise on x is only approximately Gaussian); free alpha, beta, gamma, delta. 4 × 101.
* `chain`      two masses, two springs, two dampers, a known force on the first mass
               (`--input F=EXPR`), only x2 measured; free k1, k2, c1, c2 (masses known). 3 × 301, dt 0.05.
* `dcmotor`    DC motor L i' = V − R i − K w, J w' = K i − b w, i and w measured, a different chirp voltage
               per trajectory given as a data column (piecewise linear between samples, exactly what pdsl
               assumes of an input column); free R, L, K, J, b. 3 × 241, dt 0.025.
* `dcmotor_w`  the same data with only w measured, R known, free L, K, J, b: NOT identifiable (three
               combinations of four parameters). Checks that pdsl says so.
* `outliers`   the pendulum case with 2 % of the θ samples replaced by 10σ outliers: does pdsl flag them?

Per case and noise draw:

(a) `pdsl fit MODEL --data CSV --free ... --param NAME=START ... --noise COL=σ ... [--input ...] -o DIR
    --quiet --no-plots` in a subprocess — no tuning option (chunk, val-fraction, start, method, ...
    all at their defaults; --quiet/--no-plots only silence the progress bar and skip the PNGs). The
    starts are 20–50 % off the truth. Read: params.json (values, stderr, identifiability) and stdout.
(b) the reference: single shooting over whole trajectories, every trajectory's full initial state
    estimated with the parameters (measured initial states too: they are noisy), minimising
    Σ((y − ŷ)/σ)² with scipy.optimize.least_squares (Levenberg–Marquardt) and the exact Jacobian from
    the forward sensitivity equations (Sx' = f_x Sx, Sp' = f_x Sp + f_p, integrated with the state by
    solve_ivp, rtol 1e-10; f_x, f_p differentiated by sympy from the same hand-written `rhs`), started
    from the TRUE values — the best these data allow. Standard errors: s² (JᵀJ)⁻¹ with s² = |r|²/(m − n),
    the parameter block of the full inverse (initial states profiled out), as pdsl reports them.

Metrics per parameter: stderr ratio pdsl/ref (target ≤ 1.2), |pdsl − ref| / se_ref (target ≤ 2),
(pdsl − truth)/se_pdsl, wall time of the pdsl process (incl. start-up, model compile cache as it is)
and of the reference least-squares fit (the one-off sympy derivation excluded), whether pdsl called a
parameter "not determined" although the reference pins it (relative se_ref < 50 %); full mode also
coverage over the draws: the fraction with |estimate − truth| ≤ 1 se and ≤ 2 se (targets 55–80 % and
90–99 %), for pdsl and for the reference. pdsl failures (non-zero exit) are recorded with the first
line of the error, not raised.
"""

from __future__ import annotations

import argparse
import csv
import datetime as _dt
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import sympy as sp
from scipy.integrate import solve_ivp
from scipy.optimize import least_squares

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
MODELS = HERE / "fit_quality"
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))
from benchutil import git, loadavg, log, table  # noqa: E402

RTOL, ATOL = 1e-10, 1e-12
PDSL_TIMEOUT = 900


PDSL_SRC: Path | None = None  # --pdsl-src: run the pdsl package found in this folder instead of the installed one
PDSL_CACHE: Path | None = None  # its own compiled-model cache (PDSL_CACHE_DIR), so two versions never share one


def pdsl_command() -> tuple[list[str], dict, Path]:
    """The command that runs `pdsl`, its environment and working directory."""
    env = dict(os.environ)
    if PDSL_SRC is not None:
        py = ROOT / ".venv" / "bin" / "python"
        env["PYTHONPATH"] = str(PDSL_SRC)
        if PDSL_CACHE is not None:
            env["PDSL_CACHE_DIR"] = str(PDSL_CACHE)
        return [str(py) if py.exists() else sys.executable, "-m", "pdsl"], env, PDSL_SRC
    exe = ROOT / ".venv" / "bin" / "pdsl"
    if exe.exists():
        return [str(exe)], env, ROOT
    found = shutil.which("pdsl")
    return ([found] if found else [sys.executable, "-m", "pdsl"]), env, ROOT


# ----------------------------------------------------------------------------------------------------------------
# problems: the right-hand sides, written once; M is numpy (data) or sympy (the reference's derivatives)


def rhs_pendulum(t, x, p, u, M):
    th, om = x
    ml2 = p["m"] * p["l"] ** 2
    return [om, (-p["m"] * p["g"] * p["l"] * M.sin(th) - p["c"] * om + u["tau"]) / ml2]


def rhs_fhn(t, x, p, u, M):
    V, R = x
    return [p["c"] * (V - V ** 3 / 3 + R), -(V - p["a"] + p["b"] * R) / p["c"]]


def rhs_lv_log(t, x, p, u, M):
    lu, lv = x
    return [p["alpha"] - p["beta"] * M.exp(lv), p["delta"] * M.exp(lu) - p["gamma"]]


def rhs_chain(t, x, p, u, M):
    x1, x2, v1, v2 = x
    s2 = p["k2"] * (x2 - x1) + p["c2"] * (v2 - v1)  # force of spring/damper 2 on mass 1
    return [v1, v2, (u["F"] - p["k1"] * x1 - p["c1"] * v1 + s2) / p["m1"], -s2 / p["m2"]]


def rhs_dcmotor(t, x, p, u, M):
    i, w = x
    return [(u["V"] - p["R"] * i - p["K"] * w) / p["L"], (p["K"] * i - p["b"] * w) / p["J"]]


TAU_EXPR = "1.2*sin(2.3*t) + 0.8*cos(0.9*t)"
F_EXPR = "2*sin(1.9*t) + 1.5*sin(4.3*t) + sin(7.1*t)"


def tau_fn(t):
    return 1.2 * np.sin(2.3 * t) + 0.8 * np.cos(0.9 * t)


def force_fn(t):
    return 2 * np.sin(1.9 * t) + 1.5 * np.sin(4.3 * t) + np.sin(7.1 * t)


@dataclass
class Problem:
    key: str
    title: str
    model: str  # file under benchmarks/fit_quality/
    states: list[str]  # pdsl's column names, in the order of rhs's x
    params: dict[str, float]  # every parameter rhs reads (true values)
    free: list[str]
    start: dict[str, float]
    rhs: Callable
    t: np.ndarray
    n_traj: int
    measured: list[str]
    sigma: dict[str, float]
    x0: Callable  # rng -> (n_traj, n) initial states
    expr_inputs: dict[str, tuple[str, Callable]] = field(default_factory=dict)  # name -> (pdsl expr, numpy fn)
    data_inputs: Callable | None = None  # rng -> {name: (n_traj, len(t)) samples} (piecewise linear)
    design_seed: int = 0
    outlier_fraction: float = 0.0
    note: str = ""

    @property
    def obs_idx(self) -> list[int]:
        return [self.states.index(c) for c in self.measured]


def _uniform(rng, lo, hi, n_traj):
    lo, hi = np.asarray(lo, float), np.asarray(hi, float)
    return lo + (hi - lo) * rng.uniform(size=(n_traj, len(lo)))


def _chirps(rng, t, n_traj):
    T = t[-1]
    f0, f1 = 0.1, 3.0
    out = np.empty((n_traj, len(t)))
    for k in range(n_traj):
        amp, phase = rng.uniform(6, 10), rng.uniform(0, 2 * np.pi)
        out[k] = amp * np.sin(2 * np.pi * (f0 * t + 0.5 * (f1 - f0) / T * t ** 2) + phase)
    return {"V": out}


def problems() -> dict[str, Problem]:
    pend = dict(model="pendulum.phm", states=["theta", "der(theta)"],
                params={"g": 9.81, "m": 0.8, "l": 0.6, "c": 0.15}, free=["m", "l", "c"],
                start={"m": 1.04, "l": 0.45, "c": 0.21}, rhs=rhs_pendulum, t=np.round(np.arange(201) * 0.05, 10),
                n_traj=4, measured=["theta"], sigma={"theta": 0.01},
                x0=lambda rng: _uniform(rng, [-1, -1], [1, 1], 4), expr_inputs={"tau": (TAU_EXPR, tau_fn)},
                design_seed=101)
    fhn = dict(model="fitzhugh_nagumo.phm", states=["V", "R"], params={"a": 0.2, "b": 0.2, "c": 3.0},
               free=["a", "b", "c"], rhs=rhs_fhn, t=np.round(np.arange(201) * 0.1, 10), n_traj=3,
               measured=["V"], sigma={"V": 0.05}, x0=lambda rng: _uniform(rng, [-2, -1], [2, 1.5], 3),
               design_seed=102)
    dcm = dict(model="dc_motor.phm", states=["i", "w"],
               params={"R": 2.0, "L": 0.5, "K": 0.2, "J": 0.02, "b": 0.05}, rhs=rhs_dcmotor,
               t=np.round(np.arange(241) * 0.025, 10), n_traj=3, x0=lambda rng: _uniform(rng, [-.5, -.5], [.5, .5], 3),
               data_inputs=lambda rng: _chirps(rng, np.round(np.arange(241) * 0.025, 10), 3), design_seed=105)
    P = [
        Problem(key="pendulum", title="driven damped pendulum, θ only", **pend),
        Problem(key="fhn", title="FitzHugh–Nagumo, V only", start={"a": 0.26, "b": 0.15, "c": 3.9}, **fhn),
        Problem(key="fhn_far", title="FitzHugh–Nagumo, V only, start 5× off", start={"a": 1.0, "b": 1.0, "c": 0.6},
**fhn),
        Problem(key="lv", title="Lotka–Volterra, 5 % relative noise, dt 0.5", model="lotka_volterra_log.phm",
                states=["u", "v"], params={"alpha": 1.0, "beta": 0.4, "gamma": 1.0, "delta": 0.2},
                free=["alpha", "beta", "gamma", "delta"],
                start={"alpha": 1.3, "beta": 0.28, "gamma": 1.2, "delta": 0.15}, rhs=rhs_lv_log,
                t=np.round(np.arange(101) * 0.5, 10), n_traj=4, measured=["u", "v"], sigma={"u": 0.05, "v": 0.05},
                x0=lambda rng: np.log([5.0, 2.5]) + _uniform(rng, [-.8, -.8], [.8, .8], 4), design_seed=103),
        Problem(key="chain", title="two-mass chain, x2 only, force on m1", model="two_mass_chain.phm",
                states=["x1", "x2", "der(x1)", "der(x2)"],
                params={"m1": 1.0, "m2": 0.5, "k1": 20.0, "k2": 10.0, "c1": 0.4, "c2": 0.2},
                free=["k1", "k2", "c1", "c2"], start={"k1": 26.0, "k2": 7.0, "c1": 0.56, "c2": 0.15},
                rhs=rhs_chain, t=np.round(np.arange(301) * 0.05, 10), n_traj=3, measured=["x2"],
                sigma={"x2": 0.005}, x0=lambda rng: _uniform(rng, [-.1, -.1, -.3, -.3], [.1, .1, .3, .3], 3),
                expr_inputs={"F": (F_EXPR, force_fn)}, design_seed=104),
        Problem(key="dcmotor", title="DC motor, i and w, chirp voltage", free=["R", "L", "K", "J", "b"],
                start={"R": 2.6, "L": 0.35, "K": 0.26, "J": 0.015, "b": 0.07}, measured=["i", "w"],
                sigma={"i": 0.02, "w": 0.05}, **dcm),
        Problem(key="dcmotor_w", title="DC motor, w only, R known (not identifiable)", free=["L", "K", "J", "b"],
                start={"L": 0.35, "K": 0.26, "J": 0.015, "b": 0.07}, measured=["w"], sigma={"w": 0.05},
                note="expected: not identifiable", **dcm),
        Problem(key="outliers", title="pendulum with 2 % 10σ outliers", outlier_fraction=0.02, **pend),
    ]
    return {p.key: p for p in P}


# ----------------------------------------------------------------------------------------------------------------
# data (numpy + solve_ivp only)


@dataclass
class Data:
    X: np.ndarray  # (n_traj, n, T) true states
    Y: np.ndarray  # (n_traj, n_obs, T) measurements
    x0: np.ndarray  # (n_traj, n) true initial states
    inputs: dict  # name -> (n_traj, T) for data inputs
    outliers: int = 0


def input_funcs(prob: Problem, inputs: dict) -> Callable:
    """u(t) -> {name: (n_traj,) values}: expressions evaluated, data columns interpolated linearly."""
    t = prob.t

    def u(tt):
        out = {name: np.full(prob.n_traj, fn(tt)) for name, (_, fn) in prob.expr_inputs.items()}
        for name, arr in inputs.items():
            k = min(max(int(np.searchsorted(t, tt, side="right")) - 1, 0), len(t) - 2)
            w = (tt - t[k]) / (t[k + 1] - t[k])
            out[name] = (1 - w) * arr[:, k] + w * arr[:, k + 1]
        return out

    return u


def integrate(fun, t: np.ndarray, z0: np.ndarray, piecewise: bool) -> np.ndarray:
    """solve_ivp (DOP853, rtol 1e-10) of fun from z0 sampled at t: (len(z0), len(t)). With piecewise-linear
    inputs (data columns) interval by interval, so that the kinks at the samples never fall inside a step."""
    if not piecewise:
        sol = solve_ivp(fun, (t[0], t[-1]), z0, method="DOP853", t_eval=t, rtol=RTOL, atol=ATOL)
        if not sol.success or sol.y.shape[1] != len(t):
            raise RuntimeError(f"integration failed: {sol.message}")
        return sol.y
    out = np.empty((len(z0), len(t)))
    out[:, 0] = z0
    for k in range(len(t) - 1):
        sol = solve_ivp(fun, (t[k], t[k + 1]), out[:, k], method="DOP853", rtol=RTOL, atol=ATOL)
        if not sol.success:
            raise RuntimeError(f"integration failed: {sol.message}")
        out[:, k + 1] = sol.y[:, -1]
    return out


def generate(prob: Problem, draw: int) -> Data:
    rng = np.random.default_rng(prob.design_seed)
    x0 = prob.x0(rng)
    inputs = prob.data_inputs(rng) if prob.data_inputs else {}
    u = input_funcs(prob, inputs)
    X = np.empty((prob.n_traj, len(prob.states), len(prob.t)))
    for k in range(prob.n_traj):
        def f(tt, x, k=k):
            return prob.rhs(tt, x, prob.params, {n: v[k] for n, v in u(tt).items()}, np)
        X[k] = integrate(f, prob.t, x0[k], bool(inputs))
    noise = np.random.default_rng(10_000 * prob.design_seed + draw)
    sig = np.array([prob.sigma[c] for c in prob.measured])[None, :, None]
    clean = X[:, prob.obs_idx, :]
    Y = clean + sig * noise.standard_normal(clean.shape)
    n_out = 0
    if prob.outlier_fraction:
        flat = Y.reshape(-1)
        n_out = max(1, round(prob.outlier_fraction * flat.size))
        idx = noise.choice(flat.size, n_out, replace=False)
        sig_flat = np.broadcast_to(sig, Y.shape).reshape(-1)
        flat[idx] = clean.reshape(-1)[idx] + 10 * sig_flat[idx] * noise.choice([-1.0, 1.0], n_out)
        Y = flat.reshape(Y.shape)
    return Data(X=X, Y=Y, x0=x0, inputs=inputs, outliers=n_out)


def write_csv(path: Path, prob: Problem, data: Data) -> None:
    header = ["traj", "t", *prob.measured, *data.inputs]
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        for k in range(prob.n_traj):
            for j, tt in enumerate(prob.t):
                row = [k, tt, *data.Y[k, :, j], *(data.inputs[n][k, j] for n in data.inputs)]
                w.writerow([repr(float(v)) if i else int(v) for i, v in enumerate(row)])


# ----------------------------------------------------------------------------------------------------------------
# the reference: whole-trajectory single shooting with forward sensitivities


class Reference:
    def __init__(self, prob: Problem):
        self.prob = prob
        n, q = len(prob.states), len(prob.free)
        self.n, self.q = n, q
        ts = sp.Symbol("t")
        xs = sp.symbols(f"x0:{n}")
        ps = {name: sp.Symbol(f"p_{name}") for name in prob.params}
        names_u = list(prob.expr_inputs)
        names_u += list(prob.data_inputs(np.random.default_rng(0))) if prob.data_inputs else []
        us = {name: sp.Symbol(f"u_{name}") for name in names_u}
        f = sp.Matrix(prob.rhs(ts, list(xs), ps, us, sp))
        fx = f.jacobian(xs)
        fp = f.jacobian([ps[nm] for nm in prob.free])
        args = (ts, *xs, *ps.values(), *us.values())
        self.u_names = names_u
        self.f_l = sp.lambdify(args, list(f), modules="numpy", cse=True)
        self.fx_l = sp.lambdify(args, list(fx), modules="numpy", cse=True)
        self.fp_l = sp.lambdify(args, list(fp), modules="numpy", cse=True)
        self._cache = None

    def _eval(self, fn, tt, x, pvals, uvals, shape):
        vals = fn(tt, *x, *pvals, *uvals)
        B = x.shape[1]
        return np.array([np.broadcast_to(v, (B,)) for v in vals], dtype=float).reshape(*shape, B)

    def simulate(self, theta, data: Data):
        prob, n, q, B = self.prob, self.n, self.q, self.prob.n_traj
        p = dict(prob.params)
        p.update(zip(prob.free, theta[:q]))
        pvals = list(p.values())
        x0 = theta[q:].reshape(B, n).T  # (n, B)
        u = input_funcs(prob, data.inputs)
        D = n + n * (n + q)

        def aug(tt, z):
            Z = z.reshape(D, B)
            x = Z[:n]
            S = Z[n:].reshape(n, n + q, B)
            uu = u(tt)
            uvals = [uu[nm] for nm in self.u_names]
            f = self._eval(self.f_l, tt, x, pvals, uvals, (n,))
            fx = self._eval(self.fx_l, tt, x, pvals, uvals, (n, n))
            fp = self._eval(self.fp_l, tt, x, pvals, uvals, (n, q))
            dS = np.einsum("ijb,jkb->ikb", fx, S)
            dS[:, n:, :] += fp
            return np.concatenate([f.reshape(-1), dS.reshape(-1)])

        S0 = np.zeros((n, n + q, B))
        S0[:, :n, :] = np.eye(n)[:, :, None]
        z0 = np.concatenate([x0.reshape(-1), S0.reshape(-1)])
        Z = integrate(aug, prob.t, z0, bool(data.inputs)).reshape(D, B, len(prob.t))
        return Z[:n], Z[n:].reshape(n, n + q, B, len(prob.t))

    def residuals_and_jacobian(self, theta, data: Data):
        if self._cache is not None and np.array_equal(self._cache[0], theta):
            return self._cache[1], self._cache[2]
        prob, n, q, B = self.prob, self.n, self.q, self.prob.n_traj
        X, S = self.simulate(theta, data)
        obs = prob.obs_idx
        sig = np.array([prob.sigma[c] for c in prob.measured])
        T = len(prob.t)
        rows = len(obs) * T
        r = np.empty(B * rows)
        J = np.zeros((B * rows, q + n * B))
        for b in range(B):
            sl = slice(b * rows, (b + 1) * rows)
            r[sl] = ((X[obs, b, :] - data.Y[b]) / sig[:, None]).reshape(-1)
            Sb = S[obs][:, :, b, :] / sig[:, None, None]  # (no, n+q, T)
            J[sl, :q] = Sb[:, n:, :].transpose(0, 2, 1).reshape(rows, q)
            J[sl, q + n * b:q + n * (b + 1)] = Sb[:, :n, :].transpose(0, 2, 1).reshape(rows, n)
        self._cache = (theta.copy(), r, J)
        return r, J

    def fit(self, data: Data) -> dict:
        prob = self.prob
        theta0 = np.concatenate([[prob.params[nm] for nm in prob.free], data.x0.reshape(-1)])
        t0 = time.perf_counter()
        res = least_squares(lambda th: self.residuals_and_jacobian(th, data)[0], theta0,
                            jac=lambda th: self.residuals_and_jacobian(th, data)[1], method="lm",
                            x_scale="jac", xtol=1e-12, ftol=1e-12, gtol=1e-12, max_nfev=200)
        r, J = self.residuals_and_jacobian(res.x, data)
        m, N = J.shape
        s2 = float(r @ r) / (m - N)
        scale = 1 / np.maximum(np.linalg.norm(J, axis=0), 1e-300)
        _, sv, Vt = np.linalg.svd(J * scale, full_matrices=False)
        with np.errstate(divide="ignore"):
            inv = (Vt.T / sv ** 2) @ Vt
        cov = s2 * inv * np.outer(scale, scale)
        se = np.sqrt(np.abs(np.diag(cov)[: self.q]))
        wall = time.perf_counter() - t0
        return {"values": dict(zip(prob.free, res.x[: self.q])), "stderr": dict(zip(prob.free, se)),
                "s2": s2, "nfev": res.nfev, "wall": wall, "status": res.status,
                "cond": float(sv[0] / sv[-1]) if sv[-1] > 0 else math.inf}


# ----------------------------------------------------------------------------------------------------------------
# pdsl through its CLI

OUTLIER_RE = re.compile(r"\boutliers?\b|standardi[sz]ed residual|\b5\s*σ|\b5 sigma", re.I)  # \b: not a path


def run_pdsl(prob: Problem, csv_path: Path, out: Path) -> dict:
    exe, env, cwd = pdsl_command()
    cmd = [*exe, "fit", str(MODELS / prob.model), "--data", str(csv_path), "--free", ",".join(prob.free)]
    for nm in prob.free:
        cmd += ["--param", f"{nm}={prob.start[nm]!r}"]
    for c in prob.measured:
        cmd += ["--noise", f"{c}={prob.sigma[c]!r}"]
    for nm, (expr, _) in prob.expr_inputs.items():
        cmd += ["--input", f"{nm}={expr}"]
    cmd += ["-o", str(out), "--quiet", "--no-plots"]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=PDSL_TIMEOUT, cwd=cwd, env=env)
    except subprocess.TimeoutExpired:
        return {"ok": False, "error": f"timeout after {PDSL_TIMEOUT} s", "wall": time.perf_counter() - t0, "cmd": cmd}
    wall = time.perf_counter() - t0
    text = proc.stdout + proc.stderr
    if proc.returncode != 0 or not (out / "params.json").is_file():
        lines = [ln.strip() for ln in proc.stderr.splitlines() if ln.strip()] or [ln.strip() for ln in text.splitlines()
                                                                                  if ln.strip()]
        first = lines[0] if lines else "no output"
        err = next((ln for ln in lines if re.match(r"(internal )?error\b", ln, re.I)), first)
        return {"ok": False, "error": f"exit {proc.returncode}: {err}", "wall": wall, "cmd": cmd, "text": text}
    pj = json.loads((out / "params.json").read_text())
    report = (out / "report.md").read_text() if (out / "report.md").is_file() else ""
    ident = pj.get("identifiability") or {}
    flagged = set()
    for u in ident.get("undetermined") or []:
        for nm, v in (u.get("direction") or {}).items():
            if v is not None and abs(v) > 0.1:
                flagged.add(nm)
    stderr = {}
    for nm in prob.free:
        se = (pj.get("params", {}).get(nm) or {}).get("stderr")
        stderr[nm] = float(se) if se is not None else math.nan
        if not math.isfinite(stderr[nm]):
            flagged.add(nm)
    notes = [ln.strip() for ln in proc.stdout.splitlines()
             if re.search(r"note:|warning|not determined", ln, re.I) or OUTLIER_RE.search(ln)]
    return {"ok": True, "wall": wall, "cmd": cmd, "text": text,
            "values": {nm: float(pj["params"][nm]["value"]) for nm in prob.free}, "stderr": stderr,
            "sentences": list(ident.get("sentences") or []), "notes": notes, "flagged": sorted(flagged),
            "outlier_flag": bool(OUTLIER_RE.search(text) or OUTLIER_RE.search(report)),
            "summary": [ln.rstrip() for ln in proc.stdout.splitlines() if ln.strip()]}


# ----------------------------------------------------------------------------------------------------------------


def fmt(v, d=4):
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "—" if v is None else ("nan" if math.isnan(v) else "inf")
    return f"{v:.{d}g}"


def run_case(prob: Problem, draw: int, ref: Reference, work: Path) -> dict:
    data = generate(prob, draw)
    d = work / f"{prob.key}_{draw}"
    d.mkdir(parents=True, exist_ok=True)
    write_csv(d / "data.csv", prob, data)
    p = run_pdsl(prob, d / "data.csv", d / "fit")
    try:
        r = ref.fit(data)
    except Exception as e:  # noqa: BLE001 - a failing reference is reported, not raised
        r = {"error": f"{type(e).__name__}: {e}"}
    return {"pdsl": p, "ref": r, "outliers": data.outliers}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="one noise draw per case")
    ap.add_argument("--draws", type=int, default=None, help="noise draws per case (default 1 quick, 30 full)")
    ap.add_argument("--problems", default=None, help="comma-separated keys (default: all): " + ",".join(problems()))
    ap.add_argument("--out", default=None, help="write the markdown results here")
    ap.add_argument("--keep", default=None, help="keep the generated data and pdsl outputs in this folder")
    ap.add_argument("--pdsl-src", default=None,
                    help="run the pdsl package in this folder (PYTHONPATH; e.g. an older commit extracted with "
                         "`git archive COMMIT pdsl | tar -x -C DIR`), with its own model cache")
    ap.add_argument("--pdsl-label", default=None, help="what --pdsl-src is, for the results (e.g. its commit)")
    args = ap.parse_args(argv)
    probs = problems()
    keys = args.problems.split(",") if args.problems else list(probs)
    unknown = [k for k in keys if k not in probs]
    if unknown:
        ap.error(f"unknown problems {unknown}; known: {', '.join(probs)}")
    draws = args.draws or (1 if args.quick else 30)
    t_start = time.perf_counter()
    started = _dt.datetime.now().astimezone()
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="fit_quality_"))
    work.mkdir(parents=True, exist_ok=True)
    global PDSL_SRC, PDSL_CACHE
    if args.pdsl_src:
        PDSL_SRC = Path(args.pdsl_src).resolve()
        if not (PDSL_SRC / "pdsl" / "__init__.py").is_file():
            ap.error(f"--pdsl-src {args.pdsl_src}: no pdsl/__init__.py there")
        PDSL_CACHE = PDSL_SRC / ".pdsl_bench_cache"  # kept between runs, like the user's cache of the default pdsl
        PDSL_CACHE.mkdir(mode=0o700, exist_ok=True)  # 0700: pdsl refuses a group/other-writable cache
    log(f"fit quality: {', '.join(keys)}; {draws} draw(s); work dir {work}; load {loadavg()}")

    results: dict[str, list] = {}
    derive_wall = {}
    for key in keys:
        prob = probs[key]
        t0 = time.perf_counter()
        ref = Reference(prob)
        derive_wall[key] = time.perf_counter() - t0
        results[key] = []
        for draw in range(draws):
            res = run_case(prob, draw, ref, work)
            results[key].append(res)
            p, r = res["pdsl"], res["ref"]
            line = f"  {key} draw {draw}: pdsl {p['wall']:.1f} s " + ("ok" if p["ok"] else p["error"])
            line += f"; ref {r['wall']:.2f} s" if "wall" in r else f"; ref {r.get('error')}"
            log(line)
            if draws == 1 and p["ok"]:
                for nm in prob.free:
                    log(f"    {nm}: pdsl {p['values'][nm]:.6g} ± {fmt(p['stderr'][nm], 3)}   ref "
                        + (f"{r['values'][nm]:.6g} ± {r['stderr'][nm]:.3g}" if "values" in r else "—")
                        + f"   true {prob.params[nm]}")
                for s in p["notes"]:
                    log(f"    pdsl: {s}")

    wall_total = time.perf_counter() - t_start
    if PDSL_SRC is not None:
        which = f"pdsl from `{PDSL_SRC}`" + (f" ({args.pdsl_label})" if args.pdsl_label else "")
        cmdline = f" --pdsl-src {args.pdsl_src}"
    else:
        commit = git("rev-parse", "--short", "HEAD") or "?"
        dirty = " + uncommitted changes in pdsl/" if git("status", "--porcelain", "--", "pdsl") else ""
        which, cmdline = f"pdsl at {commit}{dirty}", ""
    md = render(probs, keys, results, draws, wall_total, started, derive_wall, args, which, cmdline)
    if args.out:
        Path(args.out).write_text(md)
    print()
    print(md)
    if args.out:
        log(f"-> {args.out}")
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0


def render(probs, keys, results, draws, wall_total, started, derive_wall, args, which, cmdline) -> str:
    full = draws > 1
    head = ["case", "param", "true", "start", "pdsl", "ref", "se ratio pdsl/ref", "abs(pdsl − ref)/se_ref",
            "(pdsl−true)/se_pdsl", "pdsl claims undetermined (ref rel. se)"]
    if full:
        head = ["case", "param", "true", "start", "pdsl ok", "median se ratio", "max se ratio",
                "median abs(pdsl − ref)/se_ref", "max abs(pdsl − ref)/se_ref", "pdsl cover 1σ / 2σ",
                "ref cover 1σ / 2σ",
                "pdsl mean rel. error", "undetermined claims (ref pins)"]
    rows, time_rows, notes = [], [], []
    for key in keys:
        prob = probs[key]
        runs = results[key]
        pw = [r["pdsl"]["wall"] for r in runs]
        rw = [r["ref"]["wall"] for r in runs if "wall" in r["ref"]]
        ok = [r for r in runs if r["pdsl"]["ok"]]
        time_rows.append([key, f"{np.median(pw):.1f}", f"{np.median(rw):.2f}" if rw else "—",
                          f"{np.median(pw) / np.median(rw):.1f}" if rw else "—", f"{derive_wall[key]:.2f}",
                          f"{len(ok)}/{len(runs)}"])
        for r in runs:
            if not r["pdsl"]["ok"]:
                notes.append(f"- `{key}`: pdsl failed: {r['pdsl']['error']}")
            if "error" in r["ref"]:
                notes.append(f"- `{key}`: reference failed: {r['ref']['error']}")
        first_ok = ok[0]["pdsl"] if ok else None
        if first_ok:
            for s in first_ok["notes"]:
                notes.append(f"- `{key}` (draw 0 stdout): {s}")
            for s in first_ok["sentences"]:
                if s not in " ".join(first_ok["notes"]):
                    notes.append(f"- `{key}` (identifiability.sentences): {s}")
        warned = sum(any("warning" in n for n in r["pdsl"].get("notes", [])) for r in ok)
        if full and warned:
            notes.append(f"- `{key}`: pdsl printed a warning in {warned} of {len(ok)} successful fits")
        if prob.outlier_fraction:
            flagged = sum(r["pdsl"].get("outlier_flag", False) for r in runs)
            n_samples = prob.n_traj * len(prob.t) * len(prob.measured)
            notes.append(f"- `{key}`: {runs[0]['outliers']} of {n_samples} samples replaced by 10σ outliers; "
                         f"pdsl's output mentions outliers / standardized residuals / 5σ in "
                         f"{flagged} of {len(runs)} fit(s)" + (" (pdsl failed)" if not ok else ""))
        for nm in prob.free:
            true = prob.params[nm]
            if not full:
                r = runs[0]
                p, ref = r["pdsl"], r["ref"]
                has_ref = "values" in ref
                rv, rs = (ref["values"][nm], ref["stderr"][nm]) if has_ref else (None, None)
                rel = rs / abs(rv) if has_ref and rv else math.inf
                if not p["ok"]:
                    rows.append([key, nm, fmt(true), fmt(prob.start[nm]), f"FAILED: {p['error'][:90]}",
                                 f"{fmt(rv, 6)} ± {fmt(rs, 2)}" if has_ref else "—", "", "", "", ""])
                    continue
                v, s = p["values"][nm], p["stderr"][nm]
                claim = nm in p["flagged"]
                claim_txt = ("YES" if claim else "no") + f" ({fmt(rel, 2)})"
                if claim and rel < 0.5:
                    claim_txt = f"**YES, ref pins it** ({fmt(rel, 2)})"
                pinned = has_ref and rel < 0.5  # ratios to an undetermined reference mean nothing
                rows.append([key, nm, fmt(true), fmt(prob.start[nm]), f"{fmt(v, 6)} ± {fmt(s, 2)}",
                             f"{fmt(rv, 6)} ± {fmt(rs, 2)}" if has_ref else "—",
                             fmt(s / rs, 3) if pinned else "— (ref: undetermined)" if has_ref else "—",
                             fmt(abs(v - rv) / rs, 3) if pinned else "—",
                             fmt((v - true) / s, 3), claim_txt])
            else:
                ratio, dev, cov_p, cov_r, relerr, claims = [], [], [], [], [], 0
                for r in runs:
                    p, ref = r["pdsl"], r["ref"]
                    if "values" in ref:
                        rv, rs = ref["values"][nm], ref["stderr"][nm]
                        cov_r.append(abs(rv - true) / rs)
                    if not p["ok"]:
                        continue
                    v, s = p["values"][nm], p["stderr"][nm]
                    relerr.append(abs(v - true) / abs(true))
                    cov_p.append(abs(v - true) / s if s > 0 else math.inf)
                    if "values" in ref and rs / abs(rv) < 0.5:  # only where the reference pins the parameter
                        ratio.append(s / rs)
                        dev.append(abs(v - rv) / rs)
                        claims += nm in p["flagged"]

                def cover(z):
                    z = np.asarray(z, float)
                    if not len(z):
                        return "—"
                    return f"{np.mean(z <= 1) * 100:.0f} % / {np.mean(z <= 2) * 100:.0f} %"

                med = (lambda z: fmt(float(np.nanmedian(z)), 3) if len(z) else "—")
                mx = (lambda z: fmt(float(np.nanmax(z)), 3) if len(z) else "—")
                rows.append([key, nm, fmt(true), fmt(prob.start[nm]), f"{len(ok)}/{len(runs)}", med(ratio), mx(ratio),
                             med(dev), mx(dev), cover(cov_p), cover(cov_r),
                             fmt(float(np.mean(relerr)), 2) if relerr else "—", f"{claims}/{len(ok)}"])
    opts = (" --quick" if args.quick else "") + (f" --draws {args.draws}" if args.draws else "")
    opts += f" --problems {args.problems}" if args.problems else ""
    out = [f"# Fit quality: `pdsl fit` vs a maximum-likelihood reference (issue 27)", "",
           f"{'Quick mode (one noise draw per case)' if not full else f'Full mode ({draws} noise draws per case)'}; "
           f"run {started:%Y-%m-%d %H:%M %Z}, {which}; whole benchmark {wall_total:.0f} s wall "
           f"on {os.cpu_count()} CPUs (load {loadavg()} at the end). "
           f"Command: `python benchmarks/bench_fit_quality.py{opts}{cmdline}`.", "",
           "pdsl: `pdsl fit` with only `--data --free --param (start) --noise --input -o` (+ `--quiet --no-plots`), "
           "all fit settings at their defaults. Reference: whole-trajectory single shooting, all initial states "
           "estimated, exact sensitivities, least squares from the truth; se = sqrt(diag(s²(JᵀJ)⁻¹)), initial "
           "states profiled. Targets: se ratio ≤ 1.2, |pdsl − ref|/se_ref ≤ 2"
           + (", coverage 55–80 % (1σ) / 90–99 % (2σ)." if full else "."), "",
           table(head, rows), "",
           "Wall time per fit (median over draws): pdsl = the whole `pdsl fit` process (start-up, compiled-model "
           "cache as it is, warm after a first run; fit; report); ref = the least-squares fit and its "
           "covariance (the sympy derivation, once per case, in its own column).", "",
           table(["case", "pdsl s", "ref s", "pdsl/ref", "ref derivation s", "pdsl ok"], time_rows), ""]
    if notes:
        out += ["Notes (pdsl's own words where quoted):", "", *notes, ""]
    return "\n".join(out)


if __name__ == "__main__":
    raise SystemExit(main())
