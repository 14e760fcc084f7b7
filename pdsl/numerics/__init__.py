"""Backend-neutral integrators and sensitivities for a CasADi right-hand side ``f(t, x, p) -> xdot``.

``fixed_step``: Runge–Kutta steps and unrolled rollouts (euler, rk4, implicit midpoint,
2-stage Gauss–Legendre; Newton/KINSOL rootfinder or the B3.2 predictor–corrector).
``sensitivity``: gradients of trajectory losses by CVODES forward/adjoint sensitivities, AD
through fixed-step rollouts, or the discrete adjoint of implicit midpoint (BENCHMARKS B4).
"""

from pdsl.numerics.fixed_step import (
    METHODS,
    SOLVERS,
    Tableau,
    make_fpi_residuals,
    make_rollout,
    make_step,
    rhs_dims,
    tableau,
)
from pdsl.numerics.sensitivity import (
    LOSSES,
    MODES,
    LossGrad,
    batched_loss_and_grad,
    loss_and_grad,
    make_batched_loss_grad,
    make_loss_grad,
    make_midpoint_adjoint,
    make_trajectory,
    trajectory_loss,
)

__all__ = [
    "LOSSES",
    "METHODS",
    "MODES",
    "SOLVERS",
    "LossGrad",
    "Tableau",
    "batched_loss_and_grad",
    "loss_and_grad",
    "make_batched_loss_grad",
    "make_fpi_residuals",
    "make_loss_grad",
    "make_midpoint_adjoint",
    "make_rollout",
    "make_step",
    "make_trajectory",
    "rhs_dims",
    "tableau",
    "trajectory_loss",
]
