"""Fitting through switching surfaces (LANGUAGE.md §11, `fit --switches locate`): each fixed step locates the first
surface it crosses (mode change or Filippov sliding, pdsl.numerics.events.make_switch_step), so the discrete solution
follows the exact stick–slip solution and the gradients carry the switching-time term s⁺ = s⁻ + (f⁻ − f⁺)·dτ/dp."""

import json
import sys
from pathlib import Path

import casadi as ca
import numpy as np
import pytest
from fit_helpers import cli

from pdsl.fit.loss import make_interval
from pdsl.pipeline import compile_model

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "sim"))
from test_switching import _stick_slip_exact  # noqa: E402

STICK = ROOT / "models" / "stick_slip.phm"
FRICTION = ROOT / "models" / "friction_oscillator.phm"
DT = 0.01


@pytest.fixture(scope="module")
def stick():
    return compile_model(STICK).numeric


def _rollout(num, n, switches, substeps=1):
    iv = make_interval(num, "rk4", DT, substeps, (), switches)
    roll = iv.mapaccum("roll", n, [0], [0], {})
    p, x0 = ca.MX.sym("p", len(num.p_names)), ca.MX.sym("x0", num.nx)
    X = roll(x0, p, ca.DM.zeros(0, n), ca.DM.zeros(0, n), ca.DM(np.arange(n) * DT).T)
    return ca.Function("F", [x0, p], [X, ca.jacobian(X, ca.vertcat(x0, p))])


@pytest.mark.parametrize("switches,substeps,bound", [("locate", 1, 1e-4), ("locate", 4, 1e-6), ("step-through", 4, None)])
def test_stick_slip_steps_follow_the_exact_solution(stick, switches, substeps, bound):
    n = 1000
    X = np.asarray(_rollout(stick, n, switches, substeps)(np.zeros(2), stick.p_default)[0])
    exact = np.array([_stick_slip_exact(t)[:2] for t in (np.arange(n) + 1) * DT]).T
    err = np.max(np.abs(X - exact))
    if bound is None:
        assert err > 1e-2  # stepping through the surface: the rk4 steps chatter across it (measured 0.025)
    else:
        assert err < bound  # measured: 3.2e-5 (h = 0.01), 1.7e-7 (h = 0.0025)


def test_gradients_through_a_sliding_phase_match_finite_differences(stick):
    """Through the start of sticking (t ≈ 0.041) and its end (t ≈ 2.47): start states and every parameter."""
    F = _rollout(stick, 300, "locate")
    z0 = np.concatenate([np.zeros(2), stick.p_default])
    X, J = (np.asarray(v) for v in F(z0[:2], z0[2:]))
    fd = np.zeros_like(J)
    for i in range(z0.size):
        e = np.zeros_like(z0)
        e[i] = 1e-6 * max(1.0, abs(z0[i]))
        plus, minus = (np.asarray(F(z[:2], z[2:])[0]).ravel(order="F") for z in (z0 + e, z0 - e))
        fd[:, i] = (plus - minus) / (2 * e[i])
    assert np.max(np.abs(J - fd)) < 1e-6 * np.max(np.abs(fd))  # measured 3.7e-10 relative


@pytest.fixture(scope="module")
def friction_data(tmp_path_factory):
    d = tmp_path_factory.mktemp("friction")
    out = d / "data.csv"
    assert cli("simulate", FRICTION, "--t-end", 20, "--dt", 0.05, "--rtol", 1e-11, "--noise", 0.001, "--seed", 1,
               "-o", out) == 0
    return out


def test_friction_parameters_recovered_within_their_standard_errors(tmp_path, friction_data, capsys):
    out = tmp_path / "fit"
    assert cli("fit", FRICTION, "--data", friction_data, "--free", "mu,k", "--param", "mu=0.03", "--param", "k=1.2",
               "--switches", "locate", "--substeps", 2, "-o", out, "--no-plots") == 0
    text = capsys.readouterr().out
    assert "switching surfaces located inside the rk4 steps" in text
    params = json.loads((out / "params.json").read_text())["params"]
    for name, true in (("k", 1.0), ("mu", 0.05)):
        value, se = params[name]["value"], params[name]["stderr"]
        assert abs(value - true) < 3 * se, (name, value, se)  # measured: 1.2 SE (k), 0.8 SE (mu)


def test_stepping_through_is_noted_and_biased(tmp_path, friction_data, capsys):
    out = tmp_path / "fit"
    assert cli("fit", FRICTION, "--data", friction_data, "--free", "mu,k", "--param", "mu=0.03", "--param", "k=1.2",
               "--substeps", 2, "-o", out, "--no-plots") == 0
    assert "--switches locate locates them" in capsys.readouterr().out
    params = json.loads((out / "params.json").read_text())["params"]
    assert abs(params["k"]["value"] - 1.0) > 5 * params["k"]["stderr"]  # the chattering steps bias the fit


def test_locate_is_refused_on_the_torch_backend(tmp_path, friction_data, capsys):
    pytest.importorskip("torch")
    rc = cli("fit", FRICTION, "--data", friction_data, "--free", "mu", "--switches", "locate", "--backend", "torch",
             "--method", "adamw", "--epochs", 1, "-o", tmp_path / "fit", "--no-plots")
    assert rc == 2
    assert "--switches locate runs on the CasADi backend" in capsys.readouterr().err
