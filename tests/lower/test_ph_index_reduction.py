"""Index reduction of port-Hamiltonian networks whose junctions tie stores together (issue 6).

Two capacitors directly in parallel (one common-effort junction) must have q1/C1 = q2/C2; two masses rigidly coupled
(one common-flow junction) p1/m1 = p2/m2. The lowering finds such a constraint g(x) = 0 between store states,
differentiates it, keeps every state and records g as a monitored constraint (start values are projected onto it).
Checks: the reduced networks behave as one capacitor C1 + C2 (closed form) and as one mass m1 + m2 (against the
one-mass model), inductors in series as one inductor (against rlc.phm), the reductions are named in `show`, an
inconsistent start is projected and reported, a store tied to a source is a located error.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import sympy as sp

from pdsl import symbols as S
from pdsl.cli.main import main
from pdsl.diagnostics import PdslError
from pdsl.lower.port_hamiltonian import _hidden_constraints
from pdsl.lower.structural import power_balance
from pdsl.pipeline import compile_model
from pdsl.sim.initial import Projector
from pdsl.sim.simulate import input_from_expression, simulate, time_grid

RLC = Path(__file__).resolve().parents[2] / "models" / "rlc.phm"

MODELS = {
    "caps": """model ParallelCaps "two capacitors in parallel, discharged through a resistor"
  param C1 = 0.1, C2 = 0.3, R = 2.0
  flow_store cap1(q1) energy q1^2/(2*C1)
  flow_store cap2(q2) energy q2^2/(2*C2)
  resistive res: e = R*f
  junction common_effort(cap1, cap2, res)
end
""",
    "three_caps": """model ThreeCaps
  param C1 = 0.1, C2 = 0.3, C3 = 0.25, R = 2.0
  flow_store cap1(q1) energy q1^2/(2*C1)
  flow_store cap2(q2) energy q2^2/(2*C2)
  flow_store cap3(q3) energy q3^2/(2*C3)
  resistive res: e = R*f
  junction common_effort(cap1, cap2, cap3, res)
end
""",
    "masses": """model RigidMasses "two masses moving together (effort = force, flow = velocity)"
  param m1 = 1.0, m2 = 3.0, c = 0.5
  input F
  effort_store mass1(p1) energy p1^2/(2*m1)
  effort_store mass2(p2) energy p2^2/(2*m2)
  resistive damper: e = c*f
  effort_source push = F
  junction common_flow(mass1, mass2, damper, -push)
end
""",
    "one_mass": """model OneMass
  param m = 4.0, c = 0.5
  input F
  effort_store mass(p) energy p^2/(2*m)
  resistive damper: e = c*f
  effort_source push = F
  junction common_flow(mass, damper, -push)
end
""",
    "inductors": """model SeriesInductors "RLC with its inductance split in two, joined by a bond"
  param R = 1.0, L1 = 0.2, L2 = 0.3, C = 0.1
  input V
  flow_store cap(q) energy q^2/(2*C)
  effort_store ind1(phi1) energy phi1^2/(2*L1)
  effort_store ind2(phi2) energy phi2^2/(2*L2)
  resistive res: e = R*f
  effort_source src = V
  junction half: common_flow(ind1, res)
  junction common_flow(cap, half, ind2, -src)
end
""",
    "nonlinear": """model NonlinearCaps
  param a = 1.0, C2 = 0.5, R = 1.0
  flow_store cap1(q1) energy a*q1^4/4
  flow_store cap2(q2) energy q2^2/(2*C2)
  resistive res: e = R*f
  junction common_effort(cap1, cap2, res)
end
""",
    "loop": """model NonlinearLoop "a capacitor discharged through two nonlinear resistors in series"
  param C = 1.0
  flow_store cap(q) energy q^2/(2*C)
  resistive r1: f = e^3 + e
  resistive r2: f = 2*e^3 + e
  junction common_flow(cap, r1, r2)
end
""",
}

_cache: dict = {}


def compiled(key):
    if key not in _cache:
        _cache[key] = compile_model(f"{key}.phm", text=MODELS[key])
    return _cache[key]


def sym(name):
    return S.sym(name)


def rhs_of(system):
    return {s.name: eq.rhs for s, eq in zip(system.states, system.differential)}


def column(res, num, name):
    return res.x[:, num.x_names.index(name)]


# ---------------------------------------------------------------------------------------------- structure
def test_parallel_capacitors_keep_both_states_and_record_the_constraint():
    c = compiled("caps")
    s = c.system
    assert [st.name for st in s.states] == ["q1", "q2"] and not s.algebraics and s.is_explicit()
    (g,) = s.constraints
    q1, q2, C1, C2, R = (sym(n) for n in ("q1", "q2", "C1", "C2", "R"))
    assert sp.simplify(g.residual / (q1 / C1 - q2 / C2)) in (1, -1)
    assert s.invariants == s.constraints  # start values are projected onto it
    assert "cap1 (line 3), cap2 (line 4)" in g.label
    # Kirchhoff on the constraint: the total charge leaves through R, and the charges split like the capacitances
    rhs = rhs_of(s)
    on = {q2: C2 * q1 / C1}
    assert sp.simplify((rhs["q1"] + rhs["q2"]).xreplace(on) + q1 / (C1 * R)) == 0
    assert sp.simplify((rhs["q2"] * C1 - rhs["q1"] * C2).xreplace(on)) == 0
    pb = power_balance(s)
    assert pb.residual == 0 and len(pb.modulo) == 1


def test_linear_invariant_is_exact_for_the_rhs():
    """d/dt g = ∇g·f vanishes for every state, not only on g = 0 — so an integrator keeps g = const exactly."""
    s = compiled("caps").system
    (g,) = s.constraints
    rates = rhs_of(s)
    assert sp.simplify(sum(sp.diff(g.residual, sym(n)) * f for n, f in rates.items())) == 0


# ---------------------------------------------------------------------------------------------- behaviour
@pytest.mark.parametrize("params", [{}, {"C1": 0.7, "C2": 0.05, "R": 0.5}])
def test_parallel_capacitors_discharge_like_one_capacitor(params):
    """v(t) = V0 exp(−t / (R (C1 + C2))), q_i = C_i v."""
    num = compiled("caps").numeric
    P = {"C1": 0.1, "C2": 0.3, "R": 2.0, **params}
    V0 = 1.5
    res = simulate(num, time_grid(2.0, 0.02), x0={"q1": P["C1"] * V0, "q2": P["C2"] * V0}, params=params, rtol=1e-12)
    v = V0 * np.exp(-res.t / (P["R"] * (P["C1"] + P["C2"])))
    err = max(np.abs(column(res, num, "q1") - P["C1"] * v).max(), np.abs(column(res, num, "q2") - P["C2"] * v).max())
    assert err <= 1e-8, err
    assert "projection" not in res.info or not res.info["projection"].changes
    assert np.abs(res.constraint_rms).max() <= 1e-12


def test_three_capacitors_discharge_like_one_capacitor():
    num = compiled("three_caps").numeric
    assert len(num.system.constraints) == 2
    C = {"q1": 0.1, "q2": 0.3, "q3": 0.25}
    V0, R = 1.0, 2.0
    res = simulate(num, time_grid(2.0, 0.02), x0={n: c * V0 for n, c in C.items()}, rtol=1e-12)
    v = V0 * np.exp(-res.t / (R * sum(C.values())))
    err = max(np.abs(column(res, num, n) - c * v).max() for n, c in C.items())
    assert err <= 1e-8, err


def test_array_of_parallel_capacitors_discharges_like_one_capacitor():
    """N capacitors on one node, written with a member loop (`cap[i] for i in 1..N`): N − 1 constraints, and the
    node voltage decays with R·ΣC."""
    text = """model Star
  const N = 3
  param C[1..N] = 0.1, R = 2.0
  flow_store cap[i](q[i]) energy q[i]^2/(2*C[i]) for i in 1..N
  resistive res: e = R*f
  junction common_effort(cap[i] for i in 1..N, res)
end
"""
    c = compile_model("star.phm", text=text, consts={"N": 5})
    num = c.numeric
    assert len(c.system.states) == 5 and len(c.system.constraints) == 4 and not c.system.algebraics
    C = [0.1, 0.05, 0.2, 0.3, 0.15]
    V0, R = 1.2, 2.0
    res = simulate(num, time_grid(2.0, 0.05), x0={f"q[{i + 1}]": C[i] * V0 for i in range(5)},
                   params={f"C[{i + 1}]": C[i] for i in range(5)}, rtol=1e-12)
    v = V0 * np.exp(-res.t / (R * sum(C)))
    err = max(np.abs(column(res, num, f"q[{i + 1}]") - C[i] * v).max() for i in range(5))
    assert err <= 1e-8, err


def test_rigidly_coupled_masses_behave_as_one_mass():
    """Against the one-mass model with m = m1 + m2, under a forcing F = sin(2t) + 0.5, from a common velocity."""
    two, one = compiled("masses").numeric, compiled("one_mass").numeric
    grid = time_grid(6.0, 0.05)
    v0 = 0.3
    a = simulate(two, grid, x0={"p1": 1.0 * v0, "p2": 3.0 * v0},
                 inputs={"F": input_from_expression(two, "F", "sin(2*t) + 0.5")}, rtol=1e-12)
    b = simulate(one, grid, x0={"p": 4.0 * v0}, inputs={"F": input_from_expression(one, "F", "sin(2*t) + 0.5")}, rtol=1e-12)
    v_one = column(b, one, "p") / 4.0
    err = max(np.abs(column(a, two, "p1") / 1.0 - v_one).max(), np.abs(column(a, two, "p2") / 3.0 - v_one).max())
    assert err <= 1e-8, err
    assert np.abs(v_one).max() > 0.1


def test_inductors_in_series_behave_as_one_inductor():
    """Against rlc.phm with L = L1 + L2: the same charge, and phi1 + phi2 = (L1 + L2)·i."""
    split, whole = compiled("inductors").numeric, compile_model(RLC).numeric
    grid = time_grid(3.0, 0.02)
    i0 = 0.2
    a = simulate(split, grid, x0={"q": 0.01, "phi1": 0.2 * i0, "phi2": 0.3 * i0},
                 inputs={"V": input_from_expression(split, "V", "cos(3*t)")}, rtol=1e-12)
    b = simulate(whole, grid, x0={"q": 0.01, "phi": 0.5 * i0}, params={"L": 0.5, "C": 0.1, "R": 1.0},
                 inputs={"V": input_from_expression(whole, "V", "cos(3*t)")}, rtol=1e-12)
    err = max(np.abs(column(a, split, "q") - column(b, whole, "q")).max(),
              np.abs(column(a, split, "phi1") + column(a, split, "phi2") - column(b, whole, "phi")).max())
    assert err <= 1e-8, err


def test_nonlinear_capacitors_reduce_and_dissipate():
    """A quartic capacitor (e = a q1³) in parallel with a linear one: the differentiated constraint gives
    q1' = −e/(R (1 + 3 C2 a q1²)) — Kirchhoff's current law holds exactly — and the energy decreases."""
    c = compiled("nonlinear")
    rhs = rhs_of(c.system)
    q1, q2, a, C2, R = (sym(n) for n in ("q1", "q2", "a", "C2", "R"))
    e = a * q1**3
    assert sp.simplify(rhs["q1"] + rhs["q2"] + e / R) == 0
    assert sp.simplify(rhs["q1"] * (1 + 3 * C2 * a * q1**2) + e / R) == 0
    num = c.numeric
    res = simulate(num, time_grid(5.0, 0.05), x0={"q1": 1.0, "q2": 0.5}, rtol=1e-11)
    assert np.diff(res.energy).max() <= 1e-12
    assert res.energy[-1] < 0.2 * res.energy[0]
    assert np.abs(res.constraint_rms).max() <= 1e-8  # a nonlinear invariant drifts, at the integrator's tolerance


def test_rate_inside_a_nonlinear_loop_becomes_an_algebraic_variable():
    """The common current of two nonlinear resistors in series solves e1(f) + e2(f) = −q/C (no closed form): the
    rate of q is an algebraic variable rate(q) and IDAS integrates the index-1 DAE. Reference: scipy on q' = f(q),
    f found by bisection."""
    import scipy.integrate
    import scipy.optimize

    c = compiled("loop")
    assert [a.name for a in c.system.algebraics][0] == "rate(q)"

    def e_of(f, cubic):  # invert f = cubic·e³ + e (monotone)
        return scipy.optimize.brentq(lambda e: cubic * e**3 + e - f, -10, 10, xtol=1e-15)

    def rate(t, q):
        return [scipy.optimize.brentq(lambda f: e_of(f, 1) + e_of(f, 2) + q[0], -50, 50, xtol=1e-15)]

    grid = time_grid(2.0, 0.25)
    ref = scipy.integrate.solve_ivp(rate, (0, 2), [1.0], t_eval=grid, rtol=1e-12, atol=1e-14).y[0]
    res = simulate(c.numeric, grid, x0={"q": 1.0}, rtol=1e-10)
    assert res.info["integrator"] == "idas"
    err = np.abs(column(res, c.numeric, "q") - ref).max()
    assert err <= 1e-7, err


# ---------------------------------------------------------------------------------------------- start values
def test_inconsistent_start_is_projected_and_reported(capsys, tmp_path):
    """q1 = 1, q2 = 0 violates q1/C1 = q2/C2: `simulate` moves the start onto the constraint (its Newton projection,
    minimum-norm steps along ∇g, clamped) and lists the change; the trajectory then stays on it."""
    num = compiled("caps").numeric
    res = simulate(num, time_grid(1.0, 0.1), x0={"q1": 1.0, "q2": 0.0}, rtol=1e-10)
    proj = res.info["projection"]
    assert {name for name, _, _ in proj.changes} == {"q1", "q2"}
    assert proj.residual_before == pytest.approx(1 / 0.1) and proj.residual_after <= 1e-12
    q1, q2 = res.x[0]
    assert abs(q1 / 0.1 - q2 / 0.3) <= 1e-12 and q1 > 0
    assert np.abs(res.constraint_rms).max() <= 1e-12
    path = tmp_path / "caps.phm"
    path.write_text(MODELS["caps"])
    assert main(["simulate", str(path), "--init", "q1=1", "--t-end", "1", "--dt", "0.5", "-o", str(tmp_path / "o.csv")]) == 0
    out = capsys.readouterr().out
    assert "initial state projected onto the constraints" in out and "q1: 1 ->" in out


# ---------------------------------------------------------------------------------------------- show
def test_show_names_the_reduction(capsys, tmp_path):
    path = tmp_path / "caps.phm"
    path.write_text(MODELS["caps"])
    assert main(["show", str(path), "--power"]) == 0
    out = capsys.readouterr().out
    assert "Constraints between stores (index reduction; monitored)" in out
    assert "index reduction: the junctions tie stores cap1 (line 3), cap2 (line 4); differentiated once" in out
    assert "der(q1) = -q1/(R*(C1 + C2))" in out and "network, index-reduced" in out
    assert "balance: holds on the constraints between stores" in out


# ---------------------------------------------------------------------------------------------- errors
_ERRORS = [
    ("capacitor_on_a_voltage_source",
     "  param C = 1.0\n  input V\n  flow_store cap(q) energy q^2/(2*C)\n  effort_source src = V\n"
     "  junction common_effort(cap, -src)\n", "DependentStorage", 4, 3, "time derivative of `V`"),
    ("inductor_on_a_current_source",
     "  param L = 1.0\n  input I\n  effort_store ind(phi) energy phi^2/(2*L)\n  flow_source src = I\n"
     "  junction common_flow(ind, -src)\n", "DependentStorage", 4, 3, "`ind` (line 4)"),
]


@pytest.mark.parametrize("name, body, code, line, col, needle", _ERRORS, ids=[e[0] for e in _ERRORS])
def test_store_tied_to_a_source_is_a_located_error(tmp_path, name, body, code, line, col, needle):
    path = tmp_path / f"{name}.phm"
    path.write_text("model M\n" + body + "end\n")
    with pytest.raises(PdslError) as info:
        compile_model(path)
    d = info.value.diagnostics[0]
    assert (d.code, d.span.line, d.span.col) == (code, line, col), str(info.value)
    assert needle in d.message
    assert str(info.value).startswith(f"{path}:{line}:{col}: error[{code}]")


def test_hidden_constraint_from_dependent_rows():
    """Rows of the remaining linear system that are dependent (wᵀA = 0) imply the constraint wᵀb = 0 and one of
    them is dropped (here: a + b = q1/C1 and 2a + 2b = q2/C2 give 2 q1/C1 − q2/C2 = 0)."""
    a, b, q1, q2, C1, C2 = (sym(n) for n in ("a", "b", "q1", "q2", "C1", "C2"))
    span = object()
    eqs = [(a + b - q1 / C1, span, "first"), (2 * a + 2 * b - q2 / C2, span, "second"), (a - 3 * b, span, "third")]
    constraints, kept = _hidden_constraints(eqs, [a, b])
    (g, _, _), = constraints
    assert sp.simplify(g / (2 * q1 / C1 - q2 / C2)) in (1, -1, sp.Rational(1, 2), sp.Rational(-1, 2))
    assert len(kept) == 2 and kept[-1][2] == "third"
    assert _hidden_constraints([(a + b - q1, span, "x"), (a - b, span, "y")], [a, b]) is None


# ---------------------------------------------------------------- consistent starts: the junctions' redistribution
@pytest.mark.parametrize("name, x0, conserved, expected", [
    # two capacitors (C1 = 0.1, C2 = 0.3) connected with q1 = 1, q2 = 0: the charge splits like the capacitances
    ("caps", [1.0, 0.0], [1, 1], [0.25, 0.75]),
    ("three_caps", [1.0, 0.0, 0.0], [1, 1, 1], [0.1 / 0.65, 0.3 / 0.65, 0.25 / 0.65]),
    # two masses (1 and 3) rigidly coupled, p1 = 1, p2 = 0: momentum conserved, common velocity 1/4
    ("masses", [1.0, 0.0], [1, 1], [0.25, 0.75]),
    # two inductors in series (0.2, 0.3): the flux linkage is conserved and the current becomes common
    ("inductors", [0.0, 1.0, 0.0], [0, 1, 1], [0.0, 0.4, 0.6]),
])
def test_inconsistent_start_is_redistributed_like_a_physical_connection(name, x0, conserved, expected):
    """Not the minimum-norm projection (which for the capacitors gives q = (0.1, 0.3): charge 0.4 from 1):
    the start moves along the free internal flow of the junction, keeping what the junction balances."""
    num = compiled(name).numeric
    assert num.projection is not None
    pr = Projector(num).project(np.array(x0), num.p_default)
    assert pr.residual_after < 1e-12
    assert np.dot(conserved, pr.x) == pytest.approx(np.dot(conserved, x0), abs=1e-12)
    assert pr.x == pytest.approx(expected, abs=1e-12)


def test_nonlinear_capacitor_start_conserves_charge():
    num = compiled("nonlinear").numeric  # energies a q1⁴/4 and q2²/(2 C2): efforts q1³ and q2/C2
    pr = Projector(num).project(np.array([1.0, 0.0]), num.p_default)
    q1, q2 = pr.x
    assert q1 + q2 == pytest.approx(1.0, abs=1e-12)
    assert q1**3 == pytest.approx(q2 / 0.5, abs=1e-12)


def test_simulate_reports_the_redistributed_start(tmp_path, capsys):
    path = tmp_path / "caps.phm"
    path.write_text(MODELS["caps"])
    assert main(["simulate", str(path), "--init", "q1=1", "--init", "q2=0", "--t-end", "0.1", "--dt", "0.1",
                 "-o", str(tmp_path / "caps.csv")]) == 0
    out = capsys.readouterr().out
    assert "q1: 1 -> 0.25" in out and "q2: 0 -> 0.75" in out
