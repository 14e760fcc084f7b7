"""State events (``when``, LANGUAGE.md §11) against references written here without pdsl.

The bouncing ball against its exact piecewise solution, the pendulum at a wall against an event-located scipy
``solve_ivp``, the slider-crank end stop (an impulse through a holonomic constraint) against the reduced 1-DOF
equation and the energy identities of an impact; ``terminate``, Zeno, ``max_events`` and ``event_rows``.
benchmarks/events_acceptance.py runs the same studies at more settings (benchmarks/results_events.md).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from scipy.integrate import solve_ivp

from pdsl.diagnostics import PdslError
from pdsl.pipeline import compile_model
from pdsl.sim.simulate import simulate

MODELS = Path(__file__).resolve().parents[2] / "models"
G = 9.81


# ------------------------------------------------------------------------------------- references
def ball_exact(t, h0=1.0, e=0.8, n=60):
    """(h, v, bounce times) of a ball dropped from h0 at rest: free flight between bounces, v⁺ = −e v⁻."""
    u0 = math.sqrt(2 * G * h0)
    times = np.cumsum([u0 / G] + [2 * e**k * u0 / G for k in range(1, n)])
    t = np.asarray(t, dtype=float)
    k = np.searchsorted(times, t, side="right")  # bounces before t
    s = np.where(k == 0, t, t - times[np.maximum(k - 1, 0)])
    w = np.where(k == 0, 0.0, e**k * u0)
    h = np.where(k == 0, h0, 0.0) + w * s - G * s**2 / 2
    return h, w - G * s, times


def events_reference(f, event, reset, y0, t_end, grid, direction):
    """scipy DOP853 (rtol 1e-12) with a terminal event, restarted from ``reset(y)`` after each: (y on grid, times)."""
    event.terminal, event.direction = True, direction
    t, y = 0.0, np.asarray(y0, dtype=float)
    out, times = np.full((len(grid), len(y)), np.nan), []
    while True:
        sol = solve_ivp(f, (t, t_end), y, method="DOP853", rtol=1e-12, atol=1e-14, events=event, dense_output=True)
        mask = (grid >= t) & (grid <= sol.t[-1])
        out[mask] = sol.sol(grid[mask]).T
        if sol.status != 1:
            return out, np.array(times)
        t, y = sol.t_events[0][0], reset(sol.y_events[0][0])
        times.append(t)


@pytest.fixture(scope="module")
def ball():
    return compile_model(MODELS / "bouncing_ball.phm")


# ------------------------------------------------------------------------------------- bouncing ball
@pytest.mark.parametrize("integrator, opts", [
    ("cvodes", {"rtol": 1e-12, "atol": 1e-12}),
    ("cvodes-bdf", {"rtol": 1e-12, "atol": 1e-12}),
    ("idas", {"rtol": 1e-12, "atol": 1e-12}),
    ("rk4", {"substeps": 1}),  # RK4 integrates the parabola exactly: only the location's rounding is left
    ("dop853", {"rtol": 1e-12, "atol": 1e-12}),
])
def test_bouncing_ball_matches_the_exact_solution(ball, integrator, opts):
    grid = np.linspace(0.0, 2.0, 201)
    h, v, times = ball_exact(grid)
    r = simulate(ball.numeric, grid, integrator=integrator, **opts)
    ev = r.info["events"]
    exact = times[times <= 2.0]
    assert len(ev.times) == len(exact) == 3
    assert np.abs(np.array(ev.times) - exact).max() <= 1e-9
    assert np.abs(r.x[:, r.x_names.index("h")] - h).max() <= 1e-8
    assert np.abs(r.x[:, r.x_names.index("v")] - v).max() <= 1e-7
    assert ev.names == ["when h < 0 (line 16)"] * 3 and ev.lines == [16] * 3


def test_bouncing_ball_bounce_times_to_rounding_with_cvodes(ball):
    grid = np.linspace(0.0, 2.0, 201)
    r = simulate(ball.numeric, grid, integrator="cvodes", rtol=1e-12, atol=1e-12)
    h, _, times = ball_exact(grid)
    assert np.abs(np.array(r.info["events"].times) - times[:3]).max() <= 1e-13
    assert np.abs(r.x[:, 0] - h).max() <= 1e-12


def test_bouncing_ball_with_another_restitution(ball):
    grid = np.linspace(0.0, 1.3, 131)  # the bounces accumulate at t₁ (1 + e)/(1 − e) = 1.3546 s
    r = simulate(ball.numeric, grid, params={"e": 0.5}, rtol=1e-12, atol=1e-12)
    h, _, times = ball_exact(grid, e=0.5)
    n = len(r.info["events"].times)
    assert n == int(np.sum(times <= 1.3)) == 5
    np.testing.assert_allclose(r.info["events"].times, times[:n], rtol=0, atol=1e-10)
    assert np.abs(r.x[:, 0] - h).max() <= 1e-9


# ------------------------------------------------------------------------------------- pendulum at a wall
def test_pendulum_at_a_wall_matches_scipy_with_restarts():
    c = compile_model(MODELS / "pendulum_wall.phm")
    alpha, e = 0.3, 0.8
    grid = np.linspace(0.0, 5.0, 501)
    ref, times = events_reference(lambda t, y: [y[1], -G * math.sin(y[0])], lambda t, y: y[0] + alpha,
                                  lambda y: np.array([y[0], -e * y[1]]), [0.8, 0.0], 5.0, grid, direction=-1)
    assert len(times) == 4
    r = simulate(c.numeric, grid, integrator="cvodes", rtol=1e-12, atol=1e-14)
    ev = r.info["events"]
    np.testing.assert_allclose(ev.times, times, rtol=0, atol=1e-8)
    assert np.abs(r.x - ref).max() <= 1e-8
    # each hit takes (1 − e²) of the kinetic energy m l² θ̇⁻²/2 (m = l = 1), the potential is continuous
    rb = simulate(c.numeric, grid, integrator="cvodes", rtol=1e-12, atol=1e-14, event_rows="both")
    pre = rb.x[np.flatnonzero(np.diff(rb.t) == 0)]
    np.testing.assert_allclose(rb.info["events"].energy_jumps, (e**2 - 1) * pre[:, 1] ** 2 / 2, rtol=1e-9)


# ------------------------------------------------------------------------------------- slider-crank end stop
R, L, J, M, K, TH0, XMAX = 0.1, 0.3, 0.01, 0.5, 0.2, 1.5708, 0.38


def crank_x(th):
    """x(θ), x'(θ), x''(θ) of a slider-crank with a massless rod (by hand)."""
    s = np.sqrt(L**2 - R**2 * np.sin(th) ** 2)
    a = R**2 * np.sin(th) * np.cos(th)
    return (R * np.cos(th) + s, -R * np.sin(th) - a / s,
            -R * np.cos(th) - R**2 * np.cos(2 * th) / s - a**2 / s**3)


def crank_reference(grid, e):
    def f(t, y):
        _, x1, x2 = crank_x(y[0])
        return [y[1], -(M * x1 * x2 * y[1] ** 2 + K * (y[0] - TH0)) / (J + M * x1**2)]

    return events_reference(f, lambda t, y: crank_x(y[0])[0] - XMAX, lambda y: np.array([y[0], -e * y[1]]),
                            [3.0, 0.0], grid[-1], grid, direction=1)


@pytest.fixture(scope="module", params=["lagrangian", "hamiltonian"])
def crank(request):
    return compile_model(MODELS / "slider_crank_stop.phm", formulation=request.param)


def test_slider_crank_has_velocity_invariants_for_the_impulse(crank):
    labels = [k.label for k in crank.system.invariants]
    assert labels == ["constraint 1", "constraint 1 (velocity level)"]
    hy = crank.numeric.hybrid
    assert hy.velocity_rows is not None and hy.velocity_labels == ("constraint 1 (velocity level)",)
    assert hy.metric is not None and hy.target_names == ("der(x)",)


@pytest.mark.parametrize("e", [0.8, 1.0])
def test_slider_crank_stop_is_an_impulse_through_the_constraint(crank, e):
    grid = np.linspace(0.0, 5.0, 251)
    r = simulate(crank.numeric, grid, integrator="cvodes", rtol=1e-12, atol=1e-12, params={"e": e},
                 event_rows="both")
    it, ix, iw, iv = (r.x_names.index(n) for n in ("theta", "x", "der(theta)", "der(x)"))
    ev = r.info["events"]
    same = np.flatnonzero(np.diff(r.t) == 0)
    assert len(same) == len(ev.times) >= 3
    for n, i in enumerate(same):
        pre, post = r.x[i], r.x[i + 1]
        # at the stop; positions move only by the projection of the integrator's drift before the impulse
        assert abs(pre[ix] - XMAX) <= 1e-9 and post[ix] == pytest.approx(pre[ix], abs=1e-10)
        assert abs(post[iv] - crank_x(post[it])[1] * post[iw]) <= 1e-12  # the velocity constraint holds after
        assert post[iv] == pytest.approx(-e * pre[iv], rel=1e-12)  # the reset as written
        assert post[iw] == pytest.approx(-e * pre[iw], rel=1e-8)  # ... and the crank turned back with it (1 DOF)
        T0 = J * pre[iw] ** 2 / 2 + M * pre[iv] ** 2 / 2
        T1 = J * post[iw] ** 2 / 2 + M * post[iv] ** 2 / 2
        assert abs(T1 - T0 - (e**2 - 1) * T0) <= 1e-8 * T0
        # the energy change logged for the event: (e² − 1) T⁻; exactly 0 for an elastic stop
        assert abs(ev.energy_jumps[n] - (e**2 - 1) * T0) <= (1e-12 if e == 1 else 1e-8) * T0
    assert np.abs(r.x[:, ix] - crank_x(r.x[:, it])[0]).max() <= 1e-9  # the position constraint's drift
    # against the reduced 1-DOF equation
    ref, times = crank_reference(grid, e)
    np.testing.assert_allclose(ev.times, times, rtol=0, atol=1e-8)
    rows = np.isin(r.t, grid) & np.concatenate([[True], np.diff(r.t) > 0])  # the grid rows
    assert np.abs(r.x[rows][:, [it, iw]] - ref).max() <= 1e-7


# ------------------------------------------------------------------------------------- terminate, Zeno
def test_terminate_ends_with_a_row_at_the_event_time():
    text = (MODELS / "bouncing_ball.phm").read_text().replace("reinit(v, -e*v)", "terminate")
    c = compile_model("terminate.phm", text=text)
    grid = np.linspace(0.0, 2.0, 201)
    r = simulate(c.numeric, grid, rtol=1e-12, atol=1e-12)
    t1 = math.sqrt(2 / G)
    assert r.t[-1] == pytest.approx(t1, abs=1e-13) and len(r.t) == 47
    np.testing.assert_array_equal(r.t[:-1], grid[:46])
    assert abs(r.x[-1, 0]) <= 1e-12 and r.x[-1, 1] == pytest.approx(-G * t1, rel=1e-12)
    term = r.info["events"].terminated
    assert term["line"] == 16 and term["name"] == "when h < 0 (line 16)" and term["t"] == r.t[-1]


def test_terminate_with_a_reset_applies_the_reset_first():
    text = (MODELS / "bouncing_ball.phm").read_text().replace("reinit(v, -e*v)", "reinit(v, -e*v), terminate")
    r = simulate(compile_model("t.phm", text=text).numeric, np.linspace(0.0, 1.0, 11), rtol=1e-12, atol=1e-12)
    assert r.t[-1] == pytest.approx(math.sqrt(2 / G), abs=1e-13)
    assert r.x[-1, 1] == pytest.approx(0.8 * G * math.sqrt(2 / G), rel=1e-12)


def _zeno(c, **kw) -> PdslError:
    with pytest.raises(PdslError) as info:
        simulate(c.numeric, np.linspace(0.0, 5.0, 501), **kw)
    return info.value


def test_zeno_ball_stops_with_a_located_error(ball):
    err = _zeno(ball, integrator="cvodes", rtol=1e-10, atol=1e-12)
    d = err.diagnostics[0]
    assert err.codes == ["ZenoEvents"] and d.span.line == 16
    assert "when h < 0 (line 16)" in d.message and "t = 4.0637127" in d.message
    assert "Zeno" in d.message and d.hint
    T, X, Z, log = err.partial_rows
    t_inf = math.sqrt(2 / G) * 9  # t₁ (1 + e)/(1 − e)
    assert 80 <= len(log.times) <= 10_000 and f"{len(log.times):,} events" in d.message
    assert abs(log.times[-1] - t_inf) <= 1e-8
    assert T[-1] <= t_inf and len(T) == len(X) and np.all(np.diff(log.times) > 0)


@pytest.mark.slow
@pytest.mark.parametrize("integrator", ["dop853", "rk4", "idas", "cvodes-bdf"])
def test_zeno_ball_stops_with_every_integrator(ball, integrator):
    err = _zeno(ball, integrator=integrator, rtol=1e-10, atol=1e-12)
    assert err.codes == ["ZenoEvents"]
    log = err.partial_rows[3]
    assert len(log.times) < 1000 and abs(log.times[-1] - math.sqrt(2 / G) * 9) <= 1e-5


def test_max_events_stops_after_that_many(ball):
    err = _zeno(ball, integrator="cvodes", rtol=1e-10, atol=1e-12, max_events=5)
    assert err.codes == ["ZenoEvents"] and "--max-events 5" in err.diagnostics[0].message
    log = err.partial_rows[3]
    _, _, times = ball_exact([0.0])
    assert len(log.times) == 5
    np.testing.assert_allclose(log.times, times[:5], atol=1e-8)


def test_bad_event_options(ball):
    grid = np.linspace(0.0, 1.0, 11)
    for kw in ({"event_rows": "before"}, {"max_events": -1}, {"max_events": 2.5}):
        with pytest.raises(PdslError) as info:
            simulate(ball.numeric, grid, **kw)
        assert info.value.codes == ["BadOption"]


# ------------------------------------------------------------------------------------- event rows
def test_event_rows_after_and_both(ball):
    grid = np.linspace(0.0, 2.0, 201)
    runs = {mode: simulate(ball.numeric, grid, rtol=1e-12, atol=1e-12, event_rows=mode)
            for mode in ("none", "after", "both")}
    _, _, times = ball_exact(grid)
    times = times[:3]
    none, after, both = runs["none"], runs["after"], runs["both"]
    np.testing.assert_array_equal(none.t, grid)
    assert len(after.t) == 204 and len(both.t) == 207
    assert np.all(np.diff(after.t) > 0) and np.all(np.diff(both.t) >= 0)
    rep = np.flatnonzero(np.diff(both.t) == 0)
    np.testing.assert_allclose(both.t[rep], times, atol=1e-13)
    iv = both.x_names.index("v")
    assert np.all(both.x[rep, iv] < 0) and np.all(both.x[rep + 1, iv] > 0)  # before: falling, after: rising
    np.testing.assert_allclose(both.x[rep + 1, iv], -0.8 * both.x[rep, iv], rtol=1e-14)
    extra = ~np.isin(after.t, grid)
    np.testing.assert_allclose(after.t[extra], times, atol=1e-13)
    assert np.all(after.x[extra, iv] > 0)  # the value after the bounce
    # the grid rows are the same in all three
    np.testing.assert_array_equal(after.x[~extra], none.x)
