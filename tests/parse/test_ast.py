"""The AST and the resolved model: spans, loops, const overrides, and a text -> AST -> text round trip."""

from __future__ import annotations

import dataclasses

import pytest
import sympy as sp

from pdsl.diagnostics import PdslError, Span
from pdsl.parse import ast as A
from pdsl.parse.parser import parse_expression, parse_text
from pdsl.pipeline import load_models
from pdsl.pipeline import resolve_file

CHAIN = """\
model Chain
  space 2
  const N = 5
  param m[1..N] = 1.0, l[1..N] = 1.0, g = 9.81
  body b[1..N] = point(mass = m[i])
  link ground, b[1], length = l[1]
  link b[i-1], b[i], length = l[i] for i in 2..N
  gravity g
end
"""

COUPLED = """\
model Coupled
  const N = 4
  param k = 1.0
  var x[1..N]
  der(x[i]) = -k*x[i] for i in 1..N
  output d[1..6] = 0
end
"""


def _walk(node):
    """Every AST node below ``node`` (depth first)."""
    stack = [node]
    while stack:
        x = stack.pop()
        if isinstance(x, tuple):
            stack.extend(x)
        elif dataclasses.is_dataclass(x) and not isinstance(x, Span):
            yield x
            stack.extend(getattr(x, f.name) for f in dataclasses.fields(x))


def _names(tree, name: str) -> list[A.Name]:
    return [n for n in _walk(tree) if isinstance(n, A.Name) and n.id == name]


# ---------------------------------------------------------------- spans
def test_name_span_points_at_the_name():
    text = "model A\n  param gamma = 1\n  var x\n  der(x) = -gama*x + 1\nend\n"
    (name,) = _names(parse_text(text, "a.phm"), "gama")
    assert name.span == Span("a.phm", 4, 13, 4, 17)


def test_unknown_name_diagnostic_has_the_name_span():
    text = "model A\n  param gamma = 1\n  var x\n  der(x) = -gama*x + 1\nend\n"
    with pytest.raises(PdslError) as info:
        load_models("a.phm", text=text)
    (d,) = info.value.diagnostics
    assert (d.code, d.span) == ("UnknownName", Span("a.phm", 4, 13, 4, 17))
    assert d.hint == "did you mean `gamma`?"


def test_statement_and_declaration_spans():
    model = parse_text(CHAIN, "c.phm").models[0]
    assert model.span.line == 1 and model.name_span == Span("c.phm", 1, 7, 1, 12)
    assert [s.span.line for s in model.body] == [2, 3, 4, 5, 6, 7, 8]
    assert all(s.span.col == 3 for s in model.body)
    decls = model.body[2].decls
    assert [(d.name, d.span.col) for d in decls] == [("m", 9), ("l", 24), ("g", 39)]
    link = model.body[5]
    assert isinstance(link, A.ConnectorStmt) and link.loops[0].var == "i"
    assert (link.loops[0].span.line, link.loops[0].span.col) == (7, 40)  # `i in 2..N`


def test_spans_survive_line_continuation():
    text = "model A\n  var x, v\n  der(x) = v\n  der(v) = -(x +\n            2*yy)\nend\n"
    (name,) = _names(parse_text(text, "a.phm"), "yy")
    assert (name.span.line, name.span.col) == (5, 15)
    with pytest.raises(PdslError) as info:
        load_models("a.phm", text=text)
    assert (info.value.diagnostics[0].span.line, info.value.diagnostics[0].span.col) == (5, 15)


@pytest.mark.parametrize("newline", ["\n", "\r\n"])
def test_columns_with_tabs_and_crlf(newline):
    text = newline.join(["model A", "\tvar x", "\tder(x) = -yy", "end", ""])
    with pytest.raises(PdslError) as info:
        load_models("a.phm", text=text)
    d = info.value.diagnostics[0]
    assert (d.code, d.span.line, d.span.col) == ("UnknownName", 3, 12)


def test_byte_order_mark_is_ignored():
    (model,) = load_models("a.phm", text="\ufeff" + COUPLED)
    assert model.name == "Coupled" and model.span.col == 1


def test_resolved_records_keep_their_spans():
    (model,) = load_models("c.phm", text=CHAIN)
    assert [c.span.line for c in model.connectors] == [6, 7, 7, 7, 7]
    assert {b.span.line for b in model.bodies} == {5}
    assert [p.span.line for p in model.params][:1] == [4]


# ---------------------------------------------------------------- loops and consts
def test_for_loop_expands_connectors():
    (model,) = load_models("c.phm", text=CHAIN)
    assert len(model.bodies) == 5
    assert len(model.connectors) == 1 + 4
    assert [(c.a.text, c.b.text) for c in model.connectors[1:]] == [("b[1]", "b[2]"), ("b[2]", "b[3]"), ("b[3]", "b[4]"), ("b[4]", "b[5]")]


def test_for_loop_expands_equations():
    (model,) = load_models("k.phm", text=COUPLED)
    assert len(model.equations) == 4
    assert [str(e.lhs) for e in model.equations] == [f"der(x[{i}])" for i in range(1, 5)]


def test_nested_loop_with_dependent_bounds():
    text = "model A\n  const N = 4\n  var x[1..N]\n  0 = x[i] - x[j] for i in 1..N, j in i+1..N\nend\n"
    (model,) = load_models("a.phm", text=text)
    assert len(model.equations) == 4 * 3 // 2


def test_sum_generator_and_exact_numbers():
    text = "model A\n  const N = 3\n  var x[1..N]\n  0 = sum(x[j] for j in 1..N) - 0.1\n  0 = x[1] - x[2]\n  0 = x[2] - x[3]\nend\n"
    (model,) = load_models("a.phm", text=text)
    eq = model.equations[0]
    x = [sp.Symbol(f"x[{k}]", real=True) for k in (1, 2, 3)]
    assert eq.lhs == 0
    assert sp.expand(eq.rhs - (sum(x) - sp.Rational(1, 10))) == 0  # 0.1 stays the exact 1/10


@pytest.mark.parametrize("n", [2, 3, 7])
def test_const_override_changes_array_sizes(n):
    (model,) = resolve_file(parse_text(CHAIN, "c.phm"), {"N": n})
    assert model.consts["N"] == n
    assert len(model.bodies) == n
    assert len(model.connectors) == n
    assert len([p for p in model.params if p.name.startswith("m[")]) == n


def test_const_override_reaches_dependent_consts():
    text = "model A\n  const N = 2, M = 2*N\n  var x[1..M]\n  der(x[i]) = -x[i] for i in 1..M\nend\n"
    (model,) = load_models("a.phm", text=text, consts={"N": 5})
    assert model.consts == {"N": 5, "M": 10}
    assert len(model.variables) == 10


def test_unknown_const_override_is_an_error():
    with pytest.raises(PdslError) as info:
        resolve_file(parse_text(CHAIN, "c.phm"), {"K": 3})
    (d,) = info.value.diagnostics
    assert d.code == "UnknownName" and "--const K" in d.message
    assert d.hint == "consts of this file: N"


def test_const_override_that_breaks_the_model_is_located():
    with pytest.raises(PdslError) as info:
        resolve_file(parse_text(CHAIN, "c.phm"), {"N": 0})
    d = info.value.diagnostics[0]
    assert (d.code, d.span.line) == ("BadArrayBounds", 4)


def test_order_of_statements_does_not_matter():
    text = "model A\n  der(x) = -k*x\n  var x\n  param k = N\n  const N = 2\nend\n"
    (model,) = load_models("a.phm", text=text)
    assert model.params[0].default == 2.0


# ---------------------------------------------------------------- round trip
def _unparse(e: A.Expr) -> str:
    """A fully bracketed spelling of an expression (the inverse of the parser, up to brackets)."""
    match e:
        case A.Num():
            return e.text
        case A.Name():
            return e.id
        case A.Neg():
            return f"(-{_unparse(e.operand)})"
        case A.BinOp():
            return f"({_unparse(e.left)} {e.op} {_unparse(e.right)})"
        case A.Call():
            args = [_unparse(a) for a in e.args] + [f"{k.name} = {_unparse(k.value)}" for k in e.kwargs]
            return f"{_unparse(e.func)}({', '.join(args)})"
        case A.Index():
            return f"{_unparse(e.base)}[{', '.join(_unparse(i) for i in e.indices)}]"
        case A.Attr():
            return f"{_unparse(e.base)}.{e.name}"
        case A.Vector():
            return f"[{', '.join(_unparse(i) for i in e.items)}]"
        case A.Generator():
            return f"{_unparse(e.func)}({_unparse(e.body)} for {e.var} in {_unparse(e.lo)}..{_unparse(e.hi)})"
    raise AssertionError(e)


def _strip(node):
    """The AST without its spans, for comparing structure."""
    if isinstance(node, tuple):
        return tuple(_strip(x) for x in node)
    if dataclasses.is_dataclass(node) and not isinstance(node, Span):
        return (type(node).__name__,) + tuple(_strip(getattr(node, f.name)) for f in dataclasses.fields(node) if f.name != "span")
    return node


@pytest.mark.parametrize(
    "text, bracketed",
    [
        ("-x^2", "(-(x ^ 2))"),
        ("a - b - c", "((a - b) - c)"),
        ("a / b * c", "((a / b) * c)"),
        ("a^b^c", "(a ^ (b ^ c))"),
        ("2*-x", "(2 * (-x))"),
        ("-a + b", "((-a) + b)"),
        ("b.at([0, 0, 1]).x", "b.at([0, 0, 1]).x"),
        ("sum(m[j]*x[j] for j in 1..N)", "sum((m[j] * x[j]) for j in 1..N)"),
        ("A[1, 2] + dot(K, [x, v])", "(A[1, 2] + dot(K, [x, v]))"),
        ("1. + .5 + 1e-3 + 2.5E+2", "(((1. + .5) + 1e-3) + 2.5E+2)"),
    ],
)
def test_precedence_and_round_trip(text, bracketed):
    tree = parse_expression(text)
    assert _unparse(tree) == bracketed
    assert _strip(parse_expression(bracketed)) == _strip(tree)


def test_round_trip_of_every_expression_in_a_model():
    for stmt in parse_text(CHAIN + COUPLED, "c.phm").models[0].body:
        for node in _walk(stmt):
            if isinstance(node, A.Expr):
                assert _strip(parse_expression(_unparse(node))) == _strip(node)


# ---------------------------------------------------------------- size and depth
def test_long_sums_and_products_are_not_nested():
    terms = 5000
    text = "model A\n  var x\n  der(x) = " + " + ".join(f"x^{k}" for k in range(terms)) + " - " + "*".join(["x"] * 500) + "\nend\n"
    (model,) = load_models("a.phm", text=text)
    assert len(model.equations[0].rhs.args) == terms - 1  # 1 + x + ... + x^4999, less x^500 (cancelled)


def test_deep_brackets_are_fine_but_deep_nesting_is_refused():
    load_models("a.phm", text="model A\n  var x\n  der(x) = " + "(" * 3000 + "x" + ")" * 3000 + "\nend\n")
    with pytest.raises(PdslError) as info:
        load_models("a.phm", text="model A\n  var x\n  der(x) = " + "sin(" * 3000 + "x" + ")" * 3000 + "\nend\n")
    assert info.value.codes == ["NestingTooDeep"]


def test_axis_points_of_rigid_bodies_belong_to_the_body():
    text = "model A\n  space 3\n  body r = rigid(dim = 2, mass = 1, moments = [1, 2])\n  joint ground, r.a1\n  link r.a1, r.at([0, 1]), length = 1\nend\n"
    (model,) = load_models("a.phm", text=text)
    joint, link = model.connectors
    assert (joint.b.body, joint.b.local) == ("r", (1, 0))
    assert (link.a.body, link.b.body) == ("r", "r")
    with pytest.raises(PdslError) as info:
        load_models("a.phm", text=text.replace("r.at([0, 1])", "r.at([1, 0])"))
    assert info.value.codes == ["SelfConnection"]


@pytest.mark.parametrize(
    "text, code, col",
    [("sin(t", "UnbalancedBracket", 4), ("sin(t) +", "Syntax", 9), ("2x", "BadNumber", 1), ("", "Syntax", 1), ("a ** 2", "Syntax", 3)],
)
def test_command_line_expressions_get_located_errors(text, code, col):
    with pytest.raises(PdslError) as info:
        parse_expression(text, "--input F")
    d = info.value.diagnostics[0]
    assert (d.code, d.span.path, d.span.line, d.span.col) == (code, "--input F", 1, col)
