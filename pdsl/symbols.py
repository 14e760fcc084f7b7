"""The one place sympy symbols are made, so every stage agrees on them.

All model quantities are real. A derivative unknown (the ``der(x)`` of a plain
equation, the rate of a coordinate, the acceleration ``der(der(q))``) is a
symbol whose *name* is that spelling; a :class:`DerSymbol` knows the symbol it
differentiates.
"""

from __future__ import annotations

import sympy as sp

TIME = sp.Symbol("t", real=True)


def sym(name: str) -> sp.Symbol:
    return sp.Symbol(name, real=True)


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
