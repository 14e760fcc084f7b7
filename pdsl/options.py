"""Command-line values, parsed without any numeric backend (``pdsl check`` imports no casadi).

``NAME=VALUE`` assignments (``--init der(q)=0.5``, ``--const N=3``) and finite decimal numbers
with the grammar of data cells (:func:`pdsl.data.csvio.strict_float`: no ``_`` separators, no
inf/nan), also as an argparse ``type`` so that ``--t-end 1_0`` is refused like a CSV cell.
"""

from __future__ import annotations

import argparse

from .diagnostics import PdslError

__all__ = ["parse_assignment", "parse_float", "finite_float", "integer"]


def parse_assignment(text: str, option: str) -> tuple[str, str]:
    """``NAME=VALUE`` from a command-line option; the name may be ``der(q)``."""
    if "=" not in text:
        raise PdslError.at("BadOption", f"{option} {text!r}: expected NAME=VALUE", hint=f"for example {option} x=0.5")
    name, value = text.split("=", 1)
    name, value = name.strip(), value.strip()
    if not name or not value:
        raise PdslError.at("BadOption", f"{option} {text!r}: expected NAME=VALUE")
    return name, value


def parse_float(text: str, option: str) -> float:
    """A finite decimal number (the grammar of data cells: no ``_`` separators, no inf/nan)."""
    from .data.csvio import shown_value, strict_float

    try:
        return strict_float(text)
    except ValueError as exc:
        raise PdslError.at("BadOption", f"{option}: `{shown_value(text)}` is {exc}",
                           hint="a decimal number such as 0.5, -3 or 1e-3") from None


def finite_float(text: str) -> float:
    """argparse ``type=`` for number options: :func:`parse_float` (argparse names the option)."""
    from .data.csvio import shown_value, strict_float

    try:
        return strict_float(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"`{shown_value(text)}` is {exc}") from None


def integer(text: str) -> int:
    """argparse ``type=`` for counts and seeds: a decimal integer (no ``_`` separators, ASCII digits)."""
    t = text.strip()
    digits = t[1:] if t[:1] in "+-" else t
    if not (digits.isascii() and digits.isdigit()) or len(digits) > 18:
        raise argparse.ArgumentTypeError(f"`{text[:40]}` is not an integer")
    return int(t)
