"""Symplecticity of the discrete flow map (BENCHMARKS G check 11): Psi'^T J Psi' = J."""

from __future__ import annotations

import casadi as ca
import numpy as np
import pytest
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
