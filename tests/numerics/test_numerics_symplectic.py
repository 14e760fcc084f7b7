"""Symplecticity of the discrete flow map (BENCHMARKS G check 11): Psi'^T J Psi' = J."""

from __future__ import annotations

import casadi as ca
import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from numerics_systems import SYSTEMS

from pdsl.numerics.fixed_step import make_step

H = 0.1
N_STATES = 100


def _symplectic_defect(system, method: str, **options) -> float:
    """max over 100 seeded states of ||Psi'^T J Psi' - J||_max, Psi' the AD Jacobian of one step."""
    n = 2 * system.d
    step = make_step(system.rhs, method, H, **options)
    t, x, p = ca.MX.sym("t"), ca.MX.sym("x", n), ca.MX.sym("p", system.theta.size)
    jacobian = ca.Function("step_jacobian", [t, x, p], [ca.jacobian(step(t, x, p), x)]).map(N_STATES)
    D = np.array(jacobian(0.0, system.states(N_STATES, seed=1), system.theta))
    J = np.block([[np.zeros((system.d, system.d)), np.eye(system.d)], [-np.eye(system.d), np.zeros((system.d, system.d))]])
    return max(np.abs(D[:, k * n : (k + 1) * n].T @ J @ D[:, k * n : (k + 1) * n] - J).max() for k in range(N_STATES))


@pytest.mark.parametrize("name", list(SYSTEMS))
@pytest.mark.parametrize("method", ["midpoint", "gauss2"])
@pytest.mark.parametrize("options", [{"solver": "newton"}, {"solver": "fpi", "n_iter": 30}], ids=["newton", "fpi"])
def test_implicit_gauss_methods_are_symplectic(name, method, options):
    assert _symplectic_defect(SYSTEMS[name](), method, **options) <= 1e-12


@pytest.mark.parametrize("name", ["double_well", "henon_heiles"])
def test_rk4_is_not_symplectic(name):
    assert _symplectic_defect(SYSTEMS[name](), "rk4") >= 1e-8


@settings(max_examples=25, deadline=None)
@given(
    entries=st.lists(st.floats(-2.0, 2.0), min_size=10, max_size=10),
    h=st.floats(0.01, 0.2),
    y=st.lists(st.floats(-1.0, 1.0), min_size=4, max_size=4),
)
# an entry of 2.8e-160 once gave NaN derivatives (Householder QR underflow in the rootfinder)
@example(entries=[2.8e-160] + [0.0] * 9, h=0.1, y=[1.0, 0.0, 0.0, 0.0])
@example(entries=[0.0] * 9 + [-2.8e-160], h=0.01, y=[0.0, 0.0, 0.0, 1.0])
@example(entries=[1e-300, 2.0, -2.0, 1e-200, 5e-324, 0.0, 1.0, 1e-160, 0.0, 2.0], h=0.2, y=[1.0, -1.0, 0.5, -0.5])
def test_midpoint_on_any_quadratic_hamiltonian(entries, h, y):
    """H = y^T S y / 2 with random symmetric S: the step is symplectic and conserves H (B3.1)."""
    S = np.zeros((4, 4))
    S[np.triu_indices(4)] = entries
    S = S + np.triu(S, 1).T
    J = np.block([[np.zeros((2, 2)), np.eye(2)], [-np.eye(2), np.zeros((2, 2))]])
    t, x, p = ca.SX.sym("t"), ca.SX.sym("x", 4), ca.SX.sym("p", 0)
    f = ca.Function("quadratic", [t, x, p], [ca.mtimes(ca.DM(J @ S), x)])
    M = np.array(ca.Function("map_matrix", [x], [ca.jacobian(make_step(f, "midpoint", h)(0.0, x, []), x)])(np.zeros(4)))
    assert np.abs(M.T @ J @ M - J).max() <= 1e-12
    y0 = np.array(y)
    y1 = M @ y0
    assert abs(y1 @ S @ y1 - y0 @ S @ y0) <= 1e-12 * (1.0 + np.abs(S).sum())
