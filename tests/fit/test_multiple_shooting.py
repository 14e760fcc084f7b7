"""Multiple shooting with estimated node states (issue 27 item 2): unmeasured states, every sample compared once,
error bars with the node states profiled out, and the default fit's fallback on it.

Measured on these data (FitzHugh–Nagumo, V only, 401 samples, 2 % noise; a, b, c = 0.2, 0.2, 3):
``--shooting multiple --chunk 10`` from (1, 1, 15) — 5× off — reaches (0.19945, 0.20164, 2.99749) ± (0.00088, 0.0066,
0.0018) in 8 IPOPT iterations (~3 s with the graph builds), the estimates and error bars of the default
single-shooting fit started from the truth to 4 digits. From (0.04, 1, 15) the default staged fit ends in a local
minimum (a = 0, χ²/dof = 137 against the stated noise) and falls back on multiple shooting, which reaches the same
point. On the measured driven pendulum (positions only, irregular samples) multiple shooting and the default fit
agree in values and error bars to 1e-9 (same objective at continuity, same information with the starts profiled
out) and count the same degrees of freedom (every sample once).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from fit_helpers import cli

from pdsl.data.csvio import read_table, write_table

ROOT = Path(__file__).resolve().parents[2]
FHN = ROOT / "models" / "fitzhugh_nagumo.phm"
TRUE = {"a": 0.2, "b": 0.2, "c": 3.0}
sys.path.insert(0, str(ROOT / "tests" / "measured"))


@pytest.fixture(scope="module")
def fhn_v(tmp_path_factory):
    """FitzHugh–Nagumo with only V measured (2 % noise); R is not a column. Returns (csv, σ)."""
    d = tmp_path_factory.mktemp("fhn_v")
    assert cli("simulate", FHN, "--t-end", 20, "--dt", 0.05, "--rtol", 1e-10, "-o", d / "clean.csv") == 0
    table = read_table(d / "clean.csv")
    t, V = table.data[:, table.columns.index("t")], table.data[:, table.columns.index("V")]
    sigma = 0.02 * float(np.std(V))
    noisy = V + sigma * np.random.default_rng(0).standard_normal(len(V))
    write_table(d / "v.csv", ["t", "V"], np.column_stack([t, noisy]))
    return d / "v.csv", sigma


def _fit(data, out, start, *extra):
    a, b, c = start
    assert cli("fit", FHN, "--data", data, "--free", "a,b,c", "--param", f"a={a}", "--param", f"b={b}",
               "--param", f"c={c}", "--quiet", "-o", out, *extra) == 0
    return json.loads((out / "params.json").read_text())


def _within(p, sigmas=3.0):
    for name, true in TRUE.items():
        q = p["params"][name]
        assert q["stderr"] is not None and abs(q["value"] - true) <= sigmas * q["stderr"], (name, q)


def test_unmeasured_state_from_five_times_off(tmp_path, fhn_v, capsys):
    data, sigma = fhn_v
    out = tmp_path / "ms"
    p = _fit(data, out, (1.0, 1.0, 15.0), "--shooting", "multiple", "--method", "ipopt", "--chunk", 10,
             "--noise", f"V={sigma}")
    printed = capsys.readouterr().out
    assert "40 shooting segments of 10 steps" in printed and "every sample compared once" in printed
    assert "dropped" not in printed and "(unmeasured: R)" in printed
    _within(p)
    assert p["converged"] and p["solver_status"] == "Solve_Succeeded" and p["continuity"] < 1e-10
    assert p["misfit"]["noise_known"] and 0.8 < p["misfit"]["ratio"] < 1.2  # 401 samples − 3 parameters − 2 start dims
    assert p["misfit"]["dof"] == 401 - 3 - 2
    assert isinstance(p["identifiability"]["sentences"], list)
    with np.load(out / "checkpoint.npz") as z:
        assert z["opt/nodes"].shape == (2, 40)  # V and the unmeasured R at every node


def test_segments_compare_every_sample_once():
    from pdsl.fit.data import Dataset, Trajectory
    from pdsl.fit.ipopt import make_segments

    trs = []
    for j, L in enumerate((11, 16, 2)):
        t = np.arange(L) * 0.1
        S = np.column_stack([np.sin(t), np.full(L, np.nan)])  # x measured, der(x) not
        trs.append(Trajectory(j, 2, t, S, S[:, :1].copy(), np.zeros((L, 0))))
    ds = Dataset("mem", ("x", "der(x)"), ("x",), (), 0.1, tuple(trs), measured=("x",))
    seg = make_segments(ds, 4)
    ch = seg.chunks
    assert seg.dropped == 0 and len(seg) == 3 + 4 + 1 and ch.steps == 4
    assert seg.starts.tolist() == [0, 3, 7] and seg.links.tolist() == [0, 1, 3, 4, 5]
    for j, tr in enumerate(trs):  # every sample of every trajectory carries weight once
        mine = seg.owner == j
        assert int(np.count_nonzero(ch.W[mine])) == len(tr)
        t_seen = ch.T[mine][ch.W[mine][:, 0, :] > 0]
        assert np.allclose(np.sort(t_seen), tr.t)
    assert np.allclose(ch.T[2], [0.8, 0.9, 1.0, 1.1, 1.2]) and np.all(ch.W[2][:, 3:] == 0)  # 2 steps, padded to 4
    assert np.all(np.isfinite(ch.S0)) and np.allclose(ch.S0[0, 1], np.cos(0.0), atol=0.01)  # finite-difference guess


def test_error_bars_agree_with_the_default_fit(tmp_path, capsys):
    from measured_helpers import PENDULUM, TRUE as PTRUE, measured_pendulum, write_csv

    header, data = measured_pendulum(seed=1)
    csv = write_csv(tmp_path / "measured.csv", header, data)

    def fit(out, *extra):
        assert cli("fit", PENDULUM, "--data", csv, "--map", "run=traj,time=t", "--free", "k,c", "--param", "k=6",
                   "--param", "c=0.8", "-o", out, "--quiet", *extra) == 0
        return json.loads((out / "params.json").read_text())

    default = fit(tmp_path / "default")
    assert not any("fallback" in n for n in default["notes"])  # a good fit keeps single shooting
    capsys.readouterr()
    ms = fit(tmp_path / "ms", "--shooting", "multiple", "--chunk", 7)  # 160 steps: 22 segments of 7, one of 6
    printed = capsys.readouterr().out
    assert "92 shooting segments of 7 steps" in printed and "dropped" not in printed
    assert ms["misfit"]["dof"] == default["misfit"]["dof"]  # every sample once, one free start per trajectory
    for name, true in PTRUE.items():
        a, b = default["params"][name], ms["params"][name]
        assert abs(b["value"] - true) <= 3 * b["stderr"], (name, b)
        assert b["stderr"] == pytest.approx(a["stderr"], rel=0.05), name  # measured: equal to 1e-9
        assert b["value"] == pytest.approx(a["value"], abs=0.05 * a["stderr"]), name


@pytest.mark.parametrize("noise", [True, False])
def test_default_fit_falls_back_on_multiple_shooting(tmp_path, fhn_v, capsys, noise):
    """From (0.04, 1, 15) the staged single-shooting fit ends in a local minimum (a at its bound 0, b = 0.46)."""
    data, sigma = fhn_v
    p = _fit(data, tmp_path / "fb", (0.04, 1.0, 15.0), *(("--noise", f"V={sigma}") if noise else ()))
    printed = capsys.readouterr().out
    why = "χ²/dof = " if noise else "worse than its windows of 10 steps"
    assert "fallback: multiple shooting, segments of 10 steps" in printed and why in printed
    assert p["notes"][0].startswith("multiple shooting (fallback: ") and why in p["notes"][0]
    assert p["settings"]["shooting"] == "multiple" and p["settings"]["method"] == "ipopt"
    _within(p)
    assert p["solver_status"] == "Solve_Succeeded" and p["continuity"] < 1e-10


def test_fallback_when_the_staged_fit_blows_up(tmp_path, fhn_v, capsys, monkeypatch):
    """A staged fit that raises NonFiniteLoss (here simulated) is replaced by multiple shooting, not an error."""
    import pdsl.fit.run as run_mod
    from pdsl.diagnostics import PdslError

    def blows_up(run, state, opts, on_epoch, log):
        raise PdslError.at("NonFiniteLoss", "the training loss became nan in epoch 3")

    monkeypatch.setattr(run_mod, "_staged_fit", blows_up)
    data, _ = fhn_v
    p = _fit(data, tmp_path / "fb", (0.3, 0.3, 2.0))
    assert "fallback: multiple shooting" in capsys.readouterr().out
    assert p["notes"][0].startswith("multiple shooting (fallback: the staged single-shooting fit failed: the training "
                                    "loss became nan")
    _within(p)
    assert p["converged"] and p["settings"]["shooting"] == "multiple"
