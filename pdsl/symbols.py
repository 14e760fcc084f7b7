"""The one place sympy symbols are made, so every stage agrees on them.

All model quantities are real. A derivative unknown (the ``der(x)`` of a plain
equation, the rate of a coordinate, the acceleration ``der(der(q))``) is a
symbol whose *name* is that spelling; a :class:`DerSymbol` knows the symbol it
differentiates.
"""

from __future__ import annotations

import sympy as sp

TIME = sp.Symbol("t", real=True)


def as_expr(value) -> sp.Basic:
    """A sympy expression from an internal value: sympy objects pass through, Python/numpy numbers become
    sympy numbers. Never parses text (``sympify`` would evaluate a string): a string is an internal error."""
    if isinstance(value, sp.Basic):
        return value
    if isinstance(value, bool):
        return sp.true if value else sp.false
    if isinstance(value, int) or (hasattr(value, "dtype") and getattr(value.dtype, "kind", "") in "iu"):
        return sp.Integer(int(value))
    if isinstance(value, float) or (hasattr(value, "dtype") and getattr(value.dtype, "kind", "") == "f"):
        return sp.Float(float(value))
    raise TypeError(f"not an expression: {type(value).__name__}")


_SYMBOLS: dict[str, sp.Symbol] = {}


def sym(name: str) -> sp.Symbol:
    """The real symbol called ``name``, made once per process: sympy's own symbol cache is a bounded LRU, so a
    model with thousands of names would rebuild each symbol's assumptions on every use (superlinear resolve)."""
    found = _SYMBOLS.get(name)
    if found is None:
        found = _SYMBOLS[name] = sp.Symbol(name, real=True)
    return found


def der_name(name: str) -> str:
    return f"der({name})"


def der(symbol: sp.Symbol) -> sp.Symbol:
    """The symbol standing for the time derivative of ``symbol``."""
    return sym(der_name(symbol.name))


def is_der(symbol: sp.Basic) -> bool:
    return isinstance(symbol, sp.Symbol) and symbol.name.startswith("der(") and symbol.name.endswith(")")


def der_base(symbol: sp.Symbol) -> sp.Symbol:
    assert is_der(symbol)
    return sym(symbol.name[4:-1])


def multiplier(i: int) -> sp.Symbol:
    return sym(f"lambda[{i}]")
