"""Syntax errors: turn lark's "unexpected token" into the most specific diagnostic the text allows.

Each ``_explain`` function looks at the text around the place where the parser
stopped and either recognises a common mistake (an unclosed bracket, a missing
``end``, ``x ** 2``, ``1.2.3``, a misspelled keyword) or passes.
"""

from __future__ import annotations

import difflib
import re
from typing import Iterator

from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken

from ..diagnostics import PdslError, Span

__all__ = ["syntax_error", "STATEMENT_KEYWORDS"]

# Friendly names for terminals in "expected ..." messages.
_TERMINAL_NAMES = {
    "_NL": "end of line",
    "$END": "end of file",
    "NAME": "a name",
    "NUMBER": "a number",
    "STRING": "a string",
    "LPAR": "`(`",
    "RPAR": "`)`",
    "LSQB": "`[`",
    "RSQB": "`]`",
    "LBRACE": "`{`",
    "RBRACE": "`}`",
    "COMMA": "`,`",
    "EQUAL": "`=`",
    "COLON": "`:`",
    "DOT": "`.`",
    "_DOTDOT": "`..`",
    "PLUS": "`+`",
    "MINUS": "`-`",
    "STAR": "`*`",
    "SLASH": "`/`",
    "CIRCUMFLEX": "`^`",
    "CONNECTOR": "a connector (link, joint, ...)",
    "DRAW_POINT": "`draw point`",
    "DRAW_LINE": "`draw line`",
}
_EXPRESSION_START = {"NAME", "NUMBER", "LPAR", "LSQB", "MINUS", "PLUS"}
_OPERATORS = {"PLUS", "MINUS", "STAR", "SLASH", "CIRCUMFLEX"}

# The words that begin a statement (for "did you mean" on a misspelled one).
STATEMENT_KEYWORDS = (
    "const", "param", "input", "output", "var", "coord", "momentum", "space", "nn", "body",
    "link", "joint", "hinge", "slider", "spring", "damper", "gravity", "potential", "force", "lagrangian",
    "hamiltonian", "constraint", "distribution", "group", "flow_store", "effort_store", "resistive",
    "flow_source", "effort_source", "transformer", "gyrator", "junction", "structure", "port", "use",
    "connect", "import", "when", "draw", "end",
)


def _describe_expected(expected) -> str:
    """A short, readable list of what the parser would have accepted."""
    expected = set(expected)
    names = []
    if _EXPRESSION_START <= expected:
        names.append("an expression")
        expected -= _EXPRESSION_START
    if len(expected & _OPERATORS) >= 3:
        names.append("an operator")
        expected -= _OPERATORS
    for term in sorted(expected):
        if term in _TERMINAL_NAMES:
            names.append(_TERMINAL_NAMES[term])
        elif term.isupper() and term.replace("_", "").isalpha():
            names.append(f"`{term.lower()}`")
    names = list(dict.fromkeys(names))
    if len(names) > 8:
        names = names[:8] + ["..."]
    return ", ".join(names) or "something else"


def syntax_error(err: UnexpectedInput, path: str, text: str) -> PdslError:
    """Translate a lark error into the most specific diagnostic the text allows."""
    where = _error_position(err, text)
    for explain in (_bracket_problem, _unclosed_model, _action_outside_when, _foreign_operator, _comparison_as_equation,
                    _bad_number, _bad_draw, _unknown_statement, _element_range):
        found = explain(text, where, path)
        if found is not None:
            return found
    if isinstance(err, UnexpectedCharacters):
        return _bad_character(err, path, text)
    if isinstance(err, UnexpectedEOF) or err.token.type == "$END":
        return _unexpected_end(text, where, path)
    return _unexpected_token(err, path, text)


def _error_position(err: UnexpectedInput, text: str) -> tuple[int, int]:
    """(line, col) where lark gave up: the end of the text for an unexpected end of file,
    column 0 of the next line for an unexpected end of line."""
    if isinstance(err, UnexpectedEOF) or (isinstance(err, UnexpectedToken) and err.token.type == "$END"):
        return _end_of(text)
    if isinstance(err, UnexpectedToken) and err.token.type == "_NL":
        return err.token.line + 1, 0
    return err.line, err.column


def _end_of(text: str) -> tuple[int, int]:
    """(line, col) just past the last character of the last line."""
    lines = text.splitlines() or [""]
    return len(lines), len(lines[-1]) + 1


def _bad_character(err: UnexpectedCharacters, path: str, text: str) -> PdslError:
    ch = text[err.pos_in_stream] if err.pos_in_stream < len(text) else "?"
    hint = None
    if ch in "'\"":
        hint = "strings are only allowed as model descriptions and import paths, in double quotes"
    elif ch in "!&|<>;$@`\\%~?":
        hint = "a .phm model is not a program: only arithmetic, names and the built-in functions are allowed"
    elif ch.isalpha():
        hint = "names use the letters a-z and A-Z, digits and `_` (write `theta`, not `θ`)"
    return PdslError.at("BadCharacter", f"the character {ch!r} has no meaning in a model", Span.point(path, err.line, err.column), hint)


def _unexpected_end(text: str, where: tuple[int, int], path: str) -> PdslError:
    opened = _last_model_header(text)
    what = f"model `{opened[0]}` (line {opened[1]})" if opened else "the model"
    return PdslError.at(
        "UnexpectedEnd",
        f"the file ends before {what} is closed",
        Span.point(path, *where),
        "every `model Name` block must be closed by a line `end`",
    )


def _last_model_header(text: str) -> tuple[str, int] | None:
    found = None
    for number, line in enumerate(text.splitlines(), start=1):
        m = re.match(r"\s*model\s+([A-Za-z_][A-Za-z0-9_]*)", line)
        if m:
            found = (m.group(1), number)
    return found


def _unexpected_token(err: UnexpectedToken, path: str, text: str) -> PdslError:
    tok = err.token
    line, col = tok.line, tok.column
    if tok.type == "_NL":
        shown, width = "end of line", 1
        lines = text.splitlines()
        if 1 <= line <= len(lines):  # point just past the end of the offending line
            col = len(lines[line - 1]) + 1
    else:
        shown, width = f"`{tok.value}`", max(len(str(tok.value)), 1)
    hint = f"expected {_describe_expected(err.accepts or err.expected)}"
    if tok.type == "STRING":
        hint = "strings are only allowed as model descriptions and import paths"
    return PdslError.at("Syntax", f"unexpected {shown}", Span.point(path, line, col, width), hint)


# ---------------------------------------------------------------- specific explanations
_PAIRS = {"(": ")", "[": "]", "{": "}"}


def _bracket_problem(text: str, where: tuple[int, int], path: str) -> PdslError | None:
    """An unmatched closing bracket, or an opening one never closed, before the error."""
    stack: list[tuple[str, int, int]] = []
    for ch, line, col in _brackets(text):
        if (line, col) > where:
            break
        if ch in _PAIRS:
            stack.append((ch, line, col))
        elif stack and _PAIRS[stack[-1][0]] == ch:
            stack.pop()
        else:
            return _mismatched(ch, line, col, stack, path)
    if stack and (stack[-1][1] < where[0] or where >= _end_of(text)):
        ch, line, col = stack[-1]
        return PdslError.at(
            "UnbalancedBracket",
            f"this `{ch}` is never closed",
            Span.point(path, line, col),
            f"add the missing `{_PAIRS[ch]}`; a line that ends inside brackets continues on the next one",
        )
    return None


def _mismatched(ch: str, line: int, col: int, stack, path: str) -> PdslError:
    if not stack:
        return PdslError.at("UnbalancedBracket", f"this `{ch}` closes nothing", Span.point(path, line, col), "remove it, or add the opening bracket")
    opener, oline, ocol = stack[-1]
    return PdslError.at(
        "UnbalancedBracket",
        f"this `{ch}` does not match the `{opener}` opened at line {oline}, column {ocol}",
        Span.point(path, line, col),
        f"close `{opener}` with `{_PAIRS[opener]}`",
    )


def _brackets(text: str) -> Iterator[tuple[str, int, int]]:
    """Every bracket outside comments and strings, with its 1-based line and column."""
    for number, line in enumerate(text.splitlines(), start=1):
        for m in re.finditer(r'"[^"\n]*"|#.*|[()\[\]{}]', line):
            if m.group()[0] in "([{}])":
                yield m.group(), number, m.start() + 1


_WORD = re.compile(r"[A-Za-z0-9_.]+")
_NUMBER = re.compile(r"(\d+\.\d+|\d+\.|\.\d+|\d+)([eE][+-]?\d+)?")


def _unclosed_model(text: str, where: tuple[int, int], path: str) -> PdslError | None:
    """A ``model`` header met inside a model: the previous one lacks its ``end``."""
    lines = text.splitlines()
    if not 1 <= where[0] <= len(lines) or not re.match(r"\s*model\b", lines[where[0] - 1]):
        return None
    opened = _last_model_header("\n".join(lines[: where[0] - 1]))
    if opened is None:
        return None
    return PdslError.at(
        "MissingEnd",
        f"model `{opened[0]}` (line {opened[1]}) is not closed before the next model begins",
        Span.point(path, where[0], 1 + len(lines[where[0] - 1]) - len(lines[where[0] - 1].lstrip()), 5),
        "add a line `end` after the last statement of the model",
    )


# Operators of programming languages, and how a model writes them instead.
_FOREIGN_OPERATORS = {
    "**": "write a power as `a^b`",
    "//": "write a division as `a / b`",
    "+=": "a model states equations, it does not update variables",
    "-=": "a model states equations, it does not update variables",
}


def _foreign_operator(text: str, where: tuple[int, int], path: str) -> PdslError | None:
    """``x ** 2``, ``a == b``: operators of other languages, found where the parser stopped."""
    lines = text.splitlines()
    if not 1 <= where[0] <= len(lines):
        return None
    line = lines[where[0] - 1]
    for start in (where[1] - 2, where[1] - 1):
        pair = line[start : start + 2] if start >= 0 else ""
        if pair in _FOREIGN_OPERATORS:
            return PdslError.at(
                "Syntax", f"`{pair}` is not an operator of the model language", Span.point(path, where[0], start + 1, 2),
                _FOREIGN_OPERATORS[pair],
            )
    return None


_ACTION = re.compile(r"(\s*)(reinit|terminate)\b")


def _action_outside_when(text: str, where: tuple[int, int], path: str) -> PdslError | None:
    """``reinit(v, 0)`` or ``terminate`` on a line of its own: an action of an event, written without its ``when``."""
    lines = text.splitlines()
    number = where[0] - 1 if where[1] == 0 else where[0]  # an unexpected end of line: the line before
    if not 1 <= number <= len(lines):
        return None
    m = _ACTION.match(lines[number - 1])
    if not m:
        return None
    word = m.group(2)
    example = "reinit(v, -e*v)" if word == "reinit" else "terminate"
    return PdslError.at(
        "Syntax", f"`{word}` is an action of an event: it belongs after `when CONDITION then`",
        Span.point(path, number, m.start(2) + 1, len(word)),
        f"write `when h < 0 then {example}` (the actions run at the instant the condition becomes true)",
    )


def _comparison_as_equation(text: str, where: tuple[int, int], path: str) -> PdslError | None:
    """``der(x) == -x``: a comparison (which `if` conditions use) where an equation was meant."""
    lines = text.splitlines()
    number = where[0] - 1 if where[1] == 0 else where[0]  # an unexpected end of line: the line before
    if not 1 <= number <= len(lines):
        return None
    line = lines[number - 1].split("#", 1)[0]
    if "==" not in line or re.search(r"(?<![=<>!])=(?!=)", line) or line.lstrip().startswith(("if ", "output ", "input ")):
        return None
    col = line.index("==") + 1
    return PdslError.at("Syntax", "`==` compares two values; this statement has no `=`", Span.point(path, number, col, 2),
                        "an equation is written with a single `=` (`==` is a comparison, as in `if x == 0 then ...`)")


def _bad_number(text: str, where: tuple[int, int], path: str) -> PdslError | None:
    """``1.2.3``, ``1e``, ``2x``: a word that starts like a number but is not one."""
    lines = text.splitlines()
    if not 1 <= where[0] <= len(lines):
        return None
    line = lines[where[0] - 1]
    for m in _WORD.finditer(line):
        word = m.group()
        if not m.start() < where[1] <= m.end() or ".." in word:
            continue
        if (word[0].isdigit() or (word[0] == "." and word[1:2].isdigit())) and not _NUMBER.fullmatch(word):
            hint = "numbers look like 2, 0.5, 1e-3"
            if re.fullmatch(r"\d+(\.\d*)?[A-Za-z_]\w*", word) and not re.fullmatch(r"\d+(\.\d*)?[eE]", word):
                hint += f"; write a product with `*` ({_split_product(word)})"
            return PdslError.at("BadNumber", f"`{word}` is not a number", Span.point(path, where[0], m.start() + 1, len(word)), hint)
    return None


def _split_product(word: str) -> str:
    m = re.match(r"[\d.]+", word)
    return f"{m.group()}*{word[m.end():]}"


def _unknown_statement(text: str, where: tuple[int, int], path: str) -> PdslError | None:
    """``parm k = 1``: a line whose first word is a name directly followed by another name."""
    lines = text.splitlines()
    if not 1 <= where[0] <= len(lines):
        return None
    m = re.match(r"(\s*)([A-Za-z_]\w*)[ \t]+([A-Za-z_]\w*)", lines[where[0] - 1])
    if not m or m.start(3) + 1 != where[1] or m.group(2) in STATEMENT_KEYWORDS + ("model",):
        return None
    word = m.group(2)
    close = difflib.get_close_matches(word, STATEMENT_KEYWORDS, n=1)
    hint = f"did you mean `{close[0]}`?" if close else "a statement starts with a keyword (param, var, body, link, ...) or is an equation `lhs = rhs`"
    return PdslError.at("UnknownStatement", f"`{word}` does not start a statement", Span.point(path, where[0], m.start(2) + 1, len(word)), hint)


_DRAW = re.compile(r"(\s*)draw[ \t]+([A-Za-z_]\w*)")


def _bad_draw(text: str, where: tuple[int, int], path: str) -> PdslError | None:
    """``draw circle c``: a `draw` statement is `draw point NAME = [x, y]` or `draw line A, B`."""
    lines = text.splitlines()
    if not 1 <= where[0] <= len(lines):
        return None
    m = _DRAW.match(lines[where[0] - 1])
    if not m or m.group(2) in ("point", "line") or m.start(2) + 1 != where[1]:
        return None
    word = m.group(2)
    return PdslError.at("Syntax", f"`draw` is followed by `point` or `line`, not `{word}`",
                        Span.point(path, where[0], m.start(2) + 1, len(word)),
                        "draw point NAME = [x, y] (or [x, y, z]), draw line A, B (drawn points, body points, ground)")


_ELEMENT_RANGE = re.compile(
    r"\s*(?:flow_store|effort_store|resistive|flow_source|effort_source|transformer|gyrator|junction)\s+"
    r"([A-Za-z_]\w*)\s*\[([^\]\n]*)\.\.([^\]\n]*)\]"
)


def _element_range(text: str, where: tuple[int, int], path: str) -> PdslError | None:
    """``flow_store cap[1..N](q) ...``: an array of p-H elements is declared with an index and a ``for`` clause."""
    lines = text.splitlines()
    if not 1 <= where[0] <= len(lines):
        return None
    m = _ELEMENT_RANGE.match(lines[where[0] - 1])
    if not m or not m.start(2) < where[1] <= m.end():
        return None
    name, lo, hi = m.group(1), m.group(2).strip(), m.group(3).strip()
    return PdslError.at(
        "Syntax", f"an element name takes one index, not a range `{lo}..{hi}`",
        Span.point(path, where[0], m.start(2) + 1, m.end(3) - m.start(2)),
        f"declare the array with a loop: `{name}[i] ... for i in {lo}..{hi}` (and index its state: `q[i]`)",
    )
