"""Text -> AST. The only module that builds the ``Lark`` object or sees a ``Tree``."""

from __future__ import annotations

import functools
from pathlib import Path

from lark import Lark, Token, Tree, v_args
from lark.exceptions import UnexpectedInput
from lark.visitors import Transformer_NonRecursive

from ..cache import note_source
from ..diagnostics import PdslError, Span, register_source
from ..limits import read_text as read_bounded_text
from . import ast as A
from .errors import syntax_error
from .grammar import LineJoiner, grammar_path

__all__ = ["parse_text", "parse_file", "parse_expression", "grammar_path"]


@functools.cache
def _lark() -> Lark:
    """The LALR parser, from the tables generated into the package (:mod:`pdsl.parse.tables`): no pickle and
    no cache file are ever read or written; a grammar edited without regenerating is built in memory."""
    from . import tables

    return tables.load(grammar_path().read_text(encoding="utf-8"), LineJoiner())


# Deepest expression nesting accepted (chains such as a + b + c count as one level).
MAX_NESTING = 100
_CHAINS = {"add": "sum", "sub": "sum", "mul": "product", "div": "product"}


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
    text = text.removeprefix("\ufeff")  # a byte-order mark written by some editors
    register_source(path, text)
    try:
        tree = _lark().parse(text, start="start")
    except UnexpectedInput as err:
        raise syntax_error(err, path, text) from None
    _check_nesting(tree, path)
    return _ToAst(path).transform(tree)


def parse_expression(text: str, origin: str = "<command line>") -> A.Expr:
    """Parse one expression (a command-line value) with the model grammar."""
    register_source(origin, text)
    if not text.strip():
        raise PdslError.at("Syntax", "an expression is expected here, but the text is empty", Span.point(origin, 1, 1))
    try:
        tree = _lark().parse(text, start="expr_only")
    except UnexpectedInput as err:
        raise syntax_error(err, origin, text) from None
    _check_nesting(tree, origin)
    return _ToAst(origin).transform(tree)


def parse_file(path: str | Path) -> A.File:
    p = Path(path)
    try:
        text = read_bounded_text(p, what="model file", hint="a model file is text; split a large model into files with `import`")
    except FileNotFoundError:
        raise PdslError.at("FileNotFound", f"no such file: {p}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise PdslError.at("FileUnreadable", f"cannot read {p}: {exc}") from None
    note_source(str(p), text)  # the compiled-model cache keys an entry by every file it read
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

    def attr_text(self, meta, items):
        """``unit = "kg"``: a string value (its span covers the quotes)."""
        name, tok = items
        return A.Attribute(span=self._sp(meta), name=str(name), value=A.Text(span=_span_of(self.path, tok), value=str(tok)[1:-1]))

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
        kind, name, args = items
        a, k = _split_args(args)
        return A.ConnectorStmt(span=self._sp(meta), kind=str(kind), args=a, kwargs=k,
                               name=str(name) if name is not None else None,
                               name_span=_span_of(self.path, name) if name is not None else None)

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

    def when_stmt(self, meta, items):
        return A.WhenStmt(span=self._sp(meta), condition=items[0], actions=tuple(items[1] or ()))

    def draw_point(self, meta, items):
        _, (name, index, name_span), position = items
        return A.DrawPointStmt(span=self._sp(meta), name=name, name_span=name_span, position=position, index=index)

    def draw_line(self, meta, items):
        a, k = _split_args(items[1])
        return A.DrawLineStmt(span=self._sp(meta), points=a, kwargs=k)

    def equation_stmt(self, meta, items):
        return A.EquationStmt(span=self._sp(meta), lhs=items[0], rhs=items[1])

    def constraint_learn_stmt(self, meta, items):
        name, arch, args, on, given = items
        a, k = _split_args(args)
        return A.ConstraintLearnStmt(span=self._sp(meta), name=str(name), name_span=_span_of(self.path, name), arch=str(arch),
                                     args=a, kwargs=k, on=tuple(on or ()), given=tuple(given or ()))

    def distribution_stmt(self, meta, items):
        name, arch, args = items
        a, k = _split_args(args)
        return A.DistributionStmt(span=self._sp(meta), name=str(name), arch=str(arch), args=a, kwargs=k)

    def group_stmt(self, meta, items):
        return A.GroupStmt(span=self._sp(meta), name=str(items[0]), coords=items[1])

    def name_list(self, meta, items):
        return tuple(str(i) for i in items)

    # -- port-Hamiltonian
    def elem_name(self, meta, items):
        """``cap`` or ``cap[i]`` -> (name, index expressions, span of the whole name)."""
        name, index = items
        return str(name), tuple(index or ()), self._sp(meta)

    def store_stmt(self, meta, items):
        kind, (name, index, name_span), (state, state_index, state_span), energy = items
        return A.StoreStmt(
            span=self._sp(meta), kind=str(kind), name=name, state=state, energy=energy, index=index,
            state_index=state_index, name_span=name_span, state_span=state_span,
        )

    def resistive_stmt(self, meta, items):
        (name, index, name_span), attrs, lhs, rhs = items
        return A.ResistiveStmt(
            span=self._sp(meta), name=name, attrs=tuple(attrs or ()), lhs=lhs, rhs=rhs, index=index, name_span=name_span
        )

    def source_stmt(self, meta, items):
        kind, (name, index, name_span), value = items
        return A.SourceStmt(span=self._sp(meta), kind=str(kind), name=name, value=value, index=index, name_span=name_span)

    def twoport_stmt(self, meta, items):
        kind, (name, index, name_span), a, b, attrs, lhs, rhs = items
        return A.TwoPortStmt(
            span=self._sp(meta),
            kind=str(kind),
            name=name,
            port_a=str(a),
            port_b=str(b),
            attrs=tuple(attrs or ()),
            lhs=lhs,
            rhs=rhs,
            index=index,
            name_span=name_span,
        )

    def junction_stmt(self, meta, items):
        named, kind, members = items
        name, index, name_span = named if named is not None else (None, (), None)
        return A.JunctionStmt(
            span=self._sp(meta),
            name=name,
            kind=str(kind),
            kind_span=_span_of(self.path, kind),
            members=tuple(members),
            index=index,
            name_span=name_span,
        )

    def member_list(self, meta, items):
        return tuple(items)

    def member_loop(self, meta, items):
        body, var, lo, hi = items
        return A.MemberLoop(span=self._sp(meta), body=body, var=str(var), lo=lo, hi=hi)

    def structure_stmt(self, meta, items):
        a, k = _split_args(items[0])
        return A.StructureStmt(span=self._sp(meta), args=a, kwargs=k)

    # -- composition
    def import_stmt(self, meta, items):
        alias = items[1] if len(items) > 1 else None
        return A.ImportStmt(span=self._sp(meta), path=str(items[0])[1:-1], alias=str(alias) if alias is not None else None)

    def port_stmt(self, meta, items):
        return A.PortStmt(span=self._sp(meta), ports=tuple(items))

    def port_decl(self, meta, items):
        name, domain, across, attrs = items
        return A.PortDecl(span=self._sp(meta), name=str(name), domain=str(domain) if domain is not None else None,
                          domain_span=_span_of(self.path, domain) if domain is not None else None, across=across,
                          attrs=tuple(attrs or ()))

    def model_ref(self, meta, items):
        return A.Name(span=self._sp(meta), id=".".join(str(t) for t in items))

    def use_stmt(self, meta, items):
        name, rng, model, args = items
        a, k = _split_args(args)
        return A.UseStmt(span=self._sp(meta), name=str(name), range=rng, model=model.id, args=a, kwargs=k,
                         name_span=_span_of(self.path, name), model_span=model.span)

    def connect_stmt(self, meta, items):
        return A.ConnectStmt(span=self._sp(meta), members=tuple(items))

    def analogy_stmt(self, meta, items):
        return A.AnalogyStmt(span=self._sp(meta), quantity=str(items[0]), variable=str(items[1]))

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

    def _compare(op):  # noqa: N805
        def rule(self, meta, items):
            return A.Compare(span=self._sp(meta), op=op, left=items[0], right=items[1])

        return rule

    lt = _compare("<")
    le = _compare("<=")
    gt = _compare(">")
    ge = _compare(">=")
    eq = _compare("==")
    ne = _compare("!=")

    def and_(self, meta, items):
        return A.BoolOp(span=self._sp(meta), op="and", left=items[0], right=items[1])

    def or_(self, meta, items):
        return A.BoolOp(span=self._sp(meta), op="or", left=items[0], right=items[1])

    def not_(self, meta, items):
        return A.Not(span=self._sp(meta), operand=items[0])

    def if_expr(self, meta, items):
        cond, then, orelse = items
        return A.IfExpr(span=self._sp(meta), cond=cond, then=then, orelse=orelse)

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
