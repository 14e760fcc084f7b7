"""lower.calculus.derivative gives the expressions sp.diff gives (the lowerings rely on it being the same)."""

from __future__ import annotations

from pathlib import Path

import pytest
import sympy as sp

from pdsl.lower.calculus import _CHAIN_RULE, derivative

ROOT = Path(__file__).resolve().parents[2]
x, y, z = sp.symbols("x y z", real=True)
a = sp.Symbol("a", positive=True)


def _exprs():
    out = [x, 3 * x, x * y + 2, x**2 * y**3, (x + y) ** -2, a ** (x * y), sp.sqrt(x**2 + y**2), sp.Float(0.5) * x * y,
           x * sp.cos(x - y) * y, sp.exp(sp.sin(x) * y) / (1 + x**2), sp.log(1 + sp.tanh(x)) * z, sp.atan2(y, x),
           sp.Abs(x - y), sp.Piecewise((x**2, x > 0), (y, True)), sp.Function("f")(x, y) * x, sp.cos(2) * x]
    out += [f(x * y + 1) * sp.sin(y) for f in sorted(_CHAIN_RULE, key=lambda f: f.__name__)]
    return out


@pytest.mark.parametrize("expr", _exprs(), ids=str)
def test_derivative_is_sp_diff(expr):
    for s in (x, y, z):
        assert derivative(expr, s) == sp.diff(expr, s)
        for s2 in (x, y):
            assert derivative(derivative(expr, s), s2) == sp.diff(sp.diff(expr, s), s2)  # iterated, as the lowerings take them


@pytest.mark.parametrize("model", ["double_pendulum.phm", "cart_pole.phm", "chaplygin_sleigh.phm", "henon_heiles.phm",
                                   "rolling_disk.phm", "driven_pendulum.phm"])
def test_lowered_rows_are_those_of_sp_diff(model, monkeypatch):
    """The Lagrangian/Hamiltonian lowering and the linear system, once with derivative and once with sp.diff."""
    import pdsl.lower.calculus as C
    import pdsl.lower.generalized as G
    import pdsl.lower.structural as St
    from pdsl.pipeline import CompileOptions, compile_model

    def rows(c):
        s = c.system
        return [(e.lhs, e.rhs) for e in s.differential], s.energy, s.linear_system()

    opts = CompileOptions(numeric=False)
    fast = rows(compile_model(ROOT / "models" / model, opts, cache=False))
    monkeypatch.setattr(G, "derivative", sp.diff)
    monkeypatch.setattr(St, "derivative", sp.diff)
    monkeypatch.setattr(C, "derivative", sp.diff)  # the IR's linear_system reads it at each call
    slow = rows(compile_model(ROOT / "models" / model, opts, cache=False))
    assert fast == slow
