"""Pieces of the check-17 reproduction (benchmarks/repro_cartpole_ph.py): the C5.2 surrogate and its
input-F variant, the rk2 (explicit midpoint) scheme, `pdsl fit --init` warm starts, and a fit on
cart–pole data with an input column. The study itself is a script (minutes), not a test."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import casadi as ca
import numpy as np
import pytest
from pdsl.cli.main import main

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def repro():
    spec = importlib.util.spec_from_file_location("repro_cartpole_ph", ROOT / "benchmarks" / "repro_cartpole_ph.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("repro_cartpole_ph", mod)
    spec.loader.exec_module(mod)
    return mod


def test_rk2_is_the_explicit_midpoint_of_second_order():
    from pdsl.numerics.fixed_step import make_step

    A = np.array([[0.3, 1.0], [-1.0, -0.3]])
    t, x, p = ca.SX.sym("t"), ca.SX.sym("x", 2), ca.SX.sym("p", 0)
    f = ca.Function("f", [t, x, p], [ca.mtimes(ca.DM(A), x)])
    x0 = np.array([1.0, 0.5])
    h = 0.1
    step = make_step(f, "rk2", h)
    want = x0 + h * A @ (x0 + h / 2 * A @ x0)
    assert np.allclose(np.asarray(step(0, x0, [])).ravel(), want, rtol=0, atol=1e-15)
    from scipy.linalg import expm

    errs = []
    for n in (10, 20, 40):
        s, x = make_step(f, "rk2", 1.0 / n), x0
        for _ in range(n):
            x = np.asarray(s(0, x, [])).ravel()
        errs.append(np.linalg.norm(x - expm(A) @ x0))
    assert 3.8 < errs[0] / errs[1] < 4.2 and 3.8 < errs[1] / errs[2] < 4.2


def test_surrogate_matches_c52_and_the_input_variant(repro, tmp_path):
    import pdsl

    num = pdsl.compile_model(repro.SURROGATE).numeric
    (nn,) = num.system.neural
    assert (nn.n_in, tuple(nn.hidden), nn.act, nn.n_out) == (2, (50,), "tanh", 2)
    params = {q.name: q for q in num.system.params}
    assert all(params[n].lower == 0 for n in ("M", "J", "d1", "d2"))
    assert num.u_names == ()  # the bundled model closes the loop itself: F = −K z
    variant = repro.input_variant(tmp_path)
    c = pdsl.compile_model(variant).numeric
    assert c.u_names == ("F",) and c.x_names == ("x", "v", "theta", "omega") and len(c.p_names) == len(num.p_names)
    P = dict(zip(c.p_names, c.p_default))
    rng = np.random.default_rng(5)
    w = c.p_default[len(c.system.params):]
    W1, b1 = w[:100].reshape(50, 2, order="F"), w[100:150]
    W2, b2 = w[150:250].reshape(2, 50, order="F"), w[250:252]
    for _ in range(10):
        z, F = rng.uniform(-0.3, 0.3, 4), rng.uniform(-2, 2)
        hh = W2 @ np.tanh(W1 @ z[[1, 3]] + b1) + b2
        want = [z[1], (F - P["d1"] * z[1] + hh[0]) / P["M"], z[3], (hh[1] - P["d2"] * z[3]) / P["J"]]  # +F (C5.2 flag)
        assert np.allclose(np.asarray(c.rhs(0, z, c.p_default, [F])).ravel(), want, rtol=1e-12, atol=1e-12)
    # the force column the script adds is the plant's own feedback law
    K = repro.plant_gain()
    assert np.allclose(K, [1.2501, 2.7612, -16.3099, -3.7814])
    header = ["t", "x", "theta", "der(x)", "der(theta)"]
    data = np.array([[0.0, 0.2, 0.1, 0.3, -0.4]])
    names, out = repro.to_surrogate(header, data, K, True)
    assert names == ["traj", "t", "x", "v", "theta", "omega", "F"]
    assert out[0, -1] == pytest.approx(-(K @ [0.2, 0.3, 0.1, -0.4]))


def test_fit_with_an_input_column_and_init_warm_start(repro, tmp_path):
    """A short series of the plant, the surrogate driven by its F column; a second fit `--init` from the
    first starts exactly where the first ended."""
    K = repro.plant_gain()
    parts = []
    for k, (x0, th0) in enumerate([(0.2, 0.1)]):
        out = tmp_path / f"s{k}.csv"
        assert main(["simulate", str(repro.PLANT), "--t-end", "0.5", "--dt", "0.05", "--rtol", "1e-10", "--init", f"x={x0}",
                     "--init", f"theta={th0}", "-o", str(out)]) == 0
        h, d = repro.read_csv(out)
        names, s = repro.to_surrogate(h, d, K, True)
        s[:, 0] = k
        parts.append(s)
    data = tmp_path / "train.csv"
    repro.write_csv(data, names, np.vstack(parts))
    model = repro.input_variant(tmp_path)
    common = ["--data", str(data), "--method", "adamw", "--loss", "mse", "--integrator", "rk2", "--chunk", "10",
              "--val-fraction", "0", "--equilibrium", "1e-3", "--quiet"]
    assert main(["fit", str(model), *common, "--epochs", "3", "-o", str(tmp_path / "a")]) == 0
    first = json.loads((tmp_path / "a" / "params.json").read_text())
    assert main(["fit", str(model), *common, "--epochs", "2", "--lr", "1e-4", "--init", str(tmp_path / "a" / "params.json"),
                 "-o", str(tmp_path / "b")]) == 0
    second = json.loads((tmp_path / "b" / "params.json").read_text())
    for name in ("M", "J", "d1", "d2"):
        assert second["params"][name]["start"] == pytest.approx(first["values"][name], rel=1e-12)
    w1, w2 = (np.load(tmp_path / d / "networks.npz")["h"] for d in "ab")
    assert 0 < np.max(np.abs(w2 - w1)) < 1e-2  # started from the first fit's weights, moved a little
    assert np.isfinite(second["train_loss"])
