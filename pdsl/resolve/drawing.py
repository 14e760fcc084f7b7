"""``draw point`` and ``draw line`` (LANGUAGE.md §13): the picture of a model, resolved to sympy positions.

A drawn point is a position vector ``[x, y]`` or ``[x, y, z]`` built from the model's names (states,
parameters, inputs, ``t``, body points): ``draw point bob = [l*sin(theta), -l*cos(theta)]``. ``draw point
p[i] = … for i in 1..N`` declares the entries ``p[1]`` … ``p[N]``. A line runs through two or more points:
drawn points, body points (``b``, ``r.at([a, 0])``), ``ground`` (the origin) or literal positions
(``[-1, 0]``: a fixed floor). Nothing but the pictures reads them: ``show`` does not print them and they
change no equation. Drawn point names live beside the model's other names (declared once) but are not
values of expressions: a drawn point is used in ``draw line`` only.
"""

from __future__ import annotations

import sympy as sp

from ..diagnostics import PdslError, Span
from ..parse import ast as A
from ..parse.queries import RESERVED
from . import model as M
from .expressions import BodyRef

__all__ = ["resolve_drawing"]


def resolve_drawing(r, statements, out) -> None:
    """Every ``draw`` statement of the model into ``out["drawn_points"]`` and ``out["drawn_lines"]``; ``r`` is
    the resolver (its evaluator, loop expansion and error collector). Points first: lines may name any of them."""
    points: dict[str, M.DrawnPoint] = {}
    arrays: dict[str, Span] = {}  # names declared with an index
    for stmt in statements:
        if isinstance(stmt, A.DrawPointStmt):
            r._guard(_point_statement, stmt, r, points, arrays)
    lines: list[M.DrawnLine] = []
    for stmt in statements:
        if isinstance(stmt, A.DrawLineStmt):
            r._guard(_line_statement, stmt, r, points, arrays, lines)
    r._guard(_check_dimensions, None, list(points.values()), lines, r)
    out["drawn_points"].extend(points.values())
    out["drawn_lines"].extend(lines)


# ---------------------------------------------------------------- points
def _point_statement(stmt: A.DrawPointStmt, r, points: dict, arrays: dict) -> None:
    _check_name(stmt, r, points, arrays)
    bindings = r._expand(stmt.loops)
    if not stmt.index and len(bindings) != 1:
        raise PdslError.at("DuplicateDefinition", f"this `for` clause declares the drawn point `{stmt.name}` "
                           f"{len(bindings)} times", stmt.name_span,
                           f"index the name, as `{stmt.name}[{stmt.loops[0].var}]`, to make an array of points")
    if len(stmt.index) > 1:
        raise PdslError.at("WrongArity", f"`{stmt.name}` takes one index, got {len(stmt.index)}", stmt.name_span)
    if stmt.index:
        arrays.setdefault(stmt.name, stmt.name_span)
    for bind in bindings:
        name = r._element_name(stmt.name, stmt.index, bind)
        if name in points:
            raise PdslError.at("DuplicateDefinition", f"the drawn point `{name}` is declared twice (first on line "
                               f"{points[name].span.line})", stmt.name_span, "each drawn point is declared once")
        value = r._ev(bind, allow_der=False).eval(stmt.position)
        points[name] = M.DrawnPoint(name=name, position=_position(value, stmt.position.span, r), span=stmt.span)


def _check_name(stmt: A.DrawPointStmt, r, points: dict, arrays: dict) -> None:
    if stmt.name in RESERVED:
        raise PdslError.at("ReservedName", f"`{stmt.name}` is a built-in name and cannot be redeclared", stmt.name_span)
    other = r.names.get(stmt.name)
    if other is not None or stmt.name in r.consts:
        where = f"on line {other.span.line}" if other is not None else "as a `const`"
        raise PdslError.at("DuplicateDefinition", f"`{stmt.name}` is already declared {where}", stmt.name_span,
                           "give the drawn point a name of its own")
    scalar = stmt.name in points and stmt.name not in arrays
    if (stmt.index and scalar) or (not stmt.index and stmt.name in arrays):
        first = points[stmt.name].span.line if scalar else arrays[stmt.name].line
        raise PdslError.at("DuplicateDefinition", f"`{stmt.name}` is already declared on line {first}", stmt.name_span,
                           "a drawn point is either one point or an array of points")


def _position(value, span: Span, r) -> sp.ImmutableMatrix:
    """A position vector (2 or 3 entries) from what an expression evaluated to."""
    if isinstance(value, BodyRef):
        value = value.point(span)
    if isinstance(value, M.PointRef):
        return sp.ImmutableMatrix(value.position)
    if isinstance(value, sp.MatrixBase) and 1 in value.shape and len(value) in (2, 3):
        entries = list(value)
        if all(isinstance(e, sp.Expr) for e in entries):
            return sp.ImmutableMatrix(entries)
    what = "a scalar" if isinstance(value, sp.Expr) else (
        f"a vector of {len(value)} entries" if isinstance(value, sp.MatrixBase) and 1 in value.shape else "not a position")
    raise PdslError.at("TypeMismatch", f"a drawn point is a position [x, y] or [x, y, z]; this is {what}", span,
                       "write the position's coordinates as a vector, e.g. [l*sin(theta), -l*cos(theta)]")


# ---------------------------------------------------------------- lines
def _line_statement(stmt: A.DrawLineStmt, r, points: dict, arrays: dict, lines: list) -> None:
    if stmt.kwargs:
        kw = stmt.kwargs[0]
        raise PdslError.at("UnknownArgument", f"`draw line` has no option `{kw.name}`", kw.span,
                           "draw line A, B (, C …): the points only")
    if len(stmt.points) < 2:
        raise PdslError.at("WrongArity", f"`draw line` runs through at least two points, got {len(stmt.points)}",
                           stmt.span, "draw line A, B")
    for bind in r._expand(stmt.loops):
        ends = [_line_point(e, bind, r, points, arrays) for e in stmt.points]
        sizes = {len(p) for _, p in ends if p is not None}
        if not sizes:
            raise PdslError.at("SelfConnection", "a line from `ground` to `ground` draws nothing", stmt.span)
        if len(sizes) > 1:
            raise PdslError.at("TypeMismatch", "the points of this line have different dimensions ("
                               + ", ".join(f"`{label}`: {len(p)}" for label, p in ends if p is not None) + ")",
                               stmt.span, "draw every point of a picture in 2-D or every one in 3-D")
        d = sizes.pop()
        lines.append(M.DrawnLine(points=tuple((label, p if p is not None else sp.zeros(d, 1).as_immutable())
                                              for label, p in ends), span=stmt.span))


def _line_point(e: A.Expr, bind, r, points: dict, arrays: dict) -> tuple[str, sp.ImmutableMatrix | None]:
    """(label, position) of one point of a line; ground's position is None (the origin, in the line's dimension)."""
    if isinstance(e, A.Name) and e.id in points and e.id not in arrays:
        return e.id, points[e.id].position
    if isinstance(e, A.Name) and e.id in arrays:
        raise PdslError.at("TypeMismatch", f"`{e.id}` is an array of drawn points: name one, as `{e.id}[1]`", e.span)
    if isinstance(e, A.Index) and isinstance(e.base, A.Name) and e.base.id in arrays:
        if len(e.indices) != 1:
            raise PdslError.at("WrongArity", f"`{e.base.id}` takes one index, got {len(e.indices)}", e.span)
        name = r._element_name(e.base.id, e.indices, bind)
        if name not in points:
            have = sorted(n for n in points if n.startswith(e.base.id + "["))
            raise PdslError.at("UnknownName", f"no drawn point `{name}`", e.span,
                               "drawn: " + ", ".join(have[:6]) + (" …" if len(have) > 6 else ""))
        return name, points[name].position
    if isinstance(e, A.Name) and e.id == "ground":
        return "ground", None
    value = r._ev(bind, allow_der=False).eval(e)
    if isinstance(value, BodyRef | M.PointRef) or isinstance(value, sp.MatrixBase):
        label = value.text if isinstance(value, BodyRef | M.PointRef) else "[" + ", ".join(map(str, value)) + "]"
        try:
            return label, _position(value, e.span, r)
        except PdslError:
            pass
    raise PdslError.at("TypeMismatch", "a point of `draw line` is a drawn point, a body point, `ground` or a "
                       "position [x, y]", e.span, "declare it first: draw point NAME = [x, y]")


def _check_dimensions(_stmt, points: list, lines: list, r) -> None:
    """One dimension for the whole picture: every drawn point and line in 2-D, or every one in 3-D."""
    first = None
    for span, d in [(p.span, len(p.position)) for p in points] + [(ln.span, len(ln.points[0][1])) for ln in lines]:
        if first is None:
            first = (span, d)
        elif d != first[1]:
            raise PdslError.at("TypeMismatch", f"this is drawn in {d}-D, but the drawing on line {first[0].line} is "
                               f"{first[1]}-D", span, "draw every point of a picture in 2-D or every one in 3-D")
