"""Sliders and explicit constraints on bodies in Cartesian models (LANGUAGE.md §3; issue 30, part 1).

Each mechanism is written with Cartesian bodies and compared with a reference derived here, independently of
pdsl: a reduced (1-DOF) Lagrangian in the crank angle. The generalized coordinates q (angles, the block
position) are tied by loop-closure constraints Φ(q) = 0; the independent one is θ, q̇ = Γ(q) θ̇ with
Γ = [1; −J_d⁻¹ J_θ], q̈ = Γ θ̈ + β with β = [0; −J_d⁻¹ (J q̇)_q q̇], and the reduced equation is
Γᵀ(M q̈ + c + ∇V) = 0 (M, c from T(q, q̇) by sympy), integrated by scipy's DOP853 at rtol 1e-12.

* a slider-crank, rail (a) by `constraint block.y = 0`, (b) by `slider ground, block, axis = [1, 0]`,
  both formulations; `s.position` of a named slider;
* a bead on a rotating rigid rod (`slider` whose rail is on a body: bilinear rows) against the polar Lagrangian;
* a 4-bar linkage (closed loop);
* a crank driven by a time-dependent constraint (Φ_t, Φ_tt), against the closed-form slider position;
* the Chaplygin sleigh written as a rigid body with a velocity constraint (`.vx/.vy` of a body point), in both
  formulations, against the classical reduced equations;
* located errors.
"""

from __future__ import annotations

import numpy as np
import pytest
import sympy as sp
from scipy.integrate import solve_ivp

from pdsl.diagnostics import PdslError
from pdsl.pipeline import compile_model
from pdsl.sim.simulate import simulate, time_grid

R, L, M1, M2, M3, G = 0.5, 1.5, 1.0, 2.0, 0.5, 9.81
LAM1, LAM2 = (R**2 / 12, 0.01), (L**2 / 12, 0.01)  # moments (λ1, λ2) of crank and rod: I = m(λ1 + λ2)

CRANK = f"""
  space 2
  param r = {R}, l = {L}, g = {G}
  body crank = rigid(dim = 2, mass = {M1}, moments = [{LAM1[0]}, {LAM1[1]}])
  body rod = rigid(dim = 2, mass = {M2}, moments = [{LAM2[0]}, {LAM2[1]}])
  body block = point(mass = {M3})
  joint pivot: ground, crank.at([-r/2, 0])
  joint rod.at([-l/2, 0]), crank.at([r/2, 0])
  joint rod.at([l/2, 0]), block
  gravity g
"""
BY_CONSTRAINT = f"model SliderCrankC\n{CRANK}  constraint block.y = 0\nend\n"
BY_SLIDER = f"""model SliderCrankS\n{CRANK}  slider s: ground, block, axis = [2, 0]
  output xs = s.position, vs = s.rate
end
"""

_CACHE: dict = {}


class _Stabilized:
    def __init__(self, text, formulation):
        from pdsl.backend.functions import to_casadi
        from pdsl.lower import lower
        from pdsl.pipeline import load_models

        self.system = lower(load_models("constraints.phm", text=text)[0], formulation, stabilize="baumgarte")
        self.numeric = to_casadi(self.system)


def compiled(text: str, formulation: str = "hamiltonian", stabilize: str = "none"):
    key = (text, formulation, stabilize)
    if key not in _CACHE:
        if stabilize == "baumgarte":
            _CACHE[key] = _Stabilized(text, formulation)
        else:
            _CACHE[key] = compile_model("constraints.phm", text=text, formulation=formulation)
    return _CACHE[key]


def e(a):
    return np.array([np.cos(a), np.sin(a)])


def planar(name: str, c, phi: float, v, omega: float) -> dict:
    """Start values of a planar rigid body: centre c, axis points c + R e1, c + R e2, and their velocities."""
    c, v = np.asarray(c, float), np.asarray(v, float)
    e1, e2 = e(phi), e(phi + np.pi / 2)
    out = {}
    for node, x, xd in ((name, c, v), (f"{name}.a1", c + e1, v + omega * e2), (f"{name}.a2", c + e2, v - omega * e1)):
        for k, ax in enumerate("xy"):
            out[f"{node}.{ax}"], out[f"{node}.v{ax}"] = float(x[k]), float(xd[k])
    return out


def point(name: str, c, v) -> dict:
    return {f"{name}.x": float(c[0]), f"{name}.y": float(c[1]), f"{name}.vx": float(v[0]), f"{name}.vy": float(v[1])}


# ============================================================================ the reference: a reduced Lagrangian
class Reduced:
    """q = (θ, dependent…) with Φ(q) = 0; T, V sympy expressions of q, qd; θ independent (module docstring)."""

    def __init__(self, q, T, V, Phi):
        qd = sp.symbols(f"qd0:{len(q)}")
        T = T(q, qd)
        Mq = sp.hessian(T, qd)
        dT = [sp.diff(T, v) for v in qd]
        c = [sum(sp.diff(dT[i], q[j]) * qd[j] for j in range(len(q))) - sp.diff(T, q[i]) for i in range(len(q))]
        J = sp.Matrix(Phi).jacobian(q)
        h = (J * sp.Matrix(qd)).jacobian(q) * sp.Matrix(qd)
        gradV = [sp.diff(V, x) for x in q]
        args = (list(q), list(qd))
        self.M = sp.lambdify(args, Mq, "numpy")
        self.c = sp.lambdify(args, c, "numpy")
        self.J = sp.lambdify(args, J, "numpy")
        self.h = sp.lambdify(args, list(h), "numpy")
        self.gV = sp.lambdify(args, gradV, "numpy")
        self.Phi = sp.lambdify(args, list(Phi), "numpy")
        self.n = len(q)

    def gamma(self, q):
        J = np.array(self.J(q, np.zeros(self.n)), float)
        return np.concatenate([[1.0], -np.linalg.solve(J[:, 1:], J[:, 0])])

    def close(self, q0):
        """Newton on the dependent coordinates for the given θ."""
        q = np.array(q0, float)
        for _ in range(50):
            r = np.array(self.Phi(q, np.zeros(self.n)), float)
            J = np.array(self.J(q, np.zeros(self.n)), float)
            q[1:] -= np.linalg.solve(J[:, 1:], r)
        return q

    def rhs(self, t, y):
        q, w = y[:-1], y[-1]
        Gm = self.gamma(q)
        qd = Gm * w
        J = np.array(self.J(q, qd), float)
        beta = np.concatenate([[0.0], -np.linalg.solve(J[:, 1:], np.array(self.h(q, qd), float))])
        M = np.array(self.M(q, qd), float)
        rest = M @ beta + np.array(self.c(q, qd), float) + np.array(self.gV(q, qd), float)
        return np.concatenate([qd, [-(Gm @ rest) / (Gm @ M @ Gm)]])

    def solve(self, q0, w0, grid):
        q0 = self.close(q0)
        sol = solve_ivp(self.rhs, (grid[0], grid[-1]), np.concatenate([q0, [w0]]), method="DOP853",
                        t_eval=grid, rtol=1e-13, atol=1e-13)
        assert sol.success
        return sol.y.T


def _slider_crank_reference():
    th, ph, xb = sp.symbols("th ph xb")
    ec = lambda a: sp.Matrix([sp.cos(a), sp.sin(a)])  # noqa: E731
    c1, c2 = R / 2 * ec(th), R * ec(th) + L / 2 * ec(ph)
    I1, I2 = M1 * sum(LAM1), M2 * sum(LAM2)

    def T(q, qd):
        v1, v2 = c1.jacobian(q) * sp.Matrix(qd), c2.jacobian(q) * sp.Matrix(qd)
        return (M1 * v1.dot(v1) + I1 * qd[0] ** 2 + M2 * v2.dot(v2) + I2 * qd[1] ** 2 + M3 * qd[2] ** 2) / 2

    V = G * (M1 * c1[1] + M2 * c2[1])
    Phi = list(R * ec(th) + L * ec(ph) - sp.Matrix([xb, 0]))
    return Reduced((th, ph, xb), T, V, Phi)


def _slider_crank_start(red: Reduced, th0: float, w0: float) -> dict:
    q = red.close([th0, -np.arcsin(R * np.sin(th0) / L), R + L])
    qd = red.gamma(q) * w0
    th, ph, xb = q
    tip, tipv = R * e(th), R * qd[0] * e(th + np.pi / 2)
    return {**planar("crank", R / 2 * e(th), th, R / 2 * qd[0] * e(th + np.pi / 2), qd[0]),
            **planar("rod", tip + L / 2 * e(ph), ph, tipv + L / 2 * qd[1] * e(ph + np.pi / 2), qd[1]),
            **point("block", [xb, 0.0], [qd[2], 0.0])}


def _col(res, name):
    return res.shown[:, list(res.shown_names).index(name)]


def _crank_angle(res):
    return np.unwrap(np.arctan2(_col(res, "crank.a1.y") - _col(res, "crank.y"), _col(res, "crank.a1.x") - _col(res, "crank.x")))


# ============================================================================ slider-crank
@pytest.mark.parametrize("text", [BY_CONSTRAINT, BY_SLIDER], ids=["constraint", "slider"])
@pytest.mark.parametrize("formulation", ["hamiltonian", "lagrangian"])
def test_slider_crank_matches_the_reduced_lagrangian(text, formulation):
    red = _slider_crank_reference()
    grid = time_grid(2.0, 0.01)
    ref = red.solve([0.4, 0, R + L], 3.0, grid)
    c = compiled(text, formulation)
    res = simulate(c.numeric, grid, x0=_slider_crank_start(red, 0.4, 3.0), rtol=1e-11, atol=1e-13)
    assert not res.info["projection"].changes  # the start is consistent
    err_x = np.abs(_col(res, "block.x") - ref[:, 2]).max()
    err_th = np.abs(_crank_angle(res) - ref[:, 0]).max()
    assert err_x <= 1e-7 and err_th <= 1e-7, (err_x, err_th)
    assert np.abs(_col(res, "block.y")).max() <= 1e-9  # on the rail
    assert np.ptp(ref[:, 0]) > 3.0  # the crank really turns (over the top)
    assert res.constraint_rms.max() <= 1e-8
    assert np.abs(res.energy - res.energy[0]).max() <= 1e-8 * np.abs(res.energy).max()
    if text is BY_SLIDER:  # s.position = (block − ground)·û, û = [2, 0]/2
        assert np.abs(res.y[:, list(res.y_names).index("xs")] - ref[:, 2]).max() <= 1e-7


# ============================================================================ a slider whose rail turns with a body
BEAD = """
model Bead "a bead on a rotating rod: the rail is fixed in the rod's frame"
  space 2
  param m = 0.3, k = 2.0
  body rod = rigid(dim = 2, mass = 1.0, moments = [0.2, 0.05])
  body bead = point(mass = m)
  joint ground, rod
  slider s: rod, bead, axis = [1, 1]
  potential k/2*s.position^2
  output rho = s.position
end
"""


@pytest.mark.parametrize("formulation", ["hamiltonian", "lagrangian"])
def test_bead_on_a_rotating_rod_matches_the_polar_lagrangian(formulation):
    """L = ½(I + m ρ²) θ̇² + ½ m ρ̇² − ½ k ρ², the rail along (e1 + e2)/√2 of the rod (bilinear slider rows)."""
    m, k, I = 0.3, 2.0, 1.0 * 0.25
    th0, w0, rho0, rd0 = 0.2, 1.5, 0.4, 0.3

    def rhs(t, y):
        th, rho, w, rd = y
        return [w, rd, -2 * m * rho * rd * w / (I + m * rho**2), rho * w**2 - k / m * rho]

    grid = time_grid(3.0, 0.01)
    ref = solve_ivp(rhs, (0, 3), [th0, rho0, w0, rd0], method="DOP853", t_eval=grid, rtol=1e-13, atol=1e-13).y.T
    phi = th0 - np.pi / 4  # the rod's first axis is at θ − 45°: the rail at θ
    x0 = {**planar("rod", [0, 0], phi, [0, 0], w0),
          **point("bead", rho0 * e(th0), rd0 * e(th0) + rho0 * w0 * e(th0 + np.pi / 2))}
    res = simulate(compiled(BEAD, formulation).numeric, grid, x0=x0, rtol=1e-11, atol=1e-13)
    assert not res.info["projection"].changes
    rho = res.y[:, list(res.y_names).index("rho")]
    assert np.abs(rho - ref[:, 1]).max() <= 1e-7
    bead = np.stack([_col(res, "bead.x"), _col(res, "bead.y")], axis=1)
    assert np.abs(bead - ref[:, 1:2] * np.stack([np.cos(ref[:, 0]), np.sin(ref[:, 0])], axis=1)).max() <= 1e-7


# ============================================================================ 4-bar linkage
A4, B4, C4, D4 = 0.4, 1.2, 0.9, 1.0
MA, MB, MC = 0.6, 1.5, 1.1
LAMA, LAMB, LAMC = (A4**2 / 12, 0.005), (B4**2 / 12, 0.005), (C4**2 / 12, 0.005)
FOURBAR = f"""
model FourBar "crank a, coupler b, rocker c, ground pivots d apart"
  space 2
  param a = {A4}, b = {B4}, c = {C4}, d = {D4}, g = {G}
  body crank = rigid(dim = 2, mass = {MA}, moments = [{LAMA[0]}, {LAMA[1]}])
  body coupler = rigid(dim = 2, mass = {MB}, moments = [{LAMB[0]}, {LAMB[1]}])
  body rocker = rigid(dim = 2, mass = {MC}, moments = [{LAMC[0]}, {LAMC[1]}])
  joint ground, crank.at([-a/2, 0])
  joint crank.at([a/2, 0]), coupler.at([-b/2, 0])
  joint coupler.at([b/2, 0]), rocker.at([c/2, 0])
  joint ground.at([d, 0]), rocker.at([-c/2, 0])
  gravity g
end
"""


def _fourbar_reference():
    th, ph, ps = sp.symbols("th ph ps")
    ec = lambda x: sp.Matrix([sp.cos(x), sp.sin(x)])  # noqa: E731
    ca, cb, cc = A4 / 2 * ec(th), A4 * ec(th) + B4 / 2 * ec(ph), sp.Matrix([D4, 0]) + C4 / 2 * ec(ps)
    Ia, Ib, Ic = MA * sum(LAMA), MB * sum(LAMB), MC * sum(LAMC)

    def T(q, qd):
        v = [x.jacobian(q) * sp.Matrix(qd) for x in (ca, cb, cc)]
        return (MA * v[0].dot(v[0]) + MB * v[1].dot(v[1]) + MC * v[2].dot(v[2])
                + Ia * qd[0] ** 2 + Ib * qd[1] ** 2 + Ic * qd[2] ** 2) / 2

    V = G * (MA * ca[1] + MB * cb[1] + MC * cc[1])
    Phi = list(A4 * ec(th) + B4 * ec(ph) - sp.Matrix([D4, 0]) - C4 * ec(ps))
    return Reduced((th, ph, ps), T, V, Phi)


@pytest.mark.parametrize("formulation", ["hamiltonian", "lagrangian"])
def test_four_bar_linkage_matches_the_reduced_lagrangian(formulation):
    red = _fourbar_reference()
    grid = time_grid(2.0, 0.01)
    th0, w0 = 1.2, 2.0
    q = red.close([th0, 0.3, 1.6])
    qd = red.gamma(q) * w0
    tip = A4 * e(q[0])
    tipv = A4 * qd[0] * e(q[0] + np.pi / 2)
    x0 = {**planar("crank", A4 / 2 * e(q[0]), q[0], A4 / 2 * qd[0] * e(q[0] + np.pi / 2), qd[0]),
          **planar("coupler", tip + B4 / 2 * e(q[1]), q[1], tipv + B4 / 2 * qd[1] * e(q[1] + np.pi / 2), qd[1]),
          **planar("rocker", np.array([D4, 0]) + C4 / 2 * e(q[2]), q[2], C4 / 2 * qd[2] * e(q[2] + np.pi / 2), qd[2])}
    ref = red.solve(q, w0, grid)
    res = simulate(compiled(FOURBAR, formulation).numeric, grid, x0=x0, rtol=1e-11, atol=1e-13)
    assert not res.info["projection"].changes
    for body, k, length in (("crank", 0, A4), ("coupler", 1, B4), ("rocker", 2, C4)):
        ang = np.unwrap(np.arctan2(_col(res, f"{body}.a1.y") - _col(res, f"{body}.y"),
                                   _col(res, f"{body}.a1.x") - _col(res, f"{body}.x")))
        assert np.abs(ang - ref[:, k]).max() <= 1e-7, body
    assert np.ptp(ref[:, 0]) > 1.0
    assert np.abs(res.energy - res.energy[0]).max() <= 1e-8 * np.abs(res.energy).max()


# ============================================================================ a driven crank (Φ_t, Φ_tt)
W, EPS = 3.0, 0.4
DRIVEN = f"""
model DrivenCrank "the crank angle is driven: th(t) = w t + eps sin(2t)"
  space 2
  param r = {R}, l = {L}, w = {W}, eps = {EPS}
  body crank = rigid(dim = 2, mass = {M1}, moments = [{LAM1[0]}, {LAM1[1]}])
  body rod = rigid(dim = 2, mass = {M2}, moments = [{LAM2[0]}, {LAM2[1]}])
  body block = point(mass = {M3})
  joint ground, crank.at([-r/2, 0])
  joint rod.at([-l/2, 0]), crank.at([r/2, 0])
  joint rod.at([l/2, 0]), block
  constraint block.y = 0
  # the crank's first axis points at th(t): sin(angle − th) = 0
  constraint (crank.a1.y - crank.y)*cos(w*t + eps*sin(2*t)) - (crank.a1.x - crank.x)*sin(w*t + eps*sin(2*t)) = 0
  gravity 9.81
end
"""


@pytest.mark.parametrize("formulation", ["hamiltonian", "lagrangian"])
@pytest.mark.parametrize("stabilize", ["none", "baumgarte"])
def test_crank_driven_by_a_time_dependent_constraint(formulation, stabilize):
    """The block follows x(t) = r cos θ + √(l² − r² sin² θ), θ = w t + ε sin 2t, from a consistent start."""
    grid = time_grid(2.0, 0.01)
    th = W * grid + EPS * np.sin(2 * grid)
    x_ref = R * np.cos(th) + np.sqrt(L**2 - R**2 * np.sin(th) ** 2)
    red = _slider_crank_reference()
    x0 = _slider_crank_start(red, 0.0, W + 2 * EPS)
    kw = {"stabilize": "baumgarte"} if stabilize == "baumgarte" else {}
    res = simulate(compiled(DRIVEN, formulation, **kw).numeric, grid, x0=x0, rtol=1e-11, atol=1e-13, **kw)
    assert not res.info["projection"].changes
    assert np.abs(_col(res, "block.x") - x_ref).max() <= 1e-7
    assert np.abs(_crank_angle(res) - th).max() <= 1e-7
    assert res.constraint_rms.max() <= 1e-8


def test_a_driver_gets_its_time_derivatives_from_the_start():
    """Started from rest, the projection gives the block the driver's velocity (Φ̇ = DΦ ẋ + Φ_t = 0)."""
    red = _slider_crank_reference()
    res = simulate(compiled(DRIVEN).numeric, time_grid(0.5, 0.01), x0=_slider_crank_start(red, 0.0, 0.0),
                   rtol=1e-11, atol=1e-13)
    th = W * res.t + EPS * np.sin(2 * res.t)
    assert np.abs(_crank_angle(res) - th).max() <= 1e-7


# ============================================================================ velocity constraint (Chaplygin sleigh)
MS, IS, AS = 1.0, 0.2, 0.5
SLEIGH = f"""
model Sleigh "a rigid body on a knife edge: the contact point does not slip sideways"
  space 2
  param a = {AS}
  body s = rigid(dim = 2, mass = {MS}, moments = [{IS / MS / 2}, {IS / MS / 2}])
  # the blade touches at s.at([-a, 0]) and points along the first axis a1 − centre
  constraint (s.a2.x - s.x)*s.at([-a, 0]).vx + (s.a2.y - s.y)*s.at([-a, 0]).vy = 0
end
"""


@pytest.mark.parametrize("formulation", ["hamiltonian", "lagrangian"])
def test_chaplygin_sleigh_by_a_velocity_constraint(formulation):
    """m v̇ = m a ω², (I + m a²) ω̇ = −m a v ω (v: forward speed of the contact point), as in
    models/chaplygin_sleigh.phm; the contact point P moves along the heading, the centre is P + a e(θ)."""

    def rhs(t, y):
        th, px, py, v, w = y
        return [w, v * np.cos(th), v * np.sin(th), AS * w**2, -MS * AS * v * w / (IS + MS * AS**2)]

    grid = time_grid(3.0, 0.01)
    th0, v0, w0 = 0.3, 0.5, 2.0
    ref = solve_ivp(rhs, (0, 3), [th0, 0.0, 0.0, v0, w0], method="DOP853", t_eval=grid, rtol=1e-13, atol=1e-13).y.T
    centre = ref[:, 1:3] + AS * np.stack([np.cos(ref[:, 0]), np.sin(ref[:, 0])], axis=1)
    x0 = planar("s", AS * e(th0), th0, v0 * e(th0) + AS * w0 * e(th0 + np.pi / 2), w0)
    c = compiled(SLEIGH, formulation)
    assert len(c.system.constraints) == 3  # rigidity only: a velocity row has no position level
    res = simulate(c.numeric, grid, x0=x0, rtol=1e-11, atol=1e-13)
    got = np.stack([_col(res, "s.x"), _col(res, "s.y")], axis=1)
    assert np.abs(got - centre).max() <= 1e-7
    assert np.abs(res.energy - res.energy[0]).max() <= 1e-8  # the constraint force does no work
    assert res.constraint_rms.max() <= 1e-8


# ============================================================================ errors and names
def _error(text: str) -> PdslError:
    with pytest.raises(PdslError) as info:
        compile_model("bad.phm", text=text)
    return info.value


@pytest.mark.parametrize("decl, line, code", [
    ("param k = 2", "constraint k = 1", "NotABodyCoordinate"),
    ("var q", "constraint b.x + q = 0", "NotABodyCoordinate"),  # with `q = 1`: a composite model
    ("input u", "constraint b.x = u", "NotYetSupported"),
    ("coord th", "constraint b.x = th", "NotYetSupported"),  # with a lagrangian: a composite model
])
def test_a_constraint_on_something_else_is_located(decl, line, code):
    extra = {"var q": "q = 1", "coord th": "lagrangian der(th)^2/2"}.get(decl, "")
    text = f"""model Bad
  space 2
  {decl}
  body b = point(mass = 1)
  gravity 9.81
  {line}
  {extra}
end
"""
    err = _error(text)
    d = [x for x in err.diagnostics if x.code == code]
    assert d, [x.code for x in err.diagnostics]
    assert d[0].span.line == 6 and d[0].hint


@pytest.mark.parametrize("line, code", [
    ("slider b, c, axis = [1, 0]", "BadSlider"),  # the rail on a point mass
    ("slider ground, c, axis = [0, 0]", "BadSlider"),
    ("slider c, ground, axis = [1, 0]", "BadSlider"),
    ("slider ground, c", "MissingArgument"),
])
def test_bad_sliders_are_located(line, code):
    text = f"""model Bad
  space 2
  body b = point(mass = 1)
  body c = point(mass = 1)
  {line}
end
"""
    err = _error(text)
    assert err.diagnostics[0].code == code and err.diagnostics[0].span.line == 5


def test_slider_is_still_a_body_name():
    text = """model Names
  space 2
  body slider = point(mass = 1)
  body hinge = point(mass = 2)
  slider rail: ground, slider, axis = [1, 0]
  link slider, hinge, length = 1
  constraint slider.vx = 0
  gravity 9.81
  output pos = rail.position
end
"""
    c = compile_model("names.phm", text=text)
    assert c.system.formalism == "cartesian-hamiltonian"


# ============================================================================ a slider's rate as a kinematic port
def _pushed(push: str) -> str:
    return f"""model Pushed
  space 2
  param k = 3.0
  body rod = rigid(dim = 2, mass = 1.0, moments = [0.2, 0.05])
  body bead = point(mass = 0.4)
  joint ground, rod
  slider s: rod, bead, axis = [1, 0]
  port rail: translational = s.rate
  potential k/2*s.position^2
  {push}
end
"""


def test_a_force_on_a_slider_port_is_a_force_along_the_rail():
    """`force F on rail` (the port's velocity is s.rate) equals the force F û_world applied at the bead."""
    grid = time_grid(2.0, 0.01)
    x0 = {**planar("rod", [0, 0], 0.3, [0, 0], 1.0), **point("bead", 0.5 * e(0.3), 0.2 * e(0.3) + 0.5 * e(0.3 + np.pi / 2))}
    by_port = simulate(compiled(_pushed("force 0.7*cos(2*t) on rail")).numeric, grid, x0=x0, rtol=1e-11, atol=1e-13)
    at_point = simulate(compiled(_pushed("force 0.7*cos(2*t)*(rod.a1.pos - rod.pos) on bead")).numeric, grid, x0=x0,
                        rtol=1e-11, atol=1e-13)
    assert np.abs(by_port.shown - at_point.shown).max() <= 1e-8
    assert np.ptp(_col(by_port, "bead.x")) > 0.1


def test_the_bundled_slider_crank():
    """models/slider_crank_cartesian.phm: projected from the default start, the block stays on the rail at
    x = r cos θ + √(l² − r² sin² θ) (θ = pivot.angle), energy is conserved, and the crank swings."""
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "models" / "slider_crank_cartesian.phm"
    c = compile_model(path)
    res = simulate(c.numeric, time_grid(1.0, 0.01), rtol=1e-10, atol=1e-12)
    th, x = (res.y[:, list(res.y_names).index(n)] for n in ("theta", "x"))
    r, l = 0.1, 0.3
    assert np.abs(x - (r * np.cos(th) + np.sqrt(l**2 - r**2 * np.sin(th) ** 2))).max() <= 1e-8
    assert np.abs(_col(res, "block.y")).max() <= 1e-10
    assert np.abs(res.energy - res.energy[0]).max() <= 1e-8 * np.abs(res.energy).max()
    assert np.ptp(th) > 1.0
