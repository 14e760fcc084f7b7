"""Trajectory-loss gradients (BENCHMARKS G check 12 and CVODES forward/adjoint sensitivities)."""

from __future__ import annotations

import casadi as ca
import numpy as np
import pytest
from numerics_systems import double_well_with_parameters, mlp_hamiltonian

from pdsl.numerics.sensitivity import (
    batched_loss_and_grad,
    loss_and_grad,
    make_batched_loss_grad,
    make_loss_grad,
    make_trajectory,
    trajectory_loss,
)

TAU = 6  # B5: rollout length of one training sample


def _relative(a, b) -> float:
    return float(np.linalg.norm(np.asarray(a) - np.asarray(b)) / np.linalg.norm(b))


def _central_differences(loss, w: np.ndarray, directions: np.ndarray, eps: float) -> np.ndarray:
    """Directional derivatives of ``loss`` at ``w`` along the rows of ``directions``."""
    return np.array([(loss(w + eps * v) - loss(w - eps * v)) / (2 * eps) for v in directions])


def _fd_gradient_check(system, x0, target, grid, method, result, n_coords, eps, **options):
    """Relative error of the gradient against central differences on x0, sampled weights and random directions."""
    trajectory = make_trajectory(system.rhs, grid, method=method, **options)
    nx = x0.size
    loss = lambda w: float(trajectory_loss("sse", trajectory(w[:nx], w[nx:]), target))  # noqa: E731
    w = np.concatenate([x0, system.theta])
    rng = np.random.default_rng(7)
    coords = np.concatenate([np.arange(nx), nx + rng.choice(system.theta.size, n_coords, replace=False)])
    directions = np.vstack([np.eye(w.size)[coords], rng.normal(size=(4, w.size))])
    gradient = np.concatenate([result.grad_x0, result.grad_p])
    return _relative(directions @ gradient, _central_differences(loss, w, directions, eps))


@pytest.fixture(scope="module", params=[1, 2], ids=["d1", "d2"])
def mlp_problem(request):
    """H_theta = MLP(2d-16-32-16-1, tanh), tau = 6 midpoint steps of h = 0.1, noisy-looking targets."""
    system = mlp_hamiltonian(request.param)
    rng = np.random.default_rng(3)
    x0 = rng.uniform(-1.0, 1.0, 2 * system.d)
    target = rng.normal(0.0, 0.3, (2 * system.d, TAU))
    return system, x0, target, 0.1 * np.arange(TAU + 1)


def test_midpoint_discrete_adjoint_equals_backprop(mlp_problem):
    """Check 12: cotangent lift = reverse-mode AD through the Newton solver (<= 1e-8), both = FD (<= 1e-5)."""
    system, x0, target, grid = mlp_problem
    adjoint = loss_and_grad(system.rhs, x0, system.theta, grid, target, method="midpoint", mode="adjoint")
    backprop = loss_and_grad(system.rhs, x0, system.theta, grid, target, method="midpoint", mode="reverse")
    assert adjoint.loss == backprop.loss
    assert _relative(adjoint.grad_p, backprop.grad_p) <= 1e-8
    assert _relative(adjoint.grad_x0, backprop.grad_x0) <= 1e-8
    for result in (adjoint, backprop):
        assert _fd_gradient_check(system, x0, target, grid, "midpoint", result, n_coords=150, eps=1e-6) <= 1e-5


def test_discrete_adjoint_matches_backprop_through_converged_fpi(mlp_problem):
    """With the FPI converged, AD through the unrolled sweeps gives the same exact gradient."""
    system, x0, target, grid = mlp_problem
    fpi = {"method": "midpoint", "solver": "fpi", "n_iter": 30}
    adjoint = loss_and_grad(system.rhs, x0, system.theta, grid, target, mode="adjoint", **fpi)
    backprop = loss_and_grad(system.rhs, x0, system.theta, grid, target, mode="reverse", **fpi)
    assert _relative(adjoint.grad_p, backprop.grad_p) <= 1e-8
    assert _relative(adjoint.grad_x0, backprop.grad_x0) <= 1e-8


CVODES_TIGHT = {"integrator_options": {"abstol": 1e-12, "reltol": 1e-12}}


@pytest.fixture(scope="module")
def double_well_problem():
    system = double_well_with_parameters(1.0, 1.2)
    grid = np.linspace(0.0, 3.0, 16)
    target = np.random.default_rng(5).normal(0.0, 0.5, (2, grid.size - 1))
    return system, np.array([1.2, 0.3]), target, grid


def test_cvodes_forward_equals_adjoint_equals_finite_differences(double_well_problem):
    system, x0, target, grid = double_well_problem
    forward = loss_and_grad(system.rhs, x0, system.theta, grid, target, method="cvodes", mode="forward", **CVODES_TIGHT)
    adjoint = loss_and_grad(system.rhs, x0, system.theta, grid, target, method="cvodes", mode="adjoint", **CVODES_TIGHT)
    assert forward.loss == pytest.approx(adjoint.loss, rel=1e-14)
    for a, b in ((forward.grad_p, adjoint.grad_p), (forward.grad_x0, adjoint.grad_x0)):
        assert _relative(a, b) <= 1e-6
    for result in (forward, adjoint):
        assert _fd_gradient_check(system, x0, target, grid, "cvodes", result, n_coords=2, eps=1e-5, **CVODES_TIGHT) <= 1e-5


def test_cvodes_matches_a_fine_fixed_step_solution(double_well_problem):
    system, x0, target, grid = double_well_problem
    fine = np.linspace(0.0, 3.0, 15 * 40 + 1)
    cvodes = make_trajectory(system.rhs, grid, method="cvodes", **CVODES_TIGHT)(x0, system.theta)
    gauss = make_trajectory(system.rhs, fine, method="gauss2")(x0, system.theta)[:, 39::40]
    assert float(ca.mmax(ca.fabs(cvodes - gauss))) <= 1e-9


@pytest.mark.parametrize("method", ["rk4", "gauss2", "midpoint"])
@pytest.mark.parametrize("loss", ["sse", "mse", "l1"])
def test_fixed_step_forward_equals_reverse_equals_finite_differences(double_well_problem, method, loss):
    system, x0, target, grid = double_well_problem
    results = [
        loss_and_grad(system.rhs, x0, system.theta, grid, target, method=method, mode=mode, loss=loss)
        for mode in ("forward", "reverse")
    ]
    assert _relative(results[0].grad_p, results[1].grad_p) <= 1e-12
    assert _relative(results[0].grad_x0, results[1].grad_x0) <= 1e-12
    trajectory = make_trajectory(system.rhs, grid, method=method)
    value = lambda w: float(trajectory_loss(loss, trajectory(w[:2], w[2:]), target))  # noqa: E731
    fd = _central_differences(value, np.concatenate([x0, system.theta]), np.eye(4), 1e-6)
    assert _relative(np.concatenate([results[1].grad_x0, results[1].grad_p]), fd) <= 1e-6


@pytest.mark.parametrize(("method", "mode"), [("cvodes", "adjoint"), ("midpoint", "adjoint"), ("rk4", "reverse")])
def test_batched_gradients_equal_the_sum_of_single_ones(double_well_problem, method, mode):
    system, _, _, grid = double_well_problem
    rng = np.random.default_rng(11)
    x0s = rng.uniform(-1.5, 1.5, (8, 2))
    targets = rng.normal(0.0, 0.5, (8, 2, grid.size - 1))
    batched = batched_loss_and_grad(system.rhs, x0s, system.theta, grid, targets, n_threads=2, method=method, mode=mode)
    singles = [loss_and_grad(system.rhs, x, system.theta, grid, y, method=method, mode=mode) for x, y in zip(x0s, targets)]
    # A CVODES memory reused across solves (per thread in the map) starts each solve from the
    # state the previous one left, which moves the result within the integration tolerance.
    rtol = 1e-6 if method == "cvodes" else 1e-12
    assert batched.loss == pytest.approx(sum(s.loss for s in singles), rel=rtol)
    np.testing.assert_allclose(batched.grad_p, sum(s.grad_p for s in singles), rtol=rtol)
    np.testing.assert_allclose(batched.grad_x0, np.array([s.grad_x0 for s in singles]), rtol=rtol, atol=1e-14)


def test_batched_mlp_adjoint(mlp_problem):
    system, x0, target, grid = mlp_problem
    x0s = np.vstack([x0, -x0, 0.5 * x0])
    targets = np.stack([target, -target, target[:, ::-1]])
    batched = batched_loss_and_grad(system.rhs, x0s, system.theta, grid, targets, n_threads=2, method="midpoint", mode="adjoint")
    singles = [loss_and_grad(system.rhs, x, system.theta, grid, y, method="midpoint", mode="reverse") for x, y in zip(x0s, targets)]
    assert _relative(batched.grad_p, sum(s.grad_p for s in singles)) <= 1e-12


def test_batched_map_takes_p_once():
    """p is a shared np x 1 input; loss and grad_p are summed over the batch."""
    system = double_well_with_parameters()
    batch = make_batched_loss_grad(system.rhs, np.linspace(0, 1, 5), 16, n_threads=2, method="rk4", mode="reverse")
    assert batch.size_in(1) == (2, 1) and batch.size_in(0) == (2, 16) and batch.size_in(2) == (2, 64)
    assert batch.size_out(0) == (1, 1) and batch.size_out(2) == (2, 1) and batch.size_out(1) == (2, 16)
    with pytest.raises(ValueError, match="shared parameters once"):
        batched_loss_and_grad(system.rhs, np.zeros((16, 2)), np.ones((2, 16)), np.linspace(0, 1, 5), np.zeros((16, 2, 4)))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"method": "rk45"}, "unknown integration method"),
        ({"method": "cvodes", "mode": "backward"}, "unknown sensitivity mode"),
        ({"method": "rk4", "mode": "adjoint"}, "discrete adjoint of implicit midpoint"),
        ({"method": "cvodes", "loss": "huber"}, "unknown loss"),
        ({"method": "midpoint", "mode": "reverse", "solver": "anderson"}, "unknown implicit solver"),
    ],
)
def test_bad_options_raise_value_error(kwargs, message):
    system = double_well_with_parameters()
    with pytest.raises(ValueError, match=message):
        make_loss_grad(system.rhs, [0.0, 0.1, 0.2], **kwargs)


def test_fixed_step_methods_need_a_uniform_grid():
    system = double_well_with_parameters()
    with pytest.raises(ValueError, match="uniformly spaced"):
        make_loss_grad(system.rhs, [0.0, 0.1, 0.3], method="rk4", mode="reverse")
    with pytest.raises(ValueError, match="strictly increasing"):
        make_loss_grad(system.rhs, [0.0], method="cvodes")


@pytest.mark.parametrize(("method", "mode"), [("midpoint", "adjoint"), ("midpoint", "reverse"), ("rk4", "reverse")])
def test_gradient_work_memory_does_not_scale_with_steps_times_parameters(method, mode):
    """O(steps x nx + np): p enters the rollout once, and the steps' contributions to grad_p are
    summed as they are formed (the old mapaccum routes held ~3.5 copies of p per step)."""
    system = mlp_hamiltonian(1)  # 1136 parameters
    n_p = system.theta.size
    short, long = (make_loss_grad(system.rhs, 0.1 * np.arange(n + 1), method=method, mode=mode).sz_w() for n in (10, 100))
    assert long - short <= 20 * 90
    assert long <= 20 * n_p


def test_midpoint_adjoint_with_a_time_dependent_right_hand_side():
    t, x, p = ca.MX.sym("t"), ca.MX.sym("x", 2), ca.MX.sym("p", 2)
    f = ca.Function("forced", [t, x, p], [ca.vertcat(x[1], -p[0] * ca.sin(x[0]) + p[1] * ca.cos(2 * t))])
    grid = 0.5 + 0.1 * np.arange(31)
    target = np.random.default_rng(2).normal(0.0, 0.5, (2, 30))
    args = (f, [0.4, -0.2], [1.3, 0.7], grid, target)
    adjoint = loss_and_grad(*args, method="midpoint", mode="adjoint")
    backprop = loss_and_grad(*args, method="midpoint", mode="reverse")
    assert adjoint.loss == backprop.loss
    assert _relative(adjoint.grad_p, backprop.grad_p) <= 1e-8
    assert _relative(adjoint.grad_x0, backprop.grad_x0) <= 1e-8
