"""Bounds on what pdsl reads from users: file sizes, integer literals of JSON and TOML.

Every input file is read through :func:`read_bytes` / :func:`read_text`, which never read more than
the limit plus one byte — a device such as ``/dev/zero`` or ``/dev/urandom``, a pipe or a huge file
is refused with a located ``FileTooLarge`` error, not read until memory runs out. Integers of JSON
and TOML with more digits than Python converts (``sys.get_int_max_str_digits``, 4300) are a located
error of the file's own code (``BadParams``, ``BadConfig``) instead of a ``ValueError`` from deep
inside the decoder.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from .bounded_read import MAX_DATA_BYTES, MAX_INT_DIGITS, MAX_TEXT_BYTES, decode_text, head, read_at_most, size_text
from .diagnostics import PdslError, Span, register_source

__all__ = ["MAX_TEXT_BYTES", "MAX_DATA_BYTES", "MAX_INT_DIGITS", "read_bytes", "read_text", "json_loads",
           "toml_loads", "long_integer_error", "size_text"]


def read_bytes(path: str | Path, limit: int = MAX_TEXT_BYTES, *, what: str = "file", hint: str | None = None) -> bytes:
    """The bytes of ``path``, at most ``limit`` of them (``limit + 1`` are read to tell).

    A longer file, or a device or pipe that gives more, is a ``FileTooLarge`` error at 1:1. ``OSError``
    (no such file, a directory, no permission) goes to the caller, which knows what the file was for."""
    p = Path(path)
    raw, size, regular = read_at_most(p, limit)
    if size is None or size > limit:
        register_source(str(p), head(raw))
        how = f"is {size_text(size)}" if size is not None else (
            f"gives more than {size_text(limit)}" if not regular else f"is larger than {size_text(limit)}")
        kind = "" if regular or size is not None else " (not a regular file)"
        raise PdslError.at("FileTooLarge", f"{p}{kind} {how}: a {what} is at most {size_text(limit)}",
                           Span.point(str(p), 1, 1), hint)
    return raw


def read_text(path: str | Path, limit: int = MAX_TEXT_BYTES, *, what: str = "file", hint: str | None = None) -> str:
    """:func:`read_bytes` decoded as UTF-8 with universal newlines, as ``Path.read_text`` reads
    (``UnicodeDecodeError`` goes to the caller)."""
    return decode_text(read_bytes(path, limit, what=what, hint=hint))


# ---------------------------------------------------------------- integers of JSON and TOML
_DIGITS = re.compile(r"[0-9][0-9_]*")


def long_integer_error(path: str, text: str, code: str, hint: str | None = None) -> PdslError:
    """A located error at the first integer literal of ``text`` with more than :data:`MAX_INT_DIGITS` digits."""
    span, digits = Span.point(path, 1, 1), None
    for m in _DIGITS.finditer(text):
        n = len(m.group()) - m.group().count("_")
        if n > MAX_INT_DIGITS:
            pos = m.start()
            line = text.count("\n", 0, pos) + 1
            col = pos - (text.rfind("\n", 0, pos) + 1) + 1
            end = text.find("\n", pos)
            room = (len(text) if end < 0 else end) - pos
            span, digits = Span.point(path, line, col, max(1, min(m.end() - pos, room))), n
            break
    what = f"an integer with {digits} digits" if digits else "an integer"
    return PdslError.at(code, f"{what} is too long to be a number (at most {MAX_INT_DIGITS} digits)", span,
                        hint or "write a number such as 1.5e3; no parameter needs thousands of digits")


class _LongInteger(ValueError):
    pass


def _checked_int(s: str) -> int:
    if len(s) - s.startswith("-") > MAX_INT_DIGITS:
        raise _LongInteger(s)
    return int(s)


def json_loads(text: str, path: str, code: str, hint: str | None = None):
    """``json.loads`` with integers of more than :data:`MAX_INT_DIGITS` digits refused, located.

    ``json.JSONDecodeError`` and ``RecursionError`` go to the caller."""
    try:
        return json.loads(text, parse_int=_checked_int)
    except _LongInteger:
        raise long_integer_error(path, text, code, hint) from None


def toml_loads(text: str, path: str, code: str, hint: str | None = None) -> dict:
    """``tomllib.loads`` with an integer of more than :data:`MAX_INT_DIGITS` digits refused, located
    (tomllib converts it with ``int()``, which raises a plain ``ValueError``). ``TOMLDecodeError`` goes to the caller."""
    import tomllib

    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        raise
    except ValueError as exc:
        if "digits" not in str(exc):
            raise
        raise long_integer_error(path, text, code, hint) from None
    big = _first_int_beyond_64_bits(data)
    if big is not None:  # TOML's integers are 64-bit; tomllib reads 10**400 (and a float() of it overflows later)
        raise PdslError.at(code, f"the integer {_short(big)} is outside the 64-bit range of TOML integers "
                           "(-9223372036854775808 to 9223372036854775807)", _int_span(path, text, big),
                           hint or "write a number such as 1.5e3")
    return data


def _short(n: int) -> str:
    s = str(n)
    return s if len(s) <= 30 else f"{s[:12]}…{s[-6:]} ({len(s.lstrip('-'))} digits)"


def _first_int_beyond_64_bits(data):
    stack = [data]
    while stack:
        x = stack.pop()
        if isinstance(x, dict):
            stack.extend(reversed(list(x.values())))
        elif isinstance(x, list):
            stack.extend(reversed(x))
        elif isinstance(x, int) and not isinstance(x, bool) and not -2**63 <= x < 2**63:
            return x
    return None


def _int_span(path: str, text: str, value: int) -> Span:
    """Where the decimal literal of ``value`` is (underscores allowed), else 1:1."""
    want = str(abs(value))
    for m in _DIGITS.finditer(text):
        if m.group().replace("_", "") == want:
            pos = m.start() - (1 if m.start() > 0 and text[m.start() - 1] in "+-" else 0)
            line = text.count("\n", 0, pos) + 1
            col = pos - (text.rfind("\n", 0, pos) + 1) + 1
            return Span.point(path, line, col, m.end() - pos)
    return Span.point(path, 1, 1)
