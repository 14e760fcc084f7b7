"""`if c then a else b`, comparisons, `and or not`, `smoothstep` (issue 11, LANGUAGE.md §2).

Parsing (precedence, nesting), resolution (types, located errors), and the same numbers from
every numeric target: CasADi (if_else), torch (where), the generated numpy module and C.
"""

from __future__ import annotations

import importlib.util
import math
import textwrap

import casadi as ca
import numpy as np
import pytest
import sympy as sp

from pdsl.diagnostics import PdslError
from pdsl.parse import ast as A
from pdsl.parse.parser import parse_expression
from pdsl.pipeline import compile_model, load_models


def _model(body: str, name: str = "A") -> str:
    return f"model {name}\n" + textwrap.indent(textwrap.dedent(body).strip("\n"), "  ") + "\nend\n"


def _error(text: str) -> PdslError:
    with pytest.raises(PdslError) as exc:
        compile_model("<test>", text=text)
    return exc.value


# ---------------------------------------------------------------- parsing
def test_if_binds_loosest_and_else_extends_right():
    e = parse_expression("if t < 1 then 0 else 2 + t")
    assert isinstance(e, A.IfExpr)
    assert isinstance(e.orelse, A.BinOp) and e.orelse.op == "+"


def test_precedence_of_not_and_or():
    e = parse_expression("not a < 1 and b > 2 or c == 3")
    assert isinstance(e, A.BoolOp) and e.op == "or"
    assert isinstance(e.left, A.BoolOp) and e.left.op == "and"
    assert isinstance(e.left.left, A.Not) and isinstance(e.left.left.operand, A.Compare)
    assert isinstance(e.right, A.Compare) and e.right.op == "=="


def test_nested_if_in_both_branches():
    e = parse_expression("if a then if b then 1 else 2 else if c then 3 else 4".replace("a", "x<0").replace("b", "y<0").replace("c", "z<0"))
    assert isinstance(e.then, A.IfExpr) and isinstance(e.orelse, A.IfExpr)


@pytest.mark.parametrize("op", ["<", "<=", ">", ">=", "==", "!="])
def test_every_comparison_parses(op):
    e = parse_expression(f"x {op} 2*y")
    assert isinstance(e, A.Compare) and e.op == op


def test_chained_comparison_is_a_syntax_error():
    with pytest.raises(PdslError) as exc:
        parse_expression("0 < x < 1")
    assert exc.value.diagnostics[0].code.startswith(("Syntax", "Unexpected"))


# ---------------------------------------------------------------- resolution
def _rhs(text: str, state: str = "x"):
    (m,) = load_models("<test>", text=text)
    c = compile_model("<test>", text=text)
    return c.system


def test_step_input_is_a_piecewise_law():
    sys = _rhs(_model("""
        input F = if t < 1 then 0 else 2
        var x = 0
        der(x) = F
    """))
    law = sys.input_laws()[sp.Symbol("F", real=True)]
    t = sp.Symbol("t", real=True)
    assert law.subs(t, 0.5) == 0 and law.subs(t, 1) == 2 and law.subs(t, 3) == 2


def test_constant_condition_selects_a_branch():
    sys = _rhs(_model("""
        const N = 3
        var x = 0
        der(x) = if N > 2 then -x else x
    """))
    assert not sys.differential[0].rhs.has(sp.Piecewise)
    assert sys.differential[0].rhs == -sp.Symbol("x", real=True)


def test_smoothstep_is_half_one_plus_tanh():
    sys = _rhs(_model("""
        param w = 0.1
        var x = 0
        der(x) = smoothstep(t - 1, w)
    """))
    t, w = sp.Symbol("t", real=True), sp.Symbol("w", real=True)
    assert sp.simplify(sys.differential[0].rhs - (1 + sp.tanh((t - 1) / w)) / 2) == 0


@pytest.mark.parametrize("body, code, line, col, fragment", [
    ("var x\nder(x) = 2*(t < 1)", "TypeMismatch", 3, 15, "condition"),
    ("var x\nder(x) = if t then 1 else 0", "TypeMismatch", 3, 15, "not a condition"),
    ("var x\nder(x) = if t < 1 and x then 1 else 0", "TypeMismatch", 3, 25, "not a condition"),
    ("var x\nder(x) = if t < 1 then [1, 2] else 0", "TypeMismatch", 3, 12, "differ in shape"),
    ("var x\nder(x) = smoothstep(x, 0)", "DivisionByZero", 3, 26, "width"),
    ("var x\nder(x) = if [1, 2] < 1 then 1 else 0", "TypeMismatch", 3, 15, "scalar"),
])
def test_type_errors_are_located(body, code, line, col, fragment):
    err = _error(_model(body))
    d = err.diagnostics[0]
    assert (d.code, d.span.line, d.span.col) == (code, line, col), d
    assert fragment in d.message + (d.hint or "")


def test_text_is_not_a_number():
    d = _error(_model('param k = 1 {lower = "zero"}\nvar x\nder(x) = -k*x')).diagnostics[0]
    assert d.code == "TypeMismatch" and "not a number" in d.message


# ---------------------------------------------------------------- everywhere an expression is
EVERYWHERE = _model("""
    param m = 1.0, k = 4.0, c = 0.5
    input u = if t < 0.5 then 1 else -1
    coord x = 0.3
    lagrangian m*der(x)^2/2 - (if abs(x) < 1 then k*x^2/2 else k*(abs(x) - 1/2))
    force if der(x) > 0 then -c else c on x
    force u on x
    output sat = if x > 0 and not (der(x) < 0) or x > 2 then 1 else 0
""", "Everywhere")


def _expected_rhs(t, x, v, m=1.0, k=4.0, c=0.5):
    u = 1.0 if t < 0.5 else -1.0
    dV = k * x if abs(x) < 1 else k * math.copysign(1.0, x)
    fric = -c if v > 0 else c
    return np.array([v, (-dV + fric + u) / m])


POINTS = [(0.1, 0.3, 0.2), (0.7, -0.4, -0.1), (0.2, 1.5, 0.5), (0.9, -2.0, 0.0), (0.3, 0.99, -1.0)]


def test_everywhere_casadi_matches_the_definition():
    num = compile_model("<test>", text=EVERYWHERE).numeric
    for t, x, v in POINTS:
        got = np.asarray(num.rhs(t, [x, v], num.p_default, [])).ravel()
        np.testing.assert_allclose(got, _expected_rhs(t, x, v), rtol=0, atol=1e-14)
        y = float(num.outputs(t, [x, v], [], num.p_default, [])[0])
        assert y == (1.0 if (x > 0 and not v < 0) or x > 2 else 0.0)


@pytest.mark.parametrize("core", ["tape", "auto"])  # torch.where on the tape; generated C (if_else) otherwise
def test_everywhere_torch_matches_the_definition(core):
    torch = pytest.importorskip("torch")
    from pdsl.backend.torch_backend import TorchSystem

    c = compile_model("<test>", text=EVERYWHERE)
    ts = TorchSystem(c.system, core=core)
    b = ts.bind(torch.tensor(c.numeric.p_default))
    for t, x, v in POINTS:
        got = ts.rhs(torch.tensor(t, dtype=torch.float64), torch.tensor([[x, v]], dtype=torch.float64), b)
        np.testing.assert_allclose(got.detach().numpy().ravel(), _expected_rhs(t, x, v), rtol=0, atol=1e-14)


@pytest.mark.parametrize("core", ["tape", "auto"])
def test_torch_gradient_is_the_branch_gradient(core):
    """d rhs / dk: −x inside |x| < 1, −sign(x) outside — each branch's own derivative (no mixing)."""
    torch = pytest.importorskip("torch")
    from pdsl.backend.torch_backend import TorchSystem

    c = compile_model("<test>", text=EVERYWHERE)
    ts = TorchSystem(c.system, core=core)
    p = torch.tensor(c.numeric.p_default, requires_grad=True)
    k_index = c.numeric.p_names.index("k")
    for t, x, v in POINTS:
        out = ts.rhs(torch.tensor(t, dtype=torch.float64), torch.tensor([[x, v]], dtype=torch.float64), ts.bind(p))
        (g,) = torch.autograd.grad(out[0, 1], p)
        assert float(g[k_index]) == pytest.approx(-x if abs(x) < 1 else -math.copysign(1.0, x), abs=1e-14)


def test_everywhere_numpy_target_matches(tmp_path):
    from pdsl.compile.targets import compile_to

    num = compile_model("<test>", text=EVERYWHERE).numeric
    files = compile_to(num, "python", tmp_path / "out")
    py = next(f for f in files if f.suffix == ".py")
    spec = importlib.util.spec_from_file_location("everywhere_model", py)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    for t, x, v in POINTS:
        np.testing.assert_allclose(np.asarray(mod.rhs(t, [x, v]), dtype=float), _expected_rhs(t, x, v), rtol=0, atol=1e-14)


def test_everywhere_c_target_matches(tmp_path):
    from pdsl.backend.torch_core import compiler
    from pdsl.compile.targets import compile_to

    if compiler() is None:
        pytest.skip("no C compiler")
    num = compile_model("<test>", text=EVERYWHERE).numeric
    compile_to(num, "c", tmp_path / "c")
    lib = next((tmp_path / "c").rglob("*.so"), None)
    if lib is None:
        pytest.skip("the C target built no shared library here")
    f = ca.external("rhs", str(lib))
    for t, x, v in POINTS:
        got = np.asarray(f(t, [x, v], num.p_default, [])).ravel()
        np.testing.assert_allclose(got, _expected_rhs(t, x, v), rtol=0, atol=1e-14)


# ---------------------------------------------------------------- every formalism
PH = _model("""
    param m = 1.0, k = 4.0, d = 0.3
    input F = if t < 1 then 0 else 1
    flow_store mass(p) energy p^2/(2*m)
    effort_store spring(q) energy if abs(q) < 1 then k*q^2/2 else k*(abs(q) - 1/2)
    resistive damper: f = if e > 0 then d*e else 2*d*e
    flow_source push = F
    junction common_effort(mass, spring, damper, -push)
""", "PH")


def test_port_hamiltonian_elements_with_conditionals():
    """Store energy and resistive relation with branches, against the hand-written network ODE."""
    num = compile_model("<test>", text=PH).numeric
    ix = {n: i for i, n in enumerate(num.x_names)}
    for t, p, q in [(0.5, 0.4, 0.2), (1.5, -0.4, 1.7), (2.0, 0.9, -3.0), (0.1, -1.0, -0.5)]:
        x = np.zeros(2)
        x[ix["p"]], x[ix["q"]] = p, q
        got = np.asarray(num.rhs(t, x, num.p_default, [])).ravel()
        e = p / 1.0
        F = 0.0 if t < 1 else 1.0
        spring = 4.0 * q if abs(q) < 1 else 4.0 * math.copysign(1.0, q)
        damper = 0.3 * e if e > 0 else 0.6 * e
        assert got[ix["q"]] == pytest.approx(e, abs=1e-14)
        assert got[ix["p"]] == pytest.approx(F - spring - damper, abs=1e-14)


def test_hamiltonian_and_cartesian_with_conditionals():
    from pdsl.sim.simulate import simulate, time_grid

    ham = compile_model("<test>", text=_model("""
        param m = 1.0, k = 4.0
        coord q = 1
        momentum p
        hamiltonian p^2/(2*m) + (if q > 0 then k*q^2/2 else k*q^2)
    """)).numeric
    for q in (0.5, -0.5):
        xdot = np.asarray(ham.rhs(0, [q, 0.3], ham.p_default, [])).ravel()
        np.testing.assert_allclose(xdot, [0.3, -4.0 * q if q > 0 else -8.0 * q], atol=1e-14)
    cart = compile_model("<test>", text=_model("""
        space 2
        param m = 1.0, g = 9.81, l = 1
        body b = point(mass = m)
        link ground, b, length = l
        gravity g
        force [if t < 0.5 then 0 else 1, 0] on b
    """)).numeric
    r = simulate(cart, time_grid(1.0, 0.25), x0={"b.x": 0.5})
    assert r.info["switch_times"] == [0.5]
    assert np.max(r.constraint_rms) < 1e-6
