"""``lower.common.scan`` (free symbols and finiteness in one walk, each object once) and ``symbols_in`` agree with
sympy's ``free_symbols`` / ``has`` (issue 18: these walks replaced sympy's on the structural sums of large models)."""

from __future__ import annotations

import numpy as np
import pytest
import sympy as sp

from pdsl.diagnostics import PdslError
from pdsl.lower.common import check_finite, scan
from pdsl.lower.structural import symbols_in

x, y, z, w = sp.symbols("x y z w", real=True)
f = sp.Function("f")
INF = (sp.zoo, sp.nan, sp.oo, -sp.oo)


def _reference(e):
    return e.free_symbols, not e.has(*INF)


def _random_expr(rng, depth, pool):
    if depth == 0 or rng.random() < 0.2:
        return pool[rng.integers(len(pool))]
    kind = rng.integers(7)
    a = _random_expr(rng, depth - 1, pool)
    b = _random_expr(rng, depth - 1, pool)
    if kind == 0:
        return sp.Add(a, b, evaluate=False)
    if kind == 1:
        return sp.Mul(a, b, evaluate=False)
    if kind == 2:
        return sp.Pow(a, 2, evaluate=False)
    if kind == 3:
        return sp.exp(a, evaluate=False)
    if kind == 4:
        return sp.Piecewise((a, x > b), (b, True))
    if kind == 5:
        return a  # shared subtree: the same object used twice above
    return sp.Abs(a, evaluate=False) + b


@pytest.mark.parametrize("seed", range(20))
def test_scan_equals_free_symbols_and_has(seed):
    rng = np.random.default_rng(seed)
    pool = [x, y, z, sp.Integer(2), sp.Rational(1, 3), sp.Float(0.5), sp.pi] + ([sp.zoo, sp.oo, -sp.oo, sp.nan][seed % 4:][:1]
                                                                                    if seed % 3 == 0 else [])
    e = _random_expr(rng, 5, pool)
    assert scan(e) == _reference(e)
    assert symbols_in((e,), {x, z, w}) == e.free_symbols & {x, z, w}


@pytest.mark.parametrize("e", [
    sp.exp(x) * sp.zoo, x - sp.oo, sp.Mul(-1, sp.oo, evaluate=False) * y, sp.Piecewise((x, y > 0), (sp.nan, True)),
    sp.Derivative(f(x) * y, x) + z, sp.Derivative(f(x) * sp.zoo, x), sp.Integral(x * y, (x, 0, 1)), sp.Lambda(x, x + z)(y),
    sp.ImmutableMatrix([x, sp.nan]), sp.ImmutableMatrix([[x, y], [z, 1]]), sp.Integer(3), sp.true, sp.Lt(x, y) & sp.Gt(z, 1),
])
def test_scan_on_special_nodes(e):
    assert scan(e) == _reference(e)


def test_deeply_shared_dag_is_linear():
    e = x
    for _ in range(200):  # 2^200 paths: a tree walk would never end
        e = sp.Add(e, sp.Mul(e, y, evaluate=False), evaluate=False)
    assert scan(e) == ({x, y}, True)
    assert symbols_in((e,), {y}) == {y}


def test_check_finite_is_located():
    check_finite(x + 1, None, "this")
    with pytest.raises(PdslError) as info:
        check_finite(x + sp.zoo, None, "this equation")
    assert info.value.codes == ["NotANumber"]
