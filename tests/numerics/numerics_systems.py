"""Test systems of BENCHMARKS B2 and the B1 MLP Hamiltonian, built with plain CasADi.

Every system is Hamiltonian with state y = (q, p) and right-hand side
f(t, y, theta) = (dH/dp, -dH/dq) (B1, the corrected (BENCHMARKS flags the printed sign) form of Eq. 1).
"""

from __future__ import annotations

from dataclasses import dataclass

import casadi as ca
import numpy as np


@dataclass(frozen=True, slots=True)
class HamiltonianSystem:
    """``rhs(t, y, theta) -> ydot`` and ``energy(y, theta) -> H``; ``box`` is the sampling half-width."""

    name: str
    d: int
    rhs: ca.Function
    energy: ca.Function
    box: float
    theta: np.ndarray

    def states(self, n: int, seed: int) -> np.ndarray:
        """n seeded random states, uniform in [-box, box]^(2d), as columns (2d x n)."""
        return np.random.default_rng(seed).uniform(-self.box, self.box, (2 * self.d, n))


def _hamiltonian_system(name, d, H_of, box, theta=(), sym=ca.SX.sym) -> HamiltonianSystem:
    t, y, th = sym("t"), sym("y", 2 * d), sym("theta", len(theta))
    q, p = y[:d], y[d:]
    H = H_of(q, p, th)
    dH = ca.gradient(H, y)
    rhs = ca.Function(name, [t, y, th], [ca.vertcat(dH[d:], -dH[:d])], ["t", "x", "p"], ["xdot"])
    energy = ca.Function(f"{name}_H", [y, th], [H])
    return HamiltonianSystem(name, d, rhs, energy, box, np.asarray(theta, dtype=float))


def double_well() -> HamiltonianSystem:
    """Eq. 18: H = p^2/2 + q^4/4 - q^2/2."""
    return _hamiltonian_system("double_well", 1, lambda q, p, th: p**2 / 2 + q**4 / 4 - q**2 / 2, 2.0)


def double_well_with_parameters(a: float = 1.0, b: float = 1.0) -> HamiltonianSystem:
    """Eq. 18 with parameters theta = (a, b): H = p^2/2 + b q^4/4 - a q^2/2."""
    H = lambda q, p, th: p**2 / 2 + th[1] * q**4 / 4 - th[0] * q**2 / 2  # noqa: E731
    return _hamiltonian_system("double_well_ab", 1, H, 2.0, (a, b))


def coupled_oscillator(alpha: float = 0.5) -> HamiltonianSystem:
    """Eq. 19: H = p^2/2 + q^2/2 + alpha p q (non-separable, linear)."""
    return _hamiltonian_system("coupled_oscillator", 1, lambda q, p, th: p**2 / 2 + q**2 / 2 + alpha * p * q, 2.0)


def henon_heiles() -> HamiltonianSystem:
    """Eq. 20: H = |p|^2/2 + |q|^2/2 + qx^2 qy - qy^3/3."""
    H = lambda q, p, th: ca.sumsqr(p) / 2 + ca.sumsqr(q) / 2 + q[0] ** 2 * q[1] - q[1] ** 3 / 3  # noqa: E731
    return _hamiltonian_system("henon_heiles", 2, H, 0.3)


def mlp_weight_count(sizes: tuple[int, ...]) -> int:
    """Weights of an MLP with biases on every layer except the last (BENCHMARKS B1, as the symplectic-HNN authors' code)."""
    return sum(m * n for m, n in zip(sizes, sizes[1:])) + sum(sizes[1:-1])


def mlp_hamiltonian(d: int, seed: int = 0) -> HamiltonianSystem:
    """H_theta = MLP(2d-16-32-16-1, tanh) as an MX expression with the weights as parameters (B1)."""
    sizes = (2 * d, 16, 32, 16, 1)

    def H_of(q, p, theta):
        z, k = ca.vertcat(q, p), 0
        for i, (m, n) in enumerate(zip(sizes, sizes[1:])):
            W = ca.reshape(theta[k : k + n * m], n, m)
            k += n * m
            z = ca.mtimes(W, z)
            if i < len(sizes) - 2:
                z, k = ca.tanh(z + theta[k : k + n]), k + n
        return z

    rng = np.random.default_rng(seed)
    theta = rng.normal(0.0, 0.5, mlp_weight_count(sizes))
    return _hamiltonian_system(f"mlp_hamiltonian_{d}d", d, H_of, 1.0, theta, sym=ca.MX.sym)


SYSTEMS = {"double_well": double_well, "coupled_oscillator": coupled_oscillator, "henon_heiles": henon_heiles}
