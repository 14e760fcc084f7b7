"""Fixed-step methods: order (BENCHMARKS G check 9), FPI convergence, rollout derivatives, codegen."""

from __future__ import annotations

import shutil
import subprocess

import casadi as ca
import numpy as np
import pytest
from numerics_systems import SYSTEMS, coupled_oscillator, double_well, double_well_with_parameters, mlp_hamiltonian
from scipy.linalg import expm

from pdsl.numerics.fixed_step import inline_call, make_fpi_residuals, make_rollout, make_step, rhs_dims, unrolled_blocks

ALPHA = 0.5
Y0 = np.array([1.0, 0.0])


def _global_error(method: str, h: float, **options) -> float:
    """|y_N - expm(A T) y0| at T = 1 on the coupled oscillator (check 9)."""
    A = np.array([[ALPHA, 1.0], [-1.0, -ALPHA]])
    rollout = make_rollout(coupled_oscillator(ALPHA).rhs, method, h, round(1.0 / h), **options)
    return float(np.linalg.norm(np.array(rollout(0.0, Y0, []))[:, -1] - expm(A) @ Y0))


@pytest.mark.parametrize("solver", ["newton", "kinsol", "fpi"])
def test_implicit_midpoint_is_second_order(solver):
    errors = [_global_error("midpoint", h, solver=solver, n_iter=20) for h in (0.1, 0.05, 0.025)]
    np.testing.assert_allclose(errors, [4.56e-4, 1.14e-4, 2.85e-5], rtol=5e-3)  # derived in BENCHMARKS
    ratios = np.array(errors[:-1]) / np.array(errors[1:])
    assert np.all(np.abs(ratios - 4.0) <= 0.1), ratios


@pytest.mark.parametrize("solver", ["newton", "fpi"])
def test_gauss2_is_fourth_order(solver):
    errors = [_global_error("gauss2", h, solver=solver, n_iter=20) for h in (0.1, 0.05, 0.025)]
    ratios = np.array(errors[:-1]) / np.array(errors[1:])
    assert np.all(np.abs(ratios - 16.0) <= 0.5), ratios


@pytest.mark.parametrize(("method", "ratio"), [("euler", 2.0), ("rk4", 16.0)])
def test_explicit_orders(method, ratio):
    errors = [_global_error(method, h) for h in (0.05, 0.025, 0.0125)]
    ratios = np.array(errors[:-1]) / np.array(errors[1:])
    assert np.all(np.abs(ratios / ratio - 1.0) <= 0.05), ratios


def _fpi_sweeps(system, h: float, states: np.ndarray, tol: float = 1e-13, n_iter: int = 25) -> np.ndarray:
    """Sweeps after the RK2 predictor until the midpoint residual is <= tol, per state."""
    residuals = make_fpi_residuals(system.rhs, "midpoint", h, n_iter).map(states.shape[1])
    R = np.array(residuals(0.0, states, system.theta)).reshape(states.shape[1], n_iter + 1)
    assert np.all(R[:, -1] <= tol), "FPI did not converge"
    return np.argmax(R <= tol, axis=1)


@pytest.mark.parametrize("name", list(SYSTEMS))
def test_fpi_iteration_counts(name):
    """Check 9: <= 6 sweeps at h = 0.01 and <= 12 at h = 0.1 to residual 1e-13."""
    system = SYSTEMS[name]()
    states = system.states(100, seed=0)
    assert _fpi_sweeps(system, 0.01, states).max() <= 6
    if name == "double_well":
        # The contraction factor h |1 - 3 q^2| / 2 reaches 0.55 at |q| = 2: the corners of
        # the [-2, 2]^2 training box need up to 15 sweeps. The check-9 bound holds on |q|, |p| <= 1.5.
        assert _fpi_sweeps(system, 0.1, states).max() <= 15
        states = states * 0.75
    assert _fpi_sweeps(system, 0.1, states).max() <= 12


def test_fpi_residual_reaches_round_off_from_the_check_10_state():
    r = np.array(make_fpi_residuals(double_well().rhs, "midpoint", 0.1, 14)(0.0, [1.2, 0.3], [])).ravel()
    assert r[0] > 1e-4 and r[-1] <= 1e-15
    assert np.all(r[1:11] / r[:10] < 0.12)  # linear contraction, factor ~ h |f'| / 2


ROLLOUT_CASES = [
    ("euler", "fpi"),
    ("rk4", "fpi"),
    ("midpoint", "newton"),
    ("midpoint", "fpi"),
    ("gauss2", "newton"),
    ("gauss2", "fpi"),
]


@pytest.mark.parametrize(("method", "solver"), ROLLOUT_CASES)
def test_rollout_derivatives_match_finite_differences(method, solver):
    system = double_well_with_parameters(1.0, 1.0)
    rollout = make_rollout(system.rhs, method, 0.05, 20, solver=solver, n_iter=30)
    x0, p = ca.MX.sym("x0", 2), ca.MX.sym("p", 2)
    y_end = rollout(0.0, x0, p)[:, -1]
    w = ca.vertcat(x0, p)
    jac = ca.Function("jacobian_end", [x0, p], [ca.jacobian(y_end, w)])
    vjp = ca.Function("vjp", [x0, p], [ca.jtimes(y_end, w, ca.DM([1.0, -2.0]), True)])
    w0, eps = np.array([1.2, 0.3, 1.0, 1.1]), 1e-6
    end = lambda w: np.array(rollout(0.0, w[:2], w[2:]))[:, -1]  # noqa: E731
    fd = np.column_stack([(end(w0 + eps * e) - end(w0 - eps * e)) / (2 * eps) for e in np.eye(4)])
    J = np.array(jac(w0[:2], w0[2:]))
    np.testing.assert_allclose(J, fd, rtol=1e-7, atol=1e-8)
    np.testing.assert_allclose(np.array(vjp(w0[:2], w0[2:])).ravel(), J.T @ [1.0, -2.0], rtol=1e-12, atol=1e-12)


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs a C compiler")
@pytest.mark.parametrize(("method", "solver"), [("rk4", "fpi"), ("midpoint", "fpi"), ("gauss2", "fpi")])
def test_rollout_code_generation(method, solver, tmp_path):
    system = double_well_with_parameters(1.0, 1.0)
    rollout = make_rollout(system.rhs, method, 0.1, 30, solver=solver)
    generator = ca.CodeGenerator(f"{rollout.name()}.c")
    generator.add(rollout)
    source = generator.generate(f"{tmp_path}/")
    library = tmp_path / f"{rollout.name()}.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-O1", source, "-o", str(library)], check=True, capture_output=True)
    compiled = ca.external(rollout.name(), str(library))
    args = (0.0, [1.2, 0.3], [1.0, 1.0])
    np.testing.assert_array_equal(np.array(compiled(*args)), np.array(rollout(*args)))


def test_mx_right_hand_side_stays_mx():
    t, x, p = ca.MX.sym("t"), ca.MX.sym("x", 2), ca.MX.sym("p", 1)
    f = ca.Function("f", [t, x, p], [ca.vertcat(x[1], -p * ca.sin(x[0]))])
    for solver in ("fpi", "newton"):
        assert make_step(f, "midpoint", 0.1, solver=solver).is_a("MXFunction")


def test_step_matches_the_midpoint_equation():
    system = double_well()
    x = np.array([1.2, 0.3])
    y = np.array(make_step(system.rhs, "midpoint", 0.1)(0.0, x, [])).ravel()
    defect = y - x - 0.1 * np.array(system.rhs(0.0, (x + y) / 2, [])).ravel()
    assert np.abs(defect).max() <= 1e-15


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"method": "rk45"}, "unknown integration method 'rk45'"),
        ({"method": "midpoint", "solver": "broyden"}, "unknown implicit solver 'broyden'"),
    ],
)
def test_bad_names_raise_value_error(kwargs, message):
    with pytest.raises(ValueError, match=message):
        make_step(double_well().rhs, h=0.1, **kwargs)


def test_bad_right_hand_side_raises_value_error():
    x = ca.SX.sym("x", 2)
    with pytest.raises(ValueError, match="must map \\(t, x, p\\) to xdot"):
        rhs_dims(ca.Function("g", [x], [x]))
    with pytest.raises(ValueError, match="explicit"):
        make_fpi_residuals(double_well().rhs, "rk4", 0.1, 3)
    with pytest.raises(ValueError, match="at least one step"):
        make_rollout(double_well().rhs, "rk4", 0.1, 0)


def test_rollout_takes_p_once():
    """Work memory O(steps x nx + np): p is shared by the step calls, never repmat'd per step."""
    system = mlp_hamiltonian(1)  # 1136 parameters
    n_p = system.theta.size
    short, long = (make_rollout(system.rhs, "rk4", 0.1, n).sz_w() for n in (10, 100))
    assert long - short <= 20 * 90  # a few doubles per step (old mapaccum rollout: ~3.3 np per step)
    assert long <= 8 * n_p


@pytest.mark.parametrize("n_steps", [1, 2, 3, 10, 17, 100, 1001])
def test_rollout_blocks_cover_the_horizon(n_steps):
    blocks = unrolled_blocks(n_steps, lambda k: k)
    assert [b[0] for b in blocks] == sorted({b[0] for b in blocks}) and blocks[0][0] == 0 and blocks[-1][1] == n_steps
    assert all(stop - start == size for start, stop, size in blocks)
    assert all(a[1] == b[0] for a, b in zip(blocks, blocks[1:]))
    assert len({size for *_, size in blocks}) <= 2


def test_long_rollout_equals_stepping_one_step_at_a_time():
    system = double_well_with_parameters(1.0, 1.2)
    step = make_step(system.rhs, "rk4", 0.05)
    X = np.array(make_rollout(system.rhs, "rk4", 0.05, 250)(0.3, [1.2, 0.3], system.theta))
    x = np.array([1.2, 0.3])
    for k in range(250):
        x = np.array(step(0.3 + 0.05 * k, x, system.theta)).ravel()
        np.testing.assert_allclose(X[:, k], x, rtol=1e-13, atol=1e-13)


def test_inline_call_removes_nested_calls():
    x, y = ca.MX.sym("x", 2), ca.MX.sym("y", 2)
    g = ca.Function("g", [x], [ca.sin(x) * 2, x * 3])
    kept = ca.Function("kept", [x], [ca.cos(x)], {"never_inline": True})
    h = ca.Function("h", [y], [g(y * 2)[0] + g(g(y)[1])[1] + kept(y)])
    outer = ca.Function("outer", [y], [h(y) * g(y)[0]])
    (e,) = inline_call(outer, [x])
    flat = ca.Function("flat", [x], [e])
    names = {flat.instruction_MX(k).which_function().name() for k in range(flat.n_instructions()) if flat.instruction_MX(k).is_call()}
    assert names == {"kept"}  # a never_inline Function stays a call
    v = np.array([0.3, -1.1])
    np.testing.assert_array_equal(np.array(flat(v)), np.array(outer(v)))


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs a C compiler")
def test_mx_rollout_and_its_gradient_code_generation(tmp_path):
    """An MX (neural) right-hand side, inlined into the steps: rollout and reverse-mode gradient generate C."""
    from pdsl.numerics import make_loss_grad

    system = mlp_hamiltonian(1)
    grid = 0.1 * np.arange(9)
    functions = [
        (make_rollout(system.rhs, "midpoint", 0.1, 8, solver="fpi"), (0.0, [0.3, -0.2], system.theta)),
        (make_loss_grad(system.rhs, grid, method="rk4", mode="reverse"), ([0.3, -0.2], system.theta, np.ones((2, 8)))),
    ]
    for fn, args in functions:
        generator = ca.CodeGenerator(f"{fn.name()}.c")
        generator.add(fn)
        source = generator.generate(f"{tmp_path}/")
        library = tmp_path / f"{fn.name()}.so"
        subprocess.run(["gcc", "-shared", "-fPIC", "-O1", source, "-o", str(library)], check=True, capture_output=True)
        compiled = ca.external(fn.name(), str(library))
        expected, got = fn.call(list(args)), compiled.call(list(args))
        for a, b in zip(expected, got):
            np.testing.assert_allclose(np.array(b), np.array(a), rtol=1e-13, atol=1e-13)
