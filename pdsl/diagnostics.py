"""Source spans, diagnostics and the one exception type users ever see.

Every stage reports problems as :class:`Diagnostic` records that carry the
:class:`Span` of the model text that caused them. Stages collect what they
find and raise a single :class:`PdslError` holding all of it (sorted), so a
user fixes five unknown names in one edit, not five.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from .bounded_read import MAX_TEXT_BYTES, decode_text, head, read_at_most

__all__ = [
    "Span",
    "Diagnostic",
    "PdslError",
    "InternalError",
    "Collector",
    "register_source",
    "source_text",
    "render",
]

_SOURCES: dict[str, str] = {}


def register_source(path: str, text: str) -> None:
    """Remember the text of ``path`` so diagnostics can quote its lines."""
    _SOURCES[path] = text


def source_text(path: str) -> str | None:
    if path in _SOURCES:
        return _SOURCES[path]
    try:  # bounded: an excerpt never reads a huge file or a device to its end
        raw, size, _ = read_at_most(path, MAX_TEXT_BYTES)
    except OSError:
        return None
    if size is None or size > MAX_TEXT_BYTES:  # as pdsl.limits.read_text refuses it, keeping its first line
        register_source(path, head(raw))
        return None
    try:
        return decode_text(raw)
    except UnicodeDecodeError:
        return None


@dataclass(frozen=True, slots=True, order=True)
class Span:
    """A region of a source file: 1-based line and column, end inclusive-exclusive."""

    path: str
    line: int
    col: int
    end_line: int
    end_col: int
    # the chain of `use` lines that brought this statement into the model, innermost first:
    # (instance name, path, line) — empty for a statement of the model itself
    via: tuple = ()

    @staticmethod
    def point(path: str, line: int, col: int, width: int = 1) -> "Span":
        return Span(path, line, col, line, col + width)

    def __str__(self) -> str:
        return f"{self.path}:{self.line}:{self.col}"

    @property
    def chain(self) -> str:
        """`` (via upper, two_links.phm:6)``: the instance chain, or the empty string."""
        if not self.via:
            return ""
        return " (via " + ", ".join(f"{name}, {Path(path).name}:{line}" for name, path, line in self.via) + ")"


@dataclass(frozen=True, slots=True)
class Diagnostic:
    code: str
    message: str
    span: Span | None = None
    hint: str | None = None
    severity: str = "error"

    def sort_key(self) -> tuple:
        s = self.span
        return (0, s.path, s.line, s.col, self.code) if s else (1, "", 0, 0, self.code)


class PdslError(Exception):
    """A user-facing error: one or more located diagnostics."""

    def __init__(self, diagnostics: "Diagnostic | list[Diagnostic] | tuple[Diagnostic, ...]"):
        if isinstance(diagnostics, Diagnostic):
            diagnostics = [diagnostics]
        self.diagnostics: tuple[Diagnostic, ...] = tuple(sorted(diagnostics, key=Diagnostic.sort_key))
        super().__init__(render(self.diagnostics, color=False))

    @classmethod
    def at(cls, code: str, message: str, span: Span | None = None, hint: str | None = None) -> "PdslError":
        return cls(Diagnostic(code, message, span, hint))

    @property
    def codes(self) -> list[str]:
        return [d.code for d in self.diagnostics]


class InternalError(RuntimeError):
    """A broken invariant inside pdsl: a bug, never the user's model, data or options.

    Deliberately not a :class:`PdslError`: the CLI reports it as ``internal error: ...`` with
    exit code 1 (``--debug`` shows the traceback), never as a located user error with exit 2.
    """


@dataclass(slots=True)
class Collector:
    """Gathers diagnostics during a stage; ``raise_if_any`` ends the stage."""

    items: list[Diagnostic] = field(default_factory=list)
    _seen: set = field(default_factory=set, repr=False, compare=False)  # dedup in O(1), not a list scan

    def _add(self, d: Diagnostic) -> None:
        if d not in self._seen:
            self._seen.add(d)
            self.items.append(d)

    def error(self, code: str, message: str, span: Span | None = None, hint: str | None = None) -> None:
        self._add(Diagnostic(code, message, span, hint))

    def extend(self, err: PdslError) -> None:
        for d in err.diagnostics:
            self._add(d)

    def raise_if_any(self) -> None:
        if self.items:
            raise PdslError(self.items)

    def __bool__(self) -> bool:
        return bool(self.items)


_EXCERPT_CHARS = 200  # at most this much of a source line is quoted
_LINES: dict[tuple[str, int], list[str]] = {}  # (path, hash of its text) -> lines: one split per file, not per error


def _source_lines(path: str) -> list[str] | None:
    text = source_text(path)
    if text is None:
        return None
    key = (path, hash(text))
    if key not in _LINES:
        if len(_LINES) > 64:
            _LINES.clear()
        _LINES[key] = text.splitlines()
    return _LINES[key]


def _excerpt(span: Span) -> list[str]:
    lines = _source_lines(span.path)
    if lines is None:
        return []
    if not 1 <= span.line <= len(lines):
        return []
    line = lines[span.line - 1].replace("\t", " ")
    start = max(span.col, 1)
    if span.end_line == span.line and span.end_col > span.col:
        width = span.end_col - span.col
    else:
        width = max(len(line) - start + 1, 1)
    if len(line) > _EXCERPT_CHARS:  # a huge line (a data file's 100k-character cell): a window at the caret
        lo = max(0, min(start - 1 - 20, len(line) - _EXCERPT_CHARS))
        head = "…" if lo > 0 else ""
        line = head + line[lo: lo + _EXCERPT_CHARS] + ("…" if lo + _EXCERPT_CHARS < len(line) else "")
        start = start - lo + len(head)
        width = max(1, min(width, _EXCERPT_CHARS - (start - 1 - len(head))))
    gutter = f"{span.line:>4} | "
    return [gutter + line, " " * (len(gutter) + start - 1) + "^" * width]


def render(diagnostics, color: bool = False) -> str:
    """``path:line:col: error[Code]: message``, the source line, a caret, a hint."""
    out: list[str] = []
    for d in diagnostics:
        where = f"{d.span}: " if d.span else ""
        head = f"{d.severity}[{d.code}]"
        if d.span is not None and d.span.via:
            head += d.span.chain
        if color:
            tint = {"error": "31", "warning": "33"}.get(d.severity, "36")
            head = f"\x1b[1;{tint}m{head}\x1b[0m"
        out.append(f"{where}{head}: {d.message}")
        if d.span:
            out.extend(_excerpt(d.span))
        if d.hint:
            out.append(f"  = hint: {d.hint}")
    n = sum(1 for d in diagnostics if d.severity == "error")
    if n > 1:
        out.append(f"{n} errors")
    return "\n".join(out)
