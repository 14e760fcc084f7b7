"""sympy -> CasADi by an explicit node-by-node table and a caching tree walk.

No string round trip and no ``lambdify``: each sympy node type maps to a CasADi
operation; shared subtrees are converted once (so the CasADi graph keeps the
sharing sympy had). Works for SX and MX alike.
"""

from __future__ import annotations

from typing import Callable, Mapping

import casadi as ca
import sympy as sp

from .. import symbols as S
from ..diagnostics import InternalError
from ..resolve.model import network_derivative

__all__ = ["Converter"]


def _nary(op: Callable) -> Callable:
    def f(*args):
        out = args[0]
        for a in args[1:]:
            out = op(out, a)
        return out

    return f


def _oriented(a):
    """``(a′, s)`` with a = s·a′: a difference of two named SX symbols in one fixed order (by name), so that
    |x_i − x_j| and |x_j − x_i| (a pair force and its mirror image) are one expression once
    :func:`casadi.cse` merges them. Exact: IEEE subtraction is antisymmetric."""
    if isinstance(a, ca.SX) and a.is_scalar() and a.is_op(ca.OP_SUB):
        p, q = a.dep(0), a.dep(1)
        if p.is_symbolic() and q.is_symbolic() and p.name() > q.name():
            return q - p, -1.0
    return a, 1.0


def _fabs(a):
    return ca.fabs(_oriented(a)[0])


def _sign(a):
    a, s = _oriented(a)
    return s * ca.sign(a) if s < 0 else ca.sign(a)


def _pow(base, exp_node: sp.Expr, exp):
    if exp_node.is_Integer:
        k = int(exp_node)
        if k == 1:
            return base
        if k % 2 == 0:
            base = _oriented(base)[0]  # (−d)^(2m) = d^(2m)
        if k == -1:
            return 1 / base
        return base**k if k > 0 else 1 / base ** (-k)
    if exp_node == sp.Rational(1, 2):
        return ca.sqrt(base)
    if exp_node == sp.Rational(-1, 2):
        return 1 / ca.sqrt(base)
    if exp_node.is_number:
        return base ** float(exp_node)
    return ca.power(base, exp)


_FUNCS: Mapping[type, Callable] = {
    sp.sin: ca.sin,
    sp.cos: ca.cos,
    sp.tan: ca.tan,
    sp.asin: ca.asin,
    sp.acos: ca.acos,
    sp.atan: ca.atan,
    sp.exp: ca.exp,
    sp.log: ca.log,
    sp.tanh: ca.tanh,
    sp.sinh: ca.sinh,
    sp.cosh: ca.cosh,
    sp.Abs: _fabs,
    sp.sign: _sign,
    sp.atan2: ca.atan2,
    sp.Min: _nary(ca.fmin),
    sp.Max: _nary(ca.fmax),
    sp.Add: _nary(lambda a, b: a + b),
    sp.Mul: _nary(lambda a, b: a * b),
    sp.floor: ca.floor,
    sp.ceiling: ca.ceil,
}


class Converter:
    """Converts sympy expressions given a map ``symbol -> CasADi expression``.

    ``neural`` maps a sympy function name to a callable ``(k, inputs: list) -> CasADi``
    (output k of that network) and, for derivatives, ``jacobian(k, inputs) -> row``.
    """

    def __init__(self, symbols: Mapping[sp.Symbol, object], neural: Mapping[str, object] | None = None):
        self.symbols = dict(symbols)
        self.neural = dict(neural or {})
        self._memo: dict[sp.Basic, object] = {}

    def __call__(self, expr):
        if isinstance(expr, sp.MatrixBase):
            n, m = expr.shape
            if n == 0 or m == 0:
                return ca.DM(n, m)
            rows = [ca.horzcat(*[self._conv(expr[i, j]) for j in range(m)]) for i in range(n)]
            return ca.vertcat(*rows)
        return self._conv(S.as_expr(expr))

    def _conv(self, e: sp.Basic):
        hit = self._memo.get(e)
        if hit is not None:
            return hit
        out = self._node(e)
        self._memo[e] = out
        return out

    def _node(self, e: sp.Basic):
        if e.is_Symbol:
            try:
                return self.symbols[e]
            except KeyError:
                raise InternalError(f"no numeric value is bound to `{e}`") from None
        if e.is_Number or isinstance(e, sp.NumberSymbol):
            return float(e)
        if e.is_Pow:
            base, ex = e.args
            return _pow(self._conv(base), ex, self._conv(ex) if not ex.is_number else None)
        if isinstance(e, sp.Piecewise):
            return self._piecewise(e)
        if isinstance(e, sp.Heaviside):
            return ca.if_else(self._conv(e.args[0]) > 0, 1.0, ca.if_else(self._conv(e.args[0]) < 0, 0.0, 0.5))
        if isinstance(e, sp.core.relational.Relational):
            return self._relational(e)
        if isinstance(e, sp.Derivative):
            return self._derivative(e)
        if isinstance(e, sp.Subs):
            return self._subs(e)
        if isinstance(e, sp.core.function.AppliedUndef):
            return self._neural(e)
        fn = _FUNCS.get(e.func)
        if fn is None:
            raise InternalError(f"no CasADi translation for sympy node `{e.func.__name__}`")
        return fn(*[self._conv(a) for a in e.args])

    def _relational(self, e):
        a, b = self._conv(e.lhs), self._conv(e.rhs)
        return {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b, "==": a == b, "!=": a != b}[e.rel_op]

    def _piecewise(self, e: sp.Piecewise):
        out = None
        for value, cond in reversed(e.args):
            v = self._conv(value)
            if cond == sp.true:
                out = v
            else:
                c = self._conv(cond) if not isinstance(cond, sp.logic.boolalg.BooleanFunction) else self._boolean(cond)
                out = ca.if_else(c, v, out if out is not None else float("nan"))
        return out

    def _boolean(self, cond):
        args = [self._conv(a) if not isinstance(a, sp.logic.boolalg.BooleanFunction) else self._boolean(a) for a in cond.args]
        if isinstance(cond, sp.And):
            return _nary(ca.logic_and)(*args)
        if isinstance(cond, sp.Or):
            return _nary(ca.logic_or)(*args)
        if isinstance(cond, sp.Not):
            return ca.logic_not(args[0])
        raise InternalError(f"no CasADi translation for `{cond.func.__name__}`")

    # -- neural components: fn(k, *inputs) and their derivatives
    def _net(self, e):
        name = e.func.__name__
        net = self.neural.get(name)
        if net is None:
            raise InternalError(f"neural component `{name}` has no numeric implementation bound")
        return net

    def _neural(self, e):
        net = self._net(e)
        k = int(e.args[0])
        return net.output(k, [self._conv(a) for a in e.args[1:]])

    def _derivative(self, e: sp.Derivative):
        f, k, idx = network_derivative(e)
        net = self._net(f)
        ins = [self._conv(a) for a in f.args[1:]]
        return sum(net.gradient(k, ins, i) for i in idx)

    def _subs(self, e: sp.Subs):
        inner, old, new = e.args
        mapping = dict(zip(old, new))
        conv = Converter({**self.symbols, **{o: self._conv(n) for o, n in mapping.items()}}, self.neural)
        return conv(inner)
