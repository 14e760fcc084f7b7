#!/usr/bin/env python
"""Table 1 of the symplectic-HNN paper like for like (issue 33 items 1 and 3, BENCHMARKS Part B).

    python benchmarks/repro_symplectic_table1.py --authors-models HNN/Code/models          # the committed report
    python benchmarks/repro_symplectic_table1.py --authors-models HNN/Code/models --resume # after an interruption
    python benchmarks/repro_symplectic_table1.py --quick --work /tmp/t1q                   # smoke: report in --work

``HNN/Code/models`` is the ``Code/models`` folder of the authors' repository
(``git clone https://github.com/choudharyharsh122/HNN``); without ``--authors-models`` the
authors' rows are left out. A slow study: a script only, never part of the test suite.

Three predictors of H are scored with one metric on the same grids, per system (double well,
coupled oscillator with alpha = 0.5, Hénon–Heiles):

* **pdsl**: the HNN of B1 (MLP 2d-16-32-16-1, tanh) trained by ``pdsl.fit.run_fit`` (what
  ``pdsl fit`` runs) through implicit midpoint (RK2 predictor + 6 fixed-point sweeps, discrete
  adjoint) at the sizes of the authors' repository (BENCHMARKS B5): 16,384 training / 8,192 validation
  initial states uniform in the B2 box (Hénon–Heiles: 65,536 / 8,192),
  25 epochs, τ = 6, one random window per trajectory per epoch, batch 512, MSE on data with noise
  σ = 0.01, Adam lr 0.01 + ReduceLROnPlateau.  Trajectories run the paper's lengths (T = 20 s at
  dt = 0.01; Hénon–Heiles 5 s at dt = 1e-3, RK4 substeps); of each, one random segment of
  ``SEGMENT`` samples (T/10) is kept, and the epochs' windows are drawn inside it (the whole
  24,576 × T/dt table would not fit in memory next to the other jobs here).  ``--windows t0`` trains as
  the authors' repository does instead (B5: its windows start at t0): one window of τ = 6 steps from
  each trajectory's noise-free initial state, the same initial states and noise draws.
* **constant**: the best constant predictor, H ≡ c with c the median of the true H on the grid
  (under an optimal offset every constant scores mean |H_true − median H_true|); the same constant
  scored with the mean offset is reported next to it.
* **authors**: the released models ``Code/models/model_0_<system>_0.0_adjoint_True_7_im.pt`` of
  github.com/choudharyharsh122/HNN, read by a restricted unpickler (only the tensors and module
  containers of their ``torch.save(model)``; no code of theirs runs) into a re-implementation of
  their ``HamiltonianNN`` (Linear+tanh+dropout ×3, last layer without bias; evaluation mode).

The metric (B6, the authors' notebook ``plot_gen_data_main.ipynb``, ``pdsl evaluate
--energy-grid``): mean |H_model − H_true − offset| over an evenly spaced grid, offset =
mean(H_model − H_true); the best-offset (median) value and the raw MAE are reported too.  A grid
value that is not finite makes the score ∞ (never good) and is counted.  Grids: the initial-state
box (the training domain) and the test-data range — min/max per state of 1,024 (Hénon–Heiles 4,096) noisy test
trajectories of the paper's length from the same box (the authors' notebook takes the range of
its test data); 101² points for the 1-DOF systems, 20⁴ for Hénon–Heiles.  The authors' own
notebook grids (30² on [−2, 2]²; 20⁴ on the range it printed) are scored as well, to tie this
report to the numbers their notebook shows.  Every learned model is also rolled out (implicit
midpoint solved to 1e-13) over the paper's T from 64 test initial states: the report counts
non-finite and escaped rollouts.

Resumable: the data are cached in ``--work``, fits checkpoint every epoch, finished scores are kept
in ``results.json``.  The header records the command, the sha256 of every model file scored and
the weight draw (sha256 of the initial weights) each fit started from, recorded when it started.
"""

from __future__ import annotations

import argparse
import collections
import datetime as _dt
import hashlib
import io
import json
import os
import pickle
import platform
import sys
import time
import zipfile
from pathlib import Path
from types import SimpleNamespace

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
for _p in (str(ROOT), str(HERE)):
    if _p not in sys.path:
        sys.path.insert(0, _p)

import numpy as np  # noqa: E402
import torch  # noqa: E402

from benchutil import log  # noqa: E402
from hamiltonian_data import SYSTEMS, energy, rhs  # noqa: E402

LABEL = {"double_well": "double well", "coupled_oscillator": "coupled oscillator", "henon_heiles": "Hénon–Heiles"}
SHORT = {"double_well": "dw", "coupled_oscillator": "co", "henon_heiles": "hh"}
AUTHORS_NAME = {"double_well": "double_well", "coupled_oscillator": "coupled_ho", "henon_heiles": "henon_heiles"}
PAPER_T = {"double_well": 20.0, "coupled_oscillator": 20.0, "henon_heiles": 5.0}  # the symplectic-HNN authors' code: sim lengths (B2, B5)
REFINE = {"double_well": 10, "coupled_oscillator": 10, "henon_heiles": 2}  # RK4 substeps per sample (h = 1e-3, 5e-4)
PAPER = {  # Table 1 (B7): this work, SHNN, NSSNN
    "double_well": (0.00035, 0.40925, 0.04303),
    "coupled_oscillator": (0.74799, 0.76570, 1.27298),
    "henon_heiles": (0.02078, 0.07238, 0.078556),
}
SCALES = {"paper": (16384, 8192, 25, 1024), "quick": (512, 256, 2, 128)}  # train, val, epochs, test ICs
# the authors' repository (BENCHMARKS B5) draws more Hénon–Heiles initial states: 65,536 / 8,192 / 4,096
SYSTEM_SCALES = {"paper": {"henon_heiles": (65536, 8192, 25, 4096)}}


def sizes(scale_name: str, system: str) -> tuple[int, int, int, int]:
    """Training, validation initial states, epochs and test initial states of one system at one scale."""
    return SYSTEM_SCALES.get(scale_name, {}).get(system, SCALES[scale_name])
GRID_POINTS = {2: 101, 4: 20}
ESCAPE = 1.5  # Hénon–Heiles: a state with a coordinate beyond this has left the bounded well (saddles at distance 1)
BOUND_RATIO = 0.2  # pdsl ≤ 0.2 × the constant predictor
ROLLOUT_ICS = 64
# the authors' notebook (plot_gen_data_main.ipynb, cell 39) printed its Hénon–Heiles test-data range (q1, p1, q2, p2)
AUTHORS_HH_RANGE = {"x": (-0.6719, 0.6013), "px": (-0.5646, 0.5205), "y": (-0.4767, 0.6043), "py": (-0.4798, 0.4954)}
AUTHORS_NOTEBOOK = {"double_well": 0.011577721}  # cell 56: the released DW model on its 30² grid, mean offset


TAU = 6  # rollout steps of a training window (B5)
WINDOWS_TEXT = {"random": "one random window per trajectory per epoch (the paper's text; drawn in a random T/10 segment)",
                "t0": "one window per trajectory, from its noise-free initial state at t = 0 (the authors' repository)"}


def segment(system: str, windows: str = "random") -> int:
    """Samples kept per training trajectory: a T/10 segment (random windows), or the first τ + 1 samples
    (``t0``: one window from the noise-free initial state, as the authors' repository trains)."""
    return TAU + 1 if windows == "t0" else int(round(PAPER_T[system] / SYSTEMS[system][3] / 10)) + 1


# ---------------------------------------------------------------- data
def _rk4(system: str, Y: np.ndarray, h: float, refine: int) -> np.ndarray:
    for _ in range(refine):
        k1 = rhs(system, Y)
        k2 = rhs(system, Y + h / 2 * k1)
        k3 = rhs(system, Y + h / 2 * k2)
        k4 = rhs(system, Y + h * k3)
        Y = Y + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
    return Y


def simulate(system: str, n: int, seed: int, keep: int | None, keep_all: int = 0, sigma: float = 0.01,
             y0: np.ndarray | None = None, at_t0: bool = False):
    """n trajectories of the paper's length T from initial states uniform in the box.

    Returns (segments, escaped, lo, hi, full): one random segment of ``keep`` samples of each
    trajectory (noisy but for the sample at t = 0; ``at_t0``: the segment starting at t = 0), the mask of trajectories that left the bounded
    region (they are frozen there and excluded), the per-state min/max of the noisy samples of the
    others, and the first ``keep_all`` trajectories in full (exact). ``y0``: these initial states instead."""
    _, names, half, dt = SYSTEMS[system]
    d = len(names)
    rng = np.random.default_rng([seed, 1])
    noise = np.random.default_rng([seed, 2])
    Y = rng.uniform(-half, half, (n, d))
    if y0 is not None:
        Y = np.array(y0, dtype=float)
    steps = int(round(PAPER_T[system] / dt))
    start = rng.integers(0, steps - keep + 2, n) if keep else np.zeros(n, int)  # drawn always: same ICs and noise
    if at_t0:
        start = np.zeros(n, int)
    seg = np.full((n, keep, d), np.nan) if keep else None
    full = np.full((keep_all, steps + 1, d), np.nan)
    escaped = np.zeros(n, bool)
    lo, hi = np.full((n, d), np.inf), np.full((n, d), -np.inf)  # per trajectory: an escaped one is left out at the end
    h = dt / REFINE[system]
    for k in range(steps + 1):
        if k:
            Y = _rk4(system, Y, h, REFINE[system])
        bad = ~np.all(np.isfinite(Y), 1) | (np.max(np.abs(Y), 1) > ESCAPE if system == "henon_heiles" else False)
        escaped |= bad
        Y[escaped] = 0.0  # frozen: no overflow; excluded below
        obs = Y + (sigma * noise.standard_normal(Y.shape) if k else 0.0)
        np.minimum(lo, obs, out=lo)
        np.maximum(hi, obs, out=hi)
        if keep:
            m = (k >= start) & (k < start + keep)
            seg[m, k - start[m]] = obs[m]
        if keep_all:
            full[:, k] = Y[:keep_all]
    ok = ~escaped
    return seg, escaped, lo[ok].min(0) if ok.any() else lo[0], hi[ok].max(0) if ok.any() else hi[0], full


def training_table(work: Path, system: str, n: int, seed: int, windows: str = "random"):
    """The training + validation table (cached in ``work``) and the number of escaped trajectories dropped."""
    from pdsl.data.csvio import Table

    _, names, _, dt = SYSTEMS[system]
    cache = work / f"data_{system}.npz"
    if cache.is_file():
        z = np.load(cache)
        Z, dropped = z["Z"], int(z["dropped"])
    else:
        log(f"    data: {n} trajectories of {PAPER_T[system]:g} s, a {segment(system, windows)}-sample segment of each")
        seg, escaped, _, _, _ = simulate(system, n, seed, segment(system, windows), at_t0=windows == "t0")
        Z, dropped = seg[~escaped], int(escaped.sum())
        tmp = work / f"data_{system}.tmp.npz"
        np.savez(tmp, Z=Z, dropped=dropped)
        os.replace(tmp, cache)
    m = Z.shape[1]
    data = np.column_stack([np.repeat(np.arange(len(Z)), m), np.tile(dt * np.arange(m), len(Z)), Z.reshape(-1, len(names))])
    return Table(path=f"<{system}: {len(Z)} noisy trajectory segments, seed {seed}>", columns=("traj", "t", *names),
                 data=data), dropped


def test_set(system: str, n: int, seed: int) -> dict:
    _, escaped, lo, hi, full = simulate(system, n, seed, None, keep_all=min(n, 4 * ROLLOUT_ICS))
    ok = np.where(~escaped[:len(full)])[0][:ROLLOUT_ICS]
    return {"n": n, "escaped": int(escaped.sum()), "lo": lo.tolist(), "hi": hi.tolist(),
            "rollout_y0": full[ok, 0].tolist(), "rollout_end": full[ok, -1].tolist()}


# ---------------------------------------------------------------- the authors' models
class _Stub:
    """Stands for a module object of the pickle: keeps its state dict, runs nothing."""

    def __init__(self, *a, **k):
        self.state = {}

    def __setstate__(self, state):
        self.state = state


def _rebuild_tensor(storage, offset, size, stride, *_):
    a = np.lib.stride_tricks.as_strided(storage[offset:], shape=tuple(size), strides=tuple(s * storage.itemsize for s in stride))
    return np.array(a)


def _rebuild_parameter(data, *_):
    return data


_SAFE = {
    ("collections", "OrderedDict"): collections.OrderedDict,
    ("__builtin__", "set"): set, ("builtins", "set"): set,
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor,
    ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
    ("__main__", "HamiltonianNN"): _Stub,
    ("torch.nn.modules.container", "ModuleList"): _Stub,
    ("torch.nn.modules.linear", "Linear"): _Stub,
    ("torch.nn.modules.dropout", "Dropout"): _Stub,
}
_STORAGE = {"FloatStorage": np.float32, "DoubleStorage": np.float64}


def read_authors_layers(path: Path) -> list[tuple[np.ndarray, np.ndarray]]:
    """(W, b) per Linear layer of a ``torch.save(HamiltonianNN)`` file, by a whitelist unpickler
    (any other global in the file is an error; b = 0 for their bias-free last layer)."""
    zf = zipfile.ZipFile(path)
    pkl = next(n for n in zf.namelist() if n.endswith("/data.pkl"))
    prefix = pkl[: -len("data.pkl")]
    big = zf.read(prefix + "byteorder").decode().strip() == "big" if prefix + "byteorder" in zf.namelist() else False

    class Restricted(pickle.Unpickler):
        def find_class(self, module, name):
            if module == "torch" and name in _STORAGE:
                return name
            if (module, name) not in _SAFE:
                raise pickle.UnpicklingError(f"{path}: refusing to load {module}.{name}")
            return _SAFE[(module, name)]

        def persistent_load(self, pid):
            _, kind, key, _, _ = pid  # ('storage', 'FloatStorage', '0', 'cpu', numel)
            dt = np.dtype(_STORAGE[kind]).newbyteorder(">" if big else "<")
            return np.frombuffer(zf.read(f"{prefix}data/{key}"), dtype=dt).astype(_STORAGE[kind])

    root = Restricted(io.BytesIO(zf.read(pkl))).load()
    layers = root.state["_modules"]["layers"].state["_modules"]
    out = []
    for k in sorted(layers, key=int):
        p = layers[k].state["_parameters"]
        W = np.asarray(p["weight"], dtype=np.float64)
        b = np.zeros(W.shape[0]) if p.get("bias") is None else np.asarray(p["bias"], dtype=np.float64)
        out.append((W, b))
    return out


class AuthorsHamiltonianNN(torch.nn.Module):
    """Their ``HamiltonianNN`` (Code/scripts/run_generic_adjoint.py): Linear + tanh + Dropout(0.2) per hidden
    layer, a last Linear without bias; used in evaluation mode (dropout off), as their notebook does."""

    def __init__(self, sizes: list[int]):
        super().__init__()
        self.layers = torch.nn.ModuleList(
            [torch.nn.Linear(a, b, bias=True) for a, b in zip(sizes[:-2], sizes[1:-1])]
            + [torch.nn.Linear(sizes[-2], sizes[-1], bias=False)])
        self.dropout_layers = torch.nn.ModuleList([torch.nn.Dropout(p=0.2) for _ in sizes[1:-1]])

    def forward(self, x):
        for layer, drop in zip(self.layers[:-1], self.dropout_layers):
            x = drop(torch.tanh(layer(x)))
        return self.layers[-1](x)


def authors_module(path: Path) -> AuthorsHamiltonianNN:
    layers = read_authors_layers(path)
    net = AuthorsHamiltonianNN([layers[0][0].shape[1]] + [W.shape[0] for W, _ in layers]).double().eval()
    with torch.no_grad():
        for lin, (W, b) in zip(net.layers, layers):
            lin.weight.copy_(torch.from_numpy(W))
            if lin.bias is not None:
                lin.bias.copy_(torch.from_numpy(b))
    return net


def _sigmoid(x):
    return 0.5 * (1.0 + np.tanh(0.5 * x))


class MLPH:
    """H = MLP(y) (tanh or sigmoid hidden layers, linear output) and its flow (∂H/∂p, −∂H/∂q) in numpy."""

    def __init__(self, layers, act: str = "tanh"):
        self.layers = [(np.asarray(W, float), np.asarray(b, float)) for W, b in layers]
        self.act = np.tanh if act == "tanh" else _sigmoid
        self.dact = (lambda h: 1 - h * h) if act == "tanh" else (lambda h: h * (1 - h))  # in terms of the output h

    def energy(self, Y):
        h = Y
        for W, b in self.layers[:-1]:
            h = self.act(h @ W.T + b)
        W, b = self.layers[-1]
        return (h @ W.T + b)[..., 0]

    def __call__(self, Y):
        hs, h = [], Y
        for W, b in self.layers[:-1]:
            h = self.act(h @ W.T + b)
            hs.append(h)
        g = np.broadcast_to(self.layers[-1][0], (len(Y), self.layers[-1][0].shape[1]))
        for (W, _), h in zip(reversed(self.layers[:-1]), reversed(hs)):
            g = (g * self.dact(h)) @ W
        d = Y.shape[1] // 2
        return np.concatenate([g[:, d:], -g[:, :d]], 1)


def authors_file(folder: Path, system: str) -> Path:
    return folder / f"model_0_{AUTHORS_NAME[system]}_0.0_adjoint_True_7_im.pt"


def authors_predictor(folder: Path, system: str):
    """The authors' released model as numpy H and flow, checked against the torch re-implementation."""
    path = authors_file(folder, system)
    net = authors_module(path)
    mlp = MLPH([(lin.weight.detach().numpy(), lin.bias.detach().numpy() if lin.bias is not None else np.zeros(lin.out_features))
                for lin in net.layers])
    Y = np.random.default_rng(7).uniform(-1, 1, (50, net.layers[0].in_features))
    with torch.no_grad():
        ref = net(torch.from_numpy(Y)).numpy()[:, 0]
    assert np.allclose(mlp.energy(Y), ref, rtol=1e-12, atol=1e-12), "numpy H differs from the torch module"
    yt = torch.from_numpy(Y).requires_grad_(True)
    g = torch.autograd.grad(net(yt).sum(), yt)[0].numpy()
    d = Y.shape[1] // 2
    assert np.allclose(mlp(Y), np.concatenate([g[:, d:], -g[:, :d]], 1), rtol=1e-10, atol=1e-12), "flow differs"
    return mlp, net


def nssnn_file(folder: Path, system: str) -> Path:
    return folder / f"{AUTHORS_NAME[system]}_model_nssnn.pt"


class NSSNNHamiltonian(torch.nn.Module):
    """H of the NSSNN baseline as the authors' Code/Baselines/NSSNN/NSSNN.py builds it (``KTrained``): five blocks
    Linear + Sigmoid, then Linear to 1, on (q, p)."""

    def __init__(self, sizes: list[int]):
        super().__init__()
        self.net = torch.nn.Sequential(*[m for a, b in zip(sizes[:-2], sizes[1:-1])
                                         for m in (torch.nn.Linear(a, b), torch.nn.Sigmoid())],
                                       torch.nn.Linear(sizes[-2], sizes[-1]))

    def forward(self, x):
        return self.net(x)


def nssnn_predictor(folder: Path, system: str) -> MLPH:
    """The released NSSNN baseline (a state dict: torch.load(weights_only=True)), checked against the torch module."""
    sd = torch.load(nssnn_file(folder, system), weights_only=True, map_location="cpu")
    hidden = sorted({int(k.split(".")[1]) for k in sd if k.endswith(".left.0.weight")})
    last = max(int(k.split(".")[1]) for k in sd)
    keys = [f"cal_H.{i}.left.0" for i in hidden] + [f"cal_H.{last}"]
    layers = [(sd[k + ".weight"].double().numpy(), sd[k + ".bias"].double().numpy()) for k in keys]
    mlp = MLPH(layers, act="sigmoid")
    net = NSSNNHamiltonian([layers[0][0].shape[1]] + [W.shape[0] for W, _ in layers]).double().eval()
    with torch.no_grad():
        for lin, (W, b) in zip([m for m in net.net if isinstance(m, torch.nn.Linear)], layers):
            lin.weight.copy_(torch.from_numpy(W))
            lin.bias.copy_(torch.from_numpy(b))
    Y = np.random.default_rng(7).uniform(-1, 1, (50, layers[0][0].shape[1]))
    yt = torch.from_numpy(Y).requires_grad_(True)
    H = net(yt)
    g = torch.autograd.grad(H.sum(), yt)[0].numpy()
    d = Y.shape[1] // 2
    assert np.allclose(mlp.energy(Y), H.detach().numpy()[:, 0], rtol=1e-12, atol=1e-12), "numpy H differs from torch"
    assert np.allclose(mlp(Y), np.concatenate([g[:, d:], -g[:, :d]], 1), rtol=1e-10, atol=1e-12), "flow differs"
    return mlp


# ---------------------------------------------------------------- scoring
def grid_of(system: str, lo, hi, points: int | None = None) -> dict[str, np.ndarray]:
    names = SYSTEMS[system][1]
    k = points or GRID_POINTS[len(names)]
    return {n: np.linspace(a, b, k) for n, a, b in zip(names, lo, hi)}


def grid_states(grid: dict[str, np.ndarray]) -> np.ndarray:
    mesh = np.meshgrid(*grid.values(), indexing="ij")
    return np.stack([m.ravel() for m in mesh], 1)


def score(H_model: np.ndarray, H_true: np.ndarray) -> dict:
    """Offset-corrected MAE (mean offset: B6, pdsl evaluate, the authors' notebook), best-offset (median) and raw
    MAE; a non-finite value anywhere makes every score ∞ and is counted."""
    d = np.asarray(H_model, float) - np.asarray(H_true, float)
    bad = int(np.sum(~np.isfinite(d)))
    if bad:
        return {"mae_offset": float("inf"), "mae_best_offset": float("inf"), "mae_raw": float("inf"), "nonfinite": bad,
                "points": len(d)}
    return {"mae_offset": float(np.mean(np.abs(d - d.mean()))), "mae_best_offset": float(np.mean(np.abs(d - np.median(d)))),
            "mae_raw": float(np.mean(np.abs(d))), "nonfinite": 0, "points": len(d)}


def pdsl_energy(system: str, work: Path, grid: dict[str, np.ndarray]) -> np.ndarray:
    """H of the fitted pdsl model on the grid by pdsl.fit.energy_grid (what `pdsl evaluate --energy-grid` runs)."""
    from pdsl.fit.energy_grid import energy_on_grid
    from pdsl.fit.run import apply_fitted
    from pdsl.pipeline import compile_model

    num = apply_fitted(compile_model(str(work / f"hnn_{system}.phm")).numeric, work / f"fit_{system}_midpoint" / "params.json")
    return energy_on_grid(num, grid, "the model")


def pdsl_predictor(system: str, work: Path) -> MLPH:
    from repro_symplectic import NumpyHNN

    return MLPH(NumpyHNN(work / f"fit_{system}_midpoint").layers)


def rollouts(system: str, f, test: dict) -> dict:
    from repro_symplectic import midpoint_rollout

    Y0, end = np.array(test["rollout_y0"]), np.array(test["rollout_end"])
    dt = SYSTEMS[system][3]
    steps = int(round(PAPER_T[system] / dt))
    with np.errstate(all="ignore"):
        Y = midpoint_rollout(f, Y0, dt, steps, steps)
    last = Y[:, -1]
    finite = np.all(np.isfinite(Y), axis=(1, 2))
    escaped = finite & (np.max(np.abs(Y), axis=(1, 2)) > (ESCAPE if system == "henon_heiles" else 10.0))
    good = finite & ~escaped
    err = np.linalg.norm(last - end, axis=1)
    Ht = energy(system, Y)
    return {"n": len(Y0), "nonfinite": int((~finite).sum()), "escaped": int(escaped.sum()),
            "final_err_median": float(np.median(err[good])) if good.any() else float("inf"),
            "true_H_drift_median": float(np.median(np.max(np.abs(Ht - Ht[:, :1]), 1)[good])) if good.any() else float("inf")}


# ---------------------------------------------------------------- training
def weight_draw(work: Path, system: str) -> dict:
    """The initial weights the fit starts from (pdsl's default draw for the model), recorded before training."""
    path = work / f"draw_{system}.json"
    if path.is_file():
        return json.loads(path.read_text())
    from repro_symplectic import hnn_text
    from pdsl.pipeline import compile_model

    model = work / f"hnn_{system}.phm"
    model.write_text(hnn_text(system))
    p = np.ascontiguousarray(compile_model(str(model)).numeric.p_default, dtype=np.float64)
    rec = {"n": int(p.size), "sha256": hashlib.sha256(p.tobytes()).hexdigest(), "first": [float(v) for v in p[:3]]}
    path.write_text(json.dumps(rec))
    return rec


def train(work: Path, system: str, scale, args, deadline: float) -> tuple[dict | None, int]:
    from repro_symplectic import train as train_fit

    n_train, n_val, epochs, _ = scale
    table, dropped = training_table(work, system, n_train + n_val, args.seed + 1, args.windows)
    ns = SimpleNamespace(windows=args.windows, schedule="plateau", patience=3, seed=args.seed, epochs_per_call=args.epochs_per_call)
    fit = train_fit(work, system, "midpoint", table, (n_train, n_val, epochs), ns, deadline)
    return fit, dropped


# ---------------------------------------------------------------- report
def sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def fmt(v) -> str:
    return "–" if v is None else ("∞" if v == float("inf") else f"{v:.3e}")


def write_report(path: Path, res: dict, meta: dict) -> None:
    systems = [s for s in meta["systems"] if s in res]
    L = ["# Symplectic HNN, Table 1 like for like: pdsl, the constant predictor and the authors' released models",
         "", f"Generated by `{meta['command']}` on {_dt.datetime.now(_dt.timezone.utc):%Y-%m-%d %H:%M} UTC, "
         f"`{platform.platform()}`, os.cpu_count() = {os.cpu_count()} (shared with other jobs), torch {torch.__version__}, "
         f"1 torch thread, scale `{meta['scale']}`" + (" (**smoke run: not a result**)" if meta["scale"] == "quick" else "") + ".",
         "", "Model files scored (sha256) and the weight draw each pdsl fit started from (recorded by the run before "
         "its first epoch: sha256 of pdsl's initial parameter vector, float64):", ""]
    for s in systems:
        r = res[s]
        if r.get("pdsl_files"):
            for name, h in r["pdsl_files"].items():
                L.append(f"- {LABEL[s]}, pdsl: `{name}` {h}")
        if r.get("draw"):
            L.append(f"- {LABEL[s]}, pdsl initial weights: {r['draw']['n']} values, sha256 {r['draw']['sha256']}, "
                     f"first {', '.join(f'{v:.6f}' for v in r['draw']['first'])} (seed {meta['seed']})")
        if r.get("authors_file"):
            L.append(f"- {LABEL[s]}, authors: `{r['authors_file'][0]}` {r['authors_file'][1]}")
        if r.get("nssnn_file"):
            L.append(f"- {LABEL[s]}, the authors' NSSNN baseline: `{r['nssnn_file'][0]}` {r['nssnn_file'][1]}")
    if not any(res[s].get("authors_file") for s in systems):
        L.append("- the authors' models were not given (`--authors-models`): their rows are left out")
    per = {s: sizes(meta["scale"], s) for s in systems}
    size_text = "; ".join(f"{LABEL[s]}: {a:,} training / {b:,} validation initial states, {d:,} test ones"
                          for s, (a, b, _, d) in per.items())
    epochs = sorted({e for (_, _, e, _) in per.values()})
    epochs = epochs[0] if len(epochs) == 1 else "/".join(map(str, epochs))
    L += ["", "## Protocol", "",
          f"- data: initial states uniform in the B2 box (q, p ∈ [−2, 2]; Hénon–Heiles [−0.3, 0.3]⁴), trajectories of "
          f"the paper's length (20 s at dt = 0.01; Hénon–Heiles 5 s at dt = 1e-3) by RK4 with substeps, noise σ = 0.01 on "
          f"every sample but t = 0; {size_text} (the sizes of the authors' repository, BENCHMARKS B5).",
          "- pdsl: MLP 2d-16-32-16-1 tanh, `pdsl fit` (run_fit) through implicit midpoint (RK2 predictor + 6 sweeps, "
          f"discrete adjoint), τ = 6, {WINDOWS_TEXT[meta.get('windows', 'random')]}, batch 512, MSE, Adam (AdamW, weight "
          f"decay 0) lr 0.01 + ReduceLROnPlateau (patience 3, factor 0.5), {epochs} epochs, float64, torch backend.",
          "- metric: mean |H − H_true − offset| on the grid, offset = mean(H − H_true) (B6; the authors' notebook; "
          "`pdsl evaluate --energy-grid`). 'best offset' uses the median offset (the optimal one for an L1 error). "
          "The constant predictor's score is its best-offset value (mean |H_true − median H_true|); its mean-offset "
          "value is given next to it. A non-finite H anywhere scores ∞ and is counted.",
          f"- bound: pdsl ≤ {BOUND_RATIO:g} × the constant predictor (mean-offset score of pdsl against the best "
          "constant), on both grids. It replaces issue 15's absolute bounds, which a constant could nearly meet.",
          "", "## Table 1 metric on the same grids", "",
          "| system | grid | points | model | MAE offset-corrected | best offset | raw | non-finite | ratio to constant | "
          "bound ≤ 0.2× constant | paper (Table 1, this work) |",
          "|---|---|---|---|---|---|---|---|---|---|---|"]
    summary = {}
    for s in systems:
        r = res[s]
        for gkey, gname in (("box", "initial-state box"), ("test", "test-data range"), ("authors_grid", "authors' notebook grid")):
            g = r.get("grids", {}).get(gkey)
            if not g:
                continue
            rng = " × ".join(f"[{a:.3g}, {b:.3g}]" for a, b in zip(g["lo"], g["hi"]))
            const = g["constant"]["mae_best_offset"]
            first = True
            for who in ("pdsl", "constant", "authors", "nssnn"):
                sc = g.get(who)
                if sc is None:
                    continue
                val = sc["mae_best_offset"] if who == "constant" else sc["mae_offset"]
                extra = f" (mean offset: {sc['mae_offset']:.3e})" if who == "constant" else ""
                ratio = "" if who == "constant" else f"{val / const:.3f}"
                bound = ("met" if val <= BOUND_RATIO * const else "**missed**") if who == "pdsl" else ""
                paper = (f"{PAPER[s][0]:g}" if who == "pdsl" else f"NSSNN: {PAPER[s][2]:g}" if who == "nssnn" else "") \
                    if gkey == "box" else ""
                L.append(f"| {LABEL[s] if first else ''} | {gname if who == 'pdsl' or first else ''} {rng if first else ''} | "
                         f"{g['points'] if first else ''} | {who} | **{fmt(val)}**{extra} | {fmt(sc['mae_best_offset'])} | "
                         f"{fmt(sc['mae_raw'])} | {sc['nonfinite']} | {ratio} | {bound} | {paper} |")
                first = False
            if gkey == "test":
                summary[f"{SHORT[s]}_pdsl"] = g.get("pdsl", {}).get("mae_offset")
                summary[f"{SHORT[s]}_constant"] = const
                if g.get("authors"):
                    summary[f"{SHORT[s]}_authors"] = g["authors"]["mae_offset"]
    for s in systems:  # after the nine values the issue asks for
        g = res[s].get("grids", {}).get("test", {})
        if g.get("nssnn"):
            summary[f"{SHORT[s]}_nssnn"] = g["nssnn"]["mae_offset"]
    L += ["", "The summary line gives the test-data-range grid (the wider one, which the trained trajectories cover): "
          "pdsl and the authors' model by the mean-offset MAE, the constant by its best-offset MAE.", "",
          "## Data, rollouts and non-finite counts", "",
          "| system | test trajectories escaped (of) | test-data range | training trajectories dropped (escaped) | "
          "model | rollouts (T) | non-finite | escaped | median final error | median max drift of the true H |",
          "|---|---|---|---|---|---|---|---|---|---|"]
    for s in systems:
        r = res[s]
        t = r.get("test", {})
        rng = " × ".join(f"[{a:.3f}, {b:.3f}]" for a, b in zip(t.get("lo", []), t.get("hi", [])))
        first = True
        for who in ("pdsl", "authors", "nssnn"):
            ro = r.get("rollouts", {}).get(who)
            if not ro:
                continue
            L.append(f"| {LABEL[s] if first else ''} | {(str(t['escaped']) + ' (' + str(t['n']) + ')') if first else ''} | "
                     f"{rng if first else ''} | {r.get('dropped', '–') if first else ''} | {who} | {ro['n']} ({PAPER_T[s]:g} s) | "
                     f"{ro['nonfinite']} | {ro['escaped']} | {fmt(ro['final_err_median'])} | {fmt(ro['true_H_drift_median'])} |")
            first = False
    L += ["", "Rollouts: implicit midpoint at the data's dt, fixed-point sweeps to 1e-13 (the same integrator for every "
          "model), from the first test initial states that stay bounded; 'escaped' = left |y|∞ ≤ 1.5 (Hénon–Heiles) or "
          "10; errors and drifts are over the bounded, finite rollouts only.", ""]
    L += ["## Training", "", "| system | epochs | final train loss | final val. loss | s per epoch | training s |",
          "|---|---|---|---|---|---|"]
    for s in systems:
        f = res[s].get("fit")
        if f:
            L.append(f"| {LABEL[s]} | {f['epochs']} | {f['train_loss']:.4e} | {f['val_loss']:.4e} | {f['s_per_epoch']:.2f} | "
                     f"{f['train_seconds']:.0f} |")
    L += ["", *meta.get("findings", []), ""]
    L.append("summary: " + " ".join(f"{k}={v:.4g}" for k, v in summary.items() if v is not None))
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("\n".join(L) + "\n", encoding="utf-8")
    os.replace(tmp, path)


# ---------------------------------------------------------------- main
def evaluate_system(system: str, work: Path, r: dict, authors: Path | None, nssnn: Path | None = None) -> None:
    """Scores on the three grids, rollouts, file hashes: into ``r``."""
    names = SYSTEMS[system][1]
    half = SYSTEMS[system][2]
    true_model_grid = {}
    grids = {"box": grid_of(system, [-half] * len(names), [half] * len(names)),
             "test": grid_of(system, r["test"]["lo"], r["test"]["hi"])}
    if system == "henon_heiles":
        grids["authors_grid"] = grid_of(system, [AUTHORS_HH_RANGE[n][0] for n in names], [AUTHORS_HH_RANGE[n][1] for n in names], 20)
    else:
        grids["authors_grid"] = grid_of(system, [-2.0, -2.0], [2.0, 2.0], 30)
    has_pdsl = (work / f"fit_{system}_midpoint" / "params.json").is_file()
    pd = pdsl_predictor(system, work) if has_pdsl else None
    au = authors_predictor(authors, system)[0] if authors is not None else None
    ns = nssnn_predictor(nssnn, system) if nssnn is not None else None
    out = {}
    for key, grid in grids.items():
        Y = grid_states(grid)
        Ht = energy(system, Y)
        true_model_grid[key] = Ht
        g = {"lo": [float(v[0]) for v in grid.values()], "hi": [float(v[-1]) for v in grid.values()], "points": len(Y),
             "constant": score(np.full_like(Ht, np.median(Ht)), Ht)}
        if pd is not None:
            H = pdsl_energy(system, work, grid)
            assert np.allclose(H, pd.energy(Y), rtol=1e-9, atol=1e-9), "pdsl's energy and the numpy MLP disagree"
            g["pdsl"] = score(H, Ht)
        if au is not None:
            g["authors"] = score(au.energy(Y), Ht)
        if ns is not None:
            g["nssnn"] = score(ns.energy(Y), Ht)
            if system == "coupled_oscillator":  # NSSNN.py's analyH_coupled_ho: p² + q² + 0.5 q p, not Eq. 19
                g["nssnn_vs_its_own_H"] = score(ns.energy(Y), Y[:, 1] ** 2 + Y[:, 0] ** 2 + 0.5 * Y[:, 0] * Y[:, 1])
        out[key] = g
    r["grids"] = out
    r["rollouts"] = {}
    if pd is not None:
        r["rollouts"]["pdsl"] = rollouts(system, pd, r["test"])
        r["pdsl_files"] = {p.name: sha256(p) for p in sorted((work / f"fit_{system}_midpoint").glob("*"))
                           if p.name in ("params.json", "networks.npz")}
    if au is not None:
        r["rollouts"]["authors"] = rollouts(system, au, r["test"])
        r["authors_file"] = [authors_file(authors, system).name, sha256(authors_file(authors, system))]
    if ns is not None:
        r["rollouts"]["nssnn"] = rollouts(system, ns, r["test"])
        r["nssnn_file"] = [nssnn_file(nssnn, system).name, sha256(nssnn_file(nssnn, system))]


def findings(res: dict) -> list[str]:
    out = ["## Findings", ""]
    for s, r in res.items():
        g = r.get("grids", {})
        if not g:
            continue
        parts = []
        for key, name in (("box", "box"), ("test", "test range")):
            gg = g.get(key)
            if not gg:
                continue
            c = gg["constant"]["mae_best_offset"]
            bits = [f"constant {c:.2e}"]
            for who in ("pdsl", "authors", "nssnn"):
                if gg.get(who):
                    bits.append(f"{who} {gg[who]['mae_offset']:.2e} ({gg[who]['mae_offset'] / c:.3f}× the constant)")
            parts.append(f"{name}: " + ", ".join(bits))
        out.append(f"- {LABEL[s]} — " + "; ".join(parts) + f"; the paper's Table 1: {PAPER[s][0]:g}.")
        own = g.get("authors_grid", {}).get("nssnn_vs_its_own_H")
        if own:
            out.append(f"  The released NSSNN coupled-oscillator baseline was trained on H = p² + q² + 0.5 q p "
                       "(Code/Baselines/NSSNN/NSSNN.py, `analyH_coupled_ho`), not Eq. 19's p²/2 + q²/2 + 0.5 p q: "
                       f"against its own H it scores {own['mae_offset']:.3e} on the authors' grid, against Eq. 19 "
                       f"{g['authors_grid']['nssnn']['mae_offset']:.3e}. Its Table 1 entry compares different systems.")
        ag = g.get("authors_grid", {}).get("authors")
        if ag:
            nb = AUTHORS_NOTEBOOK.get(s)
            out.append(f"  The authors' released model on their own notebook grid scores {ag['mae_offset']:.3e}"
                       + (f" (their notebook printed {nb:g} for it: the loader reproduces it)" if nb else "")
                       + f"; their Table 1 prints {PAPER[s][0]:g}"
                       + (f", {ag['mae_offset'] / PAPER[s][0]:.3g}× lower than their own model scores" if ag["mae_offset"] > PAPER[s][0]
                          else f", {PAPER[s][0] / ag['mae_offset']:.3g}× higher than their own model scores")
                       + f"; the constant predictor on that grid scores {g['authors_grid']['constant']['mae_best_offset']:.3e}.")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--systems", nargs="+", default=list(SYSTEMS), choices=list(SYSTEMS))
    ap.add_argument("--authors-models", metavar="DIR", help="the Code/models folder of github.com/choudharyharsh122/HNN")
    ap.add_argument("--nssnn-models", metavar="DIR", help="Code/Baselines/NSSNN of the same repository: score the "
                    "released NSSNN baselines too")
    ap.add_argument("--quick", action="store_true", help="smoke run: small data, 2 epochs; the report goes to --work")
    ap.add_argument("--work", default=None, help="work directory (default /tmp/pdsl_symplectic_table1[_quick])")
    ap.add_argument("--resume", action="store_true", help="continue in --work (finished fits and scores are kept)")
    ap.add_argument("--out", default=None, help="report (default benchmarks/results_symplectic_table1.md, with --windows t0 "
                    "results_symplectic_table1_t0.md; --quick: WORK/report.md)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--windows", choices=("random", "t0"), default="random",
                    help="training windows: random (the paper's text, default) or t0 (the authors' repository)")
    ap.add_argument("--epochs-per-call", type=int, default=5, help="epochs between budget checks")
    ap.add_argument("--budget", type=float, default=None, help="seconds; stop training (resumably) after this")
    args = ap.parse_args(argv)
    scale_name = "quick" if args.quick else "paper"
    scale = SCALES[scale_name]
    work = Path(args.work or f"/tmp/pdsl_symplectic_table1{'_quick' if args.quick else ''}")
    committed = HERE / ("results_symplectic_table1.md" if args.windows == "random" else "results_symplectic_table1_t0.md")
    out = Path(args.out) if args.out else (work / "report.md" if args.quick else committed)
    if work.exists() and any(work.iterdir()) and not args.resume:
        log(f"{work} is not empty: pass --resume to continue there, or another --work")
        return 2
    work.mkdir(parents=True, exist_ok=True)
    authors = Path(args.authors_models) if args.authors_models else None
    if authors is not None and not all(authors_file(authors, s).is_file() for s in args.systems):
        log(f"{authors}: not all of {', '.join(authors_file(authors, s).name for s in args.systems)} are there")
        return 2
    nssnn = Path(args.nssnn_models) if args.nssnn_models else None
    if nssnn is not None and not all(nssnn_file(nssnn, s).is_file() for s in args.systems):
        log(f"{nssnn}: not all of {', '.join(nssnn_file(nssnn, s).name for s in args.systems)} are there")
        return 2
    torch.set_num_threads(1)
    t0 = time.time()
    deadline = t0 + (args.budget if args.budget is not None else 1e12)
    res_path = work / "results.json"
    res = json.loads(res_path.read_text()) if res_path.is_file() else {}
    if res.get("_scale", scale_name) != scale_name:
        log(f"{work} holds a {res['_scale']} run; use another --work")
        return 2
    res["_scale"] = scale_name
    if res.get("_windows", args.windows) != args.windows:
        log(f"{work} holds a --windows {res['_windows']} run; use another --work")
        return 2
    res["_windows"] = args.windows
    cmd = "python benchmarks/repro_symplectic_table1.py " + " ".join(argv if argv is not None else sys.argv[1:])
    meta = {"command": cmd.strip(), "scale": scale_name, "systems": args.systems, "seed": args.seed, "windows": args.windows}

    def save():
        tmp = res_path.with_name("results.json.tmp")
        tmp.write_text(json.dumps(res, indent=1))
        os.replace(tmp, res_path)
        body = {k: v for k, v in res.items() if not k.startswith("_")}
        meta["findings"] = findings(body)
        write_report(out, body, meta)

    stopped = False
    for system in args.systems:
        r = res.setdefault(system, {})
        log(f"=== {LABEL[system]}")
        if "test" not in r:
            r["test"] = test_set(system, sizes(scale_name, system)[3], args.seed + 2)
            save()
        r["draw"] = weight_draw(work, system)
        if "fit" not in r:
            fit, dropped = train(work, system, sizes(scale_name, system), args, deadline)
            r["dropped"] = dropped
            if fit is None:
                stopped = True
                save()
                break
            r["fit"] = fit
            r.pop("grids", None)
        if "grids" not in r or (authors is not None and "authors_file" not in r) or (nssnn is not None and "nssnn_file" not in r):
            evaluate_system(system, work, r, authors, nssnn)
            save()
            g = r["grids"]["test"]
            log("    test range: " + ", ".join(f"{w} {g[w]['mae_offset']:.3e}" for w in ("pdsl", "constant", "authors", "nssnn")
                                           if w in g))
    save()
    if stopped:
        log(f"budget used: continue with --resume --work {work}")
    log(f"-> {out} ({time.time() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
