"""std:rotational's Gearbox, GearLoss and Clutch: power balances shown symbolically and checked, trajectories against
closed forms (models/composition/std_mechanisms.phm)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import sympy as sp

from pdsl.cli.main import main
from pdsl.lower.structural import power_balance
from pdsl.pipeline import CompileOptions, compile_model
from pdsl.sim.simulate import input_from_expression, simulate

REPO = Path(__file__).resolve().parents[2]
ROT = REPO / "models" / "std" / "rotational.phm"
MECH = REPO / "models" / "composition" / "std_mechanisms.phm"


def _run(model, t, init=None, inputs=None):
    c = compile_model(MECH, CompileOptions(model=model))
    ins = {k: input_from_expression(c.numeric, k, v) for k, v in (inputs or {}).items()}
    return c, simulate(c.numeric, np.asarray(t, dtype=float), x0=init or {}, inputs=ins, rtol=1e-11, atol=1e-13)


def _col(r, name):
    if name in r.x_names:
        return r.x[:, list(r.x_names).index(name)]
    return r.y[:, list(r.y_names).index(name)]


def _part(name):
    return compile_model(ROT, CompileOptions(model=name, numeric=False)).system


def _terms(pb):
    return {name: p for _, name, p in pb.terms}


# ------------------------------------------------------------------- Gearbox
def test_gearbox_conserves_power():
    """Alone (its flanges open): the power in at a equals the power out at b, identically; w_a = ratio w_b and
    tau_b = −ratio tau_a read off its ports."""
    s = _part("Gearbox")
    pb = power_balance(s)
    assert pb.holds and pb.dHdt == 0
    terms = _terms(pb)
    assert set(terms) == {"a", "b"} and sp.expand(terms["a"] + terms["b"]) == 0 and terms["a"] != 0
    ports = {p.name: p for p in s.ports}
    ratio = sp.Symbol("ratio", real=True)
    assert sp.simplify(ports["a"].flow - ratio * ports["b"].flow) == 0  # ω_a = ratio ω_b
    assert sp.simplify(ports["b"].effort - ratio * ports["a"].effort) == 0  # |τ_b| = ratio |τ_a|


def test_gear_train_follows_the_reflected_inertia():
    """A torque on J1 through the gear into J2: dw1/dt = tau/(J1 + J2/ratio²), w2 = w1/ratio; the torques at the
    flanges: tau_a = J2 tau/(J1 ratio² + J2) into the gear, tau_b = −ratio tau_a."""
    t = np.linspace(0.0, 2.0, 11)
    tau, J1, J2, ratio = 0.3, 0.02, 0.5, 4.0
    c, r = _run("GearTrain", t, inputs={"tau": str(tau)})
    w1 = tau * t / (J1 + J2 / ratio**2)
    np.testing.assert_allclose(_col(r, "w1"), w1, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(_col(r, "w2"), w1 / ratio, rtol=1e-10, atol=1e-12)
    ta = J2 * tau / (J1 * ratio**2 + J2)
    np.testing.assert_allclose(_col(r, "tau_a"), ta, rtol=1e-12)
    np.testing.assert_allclose(_col(r, "tau_b"), -ratio * ta, rtol=1e-12)
    pb = power_balance(c.system)
    assert pb.holds and pb.modulo  # on the constraint w1 = ratio w2 that the gear ties the inertias by


# ------------------------------------------------------------------- GearLoss
def test_gear_loss_is_passive_in_both_directions_of_power_flow():
    """GearLoss alone: the loss is tau_a w (1 − eta^sign(tau_a w)): (1 − eta)·P_a ≥ 0 when a drives (P_a > 0), and
    (1 − eta)·|P_b| ≥ 0 when b drives, P_b = −P_a/eta being what b puts in; the balance holds identically."""
    pb = power_balance(_part("GearLoss"))
    assert pb.holds
    terms = _terms(pb)
    loss = -terms["loss"]  # dissipated (a term is − dissipated)
    ta, w, eta = sp.symbols("a.effort b.flow efficiency", real=True)
    f = sp.lambdify((ta, w, eta), loss)
    fa = sp.lambdify((ta, w, eta), terms["a"])
    fb = sp.lambdify((ta, w, eta), terms["b"])
    rng = np.random.default_rng(31)
    for _ in range(200):
        x, v, e = rng.normal(), rng.normal(), rng.uniform(0.05, 1.0)
        Pa, Pb = fa(x, v, e), fb(x, v, e)  # the powers the flanges put in
        assert f(x, v, e) >= 0
        if Pa > 0:  # a drives: b receives eta of it
            np.testing.assert_allclose([f(x, v, e), -Pb], [(1 - e) * Pa, e * Pa], rtol=1e-12)
        else:  # b drives: a receives eta of what b puts in
            np.testing.assert_allclose([f(x, v, e), -Pa], [(1 - e) * Pb, e * Pb], rtol=1e-12)


def test_lossy_drive_brakes_then_drives_through_the_switch():
    """A torque tau < 0 against an inertia spinning at w0 > 0: the load drives the gear back (b → a), so
    J dw/dt = tau/eta until w = 0 at t* = J w0 eta/|tau|; then the torque drives it (a → b): J dw/dt = eta tau."""
    J, eta, tau, w0 = 0.1, 0.8, -1.0, 2.0
    t = np.linspace(0.0, 0.4, 41)
    _, r = _run("LossyDrive", t, init={"load.L": J * w0}, inputs={"tau": str(tau)})
    ts = J * w0 * eta / abs(tau)
    w = np.where(t < ts, w0 + tau / (eta * J) * t, eta * tau / J * (t - ts))
    np.testing.assert_allclose(_col(r, "w"), w, rtol=0, atol=1e-9)
    Pa, Pb = _col(r, "P_a"), _col(r, "P_b")
    loss = Pa + Pb  # what the gear keeps
    assert np.all(loss >= -1e-12)
    after = t > ts + 1e-9
    np.testing.assert_allclose(Pb[after], -eta * Pa[after], rtol=1e-9)  # a drives: b gets eta of P_a
    np.testing.assert_allclose(Pa[~after & (t < ts - 1e-9)], -eta * Pb[~after & (t < ts - 1e-9)], rtol=1e-9)


def test_gear_loss_between_rigid_inertias_is_refused_where_written(tmp_path, capsys):
    """Between two rigidly coupled inertias the torque at flange a comes out of an algebraic loop with the mode
    that decides it: pdsl refuses (AlgebraicSwitch) instead of integrating in a mode picked at random."""
    text = """import "std:rotational" as rot
model RigidLossy
  input tau
  use drive = rot.Torque(tau = tau)
  use m = rot.Inertia(J = 0.05)
  use loss = rot.GearLoss(efficiency = 0.8)
  use load = rot.Inertia(J = 0.1)
  connect drive.flange, m.flange, loss.a
  connect loss.b, load.flange
end
"""
    path = tmp_path / "rigid.phm"
    path.write_text(text, encoding="utf-8")
    assert main(["check", str(path)]) == 2
    err = capsys.readouterr().err
    assert "error[AlgebraicSwitch]" in err and "rotational.phm:" in err and "(via loss, rigid.phm:6)" in err


# ------------------------------------------------------------------- Clutch
def test_clutch_dissipates_while_slipping():
    pb = power_balance(_part("Clutch"))
    assert pb.holds
    wa, wb, mu, fn, r = sp.symbols("a.flow b.flow mu fn r", real=True)
    loss = -_terms(pb)["slip"]
    assert sp.simplify(loss - mu * fn * r * (wa - wb) * sp.sign(wa - wb)) == 0  # = mu fn r |w_a − w_b| ≥ 0


def test_clutch_slips_then_sticks():
    """Rotor 1 at w0 drags rotor 2 from rest with the friction torque Tc = mu fn r: dw1/dt = (tau − Tc)/J1,
    dw2/dt = Tc/J2 until they meet at t*; then they stick (Filippov sliding on w1 = w2, the torque needed,
    J2 tau/(J1 + J2), is below Tc) and turn together: dw/dt = tau/(J1 + J2)."""
    J1, J2, Tc, tau, w0 = 0.1, 0.3, 0.4 * 50.0 * 0.1, 1.0, 10.0
    t = np.linspace(0.0, 1.2, 25)
    _, r = _run("ClutchedRotors", t, init={"r1.L": J1 * w0}, inputs={"tau": str(tau)})
    a1, a2 = (tau - Tc) / J1, Tc / J2
    ts = w0 / (a2 - a1)
    ws = a2 * ts
    w1 = np.where(t < ts, w0 + a1 * t, ws + tau / (J1 + J2) * (t - ts))
    w2 = np.where(t < ts, a2 * t, ws + tau / (J1 + J2) * (t - ts))
    np.testing.assert_allclose(_col(r, "w1"), w1, rtol=0, atol=1e-8)
    np.testing.assert_allclose(_col(r, "w2"), w2, rtol=0, atol=1e-8)


@pytest.mark.parametrize("name", ["Gearbox", "GearLoss", "Clutch"])
def test_show_power_prints_the_part_balance(name, capsys, monkeypatch):
    monkeypatch.chdir(REPO)
    assert main(["show", "models/std/rotational.phm", "--model", name, "--power"]) == 0
    out = capsys.readouterr().out
    assert "Power balance (dH/dt = supplied − dissipated):" in out and "balance: holds identically" in out


def _compliant_reference(t_end, t_eval, J1=0.05, J2=0.1, k=20.0, eta=0.8, L2=0.1):
    """J1 w1' = tau − k x, x' = w1 − w2, J2 w2' = eta^sign(k x w2) k x, tau = 0.5 sin(3 t): integrated with scipy mode
    by mode (the mode frozen between the zero crossings of x and w2, found as events; a 1e-10 s step past each
    crossing picks the next mode)."""
    from scipy.integrate import solve_ivp

    def rhs(s, y, mode):
        L1, x, L = y
        return np.array([0.5 * np.sin(3 * s) - k * x, L1 / J1 - L / J2, eta**mode * k * x])

    def crossing(i):
        ev = lambda s, y, mode: y[i]  # noqa: E731
        ev.terminal = True
        return ev

    def past(s, y, mode, h=1e-10):  # a step past a crossing, then the mode there
        z = y + h * rhs(s, y, mode)
        new = float(np.sign(z[1] * z[2])) or mode
        return s + h, y + h * rhs(s, y, new), new

    s, y, mode = past(0.0, np.array([0.0, 0.0, L2]), 1.0)
    pieces = []
    for _ in range(1000):
        sol = solve_ivp(rhs, (s, t_end), y, args=(mode,), events=[crossing(1), crossing(2)], dense_output=True,
                        rtol=1e-12, atol=1e-14, method="DOP853")
        pieces.append((sol.t[0], sol.t[-1], sol.sol))
        if sol.status != 1:
            break
        s, y, mode = past(sol.t[-1], sol.y[:, -1], mode)
    return np.array([next(f for a, b, f in pieces if a <= ti <= b)(ti) if ti >= pieces[0][0] else [0.0, 0.0, L2]
                     for ti in t_eval])


def test_compliant_lossy_drive_matches_a_mode_by_mode_reference():
    """With a shaft spring before it, the gear loss reads the spring's torque (a state): the power direction switches
    as the sinusoidal torque reverses, located, and the trajectory matches scipy integrated mode by mode; the loss
    (tau_a + tau_b) w is never negative."""
    t = np.linspace(0.0, 4.0, 81)
    _, r = _run("CompliantDrive", t, init={"load.L": 0.1}, inputs={"tau": "0.5*sin(3*t)"})
    ref = _compliant_reference(4.0, t)
    np.testing.assert_allclose(np.c_[_col(r, "motor.L"), _col(r, "shaft.x"), _col(r, "load.L")], ref, rtol=0, atol=1e-8)
    assert np.min(_col(r, "loss_power")) >= -1e-12 and np.max(_col(r, "loss_power")) > 1e-3
