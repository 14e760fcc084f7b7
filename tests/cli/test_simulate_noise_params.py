"""`pdsl simulate --noise SIGMA` (seeded, optionally sparing t0) and `--params fit/params.json`
(a fitted model, networks included, rolled out from the CLI). Torch only for the fit."""

import json
from pathlib import Path

import numpy as np
import pytest

from pdsl.cli.main import main
from pdsl.data.csvio import read_table

ROOT = Path(__file__).resolve().parents[2]
DW = ROOT / "models" / "double_well.phm"


def sim(out, *extra):
    return main([str(a) for a in ("simulate", DW, "--t-end", 1, "--dt", 0.1, "--random-init", 3, "--seed", 2,
                                  "-o", out, *extra)])


def test_noise_is_seeded_and_spares_t0_on_request(tmp_path):
    clean, a, b, c, d = (tmp_path / f"{k}.csv" for k in "xabcd")
    assert sim(clean) == 0 and sim(a, "--noise", 0.1) == 0 and sim(b, "--noise", 0.1) == 0
    assert sim(c, "--noise", 0.1, "--noise-seed", 5) == 0 and sim(d, "--noise", 0.1, "--noise-spare-t0") == 0
    X, A, B, C, D = (read_table(p) for p in (clean, a, b, c, d))
    cols = [A.columns.index(n) for n in ("q", "p")]
    keep = [A.columns.index(n) for n in ("traj", "t")]
    np.testing.assert_array_equal(A.data, B.data)  # seeded: the same file twice
    assert not np.array_equal(A.data, C.data)  # another noise seed
    np.testing.assert_array_equal(A.data[:, keep], X.data[:, keep])  # t and traj untouched
    noise = (A.data - X.data)[:, cols]
    assert 0.07 < noise.std() < 0.13 and abs(noise.mean()) < 0.05
    first = np.r_[True, np.diff(X.data[:, X.columns.index("traj")]) != 0]
    np.testing.assert_array_equal(D.data[first], X.data[first])  # t0 spared
    assert np.all(D.data[~first][:, cols] != X.data[~first][:, cols])


@pytest.mark.parametrize("bad", ["0", "-1", "nan"])
def test_bad_noise_exits_2(tmp_path, capsys, bad):
    assert sim(tmp_path / "x.csv", "--noise", bad) == 2
    err = capsys.readouterr().err
    assert "noise" in err and "Traceback" not in err


def test_simulate_a_fitted_network(tmp_path, capsys):
    pytest.importorskip("torch")
    from pdsl.fit.run import apply_fitted
    from pdsl.pipeline import compile_model
    from pdsl.sim.simulate import simulate, time_grid

    model = tmp_path / "hnn.phm"
    model.write_text("model HNN\n  coord q = 0.5\n  momentum p = 0.1\n  nn H: mlp(hidden = [8], act = tanh)\n"
                     "  hamiltonian H(q, p)\nend\n")
    data = tmp_path / "dw.csv"
    assert sim(data) == 0
    fit = tmp_path / "fit"
    assert main([str(a) for a in ("fit", model, "--data", data, "-o", fit, "--epochs", 3, "--lr", 0.05, "--quiet",
                                  "--val-fraction", 0)]) == 0
    out, plain = tmp_path / "sim.csv", tmp_path / "plain.csv"
    assert main([str(a) for a in ("simulate", model, "--t-end", 1, "--dt", 0.1, "--params", fit / "params.json",
                                  "-o", out)]) == 0
    assert main([str(a) for a in ("simulate", model, "--t-end", 1, "--dt", 0.1, "-o", plain)]) == 0
    got, before = read_table(out), read_table(plain)
    num = apply_fitted(compile_model(str(model)).numeric, fit / "params.json")
    ref = simulate(num, time_grid(1, 0.1))
    names, cols = ref.columns()
    for n in ("q", "p"):
        np.testing.assert_allclose(got.column(n), cols[:, names.index(n)], rtol=1e-7, atol=1e-9)
    assert not np.allclose(got.column("q"), before.column("q"), atol=1e-6)  # the fitted weights were used
    assert json.loads((fit / "params.json").read_text())["networks"] == "networks.npz"
    assert main([str(a) for a in ("simulate", model, "--t-end", 1, "--dt", 0.1, "--params", tmp_path / "none.json",
                                  "-o", out)]) == 2


def test_dt_defaults_to_a_thousand_intervals(tmp_path):
    """`pdsl simulate MODEL --t-end 10` (issue 18's command) runs: 1001 samples, the same as --dt 0.01."""
    dp = ROOT / "models" / "double_pendulum.phm"
    a, b = tmp_path / "a.csv", tmp_path / "b.csv"
    assert main([str(x) for x in ("simulate", dp, "--t-end", 10, "-o", a)]) == 0
    assert main([str(x) for x in ("simulate", dp, "--t-end", 10, "--dt", 0.01, "-o", b)]) == 0
    A, B = read_table(a), read_table(b)
    assert A.data.shape[0] == 1001 and A.columns == B.columns
    np.testing.assert_allclose(A.data, B.data, rtol=0, atol=1e-12)
