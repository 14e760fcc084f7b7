"""Nonholonomic constraints: the rolling disk (BENCHMARKS D4, Part G check 16) and the Frobenius
test that tells nonholonomic velocity constraints from holonomic ones in disguise (LANGUAGE.md §5).

* The bundled ``models/rolling_disk.phm`` (Lagrange–d'Alembert multipliers) keeps
  p1 = (I + mR²)θ̇ constant, follows the analytic circle of D4 to 1e-8 over 20 s, and satisfies
  the Hamel momentum equations 72–75 with the printed structure constants.
* ``pdsl.lower.integrability.classify_velocity_constraints`` on hand-made one-forms and on models.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import sympy as sp

from pdsl.lower.integrability import classify_model_constraints, classify_velocity_constraints, velocity_rows
from pdsl.pipeline import compile_model, load_models
from pdsl.sim.simulate import simulate, time_grid

MODELS = Path(__file__).resolve().parents[2] / "models"
I, J, M, R = 0.4, 0.25, 1.3, 0.3  # the bundled parameters (Part G check 16 example)
W_THETA, W_PHI = 1.7, 0.6


def _disk():
    return compile_model(MODELS / "rolling_disk.phm")


def _start(phi0, theta0=0.2, x0=0.1, y0=-0.3, w=W_THETA, W=W_PHI):
    """A start on the constraint distribution: ẋ = R cos φ θ̇, ẏ = R sin φ θ̇ (D4, Eq. 2)."""
    return {"theta": theta0, "phi": phi0, "x": x0, "y": y0, "der(theta)": w, "der(phi)": W,
            "der(x)": R * np.cos(phi0) * w, "der(y)": R * np.sin(phi0) * w}


def analytic(t, phi0, theta0=0.2, x0=0.1, y0=-0.3, w=W_THETA, W=W_PHI):
    """D4 closed form: θ = θ0 + wt, φ = φ0 + Wt, x = x0 + (Rw/W)(sin φ − sin φ0), y = y0 − (Rw/W)(cos φ − cos φ0)."""
    phi = phi0 + W * t
    return np.column_stack([
        theta0 + w * t, phi,
        x0 + R * w / W * (np.sin(phi) - np.sin(phi0)),
        y0 - R * w / W * (np.cos(phi) - np.cos(phi0)),
        np.full_like(t, w), np.full_like(t, W),
        R * w * np.cos(phi), R * w * np.sin(phi),
    ])


def test_bundled_disk_parameters_and_states():
    c = _disk()
    assert c.numeric.x_names == ("theta", "phi", "x", "y", "der(theta)", "der(phi)", "der(x)", "der(y)")
    assert dict(zip(c.numeric.p_names, c.numeric.p_default)) == {"I": I, "J": J, "m": M, "R": R}


@pytest.mark.parametrize("phi0", [0.0, 0.7, -2.1])
def test_check16_p1_conserved_and_circle_solution(phi0):
    c = _disk()
    res = simulate(c.numeric, time_grid(20.0, 0.01), x0=_start(phi0), rtol=1e-10)
    ref = analytic(res.t, phi0)
    assert np.abs(res.x - ref).max() <= 1e-8  # measured 2.6e-9 (phi0 = 0)
    p1 = (I + M * R**2) * res.x[:, 4]
    assert np.abs(p1 - p1[0]).max() <= 1e-10 * abs(p1[0])  # measured 1e-16
    # the contact point stays on the circle of radius R|w/W| about its centre
    centre = np.array([0.1 - R * W_THETA / W_PHI * np.sin(phi0), -0.3 + R * W_THETA / W_PHI * np.cos(phi0)])
    radius = np.linalg.norm(res.x[:, 2:4] - centre, axis=1)
    assert np.abs(radius - R * W_THETA / W_PHI).max() <= 1e-8
    # the velocity constraints hold along the run
    th_d, ph = res.x[:, 4], res.x[:, 1]
    assert np.abs(res.x[:, 6] - R * np.cos(ph) * th_d).max() <= 1e-8
    assert np.abs(res.x[:, 7] - R * np.sin(ph) * th_d).max() <= 1e-8


def test_check16_hamel_momentum_equations_hold_on_the_lowered_dynamics():
    """Eqs. 72–75 at random states on the distribution, with accelerations from the lowered rhs:
    p2 = Jφ̇ − m y ẋ + m x ẏ, p3 = m ẋ, p4 = m ẏ;  ṗ2 = y φ̇ p4 + x φ̇ p3, ṗ3 = −φ̇ p4, ṗ4 = φ̇ p3,
    and p1 = (I + mR²) θ̇ with ṗ1 = 0."""
    c = _disk()
    num = c.numeric
    rng = np.random.default_rng(16)
    worst = 0.0
    for _ in range(50):
        th, ph, x, y = rng.normal(size=4)
        w, W = rng.normal(size=2)
        z = np.array([th, ph, x, y, w, W, R * np.cos(ph) * w, R * np.sin(ph) * w])
        zd = np.asarray(num.rhs(0.0, z, num.p_default, np.zeros(0))).ravel()
        xd, yd, phd = z[6], z[7], z[5]
        thdd, phdd, xdd, ydd = zd[4:]
        p3, p4 = M * xd, M * yd
        p2_dot = J * phdd - M * y * xdd + M * x * ydd  # the ẋẏ terms cancel
        res = [
            (I + M * R**2) * thdd,
            p2_dot - (y * phd * p4 + x * phd * p3),
            M * xdd + phd * p4,
            M * ydd - phd * p3,
        ]
        worst = max(worst, np.abs(res).max())
    assert worst <= 1e-12


# ====================================================================== Frobenius test
th, ph, x, y, z, q1, q2, Rs = sp.symbols("theta phi x y z q1 q2 R", real=True)


def test_rolling_disk_constraints_are_nonholonomic():
    rows = [[-Rs * sp.cos(ph), 0, 1, 0], [-Rs * sp.sin(ph), 0, 0, 1]]
    out = classify_velocity_constraints(rows, [th, ph, x, y])
    assert [ok for ok, _ in out] == [False, False]
    assert all("nonholonomic" in why and "Lie bracket" in why for _, why in out)
    # either constraint alone is nonholonomic as well (ω ∧ dω = R sin φ dx∧dφ∧dθ ≠ 0)
    for row in rows:
        assert classify_velocity_constraints([row], [th, ph, x, y])[0][0] is False


@pytest.mark.parametrize(
    "rows, coords",
    [
        ([[1, -2]], [x, y]),  # der(x) = 2 der(y): h = x − 2y
        ([[y, x, 0]], [x, y, z]),  # d(xy) = 0
        ([[y, -x, 0]], [x, y, z]),  # y dx − x dy = y² d(x/y): needs an integrating factor
        ([[sp.exp(x) * y, -sp.exp(x) * x, 0]], [x, y, z]),  # the same, rescaled
        ([[2 * x, 2 * y, 2 * z]], [x, y, z]),  # d(x² + y² + z²)
        ([[sp.cos(q2), 0, 1], [0, 1, 0]], [q1, q2, z]),  # with dq2 = 0 the first is exact
        ([[1, 0, 0, 0], [0, 1, 0, 0]], [th, ph, x, y]),  # two exact constraints
    ],
)
def test_integrable_constraints_are_holonomic_in_disguise(rows, coords):
    out = classify_velocity_constraints(rows, coords)
    assert all(ok for ok, _ in out), out
    assert all("holonomic in disguise" in why for _, why in out)


def test_heisenberg_form_nonholonomic_alone_integrable_with_a_partner():
    """dz − y dx is the classic non-integrable form; together with dy = 0 (y constant) it is d(z − yx)."""
    alone = classify_velocity_constraints([[-y, 0, 1]], [x, y, z])
    assert alone[0][0] is False
    together = classify_velocity_constraints([[-y, 0, 1], [0, 1, 0]], [x, y, z])
    assert [ok for ok, _ in together] == [True, True]
    assert "together with the other constraints" in together[0][1]


def test_single_constraint_matches_omega_wedge_domega():
    """For one constraint the verdict is ω ∧ dω = 0, checked symbolically on random cubic forms."""
    rng = np.random.default_rng(3)
    X = [x, y, z]
    for _ in range(6):
        a = [sum(int(c) * m for c, m in zip(rng.integers(-2, 3, size=4), [1, x, y * z, x**2])) for _ in range(3)]
        # ω ∧ dω = Σ cyclic a_i (∂_j a_k − ∂_k a_j) (the 3-form coefficient)
        wedge = sp.expand(a[0] * (sp.diff(a[2], y) - sp.diff(a[1], z)) + a[1] * (sp.diff(a[0], z) - sp.diff(a[2], x))
                          + a[2] * (sp.diff(a[1], x) - sp.diff(a[0], y)))
        ok, _ = classify_velocity_constraints([a], X)[0]
        assert ok == (wedge == 0)


def test_affine_time_dependent_constraint_uses_time_as_a_coordinate():
    """Forms on (q, t) (the resolver rejects affine constraints today; the test is ready for them)."""
    t = sp.Symbol("t", real=True)
    # ẋ = cos(t): x − sin t is conserved (integrable); ẋ = y ṫ-like affine term y: dx − y dt with ẏ free
    assert classify_velocity_constraints([[1, 0, -sp.cos(t)]], [x, y, t])[0][0] is True
    assert classify_velocity_constraints([[1, 0, -y]], [x, y, t])[0][0] is False


def test_rows_of_a_wrong_width_are_rejected():
    with pytest.raises(ValueError):
        classify_velocity_constraints([[1, 2, 3]], [x, y])


# ---------------------------------------------------------------------- on models
def test_bundled_rolling_disk_model_is_nonholonomic():
    model = load_models(MODELS / "rolling_disk.phm")[0]
    rows, coords, cons = velocity_rows(model)
    assert [c.name for c in coords] == ["theta", "phi", "x", "y"] and len(rows) == 2
    verdicts = classify_model_constraints(model)
    assert [ok for _, ok, _ in verdicts] == [False, False]
    assert [c.span.line for c, _, _ in verdicts] == [c.span.line for c in cons]


def test_integrable_velocity_constraint_in_a_model_is_reported(tmp_path):
    path = tmp_path / "slide.phm"
    path.write_text(
        "model Slide\n"
        "  param m = 1.0, k = 2.0\n"
        "  coord x = 0.5, y = 0.0\n"
        "  lagrangian m/2*(der(x)^2 + der(y)^2) - k/2*(x^2 + y^2)\n"
        "  constraint der(x) = 2*der(y)\n"
        "  constraint x*der(y) + y*der(x) = 0\n"
        "end\n"
    )
    model = load_models(path)[0]
    rows, coords, _ = velocity_rows(model)
    assert [c.name for c in coords] == ["x", "y"] and rows[0] == [1, -2]
    verdicts = classify_model_constraints(model)
    assert [ok for _, ok, _ in verdicts] == [True, True]
    assert [c.span.line for c, _, _ in verdicts] == [5, 6]
