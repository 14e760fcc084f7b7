"""``SymbolicSystem.conservative`` (pdsl.lower.generalized.conserves_energy, issue 36.2): an autonomous Lagrangian or
Hamiltonian with nothing else acting conserves E exactly (Noether), so ``power`` is the constant 0 and simulate
reports ∫ power dt = 0 without integrating it.

Checked against the independent route, the numeric dE/dt = ∇E·ẋ (CasADi ``jtimes`` of the energy along the
right-hand side) at seeded random states: roundoff for every flagged model; and the flag is refused for each way
energy can flow (a force, t in L or H, an input, a switch, a constraint), where ∇E·ẋ is not zero."""

from __future__ import annotations

from pathlib import Path

import casadi as ca
import numpy as np
import pytest

from pdsl.pipeline import compile_model
from pdsl.sim.simulate import simulate, time_grid

MODELS = Path(__file__).resolve().parents[2] / "models"
FLAGGED = ["double_pendulum", "double_well", "henon_heiles", "coupled_oscillator"]


def _numeric_power(num):
    """dE/dt = ∇E·ẋ + ∂E/∂t, built here from the energy and rhs functions (not from ``num.power``)."""
    t, x, p = ca.SX.sym("t"), ca.SX.sym("x", num.nx), ca.SX.sym("p", len(num.p_default))
    u = ca.SX(0, 1)
    E = num.energy(t, x, p, u)
    xdot = num.rhs(t, x, p, u)
    dE = ca.jtimes(E, x, xdot) + ca.jacobian(E, t)
    scale = ca.norm_2(ca.jacobian(E, x).T) * ca.norm_2(xdot)
    return ca.Function("dE", [t, x, p], [dE, scale])


@pytest.mark.parametrize("name", FLAGGED)
def test_flagged_models_have_zero_numeric_power(name):
    num = compile_model(MODELS / f"{name}.phm", cache=False).numeric
    assert num.system.conservative and num.conservative
    dE = _numeric_power(num)
    rng = np.random.default_rng(36)
    x0 = np.asarray(num.x_start, dtype=float)
    for _ in range(20):
        x = x0 + rng.normal(scale=1.0, size=x0.shape)
        t = float(rng.uniform(0, 10))
        value, scale = (float(v) for v in dE(t, x, num.p_default))
        assert abs(value) <= 1e-12 * max(scale, 1.0), (name, x, value, scale)
        assert float(num.power(t, x, np.zeros(0), num.p_default, np.zeros(0))) == 0.0


def test_simulate_reports_the_exact_zero_integral():
    num = compile_model(MODELS / "double_pendulum.phm", cache=False).numeric
    res = simulate(num, time_grid(1.0, 0.01), rtol=1e-9, power_integral=True)
    assert np.array_equal(res.power_integral, np.zeros(len(res.t))) and res.info["power_integral"].startswith("0:")
    assert np.array_equal(res.power, np.zeros(len(res.t)))
    assert np.max(np.abs(res.energy - res.energy[0])) < 1e-6 * np.max(np.abs(res.energy))  # the drift, at the tolerance


BASE = "  param m = 1.0, k = 2.0, c = 0.3\n  coord q = 0.5\n"
NOT_CONSERVATIVE = {
    "force": BASE + "  lagrangian m/2*der(q)^2 - k/2*q^2\n  force -c*der(q) on q\n",
    "time": BASE + "  lagrangian m/2*der(q)^2 - k/2*q^2*(1 + 0.1*sin(t))\n",
    "input": BASE + "  input F\n  lagrangian m/2*der(q)^2 - k/2*q^2 + F*q\n",
    "switch": BASE + "  lagrangian m/2*der(q)^2 - (if q > 0 then k else 2*k)/2*q^2\n",
    "hamiltonian in t": "  param k = 2.0\n  coord q = 0.5\n  momentum p = 0.0\n  hamiltonian p^2/2 + k*(1 + 0.1*t)*q^2/2\n",
}


@pytest.mark.parametrize("case", sorted(NOT_CONSERVATIVE))
def test_energy_flows_are_not_flagged(case):
    text = f'model M "{case}"\n{NOT_CONSERVATIVE[case]}end\n'
    compiled = compile_model("m.phm", text=text, cache=False)
    assert not compiled.system.conservative and not compiled.numeric.conservative


def test_a_conservative_model_with_a_constraint_is_left_to_the_numeric_power():
    text = ('model M "a constrained pair"\n  param m = 1.0, l = 1.0, g = 9.81\n  coord x = 0.6, y = -0.8\n'
            '  lagrangian m/2*(der(x)^2 + der(y)^2) - m*g*y\n  constraint x^2 + y^2 = l^2\nend\n')
    system = compile_model("m.phm", text=text, cache=False).system
    assert system.formalism == "lagrangian" and system.constraints and not system.conservative
