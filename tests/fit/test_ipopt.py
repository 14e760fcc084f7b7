"""IPOPT fits: single shooting on chunks, and multiple shooting of long series (pdsl.fit.ipopt).

The multiple-shooting case is the classic of ODE parameter estimation (Ramsay et al. 2007): the
FitzHugh–Nagumo limit cycle, one series of 401 samples over t = 0..20 with 2 % noise, the three
parameters (a, b, c) = (0.2, 0.2, 3) from poor start values. Single shooting of the whole series
(Gauss–Newton, one 400-step chunk) lands in a local minimum from the starts below (measured: from
(0.05, 0.05, 1) it ends at (0.40, 1.95, 1.42); from (0.5, 1, 10) at (0, 0.39, 3.10)); multiple
shooting with 10-step segments recovers (0.1988, 0.1964, 3.0004) from both — and from all 8 starts
of a development grid, where single shooting failed from 3.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from fit_helpers import add_noise, cli

ROOT = Path(__file__).resolve().parents[2]
FHN = ROOT / "models" / "fitzhugh_nagumo.phm"
TRUE = {"a": 0.2, "b": 0.2, "c": 3.0}


@pytest.fixture(scope="module")
def fhn_data(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("fhn")
    assert cli("simulate", FHN, "--t-end", 20, "--dt", 0.05, "--rtol", 1e-10, "-o", d / "clean.csv") == 0
    return add_noise(d / "clean.csv", d / "noisy.csv", 0.02, seed=0)


def _fit(data, out, start, *extra):
    a, b, c = start
    rc = cli("fit", FHN, "--data", data, "--free", "a,b,c", "--param", f"a={a}", "--param", f"b={b}", "--param", f"c={c}",
             "--val-fraction", 0, "--quiet", "-o", out, *extra)
    assert rc == 0
    return json.loads((out / "params.json").read_text())


def _rel_err(values):
    return max(abs(values[k] / v - 1) for k, v in TRUE.items())


@pytest.mark.parametrize("start", [(0.05, 0.05, 1.0), (0.5, 1.0, 10.0)])
def test_multiple_shooting_recovers_where_single_shooting_fails(tmp_path, fhn_data, start):
    single = _fit(fhn_data, tmp_path / "ss", start, "--chunk", 400, "--method", "gauss-newton", "--epochs", 100,
                  "--start", "data")  # single shooting from the first sample (the default would estimate it)
    multiple = _fit(fhn_data, tmp_path / "ms", start, "--chunk", 10, "--shooting", "multiple")
    assert _rel_err(single["values"]) > 0.5, single["values"]  # a local minimum far from the truth
    assert _rel_err(multiple["values"]) < 0.02, multiple["values"]
    assert multiple["converged"] and multiple["solver_status"] == "Solve_Succeeded"
    assert multiple["continuity"] < 1e-10  # the segments join into one continuous solution
    assert multiple["settings"]["method"] == "ipopt" and multiple["settings"]["loss"] == "mse"


def test_ipopt_single_shooting_matches_gauss_newton(tmp_path, spring_model, small_spring_data):
    """Same problem (mean squared chunk error), two optimisers: the same minimum."""
    gn = cli("fit", spring_model, "--data", small_spring_data, "--free", "m1,m2", "--val-fraction", 0, "--quiet",
             "-o", tmp_path / "gn", "--tol", 1e-14, "--start", "data")  # ipopt's objective: chunks from the samples
    ip = cli("fit", spring_model, "--data", small_spring_data, "--free", "m1,m2", "--val-fraction", 0, "--quiet",
             "-o", tmp_path / "ip", "--method", "ipopt")
    assert gn == ip == 0
    a = json.loads((tmp_path / "gn" / "params.json").read_text())
    b = json.loads((tmp_path / "ip" / "params.json").read_text())
    for name in ("m1", "m2"):
        assert abs(a["values"][name] / 1.3 - 1 if name == "m1" else a["values"][name] / 0.7 - 1) < 1e-3
        assert b["values"][name] == pytest.approx(a["values"][name], rel=1e-6)
    assert b["train_loss"] == pytest.approx(a["train_loss"], rel=1e-6)
    assert b["converged"]


def test_multiple_shooting_on_a_constrained_model(tmp_path, spring_model, small_spring_data):
    """Cartesian double pendulum: node states are free, the invariants (links and their rates) are
    imposed at each trajectory's first node; continuity carries them along."""
    out = tmp_path / "ms"
    rc = cli("fit", spring_model, "--data", small_spring_data, "--free", "m1,m2", "--val-fraction", 0, "--quiet",
             "--shooting", "multiple", "--chunk", 5, "-o", out)
    assert rc == 0
    p = json.loads((out / "params.json").read_text())
    assert abs(p["values"]["m1"] / 1.3 - 1) < 2e-3 and abs(p["values"]["m2"] / 0.7 - 1) < 2e-3, p["values"]
    assert p["continuity"] < 1e-10


def test_ipopt_resume_continues_from_the_checkpoint(tmp_path, fhn_data):
    out = tmp_path / "ms"
    args = ("fit", FHN, "--data", fhn_data, "--free", "a,b,c", "--param", "a=0.05", "--param", "b=0.05", "--param", "c=1",
            "--val-fraction", 0, "--quiet", "--chunk", 10, "--shooting", "multiple", "-o", out)
    assert cli(*args, "--stop-after", 2) == 0
    assert (out / "checkpoint.npz").exists() and not (out / "params.json").exists()
    with np.load(out / "checkpoint.npz") as z:
        assert z["opt/nodes"].shape == (2, 40)  # node states kept with θ
    assert cli(*args, "--resume") == 0
    p = json.loads((out / "params.json").read_text())
    assert _rel_err(p["values"]) < 0.02 and p["epochs"] > 2


@pytest.mark.parametrize("extra, needle", [
    (("--shooting", "multiple", "--method", "adamw"), "multiple shooting is solved by ipopt"),
    (("--method", "ipopt", "--loss", "l1"), "ipopt minimises a sum of squares"),
    (("--shooting", "triple"), "--shooting: invalid choice: 'triple' (choose from 'single', 'multiple')"),
    (("--method", "ipopt", "--hessian", "bfgs"), "--hessian: invalid choice: 'bfgs'"),
])
def test_bad_ipopt_options_are_user_errors(tmp_path, fhn_data, capsys, extra, needle):
    rc = cli("fit", FHN, "--data", fhn_data, "--free", "a", "--val-fraction", 0, "-o", tmp_path / "x", *extra)
    assert rc == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err
    assert not (tmp_path / "x" / "params.json").exists()
