"""Port-Hamiltonian networks and ISO form (BENCHMARKS Part C, C1–C3, C5.2, C6.2; Part G checks 13, 15, 17).

Models under test (models/): mass_spring_damper.phm (network + ISO form), rlc.phm, dc_motor.phm (gyrator and
transformer conventions), cucker_smale_ph.phm (3 particles, C6.2), cart_pole_ph.phm (C5.2 surrogate, plain ODE).
Checks: compiled ODEs (sympy and CasADi), ISO-form extraction (J skew, R ⪰ 0), Dirac power balance Σ s·e·f = 0,
dH/dt per C2/C3, monotone H along zero-input trajectories, closed-form solutions, Eq. 26 equivalence, located errors,
`show --power`.
"""

from __future__ import annotations

from pathlib import Path

import casadi as ca
import numpy as np
import pytest
import scipy.linalg
import sympy as sp

from pdsl import symbols as S
from pdsl.cli.main import main
from pdsl.diagnostics import PdslError
from pdsl.lower.structural import power_balance
from pdsl.pipeline import compile_model
from pdsl.sim.simulate import input_from_expression, simulate, time_grid

MODELS = Path(__file__).resolve().parents[2] / "models"
MSD, RLC, MOTOR = MODELS / "mass_spring_damper.phm", MODELS / "rlc.phm", MODELS / "dc_motor.phm"
CS, CARTPOLE = MODELS / "cucker_smale_ph.phm", MODELS / "cart_pole_ph.phm"
# Variants that are not bundled (one model per bundled file): the ISO form of C1/C2 and the DC motor in the
# C2 mechanical convention (torque = flow), where the motor coupling is a transformer.
INLINE = {
    "msd_iso.phm": """model MassSpringDamperISO "C2 in input-state-output form x' = (J − R)∇H + B F"
  param m = 1.0, k = 4.0, d = 0.3
  input F
  var q, p
  hamiltonian k*q^2/2 + p^2/(2*m)
  structure J = [[0, 1], [-1, 0]], R = [[0, 0], [0, d]], B = [[0], [1]]
end
""",
    "dc_motor_c2.phm": """model DCMotorC2 "DC motor, rotor in the C2 convention (torque = flow): transformer coupling"
  param R_a = 1.0, L_a = 0.5, K = 0.01, J = 0.01, b = 0.1
  input V
  effort_source src = V
  resistive res: e = R_a*f
  effort_store ind(phi) energy phi^2/(2*L_a)
  transformer motor(a, b): e_a = K*e_b
  flow_store rotor(Lm) energy Lm^2/(2*J)
  resistive friction: f = b*e
  junction common_flow(-src, res, ind, motor.a)
  junction common_effort(-motor.b, rotor, friction)
end
""",
}
MSD_ISO, MOTOR_C2 = "msd_iso.phm", "dc_motor_c2.phm"
NETWORKS = [(MSD, None), (RLC, None), (MOTOR, None), (MOTOR_C2, None), (CS, None)]
TOL = 1e-12

_cache: dict = {}


def compiled(path, model=None):
    key = (str(path), model)
    if key not in _cache:
        text = INLINE.get(str(path))
        _cache[key] = compile_model(path, model, text=text) if text else compile_model(path, model)
    return _cache[key]


def model_file(path, tmp_path) -> Path:
    """A real file for the CLI: bundled models as they are, inline variants written to ``tmp_path``."""
    if str(path) in INLINE:
        out = tmp_path / str(path)
        out.write_text(INLINE[str(path)])
        return out
    return Path(path)


def sym(name):
    return S.sym(name)


def rhs_by_name(system) -> dict:
    return {s.name: eq.rhs for s, eq in zip(system.states, system.differential)}


def eval_rhs(num, x, p, u):
    return np.asarray(num.rhs(0.0, x, p, u)).ravel()


# ---------------------------------------------------------------------------------------------- compiled ODEs (C2, C3)
def test_msd_compiles_to_c2_ode():
    c = compiled(MSD)
    assert c.system.formalism == "port-hamiltonian" and not c.system.algebraics
    m, k, d, F, q, p = (sym(n) for n in ("m", "k", "d", "F", "q", "p"))
    rhs = rhs_by_name(c.system)
    assert sp.simplify(rhs["q"] - p / m) == 0
    assert sp.simplify(rhs["p"] - (F - k * q - d * p / m)) == 0
    assert sp.simplify(c.system.energy - (p**2 / (2 * m) + k * q**2 / 2)) == 0


def test_rlc_compiles_to_c3_ode():
    c = compiled(RLC)
    R, L, C, V, q, phi = (sym(n) for n in ("R", "L", "C", "V", "q", "phi"))
    rhs = rhs_by_name(c.system)
    assert sp.simplify(rhs["q"] - phi / L) == 0
    assert sp.simplify(rhs["phi"] - (V - q / C - R * phi / L)) == 0
    assert sp.simplify(c.system.energy - (q**2 / (2 * C) + phi**2 / (2 * L))) == 0


@pytest.mark.parametrize("path", [MOTOR, MOTOR_C2])
def test_dc_motor_compiles_to_textbook_ode(path):
    """L di/dt = V − R i − K ω, J dω/dt = K i − b ω with phi = L i, Lm = J ω (both conventions)."""
    c = compiled(path)
    Ra, La, K, J, b, V, phi, Lm = (sym(n) for n in ("R_a", "L_a", "K", "J", "b", "V", "phi", "Lm"))
    i, w = phi / La, Lm / J
    rhs = rhs_by_name(c.system)
    assert sp.simplify(rhs["phi"] - (V - Ra * i - K * w)) == 0
    assert sp.simplify(rhs["Lm"] - (K * i - b * w)) == 0


def _random_params(rng, num, lo=0.2, hi=3.0):
    return rng.uniform(lo, hi, size=len(num.p_names))


@pytest.mark.parametrize("path, model", [(MSD, None), (MSD_ISO, None), (RLC, None),
                                         (MOTOR, None), (MOTOR_C2, None)])
def test_casadi_rhs_matches_hand_written_ode(path, model):
    num = compiled(path, model).numeric
    rng = np.random.default_rng(13)
    worst = 0.0
    for _ in range(100):
        x = rng.normal(size=num.nx) * 2
        p = _random_params(rng, num)
        u = rng.normal(size=len(num.u_names))
        P = dict(zip(num.p_names, p))
        X = dict(zip(num.x_names, x))
        if "k" in P:  # MSD
            ref = {"q": X["p"] / P["m"], "p": u[0] - P["k"] * X["q"] - P["d"] * X["p"] / P["m"]}
        elif "C" in P:  # RLC
            ref = {"q": X["phi"] / P["L"], "phi": u[0] - X["q"] / P["C"] - P["R"] * X["phi"] / P["L"]}
        else:  # DC motor
            i, w = X["phi"] / P["L_a"], X["Lm"] / P["J"]
            ref = {"phi": u[0] - P["R_a"] * i - P["K"] * w, "Lm": P["K"] * i - P["b"] * w}
        got = eval_rhs(num, x, p, u)
        want = np.array([ref[n] for n in num.x_names])
        worst = max(worst, np.max(np.abs(got - want) / np.maximum(1.0, np.abs(want))))
    assert worst <= TOL, worst


def test_iso_form_gives_the_network_rhs():
    net = rhs_by_name(compiled(MSD).system)
    iso_c = compiled(MSD_ISO)
    assert iso_c.system.formalism == "port-hamiltonian-iso"
    iso = rhs_by_name(iso_c.system)
    assert set(net) == set(iso) == {"q", "p"}
    for name in net:
        assert sp.simplify(net[name] - iso[name]) == 0
    a, b = compiled(MSD).numeric, iso_c.numeric
    rng = np.random.default_rng(1)
    for _ in range(100):
        X = {"q": rng.normal(), "p": rng.normal()}
        p = _random_params(rng, a)
        u = rng.normal(size=1)
        ra = dict(zip(a.x_names, eval_rhs(a, [X[n] for n in a.x_names], p, u)))
        rb = dict(zip(b.x_names, eval_rhs(b, [X[n] for n in b.x_names], p, u)))
        assert abs(ra["q"] - rb["q"]) <= TOL and abs(ra["p"] - rb["p"]) <= TOL


def _matrix(rows):
    M = sp.Matrix(sp.sympify(rows))
    return M.xreplace({s: sym(s.name) for s in M.free_symbols})


@pytest.mark.parametrize("path, model, states, J_want, R_want", [
    (MSD, None, ("q", "p"), [[0, 1], [-1, 0]], [[0, 0], [0, "d"]]),
    (RLC, None, ("q", "phi"), [[0, 1], [-1, 0]], [[0, 0], [0, "R"]]),
    (MOTOR, None, ("phi", "Lm"), [[0, "-K"], ["K", 0]], [["R_a", 0], [0, "b"]]),
    (MOTOR_C2, None, ("phi", "Lm"), [[0, "-K"], ["K", 0]], [["R_a", 0], [0, "b"]]),
])
def test_network_has_iso_form(path, model, states, J_want, R_want):
    """For these quadratic H, ẋ = M ∇H + g u is linear in ∇H: M = J − R with J = −Jᵀ and R = Rᵀ ⪰ 0 (C1)."""
    system = compiled(path, model).system
    rhs = rhs_by_name(system)
    x = [sym(n) for n in states]
    grad = sp.Matrix([sp.diff(system.energy, xi) for xi in x])
    e = sp.symbols("e0:%d" % len(x))
    sol = sp.solve([g - ei for g, ei in zip(grad, e)], x, dict=True)[0]
    f = sp.Matrix([sp.expand(rhs[n].xreplace(sol)) for n in states])
    M = f.jacobian(e)
    Jm, Rm = (M - M.T) / 2, -(M + M.T) / 2
    assert (Jm + Jm.T).applyfunc(sp.simplify) == sp.zeros(len(x))
    assert (Jm - _matrix(J_want)).applyfunc(sp.simplify) == sp.zeros(len(x))
    assert (Rm - _matrix(R_want)).applyfunc(sp.simplify) == sp.zeros(len(x))
    # R ⪰ 0 for positive parameters
    rng = np.random.default_rng(2)
    for _ in range(10):
        vals = {s: rng.uniform(0.1, 3) for s in Rm.free_symbols}
        assert np.linalg.eigvalsh(np.array(Rm.xreplace(vals), dtype=float)).min() >= -1e-14
    assert f.jacobian(e).free_symbols.isdisjoint(set(e))  # linear in ∇H


# ---------------------------------------------------------------------------------------------- power (check 13)
def _lambdify_all(exprs):
    syms = sorted(set().union(*(e.free_symbols for e in exprs)), key=lambda s: s.name)
    return syms, sp.lambdify(syms, exprs, modules="numpy")


@pytest.mark.parametrize("path, model", NETWORKS)
def test_dirac_structure_conserves_power(path, model):
    """Σ s·e·f over every element port (stores, resistive, sources, two-port ports) is 0; bonds cancel pairwise."""
    c = compiled(path, model)
    pps = [pp for pp in c.system.ports if pp.role != "bond"]
    roles = {pp.role for pp in pps}
    assert {"store", "resistive"} <= roles
    syms, fn = _lambdify_all([pp.power for pp in pps])
    signs = np.array([pp.sign for pp in pps], dtype=float)
    rng = np.random.default_rng(3)
    worst, scale = 0.0, 0.0
    for _ in range(100):
        vals = rng.uniform(0.2, 3.0, size=len(syms)) * rng.choice([-1, 1], size=len(syms))
        vals = [abs(v) if s.name in c.numeric.p_names else v for s, v in zip(syms, vals)]
        powers = np.array(fn(*vals), dtype=float)
        worst = max(worst, abs(signs @ powers))
        scale = max(scale, np.abs(powers).max())
    assert worst <= TOL * max(1.0, scale), (worst, scale)
    assert sp.expand(sum((pp.sign * pp.power for pp in pps), sp.Integer(0))) == 0
    assert power_balance(c.system).residual == 0


def test_power_of_two_port_is_conserved():
    """The gyrator (and transformer) take power e_a·f_a at port a and give e_b·f_b = e_a·f_a at port b."""
    for path in (MOTOR, MOTOR_C2):
        c = compiled(path)
        pp = {p.name: p for p in c.system.ports}
        a, b = pp["motor.a"], pp["motor.b"]
        assert (a.role, b.role, a.sign, b.sign) == ("twoport", "twoport", 1, -1)
        assert sp.simplify(a.power - b.power) == 0
        K, phi, La, Lm, J = (sym(n) for n in ("K", "phi", "L_a", "Lm", "J"))
        assert sp.simplify(a.power - K * (phi / La) * (Lm / J)) == 0


def _dHdt_casadi(num):
    x = ca.SX.sym("x", num.nx)
    p = ca.SX.sym("p", len(num.p_names))
    u = ca.SX.sym("u", len(num.u_names))
    H = num.energy(0.0, x, p, u)
    return ca.Function("dH", [x, p, u], [ca.mtimes(ca.jacobian(H, x), num.rhs(0.0, x, p, u))])


@pytest.mark.parametrize("path, model", [(MSD, None), (MSD_ISO, None), (RLC, None)])
def test_energy_balance_pointwise(path, model):
    """dH/dt = F p/m − d (p/m)² (C2), = −R (phi/L)² (C3, V = 0), from ∇H · ẋ of the compiled CasADi functions."""
    num = compiled(path, model).numeric
    dH = _dHdt_casadi(num)
    rng = np.random.default_rng(4)
    worst = 0.0
    for _ in range(100):
        x = rng.normal(size=num.nx) * 2
        p = _random_params(rng, num)
        X, P = dict(zip(num.x_names, x)), dict(zip(num.p_names, p))
        if "k" in P:
            F = rng.normal()
            want, u = F * X["p"] / P["m"] - P["d"] * (X["p"] / P["m"]) ** 2, [F]
        else:
            want, u = -P["R"] * (X["phi"] / P["L"]) ** 2, [0.0]
        got = float(dH(x, p, u))
        worst = max(worst, abs(got - want) / max(1.0, abs(want)))
    assert worst <= TOL, worst


@pytest.mark.parametrize("path, model, input_name, x0", [
    (MSD, None, "F", {"q": 1.0, "p": 0.5}),
    (MSD_ISO, None, "F", {"q": 1.0, "p": 0.5}),
    (RLC, None, "V", {"q": 0.01, "phi": -0.02}),
    (MOTOR, None, "V", {"phi": 0.5, "Lm": -0.2}),
    (CS, "CuckerSmalePH", None, {"p1": 1.0, "p2": -2.0, "p3": 0.5, "q12": 1.5, "q23": -4.0, "q31": 2.5}),
])
def test_energy_non_increasing_with_zero_input(path, model, input_name, x0):
    num = compiled(path, model).numeric
    inputs = {input_name: input_from_expression(num, input_name, "0")} if input_name else {}
    res = simulate(num, time_grid(10.0, 0.05), x0=x0, inputs=inputs, rtol=1e-10)
    dH = np.diff(res.energy)
    assert dH.max() <= 1e-12, dH.max()
    assert res.energy[-1] < res.energy[0]


# ---------------------------------------------------------------------------------------------- closed forms
def _damped(t, x0, v0, m, k, d):
    """x(t) of m x'' + d x' + k x = 0 (underdamped), and x'(t)."""
    w0, z = np.sqrt(k / m), d / (2 * np.sqrt(k * m))
    assert z < 1
    wd, s = w0 * np.sqrt(1 - z**2), z * w0
    A, B = x0, (v0 + s * x0) / wd
    e = np.exp(-s * t)
    x = e * (A * np.cos(wd * t) + B * np.sin(wd * t))
    v = e * ((B * wd - s * A) * np.cos(wd * t) - (A * wd + s * B) * np.sin(wd * t))
    return x, v


@pytest.mark.parametrize("path", [MSD, MSD_ISO])
def test_msd_matches_closed_form(path):
    num = compiled(path).numeric
    m, k, d = 1.0, 4.0, 0.3
    q0, p0 = 1.0, 0.5
    res = simulate(num, time_grid(10.0, 0.05), x0={"q": q0, "p": p0},
                   inputs={"F": input_from_expression(num, "F", "0")}, rtol=1e-12)
    q, v = _damped(res.t, q0, p0 / m, m, k, d)
    err = max(np.abs(res.x[:, num.x_names.index("q")] - q).max(), np.abs(res.x[:, num.x_names.index("p")] - m * v).max())
    assert err <= 1e-8, err


def test_rlc_matches_closed_form():
    """L q'' + R q' + q/C = 0 with phi = L q' (underdamped for R = 1, L = 0.5, C = 0.1)."""
    num = compiled(RLC).numeric
    R, L, C = 1.0, 0.5, 0.1
    q0, phi0 = 0.01, -0.02
    res = simulate(num, time_grid(5.0, 0.02), x0={"q": q0, "phi": phi0},
                   inputs={"V": input_from_expression(num, "V", "0")}, rtol=1e-12)
    q, i = _damped(res.t, q0, phi0 / L, L, 1 / C, R)
    err = max(np.abs(res.x[:, num.x_names.index("q")] - q).max(), np.abs(res.x[:, num.x_names.index("phi")] - L * i).max())
    assert err <= 1e-8, err


@pytest.mark.parametrize("path", [MOTOR, MOTOR_C2])
def test_dc_motor_matches_step_response(path):
    """V = 1 V step from (i, ω) = (0.2, −1): closed form x(t) = e^{At} x0 + A⁻¹(e^{At} − I) B V of the hand ODE."""
    num = compiled(path).numeric
    Ra, La, K, J, b = 1.0, 0.5, 0.01, 0.01, 0.1
    A = np.array([[-Ra / La, -K / La], [K / J, -b / J]])  # (i, ω)
    B = np.array([1 / La, 0.0])
    x0 = np.array([0.2, -1.0])
    res = simulate(num, time_grid(3.0, 0.01), x0={"phi": La * x0[0], "Lm": J * x0[1]},
                   inputs={"V": input_from_expression(num, "V", "1")}, rtol=1e-12)
    ref = np.array([scipy.linalg.expm(A * t) @ x0 + np.linalg.solve(A, (scipy.linalg.expm(A * t) - np.eye(2)) @ B)
                    for t in res.t])
    got = np.column_stack([res.x[:, num.x_names.index("phi")] / La, res.x[:, num.x_names.index("Lm")] / J])
    err = np.abs(got - ref).max()
    assert err <= 1e-8, err


# ---------------------------------------------------------------------------------------------- Cucker–Smale (check 15)
GAMMA, C_A, L_A, C_R, L_R = 0.15, 200.0, 100.0, 500.0, 2.0


def eq26(x, v):
    """Eq. 26 (C6.1), 1D: v_i' = (1/N) Σ_j G(|x_i − x_j|)(v_j − v_i) − (1/N) Σ_{j≠i} U'(|x_i − x_j|) sign(x_i − x_j)."""
    N = len(x)
    out = np.zeros(N)
    for i in range(N):
        for j in range(N):
            if j == i:
                continue
            r = abs(x[i] - x[j])
            G = 1.0 / (1.0 + r**2) ** GAMMA
            dU = C_A / L_A * np.exp(-r / L_A) - C_R / L_R * np.exp(-r / L_R)
            out[i] += (G * (v[j] - v[i]) - dU * np.sign(x[i] - x[j])) / N
    return out


def test_cucker_smale_network_equals_eq26():
    num = compiled(CS).numeric
    rng = np.random.default_rng(15)
    pairs = {"q12": (0, 1), "q23": (1, 2), "q31": (2, 0)}
    worst = 0.0
    for _ in range(100):
        x, v = rng.uniform(-10, 10, 3), rng.uniform(-10, 10, 3)
        X = {"p1": v[0], "p2": v[1], "p3": v[2], **{n: x[i] - x[j] for n, (i, j) in pairs.items()}}
        got = dict(zip(num.x_names, eval_rhs(num, [X[n] for n in num.x_names], num.p_default, [])))
        ref_v = eq26(x, v)
        for k in range(3):
            worst = max(worst, abs(got[f"p{k + 1}"] - ref_v[k]))
        for n, (i, j) in pairs.items():
            worst = max(worst, abs(got[n] - (v[i] - v[j])))
        assert abs(got["p1"] + got["p2"] + got["p3"]) <= 1e-12  # no grounded element: momentum conserved
    assert worst <= TOL, worst


def test_cucker_smale_structure():
    c = compiled(CS)
    assert set(c.numeric.x_names) == {"p1", "p2", "p3", "q12", "q23", "q31"}
    kinds = [e.kind for e in c.model.elements]
    assert kinds.count("store") == 6 and kinds.count("resistive") == 3 and kinds.count("junction") == 9
    assert not any(e.kind == "source" for e in c.model.elements)
    free = set().union(*(eq.rhs.free_symbols for eq in c.system.differential))
    assert {s.name for s in free} <= set(c.numeric.x_names) | set(c.numeric.p_names)
    assert not any(eq.rhs.has(sp.Piecewise) for eq in c.system.differential)


# ---------------------------------------------------------------------------------------------- cart–pole surrogate (C5.2)
def test_cart_pole_surrogate_rhs_and_parameter_count():
    c = compiled(CARTPOLE)
    num = c.numeric
    assert num.x_names == ("x", "v", "theta", "omega")
    weights = [n for n in num.p_names if n.startswith("h.")]
    assert len(weights) == 2 * 50 + 50 + 50 * 2 + 2 == 252
    learnable = {"M", "J", "d1", "d2"}
    assert learnable <= set(num.p_names) and len(weights) + len(learnable) == 256  # C5.2: 256, not 156
    p = num.p_default.copy()
    P = dict(zip(num.p_names, p))
    w = np.array([P[n] for n in weights])
    W1, b1 = w[:100].reshape(50, 2, order="F"), w[100:150]
    W2, b2 = w[150:250].reshape(2, 50, order="F"), w[250:252]
    K = np.array([P[f"K[{i}]"] for i in range(1, 5)])
    rng = np.random.default_rng(17)
    for _ in range(50):
        z = rng.uniform(-0.3, 0.3, 4)
        F = -K @ z
        h = W2 @ np.tanh(W1 @ z[[1, 3]] + b1) + b2
        want = [z[1], (F - P["d1"] * z[1] + h[0]) / P["M"], z[3], (h[1] - P["d2"] * z[3]) / P["J"]]
        got = eval_rhs(num, z, p, [])
        assert np.max(np.abs(got - want) / np.maximum(1, np.abs(want))) <= TOL


# ---------------------------------------------------------------------------------------------- bonds between junctions
_MSD_ELEMENTS = """  param m = 1.0, k = 4.0, d = 0.3
  input F
  flow_store mass(p) energy p^2/(2*m)
  effort_store spring(q) energy k*q^2/2
  resistive damper: f = d*e
  flow_source push = F
"""


@pytest.mark.parametrize("junctions", [
    "  junction a: common_effort(spring, damper)\n  junction common_effort(mass, -push, a)\n",  # plain bond
    "  junction a: common_effort(mass, -push)\n  junction common_effort(-a, spring, damper)\n",  # `-` bond
    "  junction top: common_effort(mass, spring, damper, -push)\n",  # a named junction without parent
])
def test_bonds_between_junctions(tmp_path, junctions):
    """Regression: a `-` bond used to enter the child junction with the wrong sign (p' = F + kq + dp/m), and a
    named junction without a parent got a phantom bond whose flow leaked into the ODE as a free symbol."""
    path = tmp_path / "bond.phm"
    path.write_text("model M\n" + _MSD_ELEMENTS + junctions + "end\n")
    c = compile_model(path)
    m, k, d, F, q, p = (sym(n) for n in ("m", "k", "d", "F", "q", "p"))
    rhs = rhs_by_name(c.system)
    assert sp.simplify(rhs["p"] - (F - k * q - d * p / m)) == 0
    assert power_balance(c.system).residual == 0


# ---------------------------------------------------------------------------------------------- errors
_ERRORS = [
    ("two_flow_sources", "  param m = 1.0\n  input F, G\n  flow_store mass(p) energy p^2/(2*m)\n  flow_source s1 = F\n"
     "  flow_source s2 = G\n  junction common_flow(mass, -s1, -s2)\n", "ConflictingSources", 7, 3, "s1"),
    ("unconnected", "  param m = 1.0, k = 2.0\n  flow_store mass(p) energy p^2/(2*m)\n  effort_store spring(q) energy k*q^2/2\n"
     "  resistive damper: f = 0.1*e\n  junction common_effort(mass, spring)\n", "UnconnectedPort", 5, 3, "damper"),
    ("port_in_two_junctions", "  param m = 1.0, k = 2.0\n  flow_store mass(p) energy p^2/(2*m)\n"
     "  effort_store spring(q) energy k*q^2/2\n  resistive damper: f = 0.1*e\n  junction common_effort(mass, spring)\n"
     "  junction common_effort(damper, mass)\n", "PortConnectedTwice", 7, 34, "mass"),
    # a named junction may be bonded to several junctions (LANGUAGE.md §6); an element may not be in two
    ("element_in_two_junctions_with_a_bonded_node", "  param m = 1.0, k = 2.0\n  flow_store mass(p) energy p^2/(2*m)\n"
     "  effort_store spring(q) energy k*q^2/2\n  resistive damper: f = 0.1*e\n  junction a: common_effort(mass, spring)\n"
     "  junction common_flow(a, damper)\n  junction common_flow(a, -damper)\n", "PortConnectedTwice", 8, 28, "damper"),
    ("not_skew", "  var q, p\n  hamiltonian q^2/2 + p^2/2\n  structure J = [[0, 1], [1, 0]]\n", "NotSkew", 4, 17, "skew"),
    ("not_psd", "  param d = 0.3\n  var q, p\n  hamiltonian q^2/2 + p^2/2\n  structure J = [[0, 1], [-1, 0]], R = [[0, 0], [0, -d]]\n",
     "NotPositiveSemidefinite", 5, 40, "-0.3"),
    ("unknown_member", "  param m = 1.0, k = 2.0\n  flow_store mass(p) energy p^2/(2*m)\n  effort_store spring(q) energy k*q^2/2\n"
     "  junction common_effort(mass, sprung)\n", "UnknownName", 5, 32, "sprung"),
]


@pytest.mark.parametrize("name, body, code, line, col, needle", _ERRORS, ids=[e[0] for e in _ERRORS])
def test_network_errors_are_located(tmp_path, name, body, code, line, col, needle):
    path = tmp_path / f"{name}.phm"
    path.write_text("model M\n" + body + "end\n")
    with pytest.raises(PdslError) as info:
        compile_model(path)
    diag = info.value.diagnostics[0]
    assert (diag.code, diag.span.line, diag.span.col) == (code, line, col), diag
    assert diag.span.path == str(path)
    assert needle in diag.message
    assert str(info.value).startswith(f"{path}:{line}:{col}: error[{code}]")


# ---------------------------------------------------------------------------------------------- CLI
@pytest.mark.parametrize("path", [p for p, _ in NETWORKS] + [MSD_ISO])
def test_show_power_holds_identically(capsys, tmp_path, path):
    # the Cucker–Smale rhs is shown --raw: the display simplifier of `show` rewrites sign(q) as a Piecewise and is slow
    args = ["show", str(model_file(path, tmp_path)), "--power"] + (["--raw"] if path == CS else [])
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "balance: holds identically" in out
    assert "FAILS" not in out


def test_simulate_power_columns(tmp_path, capsys):
    out = tmp_path / "msd.csv"
    rc = main(["simulate", str(MSD), "--t-end", "2", "--dt", "0.1", "--init", "q=1",
               "--input", "F=sin(t)", "--power", "-o", str(out)])
    assert rc == 0
    data = np.genfromtxt(out, delimiter=",", names=True, deletechars="")
    cols = data.dtype.names
    for c in ("H", "power(mass)", "power(spring)", "power(damper)", "power(push)"):
        assert c in cols, cols
    # Σ s·e·f = 0 with signs (+ mass, + spring, + damper, − push)
    total = data["power(mass)"] + data["power(spring)"] + data["power(damper)"] - data["power(push)"]
    assert np.abs(total).max() <= 1e-12
    assert np.allclose(data["H"], data["p"] ** 2 / 2 + 4 * data["q"] ** 2 / 2, atol=1e-12)
