"""models/cucker_smale_learned.phm (BENCHMARKS C6.3, the port-Hamiltonian paper, Eqs. 34–38; benchmarks/repro_cucker_smale.py).

Checked against independent routes: the right-hand side against numpy's (1/N) Σ_j MLP(v_j − v_i, x_j − x_i)
with the weights unpacked by hand; the F(0, 0) regulariser mapping (‖f(0)‖² = N·F(0, 0)², so
``--equilibrium λ/N`` is λ‖F(0, 0)‖²); and the invariant the learned structure must share with the true
model when F is odd — while the true model's Σ v_i is conserved along the benchmark's own data path.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pdsl.cli.main import main
from pdsl.pipeline import compile_model

MODELS = Path(__file__).resolve().parents[2] / "models"
LEARNED = MODELS / "cucker_smale_learned.phm"
TRUE = MODELS / "cucker_smale.phm"
N = 30


@pytest.fixture(scope="module")
def learned():
    return compile_model(LEARNED)


def mlp_numpy(w: np.ndarray, p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """2 -> 100 (tanh) -> 1 from pdsl's flat layout, unpacked here by hand (W column-major, then b, per layer)."""
    W1 = w[:200].reshape(100, 2, order="F")
    b1 = w[200:300]
    W2 = w[300:400].reshape(1, 100, order="F")
    b2 = w[400]
    return (np.tanh(np.stack([p, q], -1) @ W1.T + b1) @ W2.T)[..., 0] + b2


def rhs_numpy(w, x, v):
    dv = v[None, :] - v[:, None]  # [i, j] = v_j − v_i
    dx = x[None, :] - x[:, None]
    return np.concatenate([v, mlp_numpy(w, dv, dx).sum(axis=1) / N])


def test_check_and_header(capsys):
    assert main(["check", str(LEARNED)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("ok") and "CuckerSmaleLearned" in out and "plain" in out and "1 networks" in out
    head = [ln for ln in LEARNED.read_text(encoding="utf-8").splitlines() if ln.startswith("#")]
    text = "\n".join(head)
    assert "BENCHMARKS.md" in text and "Demonstrates" in text


def test_structure(learned):
    num = learned.numeric
    assert num.nx == 2 * N and num.x_names[0] == "x[1]" and num.x_names[N] == "v[1]"
    assert len(num.p_names) == 401 and all(n.startswith("F.w[") for n in num.p_names)
    # the same start state as the true model's file
    np.testing.assert_array_equal(np.asarray(num.x_start), np.asarray(compile_model(TRUE).numeric.x_start))


def test_rhs_is_the_pairwise_sum(learned):
    num = learned.numeric
    rng = np.random.default_rng(34)
    w = rng.normal(0, 0.5, 401)
    for _ in range(3):
        x, v = rng.uniform(-10, 10, N), rng.uniform(-10, 10, N)
        got = np.asarray(num.rhs(0.0, np.concatenate([x, v]), w, np.zeros(0))).ravel()
        ref = rhs_numpy(w, x, v)
        assert np.abs(got - ref).max() <= 1e-12 * max(1.0, np.abs(ref).max())


def test_torch_backend_agrees(learned):
    torch = pytest.importorskip("torch")
    from pdsl.backend.torch_backend import TorchSystem

    ts = TorchSystem(learned.system)
    rng = np.random.default_rng(35)
    w = rng.normal(0, 0.5, 401)
    X = rng.uniform(-10, 10, (4, 2 * N))
    with torch.no_grad():
        got = ts.rhs(torch.zeros(4, dtype=torch.float64), torch.tensor(X), ts.bind(torch.tensor(w))).numpy()
    ref = np.stack([rhs_numpy(w, xv[:N], xv[N:]) for xv in X])
    assert np.abs(got - ref).max() <= 1e-11 * np.abs(ref).max()


def test_equilibrium_penalty_is_n_times_f00_squared(learned):
    """At x = v = 0: x' = 0, v_i' = F(0, 0) for every i, so ‖f‖² = N F(0, 0)² (the --equilibrium λ/N mapping)."""
    num = learned.numeric
    w = np.random.default_rng(36).normal(0, 0.5, 401)
    f = np.asarray(num.rhs(0.0, np.zeros(2 * N), w, np.zeros(0))).ravel()
    F00 = mlp_numpy(w, np.zeros(1), np.zeros(1))[0]
    assert abs(F00) > 1e-3  # a draw with F(0, 0) = 0 would make the check vacuous
    np.testing.assert_allclose(f[:N], 0.0, atol=0)
    np.testing.assert_allclose(f[N:], F00, rtol=1e-13)
    assert abs(float(f @ f) - N * F00**2) <= 1e-12 * N * F00**2


def test_odd_interaction_conserves_momentum(learned):
    """With F odd (F(−p, −q) = −F(p, q): hidden biases and the output bias 0) Σ_i v_i' = 0; with a general F it
    is not — the learned model does not have the true model's invariant by construction."""
    num = learned.numeric
    rng = np.random.default_rng(37)
    w = rng.normal(0, 0.5, 401)
    x, v = rng.uniform(-10, 10, N), rng.uniform(-10, 10, N)
    general = np.asarray(num.rhs(0.0, np.concatenate([x, v]), w, np.zeros(0))).ravel()[N:].sum()
    w[200:300] = 0.0
    w[400] = 0.0
    odd = np.asarray(num.rhs(0.0, np.concatenate([x, v]), w, np.zeros(0))).ravel()[N:]
    assert abs(odd.sum()) <= 1e-12 * np.abs(odd).sum()
    assert abs(general) > 1e-3


def test_true_model_conserves_momentum_on_the_benchmark_data_path(tmp_path):
    """The data of benchmarks/repro_cucker_smale.py (`simulate --random-init` with its sampling statements):
    Σ_i v_i is constant along every series (pairwise forces antisymmetric), 2 series over 5 s."""
    out = tmp_path / "d.csv"
    assert main(["-q", "simulate", str(TRUE), "--t-end", "5", "--dt", "0.1", "--rtol", "1e-10", "--random-init", "2",
                 "--sample", "x[i] = uniform(-10, 10) for i in 1..N", "--sample", "v[i] = uniform(-10, 10) for i in 1..N",
                 "--seed", "1", "--threads", "1", "-o", str(out)]) == 0
    header = out.read_text().split("\n", 1)[0].split(",")
    d = np.loadtxt(out, delimiter=",", skiprows=1)
    vcols = [header.index(f"v[{i}]") for i in range(1, N + 1)]
    for k in (0, 1):
        V = d[d[:, header.index("traj")] == k][:, vcols]
        assert len(V) == 51 and np.abs(V[0]).max() <= 10
        total = V.sum(axis=1)
        assert np.abs(total - total[0]).max() <= 1e-9 * np.abs(V[0]).sum()
        assert V.std(axis=1)[-1] < V.std(axis=1)[0]  # the velocities align (a real flock, not a frozen one)
