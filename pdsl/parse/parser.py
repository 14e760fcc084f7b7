"""Text -> AST. The only module that builds the ``Lark`` object or sees a ``Tree``."""

from __future__ import annotations

import difflib
import functools
import re
from importlib import resources
from pathlib import Path
from typing import Iterator

from lark import Lark, Token, Tree, v_args
from lark.visitors import Transformer_NonRecursive
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken

from ..diagnostics import PdslError, Span, register_source
from . import ast as A

__all__ = ["parse_text", "parse_file", "parse_expression", "grammar_path"]


def grammar_path() -> Path:
    """Where ``phm.lark`` lives: inside an installed wheel, or ``grammars/`` of a checkout."""
    packaged = resources.files("pdsl").joinpath("grammars", "phm.lark")
    if packaged.is_file():
        return Path(str(packaged))
    checkout = Path(__file__).resolve().parents[2] / "grammars" / "phm.lark"
    if checkout.is_file():
        return checkout
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


@functools.cache
def _lark() -> Lark:
    return Lark(
        grammar_path().read_text(encoding="utf-8"),
        parser="lalr",
        lexer="contextual",
        postlex=LineJoiner(),
        propagate_positions=True,
        maybe_placeholders=True,
        start=["start", "expr_only"],
    )


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
}
_EXPRESSION_START = {"NAME", "NUMBER", "LPAR", "LSQB", "MINUS", "PLUS"}
_OPERATORS = {"PLUS", "MINUS", "STAR", "SLASH", "CIRCUMFLEX"}

# The words that begin a statement (for "did you mean" on a misspelled one).
STATEMENT_KEYWORDS = (
    "const", "param", "input", "output", "var", "coord", "momentum", "space", "nn", "body",
    "link", "joint", "hinge", "spring", "damper", "gravity", "potential", "force", "lagrangian",
    "hamiltonian", "constraint", "distribution", "group", "flow_store", "effort_store", "resistive",
    "flow_source", "effort_source", "transformer", "gyrator", "junction", "structure", "port", "use",
    "connect", "import", "end",
)

# Deepest expression nesting accepted (chains such as a + b + c count as one level).
MAX_NESTING = 100
_CHAINS = {"add": "sum", "sub": "sum", "mul": "product", "div": "product"}


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


def _syntax_error(err: UnexpectedInput, path: str, text: str) -> PdslError:
    """Translate a lark error into the most specific diagnostic the text allows."""
    where = _error_position(err, text)
    for explain in (_bracket_problem, _bad_number, _unknown_statement):
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
        lines = text.splitlines() or [""]
        return len(lines), len(lines[-1]) + 1
    if isinstance(err, UnexpectedToken) and err.token.type == "_NL":
        return err.token.line + 1, 0
    return err.line, err.column


def _bad_character(err: UnexpectedCharacters, path: str, text: str) -> PdslError:
    ch = text[err.pos_in_stream] if err.pos_in_stream < len(text) else "?"
    hint = None
    if ch in "'\"":
        hint = "strings are only allowed as model descriptions and import paths, in double quotes"
    elif ch in "!&|<>;$@`\\%~?":
        hint = "a .phm model is not a program: only arithmetic, names and the built-in functions are allowed"
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
    if stack and stack[-1][1] < where[0]:
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


def _check_nesting(tree: Tree, path: str) -> None:
    """Refuse absurdly deep expressions before any recursive pass sees them."""
    stack = [(tree, 0)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_NESTING:
            raise PdslError.at(
                "NestingTooDeep",
                f"this expression is nested too deeply (the limit is about {MAX_NESTING} levels)",
                _span_of(path, node.meta),
                "write it in a flatter form (a long sum or product is fine, deep brackets are not)",
            )
        for k, child in enumerate(node.children):
            if isinstance(child, Tree):
                stack.append((child, depth if k == 0 and _same_chain(node, child) else depth + 1))


def _same_chain(parent: Tree, left: Tree) -> bool:
    """``(a + b) + c``: the left operand of a sum (product) that is itself a sum (product)."""
    kind = _CHAINS.get(parent.data)
    return kind is not None and _CHAINS.get(left.data) == kind


def parse_text(text: str, path: str = "<string>") -> A.File:
    """Parse ``.phm`` source into an :class:`ast.File` (raises :class:`PdslError`)."""
    register_source(path, text)
    try:
        tree = _lark().parse(text, start="start")
    except UnexpectedInput as err:
        raise _syntax_error(err, path, text) from None
    _check_nesting(tree, path)
    return _ToAst(path).transform(tree)


def parse_expression(text: str, origin: str = "<command line>") -> A.Expr:
    """Parse one expression (a command-line value) with the model grammar."""
    register_source(origin, text)
    try:
        tree = _lark().parse(text, start="expr_only")
    except UnexpectedInput as err:
        raise _syntax_error(err, origin, text) from None
    _check_nesting(tree, origin)
    return _ToAst(origin).transform(tree)


def parse_file(path: str | Path) -> A.File:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise PdslError.at("FileNotFound", f"no such file: {p}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise PdslError.at("FileUnreadable", f"cannot read {p}: {exc}") from None
    return parse_text(text, str(p))


def _span_of(path: str, x) -> Span:
    if isinstance(x, Token):
        return Span(path, x.line, x.column, x.end_line or x.line, x.end_column or x.column + len(x))
    return Span(path, x.line, x.column, x.end_line, x.end_column)


def _split_args(items) -> tuple[tuple, tuple]:
    args = tuple(a for a in (items or ()) if not isinstance(a, A.KwArg))
    kwargs = tuple(a for a in (items or ()) if isinstance(a, A.KwArg))
    return args, kwargs


@v_args(meta=True)
class _ToAst(Transformer_NonRecursive):
    """lark Tree -> pdsl AST (every node gets its span)."""

    def __init__(self, path: str):
        super().__init__()
        self.path = path

    def _sp(self, meta) -> Span:
        return _span_of(self.path, meta)

    # -- file / model
    def expr_only(self, meta, items):
        return items[0]

    def start(self, meta, items):
        imports = tuple(i for i in items if isinstance(i, A.ImportStmt))
        models = tuple(i for i in items if isinstance(i, A.ModelDef))
        return A.File(path=self.path, imports=imports, models=models)

    def model(self, meta, items):
        name, *rest = items
        doc = None
        if rest and isinstance(rest[0], Token) and rest[0].type == "STRING":
            doc = rest.pop(0)[1:-1]
        return A.ModelDef(
            span=self._sp(meta), name=str(name), name_span=_span_of(self.path, name), doc=doc, body=tuple(rest)
        )

    def stmt(self, meta, items):
        body, loops = items[0], (items[1] if len(items) > 1 and items[1] is not None else ())
        return _with_loops(body, tuple(loops))

    def for_clause(self, meta, items):
        return tuple(items)

    def loop_var(self, meta, items):
        name, lo, hi = items
        return A.Loop(span=self._sp(meta), var=str(name), lo=lo, hi=hi)

    # -- declarations
    def _decl_stmt(kind):  # noqa: N805 - factory used at class creation
        def rule(self, meta, items):
            return A.DeclStmt(span=self._sp(meta), kind=kind, decls=tuple(items[0]))

        return rule

    const_stmt = _decl_stmt("const")
    param_stmt = _decl_stmt("param")
    input_stmt = _decl_stmt("input")
    output_stmt = _decl_stmt("output")
    var_stmt = _decl_stmt("var")
    coord_stmt = _decl_stmt("coord")
    momentum_stmt = _decl_stmt("momentum")

    def decl_list(self, meta, items):
        return tuple(items)

    def decl(self, meta, items):
        name, rng, value, attrs = items
        return A.Decl(
            span=_span_of(self.path, name),
            name=str(name),
            range=rng,
            value=value,
            attrs=tuple(attrs or ()),
        )

    def range(self, meta, items):
        return A.Range(span=self._sp(meta), lo=items[0], hi=items[1])

    def attrs(self, meta, items):
        return tuple(items)

    def attr(self, meta, items):
        return A.Attribute(span=self._sp(meta), name=str(items[0]), value=items[1])

    def space_stmt(self, meta, items):
        return A.SpaceStmt(span=self._sp(meta), dim=items[0])

    def nn_stmt(self, meta, items):
        name, arch, args = items
        a, k = _split_args(args)
        return A.NNStmt(
            span=self._sp(meta), name=str(name), name_span=_span_of(self.path, name), arch=str(arch), args=a, kwargs=k
        )

    # -- mechanics
    def body_stmt(self, meta, items):
        name, rng, kind, args = items
        a, k = _split_args(args)
        return A.BodyStmt(
            span=self._sp(meta),
            name=str(name),
            name_span=_span_of(self.path, name),
            range=rng,
            kind=str(kind),
            kind_span=_span_of(self.path, kind),
            args=a,
            kwargs=k,
        )

    def connector_stmt(self, meta, items):
        kind, args = items
        a, k = _split_args(args)
        return A.ConnectorStmt(span=self._sp(meta), kind=str(kind), args=a, kwargs=k)

    def gravity_stmt(self, meta, items):
        return A.GravityStmt(span=self._sp(meta), g=items[0], along=items[1])

    def potential_stmt(self, meta, items):
        return A.PotentialStmt(span=self._sp(meta), expr=items[0])

    def force_stmt(self, meta, items):
        return A.ForceStmt(span=self._sp(meta), force=items[0], target=items[1])

    def lagrangian_stmt(self, meta, items):
        return A.LagrangianStmt(span=self._sp(meta), expr=items[0])

    def hamiltonian_stmt(self, meta, items):
        return A.HamiltonianStmt(span=self._sp(meta), expr=items[0])

    def constraint_stmt(self, meta, items):
        return A.ConstraintStmt(span=self._sp(meta), lhs=items[0], rhs=items[1])

    def equation_stmt(self, meta, items):
        return A.EquationStmt(span=self._sp(meta), lhs=items[0], rhs=items[1])

    def distribution_stmt(self, meta, items):
        name, arch, args = items
        a, k = _split_args(args)
        return A.DistributionStmt(span=self._sp(meta), name=str(name), arch=str(arch), args=a, kwargs=k)

    def group_stmt(self, meta, items):
        return A.GroupStmt(span=self._sp(meta), name=str(items[0]), coords=items[1])

    def name_list(self, meta, items):
        return tuple(str(i) for i in items)

    # -- port-Hamiltonian
    def store_stmt(self, meta, items):
        kind, name, state, energy = items
        return A.StoreStmt(span=self._sp(meta), kind=str(kind), name=str(name), state=str(state), energy=energy)

    def resistive_stmt(self, meta, items):
        name, attrs, lhs, rhs = items
        return A.ResistiveStmt(span=self._sp(meta), name=str(name), attrs=tuple(attrs or ()), lhs=lhs, rhs=rhs)

    def source_stmt(self, meta, items):
        kind, name, value = items
        return A.SourceStmt(span=self._sp(meta), kind=str(kind), name=str(name), value=value)

    def twoport_stmt(self, meta, items):
        kind, name, a, b, attrs, lhs, rhs = items
        return A.TwoPortStmt(
            span=self._sp(meta),
            kind=str(kind),
            name=str(name),
            port_a=str(a),
            port_b=str(b),
            attrs=tuple(attrs or ()),
            lhs=lhs,
            rhs=rhs,
        )

    def junction_stmt(self, meta, items):
        name, kind, members = items
        return A.JunctionStmt(
            span=self._sp(meta),
            name=str(name) if name is not None else None,
            kind=str(kind),
            kind_span=_span_of(self.path, kind),
            members=tuple(members),
        )

    def structure_stmt(self, meta, items):
        a, k = _split_args(items[0])
        return A.StructureStmt(span=self._sp(meta), args=a, kwargs=k)

    # -- composition
    def import_stmt(self, meta, items):
        return A.ImportStmt(span=self._sp(meta), path=str(items[0])[1:-1])

    def port_stmt(self, meta, items):
        return A.PortStmt(span=self._sp(meta), names=items[0])

    def use_stmt(self, meta, items):
        name, rng, model, args = items
        a, k = _split_args(args)
        return A.UseStmt(span=self._sp(meta), name=str(name), range=rng, model=str(model), args=a, kwargs=k)

    def connect_stmt(self, meta, items):
        return A.ConnectStmt(span=self._sp(meta), a=items[0], b=items[1])

    # -- arguments
    def arg_list(self, meta, items):
        return tuple(items)

    def kwarg(self, meta, items):
        return A.KwArg(span=self._sp(meta), name=str(items[0]), value=items[1])

    def expr_list(self, meta, items):
        return tuple(items)

    # -- expressions
    def _binop(op):  # noqa: N805
        def rule(self, meta, items):
            return A.BinOp(span=self._sp(meta), op=op, left=items[0], right=items[1])

        return rule

    add = _binop("+")
    sub = _binop("-")
    mul = _binop("*")
    div = _binop("/")
    pow = _binop("^")

    def neg(self, meta, items):
        return A.Neg(span=self._sp(meta), operand=items[0])

    def pos(self, meta, items):
        return items[0]

    def number(self, meta, items):
        tok = items[0]
        return A.Num(span=_span_of(self.path, tok), value=float(tok), text=str(tok))

    def name(self, meta, items):
        tok = items[0]
        return A.Name(span=_span_of(self.path, tok), id=str(tok))

    def vector(self, meta, items):
        return A.Vector(span=self._sp(meta), items=tuple(items[0] or ()))

    def index(self, meta, items):
        return A.Index(span=self._sp(meta), base=items[0], indices=tuple(items[1]))

    def member(self, meta, items):
        return A.Attr(span=self._sp(meta), base=items[0], name=str(items[1]))

    def call(self, meta, items):
        func, args = items
        a, k = _split_args(args)
        return A.Call(span=self._sp(meta), func=func, args=a, kwargs=k)

    def generator(self, meta, items):
        func, body, var, lo, hi = items
        return A.Generator(span=self._sp(meta), func=func, body=body, var=str(var), lo=lo, hi=hi)


def _with_loops(stmt: A.Stmt, loops: tuple[A.Loop, ...]) -> A.Stmt:
    if not loops:
        return stmt
    from dataclasses import replace

    return replace(stmt, loops=loops)
