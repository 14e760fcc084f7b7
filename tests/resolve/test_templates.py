"""Index templates (issue 18): a large sum's body is evaluated once with symbolic indices and each term is
instantiated structurally. Every model here is resolved twice — with templates and with the per-term
evaluation (templates switched off) — and the equations must agree in value at random points; errors must be
the same located diagnostics."""

from __future__ import annotations

import numpy as np
import pytest
import sympy as sp

import pdsl.resolve.expressions as X
import pdsl.resolve.templates as T
from pdsl.diagnostics import PdslError
from pdsl.pipeline import load_models

N = X.FAST_ARRAY_SIZE + 4  # large enough for structural sums


def _resolve(text: str, templates: bool, monkeypatch):
    with monkeypatch.context() as m:
        if not templates:
            m.setattr(X, "TEMPLATE_MIN_TERMS", 10**9)
        return load_models("t.phm", text=text)[0]


def _count_runs(monkeypatch) -> list:
    calls = []
    real = T.Program.run

    def run(self, i):
        calls.append(i)
        try:
            return real(self, i)
        except Exception:
            calls.append("fallback")
            raise

    monkeypatch.setattr(T.Program, "run", run)
    return calls


def _values(model, rng):
    syms = set()
    for e in model.equations:
        syms |= e.lhs.free_symbols | e.rhs.free_symbols
    return {s: sp.Float(rng.uniform(-2.0, 2.0)) for s in sorted(syms, key=str)}


def _number(expr, vals) -> complex:
    return complex(sp.N(expr.xreplace(vals), 20))


def _assert_same_values(text: str, monkeypatch, points: int = 3, expect_template: bool = True):
    calls = _count_runs(monkeypatch)
    fast = _resolve(text, True, monkeypatch)
    used = len(calls)
    slow = _resolve(text, False, monkeypatch)
    assert len(calls) == used  # the reference really is the per-term evaluation
    if expect_template:
        assert used > 0, "the template was not used"
        assert calls.count("fallback") == 0, "a term fell back to the per-term evaluation"
    assert len(fast.equations) == len(slow.equations)
    rng = np.random.default_rng(11)
    for _ in range(points):
        vals = _values(slow, rng)
        for a, b in zip(fast.equations, slow.equations):
            for x, y in ((a.lhs, b.lhs), (a.rhs, b.rhs)):
                u, v = _number(x, vals), _number(y, vals)
                assert abs(u - v) <= 1e-12 * max(1.0, abs(v)), (x, y)
    return fast, used


def _model(body: str, extra: str = "") -> str:
    return f"""model M
  const N = {N}
  param a = 0.7, b = 1.3
  var x[1..N] = 0.1, v[1..N] = 0.2
{extra}
  der(x[i]) = v[i] for i in 1..N
{body}
end
"""


def test_i_dependent_bounds_cucker_smale_form(monkeypatch):
    body = """  der(v[i]) = (sum((v[j] - v[i])/(1 + (x[i] - x[j])^2)^a - (b*exp(-abs(x[i] - x[j])/2))*sign(x[i] - x[j]) for j in 1..i-1)
               + sum((v[j] - v[i])/(1 + (x[i] - x[j])^2)^a for j in i+1..N))/N for i in 1..N"""
    _assert_same_values(_model(body), monkeypatch)


def test_index_arithmetic(monkeypatch):
    body = """  der(v[i]) = sum(x[j - 1]*x[N - j + 1] + 2*j*x[j] - x[2*j - 1]/(j + 1) + (j - i)^2*v[j] for j in 2..N/2) for i in 1..N"""
    _assert_same_values(_model(body), monkeypatch)


def test_nested_sums_and_products(monkeypatch):
    # inner bounds independent of j: the outer sum is a template (the inner one evaluated term by term inside it);
    # inner bounds that depend on j: the outer sum is evaluated term by term, each inner sum a template
    body = """  der(v[i]) = (sum(sum(x[j]*x[k]*v[k] for k in 1..3) * x[j]^2 / (1 + x[j]^2)^(1/2) for j in 1..N)
               + sum(sum(x[k]*v[j] for k in j..j + 2) for j in 1..N - 2) - a*b*x[i]) for i in 1..N"""
    _assert_same_values(_model(body), monkeypatch)


def test_if_expressions_on_states_and_indices(monkeypatch):
    body = """  der(v[i]) = sum((if x[j] > x[i] then x[j] - x[i] else 0) + (if j == i then 0 else v[j]/(1 + (j - i)^2))
                   + (if j < 3 or j > N - 2 then 1 else 2)*x[j] + (if not (j == 4) and x[j] < 0.5 then a else b) for j in 1..N) for i in 1..N"""
    _assert_same_values(_model(body), monkeypatch)


def test_functions_powers_and_numbers(monkeypatch):
    body = """  der(v[i]) = sum(sin(x[j]) + cos(j*x[j]) + atan2(x[j], 1 + x[i]^2) + min(x[j], v[j]) + max(j, 3)*x[j]
                   + sqrt(1 + x[j]^2) + log(1 + x[j]^2) + tanh(x[j]/j) + x[j]^(j - 3) + exp(-j/10) + abs(j - 5) + sign(j - 5)*x[j]
                   for j in 1..N) for i in 1..N"""
    fast, _ = _assert_same_values(_model(body), monkeypatch)
    # number-only index arithmetic stays exact: abs(j - 5) and sign(j - 5) are integers, exp(-j/10) exact
    rhs = fast.equations[N].rhs
    assert not any(isinstance(a, sp.Float) for a in sp.preorder_traversal(rhs))


def test_bodies_that_are_not_templates_are_evaluated_term_by_term(monkeypatch):
    # smoothstep and dot are outside the template's function table: the per-term evaluation does them
    body = """  der(v[i]) = sum(smoothstep(x[j], 0.5) + dot([x[j], 1], [v[j], 2]) for j in 1..N) for i in 1..N"""
    _assert_same_values(_model(body), monkeypatch, expect_template=False)


def test_networks_and_derivatives_in_a_sum_are_evaluated_term_by_term(monkeypatch):
    extra = "  nn h: mlp(hidden = [4], act = tanh, out = 1)"
    body = """  der(v[i]) = sum(h(x[j], v[j]) + x[i]*h(x[i], a) for j in 1..N) for i in 1..N"""
    fast, _ = _assert_same_values(_model(body, extra), monkeypatch, points=0, expect_template=False)
    s = _resolve(_model(body, extra), False, monkeypatch)
    assert [(e.lhs, e.rhs) for e in fast.equations] == [(e.lhs, e.rhs) for e in s.equations]


@pytest.mark.parametrize("body, code", [
    ("  der(v[i]) = sum(x[j + 1] for j in 1..N) for i in 1..N", "BadIndex"),
    ("  der(v[i]) = sum(x[j]/(j - 7) for j in 1..N) for i in 1..N", "DivisionByZero"),
    ("  der(v[i]) = sum(x[j] + 1/(j - 7) for j in 1..N) for i in 1..N", "DivisionByZero"),
    ("  der(v[i]) = sum(x[j]*sqrt(j - 9) for j in 1..N) for i in 1..N", "NotReal"),
    ("  der(v[i]) = sum(x[j]*log(j - 7) for j in 1..N) for i in 1..N", "NotReal"),
    ("  der(v[i]) = sum(x[j]*(j - 7)^(-2) for j in 1..N) for i in 1..N", "DivisionByZero"),
    ("  der(v[i]) = sum(x[j]^(1000*j) for j in 1..N) for i in 1..N", "BadNumber"),
    ("  der(v[i]) = sum(x[j]*x[j/2] for j in 1..N) for i in 1..N", "NotInteger"),
    ("  der(v[i]) = sum(x[N - j] for j in 1..N) for i in 1..N", "BadIndex"),
    ("  der(v[i]) = sum(x[i] + (if 1 > 2 then x[j + 1] else 0) for j in 1..N) for i in 1..N", "BadIndex"),
    ("  der(v[i]) = sum(if x[j] > 0 then x[j] else x[2*j] for j in 1..N) for i in 1..N", "BadIndex"),
    ("  der(v[i]) = sum(x[j] + (if 1 > 2 then 1/(j - 7) else 0) for j in 1..N) for i in 1..N", "DivisionByZero"),
    ("  der(v[i]) = sum(x[j] + (if j == j or 1/(j - 7) > 0 then 1 else 0) for j in 1..N) for i in 1..N", "DivisionByZero"),
])
def test_errors_in_one_term_are_located_as_before(monkeypatch, body, code):
    text = _model(body)
    errors = []
    for templates in (True, False):
        with pytest.raises(PdslError) as info:
            _resolve(text, templates, monkeypatch)
        errors.append(str(info.value))
        assert info.value.codes == [code]
    assert errors[0] == errors[1]
    assert "t.phm:" in errors[0]  # path:line:col


def test_out_of_range_message_names_the_index(monkeypatch):
    text = _model("  der(v[i]) = sum(x[j + 1] for j in 1..N) for i in 1..N")
    with pytest.raises(PdslError) as info:
        _resolve(text, True, monkeypatch)
    d = info.value.diagnostics[0]
    assert d.code == "BadIndex" and f"index {N + 1} is outside" in d.message
    assert d.span is not None and (d.span.line, d.span.col) == (7, 19)  # at `x[j + 1]`


def test_terms_share_repeated_subexpressions(monkeypatch):
    """x[i] - x[j] written four times in the body is one object per term (lowering walks it once)."""
    body = """  der(v[i]) = sum(abs(x[i] - x[j]) + (x[i] - x[j])^2 + sign(x[i] - x[j]) for j in 1..N) for i in 1..N"""
    fast, used = _assert_same_values(_model(body), monkeypatch, points=1)
    rhs = fast.equations[N + 2].rhs
    diffs = [a for a in sp.preorder_traversal(rhs) if isinstance(a, sp.Add) and len(a.args) == 2 and a.has(sp.Symbol)]
    by_value: dict = {}
    for d in diffs:
        by_value.setdefault(d, set()).add(id(d))
    assert any(len(ids) == 1 and sum(1 for d in diffs if d == k) >= 3 for k, ids in by_value.items())
