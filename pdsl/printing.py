"""sympy -> text in the model language's own spelling, where it differs from sympy's.

``Piecewise((a, c), (b, True))`` prints as ``if c then a else b``; comparisons as ``==``/``!=``
(not ``Eq(...)``/``Ne(...)``); ``&``/``|``/``~`` as ``and``/``or``/``not``. Everything else is
sympy's ``sstr``, unchanged (the ``show`` of a model without conditionals does not change).
"""

from __future__ import annotations

import sympy as sp
from sympy.printing.precedence import PRECEDENCE
from sympy.printing.str import StrPrinter

__all__ = ["to_text"]


class _PdslPrinter(StrPrinter):
    def _print_Piecewise(self, e):
        *pairs, (last, last_cond) = e.args
        tail = self._print(last) if last_cond == sp.true else f"if {self._print(last_cond)} then {self._print(last)} else nan"
        for value, cond in reversed(pairs):
            tail = f"if {self._print(cond)} then {self._print(value)} else {tail}"
        return f"({tail})"

    def _print_Relational(self, e):
        op = {"==": "==", "!=": "!="}.get(e.rel_op, e.rel_op)
        prec = PRECEDENCE["Relational"]
        return f"{self.parenthesize(e.lhs, prec)} {op} {self.parenthesize(e.rhs, prec)}"

    def _bool(self, e, word):
        parts = [self._print(a) for a in e.args]
        parts = [f"({p})" if isinstance(a, (sp.And, sp.Or)) else p for p, a in zip(parts, e.args)]
        return f" {word} ".join(parts)

    def _print_And(self, e):
        return self._bool(e, "and")

    def _print_Or(self, e):
        return self._bool(e, "or")

    def _print_Not(self, e):
        a = e.args[0]
        inner = self._print(a)
        return f"not ({inner})" if isinstance(a, (sp.And, sp.Or, sp.core.relational.Relational)) else f"not {inner}"

    def _print_BooleanTrue(self, e):
        return "true"

    def _print_BooleanFalse(self, e):
        return "false"


_PRINTER = _PdslPrinter()


def to_text(e) -> str:
    """``e`` as text (sympy's ``sstr`` with the model language's conditionals)."""
    return _PRINTER.doprint(e)
