"""`pdsl evaluate` of a model whose rollouts diverge: scored as the worst error, counted and reported (issue 26)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from pdsl.cli.main import main

# dx/dt = x²: blows up at t = 1/x0 from x0 > 0, decays from x0 < 0
BLOWUP = "model H\n  var x = 1.0\n  der(x) = x^2\nend\n"
STARTS = [3.0, -1.5, 1.4, -0.5, 0.5, -2.0]  # 0.5 blows up at t = 2 (inside the 3 s of data), the others by t = 0.7


@pytest.fixture
def files(tmp_path):
    model = tmp_path / "h.phm"
    model.write_text(BLOWUP, encoding="utf-8")
    t = np.round(np.arange(0, 31) * 0.1, 10)
    rows = ["traj,t,x"]
    for k, x0 in enumerate(STARTS):  # data of dx/dt = -x/2
        rows += [f"{k},{float(ti)!r},{float(x0 * np.exp(-0.5 * ti))!r}" for ti in t]
    data = tmp_path / "d.csv"
    data.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return model, data


@pytest.mark.parametrize("extra", [[], ["--integrator", "rk4"]], ids=["cvodes", "rk4"])
def test_diverged_rollouts_count_as_the_worst_error(files, tmp_path, capsys, extra):
    model, data = files
    js = tmp_path / "e.json"
    assert main(["evaluate", str(model), "--data", str(data), "--json", str(js), *extra]) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert "3 of 6 trajectories diverged" in out and "trajectory 0, 2, 4" in out
    text = js.read_text()
    assert ": Infinity" not in text and ": NaN" not in text  # strict JSON: the diverged scores are null
    summary = json.loads(text)
    geo = summary["relative error (geometric mean over t>0)"]
    assert geo["n"] == 6 and geo["diverged"] == 3 and geo["mean"] is None and geo["max"] is None
    assert 0 < geo["min"] < 1  # the decaying trajectories keep a finite score
    assert summary["diverged"]["count"] == 3 and summary["diverged"]["trajectories"] == [0, 2, 4]


def test_torch_rollouts_that_overflow_are_counted(files, tmp_path, capsys):
    pytest.importorskip("torch")
    model, data = files
    js = tmp_path / "e.json"
    assert main(["evaluate", str(model), "--data", str(data), "--backend", "torch", "--integrator", "rk4",
                 "--json", str(js)]) == 0, capsys.readouterr().err
    assert "3 of 6 trajectories diverged" in capsys.readouterr().out
    assert json.loads(js.read_text())["relative error at final time"]["diverged"] == 3


def test_no_divergence_no_line(files, tmp_path, capsys):
    model, data = files
    model.write_text("model G\n  param a = 0.5\n  var x = 1.0\n  der(x) = -a*x\nend\n", encoding="utf-8")
    js = tmp_path / "e.json"
    assert main(["evaluate", str(model), "--data", str(data), "--json", str(js)]) == 0
    assert "diverged" not in capsys.readouterr().out
    summary = json.loads(js.read_text())
    assert summary["diverged"]["count"] == 0 and summary["relative error at final time"]["mean"] < 1e-6
