"""Units as an FMU writes them: Modelica unit strings and FMI 2.0 base units.

A model writes units the way pdsl reads them (``N*m``, ``m/s^2``, ``kg·m²``, ``N m``, ``1/s``; LANGUAGE.md
"Units"). FMI 2.0 tools expect the Modelica form (Modelica Language Specification §19.1): factors joined by ``.``,
integer powers written after the symbol (``m2``, ``s-1``), one ``/`` with a parenthesised denominator when it has
several factors — ``N.m``, ``m/s2``, ``kg.m2``, ``W/(m2.K)`` — with ``Ohm`` for Ω, ``u`` for the micro prefix,
``l`` for the litre and ``rev/min`` for rpm. :func:`modelica_unit` rewrites a unit text so, and gives its
``<BaseUnit>``: the exponents of kg, m, s, A, K, mol, cd and rad and the factor to SI (``mm``: m = 1, factor 0.001;
``rpm``: rad = 1, s = −1, factor 2π/60), with which a tool converts and checks it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from ..resolve.units import tokens

__all__ = ["FmiUnit", "modelica_unit", "BASE_UNITS"]

BASE_UNITS = ("kg", "m", "s", "A", "K", "mol", "cd", "rad")  # the FMI 2.0 <BaseUnit> exponents


@dataclass(frozen=True)
class FmiUnit:
    """A unit in Modelica form with its FMI base-unit exponents (``BASE_UNITS`` order) and factor to SI."""

    name: str
    exponents: tuple[int, ...]
    factor: float


def _e(**kw) -> tuple[int, ...]:
    return tuple(kw.get(b, 0) for b in BASE_UNITS)


# symbol -> (Modelica spelling, exponents, factor to SI); prefixed forms are derived below
_SYMBOLS: dict[str, tuple[str, tuple[int, ...], float]] = {
    "m": ("m", _e(m=1), 1.0), "g": ("g", _e(kg=1), 1e-3), "kg": ("kg", _e(kg=1), 1.0), "s": ("s", _e(s=1), 1.0),
    "A": ("A", _e(A=1), 1.0), "K": ("K", _e(K=1), 1.0), "mol": ("mol", _e(mol=1), 1.0), "cd": ("cd", _e(cd=1), 1.0),
    "rad": ("rad", _e(rad=1), 1.0), "sr": ("sr", _e(rad=2), 1.0), "deg": ("deg", _e(rad=1), math.pi / 180),
    "N": ("N", _e(kg=1, m=1, s=-2), 1.0), "J": ("J", _e(kg=1, m=2, s=-2), 1.0), "W": ("W", _e(kg=1, m=2, s=-3), 1.0),
    "Pa": ("Pa", _e(kg=1, m=-1, s=-2), 1.0), "Hz": ("Hz", _e(s=-1), 1.0), "C": ("C", _e(A=1, s=1), 1.0),
    "V": ("V", _e(kg=1, m=2, s=-3, A=-1), 1.0), "Ohm": ("Ohm", _e(kg=1, m=2, s=-3, A=-2), 1.0),
    "Ω": ("Ohm", _e(kg=1, m=2, s=-3, A=-2), 1.0), "F": ("F", _e(kg=-1, m=-2, s=4, A=2), 1.0),
    "H": ("H", _e(kg=1, m=2, s=-2, A=-2), 1.0), "Wb": ("Wb", _e(kg=1, m=2, s=-2, A=-1), 1.0),
    "T": ("T", _e(kg=1, s=-2, A=-1), 1.0), "S": ("S", _e(kg=-1, m=-2, s=3, A=2), 1.0),
    "min": ("min", _e(s=1), 60.0), "h": ("h", _e(s=1), 3600.0), "L": ("l", _e(m=3), 1e-3),
}
# rpm is written rev/min: two factors (a revolution is 2π rad, a minute 60 s)
_RPM = [("rev", Fraction(1), _e(rad=1), 2 * math.pi), ("min", Fraction(-1), _e(s=1), 60.0)]
_NO_PREFIX = {"kg", "rad", "sr", "deg", "rpm", "min", "h", "Ohm", "Ω", "mol", "cd"}
_PREFIXES = {"p": -12, "n": -9, "u": -6, "µ": -6, "μ": -6, "m": -3, "c": -2, "d": -1, "k": 3, "M": 6, "G": 9}


def _symbol(name: str) -> tuple[str, tuple[int, ...], float] | None:
    if name in _SYMBOLS:
        return _SYMBOLS[name]
    for p in sorted(_PREFIXES, key=len, reverse=True):
        rest = name[len(p):]
        if name.startswith(p) and rest in _SYMBOLS and rest not in _NO_PREFIX:
            spelling, e, f = _SYMBOLS[rest]
            return ("u" if p in "µμ" else p) + spelling, e, f * 10.0 ** _PREFIXES[p]
    return None


def _factors(text: str) -> list[tuple[str, Fraction, tuple[int, ...], float]]:
    """(Modelica symbol, power, exponents, factor) of every factor of the unit, in order, powers signed by `/`."""
    toks = tokens(text, fraction_exponents=True)
    pos = 0

    def product(sign: int) -> list:
        nonlocal pos
        out = factor(sign)
        while pos < len(toks) and toks[pos] in ("*", "·", "/"):
            op = toks[pos]
            pos += 1
            out += factor(-sign if op == "/" else sign)
        return out

    def factor(sign: int) -> list:
        nonlocal pos
        if pos >= len(toks):
            raise ValueError("a unit symbol is missing")
        tok = toks[pos]
        pos += 1
        if tok == "(":
            inner = product(1)
            if pos >= len(toks) or toks[pos] != ")":
                raise ValueError("a `(` is not closed")
            pos += 1
        elif tok == "1":
            inner = []
        elif tok == "rpm":
            inner = list(_RPM)
        else:
            found = _symbol(tok)
            if found is None:
                raise ValueError(f"unknown unit {tok!r}")
            inner = [(found[0], Fraction(1), found[1], found[2])]
        power = Fraction(1)
        if pos < len(toks) and toks[pos] == "^":
            power = Fraction(toks[pos + 1])
            pos += 2
        elif pos < len(toks) and toks[pos].lstrip("-").isdigit() and tok != "1":
            power = Fraction(toks[pos])
            pos += 1
        return [(s, k * power * sign, e, f) for s, k, e, f in inner]

    out = product(1)
    if pos != len(toks):
        raise ValueError(f"unexpected {toks[pos]!r}")
    return out


def modelica_unit(text: str | None) -> FmiUnit | None:
    """``text`` (a unit as a pdsl model writes it) in Modelica form with its base units; None for no unit, or for a
    unit that Modelica cannot spell (a fractional power such as ``Hz^(1/2)``, an unknown symbol)."""
    if text is None or not str(text).strip():
        return None
    try:
        factors = _factors(str(text))
    except (ValueError, ZeroDivisionError, IndexError):
        return None
    powers: dict[str, Fraction] = {}
    exps = [Fraction(0)] * len(BASE_UNITS)
    factor = 1.0
    for sym, k, e, f in factors:
        powers[sym] = powers.get(sym, Fraction(0)) + k
        exps = [a + k * b for a, b in zip(exps, e)]
        factor *= f ** float(k)
    if any(k.denominator != 1 for k in powers.values()) or any(a.denominator != 1 for a in exps):
        return None
    num = [_power(s, k) for s, k in powers.items() if k > 0]
    den = [_power(s, -k) for s, k in powers.items() if k < 0]
    top = ".".join(num) or "1"
    name = top if not den else f"{top}/{den[0]}" if len(den) == 1 else f"{top}/({'.'.join(den)})"
    return FmiUnit(name=name, exponents=tuple(int(a) for a in exps), factor=float(factor))


def _power(symbol: str, k: Fraction) -> str:
    return symbol if k == 1 else f"{symbol}{int(k)}"
