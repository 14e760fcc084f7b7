"""Backend-neutral integrators and sensitivities for a CasADi right-hand side ``f(t, x, p) -> xdot``.

``fixed_step``: Runge–Kutta steps and unrolled rollouts (euler, rk4, implicit midpoint,
2-stage Gauss–Legendre; Newton/KINSOL rootfinder or the B3.2 predictor–corrector).
``sensitivity``: gradients of trajectory losses by CVODES forward/adjoint sensitivities, AD
through fixed-step rollouts, or the discrete adjoint of implicit midpoint (BENCHMARKS B4).
"""

import importlib

# the names of the two modules, imported on first use (PEP 562): a simulation reaches pdsl.numerics.dop853 through
# this package and needs neither (~1.5 ms of every uncached `pdsl simulate`, issue 36)
_FROM = {
    **dict.fromkeys(("METHODS", "SOLVERS", "Tableau", "make_fpi_residuals", "make_rollout", "make_step", "rhs_dims",
                     "tableau"), "fixed_step"),
    **dict.fromkeys(("LOSSES", "MODES", "LossGrad", "batched_loss_and_grad", "loss_and_grad", "make_batched_loss_grad",
                     "make_loss_grad", "make_midpoint_adjoint", "make_trajectory", "trajectory_loss"), "sensitivity"),
}


def __getattr__(name: str):
    module = _FROM.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted({*globals(), *_FROM})


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
