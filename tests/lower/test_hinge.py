"""`hinge` (BENCHMARKS A2.5 axis restriction, Jacobians of A2.8; Part G check 3).

A hinge is a joint (d rows A − B = 0) plus the d − 1 independent components of the axis
restriction R_A u = R_B u (pdsl/lower/cartesian.py, ``_hinge_axis_rows``). Checked here:

* a physical pendulum hinged to the ground equals the generalized-coordinate model
  (I + m d²)θ̈ = −m g d sin θ, and the same system written with a ball joint plus two links
  that pin a second axis point (an independent route through link/joint rows only);
* a double physical pendulum (body-to-body hinge, bilinear rows, off-axis hinge direction)
  equals its joint + links version, conserves energy and keeps its constraints;
* the lowering's DΦ, D_xΦ̇, D_pΦ̇ equal central finite differences, CasADi AD and the A2.8 closed
  forms entry by entry (joint rows c~, axis rows Δu and Δw), and D_pΦ̇ = D_ẋΦ̇ (M⁻¹ ⊗ I);
* located errors for degenerate hinges.
"""

from __future__ import annotations

import casadi as ca
import numpy as np
import pytest
from scipy.spatial.transform import Rotation

from pdsl.backend.sympy_to_casadi import Converter
from pdsl.diagnostics import PdslError
from pdsl.lower.cartesian import node_mass_matrix
from pdsl.pipeline import compile_model
from pdsl.sim.simulate import simulate, time_grid

M_A, LAM_A, D_A = 1.2, (0.3, 0.2, 0.1), 0.5  # body a: mass, moments, pivot at a.at([0, 0, D_A])
M_B, LAM_B = 0.7, (0.15, 0.25, 0.05)
G = 9.81

DOOR = f"""
model Door "physical pendulum on a hinge about the world x axis"
  space 3
  param m = {M_A}, g = {G}
  body a = rigid(dim = 3, mass = m, moments = [{LAM_A[0]}, {LAM_A[1]}, {LAM_A[2]}])
  hinge ground, a.at([0, 0, {D_A}]), axis = [1, 0, 0]
  gravity g
end
"""

# the same hinge: a ball joint at the pivot, and the axis point a.at([1, 0, d]) (world (1, 0, 0))
# held by two links of length 1 to (1, 1, 0) and (1, 0, 1)
DOOR_LINKS = f"""
model DoorLinks
  space 3
  param m = {M_A}, g = {G}
  body a = rigid(dim = 3, mass = m, moments = [{LAM_A[0]}, {LAM_A[1]}, {LAM_A[2]}])
  joint ground, a.at([0, 0, {D_A}])
  link ground.at([1, 1, 0]), a.at([1, 0, {D_A}]), length = 1
  link ground.at([1, 0, 1]), a.at([1, 0, {D_A}]), length = 1
  gravity g
end
"""

# θ about x: x_cm = (0, d sin θ, −d cos θ), I_x = m(λ2 + λ3) (A2.1)
DOOR_ANGLE = f"""
model DoorAngle
  param m = {M_A}, g = {G}, d = {D_A}, I = {M_A * (LAM_A[1] + LAM_A[2])}
  coord th
  lagrangian (I + m*d^2)/2*der(th)^2 + m*g*d*cos(th)
end
"""

# double physical pendulum, both hinges along u = (1, 2, 2)/3 in the bodies' frames; b hangs
# from a.at([0, 0, -0.4]) by its point b.at([0, 0, 0.3])
U = np.array([1.0, 2.0, 2.0]) / 3.0
DOUBLE = f"""
model DoubleDoor
  space 3
  param g = {G}
  body a = rigid(dim = 3, mass = {M_A}, moments = [{LAM_A[0]}, {LAM_A[1]}, {LAM_A[2]}])
  body b = rigid(dim = 3, mass = {M_B}, moments = [{LAM_B[0]}, {LAM_B[1]}, {LAM_B[2]}])
  hinge ground, a.at([0, 0, {D_A}]), axis = [1, 2, 2]
  hinge a.at([0, 0, -0.4]), b.at([0, 0, 0.3]), axis = [1, 2, 2]
  gravity g
end
"""


def _perp(u):
    """Two unit vectors completing u/|u| to an orthonormal frame."""
    u = u / np.linalg.norm(u)
    w1 = np.cross(u, [0.0, 0.0, 1.0] if abs(u[2]) < 0.9 else [1.0, 0.0, 0.0])
    w1 /= np.linalg.norm(w1)
    return w1, np.cross(u, w1)


W1, W2 = _perp(U)


def vec(v) -> str:
    return "[" + ", ".join(repr(float(x)) for x in v) + "]"


# the same double pendulum through joints and links: axis points at ±1 along u from each pivot,
# each pinned by two unit links to points of the parent at pivot + u ± w (distance 1 apart)
DOUBLE_LINKS = f"""
model DoubleDoorLinks
  space 3
  param g = {G}
  body a = rigid(dim = 3, mass = {M_A}, moments = [{LAM_A[0]}, {LAM_A[1]}, {LAM_A[2]}])
  body b = rigid(dim = 3, mass = {M_B}, moments = [{LAM_B[0]}, {LAM_B[1]}, {LAM_B[2]}])
  joint ground, a.at([0, 0, {D_A}])
  link ground.at({vec(U + W1)}), a.at({vec(np.array([0, 0, D_A]) + U)}), length = 1
  link ground.at({vec(U + W2)}), a.at({vec(np.array([0, 0, D_A]) + U)}), length = 1
  joint a.at([0, 0, -0.4]), b.at([0, 0, 0.3])
  link a.at({vec(np.array([0, 0, -0.4]) + U + W1)}), b.at({vec(np.array([0, 0, 0.3]) + U)}), length = 1
  link a.at({vec(np.array([0, 0, -0.4]) + U + W2)}), b.at({vec(np.array([0, 0, 0.3]) + U)}), length = 1
  gravity g
end
"""

_CACHE: dict = {}


def compiled(text: str, formulation: str = "hamiltonian"):
    key = (text, formulation)
    if key not in _CACHE:
        _CACHE[key] = compile_model("hinge.phm", text=text, formulation=formulation)
    return _CACHE[key]


def skew(w):
    return np.array([[0, -w[2], w[1]], [w[2], 0, -w[0]], [-w[1], w[0], 0]])


def nodes(R, Rdot, xcm, vcm):
    X = [xcm] + [xcm + R[:, k] for k in range(3)]
    V = [vcm] + [vcm + Rdot[:, k] for k in range(3)]
    return X, V


def shown(prefix, X, V):
    out = {}
    for node, vel, name in zip(X, V, [prefix, f"{prefix}.a1", f"{prefix}.a2", f"{prefix}.a3"]):
        for k, ax in enumerate("xyz"):
            out[f"{name}.{ax}"], out[f"{name}.v{ax}"] = node[k], vel[k]
    return out


def door_start(theta, omega):
    """Rotation θ about world x of a body whose local x is the hinge axis; pivot c at the origin."""
    R = Rotation.from_rotvec([theta, 0, 0]).as_matrix()
    Rdot = R @ skew([omega, 0, 0])
    c = np.array([0, 0, D_A])
    return shown("a", *nodes(R, Rdot, -R @ c, -Rdot @ c))


def double_start(t1, w1, t2, w2):
    """a turned t1 about u (world = body, frames start aligned), b a further t2 about the same u."""
    Ra = Rotation.from_rotvec(t1 * U).as_matrix()
    Rb = Rotation.from_rotvec((t1 + t2) * U).as_matrix()
    Ra_dot, Rb_dot = skew(w1 * U) @ Ra, skew((w1 + w2) * U) @ Rb  # spatial angular velocities ω u
    ca_, cpa, cb = np.array([0, 0, D_A]), np.array([0, 0, -0.4]), np.array([0, 0, 0.3])
    xa, va = -Ra @ ca_, -Ra_dot @ ca_
    joint, vjoint = xa + Ra @ cpa, va + Ra_dot @ cpa
    xb, vb = joint - Rb @ cb, vjoint - Rb_dot @ cb
    return {**shown("a", *nodes(Ra, Ra_dot, xa, va)), **shown("b", *nodes(Rb, Rb_dot, xb, vb))}


# ---------------------------------------------------------------------------------------------- dynamics
@pytest.mark.parametrize("formulation", ["hamiltonian", "lagrangian"])
def test_hinged_door_equals_the_angle_model_and_the_link_construction(formulation):
    grid = time_grid(4.0, 0.02)
    init = door_start(0.9, 1.3)
    hinge = simulate(compiled(DOOR, formulation).numeric, grid, x0=init, rtol=1e-11, atol=1e-13)
    assert not hinge.info["projection"].changes  # the start is on the manifold
    links = simulate(compiled(DOOR_LINKS, formulation).numeric, grid, x0=init, rtol=1e-11, atol=1e-13)
    angle = simulate(compiled(DOOR_ANGLE).numeric, grid, x0={"th": 0.9, "der(th)": 1.3}, rtol=1e-12, atol=1e-14)
    assert np.abs(hinge.shown - links.shown).max() <= 1e-8
    names = list(hinge.shown_names)
    th = angle.x[:, 0]
    assert np.abs(hinge.shown[:, names.index("a.y")] - D_A * np.sin(th)).max() <= 1e-8
    assert np.abs(hinge.shown[:, names.index("a.z")] + D_A * np.cos(th)).max() <= 1e-8
    assert np.abs(hinge.shown[:, names.index("a.x")]).max() <= 1e-10  # no motion along the axis
    assert np.abs(hinge.energy - hinge.energy[0]).max() <= 1e-8 * abs(hinge.energy[0])
    assert hinge.constraint_rms.max() <= 1e-8
    assert np.ptp(th) > 1.0  # it really swings


def test_double_hinge_equals_links_conserves_energy_and_constraints():
    """Eq. 6 against the joint + links version (Eq. 7 with hinges is covered by the door test)."""
    c = compiled(DOUBLE)
    assert c.numeric.nx // 2 - len(c.system.constraints) == 2  # 24 − 2·6 − 2·(3 + 2)
    grid = time_grid(3.0, 0.02)
    init = double_start(0.6, -0.8, -1.0, 2.0)
    hinge = simulate(c.numeric, grid, x0=init, rtol=1e-11, atol=1e-13)
    assert not hinge.info["projection"].changes
    links = simulate(compiled(DOUBLE_LINKS).numeric, grid, x0=init, rtol=1e-11, atol=1e-13)
    assert np.abs(hinge.shown - links.shown).max() <= 1e-7
    assert np.abs(hinge.energy - hinge.energy[0]).max() <= 1e-8 * np.abs(hinge.energy).max()
    assert hinge.constraint_rms.max() <= 1e-8
    # b only turns about u: its axis u stays the world direction u; and it does turn
    X = hinge.shown[:, [hinge.shown_names.index(f"b.a{k}.{ax}") for k in (1, 2, 3) for ax in "xyz"]].reshape(-1, 3, 3)
    centre = hinge.shown[:, [hinge.shown_names.index(f"b.{ax}") for ax in "xyz"]]
    Rb = np.transpose(X - centre[:, None, :], (0, 2, 1))  # columns R e_k
    assert np.abs(Rb @ U - U).max() <= 1e-8
    assert np.ptp(Rb[:, 0, 0]) > 0.1


def test_baumgarte_with_a_hinge():
    from pdsl.backend.functions import to_casadi
    from pdsl.lower import lower
    from pdsl.pipeline import load_models

    num = to_casadi(lower(load_models("d.phm", text=DOOR)[0], "lagrangian", stabilize="baumgarte"))
    grid, init = time_grid(20.0, 0.05), door_start(0.9, 4.0)
    res = simulate(num, grid, x0=init, rtol=1e-5, stabilize="baumgarte")
    ref = simulate(compiled(DOOR, "lagrangian").numeric, grid, x0=init, rtol=1e-5)
    assert res.constraint_rms.max() < 0.2 * ref.constraint_rms.max(), (res.constraint_rms.max(), ref.constraint_rms.max())


# ---------------------------------------------------------------------------------------------- Jacobians
_MATRIX: dict = {}


def lowered_jacobians(c, z):
    """DΦ, D_xΦ̇, D_pΦ̇ read off the Eq. 6 rows ṗ + DΦᵀμ₁ + (D_xΦ̇)ᵀμ₂ = f, ẋ − (D_pΦ̇)ᵀμ₂ = M⁻¹p."""
    system, num = c.system, c.numeric
    C, n = len(system.constraints), num.nx // 2
    if id(c) not in _MATRIX:
        A_sym, _ = system.linear_system()
        zs = ca.SX.sym("z", num.nx)
        symbols = {s.symbol: zs[i] for i, s in enumerate(system.states)}
        symbols.update({p.symbol: p.default for p in system.params})
        _MATRIX[id(c)] = ca.Function("A", [zs], [Converter(symbols)(A_sym)])
    A = np.asarray(_MATRIX[id(c)](z))
    return A[n : 2 * n, 2 * n : 2 * n + C].T, A[n : 2 * n, 2 * n + C : 2 * n + 2 * C].T, -A[:n, 2 * n + C : 2 * n + 2 * C].T


def mass_matrix(c):
    values = {p.symbol: p.default for p in c.model.params}
    blocks = [np.kron(np.asarray(node_mass_matrix(b.mass, b.moments).xreplace(values), dtype=float), np.eye(3))
              for b in c.model.bodies]
    n = sum(b.shape[0] for b in blocks)
    M, k = np.zeros((n, n)), 0
    for b in blocks:
        M[k : k + b.shape[0], k : k + b.shape[0]] = b
        k += b.shape[0]
    return M


def finite_difference_jacobians(c, z, h=1e-2):
    """Central differences of Φ(x) and Φ̇(x, p) = DΦ(x) M⁻¹p, DΦ itself by differences.

    Every row here (distances, joints, hinge axes) is a polynomial of degree ≤ 2 in x, so
    central differences have no truncation error: a step of 1e-2 leaves only rounding
    (~1e-13), and the check is as sharp as that.
    """
    num = c.numeric
    n = num.nx // 2
    Minv = np.linalg.inv(mass_matrix(c))
    E = h * np.eye(n)

    def phi(xs):  # columns of xs -> columns of Φ
        m = xs.shape[1]
        return np.asarray(num.constraints.map(m)(0.0, np.vstack([xs, np.zeros((n, m))]), num.p_default))

    def dphi(xs):  # columns of xs -> stacked DΦ (C × n per column)
        m = xs.shape[1]
        plus = np.repeat(xs, n, axis=1) + np.tile(E, m)
        minus = np.repeat(xs, n, axis=1) - np.tile(E, m)
        d = (phi(plus) - phi(minus)) / (2 * h)
        return [d[:, k * n : (k + 1) * n] for k in range(m)]

    x, p = z[:n], z[n:]
    D = dphi(x[:, None])[0]
    shifted = dphi(np.column_stack([x[:, None] + E, x[:, None] - E]))
    Kx = np.column_stack([(shifted[j] @ Minv @ p - shifted[n + j] @ Minv @ p) / (2 * h) for j in range(n)])
    return D, Kx, D @ Minv


@pytest.mark.parametrize("text", [DOOR, DOUBLE], ids=["ground", "body-to-body"])
def test_hinge_jacobians_match_finite_differences_and_casadi(text):
    c = compiled(text)
    num = c.numeric
    n = num.nx // 2
    M = mass_matrix(c)
    rng = np.random.default_rng(3)
    zs = ca.SX.sym("z", num.nx)
    phi = num.constraints(0, zs, num.p_default)
    xdot = ca.gradient(num.energy(0, zs, num.p_default, ca.DM.zeros(0, 1)), zs)[n:]
    phidot = ca.jtimes(phi, zs[:n], xdot)
    ad = ca.Function("J", [zs], [ca.jacobian(phi, zs[:n]), ca.jacobian(phidot, zs[:n]), ca.jacobian(phidot, zs[n:])])
    for _ in range(3):
        z = rng.normal(size=num.nx)  # generic states: the Jacobians are polynomial, no manifold needed
        mine = lowered_jacobians(c, z)
        fd = finite_difference_jacobians(c, z)
        for a, b in zip(mine, fd):
            assert np.abs(a - b).max() <= 1e-10 * max(1.0, np.abs(b).max())
        for a, b in zip(mine, ad(z)):
            assert np.abs(a - np.asarray(b)).max() <= 1e-13 * max(1.0, np.abs(np.asarray(b)).max())
        D, _, Kp = mine
        assert np.abs(Kp - D @ np.linalg.inv(M)).max() <= 1e-13 * max(1.0, np.abs(Kp).max())  # D_pΦ̇ = D_ẋΦ̇ M⁻¹


def test_hinge_rows_match_the_a2_8_closed_forms():
    """Joint rows −c~_α δ_ki (ground − X c~); axis rows w_k Δu_α (ground) and the bilinear
    (X_B Δw)_k Δu_α, (X_A Δu)_k Δw_α (body to body), with Δv = [−Σv, v]."""
    delta = lambda v: np.concatenate([[-np.sum(v)], v])  # noqa: E731
    rng = np.random.default_rng(4)
    # ground hinge, axis e1: w = e2, e3
    c = compiled(DOOR)
    z = rng.normal(size=c.numeric.nx)
    D, _, _ = lowered_jacobians(c, z)
    ct = np.array([1 - D_A, 0, 0, D_A])
    for k in range(3):
        row = np.zeros((4, 3))
        row[:, k] = -ct
        assert np.abs(D[6 + k] - row.ravel()).max() <= 1e-15
    for j, w in enumerate((np.array([0, 1.0, 0]), np.array([0, 0, 1.0]))):
        assert np.abs(D[9 + j] - np.outer(delta(np.array([1.0, 0, 0])), w).ravel()).max() <= 1e-15
    # body-to-body hinge of DOUBLE, axis u = (1, 2, 2)/3 up to scale: rows 6+6+5+3 .. 6+6+5+4
    c = compiled(DOUBLE)
    z = rng.normal(size=c.numeric.nx)
    D, _, _ = lowered_jacobians(c, z)
    Xa, Xb = z[:12].reshape(4, 3), z[12:24].reshape(4, 3)
    u = np.array([1.0, 2.0, 2.0])
    rows = D[-2:]
    # the lowering's w_k: an orthonormal basis of u^⊥; recover it from the rows and check the form
    for row in rows:
        Ga, Gb = row[:12].reshape(4, 3), row[12:24].reshape(4, 3)
        # dΦ/dX_A[α, k] = (X_B Δw)_k Δu_α  ->  Ga = outer(Δu, X_B Δw)
        xbw = Ga[1] / delta(u)[1]  # X_B Δw, read from the α = 1 node
        assert np.abs(Ga - np.outer(delta(u), xbw)).max() <= 1e-13 * np.abs(Ga).max()
        # X_B Δw = Σ_i w_i (x_i − x_0): solve for the lowering's w (X_B generic) and check Gb with it
        w = np.linalg.solve((Xb[1:] - Xb[0]).T, xbw)
        assert abs(w @ u) <= 1e-12 and abs(np.linalg.norm(w) - 1) <= 1e-12  # w ⊥ u, unit
        assert np.abs(Gb - np.outer(delta(w), Xa.T @ delta(u))).max() <= 1e-13 * np.abs(Gb).max()


# ---------------------------------------------------------------------------------------------- errors
def _error(text):
    with pytest.raises(PdslError) as info:
        compile_model("bad.phm", text=text)
    return info.value


def test_degenerate_hinges_are_located_errors():
    base = "model Bad\n  space 3\n  body r = rigid(dim = 3, mass = 1, moments = [1, 1, 1])\n"
    err = _error(base + "  hinge ground, r.at([0, 0, 1]), axis = [0, 0, 0]\nend\n")
    assert err.codes == ["BadHinge"] and err.diagnostics[0].span.line == 4 and "zero" in str(err)
    err = _error(base + "  param k = 1\n  hinge ground, r.at([0, 0, 1]), axis = [0, 0, k]\nend\n")
    assert err.codes == ["NotConstant"] and err.diagnostics[0].span.line == 5
    err = _error("model Bad\n  space 3\n  body r = rigid(dim = 2, mass = 1, moments = [1, 1])\n"
                 "  hinge ground, r.at([0, 1]), axis = [0, 0, 1]\nend\n")
    assert err.codes == ["BadHinge"] and err.diagnostics[0].span.line == 4 and "dim = 3" in str(err)
    # a link that the hinge already holds (its axis point r.at([0, 0, 2]) stays at (0, 0, 1)): redundant
    err = _error(base + "  hinge ground, r.at([0, 0, 1]), axis = [0, 0, 1]\n"
                 "  link ground.at([1, 0, 1]), r.at([0, 0, 2]), length = 1\nend\n")
    assert set(err.codes) == {"SingularConstraints"} and {4, 5} <= {d.span.line for d in err.diagnostics}
