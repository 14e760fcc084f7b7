"""models/cart_pole.phm against BENCHMARKS C5.1 (the port-Hamiltonian paper's Eqs. 21–24, Table I) and Part G check 14.

The model is a `lagrangian` (cart + pole, `force F - b*der(x) on x`, in-model feedback
F = −K z), so Eqs. 21–24 written by hand here are an independent cross-check. The model's
state order is (x, theta, der(x), der(theta)); the benchmark's is z = (x, v, theta, omega).
"""

from __future__ import annotations

import re
from pathlib import Path

import casadi as ca
import numpy as np
import pytest
import scipy.linalg

from pdsl.pipeline import compile_model
from pdsl.sim.simulate import simulate, time_grid

PATH = Path(__file__).resolve().parents[2] / "models" / "cart_pole.phm"
TABLE_I = {"M": 0.5, "m": 0.2, "l": 0.3, "g": 9.81, "J": 0.006, "b": 0.1}
K = np.array([1.2501, 2.7612, -16.3099, -3.7814])
PERM = [0, 2, 1, 3]  # model state (x, theta, ẋ, θ̇) -> z = (x, v, theta, omega), and back (an involution)
A_REF = np.array([[0, 1, 0, 0], [0, -0.18182, 2.67545, 0], [0, 0, 0, 1], [0, 0.45455, -31.21364, 0]])
B_REF = np.array([0, 1.81818, 0, -4.54545])


def eqs_21_24(z, F, M, m, l, g, J, b):
    """BENCHMARKS C5.1, Eqs. 21–24 as printed (theta from the downward vertical)."""
    x, v, th, om = z
    s, c = np.sin(th), np.cos(th)
    den = (m * l * c) ** 2 - (m + M) * (J + m * l**2)
    vdot = ((J + m * l**2) * (b * v - F - m * l * om**2 * s) - m**2 * l**2 * g * s * c) / den
    omdot = m * l * (F * c + m * l * om**2 * s * c - b * v * c + (m + M) * g * s) / den
    return np.array([v, vdot, om, omdot])


@pytest.fixture(scope="module")
def closed_loop():
    return compile_model(PATH)


@pytest.fixture(scope="module")
def open_loop():
    """The same file with the feedback law removed: F becomes an exogenous input."""
    text = PATH.read_text()
    text, n = re.subn(r"(?m)^(\s*input F)\s*=.*$", r"\1", text)
    assert n == 1
    return compile_model(PATH, text=text)


def rhs_z(num, z, p, u=()):
    """The model's rhs in benchmark coordinates z."""
    xdot = np.asarray(num.rhs(0.0, np.asarray(z)[PERM], p, list(u))).ravel()
    return xdot[PERM]


def test_parameters_and_state_order(closed_loop):
    num = closed_loop.numeric
    pars = dict(zip(num.p_names, num.p_default))
    for k, v in TABLE_I.items():
        assert pars[k] == v
    np.testing.assert_array_equal([pars[f"K[{i}]"] for i in range(1, 5)], K)
    assert num.x_names == ("x", "theta", "der(x)", "der(theta)")
    assert num.u_names == ()  # F is an in-model feedback law
    np.testing.assert_array_equal(num.x_start, [0.2, 0.1, 0.0, 0.0])


def test_rhs_equals_eqs_21_24_open_loop(open_loop):
    num = open_loop.numeric
    assert num.u_names == ("F",)
    p = num.p_default
    rng = np.random.default_rng(21)
    err = 0.0
    for _ in range(100):
        z = rng.uniform([-1, -2, -np.pi, -5], [1, 2, np.pi, 5])
        F = rng.uniform(-5, 5)
        ref = eqs_21_24(z, F, **TABLE_I)
        err = max(err, np.abs(rhs_z(num, z, p, [F]) - ref).max() / max(1.0, np.abs(ref).max()))
    assert err <= 1e-12, err


def test_rhs_equals_eqs_21_24_closed_loop(closed_loop):
    num = closed_loop.numeric
    p = num.p_default
    rng = np.random.default_rng(22)
    err = 0.0
    for _ in range(100):
        z = rng.uniform([-1, -2, -np.pi, -5], [1, 2, np.pi, 5])
        ref = eqs_21_24(z, -K @ z, **TABLE_I)
        err = max(err, np.abs(rhs_z(num, z, p) - ref).max() / max(1.0, np.abs(ref).max()))
    assert err <= 1e-12, err


def _linearize(num, nu):
    x, u = ca.SX.sym("x", 4), ca.SX.sym("u", nu)
    f = num.rhs(0.0, x, num.p_default, u)
    Jx = ca.Function("Jx", [x, u], [ca.jacobian(f, x), ca.jacobian(f, u)])
    A, B = (np.asarray(v) for v in Jx(np.zeros(4), np.zeros(nu)))
    return A[np.ix_(PERM, PERM)], B[PERM, :]


def _fd_jacobian(f, z0, h=1e-6):
    return np.column_stack([(f(z0 + h * e) - f(z0 - h * e)) / (2 * h) for e in np.eye(len(z0))])


def test_linearization_matches_a_b(open_loop):
    """Check 14: A and B at z = 0, F = 0, to 1e-4 (AD Jacobian and central differences)."""
    num = open_loop.numeric
    A, B = _linearize(num, 1)
    assert np.abs(A - A_REF).max() <= 1e-4
    assert np.abs(B[:, 0] - B_REF).max() <= 1e-4
    A_fd = _fd_jacobian(lambda z: rhs_z(num, z, num.p_default, [0.0]), np.zeros(4))
    B_fd = (rhs_z(num, np.zeros(4), num.p_default, [1e-6]) - rhs_z(num, np.zeros(4), num.p_default, [-1e-6])) / 2e-6
    assert np.abs(A_fd - A_REF).max() <= 1e-4
    assert np.abs(B_fd - B_REF).max() <= 1e-4
    open_eigs = np.sort_complex(np.linalg.eigvals(A))
    np.testing.assert_allclose(open_eigs, np.sort_complex([0, -0.1429, -0.0195 + 5.5864j, -0.0195 - 5.5864j]), atol=1e-4)


def test_lqr_reproduces_k(open_loop):
    """Check 14: LQR(A, B, diag(1.5628, 2.2695, 259.95, 16.503), 1) gives K to 1e-3."""
    A, B = _linearize(open_loop.numeric, 1)
    Q = np.diag([1.5628, 2.2695, 259.95, 16.503])
    P = scipy.linalg.solve_continuous_are(A, B, Q, np.eye(1))
    K_lqr = (B.T @ P).ravel()
    assert np.abs(K_lqr - K).max() <= 1e-3, K_lqr


def test_closed_loop_eigenvalues(closed_loop, open_loop):
    ref = np.sort_complex([-16.2309, -4.6826, -0.7384 + 0.4338j, -0.7384 - 0.4338j])
    A_cl, _ = _linearize(closed_loop.numeric, 0)
    assert np.abs(np.sort_complex(np.linalg.eigvals(A_cl)) - ref).max() <= 1e-3
    A, B = _linearize(open_loop.numeric, 1)
    np.testing.assert_allclose(A_cl, A - B @ K[None, :], atol=1e-12)


@pytest.mark.parametrize(
    "z0,z6",
    [
        ((0.2, 0, 0.1, 0), (-4.860e-3, 3.802e-3, 2.13e-4, -3.2e-5)),
        ((0.2, 0, -0.1, 0), (6.864e-3, -1.0321e-2, -1.025e-3, 7.65e-4)),
    ],
)
def test_reference_trajectory(closed_loop, z0, z6):
    """Check 14: z(6 s) under F = −K z at rtol 1e-10, to 1e-6 absolute (the references' rounding)."""
    num = closed_loop.numeric
    init = dict(zip(num.x_names, np.asarray(z0, dtype=float)[PERM]))
    grid = time_grid(6.0, 0.05)
    res = simulate(num, grid, x0=init, rtol=1e-10)
    assert len(res.t) == 121  # the C5.2 training series: 6 s at 0.05 s
    z_end = res.x[-1][PERM]
    assert np.abs(z_end - np.asarray(z6)).max() <= 1e-6, z_end
    F = -(res.x[:, PERM] @ K)
    if z0[2] > 0:
        assert abs(np.abs(F).max() - 1.381) <= 1e-3  # C5.1: max|F| ≈ 1.381 N (at t = 0)


def test_default_start_is_first_reference(closed_loop):
    num = closed_loop.numeric
    res = simulate(num, time_grid(6.0, 0.05), rtol=1e-10)
    assert np.abs(res.x[-1][PERM] - [-4.860e-3, 3.802e-3, 2.13e-4, -3.2e-5]).max() <= 1e-6
