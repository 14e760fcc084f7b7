"""Switching surfaces located (LANGUAGE.md §11, "Discontinuous right-hand sides"): modes, Filippov sliding, against
references written without pdsl (a closed form; an event-driven scipy solution)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from scipy.integrate import solve_ivp
from scipy.optimize import brentq

from pdsl.diagnostics import PdslError
from pdsl.pipeline import compile_model
from pdsl.sim.simulate import simulate

MODELS = Path(__file__).resolve().parents[2] / "models"


def _stick_slip_exact(t, m=1.0, k=10.0, mu=0.5, g=9.81, vb=0.2):
    """The closed form of models/stick_slip.phm: slip from rest, stick at v = vb, then oscillate about μmg/k."""
    w, F = math.sqrt(k / m), mu * m * g
    t1 = math.asin(vb * w * m / F) / w
    x1 = F / k * (1 - math.cos(w * t1))
    t2 = t1 + (F / k - x1) / vb
    if t <= t1:
        return F / k * (1 - math.cos(w * t)), F / (m * w) * math.sin(w * t), (t1, t2)
    if t <= t2:
        return x1 + vb * (t - t1), vb, (t1, t2)
    tau = t - t2
    return F / k + vb / w * math.sin(w * tau), vb * math.cos(w * tau), (t1, t2)


@pytest.mark.parametrize("integrator,opts,tol", [("cvodes", {"rtol": 1e-12, "atol": 1e-14}, 1e-9),
                                                 ("dop853", {"rtol": 1e-12, "atol": 1e-14}, 1e-11),
                                                 ("rk4", {"substeps": 10}, 1e-10)])
def test_stick_slip_against_the_exact_piecewise_solution(integrator, opts, tol):
    num = compile_model(str(MODELS / "stick_slip.phm")).numeric
    grid = np.linspace(0, 10, 1001)
    r = simulate(num, grid, integrator=integrator, **opts)
    exact = np.array([_stick_slip_exact(t)[:2] for t in grid])
    assert np.max(np.abs(r.x - exact)) < tol
    t1, t2 = _stick_slip_exact(0.0)[2]
    log = r.info["switches"]
    # one sliding phase (stick) and its end; the later tangential touches of v = vb (grazing) change nothing
    assert [what for _, _, what in log] == ["sliding", "left the surface to s > 0"]
    assert abs(log[0][0] - t1) < 1e-9 and abs(log[1][0] - t2) < 1e-9


def _friction_reference(grid, T=20.0, m=1.0, k=1.0, mu=0.05, g=10.0, vb=0.1, F0=1.0, w=1.5):
    """models/friction_oscillator.phm by an event-driven scipy solution: slip modes (friction ±μmg) integrated by
    DOP853 to v = vb; there, stick if the friction needed, k x − F0 sin(w t), is within ±μmg, else reverse; the stick
    phase is x = xs + vb (t − ts) until the friction needed leaves the cone."""
    F = mu * m * g
    t, y, mode = 0.0, np.array([0.0, 0.0]), +1
    out, changes = {0.0: (0.0, 0.0)}, []
    while t < T:
        if mode == 0:
            xs, ts = y[0], t
            need = lambda s: k * (xs + vb * (s - ts)) - F0 * math.sin(w * s)  # noqa: E731
            ss = np.linspace(ts, T, int((T - ts) / 1e-3) + 2)
            over = np.abs([need(s) for s in ss]) - F > 0
            te = T if not over.any() else brentq(lambda s: abs(need(s)) - F, ss[np.argmax(over) - 1],
                                                 ss[np.argmax(over)], xtol=1e-15)
            for gt in grid[(grid > ts) & (grid <= te)]:
                out[gt] = (xs + vb * (gt - ts), vb)
            if not over.any():
                break
            t, y = te, np.array([xs + vb * (te - ts), vb])
            mode = +1 if need(te) > 0 else -1
            changes.append((t, "left"))
            continue
        sig = mode

        def hit(s, yy):
            return yy[1] - vb

        hit.terminal, hit.direction = True, (1 if mode == +1 else -1)
        sol = solve_ivp(lambda s, yy: [yy[1], (-k * yy[0] + F0 * math.sin(w * s) + sig * F) / m], (t, T), y,
                        method="DOP853", rtol=1e-12, atol=1e-14, events=hit, dense_output=True)
        for gt in grid[(grid > t) & (grid <= sol.t[-1])]:
            out[gt] = tuple(sol.sol(gt))
        if sol.status != 1:
            break
        t, y = float(sol.t_events[0][0]), np.array([sol.y_events[0][0][0], vb])
        if abs(k * y[0] - F0 * math.sin(w * t)) <= F:
            mode = 0
            changes.append((t, "stick"))
        else:
            mode = -mode
            changes.append((t, "reverse"))
    return np.array([out[gt] for gt in grid]), changes


def test_friction_oscillator_with_several_stick_phases_against_an_event_driven_reference():
    num = compile_model(str(MODELS / "friction_oscillator.phm")).numeric
    grid = np.linspace(0, 20, 2001)
    ref, changes = _friction_reference(grid)
    r = simulate(num, grid, rtol=1e-12, atol=1e-14)
    assert np.max(np.abs(r.x - ref)) < 1e-9
    log = r.info["switches"]
    assert [w for _, _, w in log].count("sliding") == 2 == [c for _, c in changes].count("stick")
    assert len(log) == len(changes)
    assert max(abs(a[0] - b[0]) for a, b in zip(log, changes)) < 1e-9


def _model(text: str) -> str:
    return "model M\n" + text + "\nend\n"


def test_a_start_on_an_attractive_surface_slides_and_on_a_repulsive_one_is_an_error():
    # v0 = vb on the belt, spring force below the friction limit: it sticks from the start
    num = compile_model("<t>", text=_model("""
  param k = 1.0, F = 4.0, vb = 0.5
  var x = 0.0, v = 0.5
  der(x) = v
  der(v) = -k*x + F*sign(vb - v)""")).numeric
    r = simulate(num, np.linspace(0, 2, 21))
    assert r.info["switches"][0][2] == "sliding" and np.allclose(r.x[:, 1], 0.5, atol=1e-9)
    # the field points away from v = 0 on both sides: the solution is not unique
    num = compile_model("<t>", text=_model("""
  var v = 0.0
  der(v) = sign(v)""")).numeric
    with pytest.raises(PdslError) as exc:
        simulate(num, np.linspace(0, 1, 11))
    assert exc.value.codes == ["RepulsiveSurface"]


def test_two_surfaces_sliding_at_once_is_not_yet_supported():
    num = compile_model("<t>", text=_model("""
  var x = 0.0, y = 0.0
  der(x) = -sign(x)
  der(y) = -sign(y)""")).numeric
    with pytest.raises(PdslError) as exc:
        simulate(num, np.linspace(0, 1, 11))
    assert exc.value.codes == ["NotYetSupported"] and "sign(x)" in str(exc.value) and "sign(y)" in str(exc.value)


def test_step_through_keeps_the_old_behaviour_and_models_without_switches_are_unchanged():
    num = compile_model(str(MODELS / "stick_slip.phm")).numeric
    with pytest.raises(PdslError) as exc:  # CVODES chatters on the surface, and the error names it
        simulate(num, np.linspace(0, 1, 11), switches="step-through")
    assert exc.value.codes == ["IntegratorFailure"] and "sign(" in str(exc.value)
    assert compile_model(str(MODELS / "double_pendulum.phm")).numeric.hybrid is None
