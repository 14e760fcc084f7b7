"""pdsl.linearize against closed forms derived by hand (LANGUAGE.md §12).

* double pendulum, small angles: det(K − ω²M) = 0 with M = [[(m1+m2)l1², m2 l1 l2], [m2 l1 l2, m2 l2²]],
  K = diag((m1+m2) g l1, m2 g l2), i.e. m1 l1 l2 ω⁴ − (m1+m2) g (l1+l2) ω² + (m1+m2) g² = 0 — for the angle model
  and for the Cartesian model (both formulations), which must give the same two pairs ±iω and no extra modes;
* DC motor: A = [[−R/L, −K/J], [K/L, −b/J]] (the textbook ODE in φ = L i, Lm = J ω), poles from trace and
  determinant;
* cart–pole about the upright position (θ = π, θ from the downward vertical), open loop:
  s·[((M+m)(J+ml²) − m²l²) s³ + b(J+ml²) s² − (M+m) m g l s − b m g l] = 0 (the linearised Lagrange equations);
  closed loop about θ = 0 with the bundled K: the published eigenvalues of BENCHMARKS C5.1;
* slider-crank in rigid Cartesian bodies (26 invariants, the λ·∇²Φ terms matter): ω² = V''(θ*)/M(θ*) of the
  reduced 1-DOF Lagrangian in the crank angle, derived here with sympy;
* a DAE with a nonlinear algebraic equation: dz/dx by the implicit function theorem;
* LQR gains from `linearize` (scipy's Riccati solver) stabilise the cart–pole in `simulate`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import sympy as sp

import pdsl
from pdsl.diagnostics import PdslError
from pdsl.linearize.core import krylov_rank, partition

REPO = Path(__file__).resolve().parents[2]
MODELS = REPO / "models"

M1, M2, L1, L2, G = 1.1722, 1.0391, 1.0359, 1.0822, 9.81  # models/double_pendulum.phm and pendulum2.phm


def _rel(a, b) -> float:
    return float(np.max(np.abs(np.asarray(a) - np.asarray(b)) / np.abs(np.asarray(b))))


def _symbols(lin, names: str):
    """The model's own parameter symbols (they carry the resolver's assumptions)."""
    by_name = {q.name: q.symbol for q in lin.system.params}
    return [by_name[n] for n in names.split()]


def _double_pendulum_frequencies() -> np.ndarray:
    a, b, c = M1 * L1 * L2, -(M1 + M2) * G * (L1 + L2), (M1 + M2) * G**2
    disc = np.sqrt(b * b - 4 * a * c)
    return np.sqrt(np.array([(-b + disc) / (2 * a), (-b - disc) / (2 * a)]))  # fast, slow


def _frequencies(lin) -> np.ndarray:
    """The positive imaginary parts (two pairs ±iω), largest first; real parts zero."""
    lam = lin.eigenvalues
    assert np.max(np.abs(lam.real)) < 1e-9 * np.max(np.abs(lam))
    return np.sort(lam.imag[lam.imag > 0])[::-1]


def test_double_pendulum_angle_model_matches_the_small_angle_closed_form():
    lin = pdsl.load(MODELS / "double_pendulum.phm").linearize(at={"q1": 0, "q2": 0})
    assert lin.states == ("q1", "q2", "der(q1)", "der(q2)") and not lin.dependent
    w = _frequencies(lin)
    assert len(w) == 2 and _rel(w, _double_pendulum_frequencies()) < 1e-12
    assert lin.is_equilibrium


HANGING = {"b[1].x": "0", "b[1].y": "-l[1]", "b[2].x": "0", "b[2].y": "-l[1] - l[2]"}


@pytest.mark.parametrize("formulation", ["hamiltonian", "lagrangian"])
def test_cartesian_double_pendulum_gives_the_same_two_pairs_and_no_extra_modes(formulation):
    lin = pdsl.load(MODELS / "pendulum2.phm", formulation=formulation).linearize(at=HANGING)
    assert len(lin.states) == 4 and len(lin.dependent) == 4  # 8 Cartesian states, 4 invariants (Φ, Φ̇)
    assert lin.A.shape == (4, 4) and len(lin.eigenvalues) == 4  # ±iω twice: no zero modes of the dependent states
    kinetic = "p" if formulation == "hamiltonian" else "v"
    assert set(lin.dependent) == {"b[1].y", "b[2].y", f"b[1].{kinetic}y", f"b[2].{kinetic}y"}  # positions with rates
    assert _rel(_frequencies(lin), _double_pendulum_frequencies()) < 1e-12
    angle = pdsl.load(MODELS / "double_pendulum.phm").linearize(at={"q1": 0, "q2": 0})
    assert _rel(_frequencies(lin), _frequencies(angle)) < 1e-12


def test_the_multipliers_enter_as_functions_of_the_state():
    """Without λ·∇²Φ (the multiplier held at its value) a hanging Cartesian pendulum would not oscillate at
    √(g/l): the tangent-space Jacobian of the constrained field must include the tension's change with the angle."""
    lin = pdsl.load(MODELS / "pendulum1.phm", formulation="lagrangian").linearize(
        at={"b[1].x": "0", "b[1].y": "-l[1]"})
    assert lin.states == ("b[1].x", "b[1].vx") and lin.dependent == ("b[1].y", "b[1].vy")
    assert _rel(_frequencies(lin), [np.sqrt(9.81 / 1.1722)]) < 1e-12


def test_dc_motor_poles_match_the_closed_form():
    R, L, K, J, b = 1.0, 0.5, 0.01, 0.01, 0.1
    lin = pdsl.load(MODELS / "dc_motor.phm").linearize()
    A = np.array([[-R / L, -K / J], [K / L, -b / J]])
    assert np.allclose(lin.A, A, rtol=1e-14, atol=0) and np.allclose(lin.B, [[1.0], [0.0]])
    tr, det = -(R / L + b / J), (R * b + K * K) / (L * J)
    poles = np.sort(np.array([tr / 2 + np.sqrt(tr * tr / 4 - det), tr / 2 - np.sqrt(tr * tr / 4 - det)]))[::-1]
    assert np.max(np.abs(lin.eigenvalues.imag)) == 0
    assert _rel(lin.eigenvalues.real, poles) < 1e-12
    assert lin.controllability_rank == 2 and lin.observability_rank == 2
    R_a, L_a, K_, J_, b_ = _symbols(lin, "R_a L_a K J b")
    S = lin.symbolic()
    assert sp.simplify(S.A - sp.Matrix([[-R_a / L_a, -K_ / J_], [K_ / L_a, -b_ / J_]])) == sp.zeros(2, 2)


CP = dict(M=0.5, m=0.2, l=0.3, g=9.81, J=0.006, b=0.1)


def _upright_poles():
    M, m, l, g, J, b = (CP[k] for k in ("M", "m", "l", "g", "J", "b"))
    cubic = [(M + m) * (J + m * l * l) - (m * l) ** 2, b * (J + m * l * l), -(M + m) * m * g * l, -b * m * g * l]
    return np.roots(cubic)


def test_open_loop_cart_pole_unstable_pole_matches_the_closed_form():
    lin = pdsl.load(MODELS / "cart_pole.phm").linearize(at={"theta": "pi"}, trim=True, open_loop=True)
    assert lin.inputs == ("F",) and lin.open_loop
    assert lin.point.undetermined == ("x",)  # the cart's position is cyclic
    assert abs(lin.point.u[0]) < 1e-12 and lin.is_equilibrium
    unstable = lin.eigenvalues[lin.eigenvalues.real > 1e-9]
    closed = _upright_poles()
    assert len(unstable) == 1 and _rel(unstable.real, closed[closed > 0]) < 1e-12
    others = np.sort(lin.eigenvalues.real)
    assert np.allclose(others, np.sort(np.r_[closed, 0.0]), rtol=1e-12, atol=1e-12)
    assert lin.controllability_rank == 4


def test_feedback_law_without_open_loop_is_the_published_closed_loop():
    """About θ = 0 with the bundled gains: BENCHMARKS C5.1 lists {−16.2309, −4.6826, −0.7384 ± 0.4338i}."""
    lin = pdsl.load(MODELS / "cart_pole.phm").linearize(at={"x": 0, "theta": 0})
    assert lin.inputs == ()
    published = np.array([-0.7384 + 0.4338j, -0.7384 - 0.4338j, -4.6826, -16.2309])
    assert np.max(np.abs(lin.eigenvalues - published)) < 1e-4


SYMBOLIC_CASES = [
    ("cart_pole.phm", dict(at={"theta": "pi"}, open_loop=True)),
    ("pendulum2.phm", dict(at=HANGING)),
    ("slider_crank_cartesian.phm", None),  # 28 states: numeric only (NotYetSupported)
    ("double_pendulum.phm", dict(at={"q1": 0.3, "q2": -0.2})),  # not an equilibrium: the Jacobian all the same
    ("DAE", dict(at={"x": 2}, inputs={"u": 3.0})),
]


@pytest.mark.filterwarnings("ignore:.*not an equilibrium")
@pytest.mark.parametrize("name, kw", SYMBOLIC_CASES, ids=[c[0] for c in SYMBOLIC_CASES])
def test_symbolic_matrices_equal_the_numeric_ones(name, kw):
    m = pdsl.Model.from_text(DAE) if name == "DAE" else pdsl.load(MODELS / name)
    if kw is None:
        with pytest.raises(PdslError) as err:
            m.linearize(trim=True).symbolic()
        assert err.value.codes == ["NotYetSupported"] and "at most 12 states" in str(err.value)
        return
    lin = m.linearize(**kw)
    values = {q.symbol: sp.Float(v, 17) for q, v in zip(lin.system.params, lin.point.p)}
    for got, want in zip(lin.symbolic().numeric(values), (lin.A, lin.B, lin.C, lin.D)):
        assert got.shape == want.shape and np.allclose(got, want, rtol=1e-12, atol=1e-12), name


def test_cart_pole_symbolic_a_is_exact_at_pi():
    lin = pdsl.load(MODELS / "cart_pole.phm").linearize(at={"theta": "pi"}, open_loop=True)
    M, m, l, g, J, b = _symbols(lin, "M m l g J b")
    delta = (M + m) * (J + m * l**2) - (m * l) ** 2
    S = lin.symbolic()
    assert sp.simplify(S.A[3, 1] - (M + m) * m * g * l / delta) == 0  # ∂θ̈/∂θ at the top
    assert sp.simplify(S.B[2, 0] - (J + m * l**2) / delta) == 0


# ---------------------------------------------------------------- rigid bodies: the slider-crank
def _slider_crank_reduced():
    """ω²(θ) = V''/M of the reduced Lagrangian in the crank angle θ (models/slider_crank_cartesian.phm)."""
    th, thd = sp.symbols("theta thetadot")
    r, l, w, k, th0, g = 0.1, 0.3, 0.02, 1.0, 1.0, 9.81
    mc, mr, mb = 0.5, 0.3, 0.5
    Ic, Ir = mc * (r**2 + w**2) / 12, mr * (l**2 + w**2) / 12
    C = sp.Matrix([r / 2 * sp.cos(th), r / 2 * sp.sin(th)])
    A = sp.Matrix([r * sp.cos(th), r * sp.sin(th)])
    xb = r * sp.cos(th) + sp.sqrt(l**2 - r**2 * sp.sin(th) ** 2)
    B = sp.Matrix([xb, 0])
    Rc = (A + B) / 2
    phi = sp.atan2(-r * sp.sin(th), xb - r * sp.cos(th))

    def vel(e):
        return sp.diff(e, th) * thd

    T = (Ic * thd**2 + mc * (vel(C).dot(vel(C))) + mr * (vel(Rc).dot(vel(Rc))) + Ir * vel(phi) ** 2
         + mb * vel(xb) ** 2) / 2
    V = k / 2 * (th - th0) ** 2 + g * (mc * C[1] + mr * Rc[1])
    mass = sp.lambdify(th, sp.diff(T, thd, 2))
    dV, d2V = sp.lambdify(th, sp.diff(V, th)), sp.lambdify(th, sp.diff(V, th, 2))
    return mass, dV, d2V


@pytest.mark.parametrize("formulation", ["hamiltonian", "lagrangian"])
def test_slider_crank_frequency_matches_the_reduced_lagrangian(formulation):
    m = pdsl.load(MODELS / "slider_crank_cartesian.phm", formulation=formulation)
    lin = m.linearize(trim=True)
    assert len(lin.states) == 2 and len(lin.dependent) == 26  # 28 Cartesian states, 1 degree of freedom
    pt = lin.point
    theta = float(np.asarray(m.numeric.outputs(pt.t, pt.x, pt.z, pt.p, pt.u)).ravel()[0])
    mass, dV, d2V = _slider_crank_reduced()
    th = theta
    for _ in range(20):  # the reduced equilibrium, by Newton from the trimmed angle
        th -= dV(th) / d2V(th)
    assert abs(th - theta) < 1e-9
    omega = np.sqrt(d2V(th) / mass(th))
    assert _rel(_frequencies(lin), [omega]) < 1e-9


RIGID = """
model RigidPendulum
  space 2
  param L = 1, m = 2, w = 0.1, g = 9.81
  body bar = rigid(dim = 2, mass = m, moments = [L^2/12, w^2/12])
  joint pivot: ground, bar.at([-L/2, 0])
  gravity g
end
"""


@pytest.mark.parametrize("formulation", ["hamiltonian", "lagrangian"])
def test_rigid_bar_pendulum_frequency_numeric_and_symbolic(formulation):
    """A bar pivoted at its end: ω² = m g (L/2) / I_pivot = 6 g L / (4 L² + w²) (I_pivot = m (L² + w²)/12 + m L²/4);
    12 Cartesian states (centre and two axis points), 10 invariants. Hanging: ±iω; upright: ±ω."""
    m = pdsl.Model.from_text(RIGID, formulation=formulation)
    hanging = m.linearize(at={"bar.x": "0", "bar.y": "-L/2", "bar.a1.x": "0", "bar.a1.y": "-L/2 - 1",
                              "bar.a2.x": "1", "bar.a2.y": "-L/2"})
    assert len(hanging.states) == 2 and len(hanging.dependent) == 10 and hanging.is_equilibrium
    w2 = 6 * 9.81 * 1 / (4 * 1 + 0.1**2)
    assert _rel(_frequencies(hanging), [np.sqrt(w2)]) < 1e-12
    L, g, w = _symbols(hanging, "L g w")
    A = hanging.symbolic().A
    assert sp.simplify(A[0, 1] * A[1, 0] + 6 * g * L / (4 * L**2 + w**2)) == 0  # −ω², exactly


# ---------------------------------------------------------------- DAEs, trim, ranks
DAE = """
model D
  param a = 2
  var x = 1, y = 0.5
  input u
  der(x) = -a*x + y + u
  0 = y^3 + y - x
end
"""


def test_algebraic_variables_are_eliminated_by_the_implicit_function_theorem():
    m = pdsl.Model.from_text(DAE)
    assert m.numeric.z_names == ("y",)
    lin = m.linearize(at={"x": 2}, inputs={"u": 3.0})  # y³ + y = 2: y = 1, dy/dx = 1/(3y² + 1) = 1/4
    assert abs(lin.point.z[0] - 1.0) < 1e-14 and lin.is_equilibrium  # −4 + 1 + 3 = 0
    assert abs(lin.A[0, 0] - (-2 + 0.25)) < 1e-14 and abs(lin.B[0, 0] - 1) < 1e-14
    trimmed = m.linearize(at={"x": 10}, trim=True)  # y = 2, u = 2·10 − 2
    assert abs(trimmed.point.u[0] - 18) < 1e-9 and trimmed.point.trimmed == ("y", "u")
    assert abs(trimmed.A[0, 0] - (-2 + 1 / 13)) < 1e-12


MSD = """
model MSD
  param m = 2, k = 8, c = 0.4
  var x = 0, v = 0
  input F
  der(x) = v
  m*der(v) = -k*x - c*v + F
end
"""


def test_trim_finds_the_input_that_holds_a_point():
    lin = pdsl.Model.from_text(MSD).linearize(at={"x": 0.5}, trim=True)
    assert abs(lin.point.u[0] - 4.0) < 1e-12 and abs(lin.point.x[1]) < 1e-12  # F = k·x, v = 0
    assert lin.point.trimmed == ("v", "F") and lin.point.undetermined == ()
    wn, zeta = np.sqrt(8 / 2), 0.4 / (2 * np.sqrt(8 * 2))
    assert _rel(lin.natural_frequency, [wn, wn]) < 1e-12 and _rel(lin.damping, [zeta, zeta]) < 1e-12
    held = pdsl.Model.from_text(MSD).linearize(at={"x": 0.5, "v": 0}, inputs={"F": 4.0}, trim=True)
    assert held.point.trimmed == () and held.is_equilibrium  # nothing left to solve, and it holds
    with pytest.raises(PdslError) as err:  # nothing left to solve, and it does not hold: m·der(v) = −4 + 1
        pdsl.Model.from_text(MSD).linearize(at={"x": 0.5, "v": 0}, inputs={"F": 1.0}, trim=True)
    assert err.value.codes == ["TrimFailed"] and "der(v) = -1.5" in str(err.value)
    assert err.value.diagnostics[0].span.line == 4  # the state's declaration


TWINS = """
model Twins
  param k = 4
  var x1 = 0, v1 = 0, x2 = 0, v2 = 0
  input F
  output y = x1 - x2
  der(x1) = v1
  der(v1) = -k*x1 + F
  der(x2) = v2
  der(v2) = -k*x2 + F
end
"""


def test_ranks_of_two_identical_oscillators_on_one_input():
    """Their difference is not controllable (rank 2 of 4) and their sum not observable from y = x1 − x2."""
    lin = pdsl.Model.from_text(TWINS).linearize()
    assert lin.controllability_rank == 2 and lin.observability_rank == 2
    assert lin.outputs == ("y",) and np.allclose(lin.C, [[1, 0, -1, 0]]) and np.allclose(lin.D, [[0]])


def test_krylov_rank_agrees_with_the_rank_of_the_controllability_matrix():
    rng = np.random.default_rng(7)
    for n, m, r in [(4, 1, 4), (5, 2, 3), (6, 1, 2)]:
        T = np.linalg.qr(rng.standard_normal((n, n)))[0]
        A0 = np.zeros((n, n))
        A0[:r, :r] = rng.standard_normal((r, r))
        A0[r:, r:] = rng.standard_normal((n - r, n - r))
        A0[:r, r:] = rng.standard_normal((r, n - r))
        B0 = np.zeros((n, m))
        B0[:r] = rng.standard_normal((r, m))
        A, B = T @ A0 @ T.T, T @ B0  # the controllable subspace has dimension r (Kalman decomposition)
        assert krylov_rank(A, B) == r


def test_partition_takes_the_rows_of_d_phi_first_and_the_rates_with_their_positions():
    G = np.array([[0.0, 2.0, 0.0, 0.0],   # Φ = x² + y² − l² at (0, −1): ∂Φ/∂y
                  [0.0, 0.0, 0.0, -1.0]])  # Φ̇ = x vx + y vy: ∂/∂vy
    dep, rows, V = partition(G, frozenset({2, 3}), {0: 2, 1: 3})
    assert dep == [1, 3] and rows == [0, 1]
    assert np.allclose(G @ V, 0) and V.shape == (4, 2)
    redundant = np.vstack([G, 2 * G[0]])  # a repeated constraint row is dependent, not a pivot
    assert partition(redundant)[0] == [1, 3]


# ---------------------------------------------------------------- LQR in simulate
def _lqr(lin, q=(1.0, 1.0, 1.0, 1.0), r=1.0):
    from scipy.linalg import solve_continuous_are

    Q, R = np.diag(q), np.array([[r]])
    P = solve_continuous_are(lin.A, lin.B, Q, R)
    return np.linalg.solve(R, lin.B.T @ P).ravel()


LAW_ORDER = ("x", "der(x)", "theta", "der(theta)")  # the law F = −(K[1] x + K[2] ẋ + K[3] θ + K[4] θ̇)


def _with_gains(K, states=LAW_ORDER) -> dict:
    """K (in the order of ``states``: the linearization's) as the law's parameters K[1..4]."""
    by_state = dict(zip(states, K))
    return {f"K[{i + 1}]": float(by_state[s]) for i, s in enumerate(LAW_ORDER)}


def test_lqr_gains_from_linearize_stabilise_the_bundled_cart_pole():
    """The bundled law F = −K·(x, ẋ, θ, θ̇) about the hanging position: open loop the cart never returns (a zero
    eigenvalue) and the pole swings almost undamped; with the LQR gains the closed loop linearizes to eig(A − BK)
    and `simulate` brings the state to rest at the origin."""
    m = pdsl.load(MODELS / "cart_pole.phm")
    plant = m.linearize(at={"x": 0, "theta": 0}, open_loop=True)
    assert np.min(np.abs(plant.eigenvalues)) < 1e-12  # not asymptotically stable open loop
    K = _lqr(plant)
    assert plant.states == ("x", "theta", "der(x)", "der(theta)")
    closed = m.linearize(at={"x": 0, "theta": 0}, params=_with_gains(K, plant.states))
    want = np.linalg.eigvals(plant.A - plant.B @ K[None, :])
    assert np.max(np.abs(np.sort_complex(closed.eigenvalues) - np.sort_complex(want))) < 1e-10
    assert np.max(closed.eigenvalues.real) < -0.1
    run = m.simulate(30.0, 0.1, params=_with_gains(K, plant.states))
    final = np.abs(run.to_numpy()[-1, 1:5])
    assert np.max(final) < 1e-3, final
    idle = m.simulate(30.0, 0.1, params=_with_gains([0, 0, 0, 0]))
    assert abs(idle["x"][-1]) > 0.05  # without the gains the cart does not come back


UPRIGHT = (MODELS / "cart_pole.phm").read_text(encoding="utf-8").replace(
    "K[3]*theta", "K[3]*(theta - pi)").replace("model CartPole", "model CartPoleUp")


def test_lqr_gains_from_linearize_stabilise_the_upright_cart_pole():
    """The unstable pole: the same cart–pole with the law written about θ = π; LQR from the open-loop
    linearization there holds the pole up in `simulate` from 0.1 rad off; without gains it falls."""
    assert "(theta - pi)" in UPRIGHT
    m = pdsl.Model.from_text(UPRIGHT)
    plant = m.linearize(at={"theta": "pi"}, trim=True, open_loop=True)
    assert np.max(plant.eigenvalues.real) > 5
    K = _lqr(plant, q=(10.0, 1.0, 10.0, 1.0))
    start = {"x": 0.0, "theta": np.pi - 0.1}
    run = m.simulate(10.0, 0.05, init=start, params=_with_gains(K, plant.states))
    assert np.max(np.abs(run["theta"] - np.pi)) < 0.2 and abs(run["theta"][-1] - np.pi) < 1e-3
    assert abs(run["x"][-1]) < 1e-2
    fall = m.simulate(3.0, 0.05, init=start, params=_with_gains([0, 0, 0, 0]))
    assert np.max(np.abs(fall["theta"] - np.pi)) > 1.0


# ---------------------------------------------------------------- the record
def test_to_control_gives_a_state_space_with_the_same_poles():
    control = pytest.importorskip("control")
    lin = pdsl.load(MODELS / "dc_motor.phm").linearize()
    ss = lin.to_control()
    assert isinstance(ss, control.StateSpace)
    assert np.allclose(np.sort(ss.poles().real), np.sort(lin.eigenvalues.real), rtol=1e-12)


def test_to_control_without_python_control_says_what_to_install(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "control", None)
    lin = pdsl.load(MODELS / "dc_motor.phm").linearize()
    with pytest.raises(PdslError) as err:
        lin.to_control()
    assert err.value.codes == ["MissingDependency"] and "pip install control" in str(err.value)


def test_point_values_may_be_expressions_of_the_parameters_but_never_python():
    m = pdsl.load(MODELS / "pendulum2.phm")
    lin = m.linearize(at=HANGING)
    y = dict(zip(lin.state_names, lin.point.x))
    assert y["b[1].y"] == -L1 and y["b[2].y"] == -(L1 + L2)
    with pytest.raises(PdslError) as err:
        m.linearize(at={"b[1].y": "__import__('os')"})
    assert err.value.codes[0] in ("BadCharacter", "Syntax")
