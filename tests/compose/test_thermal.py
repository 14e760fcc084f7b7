"""The thermal domain (LANGUAGE.md §9, "Port domains") and std:thermal: temperature and heat flow are not a power pair.

Each check has an independent route: closed-form exponentials of lumped thermal RC circuits, the first law along a
simulated trajectory (electrical energy in = heat stored + heat lost, integrated from the CSV columns), and the
symbolic balances that `show --power` prints.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import sympy as sp

from pdsl.cli.main import main
from pdsl.diagnostics import PdslError
from pdsl.lower.structural import power_balance
from pdsl.pipeline import CompileOptions, compile_model
from pdsl.sim.simulate import input_from_expression, simulate

REPO = Path(__file__).resolve().parents[2]
MODELS = REPO / "models"
MECH = MODELS / "composition" / "std_mechanisms.phm"


def _run(path, t, model=None, init=None, inputs=None):
    c = compile_model(path, CompileOptions(model=model))
    ins = {k: input_from_expression(c.numeric, k, v) for k, v in (inputs or {}).items()}
    r = simulate(c.numeric, np.asarray(t, dtype=float), x0=init or {}, inputs=ins, rtol=1e-11, atol=1e-12)
    return c, r


def _col(r, name):
    if name in r.x_names:
        return r.x[:, list(r.x_names).index(name)]
    return r.y[:, list(r.y_names).index(name)]


def _write(tmp_path, text, name="m.phm"):
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p


# ------------------------------------------------------------------- closed forms
def test_thermal_rc_follows_its_closed_form_exponential():
    """models/thermal_rc.phm: C dT/dt = G (T_amb − T), T(t) = T_amb + (T0 − T_amb) exp(−G t/C)."""
    t = np.linspace(0.0, 900.0, 31)
    _, r = _run(MODELS / "thermal_rc.phm", t)
    C, G, T0, Ta = 450.0, 2.5, 360.0, 293.15
    exact = Ta + (T0 - Ta) * np.exp(-G * t / C)
    np.testing.assert_allclose(_col(r, "T"), exact, rtol=0, atol=1e-7)
    np.testing.assert_allclose(_col(r, "Q_loss"), G * (exact - Ta), rtol=0, atol=1e-8)
    # the state is the heat taken in since the start: U = C (T − T0)
    np.testing.assert_allclose(_col(r, "body.U"), C * (exact - T0), rtol=0, atol=1e-5)


TWO_BODIES = """import "std:thermal" as th
model TwoBodies "two heat capacities in a chain to a heat bath, one of them heated"
  param C1 = 300.0, C2 = 120.0, G1 = 4.0, G2 = 1.5, Ta = 280.0, T1 = 350.0, T2 = 300.0
  input P
  use b1 = th.HeatCapacitor(C = C1, T0 = T1)
  use b2 = th.HeatCapacitor(C = C2, T0 = T2)
  use k12 = th.ThermalConductor(G = G1)
  use k2a = th.Convection(h = G2, A = 1.0)
  use air = th.FixedTemperature(T = Ta)
  use heat = th.PrescribedHeatFlow(Q_flow = P)
  connect b1.port, k12.a, heat.port
  connect k12.b, b2.port, k2a.a
  connect k2a.b, air.port
  output temp1 = b1.port.T
  output temp2 = b2.port.T
end
"""


def test_two_body_chain_follows_the_matrix_exponential(tmp_path):
    """C dT/dt = −K (T − T_ss) for the chain b1 –G1– b2 –G2– air, with a constant heat input P at b1: the closed
    form T(t) = T_ss + V exp(Λ t) V⁻¹ (T(0) − T_ss) from the eigen-decomposition of C⁻¹K."""
    P = 60.0
    t = np.linspace(0.0, 600.0, 25)
    _, r = _run(_write(tmp_path, TWO_BODIES), t, inputs={"P": str(P)})
    C = np.diag([300.0, 120.0])
    K = np.array([[4.0, -4.0], [-4.0, 5.5]])
    f = np.array([P, 1.5 * 280.0])
    Tss = np.linalg.solve(K, f)
    lam, V = np.linalg.eig(-np.linalg.solve(C, K))
    d0 = np.linalg.solve(V, np.array([350.0, 300.0]) - Tss)
    exact = Tss + (V @ (np.exp(np.outer(lam, t)) * d0[:, None])).T
    np.testing.assert_allclose(np.c_[_col(r, "temp1"), _col(r, "temp2")], exact, rtol=0, atol=1e-7)


# ------------------------------------------------------------------- heat balance, not power
def test_thermal_parts_are_a_heat_balance_not_a_power(capsys, monkeypatch):
    """The energy of a thermal network is the heat U the capacitors took in (U = C (T − T0)), never their p-H
    energy; `show --power` prints dU/dt = Σ Q̇ in and no power balance of T·Q̇."""
    c = compile_model(MODELS / "thermal_rc.phm", CompileOptions(numeric=False))
    s = c.system
    U = sp.Symbol("body.U", real=True)
    assert s.energy == U and s.heat_energy == U
    pb = power_balance(s)
    assert pb.holds and pb.terms == () and pb.heat is not None
    C, G, T0, Ta = sp.symbols("C G T0 T_amb", real=True)
    T = T0 + U / C
    (role, name, q), = pb.heat.terms
    assert (role, name) == ("source", "air.src")
    assert sp.simplify(q - G * (Ta - T)) == 0  # the bath supplies G (T_amb − T)
    assert sp.simplify(pb.heat.dUdt - G * (Ta - T)) == 0
    monkeypatch.chdir(REPO)
    assert main(["show", "models/thermal_rc.phm", "--power"]) == 0
    out = capsys.readouterr().out
    assert "Heat balance" in out and "balance: holds identically" in out
    assert "Power balance" not in out and "dissipated in wall.cond" not in out  # a conductor loses no heat


def test_heating_resistor_first_law_symbolically():
    """HeatingResistor: v·i = Q̇ — the component's first law Σ P_in = Σ Q̇_out + dE/dt holds identically, on its
    own (open ports) and inside a circuit, whatever R(T)."""
    alone = compile_model(REPO / "models/std/thermal.phm", CompileOptions(model="HeatingResistor", numeric=False)).system
    for system in (alone, compile_model(MECH, CompileOptions(model="HeatedBody", numeric=False)).system):
        pb = power_balance(system)
        assert pb.holds
        (comp,) = pb.components
        assert comp.residual == 0 and comp.dEdt == 0
        assert sp.simplify(comp.power_in - comp.heat_out) == 0 and comp.power_in != 0
    # in the circuit the power in is V²/R(T) at R(T) = R (1 + alpha (T − T_ref))
    comp = power_balance(compile_model(MECH, CompileOptions(model="HeatedBody", numeric=False)).system).components[0]
    V, R, a, Tr, T0, C, U = sp.symbols("V R heater.alpha heater.T_ref T0 C body.U", real=True)
    assert sp.simplify(comp.power_in - V**2 / (R * (1 + a * (T0 + U / C - Tr)))) == 0


def test_heating_resistor_first_law_along_a_trajectory():
    """HeatedBody: C dT/dt = V²/R − G (T − T_amb), so T(t) = T_amb + V²/(R G) (1 − exp(−G t/C)) from T_amb; and the
    first law along the run: ∫ v i dt = U(t) + ∫ Q_loss dt (trapezoidal sums of the simulated columns)."""
    t = np.linspace(0.0, 400.0, 8001)
    _, r = _run(MECH, t, model="HeatedBody", inputs={"V": "12"})
    V, R, C, G, Ta = 12.0, 10.0, 200.0, 0.8, 293.15
    np.testing.assert_allclose(_col(r, "T"), Ta + V**2 / (R * G) * (1 - np.exp(-G * t / C)), rtol=0, atol=1e-7)
    P, Q, loss = _col(r, "P_el"), _col(r, "Q_heat"), _col(r, "Q_loss")
    np.testing.assert_allclose(P, V**2 / R, rtol=1e-12)
    np.testing.assert_allclose(Q, P, rtol=1e-12)  # v·i = Q̇ at every sample
    dt = np.diff(t)
    e_in = np.concatenate([[0.0], np.cumsum(0.5 * (P[1:] + P[:-1]) * dt)])
    lost = np.concatenate([[0.0], np.cumsum(0.5 * (loss[1:] + loss[:-1]) * dt)])
    U = _col(r, "body.U")
    assert np.max(np.abs(e_in - U - lost)) < 1e-6 * e_in[-1]


# ------------------------------------------------------------------- port values in expressions
PLAIN_RESISTOR = """import "std:electrical" as el
model PlainResistor "Ohm's law written with port values"
  param R = 1.0
  port p: electrical, n: electrical
  p.i + n.i = 0
  p.across - n.across = R*p.through
end
model RC "a voltage source charging a capacitor through a resistor written in equations"
  param R = 2.0, C = 0.5
  input V
  use src = el.VoltageSource(v = V)
  use res = PlainResistor(R = R)
  use cap = el.Capacitor(C = C)
  use gnd = el.Ground()
  connect src.p, res.p
  connect res.n, cap.p
  connect cap.n, src.n, gnd.p
  output i = res.p.i
  output v_cap = cap.p.v - cap.n.v
end
"""


def test_port_values_follow_the_through_into_the_model_convention(tmp_path):
    """`p.i`, `p.through` are the current into the component at p, `p.v`, `p.across` its potential, both for a part
    written in equations and for a std part listed in junctions: dq/dt = (V − q/C)/R, i = dq/dt, v_cap = q/C."""
    c = compile_model(_write(tmp_path, PLAIN_RESISTOR), CompileOptions(model="RC", numeric=False))
    s = c.system
    q, V, R, C = sp.symbols("cap.q V R C", real=True)
    (eq,) = s.differential
    assert sp.simplify(eq.rhs - (V - q / C) / R) == 0
    outs = {o.name: o.expr for o in s.outputs}
    assert sp.simplify(outs["i"] - (V - q / C) / R) == 0
    assert sp.simplify(outs["v_cap"] - q / C) == 0
    pb = power_balance(s)
    assert pb.holds  # the resistor written in equations takes in the power it dissipates: R i²
    (term,) = [t for t in pb.terms if t[0] == "terminal" and t[1] == "res.p.terminal"]


def test_thermal_port_unit_is_kelvin(tmp_path):
    ok = """model P
  param C = 2.0
  port q: thermal {unit = "K"}
  flow_store s(U) energy U^2/(2*C)
  junction common_effort(s, -q)
end
"""
    compile_model(_write(tmp_path, ok), CompileOptions(numeric=False))
    with pytest.raises(PdslError) as err:
        compile_model(_write(tmp_path, ok.replace('"K"', '"V"'), "bad.phm"), CompileOptions(numeric=False))
    assert err.value.codes == ["UnitMismatch"]


@pytest.mark.parametrize("text, code, line", [
    # a thermal port has T, Q_flow, across, through — not the electrical names
    ("model M\n  param G = 1.0\n  port a: thermal, b: thermal\n  a.Q_flow + b.Q_flow = 0\n"
     "  a.Q = G*(a.T - b.T)\nend\n", "UnknownName", 5),
    # the analogy does not apply to thermal ports
    ("model M\n  analogy heat = flow\n  port a: thermal\n  a.Q_flow = 0\nend\n", "BadOption", 2),
    # heat is stored by integrating the heat flow, never the temperature
    ("model M\n  port a: thermal\n  effort_store s(x) energy x^2/2\n  junction common_effort(s, -a)\nend\n",
     "BadElement", 3),
    # a thermal port bonded to an electrical one in one junction
    ("model M\n  port a: thermal, p: electrical\n  resistive r: e = f\n  junction common_flow(-a, r, p)\nend\n",
     "DomainMismatch", 4),
    # a transformer with a thermal side
    ("model M\n  port a: thermal, p: electrical\n  transformer tr(x, y): e_x = 2*e_y\n"
     "  junction common_effort(-a, tr.x)\n  junction common_effort(-tr.y, p)\nend\n", "DomainMismatch", 3),
    # a power port that no junction lists and no equation reads
    ("model M\n  port a: thermal, b: thermal\n  b.Q_flow = 0\nend\n", "BadPort", 2),
])
def test_thermal_errors_are_located(tmp_path, capsys, text, code, line):
    path = _write(tmp_path, text)
    assert main(["check", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"error[{code}]" in err, err
    assert f"m.phm:{line}:" in err, err


def test_thermal_is_a_known_domain_and_connects_only_to_thermal(tmp_path, capsys):
    text = """import "std:thermal" as th
import "std:electrical" as el
model M
  use c = th.HeatCapacitor()
  use r = el.Resistor()
  connect c.port, r.p
end
"""
    assert main(["check", str(_write(tmp_path, text))]) == 2
    err = capsys.readouterr().err
    assert "error[DomainMismatch]" in err and "UnknownDomain" not in err and "m.phm:6:" in err


THERMOSTAT = """import "std:thermal" as th
model Thermostat "a heater switched off above T_set: the temperature slides on T_set (LANGUAGE.md §11)"
  param P = 100.0, T_set = 330.0, T_stop = 400.0
  input Q = if body.port.T > T_set then 0 else P
  use body = th.HeatCapacitor(C = 10.0, T0 = 300.0)
  use heat = th.PrescribedHeatFlow(Q_flow = Q)
  use wall = th.ThermalConductor(G = 0.5)
  use air = th.FixedTemperature(T = 300.0)
  connect body.port, heat.port, wall.a
  connect wall.b, air.port
  output T = body.port.T
  when body.port.T > T_stop then terminate
end
"""


def test_feedback_laws_and_events_read_port_values(tmp_path):
    """A feedback law and a `when` condition on a port's temperature: the heater warms the body as
    T = 300 + (P/G)(1 − exp(−G t/C)) until T_set, where the switch slides (T stays at T_set); with T_stop below
    T_set the run ends where T = T_stop instead."""
    path = _write(tmp_path, THERMOSTAT)
    t = np.linspace(0.0, 10.0, 41)
    _, r = _run(path, t)
    free = 300.0 + 200.0 * (1 - np.exp(-0.05 * t))
    np.testing.assert_allclose(_col(r, "T"), np.minimum(free, 330.0), rtol=0, atol=1e-6)
    c = compile_model(path)
    r = simulate(c.numeric, t, params={"T_stop": 320.0}, rtol=1e-11, atol=1e-12)
    np.testing.assert_allclose(r.t[-1], -np.log(0.9) / 0.05, rtol=1e-8)  # terminated where T = 320
    np.testing.assert_allclose(_col(r, "T")[-1], 320.0, rtol=1e-9)


MIXED = """model Mixed "a p-H resistor and inductor whose loss is written as the heat flow at a thermal port"
  param R = 2.0, L = 0.1
  port p: electrical, n: electrical, heat: thermal
  resistive r: e = R*f
  effort_store ind(phi) energy phi^2/(2*L)
  junction common_flow(-p, r, ind, n)
  heat.Q_flow = -R*p.i^2
end
"""


def test_first_law_of_a_mixed_component_counts_its_stored_energy_and_can_fail(tmp_path, capsys):
    """Σ P_in = Σ Q̇_out + dE/dt with an inductor inside: holds when the heat flow is the resistor's loss R i², and
    the check names the residual R i² when the part forgets to give its loss off as heat."""
    ok = _write(tmp_path, MIXED)
    (comp,) = power_balance(compile_model(ok, CompileOptions(numeric=False)).system).components
    phi, L = sp.symbols("phi L", real=True)
    assert comp.residual == 0 and sp.simplify(comp.dEdt) != 0
    bad = _write(tmp_path, MIXED.replace("heat.Q_flow = -R*p.i^2", "heat.Q_flow = 0"), "bad.phm")
    pb = power_balance(compile_model(bad, CompileOptions(numeric=False)).system)
    assert not pb.holds
    R = sp.Symbol("R", real=True)
    assert sp.simplify(pb.components[0].residual - R * phi**2 / L**2) == 0
    assert main(["show", str(bad), "--power"]) == 0
    assert "first law: FAILS: P_in − Q̇_out − dE/dt = R*phi**2/L**2" in capsys.readouterr().out
