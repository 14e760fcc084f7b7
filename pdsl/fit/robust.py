"""Robust losses for the Gauss–Newton fits with estimated starts: ``--loss huber | soft-l1``.

Each is a ρ applied to standardized residuals z = r/c (c: the scale, from the stated noise when every observed
column has one — the residuals are then in σ units — else a robust estimate of the residual spread, 1.4826 times
the median absolute residual, renewed at every step). Levenberg–Marquardt minimises Σ c²ρ(z²) by iteratively
reweighted least squares: at each step every residual is multiplied by √ρ'(z²), held fixed during the step's
trials (the weights of :attr:`pdsl.fit.data.Chunks.W`). The forms and tuning constants are scipy's
``least_squares`` ones (huber: ρ(s) = s for s ≤ 1, 2√s − 1 beyond; soft-l1: ρ(s) = 2(√(1+s) − 1)), with the
threshold c = 1.345σ for huber (95 % efficiency under Gaussian noise) and c = σ for soft-l1.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["RobustLoss", "Huber", "SoftL1", "ROBUST", "robust_loss"]


@dataclass(frozen=True)
class RobustLoss:
    name: str
    tuning: float  # the threshold in units of the noise σ

    def rho_prime(self, s: np.ndarray) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def rho_casadi(self, s):  # pragma: no cover - abstract
        """ρ(s) on CasADi expressions (IPOPT's objective Σ c²ρ((r/c)²))."""
        raise NotImplementedError

    def rho_prime_casadi(self, s):  # pragma: no cover - abstract
        raise NotImplementedError

    def scale(self, r: np.ndarray, sigma: float | None) -> float:
        """The threshold c = tuning·σ (σ None: 1.4826 × the median absolute residual)."""
        r = np.asarray(r, dtype=float)
        if sigma is None:
            nz = np.abs(r[r != 0])
            sigma = 1.4826 * float(np.median(nz)) if nz.size else 1.0
        return max(self.tuning * sigma, 1e-300)

    def factors(self, r: np.ndarray, sigma: float | None) -> np.ndarray:
        """√ρ'(z²) for every residual (the IRLS multipliers), z = r / (tuning·σ); σ None: estimated robustly."""
        r = np.asarray(r, dtype=float)
        return np.sqrt(self.rho_prime((r / self.scale(r, sigma)) ** 2))


@dataclass(frozen=True)
class Huber(RobustLoss):
    name: str = "huber"
    tuning: float = 1.345

    def rho_prime(self, s):
        return np.where(s <= 1.0, 1.0, 1.0 / np.sqrt(np.maximum(s, 1.0)))

    def rho_casadi(self, s):
        import casadi as ca

        return ca.if_else(s <= 1.0, s, 2 * ca.sqrt(ca.fmax(s, 1.0)) - 1)

    def rho_prime_casadi(self, s):
        import casadi as ca

        return ca.if_else(s <= 1.0, 1.0, 1.0 / ca.sqrt(ca.fmax(s, 1.0)))


@dataclass(frozen=True)
class SoftL1(RobustLoss):
    name: str = "soft-l1"
    tuning: float = 1.0

    def rho_prime(self, s):
        return 1.0 / np.sqrt(1.0 + s)

    def rho_casadi(self, s):
        import casadi as ca

        return 2 * (ca.sqrt(1 + s) - 1)

    def rho_prime_casadi(self, s):
        import casadi as ca

        return 1.0 / ca.sqrt(1 + s)


ROBUST = {"huber": Huber(), "soft-l1": SoftL1()}


def robust_loss(name: str) -> RobustLoss | None:
    return ROBUST.get(name)
