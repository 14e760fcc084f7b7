"""Pieces of the like-for-like Table 1 (benchmarks/repro_symplectic_table1.py, issue 33 items 1 and 3),
checked against independent routes: the restricted reader of the authors' `torch.save(model)` files
against torch's own forward pass (and it refuses any other global), the numpy flow against finite
differences, the score's best offset against a brute-force search over constants, a non-finite value
scoring ∞, and the data generator against scipy's DOP853 and the kept segments against the full run."""

from __future__ import annotations

import io
import pickle
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

torch = pytest.importorskip("torch")
solve_ivp = pytest.importorskip("scipy.integrate").solve_ivp

import repro_symplectic_table1 as t1  # noqa: E402
from hamiltonian_data import energy, rhs  # noqa: E402


class HamiltonianNN(torch.nn.Module):
    """The authors' class as their script defines it (Code/scripts/run_generic_adjoint.py), pickled from __main__."""

    def __init__(self, sizes):
        super().__init__()
        self.layers = torch.nn.ModuleList()
        self.dropout_layers = torch.nn.ModuleList()
        self.RANDOM_SEED = 0
        for a, b in zip(sizes[:-2], sizes[1:-1]):
            self.layers.append(torch.nn.Linear(a, b, bias=True))
            self.dropout_layers.append(torch.nn.Dropout(p=0.2))
        self.layers.append(torch.nn.Linear(sizes[-2], sizes[-1], bias=False))

    def forward(self, x):
        for i, layer in enumerate(self.layers[:-1]):
            x = self.dropout_layers[i](torch.tanh(layer(x)))
        return self.layers[-1](x)


@pytest.fixture()
def saved_model(tmp_path, monkeypatch):
    """A `torch.save(model)` file as the authors' script writes it (class in __main__)."""
    torch.manual_seed(3)
    HamiltonianNN.__module__ = "__main__"
    monkeypatch.setattr(sys.modules["__main__"], "HamiltonianNN", HamiltonianNN, raising=False)
    net = HamiltonianNN([4, 16, 32, 16, 1])
    path = tmp_path / "model_0_henon_heiles_0.0_adjoint_True_7_im.pt"
    torch.save(net, path)
    return path, net.eval()


def test_authors_reader_matches_torch_forward(saved_model):
    path, net = saved_model
    layers = t1.read_authors_layers(path)
    assert [W.shape for W, _ in layers] == [(16, 4), (32, 16), (16, 32), (1, 16)]
    assert not np.any(layers[-1][1])  # their last layer has no bias
    Y = np.random.default_rng(0).uniform(-0.5, 0.5, (64, 4))
    with torch.no_grad():
        ref = net(torch.tensor(Y, dtype=torch.float32)).double().numpy()[:, 0]
    assert np.allclose(t1.MLPH(layers).energy(Y), ref, rtol=1e-5, atol=1e-6)  # float32 weights, float32 forward
    mlp, module = t1.authors_predictor(path.parent, "henon_heiles")  # also checks numpy H and flow against torch
    assert not module.training
    assert np.allclose(mlp.energy(Y), ref, rtol=1e-5, atol=1e-6)


def test_authors_reader_refuses_other_globals(tmp_path):
    """A file whose pickle names anything off the whitelist is refused before that thing is called."""
    class Evil:
        def __reduce__(self):
            return (print, ("this must not run",))

    path = tmp_path / "evil.pt"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("m/data.pkl", pickle.dumps(Evil(), protocol=2))
        z.writestr("m/byteorder", "little")
    with pytest.raises(pickle.UnpicklingError, match="refusing"):
        t1.read_authors_layers(path)


def test_mlp_flow_is_the_hamiltonian_vector_field():
    rng = np.random.default_rng(1)
    layers = [(rng.normal(size=(16, 2)), rng.normal(size=16)), (rng.normal(size=(8, 16)), rng.normal(size=8)),
              (rng.normal(size=(1, 8)), np.zeros(1))]
    m = t1.MLPH(layers)
    Y = rng.uniform(-1, 1, (10, 2))
    e = 1e-6
    dHq = (m.energy(Y + [e, 0]) - m.energy(Y - [e, 0])) / (2 * e)
    dHp = (m.energy(Y + [0, e]) - m.energy(Y - [0, e])) / (2 * e)
    assert np.allclose(m(Y), np.stack([dHp, -dHq], 1), rtol=1e-6, atol=1e-7)


def test_score_best_offset_is_the_best_constant_and_nonfinite_is_never_good():
    H = energy("double_well", t1.grid_states(t1.grid_of("double_well", [-2, -2], [2, 2], 41)))
    s = t1.score(np.zeros_like(H), H)
    brute = min(np.mean(np.abs(H - c)) for c in np.linspace(H.min(), H.max(), 20001))
    assert s["mae_best_offset"] == pytest.approx(brute, rel=1e-4)
    assert s["mae_best_offset"] <= s["mae_offset"]
    assert s["mae_offset"] == pytest.approx(np.mean(np.abs(H - H.mean())))
    bad = H.copy()
    bad[[3, 7]] = [np.nan, np.inf]
    b = t1.score(bad, H)
    assert b["nonfinite"] == 2 and b["mae_offset"] == np.inf and b["mae_best_offset"] == np.inf


def test_data_solve_the_system_and_segments_are_slices():
    system = "double_well"
    seg, escaped, lo, hi, full = t1.simulate(system, 4, 5, 201, keep_all=4, sigma=0.0)
    assert not escaped.any()
    dt = 0.01
    for k in range(2):
        sol = solve_ivp(lambda t, y: rhs(system, y[None])[0], (0, 20), full[k, 0], method="DOP853", rtol=1e-12,
                        atol=1e-12, t_eval=dt * np.arange(full.shape[1]))
        assert np.max(np.abs(sol.y.T - full[k])) < 1e-7
    # each kept segment (noise-free here) is a contiguous slice of the full trajectory
    for k in range(4):
        start = int(np.argmin(np.linalg.norm(full[k] - seg[k, 0], axis=1)))
        assert np.allclose(seg[k], full[k, start:start + 201], atol=1e-12)
    assert np.all(lo <= full.min((0, 1)) + 1e-12) and np.all(hi >= full.max((0, 1)) - 1e-12)
    # with noise: the sample at t = 0 is exact, the others carry σ = 0.01 (whole trajectories kept: start 0)
    seg_n, *_ = t1.simulate(system, 3, 5, 2001, sigma=0.01)
    seg_0, *_ = t1.simulate(system, 3, 5, 2001, sigma=0.0)
    assert np.array_equal(seg_n[:, 0], seg_0[:, 0]) and np.array_equal(seg_0, full[:3])
    assert np.std(seg_n[:, 1:] - seg_0[:, 1:]) == pytest.approx(0.01, rel=0.05)


def test_henon_heiles_escapes_are_flagged_and_left_out_of_the_range():
    Y0 = np.array([[0.0, 0.0, 0.1, 0.1], [0.0, 0.9, 0.0, 0.5]])  # H = 0.01 (bounded) and 0.29 > 1/6 up the y channel
    assert energy("henon_heiles", Y0[:1])[0] < 1 / 6 < energy("henon_heiles", Y0[1:])[0]
    _, escaped, lo, hi, full = t1.simulate("henon_heiles", 2, 0, None, keep_all=2, sigma=0.0, y0=Y0)
    assert escaped.tolist() == [False, True]
    assert np.all(np.isfinite(full[0])) and np.allclose(lo, full[0].min(0)) and np.allclose(hi, full[0].max(0))


def test_nssnn_reader_matches_the_authors_ktrained(tmp_path):
    """The NSSNN baseline's H (their KTrained: LinearBlock = Linear + Sigmoid, ×5, then Linear to 1) and its gradient."""
    class LinearBlock(torch.nn.Module):
        def __init__(self, a, b):
            super().__init__()
            self.left = torch.nn.Sequential(torch.nn.Linear(a, b), torch.nn.Sigmoid())

        def forward(self, x):
            return self.left(x)

    torch.manual_seed(5)
    cal_H = torch.nn.Sequential(LinearBlock(2, 64), *[LinearBlock(64, 64) for _ in range(4)], torch.nn.Linear(64, 1)).double()
    torch.save(torch.nn.Module.state_dict(torch.nn.ModuleDict({"cal_H": cal_H})), tmp_path / "double_well_model_nssnn.pt")
    m = t1.nssnn_predictor(tmp_path, "double_well")
    Y = torch.tensor(np.random.default_rng(2).uniform(-2, 2, (20, 2)), requires_grad=True)
    H = cal_H(Y)
    g = torch.autograd.grad(H.sum(), Y)[0].numpy()
    y = Y.detach().numpy()
    assert np.allclose(m.energy(y), H.detach().numpy()[:, 0], rtol=1e-12, atol=1e-12)
    assert np.allclose(m(y), np.stack([g[:, 1], -g[:, 0]], 1), rtol=1e-10, atol=1e-12)
