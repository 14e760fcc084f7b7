"""Fitting through events (issue 29 b, LANGUAGE.md §11): the fit's fixed-step integrators locate `when` events in
their steps (pdsl.numerics.events), so gradients include the event-time term and the restitution of a bouncing
ball, which acts only through its reset, is recovered from noisy bounce heights."""

import json
from pathlib import Path

import casadi as ca
import numpy as np
import pytest
from fit_helpers import cli

from pdsl.fit.loss import make_interval
from pdsl.pipeline import compile_model

BALL = Path(__file__).resolve().parents[2] / "models" / "bouncing_ball.phm"
DT, N = 0.01, 200  # 2 s: bounces at 0.4515, 1.174, 1.752 s (e = 0.8)


@pytest.fixture(scope="module")
def ball():
    return compile_model(BALL).numeric


def exact_ball(t, h0=1.0, g=9.81, e=0.8):
    """The closed-form bouncing ball at the times t (start at rest at h0)."""
    u0 = np.sqrt(2 * g * h0)
    hits, ups = [u0 / g], [e * u0]
    for _ in range(40):
        hits.append(hits[-1] + 2 * ups[-1] / g)
        ups.append(e * ups[-1])
    out = np.zeros((2, len(t)))
    for i, ti in enumerate(t):
        if ti < hits[0]:
            out[:, i] = h0 - g * ti**2 / 2, -g * ti
        else:
            k = np.searchsorted(hits, ti) - 1
            s = ti - hits[k]
            out[:, i] = ups[k] * s - g * s**2 / 2, ups[k] - g * s
    return out


def _rollout(num, method="rk4", substeps=1):
    iv = make_interval(num, method, DT, substeps)
    roll = iv.mapaccum("roll", N, [0], [0], {})
    p, x0 = ca.MX.sym("p", len(num.p_names)), ca.MX.sym("x0", num.nx)
    U, T = ca.DM.zeros(0, N), ca.DM(np.arange(N) * DT).T
    X = roll(x0, p, U, U, T)
    return ca.Function("F", [x0, p], [X]), x0, p, X


def test_discrete_solution_matches_the_closed_form(ball):
    F, *_ = _rollout(ball)
    X = np.asarray(F([1.0, 0.0], ball.p_default))
    ref = exact_ball((np.arange(N) + 1) * DT)
    # rk4 and the Hermite interpolant are exact on the parabolas; what is left is the one Newton step's error
    assert np.max(np.abs(X - ref)) < 1e-7
    assert np.count_nonzero(np.diff(X[1]) > 1.0) == 3  # three bounces, none missed


def test_gradients_through_events_match_finite_differences(ball):
    """d(loss)/d(g, e, h0, v0) of a 2 s rollout with 3 bounces: CasADi AD of the discrete solution (event-time
    term included) against central differences (measured 1e-9 relative)."""
    F, x0, p, X = _rollout(ball)
    ref = exact_ball((np.arange(N) + 1) * DT, e=0.75)
    L = ca.sumsqr(X - ca.DM(ref))
    G = ca.Function("G", [x0, p], [L, ca.jacobian(L, ca.vertcat(p, x0))])
    z = np.r_[ball.p_default, 1.0, 0.0]  # g, e, h0, v0

    def loss(z):
        return float(G(z[2:], z[:2])[0])

    grad = np.asarray(G(z[2:], z[:2])[1]).ravel()
    for i, name in enumerate(("g", "e", "h0", "v0")):
        d = np.zeros(4)
        d[i] = 1e-5
        fd = (loss(z + d) - loss(z - d)) / 2e-5
        assert abs(grad[i] - fd) <= 1e-6 * abs(fd), (name, grad[i], fd)
    assert abs(grad[1]) > 1.0  # e acts only through the reset: without the event term it would be 0


def test_gradient_of_the_bounce_time_by_the_jump_formula(ball):
    """dτ/dh0 of the first bounce: with h(τ) = 0 the state right after is v⁺ = e·g·τ; the discrete v at a sample after
    the bounce moves with h0 as d/dh0 [e g τ − g (t − τ)] = g (1 + e) dτ/dh0, dτ/dh0 = 1/(g τ)."""
    F, x0, p, X = _rollout(ball)
    J = ca.Function("J", [x0, p], [ca.jacobian(X[1, 50], x0)])  # t = 0.51 s, after the first bounce
    g, e = ball.p_default
    tau = np.sqrt(2 / g)
    expect = g * (1 + e) / (g * tau)
    assert float(np.asarray(J([1.0, 0.0], ball.p_default))[0, 0]) == pytest.approx(expect, rel=1e-6)


@pytest.fixture(scope="module")
def bounce_data(tmp_path_factory):
    d = tmp_path_factory.mktemp("ball")
    out = d / "data.csv"
    assert cli("simulate", BALL, "--param", "e=0.7", "--t-end", 2, "--dt", DT, "--noise", 0.002, "-o", out) == 0
    return out


def test_restitution_recovered_within_its_standard_error(tmp_path, bounce_data, capsys):
    out = tmp_path / "fit"
    assert cli("fit", BALL, "--data", bounce_data, "--noise", "h=0.002", "--noise", "v=0.002", "-o", out, "--quiet",
               "--no-plots") == 0
    params = json.loads((out / "params.json").read_text())
    e, se = params["params"]["e"]["value"], params["params"]["e"]["stderr"]
    assert se is not None and 0 < se < 1e-3
    assert abs(e - 0.7) < 2 * se, (e, se)  # measured: 0.70001657 ± 2.7e-05 (0.6 SE)
    assert "e = 0.7000" in capsys.readouterr().out


def test_restitution_from_heights_alone(tmp_path, bounce_data, capsys):
    """Only the heights measured (v unmeasured, estimated at every window start): measured 0.7000148 ± 0.00014."""
    lines = bounce_data.read_text().splitlines()
    assert lines[0] == "t,h,v"
    heights = tmp_path / "heights.csv"
    heights.write_text("\n".join(",".join(line.split(",")[:2]) for line in lines) + "\n")
    out = tmp_path / "fit_h"
    assert cli("fit", BALL, "--data", heights, "--noise", "h=0.002", "-o", out, "--quiet", "--no-plots") == 0
    params = json.loads((out / "params.json").read_text())
    e, se = params["params"]["e"]["value"], params["params"]["e"]["stderr"]
    assert abs(e - 0.7) < 2 * se and se < 1e-3, (e, se)


@pytest.mark.slow
def test_restitution_by_multiple_shooting(tmp_path, bounce_data):
    out = tmp_path / "ms"
    assert cli("fit", BALL, "--data", bounce_data, "--noise", "h=0.002", "--noise", "v=0.002", "--shooting", "multiple",
               "--param", "e=0.9", "-o", out, "--quiet", "--no-plots") == 0
    params = json.loads((out / "params.json").read_text())
    e, se = params["params"]["e"]["value"], params["params"]["e"]["stderr"]
    assert abs(e - 0.7) < 2 * se


def test_events_closer_than_a_step_are_a_failed_evaluation(tmp_path, bounce_data, capsys):
    """e = 0.05 at the start: the third bounce follows the second within one step (an accumulation): the start's
    loss is not finite and the error says why; inside the fit such a trial step is rejected like any failure."""
    assert cli("fit", BALL, "--data", bounce_data, "--param", "e=0.05", "-o", tmp_path / "z", "--quiet", "--no-plots") == 2
    assert "two events fire within one integration step" in capsys.readouterr().err


def test_data_after_a_terminating_event_name_both_times(tmp_path, bounce_data, capsys):
    model = tmp_path / "ball_stop.phm"
    model.write_text(BALL.read_text().replace("reinit(v, -e*v)", "reinit(v, -e*v), terminate"))
    assert cli("fit", model, "--data", bounce_data, "-o", tmp_path / "t", "--quiet", "--no-plots") == 2
    msg = capsys.readouterr().err
    assert "terminating event" in msg and "t ≈ 0.45" in msg and "t = 2" in msg


def test_torch_backend_takes_events_with_adamw(tmp_path, bounce_data, capsys):
    """The torch backend locates events too (tests/numerics/test_torch_event_step.py); it trains with AdamW only, so
    `--backend torch` with the default Gauss–Newton is a BadOption that says why, not NotYetSupported."""
    assert cli("fit", BALL, "--data", bounce_data, "--backend", "torch", "-o", tmp_path / "o", "--quiet",
               "--no-plots") == 2
    err = capsys.readouterr().err
    assert "NotYetSupported" not in err and "CasADi Jacobians" in err


def test_a_model_without_events_keeps_its_plain_step():
    from pdsl.numerics import make_step
    from pdsl.numerics.events import StepEvents, make_event_step

    t, x, p = ca.SX.sym("t"), ca.SX.sym("x", 2), ca.SX.sym("p", 1)
    f = ca.Function("f", [t, x, p], [ca.vertcat(x[1], -p[0] * x[0])])
    none = StepEvents(ca.Function("g", [t, x, p], [ca.SX(0, 1)]), (), (), (), ())
    a = make_event_step(f, "rk4", 0.1, none)(0.0, [1.0, 0.0], [2.0])
    b = make_step(f, "rk4", 0.1)(0.0, [1.0, 0.0], [2.0])
    assert np.array_equal(np.asarray(a), np.asarray(b))
