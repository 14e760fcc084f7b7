"""The grammar file and the post-lexer that goes with it: what the parser (:mod:`pdsl.parse.parser`) and the
table generator (:mod:`pdsl.parse.tables`) both need, so that neither imports the other."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from lark import Token

__all__ = ["LineJoiner", "grammar_path"]


def grammar_path() -> Path:
    """Where ``phm.lark`` lives: inside an installed wheel (``pdsl/grammars``), or ``grammars/`` of a checkout.
    The package directory is looked at first (``importlib.resources`` imports ``zipfile`` for its readers: ~2 ms
    of every start), the resources API only for a package that is not a directory (a zip import)."""
    here = Path(__file__).resolve().parents[1]
    for candidate in (here / "grammars" / "phm.lark", here.parent / "grammars" / "phm.lark"):
        if candidate.is_file():
            return candidate
    packaged = resources.files("pdsl").joinpath("grammars", "phm.lark")
    if packaged.is_file():
        return Path(str(packaged))
    raise RuntimeError("pdsl installation is broken: grammars/phm.lark not found")


class LineJoiner:
    """Post-lexer: drops newlines inside brackets, collapses blank lines, ends with one."""

    always_accept = ("_NL",)
    _OPEN = {"LPAR", "LSQB", "LBRACE"}
    _CLOSE = {"RPAR", "RSQB", "RBRACE"}

    def process(self, stream):
        depth = 0
        last = None
        for tok in stream:
            if tok.type == "_NL":
                if depth > 0 or last is None or last.type == "_NL":
                    continue
            elif tok.type in self._OPEN:
                depth += 1
            elif tok.type in self._CLOSE:
                depth = max(depth - 1, 0)
            last = tok
            yield tok
        if last is not None and last.type != "_NL":
            yield Token.new_borrow_pos("_NL", "\n", last)
