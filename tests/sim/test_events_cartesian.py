"""Events on Cartesian bodies (LANGUAGE.md §11): `reinit(b.vx, …)` of a body on a link is an impulse through the
link's velocity constraint, in both formulations (velocities or momenta as states)."""

from __future__ import annotations

import numpy as np
import pytest

from pdsl.pipeline import CompileOptions, compile_model
from pdsl.sim.simulate import simulate

WALL = """model PendulumAtAWall
  space 2
  param m = 1.0, l = 1.0, g = 9.81, e = 1.0
  body b = point(mass = m)
  link ground, b, length = l
  gravity g
  when b.x < -0.3 then reinit(b.vx, -e*b.vx)
end
"""


def _run(formulation, e="1.0"):
    num = compile_model("<wall>", CompileOptions(formulation=formulation), text=WALL.replace("e = 1.0", f"e = {e}")).numeric
    x0 = {"b.x": 0.8, "b.y": -0.6}
    return simulate(num, np.linspace(0, 3, 301), x0=x0, rtol=1e-11, atol=1e-13, event_rows="both")


@pytest.mark.parametrize("e", ["1.0", "0.5"])
def test_a_body_on_a_link_stopped_by_a_wall_in_both_formulations(e):
    runs = {f: _run(f, e) for f in ("hamiltonian", "lagrangian")}
    a, b = runs["hamiltonian"], runs["lagrangian"]
    assert a.info["events"].times and np.allclose(a.info["events"].times, b.info["events"].times, atol=1e-8)
    assert np.max(np.abs(a.shown - b.shown)) < 1e-7  # the same motion, columns b.x, b.y, b.vx, b.vy
    names = list(a.shown_names)
    for r in runs.values():
        vx, vy, x, y = (r.shown[:, names.index(n)] for n in ("b.vx", "b.vy", "b.x", "b.y"))
        # the link holds through the impulse: the velocity stays tangent to the circle, and the length is l
        assert np.max(np.abs(x * vx + y * vy)) < 1e-8 and np.max(np.abs(np.hypot(x, y) - 1.0)) < 1e-8
        t = r.t
        for te, jump in zip(r.info["events"].times, r.info["events"].energy_jumps):
            i = np.flatnonzero(t == te)
            assert len(i) == 2  # rows before and after (event_rows="both")
            before, after = r.shown[i[0]], r.shown[i[1]]
            # the tangential velocity reverses, scaled by e (1 DOF): v⁺ = −e v⁻ in both components
            assert np.allclose(after[[names.index("b.vx"), names.index("b.vy")]],
                               -float(e) * before[[names.index("b.vx"), names.index("b.vy")]], atol=1e-9)
            T_before = 0.5 * (before[names.index("b.vx")] ** 2 + before[names.index("b.vy")] ** 2)
            assert jump == pytest.approx((float(e) ** 2 - 1) * T_before, abs=1e-9)
