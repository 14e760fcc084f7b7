"""Questions asked of the syntax tree before any name is bound: which names a node mentions, what a model
declares, which names composition makes, and which names the language reserves.

These are facts about the parsed text (no sympy, no scopes), shared by composition (:mod:`pdsl.compose`), which
rewrites models that use instances, and resolution (:mod:`pdsl.resolve`), which binds their names. Keeping them
here lets both stages read the tree the same way without either importing the other.
"""

from __future__ import annotations

from . import ast as A

__all__ = ["RESERVED", "composition_names", "declared_names", "names_in", "uses_composition"]

# names no declaration may take; `if`/`not` begin an expression (conditionals)
RESERVED = frozenset({"t", "ground", "pi", "der", "if", "not"})

_AST_NODES = (A.Expr, A.KwArg, A.Stmt, A.Loop, A.Range, A.Attribute, A.Decl)


def names_in(node) -> set[str]:
    """Every name an expression or statement mentions (iterative: expressions may be long chains)."""
    out: set[str] = set()
    stack = [node]
    while stack:
        x = stack.pop()
        if isinstance(x, A.Name):
            out.add(x.id)
        elif isinstance(x, tuple):
            stack.extend(x)
        elif isinstance(x, _AST_NODES):
            stack.extend(getattr(x, f) for f in x.__dataclass_fields__)
    return out


def declared_names(body) -> dict[str, str]:
    """Name -> kind for every declaration of a model, before any is resolved (order is free)."""
    out: dict[str, str] = {}
    for stmt in body:
        if isinstance(stmt, A.DeclStmt):
            out.update((d.name, stmt.kind) for d in stmt.decls)
        elif isinstance(stmt, A.NNStmt | A.ConstraintLearnStmt | A.DistributionStmt):
            out[stmt.name] = "neural network"
        elif isinstance(stmt, A.BodyStmt):
            out[stmt.name] = "body"
        elif isinstance(stmt, A.StoreStmt):
            out[stmt.name], out[stmt.state] = stmt.kind, "state"
        elif isinstance(stmt, A.ResistiveStmt | A.SourceStmt | A.TwoPortStmt):
            out[stmt.name] = "element"
        elif isinstance(stmt, A.DrawPointStmt):
            out.setdefault(stmt.name, "drawn point")  # used by `draw line` only (pdsl.resolve.drawing)
    return out


def composition_names(body) -> set[str]:
    """The names `port` and `use` statements make (composition flattens them away)."""
    names: set[str] = set()
    for stmt in body:
        if isinstance(stmt, A.PortStmt):
            names.update(stmt.names)
        elif isinstance(stmt, A.UseStmt):
            names.add(stmt.name)
    return names


def uses_composition(model: A.ModelDef) -> bool:
    """True for a model with instances, ports, connections or an analogy: one that composition flattens."""
    return any(isinstance(s, A.UseStmt | A.PortStmt | A.ConnectStmt | A.AnalogyStmt) for s in model.body)
