"""Symbolic calculus for the lowerings and the IR: :func:`derivative`, ``sp.diff`` without its assumption queries.

Pure sympy and nothing of pdsl: the lowest layer of :mod:`pdsl.lower`, read by the IR
(:meth:`~pdsl.lower.ir.SymbolicSystem.linear_system`), the structural passes and the formalisms.
"""

from __future__ import annotations

import sympy as sp

__all__ = ["derivative"]


def derivative(e, x):
    """∂e/∂x, as ``sp.diff`` gives it (the same expression), for the sums, products, powers and elementary functions
    that network rows, store energies and Lagrangians are made of, without sympy's assumption queries on every
    intermediate result (``Derivative.__new__`` asks ``is_zero`` of each: ~2 ms a store of a ladder; the double
    pendulum's Euler–Lagrange rows 18 ms → 3 ms); any other node is left to ``sp.diff``."""
    if x not in e.free_symbols:
        return sp.Integer(0)
    if e == x:
        return sp.Integer(1)
    # the rules of Add/Mul/Pow._eval_derivative, in their order of operations (the same expression results)
    if e.is_Add:
        return sp.Add(*[derivative(a, x) for a in e.args])
    if e.is_Mul:
        args = list(e.args)
        terms = []
        for i in range(len(args)):
            d = derivative(args[i], x)
            if d:
                out = sp.Integer(1)
                for f in args[:i] + [d] + args[i + 1 :]:
                    out = out * f
                terms.append(out)
        return sp.Add.fromiter(terms)
    if e.is_Pow and x not in e.exp.free_symbols:
        base, n = e.args
        return e * (sp.Integer(0) + derivative(base, x) * n / base)
    if type(e) in _CHAIN_RULE and len(e.args) == 1:  # Function._eval_derivative: f'(a)·∂a/∂x
        da = derivative(e.args[0], x)
        return sp.Integer(0) if da.is_zero else sp.Add(e.fdiff(1) * da)
    return sp.diff(e, x)


# the elementary functions of one argument whose derivative is sympy's generic chain rule (Function._eval_derivative)
_CHAIN_RULE = frozenset({sp.sin, sp.cos, sp.tan, sp.cot, sp.sec, sp.csc, sp.exp, sp.log, sp.sinh, sp.cosh, sp.tanh,
                         sp.asin, sp.acos, sp.atan, sp.asinh, sp.acosh, sp.atanh})
