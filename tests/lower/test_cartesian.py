"""Cartesian mechanics with explicit constraints (BENCHMARKS Part A; Part G checks 1, 2, 4, 6)."""

from __future__ import annotations

import casadi as ca
import numpy as np
import pytest
import sympy as sp
from scipy.spatial.transform import Rotation

from pdsl.backend.functions import to_casadi
from pdsl.backend.sympy_to_casadi import Converter
from pdsl.diagnostics import PdslError
from pdsl.lower.cartesian import lower_cartesian, node_mass_inverse, node_mass_matrix
from pdsl.pipeline import load_models
from pdsl.sim.simulate import simulate, time_grid

G = 9.81
# A3.1 masses and lengths, top -> bottom
PENDULA = {
    1: ([1.0391], [1.1722]),
    2: ([1.1722, 1.0391], [1.0359, 1.0822]),
    3: ([1.0822, 1.1722, 1.0391], [1.1167, 0.9389, 1.0359]),
    5: ([0.9389, 1.0359, 1.0822, 1.1722, 1.0391], [0.9068, 1.3709, 1.3134, 0.9501, 1.1167]),
}

GYROSCOPE = """
model Gyroscope "spinning top on a fixed tip (A3.4)"
  space 3
  param m = 0.1, g = 9.81
  body top = rigid(dim = 3, mass = m, moments = [0.241378, 0.241378, 0.036942])
  joint ground, top.at([0, 0, -0.22173])
  gravity g
end
"""

ROTOR = """
model RigidRotor "free body (A3.5)"
  space 3
  body r = rigid(dim = 3, mass = 0.1, inertia = [0.012017, 0.0024094, 0.0102049])
end
"""


def chain_text(n: int) -> str:
    m, l = PENDULA[n]
    return f"""
model Chain "N-pendulum (A3.1)"
  space 2
  const N = {n}
  param m[1..N] = {m if n > 1 else m[0]}, l[1..N] = {l if n > 1 else l[0]}, g = {G}
  body b[1..N] = point(mass = m[i])
  link ground, b[1], length = l[1]
  link b[i-1], b[i], length = l[i] for i in 2..N
  gravity g
end
"""


def compile_text(text: str, formulation: str):
    model = load_models("test.phm", text=text)[0]
    system = lower_cartesian(model, formulation)
    return system, to_casadi(system)


def rhs(num, x) -> np.ndarray:
    return np.asarray(num.rhs(0.0, x, num.p_default, np.zeros(0))).ravel()


# ------------------------------------------------------------------ reference: angle form (Eq. 2)
def angle_accelerations(q, qd, m, l) -> np.ndarray:
    """q̈ of the N-pendulum from M(q) q̈ = −Σ_j l_i l_j μ_ij sin(q_i − q_j) q̇_j² − g l_i sin q_i Σ_{k≥i} m_k."""
    n = len(q)
    mu = np.array([[sum(m[max(i, j):]) for j in range(n)] for i in range(n)])
    L = np.outer(l, l)
    M = L * np.cos(q[:, None] - q[None, :]) * mu
    f = -(L * np.sin(q[:, None] - q[None, :]) * mu) @ qd**2 - G * np.asarray(l) * np.sin(q) * mu.diagonal()
    return np.linalg.solve(M, f)


def angle_to_cartesian(q, qd, qdd, l):
    """x_j = Σ_{k≤j} l_k sin q_k, y_j = −Σ l_k cos q_k, and their first two time derivatives (A3.1)."""
    l = np.asarray(l)
    c = lambda v: np.cumsum(v)  # noqa: E731
    pos = np.column_stack([c(l * np.sin(q)), c(-l * np.cos(q))])
    vel = np.column_stack([c(l * np.cos(q) * qd), c(l * np.sin(q) * qd)])
    acc = np.column_stack([c(l * (np.cos(q) * qdd - np.sin(q) * qd**2)), c(l * (np.sin(q) * qdd + np.cos(q) * qd**2))])
    return pos.ravel(), vel.ravel(), acc.ravel()


def point_mass_vector(m) -> np.ndarray:
    return np.repeat(m, 2)


# ------------------------------------------------------------------ G check 1
@pytest.mark.parametrize("n", sorted(PENDULA))
def test_n_pendulum_matches_angle_form(n):
    m, l = PENDULA[n]
    _, lag = compile_text(chain_text(n), "lagrangian")
    _, ham = compile_text(chain_text(n), "hamiltonian")
    mvec = point_mass_vector(m)
    rng = np.random.default_rng(n)
    worst = 0.0
    for _ in range(20):
        q, qd = rng.normal(size=n), rng.normal(size=n)
        x, v, a_ref = angle_to_cartesian(q, qd, angle_accelerations(q, qd, m, l), l)
        a_lag = rhs(lag, np.concatenate([x, v]))[2 * n :]
        a_ham = rhs(ham, np.concatenate([x, mvec * v]))[2 * n :] / mvec
        for a in (a_lag, a_ham):
            worst = max(worst, np.linalg.norm(a - a_ref) / np.linalg.norm(a_ref))
    assert worst <= 1e-10


# ------------------------------------------------------------------ G check 2
def projection_data(system, num, z):
    """P = I − B (DΨ B)⁻¹ DΨ, B = J DΨᵀ, Ψ = [Φ; DΦ ẋ(z)] (Eq. 6), built independently of the lowering.

    Φ comes from ``num.constraints`` and ẋ = ∂H/∂p from ``num.energy`` by CasADi AD; returns P,
    DΨ and P J∇H (the Eq. 6 vector field the lowering must reproduce).
    """
    n2 = num.nx
    n = n2 // 2
    zs = ca.SX.sym("z", n2)
    p = ca.DM(num.p_default)
    H = num.energy(0, zs, p, ca.DM.zeros(0, 1))
    grad = ca.gradient(H, zs)
    phi = num.constraints(0, zs, p)
    psi = ca.vertcat(phi, ca.jtimes(phi, zs[:n], grad[n:]))
    f = ca.Function("f", [zs], [ca.jacobian(psi, zs), grad])
    DPsi, g = (np.asarray(v) for v in f(z))
    J = np.block([[np.zeros((n, n)), np.eye(n)], [-np.eye(n), np.zeros((n, n))]])
    B = J @ DPsi.T
    P = np.eye(n2) - B @ np.linalg.solve(DPsi @ B, DPsi)
    return P, DPsi, P @ J @ g.ravel()


def rigid_state(rng, pivot=None):
    """Random on-manifold node positions/velocities of one Obj3D: x_i = x_cm + R e_i (A2.2)."""
    R = Rotation.random(random_state=rng.integers(1 << 31)).as_matrix()
    omega = rng.normal(size=3) * 2
    Rdot = np.array([[0, -omega[2], omega[1]], [omega[2], 0, -omega[0]], [-omega[1], omega[0], 0]]) @ R
    xcm, vcm = rng.normal(size=3), rng.normal(size=3)
    if pivot is not None:  # put the body point `pivot` at the origin, at rest
        xcm, vcm = -R @ pivot, -Rdot @ pivot
    X = np.column_stack([xcm] + [xcm + R[:, k] for k in range(3)])
    Xd = np.column_stack([vcm] + [vcm + Rdot[:, k] for k in range(3)])
    return X.T.ravel(), Xd.T.ravel()


def rigid_mass(m, moments) -> np.ndarray:
    return np.kron(np.asarray(node_mass_matrix(m, moments), dtype=float), np.eye(3))


def states_pendulum(n, rng):
    m, l = PENDULA[n]
    q, qd = rng.normal(size=n), rng.normal(size=n)
    x, v, _ = angle_to_cartesian(q, qd, np.zeros(n), l)
    return x, v, np.diag(point_mass_vector(m))


# name -> (model, DOF, state sampler, Eq. 6 ≡ Eq. 7 tolerance). The A3.5 rotor has λ₁ ≈ 0.003, so M
# (cond ≈ 400); the multipliers are eliminated by an LDLᵀ of DΦ M⁻¹ DΦᵀ (no dense symbolic QR), which keeps
# the rhs at ~1e-16 of a 40-digit reference (the former SX QR of the saddle-point matrix gave 5e-10 here).
CASES = {
    "pendulum-2": (chain_text(2), 2, lambda rng: states_pendulum(2, rng), 1e-10),
    "pendulum-5": (chain_text(5), 5, lambda rng: states_pendulum(5, rng), 1e-10),
    "gyroscope": (GYROSCOPE, 3, lambda rng: (*rigid_state(rng, np.array([0, 0, -0.22173])), rigid_mass(0.1, (0.241378, 0.241378, 0.036942))), 1e-10),
    "rotor": (ROTOR, 6, None, 1e-10),
}


def rotor_case(rng):
    model = load_models("test.phm", text=ROTOR)[0]
    moments = tuple(float(v) for v in model.bodies[0].moments)
    return (*rigid_state(rng), rigid_mass(0.1, moments))


@pytest.mark.parametrize("case", sorted(CASES))
def test_eq6_equals_eq7_and_projector(case):
    text, dof, sample, tol = CASES[case]
    sample = sample or rotor_case
    hsys, ham = compile_text(text, "hamiltonian")
    lsys, lag = compile_text(text, "lagrangian")
    nd = len(hsys.states) // 2
    assert nd - len(hsys.constraints) == dof
    assert lsys.formalism == "cartesian-lagrangian" and hsys.formalism == "cartesian-hamiltonian"
    rng = np.random.default_rng(7)
    err_eq, err_p, err_psi, err_phi, err_ref = 0.0, 0.0, 0.0, 0.0, 0.0
    for _ in range(10):
        x, v, M = sample(rng)
        z = np.concatenate([x, M @ v])
        err_phi = max(err_phi, np.abs(np.asarray(ham.constraints(0, np.concatenate([x, M @ v]), ham.p_default))).max())
        zdot = rhs(ham, z)
        a_ham = np.linalg.solve(M, zdot[nd:])
        a_lag = rhs(lag, np.concatenate([x, v]))[nd:]
        err_eq = max(err_eq, np.linalg.norm(a_ham - a_lag) / np.linalg.norm(a_lag))
        P, DPsi, zdot_ref = projection_data(hsys, ham, z)
        err_p = max(err_p, np.abs(P @ P - P).max())
        err_psi = max(err_psi, np.abs(DPsi @ zdot).max())
        err_ref = max(err_ref, np.linalg.norm(zdot - zdot_ref) / np.linalg.norm(zdot_ref))
    assert err_phi <= 1e-9  # the sampled states are on the manifold
    assert err_eq <= tol
    assert err_p <= 1e-12
    assert err_psi <= 1e-10
    assert err_ref <= tol  # the lowered Eq. 6 field is P J∇H


# ------------------------------------------------------------------ G check 4
@pytest.mark.parametrize("d", [1, 2, 3])
def test_objnd_mass_matrix(d):
    rng = np.random.default_rng(d)
    for _ in range(5):
        m, lam = rng.uniform(0.1, 3), rng.uniform(0.05, 2, size=d)
        M = np.asarray(node_mass_matrix(m, lam), dtype=float)
        Minv = np.asarray(node_mass_inverse(m, lam), dtype=float)
        assert np.abs(M @ Minv - np.eye(d + 1)).max() <= 1e-12
        assert np.abs(np.ones(d + 1) @ M - m * np.eye(d + 1)[0]).max() <= 1e-12


def test_objnd_kinetic_energy_of_rigid_motion():
    """Tr(Ẋ M Ẋᵀ)/2 = ½m|ẋ_cm|² + ½ωᵀIω with I = m(Tr Σ·I − Σ) (A2.1)."""
    rng = np.random.default_rng(3)
    m, lam = 0.7, np.array([0.3, 1.1, 0.6])
    M = np.asarray(node_mass_matrix(m, lam), dtype=float)
    inertia = m * (lam.sum() * np.eye(3) - np.diag(lam))
    for _ in range(10):
        R = Rotation.random(random_state=rng.integers(1 << 31)).as_matrix()
        w_body, vcm = rng.normal(size=3), rng.normal(size=3)
        Rdot = R @ np.array([[0, -w_body[2], w_body[1]], [w_body[2], 0, -w_body[0]], [-w_body[1], w_body[0], 0]])
        Xd = np.column_stack([vcm] + [vcm + Rdot[:, k] for k in range(3)])
        T = np.trace(Xd @ M @ Xd.T) / 2
        assert abs(T - (m * vcm @ vcm / 2 + w_body @ inertia @ w_body / 2)) <= 1e-12 * max(1.0, T)


# ------------------------------------------------------------------ simulation
@pytest.mark.parametrize("formulation", ["lagrangian", "hamiltonian"])
def test_double_pendulum_simulation_keeps_constraints_and_energy(formulation):
    m, l = PENDULA[2]
    _, num = compile_text(chain_text(2), formulation)
    q, qd = np.array([1.0, -0.5]), np.array([0.3, 0.8])
    x, v, _ = angle_to_cartesian(q, qd, np.zeros(2), l)
    second = v if formulation == "lagrangian" else point_mass_vector(m) * v
    x0 = dict(zip(num.x_names, np.concatenate([x, second])))
    res = simulate(num, time_grid(3.0, 0.03), x0=x0, rtol=1e-10)
    assert res.constraint_rms.max() <= 1e-6
    assert np.abs(res.energy - res.energy[0]).max() <= 1e-6 * abs(res.energy[0])


# ------------------------------------------------------------------ G check 6 (Dzhanibekov)
def test_rigid_rotor_flips_about_intermediate_axis():
    """Spin 5 rad/s about body z (intermediate axis) with 1e-3 perturbations: ω_z flips at t ≈ 3.54 s."""
    _, num = compile_text(ROTOR, "lagrangian")
    w_body = np.array([1e-3, 1e-3, 5.0])
    R = np.eye(3)
    Rdot = R @ np.array([[0, -w_body[2], w_body[1]], [w_body[2], 0, -w_body[0]], [-w_body[1], w_body[0], 0]])
    X = np.column_stack([np.zeros(3)] + [R[:, k] for k in range(3)])
    Xd = np.column_stack([np.zeros(3)] + [Rdot[:, k] for k in range(3)])
    x0 = dict(zip(num.x_names, np.concatenate([X.T.ravel(), Xd.T.ravel()])))
    res = simulate(num, time_grid(5.0, 0.01), x0=x0, rtol=1e-11, atol=1e-15)
    delta = np.vstack([-np.ones(3), np.eye(3)])
    wz = []
    for row in res.x:
        Xt, Xdt = row[:12].reshape(4, 3).T, row[12:].reshape(4, 3).T
        W = (Xt @ delta).T @ (Xdt @ delta)  # Rᵀ Ṙ = [ω_body]×
        wz.append(W[1, 0])
    wz = np.array(wz)
    t_flip = res.t[np.argmax(wz < 0)]
    assert abs(t_flip - 3.54) <= 0.1
    # G6: 1e-9 relative. CVODES (Adams, rtol 1e-11) gives 1.1e-9 with the default atol 1e-13 (6.8e-10 for the
    # bundled rigid_rotor.phm moments), limited by the integrator: the rhs is exact to ~1e-16
    assert np.abs(res.energy - res.energy[0]).max() <= 1e-9 * res.energy[0]


# ------------------------------------------------------------------ diagnostics
def _error(text: str) -> PdslError:
    with pytest.raises(PdslError) as info:
        lower_cartesian(load_models("test.phm", text=text)[0], "hamiltonian")
    return info.value


BASE = """
model M
  space 2
  body b1 = point(mass = 1)
  body b2 = point(mass = 1)
{extra}
end
"""


def test_link_without_length_is_located():
    err = _error(BASE.format(extra="  link ground, b1"))
    assert err.codes == ["MissingArgument"] and err.diagnostics[0].span.line == 6


def test_over_constrained_names_both_counts():
    extra = "\n".join(["  joint ground, b1", "  joint b1, b2", "  link ground, b2, length = 1"])
    err = _error(BASE.format(extra=extra))
    assert err.codes == ["OverConstrained"]
    assert "5 constraint equations for 4 Cartesian coordinates" in str(err)


def test_duplicate_link_is_singular():
    extra = "\n".join(["  link ground, b1, length = 1", "  link b1, b2, length = 1", "  link ground, b1, length = 1"])
    err = _error(BASE.format(extra=extra))
    assert set(err.codes) == {"SingularConstraints"}
    assert {d.span.line for d in err.diagnostics} == {6, 8}


def test_hinge_is_lowered_with_one_degree_of_freedom():
    """A hinge = joint (3 rows) + 2 independent axis rows (A2.5); tests/lower/test_hinge.py checks it in depth."""
    text = """
model H
  space 3
  body r = rigid(dim = 3, mass = 1, moments = [1, 1, 1])
  hinge ground, r, axis = [0, 0, 1]
end
"""
    model = load_models("test.phm", text=text)[0]
    system = lower_cartesian(model, "hamiltonian")
    assert len(system.states) // 2 - len(system.constraints) == 1
    assert [c.label for c in system.constraints][-2:] == ["hinge ground–r (axis, across 1)", "hinge ground–r (axis, across 2)"]


# ------------------------------------------------------------------ the lowered linear system
def _numeric(expr_matrix, system, z, params=None):
    values = {s.symbol: sp.Float(repr(float(v)), 30) for s, v in zip(system.states, z)}
    values.update({p.symbol: sp.Float(repr(float(p.default)), 30) for p in system.params})
    return expr_matrix.xreplace(values)


@pytest.mark.parametrize("text", [chain_text(3), GYROSCOPE, ROTOR], ids=["pendulum-3", "gyroscope", "rotor"])
@pytest.mark.parametrize("formulation", ["lagrangian", "hamiltonian"])
def test_linear_system_readoff_equals_rows_and_is_triangular(text, formulation):
    """CartesianSystem.linear_system reads A, b off the rows: A·w − b must equal Σ(lhs − rhs) for any w
    (both sides converted to CasADi, which keeps sympy's sharing), and A must be triangular after a
    permutation, so that the backend's solve is a substitution."""
    system, num = compile_text(text, formulation)
    A, b = system.linear_system()
    zs, ws = ca.SX.sym("z", num.nx), ca.SX.sym("w", len(system.unknowns))
    symbols = {s.symbol: zs[i] for i, s in enumerate(system.states)}
    symbols.update({u: ws[i] for i, u in enumerate(system.unknowns)})
    symbols.update({p.symbol: p.default for p in system.params})
    conv = Converter(symbols)
    residual = ca.vertcat(*[conv(e.lhs - e.rhs) for e in system.differential])
    f = ca.Function("f", [zs, ws], [residual, ca.mtimes(conv(A), ws) - conv(b)])
    rng = np.random.default_rng(1)
    for _ in range(3):
        r1, r2 = (np.asarray(v).ravel() for v in f(rng.normal(size=num.nx), rng.normal(size=len(system.unknowns))))
        assert np.abs(r1 - r2).max() <= 1e-12 * max(1.0, np.abs(r1).max())
    # singleton-row elimination succeeds <=> the sparsity pattern is permutable to triangular
    rows = [set(j for j in range(A.shape[1]) if A[i, j] != 0) for i in range(A.shape[0])]
    solved: set[int] = set()
    remaining = set(range(len(rows)))
    while remaining:
        ready = [i for i in remaining if len(rows[i] - solved) == 1]
        assert ready, "the lowered system is not triangular after permutation"
        for i in ready:
            solved |= rows[i]
            remaining.discard(i)
    assert len(solved) == A.shape[1]


@pytest.mark.slow
def test_rotor_rhs_matches_high_precision_reference():
    """The A3.5 rotor (λ₁ ≈ 0.003) in both forms vs A w = b solved in 40-digit arithmetic."""
    import mpmath

    from pdsl.lower.ir import SymbolicSystem

    model = load_models("test.phm", text=ROTOR)[0]
    moments = tuple(float(v) for v in model.bodies[0].moments)
    M = rigid_mass(0.1, moments)
    rng = np.random.default_rng(3)
    for formulation in ("lagrangian", "hamiltonian"):
        system, num = compile_text(ROTOR, formulation)
        A, b = SymbolicSystem.linear_system(system)
        with mpmath.workdps(40):
            for _ in range(3):
                x, v = rigid_state(rng)
                z = np.concatenate([x, v if formulation == "lagrangian" else M @ v])
                An = mpmath.matrix([[mpmath.mpf(str(e)) for e in row] for row in _numeric(A, system, z).evalf(40).tolist()])
                bn = mpmath.matrix([mpmath.mpf(str(e)) for e in _numeric(b, system, z).evalf(40)])
                w = mpmath.lu_solve(An, bn)
                ref = np.array([float(w[i]) for i in range(num.nx)])
                assert np.linalg.norm(rhs(num, z) - ref) <= 1e-14 * np.linalg.norm(ref)


@pytest.mark.parametrize("kind", ["coord", "momentum"])
def test_generalized_variables_in_a_body_model_are_located(kind, tmp_path, capsys):
    """Found by the 30-minute fuzz campaign (issue 26): `momentum k, c` used as spring and damper constants in a
    model of bodies ended in an internal error (no numeric value bound to `c`)."""
    from pdsl.cli.main import main

    path = tmp_path / "hanging.phm"
    path.write_text(f"""model Hanging "one point mass on a spring"
  space 2
  {kind} k = 2.0, c = 0.1
  input F
  body b = point(mass = 1)
  spring ground, b, k = k, rest = 1
  damper ground, b, c = c
  gravity 9.81
end
""")
    assert main(["simulate", str(path), "--t-end", "0.1", "--input", "F=0", "-o", str(tmp_path / "x.csv")]) == 2
    err = capsys.readouterr().err
    assert f"{path}:3:" in err and "error[MixedFormalism]" in err and f"declared `{kind}`" in err
