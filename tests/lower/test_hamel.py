"""Hamel's equations with a symmetry group (LANGUAGE.md §5; BENCHMARKS D1–D4; issue 14).

Independent routes: the same model without `group` lowered by Lagrange–d'Alembert multipliers, the D4
closed form (a circle of radius R θ̇/φ̇), the conserved p1 = (I + mR²)θ̇, the classical Chaplygin-sleigh
equations v̇ = aω², (I + ma²)ω̇ = −mavω, and the paper's Eqs. 72–75 (ṗ1 = 0, ṗ2 = yφ̇p4 + xφ̇p3,
ṗ3 = −φ̇p4, ṗ4 = φ̇p3) checked along the simulated motion with the exact flow.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import sympy as sp

from pdsl.cli.main import main
from pdsl.diagnostics import PdslError
from pdsl.groups import GROUPS
from pdsl.pipeline import compile_model
from pdsl.sim.simulate import simulate, time_grid

MODELS = Path(__file__).resolve().parents[2] / "models"
I, J, M, R = 0.4, 0.25, 1.3, 0.3
START = {"phi": 0.3, "der(theta)": 1.7, "der(phi)": 0.6}


def _sym(name):
    return sp.Symbol(name, real=True)


def test_se2_fields_brackets_and_body_velocity():
    phi, x, y = _sym("phi"), _sym("x"), _sym("y")
    U = GROUPS["SE2"].fields((phi, x, y))
    q = sp.Matrix([phi, x, y])
    u = [U[:, a] for a in range(3)]

    def bracket(X, Y):
        return Y.jacobian(q) * X - X.jacobian(q) * Y

    assert bracket(u[0], u[1]) == -u[2] and bracket(u[0], u[2]) == u[1] and bracket(u[1], u[2]) == sp.zeros(3, 1)
    dphi, dx, dy = sp.symbols("dphi dx dy")
    xi = sp.simplify(U.inv() * sp.Matrix([dphi, dx, dy]))
    assert list(xi) == [dphi, dx + y * dphi, dy - x * dphi]  # BENCHMARKS D4.1
    Ub = GROUPS["SE2body"].fields((phi, x, y))
    xb = sp.simplify(Ub.inv() * sp.Matrix([dphi, dx, dy]))
    for kind in GROUPS.values():  # the tabulated coframe is the inverse of the fields
        g = (phi, x, y)[: kind.arity or 2]
        assert sp.simplify(kind.coframe(g) * kind.fields(g)) == sp.eye(len(g))
    assert sp.simplify(xb[1] - (dx * sp.cos(phi) + dy * sp.sin(phi))) == 0


def test_disk_hamel_equations_connection_and_relations():
    c = compile_model(MODELS / "rolling_disk_se2.phm")
    s = c.system
    assert s.formalism == "hamel" and not s.multipliers
    assert [st.name for st in s.states] == ["theta", "phi", "x", "y", "v[1]", "v[2]"]  # n + (n − k)
    Ii, Jj, m, Rr = (_sym(n) for n in ("I", "J", "m", "R"))
    v2 = _sym("v[2]")
    d1, d2 = s.states[4].rate, s.states[5].rate
    dyn = [e for e in s.differential if "Hamel" in e.label]
    assert sp.simplify(dyn[0].lhs - (Ii + m * Rr**2) * d1) == 0 and dyn[0].rhs == 0  # (I + mR²)θ̈ = 0
    assert sp.simplify(dyn[1].lhs - Jj * d2) == 0 and dyn[1].rhs == 0  # Jφ̈ = 0
    sections = {sec.title.split(" (")[0]: sec for sec in s.derivation}
    conn = {it.label: it.value for it in sections["Connection 𝒜"].items}
    phi, x, y = _sym("phi"), _sym("x"), _sym("y")
    assert conn == {"𝒜^1_theta": 0, "𝒜^2_theta": -Rr * sp.cos(phi), "𝒜^3_theta": -Rr * sp.sin(phi)}
    rel = [it.value for it in s.derivation[-1].items]
    p = [_sym(f"p̂[{i}]") for i in range(1, 5)]
    expected = [0, y * v2 * p[3] + x * v2 * p[2], -v2 * p[3], v2 * p[2]]  # Eqs. 72–75 with φ̇ = v[2]
    assert all(sp.simplify(a - b) == 0 for a, b in zip(rel, expected))


def test_disk_hamel_agrees_with_lagrange_dalembert_and_the_closed_form():
    grid = time_grid(20.0, 0.01)
    ham = compile_model(MODELS / "rolling_disk_se2.phm")
    lda = compile_model(MODELS / "rolling_disk.phm")
    rh = simulate(ham.numeric, grid, x0=START, rtol=1e-11)
    rl = simulate(lda.numeric, grid, x0=START, rtol=1e-11)
    assert rh.shown_names[:8] == rl.shown_names[:8] and rh.shown_names[8:] == ("v[1]", "v[2]")
    assert np.abs(rh.shown[:, :8] - rl.shown).max() <= 1e-8  # measured 1.6e-11
    w, W, phi0 = 1.7, 0.6, 0.3
    phi = phi0 + W * grid
    col = {n: rh.shown[:, k] for k, n in enumerate(rh.shown_names)}
    assert np.abs(col["x"] - R * w / W * (np.sin(phi) - np.sin(phi0))).max() <= 1e-8
    assert np.abs(col["y"] + R * w / W * (np.cos(phi) - np.cos(phi0))).max() <= 1e-8
    p1 = (I + M * R**2) * col["der(theta)"]
    assert np.abs(p1 - (I + M * R**2) * w).max() <= 1e-10
    checks = rh.info["balances"]
    assert len(checks) == 4 and max(b.max_residual for b in checks) <= 1e-10


def test_a_velocity_constraint_never_moves_a_coordinate_or_a_given_velocity():
    """Lagrange–d'Alembert start: φ stays 0.3 and θ̇ 1.7; der(x), der(y) are solved (they used to be projected
    to φ = 0.30777, θ̇ = 1.4457)."""
    lda = compile_model(MODELS / "rolling_disk.phm")
    res = simulate(lda.numeric, time_grid(0.1, 0.01), x0=START)
    x0 = dict(zip(res.shown_names, res.shown[0]))
    assert x0["phi"] == 0.3 and x0["der(theta)"] == 1.7 and x0["der(phi)"] == 0.6
    assert x0["der(x)"] == pytest.approx(R * np.cos(0.3) * 1.7, abs=1e-14)
    assert x0["der(y)"] == pytest.approx(R * np.sin(0.3) * 1.7, abs=1e-14)
    assert {n for n, _, _ in res.info["projection"].changes} == {"der(x)", "der(y)"}


def test_hamel_start_values_are_given_as_for_the_lagrange_dalembert_model():
    ham = compile_model(MODELS / "rolling_disk_se2.phm")
    res = simulate(ham.numeric, time_grid(0.1, 0.01), x0=START)
    x0 = dict(zip(res.shown_names, res.shown[0]))
    assert (x0["v[1]"], x0["v[2]"], x0["phi"]) == (1.7, 0.6, 0.3)
    with pytest.raises(PdslError) as err:  # der(x) follows from der(theta) on the distribution
        simulate(ham.numeric, time_grid(0.1, 0.01), x0={**START, "der(x)": 1.0})
    assert err.value.codes == ["InconsistentInitialState"]


def test_chaplygin_sleigh_gives_the_classical_reduced_equations():
    c = compile_model(MODELS / "chaplygin_sleigh.phm")
    s = c.system
    m, Ii, a = _sym("m"), _sym("I"), _sym("a")
    w, v = _sym("v[1]"), _sym("v[2]")  # ω, the forward speed
    dyn = [e for e in s.differential if "Hamel" in e.label]
    wdot, vdot = s.states[3].rate, s.states[4].rate
    sol = sp.solve([e.lhs - e.rhs for e in dyn], [wdot, vdot], dict=True)[0]
    assert sp.simplify(sol[vdot] - a * w**2) == 0
    assert sp.simplify(sol[wdot] + m * a * v * w / (Ii + m * a**2)) == 0


def test_chaplygin_sleigh_hamel_agrees_with_lagrange_dalembert(tmp_path):
    text = (MODELS / "chaplygin_sleigh.phm").read_text(encoding="utf-8")
    plain = tmp_path / "sleigh_lda.phm"
    plain.write_text(text.replace("  group SE2body(theta, x, y)\n", ""), encoding="utf-8")
    grid = time_grid(10.0, 0.01)
    start = {"der(theta)": 0.8, "der(x)": 1.0}
    rh = simulate(compile_model(MODELS / "chaplygin_sleigh.phm").numeric, grid, x0=start, rtol=1e-11)
    rl = simulate(compile_model(plain).numeric, grid, x0=start, rtol=1e-11)
    assert compile_model(plain).system.formalism == "lagrangian"
    assert np.abs(rh.shown[:, :6] - rl.shown).max() <= 1e-8  # measured 6e-12


@pytest.mark.parametrize("line, code", [
    ("group SE3(phi, x, y)", "UnknownGroup"),
    ("group SE2(phi, x)", "WrongArity"),
    ("group SE2(phi, x, R)", "NotACoordinate"),
    ("group R(x)\n  group R(y)", "DuplicateDefinition"),
])
def test_group_errors_are_located(tmp_path, capsys, line, code):
    text = (MODELS / "rolling_disk.phm").read_text(encoding="utf-8").replace("\nend", f"\n  {line}\nend")
    path = tmp_path / "bad.phm"
    path.write_text(text, encoding="utf-8")
    assert main(["check", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"error[{code}]" in err and "bad.phm:" in err and "^" in err


def test_group_without_constraints_and_with_a_holonomic_one(tmp_path, capsys):
    free = tmp_path / "free.phm"
    free.write_text("model Free\n  param m = 1\n  coord x = 0, y = 0\n  lagrangian m/2*(der(x)^2 + der(y)^2)\n"
                    "  group R(x, y)\nend\n", encoding="utf-8")
    assert main(["check", str(free)]) == 2
    assert "error[MissingDeclaration]" in capsys.readouterr().err
    holo = tmp_path / "holo.phm"
    holo.write_text("model Holo\n  param m = 1\n  coord x = 0, y = 0\n  lagrangian m/2*(der(x)^2 + der(y)^2)\n"
                    "  constraint x = y\n  group R(x, y)\nend\n", encoding="utf-8")
    assert main(["check", str(holo)]) == 2
    assert "error[NotYetSupported]" in capsys.readouterr().err


def test_translation_group_reduces_a_knife_edge_in_the_plane(tmp_path):
    """R(x, y) acting on the contact point of the sleigh, heading as shape: the same motion as LdA."""
    text = (MODELS / "chaplygin_sleigh.phm").read_text(encoding="utf-8")
    tr = tmp_path / "sleigh_r2.phm"
    tr.write_text(text.replace("group SE2body(theta, x, y)", "group R(x, y)"), encoding="utf-8")
    plain = tmp_path / "sleigh_lda.phm"
    plain.write_text(text.replace("  group SE2body(theta, x, y)\n", ""), encoding="utf-8")
    grid = time_grid(5.0, 0.01)
    start = {"der(theta)": 0.8, "der(x)": 1.0}
    c = compile_model(tr)
    assert c.system.formalism == "hamel" and len(c.system.states) == 5
    rh = simulate(c.numeric, grid, x0=start, rtol=1e-11)
    rl = simulate(compile_model(plain).numeric, grid, x0=start, rtol=1e-11)
    assert np.abs(rh.shown[:, :6] - rl.shown).max() <= 1e-8


def test_learned_connection_relations_match_benchmarks_d41(tmp_path):
    """`group SE2` with `distribution learn A`: the momentum relations with a learned connection (the quantities of the
    Eq. 18 loss) equal BENCHMARKS D4.1's reconstruction from the learned brackets [u_k, ũ1], for any connection."""
    from sympy.core.function import AppliedUndef

    model = tmp_path / "learned.phm"
    model.write_text("model Learned\n  param I = 0.4, J = 0.25, m = 1.3\n  coord theta = 0.0, phi = 0.0, x = 0.0, y = 0.0\n"
                     "  lagrangian I/2*der(theta)^2 + J/2*der(phi)^2 + m/2*(der(x)^2 + der(y)^2)\n"
                     "  group SE2(phi, x, y)\n  distribution learn A: mlp(hidden = [4])\nend\n", encoding="utf-8")
    s = compile_model(model).system
    assert s.formalism == "lagrangian" and len(s.balances) == 4
    th, phi, x, y = (_sym(n) for n in ("theta", "phi", "x", "y"))
    td, pd, xd, yd = (_sym(f"der({n})") for n in ("theta", "phi", "x", "y"))
    A = [sp.Function(f"A{k}")(th, phi, x, y) for k in range(1, 4)]

    def as_functions(e):  # the network's outputs as arbitrary functions of the configuration
        return e.replace(lambda f: isinstance(f, AppliedUndef) and f.func.__name__ == "nn_A",
                         lambda f: A[int(f.args[0])]).doit()

    p = [_sym(f"p̂[{i}]") for i in range(1, 5)]
    rel = [as_functions(it.value) for it in s.derivation[-1].items]
    u2 = lambda f: sp.diff(f, phi) - y * sp.diff(f, x) + x * sp.diff(f, y)  # noqa: E731
    # c~^m_{k1}: coefficients of u2, u3, u4 in [u_k, ũ1] (D4.1, reconstructed from Eq. 29)
    c = {2: [-u2(A[0]), -(u2(A[1]) + A[2]), -(u2(A[2]) - A[1])],
         3: [-sp.diff(A[0], x), -sp.diff(A[1], x), -(sp.diff(A[2], x) + A[0])],
         4: [-sp.diff(A[0], y), -(sp.diff(A[1], y) - A[0]), -sp.diff(A[2], y)]}
    Om = [pd + A[0] * td, xd + y * pd + A[1] * td, yd - x * pd + A[2] * td]
    v = {2: Om[0], 3: Om[1], 4: Om[2]}
    P = p[1:]
    expected = [
        sum(v[k] * sum(c[k][m] * P[m] for m in range(3)) for k in (2, 3, 4)),
        -td * sum(c[2][m] * P[m] for m in range(3)) + p[3] * Om[1] - p[2] * Om[2],
        -td * sum(c[3][m] * P[m] for m in range(3)) - p[3] * Om[0],
        -td * sum(c[4][m] * P[m] for m in range(3)) + p[2] * Om[0],
    ]
    for got, want in zip(rel, expected):
        assert sp.expand(got - want) == 0


def test_show_and_check_with_a_network_in_a_velocity_constraint(tmp_path, capsys):
    """Issue 14 item 4: the integrability test does not apply to a constraint that calls a network (it crashed)."""
    path = tmp_path / "nn_constraint.phm"
    path.write_text("model NNConstraint\n  param I = 0.4, J = 0.25, m = 1.3\n  coord theta = 0.0, phi = 0.0, x = 0.0, y = 0.0\n"
                    "  nn A: mlp(hidden = [8], act = tanh, out = 2)\n"
                    "  lagrangian I/2*der(theta)^2 + J/2*der(phi)^2 + m/2*(der(x)^2 + der(y)^2)\n"
                    "  constraint der(x) = A(phi)[1]*der(theta)\n  constraint der(y) = A(phi)[2]*der(theta)\nend\n",
                    encoding="utf-8")
    assert main(["show", str(path)]) == 0
    out = capsys.readouterr().out
    assert out.count("not tested: its coefficients call the network `A`") == 2
    assert main(["check", str(path)]) == 0
