"""LANGUAGE.md §9–§10 acceptance models A1–A6, each against an independent reference."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import scipy.linalg
from scipy.integrate import solve_ivp

from pdsl.pipeline import CompileOptions, compile_model
from pdsl.sim.simulate import input_from_expression, simulate

MODELS = Path(__file__).resolve().parents[2] / "models"
COMP = MODELS / "composition"


def _run(path, model=None, init=None, inputs=None, t=(1.0, 5.0), formulation="hamiltonian"):
    c = compile_model(path, CompileOptions(model=model, formulation=formulation))
    ins = {k: input_from_expression(c.numeric, k, v) for k, v in (inputs or {}).items()}
    r = simulate(c.numeric, np.array([0.0, *t]), x0=init or {}, inputs=ins, rtol=1e-11, atol=1e-13)
    return c, r


def _col(r, name):
    if name in r.x_names:
        return r.x[:, list(r.x_names).index(name)]
    return r.y[:, list(r.y_names).index(name)]


def _rhs(c, x, p=None):
    n = c.numeric
    p = n.p_default if p is None else p
    return np.asarray(n.rhs(0.0, x, p, np.zeros(len(n.u_names)) if n.u_names else []), dtype=float).ravel()


# ------------------------------------------------------------------- A1
def _double_pendulum_angles(t_eval, th0, m=(1.0, 0.5), l=(1.0, 0.8), g=9.81):
    m1, m2 = m
    l1, l2 = l

    def f(t, y):
        a, b, wa, wb = y
        d = a - b
        M = np.array([[(m1 + m2) * l1**2, m2 * l1 * l2 * np.cos(d)], [m2 * l1 * l2 * np.cos(d), m2 * l2**2]])
        rhs = np.array([-m2 * l1 * l2 * np.sin(d) * wb**2 - (m1 + m2) * g * l1 * np.sin(a),
                        m2 * l1 * l2 * np.sin(d) * wa**2 - m2 * g * l2 * np.sin(b)])
        return [wa, wb, *np.linalg.solve(M, rhs)]

    sol = solve_ivp(f, (0, t_eval[-1]), [*th0, 0, 0], t_eval=t_eval, rtol=1e-12, atol=1e-13, method="DOP853")
    return sol.y[:2].T


SECTION8_DOUBLE_PENDULUM = """model DoublePendulum "planar chain of two point masses"
  space 2
  param m1 = 1.0, m2 = 0.5, l1 = 1.0, l2 = 0.8, g = 9.81
  body b1 = point(mass = m1)
  body b2 = point(mass = m2)
  link ground, b1, length = l1
  link b1, b2, length = l2
  gravity g
end
"""


def test_a1_two_links_is_the_double_pendulum(tmp_path):
    """Same rhs as §8's DoublePendulum (m = (1, 0.5), l = (1, 0.8)) at random states, no extra multipliers, and the
    hand-derived angle ODE from rest at (0.5, 1.0): θ(2) = (0.2399619, 0.2992555), θ(5) = (0.4838897, 0.9847530)."""
    comp = compile_model(COMP / "a1_two_links.phm")
    ref_path = tmp_path / "double_pendulum.phm"
    ref_path.write_text(SECTION8_DOUBLE_PENDULUM)
    flat = compile_model(ref_path)
    assert len(comp.system.multipliers) == len(flat.system.multipliers)
    pf = flat.numeric.p_default
    mapping = {f"{a}.{c}": f"{b}.{c}" for a, b in (("upper.bob", "b1"), ("lower.bob", "b2")) for c in ("x", "y", "px", "py")}
    perm = [flat.numeric.x_names.index(mapping[n]) for n in comp.numeric.x_names]
    rng = np.random.default_rng(0)
    for _ in range(5):
        x = rng.normal(size=len(perm))
        xf = np.empty_like(x)
        xf[perm] = x
        np.testing.assert_allclose(_rhs(comp, x), _rhs(flat, xf, pf)[perm], rtol=0, atol=1e-12)
    th0 = (0.5, 1.0)
    init = {"upper.bob.x": np.sin(th0[0]), "upper.bob.y": -np.cos(th0[0]),
            "lower.bob.x": np.sin(th0[0]) + 0.8 * np.sin(th0[1]), "lower.bob.y": -np.cos(th0[0]) - 0.8 * np.cos(th0[1])}
    _, r = _run(COMP / "a1_two_links.phm", init=init, t=(2.0, 5.0))
    x1, y1, x2, y2 = (_col(r, n) for n in ("upper.bob.x", "upper.bob.y", "lower.bob.x", "lower.bob.y"))
    th = np.column_stack([np.arctan2(x1, -y1), np.arctan2(x2 - x1, -(y2 - y1))])
    ref = _double_pendulum_angles(np.array([0.0, 2.0, 5.0]), th0)
    np.testing.assert_allclose(th, ref, atol=1e-6)
    np.testing.assert_allclose(th[1:], [[0.2399619, 0.2992555], [0.4838897, 0.9847530]], atol=1e-6)


# ------------------------------------------------------------------- A2
def test_a2_ladder_composed_equals_the_flat_ladder():
    comp = compile_model(COMP / "a2_ladder.phm")
    flat = compile_model(MODELS / "rlc_ladder.phm", CompileOptions(consts={"N": 3}))
    n = comp.numeric
    A = np.zeros((n.nx, n.nx))
    for j in range(n.nx):
        e = np.zeros(n.nx)
        e[j] = 1.0
        A[:, j] = np.asarray(n.rhs(0.0, e, n.p_default, [0.0]), dtype=float).ravel()
    eig = np.sort_complex(np.linalg.eigvals(A))
    want = np.sort_complex(np.array([-0.7549712 + 1.9912327j, -0.7549712 - 1.9912327j, -0.5452960 + 5.5070466j,
                                     -0.5452960 - 5.5070466j, -0.2997328 + 8.0264936j, -0.2997328 - 8.0264936j]))
    np.testing.assert_allclose(eig, want, atol=1e-6)
    eig_flat = np.sort_complex(np.linalg.eigvals(np.column_stack([
        np.asarray(flat.numeric.rhs(0.0, e, flat.numeric.p_default, [0.0] * len(flat.numeric.u_names)), dtype=float).ravel()
        for e in np.eye(flat.numeric.nx)])))
    np.testing.assert_allclose(eig, eig_flat, atol=1e-12)
    _, r = _run(COMP / "a2_ladder.phm", inputs={"V": "1"}, t=(60.0,))
    assert abs(_col(r, "v_load")[-1] - 5 / 5.6) < 1e-8


# ------------------------------------------------------------------- A3
A3_INIT = {"arm.x": 0, "arm.y": -0.3, "arm.a1.x": 0, "arm.a1.y": -1.3, "arm.a2.x": 1, "arm.a2.y": -0.3}


def test_a3_motor_pendulum_matches_the_reduced_ode():
    """L i̇ = V − R i − K ω, (I_O + J) ω̇ = K i − b ω − m g l sin θ, I_O = m(λ1 + λ2) + m l² = 0.051."""
    c, r = _run(COMP / "a3_motor_pendulum.phm", init=A3_INIT, inputs={"V": "2"})
    L, R, K, J, b, m, l, g = 0.5, 1.0, 0.1, 0.01, 0.05, 0.5, 0.3, 9.81
    IO = m * (0.01 + 0.002) + m * l**2

    def f(t, y):
        th, w, i = y
        return [w, (K * i - b * w - m * g * l * np.sin(th)) / (IO + J), (2 - R * i - K * w) / L]

    ref = solve_ivp(f, (0, 5), [0, 0, 0], t_eval=[0, 1, 5], rtol=1e-12, atol=1e-13, method="DOP853").y.T
    got = np.column_stack([_col(r, "theta"), _col(r, "motor.Lm") / J, _col(r, "motor.phi") / L])
    np.testing.assert_allclose(got, ref, atol=1e-6)
    np.testing.assert_allclose(got[1:], [[0.15026395, -0.0474442, 1.71730101], [0.13876246, -0.02970403, 1.99990198]], atol=1e-6)
    # one interface multiplier; the tie motor.Lm/motor.J − pivot.rate is an invariant (and stays zero)
    system = c.system
    assert [str(m) for m in system.multipliers if "shaft" in str(m)] == ["motor.shaft.through"]
    ties = [inv for inv in system.invariants if "interface" in inv.label]
    assert len(ties) == 1 and "motor.Lm" in str(ties[0].residual)


def test_a3_power_residual_vanishes_along_the_motion():
    """V i − R i² − b ω² − dE/dt = 0 with E = motor stores + pendulum energy: the interface powers cancel
    (dE/dt by central differences of the simulated energy, an independent route)."""
    c = compile_model(COMP / "a3_motor_pendulum.phm")
    grid = np.linspace(0.0, 1.0, 2001)
    r = simulate(c.numeric, grid, x0=A3_INIT, inputs={"V": input_from_expression(c.numeric, "V", "2")}, rtol=1e-12, atol=1e-14)
    i = _col(r, "motor.phi") / 0.5
    w = _col(r, "motor.Lm") / 0.01
    supplied = 2.0 * i - 1.0 * i**2 - 0.05 * w**2
    dEdt = np.gradient(r.energy, grid, edge_order=2)
    assert np.max(np.abs(dEdt - supplied)[5:-5]) < 1e-5 * np.max(np.abs(supplied))
    ports = {p.name: p for p in c.system.ports if p.role == "interface"}
    assert set(ports) == {"motor.shaft", "axle"}
    assert (ports["motor.shaft"].power + ports["axle"].power).equals(0)


# ------------------------------------------------------------------- A4
def test_a4_spring_damper_bodies_follow_the_damped_oscillator():
    c, r = _run(COMP / "a4_spring_damper_bodies.phm", init={"b2.x": 1.5, "sd.s": 1.5}, t=(1.0, 5.0, 10.0))
    d = np.hypot(_col(r, "b2.x") - _col(r, "b1.x"), _col(r, "b2.y") - _col(r, "b1.y")) - 1.0
    np.testing.assert_allclose(d[1:], [-0.28094049, 0.14587547, 0.03558425], atol=1e-8)
    mu, k, cdamp = 2.0 / 3.0, 4.0, 0.3
    wd = np.sqrt(k / mu - (cdamp / (2 * mu)) ** 2)
    a = cdamp / (2 * mu)
    t = r.t
    closed = 0.5 * np.exp(-a * t) * (np.cos(wd * t) + a / wd * np.sin(wd * t))
    np.testing.assert_allclose(d, closed, atol=1e-8)
    com_x = (1.0 * _col(r, "b1.x") + 2.0 * _col(r, "b2.x")) / 3.0
    np.testing.assert_allclose(com_x, 1.0, atol=1e-9)
    ties = [inv for inv in c.system.invariants if "sd.s" in str(inv.residual)]
    assert ties or any("sd.s" in str(e.rhs) for e in c.system.differential)


def test_a4_equals_the_builtin_spring_and_damper(tmp_path):
    builtin = tmp_path / "builtin.phm"
    builtin.write_text("model B\n  space 2\n  body b1 = point(mass = 1.0)\n  body b2 = point(mass = 2.0)\n"
                       "  spring b1, b2, k = 4.0, rest = 1.0\n  damper b1, b2, c = 0.3\nend\n")
    _, r1 = _run(COMP / "a4_spring_damper_bodies.phm", init={"b2.x": 1.5, "sd.s": 1.5}, t=(1.0, 5.0, 10.0))
    _, r2 = _run(builtin, init={"b2.x": 1.5}, t=(1.0, 5.0, 10.0))
    for n in ("b1.x", "b2.x", "b1.y", "b2.y"):
        np.testing.assert_allclose(_col(r1, n), _col(r2, n), atol=1e-10)


# ------------------------------------------------------------------- A5
def test_a5_controlled_rotor_closed_form():
    _, r = _run(COMP / "a5_controlled_rotor.phm", model="ControlledRotor", t=(0.5, 1.0, 2.0, 5.0))
    t = r.t
    ref = 1 + 2.5 * np.exp(-t) - 8 * np.exp(-2 * t) + 4.5 * np.exp(-3 * t)
    np.testing.assert_allclose(_col(r, "theta"), ref, atol=1e-7)


# ------------------------------------------------------------------- A6
def test_a6_loudspeaker_matches_the_matrix_exponential():
    c, r = _run(COMP / "a6_voice_coil.phm", model="Loudspeaker", inputs={"V": "1"}, t=(1e-3, 5.0))
    m, k, cd, R, L, Bl = 0.02, 800.0, 0.5, 4.0, 0.001, 5.0
    A = np.array([[0, 1, 0], [-k / m, -cd / m, Bl / m], [0, -Bl / L, -R / L]])
    B = np.array([0, 0, 1 / L])
    M = scipy.linalg.expm(np.block([[A, B[:, None]], [np.zeros((1, 4))]]) * 1e-3)
    x1 = M[:3, 3]
    got = np.array([_col(r, "cone.x")[1], _col(r, "der(cone.x)")[1], _col(r, "coil.phi")[1] / L])
    np.testing.assert_allclose(got, x1, rtol=1e-7, atol=1e-12)
    np.testing.assert_allclose(got, [1.84456714e-5, 4.31275496e-2, 0.206927326], rtol=1e-7)
    assert abs(_col(r, "x")[-1] - 1.5625e-3) < 1e-9 and abs(_col(r, "i")[-1] - 0.25) < 1e-8
    assert not c.system.multipliers  # the coil accepts the cone's velocity: no interface multiplier


@pytest.mark.parametrize("name", ["a1_two_links", "a2_ladder", "a3_motor_pendulum", "a4_spring_damper_bodies",
                                  "a5_controlled_rotor", "a6_voice_coil"])
def test_show_traces_instance_equations_to_their_lines(name):
    from pdsl.show import render_system

    model = {"a5_controlled_rotor": "ControlledRotor", "a6_voice_coil": "Loudspeaker"}.get(name)
    c = compile_model(COMP / f"{name}.phm", CompileOptions(model=model, numeric=False))
    text = render_system(c.system, simplify=False)
    assert "(via " in text


# ------------------------------------------------------------------- negative cases
LIB = COMP / "lib"


def _error(tmp_path, text, name="m.phm", model=None):
    import shutil

    from pdsl.diagnostics import PdslError

    shutil.copytree(LIB, tmp_path / "lib", dirs_exist_ok=True)
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(PdslError) as info:
        compile_model(path, CompileOptions(model=model, numeric=False))
    return info.value.diagnostics[0], str(info.value)


def test_a_rotational_port_connected_to_an_electrical_one_is_a_domain_mismatch(tmp_path):
    d, text = _error(tmp_path, 'import "lib/motor.phm"\nimport "lib/sections.phm"\n\nmodel Bad\n  input V\n'
                     "  use motor = DCMotor(V = V)\n  use r = Resistor()\n  connect motor.shaft, r.p\nend\n")
    assert (d.code, d.span.line) == ("DomainMismatch", 8)
    assert "motor.phm:4" in text and "sections.phm:13" in text  # both port declarations


def test_a_component_that_lacks_an_equation_is_reported_at_the_component(tmp_path):
    d, text = _error(tmp_path, 'model Leaky\n  input u\n  var x, y\n  der(x) = -x + u\n  output out = x + y\nend\n\n'
                     "model Top\n  use a = Leaky(u = 1.0)\nend\n", model="Top")
    assert d.code == "UnbalancedSystem" and d.span.line == 3 and d.span.via[0][0] == "a"
    assert "(via a, m.phm:9)" in text


def test_an_over_constrained_kinematic_loop_names_the_connect_line(tmp_path):
    d, _ = _error(tmp_path, 'import "lib/links.phm"\nmodel Loop\n  space 2\n  use a = Link()\n  use b = Link()\n'
                  "  connect ground, a.pivot\n  connect a.bob, b.pivot\n  connect b.bob, ground.at([0.5, 0]), ground.at([0, 0.5])\n"
                  "end\n")
    assert (d.code, d.span.line) == ("OverConstrained", 8)


@pytest.mark.parametrize("text, code, line", [
    ('import "nowhere.phm"\nmodel A\n  var x\n  der(x) = -x\nend\n', "ImportNotFound", 1),
    ('import "m.phm"\nmodel A\n  var x\n  der(x) = -x\nend\n', "ImportCycle", 1),
    ('model A\n  use x = Missing()\nend\n', "UnknownModel", 2),
    ('import "lib/links.phm"\nmodel A\n  space 2\n  use u = Link(mass = 2)\n  connect ground, u.pivot\nend\n', "UnknownArgument", 4),
    ('import "lib/links.phm"\nmodel A\n  space 2\n  use u = Link()\nend\n', "UnconnectedPort", 4),
    ('import "lib/links.phm"\nmodel A\n  space 2\n  use u = Link()\n  connect ground, u.pivot\n  output y = u.nothing\nend\n', "UnknownName", 6),
    ('model A\n  port p: magnetic\n  var x\n  der(x) = -x\nend\n', "UnknownDomain", 2),
])
def test_composition_errors_are_located(tmp_path, text, code, line):
    d, _ = _error(tmp_path, text)
    assert d.code == code, d
    assert d.span is not None and d.span.line == line or (d.span.via and d.span.via[-1][2] == line), d


# ------------------------------------------------------------------- a mixed model fitted and compiled
@pytest.mark.skipif(__import__("shutil").which("cc") is None, reason="no C compiler")
def test_a_mixed_model_compiles_to_c_and_matches(tmp_path):
    import casadi as ca

    from pdsl.compile.targets import compile_to

    c = compile_model(COMP / "a6_voice_coil.phm", CompileOptions(model="Loudspeaker"))
    compile_to(c.numeric, "c", tmp_path / "c")
    lib = ca.external("rhs", str(tmp_path / "c" / "libmodel.so"))
    rng = np.random.default_rng(4)
    for _ in range(10):
        x, u = rng.normal(size=c.numeric.nx), rng.normal(size=1)
        a = np.array(lib(0.0, x, c.numeric.p_default, u)).ravel()
        b = np.array(c.numeric.rhs(0.0, x, c.numeric.p_default, u)).ravel()
        assert np.max(np.abs(a - b)) <= 1e-12 * max(1, np.max(np.abs(b)))


def test_a_mixed_model_fits_a_parameter_of_an_instance(tmp_path):
    """`pdsl fit --free coil.Bl` on the loudspeaker: data simulated with Bl = 5, fit from 4 recovers 5."""
    from pdsl.cli.main import main
    from pdsl.data.csvio import write_table

    c, r = _run(COMP / "a6_voice_coil.phm", model="Loudspeaker", inputs={"V": "1"}, t=tuple(np.arange(1, 41) * 5e-4))
    header, data = r.columns()
    write_table(tmp_path / "ls.csv", header, data)
    rc = main(["fit", str(COMP / "a6_voice_coil.phm"), "--model", "Loudspeaker", "--data", str(tmp_path / "ls.csv"),
               "--free", "coil.Bl", "--param", "coil.Bl=4", "--substeps", "8", "-o", str(tmp_path / "fit"), "--quiet"])
    assert rc == 0
    import json

    fitted = json.loads((tmp_path / "fit" / "params.json").read_text())
    assert abs(fitted["values"]["coil.Bl"] - 5.0) < 1e-5


def test_prefixed_names_work_on_the_command_line(tmp_path):
    """§9: --param lower.m=…, --init upper.bob.x=…, --init der(cone.x)=…; CSV columns carry the prefixed names."""
    from pdsl.cli.main import main
    from pdsl.data.csvio import read_table

    out = tmp_path / "two.csv"
    assert main(["simulate", str(COMP / "a1_two_links.phm"), "--t-end", "0.1", "--dt", "0.05", "--param", "lower.m=0.7",
                 "--init", "upper.bob.x=0.6", "-o", str(out)]) == 0
    table = read_table(out)
    assert "upper.bob.x" in table.columns and "lower.bob.vy" in table.columns
    out2 = tmp_path / "ls.csv"
    assert main(["simulate", str(COMP / "a6_voice_coil.phm"), "--model", "Loudspeaker", "--input", "V=0", "--t-end", "0.01",
                 "--dt", "0.005", "--init", "der(cone.x)=0.1", "-o", str(out2)]) == 0
    t2 = read_table(out2)
    assert t2.data[0, t2.columns.index("der(cone.x)")] == pytest.approx(0.1)


def test_an_algebraic_loop_of_signals_is_the_chain_of_connect_lines(tmp_path):
    d, text = _error(tmp_path, 'import "std:signals"\n\nmodel Loop\n  use a = Gain(k = 0.5)\n  use b = Gain(k = 2.0)\n'
                     "  var x = 1.0\n  der(x) = -x + a.y\n  connect a.y, b.u\n  connect b.y, a.u\nend\n")
    assert d.code == "AlgebraicLoop" and d.span.line in (8, 9)
    assert "m.phm:8" in text and "m.phm:9" in text


def test_signals_through_a_state_are_not_a_loop(tmp_path):
    path = tmp_path / "chain.phm"
    path.write_text('import "std:signals"\n\nmodel Chain\n  use f = FirstOrder(T = 0.5)\n  use g = Gain(k = 3.0)\n'
                    "  var x = 0.0\n  der(x) = -x + g.y\n  connect g.y, f.u\n  connect f.y, g.u\nend\n")
    c = compile_model(path, CompileOptions(numeric=False))
    assert sorted(s.name for s in c.system.states) == ["f.x", "x"]


def test_simulate_power_records_both_sides_of_an_interface_and_they_cancel(tmp_path):
    from pdsl.cli.main import main
    from pdsl.data.csvio import read_table

    out = tmp_path / "a3.csv"
    argv = ["simulate", str(COMP / "a3_motor_pendulum.phm"), "--input", "V=2", "--t-end", "1", "--dt", "0.05", "--power",
            "-o", str(out)]
    for k, v in A3_INIT.items():
        argv += ["--init", f"{k}={v}"]
    assert main(argv) == 0
    t = read_table(out)
    net, mech = (t.data[:, t.columns.index(f"power({n})")] for n in ("motor.shaft", "axle"))
    assert np.max(np.abs(net)) > 1e-3  # power does flow through the shaft
    np.testing.assert_allclose(net + mech, 0.0, atol=1e-12)


def test_a_kinematic_port_with_several_power_ports(tmp_path):
    """A3 with a std rotational damper on the same axle: the node holds the motor's shaft, the damper and the
    mechanism's interface; the motion equals the reduced ODE with b + c_drag."""
    path = tmp_path / "drag.phm"
    text = (COMP / "a3_motor_pendulum.phm").read_text().replace('import "lib/motor.phm"', 'import "std:motor"\nimport "std:rotational" as rot')
    text = text.replace("  connect motor.shaft, axle\n", "  use drag = rot.Damper(c = 0.02)\n  use wall = rot.Fixed()\n"
                        "  connect motor.shaft, axle, drag.a\n  connect drag.b, wall.flange\n")
    path.write_text(text)
    c, r = _run(path, init=A3_INIT, inputs={"V": "2"})
    L, R, K, J, b, m, l, g, cd = 0.5, 1.0, 0.1, 0.01, 0.05, 0.5, 0.3, 9.81, 0.02
    IO = m * 0.012 + m * l**2

    def f(t, y):
        return [y[1], (K * y[2] - (b + cd) * y[1] - m * g * l * np.sin(y[0])) / (IO + J), (2 - R * y[2] - K * y[1]) / L]

    ref = solve_ivp(f, (0, 5), [0, 0, 0], t_eval=[0, 1, 5], rtol=1e-12, atol=1e-13, method="DOP853").y.T
    got = np.column_stack([_col(r, "theta"), _col(r, "motor.Lm") / J, _col(r, "motor.phi") / L])
    np.testing.assert_allclose(got, ref, atol=1e-7)
    assert [str(x) for x in c.system.multipliers if "axle" in str(x)] == ["axle.node.through"]


def test_two_kinematic_ports_tie_two_velocities():
    """`connect a1, a2` of two kinematic ports (a reversed 2:1 gear between two rotors): one multiplier; under a unit
    torque the first rotor turns as a single rotor of inertia I1 + I2/4, the second at −1/2 its rate."""
    c, r = _run(COMP / "gear.phm", t=(0.5, 1.0))
    t = r.t
    th1, th2 = _col(r, "th1"), _col(r, "th2")
    np.testing.assert_allclose(th1, 0.5 * t**2 / (1.0 + 0.5 / 4), atol=1e-9)
    np.testing.assert_allclose(th2 - th2[0], -0.5 * (th1 - th1[0]), atol=1e-9)
    assert "a1.through" in [str(m) for m in c.system.multipliers]
    assert any(inv.label.startswith("tie a1 = a2") for inv in c.system.invariants)
