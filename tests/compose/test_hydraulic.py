"""std:hydraulic: the bundled two-tank cascade against scipy's solve_ivp of the hand-written ODE, and the parts'
constitutive laws (the regularised orifice, the tank's pressure) and power balances against their closed forms."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import sympy as sp
from scipy.integrate import solve_ivp

from pdsl.lower.structural import power_balance
from pdsl.pipeline import CompileOptions, compile_model
from pdsl.sim.simulate import simulate

REPO = Path(__file__).resolve().parents[2]
STD = REPO / "models" / "std" / "hydraulic.phm"


def _col(r, name):
    if name in r.x_names:
        return r.x[:, list(r.x_names).index(name)]
    return r.y[:, list(r.y_names).index(name)]


def _two_tanks(t, y, A1=0.5, A2=0.8, h1=2.0, h2=0.5, c=2.0e-4, dp_reg=50.0, R=4.0e5, rho=1000.0, g=9.81):
    """dV1/dt = −q, dV2/dt = q − rho g h2/R, q = c dp/(dp² + dp_reg²)^(1/4), dp = rho g (H1 − H2), H_i = h_i + V_i/A_i."""
    V1, V2 = y
    H1, H2 = h1 + V1 / A1, h2 + V2 / A2
    dp = rho * g * (H1 - H2)
    q = c * dp / (dp**2 + dp_reg**2) ** 0.25
    return [-q, q - rho * g * H2 / R]


def test_two_tanks_match_the_hand_written_ode():
    t = np.linspace(0.0, 400.0, 41)
    c = compile_model(REPO / "models/two_tanks.phm")
    r = simulate(c.numeric, t, rtol=1e-11, atol=1e-13)
    ref = solve_ivp(_two_tanks, (0.0, t[-1]), [0.0, 0.0], t_eval=t, rtol=1e-12, atol=1e-14, method="DOP853")
    np.testing.assert_allclose(np.c_[_col(r, "upper.V"), _col(r, "lower.V")], ref.y.T, rtol=0, atol=1e-8)
    np.testing.assert_allclose(_col(r, "level1"), 2.0 + ref.y[0] / 0.5, rtol=0, atol=1e-8)
    # the orifice's flow as the output reads it (valve.a.Q: the flow into the valve at a)
    q = np.array([-_two_tanks(0, y)[0] for y in zip(_col(r, "upper.V"), _col(r, "lower.V"))])
    np.testing.assert_allclose(_col(r, "q"), q, rtol=1e-9, atol=1e-15)  # the expanded output cancels digits


def test_a_reversed_head_flows_back_through_the_orifice():
    """Bidirectional: with the lower tank fuller, the orifice's flow is negative (and the cascade still matches)."""
    t = np.linspace(0.0, 50.0, 11)
    c = compile_model(REPO / "models/two_tanks.phm")
    r = simulate(c.numeric, t, params={"h1": 0.2, "h2": 1.5}, rtol=1e-11, atol=1e-13)
    ref = solve_ivp(lambda s, y: _two_tanks(s, y, h1=0.2, h2=1.5), (0.0, t[-1]), [0.0, 0.0], t_eval=t,
                    rtol=1e-12, atol=1e-14, method="DOP853")
    np.testing.assert_allclose(np.c_[_col(r, "upper.V"), _col(r, "lower.V")], ref.y.T, rtol=0, atol=1e-8)
    assert _col(r, "q")[0] < 0


def test_orifice_law_is_the_regularised_square_root():
    """Q = c dp/(dp² + dp_reg²)^(1/4): odd in dp, linear at 0 (slope c/√dp_reg), c sign(dp)√|dp| far from 0; its
    power balance: the dissipation Q·dp ≥ 0 equals what the two ports supply."""
    system = compile_model(STD, CompileOptions(model="Orifice", numeric=False)).system
    pb = power_balance(system)
    assert pb.holds
    (diss,) = [p for role, name, p in pb.terms if role == "resistive"]
    pa, pb_, c, reg = sp.symbols("a.effort b.effort c dp_reg", real=True)
    dp = sp.Symbol("dp", real=True)
    q = sp.simplify(-diss.subs(pa, pb_ + dp) / dp)  # dissipated = dp·Q
    assert sp.simplify(q - c * dp / (dp**2 + reg**2) ** sp.Rational(1, 4)) == 0
    f = sp.lambdify((dp, c, reg), q)
    for x in (1e6, 2.5e7):
        np.testing.assert_allclose(f(x, 1e-4, 100.0), 1e-4 * np.sqrt(x), rtol=1e-4)
        np.testing.assert_allclose(f(-x, 1e-4, 100.0), -1e-4 * np.sqrt(x), rtol=1e-4)
    np.testing.assert_allclose(f(1e-3, 1e-4, 100.0) / 1e-3, 1e-4 / np.sqrt(100.0), rtol=1e-9)


def test_tank_pressure_and_stored_energy():
    """Tank: p = rho g (h0 + V/A) at its port, and the water column's potential energy rho g A h²/2 is its store."""
    system = compile_model(STD, CompileOptions(model="Tank", numeric=False)).system
    V, A, h0, rho, g = sp.symbols("V A h0 rho g", real=True)
    h = h0 + V / A
    assert sp.simplify(system.energy - rho * g * A * h**2 / 2) == 0
    store = next(p for p in system.ports if p.role == "store")
    assert sp.simplify(store.effort - rho * g * h) == 0
    assert power_balance(system).holds
