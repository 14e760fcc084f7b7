"""Generalized-coordinate lowering of the bundled models against hand-derived equations.

* Hamilton's equations of the bundled `hamiltonian` models (BENCHMARKS B2) equal the EOMs
  written by hand, both in the sympy IR (numbers substituted) and in the CasADi ``rhs``.
* The angle double pendulum (A3.1, N = 2) accelerations equal the corrected closed form F.2
  and sympy.physics.mechanics' LagrangesMethod.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import sympy as sp

from pdsl import symbols as S
from pdsl.pipeline import compile_model

MODELS = Path(__file__).resolve().parents[2] / "models"
N_POINTS = 100


def _compiled(name):
    return compile_model(MODELS / f"{name}.phm")


def sympy_rhs(system, x, p, t=0.0):
    """The IR's right-hand side at one point, by substituting numbers (A w = b solved with numpy)."""
    subs = {S.TIME: sp.Float(t)}
    subs.update({s.symbol: sp.Float(v) for s, v in zip(system.states, x)})
    subs.update({q.symbol: sp.Float(v) for q, v in zip(system.params, p)})
    laws = system.input_laws()
    if system.is_explicit():
        return np.array([float(e.rhs.xreplace(laws).xreplace(subs)) for e in system.differential])
    A, b = system.linear_system()
    A = np.array(A.xreplace(laws).xreplace(subs).evalf(), dtype=float)
    b = np.array(b.xreplace(laws).xreplace(subs).evalf(), dtype=float).ravel()
    return np.linalg.solve(A, b)[: len(system.states)]


def casadi_rhs(num, x, p, t=0.0):
    return np.asarray(num.rhs(t, x, p, np.zeros(len(num.u_names)))).ravel()


# ---------------------------------------------------------------- Hamilton's equations (B2)
def _double_well(y, p):
    q, pq = y
    return np.array([pq, q - q**3])


def _coupled(y, p):
    (alpha,) = p
    q, pq = y
    return np.array([pq + alpha * q, -(q + alpha * pq)])


def _henon_heiles(y, p):
    x, yy, px, py = y
    return np.array([px, py, -x - 2 * x * yy, -yy - x**2 + yy**2])


HAND = {
    "double_well": (_double_well, ("q", "p"), 2.0),
    "coupled_oscillator": (_coupled, ("q", "p"), 2.0),
    "henon_heiles": (_henon_heiles, ("x", "y", "px", "py"), 0.5),
}


@pytest.mark.parametrize("name", sorted(HAND))
def test_hamilton_equations_match_hand_derived(name):
    fn, names, box = HAND[name]
    c = _compiled(name)
    num, system = c.numeric, c.system
    assert system.formalism == "hamiltonian"
    assert num.x_names == names
    rng = np.random.default_rng(1)
    err_sym = err_ca = 0.0
    for _ in range(N_POINTS):
        y = rng.uniform(-box, box, len(names))
        ref = fn(y, num.p_default)
        err_sym = max(err_sym, np.abs(sympy_rhs(system, y, num.p_default) - ref).max())
        err_ca = max(err_ca, np.abs(casadi_rhs(num, y, num.p_default) - ref).max())
    assert err_sym <= 1e-12, err_sym
    assert err_ca <= 1e-12, err_ca


def test_coupled_oscillator_alpha_is_a_parameter():
    c = _compiled("coupled_oscillator")
    assert c.numeric.p_names == ("alpha",) and c.numeric.p_default[0] == 0.5
    y = np.array([0.3, -0.7])
    for alpha in (-0.9, 0.0, 0.25):
        np.testing.assert_allclose(casadi_rhs(c.numeric, y, [alpha]), _coupled(y, [alpha]), rtol=0, atol=1e-15)


def test_hamiltonian_start_values_and_energy():
    starts = {"double_well": [1.2, 0.3], "coupled_oscillator": [1.0, 0.0], "henon_heiles": [0.1, -0.2, 0.3, 0.2]}
    energies = {"double_well": -0.1566, "coupled_oscillator": 0.5, "henon_heiles": 0.065 + 0.025 - 0.002 + 0.008 / 3}
    for name, x0 in starts.items():
        num = _compiled(name).numeric
        np.testing.assert_array_equal(num.x_start, x0)
        E = float(num.energy(0, num.x_start, num.p_default, []))
        assert abs(E - energies[name]) <= 1e-14, (name, E)


def test_hamiltonian_output_reads_der_q_as_dh_dp():
    """`output w = der(q)` in Hamilton's form is ∂H/∂p at the state (it was an internal error: der(q) is no state
    there); checked against the hand-derived q̇ of the double pendulum's closed form F.2 (A3.1)."""
    text = """
model DoublePendulumH
  param m1 = 1.1722, m2 = 1.0391, l1 = 1.0359, l2 = 1.0822, g = 9.81
  coord q1, q2
  momentum p1, p2
  hamiltonian ((m2*l2^2*p1^2 + (m1 + m2)*l1^2*p2^2 - 2*m2*l1*l2*p1*p2*cos(q1 - q2))
    / (2*m2*l1^2*l2^2*(m1 + m2*sin(q1 - q2)^2)) - (m1 + m2)*g*l1*cos(q1) - m2*g*l2*cos(q2))
  output w1 = der(q1)
  output w2 = der(q2)
  output f2 = der(p2)
end
"""
    num = compile_model("double_pendulum_h.phm", text=text).numeric
    m, l, g = (1.1722, 1.0391), (1.0359, 1.0822), 9.81
    rng = np.random.default_rng(3)
    for _ in range(20):
        x = rng.normal(size=4) * [1, 1, 3, 3]
        y = np.asarray(num.outputs(0, x, [], num.p_default, [])).ravel()
        qdot, pdot = closed_form_f2(x[:2], x[2:], m, l, g)
        np.testing.assert_allclose(y, [*qdot, pdot[1]], rtol=1e-12, atol=1e-12)


# ---------------------------------------------------------------- double pendulum (A3.1, N = 2)
def closed_form_f2(q, p, m, l, g):
    """A3.1 F.2, the corrected (VERIFIED) form: (q_dot, p_dot) from (q, p)."""
    q1, q2 = q
    p1, p2 = p
    m1, m2 = m
    l1, l2 = l
    d = q1 - q2
    D = m1 + m2 * np.sin(d) ** 2
    q1d = (l2 * p1 - l1 * p2 * np.cos(d)) / (l1**2 * l2 * D)
    q2d = (-m2 * l2 * p1 * np.cos(d) + (m1 + m2) * l1 * p2) / (m2 * l1 * l2**2 * D)
    C1 = p1 * p2 * np.sin(d) / (l1 * l2 * D)
    C2 = (m2 * l2**2 * p1**2 + (m1 + m2) * l1**2 * p2**2 - 2 * m2 * l1 * l2 * p1 * p2 * np.cos(d)) * np.sin(2 * d) / (
        2 * l1**2 * l2**2 * D**2
    )
    p1d = -(m1 + m2) * g * l1 * np.sin(q1) - C1 + C2
    p2d = -m2 * g * l2 * np.sin(q2) + C1 - C2
    return np.array([q1d, q2d]), np.array([p1d, p2d])


def mass_matrix(q, m, l):
    """M_ij = l_i l_j cos(q_i − q_j) Σ_{k ≥ max(i,j)} m_k."""
    n = len(q)
    return np.array([[l[i] * l[j] * np.cos(q[i] - q[j]) * sum(m[max(i, j):]) for j in range(n)] for i in range(n)])


def mass_matrix_dot(q, qd, m, l):
    n = len(q)
    return np.array(
        [[-l[i] * l[j] * np.sin(q[i] - q[j]) * (qd[i] - qd[j]) * sum(m[max(i, j):]) for j in range(n)] for i in range(n)]
    )


def accelerations_from_f2(q, qd, m, l, g):
    """p = M(q) q̇; the closed form gives ṗ; q̈ = M⁻¹(ṗ − Ṁ q̇)."""
    M = mass_matrix(q, m, l)
    p = M @ qd
    qd_back, pd = closed_form_f2(q, p, m, l, g)
    np.testing.assert_allclose(qd_back, qd, rtol=1e-12, atol=1e-12)  # F.2's q̇ inverts p = M q̇
    return np.linalg.solve(M, pd - mass_matrix_dot(q, qd, m, l) @ qd)


@pytest.fixture(scope="module")
def double_pendulum():
    return _compiled("double_pendulum")


def _pendulum_states(n, seed):
    rng = np.random.default_rng(seed)
    return rng.uniform(-np.pi, np.pi, (n, 2)), rng.normal(0.0, 2.0, (n, 2))


def test_double_pendulum_uses_a31_values(double_pendulum):
    num = double_pendulum.numeric
    assert num.x_names == ("q1", "q2", "der(q1)", "der(q2)")
    assert dict(zip(num.p_names, num.p_default)) == {"m1": 1.1722, "m2": 1.0391, "l1": 1.0359, "l2": 1.0822, "g": 9.81}


def test_double_pendulum_matches_closed_form_f2(double_pendulum):
    num, system = double_pendulum.numeric, double_pendulum.system
    pars = dict(zip(num.p_names, num.p_default))
    m, l, g = (pars["m1"], pars["m2"]), (pars["l1"], pars["l2"]), pars["g"]
    Q, QD = _pendulum_states(N_POINTS, seed=2)
    err_ca = err_sym = 0.0
    for k, (q, qd) in enumerate(zip(Q, QD)):
        ref = np.concatenate([qd, accelerations_from_f2(q, qd, m, l, g)])
        x = np.concatenate([q, qd])
        scale = max(1.0, np.abs(ref).max())
        err_ca = max(err_ca, np.abs(casadi_rhs(num, x, num.p_default) - ref).max() / scale)
        if k < 20:  # sympy substitution is slower; 20 points suffice for the IR itself
            err_sym = max(err_sym, np.abs(sympy_rhs(system, x, num.p_default) - ref).max() / scale)
    assert err_ca <= 1e-10, err_ca
    assert err_sym <= 1e-10, err_sym


def test_double_pendulum_other_parameters(double_pendulum):
    """The closed form holds for any masses and lengths, not just the defaults."""
    num = double_pendulum.numeric
    rng = np.random.default_rng(3)
    for _ in range(20):
        m, l, g = rng.uniform(0.3, 2.0, 2), rng.uniform(0.3, 2.0, 2), 9.81
        p = np.array([m[0], m[1], l[0], l[1], g])
        q, qd = rng.uniform(-np.pi, np.pi, 2), rng.normal(0, 2, 2)
        ref = accelerations_from_f2(q, qd, m, l, g)
        got = casadi_rhs(num, np.concatenate([q, qd]), p)[2:]
        assert np.abs(got - ref).max() <= 1e-10 * max(1.0, np.abs(ref).max())


def test_double_pendulum_matches_lagranges_method(double_pendulum):
    """An independent derivation: sympy.physics.mechanics from the Cartesian point positions."""
    from sympy.physics.mechanics import LagrangesMethod, dynamicsymbols

    q1, q2 = dynamicsymbols("q1 q2")
    t = dynamicsymbols._t
    m1, m2, l1, l2, g = sp.symbols("m1 m2 l1 l2 g", positive=True)
    x1, y1 = l1 * sp.sin(q1), -l1 * sp.cos(q1)
    x2, y2 = x1 + l2 * sp.sin(q2), y1 - l2 * sp.cos(q2)
    T = m1 / 2 * (x1.diff(t) ** 2 + y1.diff(t) ** 2) + m2 / 2 * (x2.diff(t) ** 2 + y2.diff(t) ** 2)
    V = m1 * g * y1 + m2 * g * y2
    lm = LagrangesMethod(T - V, [q1, q2])
    lm.form_lagranges_equations()
    u1, u2 = sp.symbols("u1 u2")
    a1, a2 = sp.symbols("a1 a2")
    rep = {q1.diff(t, 2): a1, q2.diff(t, 2): a2, q1.diff(t): u1, q2.diff(t): u2}
    Mm = lm.mass_matrix.subs(rep)
    f = lm.forcing.subs(rep)
    qs1, qs2 = sp.symbols("qs1 qs2")
    Mm, f = Mm.subs({q1: qs1, q2: qs2}), f.subs({q1: qs1, q2: qs2})
    args = (qs1, qs2, u1, u2, m1, m2, l1, l2, g)
    Mf, ff = sp.lambdify(args, Mm, "numpy"), sp.lambdify(args, f, "numpy")
    num = double_pendulum.numeric
    Q, QD = _pendulum_states(N_POINTS, seed=4)
    err = 0.0
    for q, qd in zip(Q, QD):
        a = (*q, *qd, *num.p_default)
        ref = np.linalg.solve(np.array(Mf(*a), dtype=float), np.array(ff(*a), dtype=float).ravel())
        got = casadi_rhs(num, np.concatenate([q, qd]), num.p_default)[2:]
        err = max(err, np.abs(got - ref).max() / max(1.0, np.abs(ref).max()))
    assert err <= 1e-10, err


def test_double_pendulum_energy_is_the_hamiltonian(double_pendulum):
    """E = ½ q̇ᵀ M q̇ − g Σ_i Σ_{k≤i} m_i l_k cos q_k (A3.1)."""
    num = double_pendulum.numeric
    m1, m2, l1, l2, g = num.p_default
    Q, QD = _pendulum_states(N_POINTS, seed=5)
    for q, qd in zip(Q, QD):
        M = mass_matrix(q, (m1, m2), (l1, l2))
        ref = 0.5 * qd @ M @ qd - g * (m1 * l1 * np.cos(q[0]) + m2 * (l1 * np.cos(q[0]) + l2 * np.cos(q[1])))
        got = float(num.energy(0, np.concatenate([q, qd]), num.p_default, []))
        assert abs(got - ref) <= 1e-12 * max(1.0, abs(ref))


# ---------------------------------------------------------------- inputs in a lagrangian
def test_input_in_momenta_is_refused():
    """d/dt ∂L/∂q̇ would need dF/dt: refused with a located error instead of a silently wrong ẍ."""
    from pdsl.diagnostics import PdslError

    text = """
model MovingFrame
  param m = 1.0
  input F = sin(t)
  coord x
  lagrangian m/2*(der(x) - F)^2
end
"""
    with pytest.raises(PdslError) as err:
        compile_model("frame.phm", text=text)
    assert "NotYetSupported" in str(err.value) and "`F`" in str(err.value)


def test_input_in_potential_and_force_is_fine():
    text = """
model Driven
  param m = 2.0, k = 3.0
  input F
  input G = 0.5*x
  coord x
  lagrangian m/2*der(x)^2 - k/2*x^2 + F*x
  force -G on x
end
"""
    num = compile_model("driven.phm", text=text).numeric
    assert num.u_names == ("F",)
    xdot = np.asarray(num.rhs(0.0, [0.4, 0.1], num.p_default, [1.5])).ravel()
    np.testing.assert_allclose(xdot, [0.1, (-3.0 * 0.4 + 1.5 - 0.5 * 0.4) / 2.0], rtol=0, atol=1e-15)
