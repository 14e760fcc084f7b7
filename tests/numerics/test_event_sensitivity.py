"""CVODES forward sensitivities through events and switching surfaces by the jump formula (LANGUAGE.md §11), against
closed forms and central finite differences of the same runs."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest

from pdsl.fit.loss import trajectory_pieces
from pdsl.numerics.event_sensitivity import event_sensitivities
from pdsl.numerics.sensitivity import loss_and_grad
from pdsl.pipeline import compile_model

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "sim"))
from test_switching import _stick_slip_exact  # noqa: E402  (the closed form lives with the simulate tests)


def _model(name):
    num = compile_model(str(ROOT / "models" / name)).numeric
    x0 = np.array([float(s.start) if s.start is not None else 0.0 for s in num.system.states])
    return num, x0, np.array(num.p_default, dtype=float)


def _fd(run, z0, nx, d=1e-6):
    J = np.zeros(run(z0).shape + (z0.size,))
    for i in range(z0.size):
        e = np.zeros_like(z0)
        e[i] = d * max(1.0, abs(z0[i]))
        J[..., i] = (run(z0 + e) - run(z0 - e)) / (2 * e[i])
    return J


@pytest.mark.parametrize("name,T,tol", [("bouncing_ball.phm", 2.0, 1e-6), ("stick_slip.phm", 4.0, 1e-5),
                                        ("friction_oscillator.phm", 3.0, 1e-6)])
def test_sensitivities_through_events_and_switches_match_finite_differences(name, T, tol):
    num, x0, p0 = _model(name)
    f, ev, sw = trajectory_pieces(num)
    grid = np.linspace(0.0, T, 21)
    nx = x0.size
    res = event_sensitivities(f, grid, x0, p0, events=ev, switches=sw)
    assert res.log and not any(r.grazing for r in res.log)
    fd = _fd(lambda z: event_sensitivities(f, grid, z[:nx], z[nx:], events=ev, switches=sw).X, np.concatenate([x0, p0]), nx)
    assert np.max(np.abs(res.S - fd)) < tol * max(1.0, np.max(np.abs(fd)))


def test_bouncing_ball_times_states_and_the_restitution_sensitivity_in_closed_form():
    num, x0, p0 = _model("bouncing_ball.phm")
    f, ev, sw = trajectory_pieces(num)
    g, e = p0
    res = event_sensitivities(f, [0.0, 1.5], x0, p0, events=ev, rtol=1e-12, atol=1e-14)
    t1 = math.sqrt(2 * x0[0] / g)
    t2 = t1 + 2 * e * g * t1 / g  # up and down again at speed e·g·t1
    assert [r.kind for r in res.log] == ["event", "event"]
    assert abs(res.log[0].t - t1) < 1e-10 and abs(res.log[1].t - t2) < 1e-10
    # between the bounces: h = e g t1 τ − g τ²/2, τ = t − t1; dh/de = g t1 τ
    tau = 1.5 - t2
    v3 = e * e * g * t1
    h = v3 * tau - g * tau**2 / 2
    assert abs(res.X[0, 0] - h) < 1e-9
    dv3_de = 2 * e * g * t1
    dt2_de = 2 * t1
    dh_de = dv3_de * tau - (v3 - g * tau) * dt2_de
    assert abs(res.S[0, 0, 3] - dh_de) < 1e-7


def test_stick_slip_switch_times_and_states_against_the_exact_solution():
    num, x0, p0 = _model("stick_slip.phm")
    f, ev, sw = trajectory_pieces(num)
    grid = np.linspace(0.0, 4.0, 81)
    res = event_sensitivities(f, grid, x0, p0, switches=sw)
    t1, t2 = _stick_slip_exact(0.0)[2]
    assert [r.kind for r in res.log] == ["sliding", "left"]
    assert abs(res.log[0].t - t1) < 1e-9 and abs(res.log[1].t - t2) < 1e-8
    exact = np.array([_stick_slip_exact(t)[:2] for t in grid[1:]])
    assert np.max(np.abs(res.X - exact)) < 1e-7


def test_loss_and_grad_through_events_matches_finite_differences():
    num, x0, p0 = _model("bouncing_ball.phm")
    f, ev, _ = trajectory_pieces(num)
    grid = np.linspace(0.0, 2.0, 41)
    target = event_sensitivities(f, grid, x0, p0 * np.array([1.0, 0.9]), events=ev).X.T
    tight = {"rtol": 1e-12, "atol": 1e-14}
    lg = loss_and_grad(f, x0, p0, grid, target, method="cvodes", mode="forward", events=ev, **tight)

    def L(z):
        return np.array(loss_and_grad(f, z[:2], z[2:], grid, target, method="cvodes", mode="forward", events=ev, **tight).loss)

    fd = _fd(L, np.concatenate([x0, p0]), 2)
    assert np.max(np.abs(np.concatenate([lg.grad_x0, lg.grad_p]) - fd)) < 1e-6 * np.max(np.abs(fd))
    with pytest.raises(ValueError, match="CVODES forward"):
        loss_and_grad(f, x0, p0, grid, target, method="rk4", mode="reverse", events=ev)
