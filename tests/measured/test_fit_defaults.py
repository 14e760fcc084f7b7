"""Issue 27: `pdsl fit` of physical parameters uses all the data by default and says honestly what it found.

Default for physical parameters (no networks): whole trajectories with estimated starts, reached through stages
of growing windows; no validation hold-out; integration substeps from the sample spacing and the model's rates;
χ²/dof against the stated noise; outliers named with their file lines; undetermined parameters without "± 0".
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from measured_helpers import PENDULUM, TRUE, measured_pendulum, write_csv

from pdsl.cli.main import main


def cli(*args) -> int:
    return main([str(a) for a in args])


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    header, data = measured_pendulum(seed=1)
    d = tmp_path_factory.mktemp("defaults")
    # the noise the helper added: 1 % of each column's standard deviation (before the noise)
    clean_header, clean = measured_pendulum(seed=1, noise=0.0)
    sigma = {name: 0.01 * float(np.std(clean[:, j])) for j, name in ((2, "x"), (3, "theta"))}
    return write_csv(d / "measured.csv", header, data), sigma, data, header


MAP = ("--map", "run=traj,time=t")


def _fit(data, out, *extra):
    assert cli("fit", PENDULUM, "--data", data, *MAP, "--free", "k,c", "--param", "k=6", "--param", "c=0.8",
               "-o", out, "--quiet", *extra) == 0
    return json.loads((out / "params.json").read_text())


def test_default_uses_whole_trajectories_and_beats_short_chunks(measured, tmp_path, capsys):
    data, sigma, _, _ = measured
    default = _fit(data, tmp_path / "default")
    out = capsys.readouterr().out
    assert "whole trajectories, each start estimated, reached through windows of 10, 40 steps" in out
    assert "4 training / 0 validation trajectories" in out
    assert default["stages"][-1] == 160 and default["settings"]["val_fraction"] == 0.0
    short = _fit(data, tmp_path / "short", "--chunk", "20", "--val-fraction", "0.2")  # the former default
    for name, true in TRUE.items():
        p, q = default["params"][name], short["params"][name]
        assert abs(p["value"] - true) <= 3 * p["stderr"], (name, p)
        assert p["stderr"] < 0.7 * q["stderr"], (name, p["stderr"], q["stderr"])  # measured (seed 1): k 0.0016 vs 0.009 (5.5x), c 0.00049 vs 0.00096 (2x)


def test_misfit_against_the_stated_noise(measured, tmp_path, capsys):
    data, sigma, _, _ = measured
    right = _fit(data, tmp_path / "right", "--noise", f"x={sigma['x']}", "--noise", f"theta={sigma['theta']}")
    out = capsys.readouterr().out
    assert right["misfit"]["noise_known"] and 0.85 < right["misfit"]["ratio"] < 1.15
    assert "χ²/dof" in out and "warning" not in out
    small = _fit(data, tmp_path / "small", "--noise", f"x={sigma['x'] / 5}", "--noise", f"theta={sigma['theta'] / 5}")
    out = capsys.readouterr().out
    assert small["misfit"]["ratio"] > 20
    assert "warning: the misfit is χ²/dof" in out and "stated --noise is too small" in out


def test_outliers_are_named_with_their_lines(measured, tmp_path, capsys):
    _, sigma, data, header = measured
    rng = np.random.default_rng(5)
    bad = np.array(data)
    rows = rng.choice(len(bad), size=6, replace=False)
    bad[rows, 3] += 12 * sigma["theta"] * rng.choice([-1, 1], size=len(rows))
    path = write_csv(tmp_path / "outliers.csv", header, bad)
    fitted = _fit(path, tmp_path / "o", "--noise", f"x={sigma['x']}", "--noise", f"theta={sigma['theta']}")
    out = capsys.readouterr().out
    assert "samples deviate from the fit by more than 5σ" in out
    named = {x["line"] for x in fitted["largest_residuals"] if x["z"] > 5}
    assert named and named <= {int(r) + 2 for r in rows}  # file line = row + header + 1


OSC = """\
model Osc
  param k = 2, m = 1 {lower = 0}
  var x = 1, v = 0
  der(x) = v
  der(v) = -k/m*x
end
"""


@pytest.fixture(scope="module")
def osc_data(tmp_path_factory):
    """The k/m oscillator (only k/m determined): 3 noisy trajectories."""
    d = tmp_path_factory.mktemp("osc")
    model, data = d / "osc.phm", d / "osc.csv"
    model.write_text(OSC)
    assert cli("simulate", model, "--t-end", 6, "--dt", 0.05, "--random-init", 3, "--noise", 0.01, "--seed", 2,
               "-o", data) == 0
    return model, data


def test_an_undetermined_parameter_has_no_error_bar(osc_data, tmp_path, capsys):
    model, data = osc_data
    capsys.readouterr()
    assert cli("fit", model, "--data", data, "--free", "k,m", "-o", tmp_path / "f", "--quiet") == 0
    out = capsys.readouterr().out
    assert "± 0\n" not in out and "(not determined)" in out and "only k/m is determined by these data" in out
    params = json.loads((tmp_path / "f" / "params.json").read_text())["params"]
    assert params["k"]["stderr"] is None and params["m"]["stderr"] is None


LOTKA = """\
model LotkaVolterra
  param a = 1.0, b = 0.4, c = 1.2, d = 0.3
  var x = 4, y = 2
  der(x) = a*x - b*x*y
  der(y) = -c*y + d*x*y
end
"""


def test_sparse_samples_get_substeps_and_fit(tmp_path, capsys):
    model = tmp_path / "lv.phm"
    model.write_text(LOTKA)
    data = tmp_path / "lv.csv"
    assert cli("simulate", model, "--t-end", 30, "--dt", 1.0, "--random-init", 3, "--random-scale", 0.5,
               "--noise", 0.02, "--seed", 4, "-o", data) == 0
    capsys.readouterr()
    assert cli("fit", model, "--data", data, "--free", "a,b,c,d", "--param", "a=0.8", "--param", "d=0.25",
               "-o", tmp_path / "f", "--quiet") == 0
    out = capsys.readouterr().out
    m = int(out.split(" rk4 steps per sample interval")[0].rsplit("\n", 1)[-1].strip())
    assert m >= 4  # one RK4 step per unit interval blows up (issue 27)
    params = json.loads((tmp_path / "f" / "params.json").read_text())["params"]
    for name, true in {"a": 1.0, "b": 0.4, "c": 1.2, "d": 0.3}.items():
        assert abs(params[name]["value"] - true) <= 4 * params[name]["stderr"], (name, params[name])


def _lv_data(tmp_path, capsys, *, sigma_column=False):
    """Lotka–Volterra, 5 % multiplicative noise on both populations (seeded)."""
    import csv

    model = tmp_path / "lv.phm"
    model.write_text(LOTKA)
    clean = tmp_path / "clean.csv"
    assert cli("simulate", model, "--t-end", 30, "--dt", 0.5, "--random-init", 3, "--random-scale", 0.5, "--seed", 4,
               "-o", clean) == 0
    capsys.readouterr()
    rows = list(csv.reader(clean.open()))
    D = np.array(rows[1:], dtype=float)
    rng = np.random.default_rng(0)
    for j in (2, 3):
        D[:, j] *= 1 + 0.05 * rng.standard_normal(len(D))
    header = rows[0] + (["sx"] if sigma_column else [])
    if sigma_column:
        D = np.column_stack([D, 0.05 * np.abs(D[:, 2])])
    return model, write_csv(tmp_path / ("lv_sigma.csv" if sigma_column else "lv_noisy.csv"), header, D)


def test_relative_and_per_sample_noise(tmp_path, capsys):
    model, data = _lv_data(tmp_path, capsys)
    _, with_sigma = _lv_data(tmp_path, capsys, sigma_column=True)  # the same draws, and a column σ_x = 5 % |x|
    args = ("fit", model, "--free", "a,b,c,d", "--param", "a=0.8", "--quiet")
    assert cli(*args, "--data", data, "--noise", "x=5%", "--noise", "y=5%", "-o", tmp_path / "rel") == 0
    rel = json.loads((tmp_path / "rel" / "params.json").read_text())
    assert 0.8 < rel["misfit"]["ratio"] < 1.25 and rel["misfit"]["noise_known"]
    for name, true in {"a": 1.0, "b": 0.4, "c": 1.2, "d": 0.3}.items():
        assert abs(rel["params"][name]["value"] - true) <= 3 * rel["params"][name]["stderr"], name
    assert cli(*args, "--data", with_sigma, "--noise", "x=sx", "--noise", "y=5%", "-o", tmp_path / "col") == 0
    col = json.loads((tmp_path / "col" / "params.json").read_text())
    assert col["values"]["a"] == pytest.approx(rel["values"]["a"], rel=1e-6)


def test_bad_noise_is_located(tmp_path, capsys, measured):
    model, data = _lv_data(tmp_path, capsys, sigma_column=True)
    lines = data.read_text().splitlines()
    cells = lines[4].split(",")
    cells[-1] = "0.0"
    lines[4] = ",".join(cells)
    zero = tmp_path / "zero.csv"
    zero.write_text("\n".join(lines) + "\n")
    assert cli("fit", model, "--data", zero, "--free", "a", "--noise", "x=sx", "-o", tmp_path / "z") == 2
    err = capsys.readouterr().err
    assert f"{zero}:5:" in err and "noise column `sx` holds 0" in err
    pend, _, _, _ = measured
    assert cli("fit", PENDULUM, "--data", pend, *MAP, "--free", "k", "--noise", "theta=5%", "-o", tmp_path / "r") == 2
    err = capsys.readouterr().err
    assert "a relative noise needs a column that stays on one side of zero" in err and f"{pend}:" in err
    assert cli("fit", PENDULUM, "--data", pend, *MAP, "--free", "k", "--noise", "theta=-3%", "-o", tmp_path / "n") == 2
    assert "between 0 and 1000 %" in capsys.readouterr().err


def _robust_against_outliers(measured, tmp_path, *extra) -> None:
    """2 % of the θ samples 10σ off: a huber fit moves k and c less than half as much as a plain one (from the fit
    of the clean data)."""
    _, sigma, data, header = measured
    rng = np.random.default_rng(7)
    bad = np.array(data)
    rows = rng.choice(len(bad), size=int(0.02 * len(bad)), replace=False)
    bad[rows, 3] += 10 * sigma["theta"] * rng.choice([-1, 1], size=len(rows))
    path = write_csv(tmp_path / "outliers.csv", header, bad)
    noise = ("--noise", f"x={sigma['x']}", "--noise", f"theta={sigma['theta']}", *extra)
    clean = _fit(write_csv(tmp_path / "clean.csv", header, data), tmp_path / "c", *noise)
    plain = _fit(path, tmp_path / "p", *noise)
    robust = _fit(path, tmp_path / "h", *noise, "--loss", "huber")
    for name in ("k", "c"):
        moved_plain = abs(plain["values"][name] - clean["values"][name])
        moved_robust = abs(robust["values"][name] - clean["values"][name])
        assert moved_robust < 0.5 * moved_plain, (name, moved_plain, moved_robust)


def test_huber_loss_resists_outliers(measured, tmp_path, capsys):
    _robust_against_outliers(measured, tmp_path)
    out = capsys.readouterr().out
    assert "huber loss:" in out and "weighted below 1/2" in out


def test_profile_likelihood_intervals(measured, tmp_path, capsys):
    data, sigma, _, _ = measured
    fitted = _fit(data, tmp_path / "p", "--noise", f"x={sigma['x']}", "--noise", f"theta={sigma['theta']}",
                  "--profile", "c")
    out = capsys.readouterr().out
    assert "profile: c ∈ [" in out and "(profile likelihood, 68 %)" in out
    prof, c = fitted["profiles"]["c"], fitted["params"]["c"]
    assert prof["lower"] < c["value"] < prof["upper"] and not prof["open"]
    # nearly quadratic here: the profile interval matches the linear one to 20 %
    assert (prof["upper"] - prof["lower"]) / 2 == pytest.approx(c["stderr"], rel=0.2)


def test_profile_is_open_where_the_data_do_not_bound_and_names_are_checked(osc_data, tmp_path, capsys):
    model, data = osc_data
    capsys.readouterr()
    assert cli("fit", model, "--data", data, "--free", "k,m", "--profile", "k", "-o", tmp_path / "f", "--quiet") == 0
    prof = json.loads((tmp_path / "f" / "params.json").read_text())["profiles"]["k"]
    assert prof["lower"] is None and prof["upper"] is None and prof["open"] == ["lower", "upper"]
    assert "open on the lower and upper side" in capsys.readouterr().out
    assert cli("fit", model, "--data", data, "--free", "k", "--profile", "kk", "-o", tmp_path / "g") == 2
    assert "--profile kk: `kk` is not a free parameter" in capsys.readouterr().err


def test_huber_loss_with_ipopt_multiple_shooting(measured, tmp_path, capsys):
    _robust_against_outliers(measured, tmp_path, "--shooting", "multiple")
    assert "the huber loss limits their pull" in capsys.readouterr().out


def test_report_lists_profiles_and_largest_residuals(measured, tmp_path, capsys):
    data, sigma, _, _ = measured
    _fit(data, tmp_path / "r", "--noise", f"x={sigma['x']}", "--noise", f"theta={sigma['theta']}", "--profile", "k")
    report = (tmp_path / "r" / "report.md").read_text()
    assert "## Profile likelihood (68 %)" in report and "| `k` |" in report
    assert "## Largest standardized residuals" in report and "σ (the stated noise)" in report
