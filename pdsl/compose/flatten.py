"""Imports and flattening of model instances (LANGUAGE.md §9). See the package docstring.

Names: a statement of an instance ``upper`` of ``Link`` is copied with every name that ``Link``
declares prefixed (``bob`` -> ``upper.bob``); a parameter given as an expression of the parent's
names (``Section(R = R[i])``) and a bound input (``DCMotor(V = V)``) are replaced by that
expression, a parameter given a number keeps its name with a new default (still fittable as
``upper.m``). An instance's ``output`` stays an output under its prefixed name and, used by the
parent (``ctrl.u``), stands for its expression (a signal).

Connections (union–find over the members of every ``connect``):

* point ports and points: the ports become aliases of the set's first point (a body, a body point,
  ``ground``); a second point in the same set is joined to it by a ``joint`` row;
* power ports: a node — across values equal, through values sum to zero — which is a p-H junction
  whose bonds are the ports themselves (a 0-junction where the across value is the effort, a
  1-junction where it is the flow);
* a kinematic port with a power port: an :class:`~pdsl.parse.ast.InterfaceStmt` that the lowering
  turns into a source of the p-H part and a generalized force of the mechanics (LANGUAGE.md §10);
* an instance ``output`` with an ``input``: a signal (the input stands for the output's expression).

Ports left open in the top model are given: a point port sits at ``ground``, a power port becomes a
source with an input (``p.effort`` or ``p.flow``: the p-H lowering picks which one the network accepts) so that a
component can be checked and run on its own.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from importlib import resources
from pathlib import Path

import sympy as sp

from ..diagnostics import Collector, PdslError, Span
from ..parse import ast as A
from ..parse.parser import parse_file
from ..parse.queries import declared_names, names_in, uses_composition
from ..records import record

__all__ = ["Program", "load_program", "flatten", "std_dir", "uses_composition", "DOMAINS"]

STD = "std:"
# domain -> whether its across value is the effort under the default analogy (force = effort). A thermal port's
# across value (temperature) sits where an effort would, but temperature × heat flow is not a power ("Port domains")
DOMAINS = {"electrical": True, "hydraulic": True, "translational": False, "rotational": False, "thermal": True}
_MECHANICAL = {"translational", "rotational"}
# the SI unit of each domain's across value (velocity, angular velocity, voltage, pressure, temperature)
_ACROSS_UNIT = {"electrical": "V", "hydraulic": "Pa", "translational": "m/s", "rotational": "rad/s", "thermal": "K"}
# words that name a thermal quantity: `analogy` does not apply to them (LANGUAGE.md, "Port domains")
_THERMAL_WORDS = {"heat", "temperature", "thermal", "T", "Q_flow", "heat_flow", "entropy"}
_GLOBAL = {"t", "pi", "ground"}
MAX_INSTANCES = 100_000


def std_dir() -> Path:
    """The bundled component library: ``pdsl/std`` in a wheel, ``models/std`` in a checkout."""
    packaged = resources.files("pdsl").joinpath("std")
    if packaged.is_dir():
        return Path(str(packaged))
    return Path(__file__).resolve().parents[2] / "models" / "std"


# ====================================================================== imports
@record(kw_only=False, slots=False)
class Program:
    """A file and what it imports: for every file (by path), the models visible in it by name."""

    root: A.File
    visible: Mapping[str, Mapping[str, A.ModelDef]]

    def lookup(self, path: str, name: str) -> A.ModelDef | None:
        return self.visible.get(path, {}).get(name)

    def names(self, path: str) -> list[str]:
        return sorted(self.visible.get(path, {}))


def _imports(f: A.File) -> list[A.ImportStmt]:
    out = list(f.imports)
    for m in f.models:
        out += [s for s in m.body if isinstance(s, A.ImportStmt)]
    return out


def _target(imp: A.ImportStmt, importer: str) -> Path:
    if imp.path.startswith(STD):
        name = imp.path[len(STD):]
        if not name or "/" in name or "\\" in name or name.startswith("."):
            raise PdslError.at("ImportNotFound", f"`{imp.path}`: a library name is one word, as `std:electrical`", imp.span)
        lib = std_dir()
        target = lib / f"{name}.phm"
        if not target.is_file():
            have = ", ".join(sorted(p.stem for p in lib.glob("*.phm"))) if lib.is_dir() else "none"
            raise PdslError.at("ImportNotFound", f"no library file `{imp.path}`", imp.span, f"the std library has: {have}")
        return target
    base = Path(importer).parent
    target = Path(os.path.normpath(base / imp.path))
    if not target.is_file():
        raise PdslError.at("ImportNotFound", f"cannot import `{imp.path}`: no such file {target}", imp.span,
                           "an import path is relative to the importing file")
    return target


def load_program(root: A.File) -> Program:
    """Parse every file ``root`` imports (recursively), refusing cycles; errors are located at the import line."""
    visible: dict[str, dict[str, A.ModelDef]] = {}
    diags = Collector()
    files: dict[str, A.File] = {}

    def own(f: A.File) -> dict[str, A.ModelDef]:
        return {m.name: m for m in f.models}

    def visit(f: A.File, stack: tuple[str, ...]) -> None:
        if f.path in visible:
            return
        table = dict(own(f))
        visible[f.path] = table
        for imp in _imports(f):
            try:
                target = _target(imp, f.path)
            except PdslError as err:
                diags.extend(err)
                continue
            key = str(target.resolve())
            if key in stack:
                chain = " -> ".join(Path(p).name for p in stack[stack.index(key):]) + f" -> {target.name}"
                diags.error("ImportCycle", f"`{imp.path}` imports a file that imports this one ({chain})", imp.span,
                            "move the shared models into a file that neither imports")
                continue
            path = str(target)
            if path not in files:
                try:
                    files[path] = parse_file(target)
                except PdslError as err:
                    diags.extend(err)
                    continue
            child = files[path]
            visit(child, stack + (key,))
            for name, m in own(child).items():
                qualified = f"{imp.alias}.{name}" if imp.alias else name
                prev = table.get(qualified)
                if prev is not None and prev is not m:
                    diags.error("DuplicateDefinition", f"model `{qualified}` is defined twice (also at "
                                f"{prev.span.path}:{prev.span.line})", imp.span, "import one of the files `as` a prefix")
                    continue
                table[qualified] = m

    visit(root, (str(Path(root.path).resolve()),))
    diags.raise_if_any()
    return Program(root=root, visible=visible)


# ====================================================================== namespace entries
@dataclass
class _Inst:
    model: A.ModelDef
    table: dict
    span: Span


@dataclass
class _InstArray:
    name: str
    items: dict


@dataclass
class _Port:
    full: str
    kind: str  # point | power | kinematic
    domain: str | None
    across_is_effort: bool
    decl: Span
    top: bool


@dataclass
class _Ctx:
    """Where a statement is renamed: the model's name table and the loop variables bound to numbers."""

    table: dict
    prefix: str
    via: tuple
    loop: dict = field(default_factory=dict)
    path: str = ""

    def sp(self, span: Span) -> Span:
        return replace(span, via=self.via + span.via) if self.via else span

    def bound(self, extra: Mapping[str, A.Expr]) -> _Ctx:
        return replace(self, loop={**self.loop, **extra})


def _num(v: int, span: Span) -> A.Num:
    return A.Num(span=span, value=float(v), text=str(v))


def _is_number(e: A.Expr) -> bool:
    return isinstance(e, A.Num) or (isinstance(e, A.Neg) and isinstance(e.operand, A.Num))


# ====================================================================== flattening
def flatten(program: Program, model: A.ModelDef, const_overrides: Mapping[str, int] | None = None) -> A.ModelDef:
    """One model without instances, ports or connections (see the module docstring)."""
    return _Flattener(program, dict(const_overrides or {})).run(model)


class _Flattener:
    def __init__(self, program: Program, const_overrides: dict[str, int]):
        self.program = program
        self.const_overrides = const_overrides
        self.out: list[A.Stmt] = []
        self.ports: dict[str, _Port] = {}
        self.connects: list[tuple[list, A.ConnectStmt, _Ctx]] = []
        self.outputs: dict[str, A.Expr] = {}  # full output name -> its expression (signals)
        self.signals: dict[str, tuple[A.Expr, Span]] = {}  # input bound by `connect` -> (output expression, connect line)
        self.inputs: dict[str, A.Decl] = {}  # full name of an unbound input of an instance -> its declaration
        self.diags = Collector()
        self.count = 0
        self.active: list[str] = []  # models being instantiated (recursion guard)

    def run(self, top: A.ModelDef) -> A.ModelDef:
        ctx = _Ctx(table={}, prefix="", via=(), path=top.span.path)
        self._instance(top, ctx, {}, top=True)
        self._connect_all()
        self.diags.raise_if_any()
        body = tuple(s for s in self.out if not (isinstance(s, A.DeclStmt) and not s.decls))
        return replace(top, body=body)

    # ------------------------------------------------------------ one model instance
    def _instance(self, m: A.ModelDef, ctx: _Ctx, overrides: dict, *, top: bool = False) -> dict:
        if m.name in self.active:
            raise PdslError.at("RecursiveModel", f"model `{m.name}` contains an instance of itself",
                               ctx.sp(m.name_span), "an instance cannot contain its own model")
        self.active.append(m.name)
        try:
            return self._instance_body(m, ctx, overrides, top)
        finally:
            self.active.pop()

    def _instance_body(self, m: A.ModelDef, ctx: _Ctx, overrides: dict, top: bool) -> dict:
        table = ctx.table
        body = m.body
        p = ctx.prefix
        consts = self._consts(m, ctx, overrides, top)
        for name, v in consts.items():
            table[name] = ("const", v)
        analogy_effort = self._analogy(m)
        known = _declared(body)
        for name, kind in known.items():
            if name in consts:
                continue
            value = overrides.get(name, (None, None))[0]
            if value is not None and (kind == "input" or (kind == "param" and not _is_number(value))):
                table[name] = ("expr", value)
            else:
                table[name] = ("name", p + name)
        for kw_name, (_value, kw) in overrides.items():
            if known.get(kw_name) not in ("param", "input") and kw_name not in consts:
                choices = sorted(n for n, k in known.items() if k in ("param", "input"))
                self.diags.error("UnknownArgument", f"`{m.name}` has no parameter or input `{kw_name}`", kw.span,
                                 "its parameters and inputs: " + (", ".join(choices) or "none"))
        # ports
        for stmt in body:
            if isinstance(stmt, A.PortStmt):
                for d in stmt.ports:
                    self._declare_port(d, ctx, analogy_effort, top)
                    if d.domain is not None and d.across is None:
                        self._port_values(m, d, ctx)
        # instances (kwargs may use other instances' outputs: build in dependency order)
        uses = [s for s in body if isinstance(s, A.UseStmt)]
        for u in uses:
            if u.name in table:
                self.diags.error("DuplicateDefinition", f"`{u.name}` is already declared in `{m.name}`", ctx.sp(u.name_span or u.span))
        pending = list(uses)
        while pending:
            progress = False
            for u in list(pending):
                refs = _names(u.args) | _names(u.kwargs) | (_names(u.range) if u.range else set())
                if any(r in {v.name for v in pending if v is not u} for r in refs):
                    continue
                pending.remove(u)
                progress = True
                try:
                    self._use(u, ctx)
                except PdslError as err:
                    self.diags.extend(err)
            if not progress:
                u = pending[0]
                raise PdslError.at("CyclicDefinition", f"the arguments of instance `{u.name}` depend on each other "
                                   "in a cycle", ctx.sp(u.span))
        # statements
        for stmt in body:
            try:
                self._statement(stmt, ctx, overrides, known, top)
            except PdslError as err:
                self.diags.extend(err)
        return table

    def _analogy(self, m: A.ModelDef) -> bool:
        """True where a mechanical port's across value is its effort (``analogy force = flow``)."""
        found = [s for s in m.body if isinstance(s, A.AnalogyStmt)]
        for s in found:
            if s.quantity in _THERMAL_WORDS or s.variable in _THERMAL_WORDS:
                raise PdslError.at("BadOption", f"`analogy {s.quantity} = {s.variable}`: the analogy does not apply to "
                                   "thermal ports: temperature and heat flow are not a power pair", s.span,
                                   "a thermal port's across value is its temperature and its through value the heat "
                                   "flow into the model, under either analogy; `analogy force = …` sets the mechanical "
                                   "ports only")
            if s.quantity != "force" or s.variable not in ("effort", "flow"):
                raise PdslError.at("BadOption", f"`analogy {s.quantity} = {s.variable}`: write `analogy force = effort` "
                                   "(bond-graph, the default) or `analogy force = flow` (mobility)", s.span)
        return bool(found) and found[-1].variable == "flow"

    def _consts(self, m: A.ModelDef, ctx: _Ctx, overrides: dict, top: bool) -> dict[str, int]:
        from ..resolve.expressions import Evaluator, Scope, int_value

        decls = {d.name: d for s in m.body if isinstance(s, A.DeclStmt) and s.kind == "const" for d in s.decls}
        values: dict[str, int] = {}
        for name in decls:
            if top and name in self.const_overrides:
                values[name] = int(self.const_overrides[name])
            elif name in overrides:
                value, kw = overrides[name]
                if not isinstance(value, A.Num) or value.value != int(value.value):
                    raise PdslError.at("NotConstant", f"const `{name}` takes an integer number", kw.span)
                values[name] = int(value.value)
        for _ in range(len(decls) + 1):
            progress = False
            for name, d in decls.items():
                if name in values or d.value is None:
                    continue
                scope = Scope({k: sp.Integer(v) for k, v in values.items()})
                try:
                    values[name] = int_value(Evaluator(scope).eval(d.value), d.value.span, "a const")
                    progress = True
                except PdslError:
                    continue
            if not progress:
                break
        missing = [n for n in decls if n not in values]
        if missing:  # report through the resolver's own messages: evaluate once more, raising
            d = decls[missing[0]]
            scope = Scope({k: sp.Integer(v) for k, v in values.items()})
            int_value(Evaluator(scope).eval(d.value), ctx.sp(d.value.span) if d.value else ctx.sp(d.span), "a const")
        return values

    def _declare_port(self, d: A.PortDecl, ctx: _Ctx, analogy_effort: bool, top: bool) -> None:
        full = ctx.prefix + d.name
        if d.domain is None:
            kind, effort = "point", False
            if d.across is not None:
                raise PdslError.at("BadPort", "a point port has no value", ctx.sp(d.span))
        else:
            if d.domain not in DOMAINS:
                raise PdslError.at("UnknownDomain", f"unknown port domain `{d.domain}`", ctx.sp(d.domain_span or d.span),
                                   "domains: " + ", ".join(DOMAINS))
            kind = "kinematic" if d.across is not None else "power"
            if kind == "kinematic" and d.domain not in _MECHANICAL:
                raise PdslError.at("BadPort", f"a kinematic port is mechanical (translational or rotational), not {d.domain}",
                                   ctx.sp(d.domain_span or d.span))
            effort = DOMAINS[d.domain] if d.domain not in _MECHANICAL else analogy_effort
        self.ports[full] = _Port(full=full, kind=kind, domain=d.domain, across_is_effort=effort, decl=ctx.sp(d.span), top=top)
        unit = self._port_unit(d, ctx, kind)
        if kind == "kinematic":
            self.out.append(A.KinematicPortStmt(span=ctx.sp(d.span), name=full, domain=d.domain,
                                                across=self._rn(d.across, ctx), unit=unit))

    def _port_values(self, m: A.ModelDef, d: A.PortDecl, ctx: _Ctx) -> None:
        """How the power port's values read its bond (:class:`~pdsl.parse.ast.PowerPortStmt`). A port that no junction
        of its model lists belongs to a component written in equations (``p.v - n.v = R*p.i``): it gets a terminal, a
        one-port whose effort and flow only those equations fix, bonded to the port (``-p`` delivers the port's power
        into the model, as in ``junction common_flow(-p, r, n)``)."""
        full = ctx.prefix + d.name
        port = self.ports.get(full)
        if port is None or port.kind != "power":
            return
        span = ctx.sp(d.span)
        sign = _listed_sign(m.body, d.name)
        owner = ctx.prefix[:-1]
        if sign is None:
            used = any(d.name in _names(s) for s in m.body if not isinstance(s, A.PortStmt | A.ConnectStmt | A.UseStmt))
            if not used:
                raise PdslError.at("BadPort", f"{port.domain} port `{d.name}` of `{m.name}` is neither a member of a "
                                   "junction nor read by an equation of the model", span,
                                   f"list it in a junction (`junction common_flow(-{d.name}, …)`) or fix its values "
                                   f"by equations (`{d.name}.across`, `{d.name}.through`)")
            sign = -1
            terminal = f"{full}.terminal"
            self.out.append(A.TerminalStmt(span=span, name=terminal, domain=port.domain or "", owner=owner))
            self.out.append(A.JunctionStmt(span=span, name=None, kind="common_effort", kind_span=span, name_span=span,
                                           members=(A.Neg(span=span, operand=A.Name(span=span, id=full)),
                                                    A.Name(span=span, id=terminal))))
        self.out.append(A.PowerPortStmt(span=span, name=full, domain=port.domain or "",
                                        across_is_effort=port.across_is_effort, sign=sign, owner=owner))

    def _port_unit(self, d: A.PortDecl, ctx: _Ctx, kind: str) -> A.Text | None:
        """``port p: electrical {unit = "V"}``: the unit of the across value, checked against the domain (and for a
        kinematic port, by the unit checker, against its velocity)."""
        from ..resolve.units import UnitSyntax, format_dim, parse_unit

        unit = None
        for a in d.attrs:
            if a.name != "unit" or not isinstance(a.value, A.Text):
                raise PdslError.at("BadAttribute", f"a port takes `{{unit = \"...\"}}`, not `{a.name}`", ctx.sp(a.span))
            unit = replace(a.value, span=ctx.sp(a.value.span))
        if unit is None:
            return None
        if kind == "point":
            raise PdslError.at("BadAttribute", "a point port has no unit (its position has the bodies' units)", unit.span)
        try:
            dim = parse_unit(unit.value)
        except UnitSyntax as err:
            raise PdslError.at("BadUnit", f"`{unit.value}`: {err}", unit.span) from None
        want = parse_unit(_ACROSS_UNIT[d.domain])
        if dim != want:
            raise PdslError.at("UnitMismatch", f"the across value of a {d.domain} port has dimension {format_dim(want)} "
                               f"({_ACROSS_UNIT[d.domain]}), but `{unit.value}` is {format_dim(dim)}", unit.span)
        return unit

    def _use(self, u: A.UseStmt, ctx: _Ctx) -> None:
        model = self.program.lookup(ctx.path, u.model)
        if model is None:
            names = self.program.names(ctx.path)
            raise PdslError.at("UnknownModel", f"no model `{u.model}` here", ctx.sp(u.model_span or u.span),
                               "models visible in this file: " + (", ".join(names) or "none") + " (import a file to use its models)")
        if u.args:
            raise PdslError.at("WrongArity", "instance arguments are named: `Link(m = 1.0, l = 0.8)`", ctx.sp(u.args[0].span))
        seen = set()
        for kw in u.kwargs:
            if kw.name in seen:
                raise PdslError.at("DuplicateDefinition", f"`{kw.name}` is given twice", ctx.sp(kw.span))
            seen.add(kw.name)
        via = ((u.name, u.span.path, u.span.line),) + ctx.via
        if u.range is None:
            overrides = {kw.name: (self._rn(kw.value, ctx), kw) for kw in u.kwargs}
            child = _Ctx(table={}, prefix=f"{ctx.prefix}{u.name}.", via=via, path=model.span.path)
            self._count(u, ctx)
            ctx.table[u.name] = _Inst(model, self._instance(model, child, overrides), u.span)
            return
        lo, hi = self._int(u.range.lo, ctx), self._int(u.range.hi, ctx)
        if hi - lo + 1 > MAX_INSTANCES:
            raise PdslError.at("BadArrayBounds", f"the instance array {lo}..{hi} is too long", ctx.sp(u.range.span))
        arr = _InstArray(u.name, {})
        ctx.table[u.name] = arr
        for k in range(lo, hi + 1):
            inner = ctx.bound({"i": _num(k, u.span)})
            overrides = {kw.name: (self._rn(kw.value, inner), kw) for kw in u.kwargs}
            child = _Ctx(table={}, prefix=f"{ctx.prefix}{u.name}[{k}].", via=((f"{u.name}[{k}]", u.span.path, u.span.line),) + ctx.via,
                         path=model.span.path)
            self._count(u, ctx)
            arr.items[k] = _Inst(model, self._instance(model, child, overrides), u.span)

    def _count(self, u, ctx) -> None:
        self.count += 1
        if self.count > MAX_INSTANCES:
            raise PdslError.at("BadArrayBounds", f"the model makes more than {MAX_INSTANCES} instances", ctx.sp(u.span))

    def _int(self, e: A.Expr, ctx: _Ctx) -> int:
        from ..resolve.expressions import Evaluator, Scope, int_value

        value = self._rn(e, ctx)
        names = {k: sp.Integer(v) for k, v in self.const_overrides.items()}
        return int_value(Evaluator(Scope(names)).eval(value), ctx.sp(e.span), "an index")

    # ------------------------------------------------------------ statements
    def _statement(self, stmt: A.Stmt, ctx: _Ctx, overrides: dict, known: dict, top: bool) -> None:
        if isinstance(stmt, A.ImportStmt | A.PortStmt | A.UseStmt | A.AnalogyStmt):
            return
        if isinstance(stmt, A.ConnectStmt):
            for bind in self._loops(stmt, ctx):
                members = [self._endpoint(m, bind, stmt) for m in stmt.members]
                self.connects.append((members, stmt, bind))
            return
        if isinstance(stmt, A.SpaceStmt) and not top:
            return  # `space` is inherited
        if isinstance(stmt, A.DeclStmt):
            if stmt.kind == "const" and not top:
                return
            decls = []
            for d in stmt.decls:
                if d.name in overrides:
                    value, _kw = overrides[d.name]
                    if stmt.kind == "param" and _is_number(value):
                        decls.append(replace(self._rn_node(d, ctx), name=ctx.prefix + d.name, value=value))
                    continue  # bound input, or a parameter replaced by the parent's expression
                nd = replace(self._rn_node(d, ctx), name=ctx.prefix + d.name)
                decls.append(nd)
                if stmt.kind == "output" and not top:
                    self.outputs[nd.name] = nd.value
                if stmt.kind == "input" and not top:
                    self.inputs[nd.name] = nd
            if decls:
                self.out.append(replace(self._rn_node(stmt, ctx), decls=tuple(decls)))
            return
        if _uses_instance_array(stmt, ctx.table) and stmt.loops:
            for bind in self._loops(stmt, ctx):
                self.out.append(self._prefixed(replace(stmt, loops=()), bind))
            return
        self.out.append(self._prefixed(stmt, ctx))

    def _loops(self, stmt: A.Stmt, ctx: _Ctx) -> list[_Ctx]:
        """The statement's ``for`` clause expanded here (its members name instances by index)."""
        out = [ctx]
        for loop in stmt.loops:
            nxt = []
            for c in out:
                lo, hi = self._int(loop.lo, c), self._int(loop.hi, c)
                if hi - lo + 1 > MAX_INSTANCES:
                    raise PdslError.at("BadArrayBounds", f"the loop {lo}..{hi} is too long", ctx.sp(loop.span))
                nxt += [c.bound({loop.var: _num(k, loop.span)}) for k in range(lo, hi + 1)]
            out = nxt
        return out

    def _prefixed(self, stmt: A.Stmt, ctx: _Ctx) -> A.Stmt:
        new = self._rn_node(stmt, ctx)
        p = ctx.prefix
        if not p:
            return new
        changes = {}
        for attr in ("name", "state"):
            if hasattr(new, attr) and isinstance(getattr(new, attr), str) and getattr(new, attr):
                changes[attr] = p + getattr(new, attr)
        return replace(new, **changes) if changes else new

    # ------------------------------------------------------------ renaming
    def _rn_node(self, node, ctx: _Ctx):
        """A copy of a statement or declaration part with its expressions renamed and spans extended.

        Iterative (:func:`_rebuild`): a sum of thousands of terms is a left chain thousands of nodes deep."""
        return _rebuild(node, ctx, self._rn_step)

    def _rn(self, e: A.Expr, ctx: _Ctx) -> A.Expr:
        return _rebuild(e, ctx, self._rn_step)

    def _rn_step(self, node, ctx: _Ctx):
        """One node of the renaming walk: ``(value, None)`` when it is done, else ``(build, children)``."""
        if isinstance(node, A.Expr):
            if isinstance(node, A.Name):
                return self._rn_name(node, ctx), None
            if isinstance(node, A.Attr | A.Index):
                hit = self._collapse(node, ctx)
                if hit is not None:
                    return hit, None
            if isinstance(node, A.Generator | A.MemberLoop):
                inner = ctx.bound({node.var: None})
                names = [f.name for f in fields(node) if isinstance(getattr(node, f.name), A.Expr | tuple | Span)]
                return _builder(node, names), [(getattr(node, n), inner if n == "body" else ctx) for n in names]
            names = [f.name for f in fields(node) if isinstance(getattr(node, f.name), A.Expr | tuple | Span | A.KwArg)]
            return _builder(node, names), [(getattr(node, n), ctx) for n in names]
        if isinstance(node, tuple):
            return tuple, [(x, ctx) for x in node]
        if isinstance(node, Span):
            return ctx.sp(node), None
        if isinstance(node, A.Stmt | A.Decl | A.KwArg | A.Range | A.Loop | A.Attribute | A.PortDecl):
            if isinstance(node, A.ResistiveStmt | A.TwoPortStmt):
                local = {"e", "f"} if isinstance(node, A.ResistiveStmt) else {f"{v}_{q}" for v in "ef" for q in (node.port_a, node.port_b)}
                ctx = replace(ctx, loop={**{n: A.Name(span=node.span, id=n) for n in local}, **ctx.loop})
            if isinstance(node, A.Stmt) and node.loops:
                # the statement's own loop variables stay names (the resolver expands the loop)
                ctx = replace(ctx, loop={**ctx.loop, **{lp.var: None for lp in node.loops}})
            names = [f.name for f in fields(node)
                     if isinstance(getattr(node, f.name), A.Expr | tuple | Span | A.Range | A.KwArg | A.Decl)]
            return _builder(node, names), [(getattr(node, n), ctx) for n in names]
        return node, None

    def _rn_name(self, e: A.Name, ctx: _Ctx) -> A.Expr:
        if e.id in ctx.loop:
            v = ctx.loop[e.id]
            return A.Name(span=ctx.sp(e.span), id=e.id) if v is None else v
        ent = ctx.table.get(e.id)
        if ent is None:
            return replace(e, span=ctx.sp(e.span))
        return self._entry_ast(ent, e.id, ctx.sp(e.span))

    def _entry_ast(self, ent, name: str, span: Span) -> A.Expr:
        if isinstance(ent, _Inst | _InstArray):
            model = ent.model.name if isinstance(ent, _Inst) else "a model"
            raise PdslError.at("TypeMismatch", f"`{name}` is an instance of {model}: name one of its parts, as `{name}.x`", span)
        kind, value = ent
        if kind == "name":
            return A.Name(span=span, id=value)
        if kind == "const":
            return _num(value, span)
        return value  # an expression of the parent's names (already renamed)

    def _collapse(self, e: A.Expr, ctx: _Ctx) -> A.Expr | None:
        """``upper.bob.x``, ``s[2].q``, ``motor.emf.a``: the part of the chain that names into an instance
        becomes the prefixed name; None when the chain does not start at an instance."""
        chain = []
        x = e
        while isinstance(x, A.Attr | A.Index):
            chain.append(x)
            x = x.base
        if not isinstance(x, A.Name) or x.id in ctx.loop or not isinstance(ctx.table.get(x.id), _Inst | _InstArray):
            return None
        ent = ctx.table[x.id]
        text = x.id
        chain.reverse()
        for pos, node in enumerate(chain):
            if isinstance(ent, _InstArray):
                if not isinstance(node, A.Index) or len(node.indices) != 1:
                    raise PdslError.at("TypeMismatch", f"`{text}` is an array of instances: index it, as `{text}[1]`", ctx.sp(node.span))
                k = self._int(node.indices[0], ctx)
                if not ent.items:
                    raise PdslError.at("BadIndex", f"`{text}` has no instances (its `use` line failed)", ctx.sp(node.span))
                if k not in ent.items:
                    lo, hi = min(ent.items), max(ent.items)
                    raise PdslError.at("BadIndex", f"index {k} is outside {lo}..{hi} of `{text}`", ctx.sp(node.span))
                ent, text = ent.items[k], f"{text}[{k}]"
                continue
            if not isinstance(node, A.Attr):
                raise PdslError.at("TypeMismatch", f"`{text}` is one instance, not an array", ctx.sp(node.span))
            sub = ent.table.get(node.name)
            if sub is None or (isinstance(sub, tuple) and sub[0] == "const"):
                have = sorted(k for k, v in ent.table.items() if not (isinstance(v, tuple) and v[0] == "const"))
                raise PdslError.at("UnknownName", f"`{text}` ({ent.model.name}) has no `{node.name}`", ctx.sp(node.span),
                                   "its names: " + ", ".join(have[:20]))
            text = f"{text}.{node.name}"
            if isinstance(sub, _Inst | _InstArray):
                ent = sub
                continue
            if sub[0] == "name" and sub[1] in self.outputs:
                out = self.outputs[sub[1]]  # an instance output used by its parent: a signal
            else:
                out = self._entry_ast(sub, text, ctx.sp(node.span))
            for rest in chain[pos + 1:]:
                if isinstance(rest, A.Attr):
                    out = A.Attr(span=ctx.sp(rest.span), base=out, name=rest.name)
                else:
                    out = A.Index(span=ctx.sp(rest.span), base=out, indices=tuple(self._rn(i, ctx) for i in rest.indices))
            return out
        raise PdslError.at("TypeMismatch", f"`{text}` is an instance of {ent.model.name if isinstance(ent, _Inst) else 'a model'}: "
                           "name one of its parts or ports", ctx.sp(e.span))

    # ------------------------------------------------------------ connections
    def _endpoint(self, m: A.Expr, ctx: _Ctx, stmt: A.ConnectStmt):
        """What a `connect` member names: a port, an instance's output or input (a signal), or a point."""
        value = self._rn(m, ctx)
        if isinstance(value, A.Name):
            for kind, table in (("port", self.ports), ("output", self.outputs), ("input", self.inputs)):
                if value.id in table:
                    return (kind, value.id, value.span)
        # an instance's output used by its parent renames to the output's expression itself (see _collapse)
        out = next((k for k, v in self.outputs.items() if v is value), None)
        if out is not None:
            return ("output", out, value.span)
        return ("point", value, value.span)

    def _connect_all(self) -> None:
        parent: dict = {}

        def key(ep):
            return ep[1] if ep[0] != "point" else ("point", _text(ep[1]))

        def find(k):
            while parent[k] != k:
                parent[k] = parent[parent[k]]
                k = parent[k]
            return k

        where: dict = {}
        for members, stmt, _ctx in self.connects:
            if len(members) < 2:
                continue
            for ep in members:
                k = key(ep)
                parent.setdefault(k, k)
                where.setdefault(k, (ep, stmt))
            first = find(key(members[0]))
            for ep in members[1:]:
                r = find(key(ep))
                if r != first:
                    parent[r] = first
        groups: dict = {}
        for k in parent:
            groups.setdefault(find(k), []).append(k)
        subst: dict[str, A.Expr] = {}
        connected = set()
        for ks in groups.values():
            eps = [where[k] for k in ks]
            try:
                self._node(eps, subst)
            except PdslError as err:
                self.diags.extend(err)
            connected.update(k for k in ks if isinstance(k, str))
        for full, port in self.ports.items():
            if full in connected:
                continue
            if port.kind == "point":
                if port.top:
                    subst[full] = A.Name(span=port.decl, id="ground")
                else:
                    self.diags.error("UnconnectedPort", f"point port `{full}` is not connected", port.decl,
                                     "connect it to a body, a body point or `ground`")
            elif port.kind == "power":
                if port.top:
                    self._open_power_port(port)
                else:
                    self.diags.error("UnconnectedPort", f"{port.domain} port `{full}` is not connected", port.decl,
                                     "connect it to a port of the same domain")
        subst.update(self._signal_values())
        if subst:
            self.out = [_substitute(s, subst) for s in self.out]

    def _signal_values(self) -> dict[str, A.Expr]:
        """Inputs bound by `connect` to outputs that may read other such inputs: substituted until none is left.
        A cycle is an algebraic loop, reported as the chain of its `connect` lines."""
        deps = {k: _names(v) & set(self.signals) for k, (v, _) in self.signals.items()}
        state: dict[str, int] = {}
        order: list[str] = []

        def visit(k, path):
            if state.get(k) == 2:
                return
            if state.get(k) == 1:
                cycle = path[path.index(k):] + [k]
                spans = [self.signals[c][1] for c in cycle[:-1]]
                lines = ", ".join(f"{sp_.path}:{sp_.line}" for sp_ in spans)
                raise PdslError.at("AlgebraicLoop", "the signals form an algebraic loop: " + " ← ".join(cycle)
                                   + f" (connect lines {lines})", spans[0],
                                   "break the loop with a state (a filter or an integrator) in one of the blocks")
            state[k] = 1
            for d in sorted(deps[k]):
                visit(d, path + [k])
            state[k] = 2
            order.append(k)

        values: dict[str, A.Expr] = {}
        try:
            for k in sorted(self.signals):
                visit(k, [])
        except PdslError as err:
            self.diags.extend(err)
            return {}
        for k in order:  # dependencies first
            values[k] = _substitute(self.signals[k][0], values)
        return values

    def _node(self, eps: list, subst: dict) -> None:
        stmt = eps[0][1]
        span = stmt.span
        ports = [(ep, self.ports[ep[1]]) for ep, _ in eps if ep[0] == "port"]
        points = [ep for ep, _ in eps if ep[0] == "point"]
        signals = [ep for ep, _ in eps if ep[0] in ("output", "input")]
        kinds = {p.kind for _, p in ports}
        if signals:
            outs = [ep for ep in signals if ep[0] == "output"]
            ins = [ep for ep in signals if ep[0] == "input"]
            if ports or points or len(outs) != 1:
                raise PdslError.at("DomainMismatch", "a signal connection joins one instance output to inputs", span,
                                   "connect `ctrl.u` with `plant.F`, or bind the input in `use plant = P(F = ctrl.u)`")
            for ep in ins:
                self.signals[ep[1]] = (self.outputs[outs[0][1]], span)
                self.out = [_drop_decl(s, ep[1]) for s in self.out]
            return
        if kinds <= {"point"}:
            if not points:
                raise PdslError.at("UnattachedPort", "these point ports are connected only to each other", span,
                                   "connect them to a body, a body point or `ground`")
            rep = points[0][1]
            for ep, _p in ports:
                subst[ep[1]] = rep
            for other in points[1:]:
                self.out.append(A.ConnectorStmt(span=span, kind="joint", args=(rep, other[1]), kwargs=()))
            return
        if points or "point" in kinds:
            a = next(p for _, p in ports if p.kind != "point")
            raise PdslError.at("DomainMismatch", f"a point cannot be connected to {a.domain} port `{a.full}`", span,
                               f"`{a.full}` is declared at {a.decl.path}:{a.decl.line}")
        domains = {p.domain for _, p in ports}
        if len(domains) > 1:
            (_, a), (_, b) = ports[0], next(x for x in ports if x[1].domain != ports[0][1].domain)
            raise PdslError.at("DomainMismatch", f"`{a.full}` is {a.domain} but `{b.full}` is {b.domain}", span,
                               f"`{a.full}` is declared at {a.decl.path}:{a.decl.line}{a.decl.chain}, `{b.full}` at "
                               f"{b.decl.path}:{b.decl.line}{b.decl.chain}")
        kin = [p for _, p in ports if p.kind == "kinematic"]
        power = [p for _, p in ports if p.kind == "power"]
        if kin and not power:  # velocities of the mechanics tied together: one tie per further port
            for other in kin[1:]:
                self.out.append(A.KinematicTieStmt(span=span, a=kin[0].full, b=other.full))
            return
        if kin:
            if len(kin) != 1:
                raise PdslError.at("NotYetSupported", "a node with several kinematic ports and power ports is not lowered "
                                   "yet", span, "tie the velocities in one `connect` and the power ports to one of them")
            k = kin[0]
            across = next(s for s in self.out if isinstance(s, A.KinematicPortStmt) and s.name == k.full).across
            if len(power) == 1:
                p = power[0]
                self.out.append(A.InterfaceStmt(span=span, port=p.full, kinematic=k.full, domain=p.domain or "",
                                                across=across, across_is="effort" if p.across_is_effort else "flow"))
                return
            # several power ports with the mechanism: their node, with the interface as one more member
            iface = f"{k.full}.node"
            self._power_node(power, span, (A.Neg(span=span, operand=A.Name(span=span, id=iface)),))
            self.out.append(A.InterfaceStmt(span=span, port=iface, kinematic=k.full, domain=power[0].domain or "",
                                            across=across, across_is="effort" if power[0].across_is_effort else "flow"))
            return
        self._power_node(power, span, ())

    def _power_node(self, power: list, span: Span, extra: tuple) -> None:
        """A node of power ports: across values equal, through values sum to zero (see below); ``extra`` members."""
        # the node is a 0-junction where the across value is the effort, a 1-junction where it is the flow — as the
        # first port's model reads it; a port of a model with the other analogy (`analogy force = flow` against the
        # default) meets the node through a unit gyrator, which swaps its effort and flow (power is kept)
        ref = power[0].across_is_effort
        kind = "common_effort" if ref else "common_flow"
        same = [p for p in power if p.across_is_effort == ref]
        members = []
        for p in power:
            if p.across_is_effort == ref:
                continue
            g = f"{p.full}.swap"
            self.out.append(A.TwoPortStmt(span=span, kind="gyrator", name=g, port_a="a", port_b="b", attrs=(),
                                          lhs=A.Name(span=span, id="e_a"), rhs=A.Name(span=span, id="f_b"), name_span=span))
            self.out.append(A.JunctionStmt(span=span, name=p.full, kind="common_effort", kind_span=span, name_span=span,
                                           members=(A.Neg(span=span, operand=A.Attr(span=span, base=A.Name(span=span, id=g),
                                                                                      name="b")),), domain=p.domain or ""))
            members.append(A.Attr(span=span, base=A.Name(span=span, id=g), name="a"))
        self.out.append(A.JunctionStmt(span=span, name=same[0].full, kind=kind, kind_span=span,
                                       members=tuple(members) + extra, name_span=span,
                                       aliases=tuple(p.full for p in same[1:]), node=True, domain=same[0].domain or ""))

    def _open_power_port(self, port: _Port) -> None:
        """A power port of the top model left open: a source with an input, so the model can run on its own.
        The port imposes its through value where its junction fixes the across value, else its across value."""
        jkind, terminal = None, False
        for s in self.out:
            if isinstance(s, A.JunctionStmt) and any(_member_name(m) == port.full for m in s.members):
                jkind = s.kind
            terminal = terminal or (isinstance(s, A.TerminalStmt) and s.name == f"{port.full}.terminal")
        # a 0-junction fixes the effort, a 1-junction the flow: impose the other variable (a first guess: the p-H
        # lowering tries the other causalities when this one does not lower); a component written in equations is
        # given its across values first (the potentials: voltages, temperatures)
        impose_effort = port.across_is_effort if terminal else jkind != "common_effort"
        name = f"{port.full}.{'effort' if impose_effort else 'flow'}"
        self.out.append(A.DeclStmt(span=port.decl, kind="input", decls=tuple(
            A.Decl(span=port.decl, name=f"{port.full}.{v}", range=None, value=None, attrs=()) for v in ("effort", "flow"))))
        self.out.append(A.SourceStmt(span=port.decl, kind="effort_source" if impose_effort else "flow_source",
                                     name=port.full, value=A.Name(span=port.decl, id=name), name_span=port.decl,
                                     open_port=True, domain=port.domain or ""))


# ====================================================================== helpers
def _declared(body) -> dict[str, str]:
    out = dict(declared_names(body))
    for s in body:
        if isinstance(s, A.JunctionStmt) and s.name:
            out[s.name] = "junction"
        elif isinstance(s, A.ConnectorStmt) and s.name:
            out[s.name] = "joint"
        elif isinstance(s, A.PortStmt):
            out.update((d.name, "port") for d in s.ports)
    return out


def _listed_sign(body, name: str) -> int | None:
    """The sign with which a junction of the model lists ``name`` (−1 for ``-name``), None if none lists it."""
    for s in body:
        if not isinstance(s, A.JunctionStmt):
            continue
        for m in s.members:
            if isinstance(m, A.Name) and m.id == name:
                return 1
            if isinstance(m, A.Neg) and isinstance(m.operand, A.Name) and m.operand.id == name:
                return -1
    return None


def _names(node) -> set[str]:
    return names_in(node)


def _uses_instance_array(stmt: A.Stmt, table: dict) -> bool:
    return any(isinstance(table.get(n), _InstArray | _Inst) for n in _names(stmt))


def _member_name(m: A.Expr) -> str | None:
    if isinstance(m, A.Neg):
        m = m.operand
    return m.id if isinstance(m, A.Name) else None


def _text(e) -> str:
    """A span-free rendering of an expression (to recognise the same point written twice)."""
    return _rebuild(e, None, _text_step)


def _text_step(e, _ctx):
    if isinstance(e, A.Name):
        return e.id, None
    if isinstance(e, A.Num):
        return repr(e.value), None
    if isinstance(e, A.Expr):
        parts = [type(e).__name__]
        children = []
        for f in fields(e):
            if f.name == "span":
                continue
            v = getattr(e, f.name)
            if isinstance(v, A.Expr | tuple):
                parts.append(None)
                children.append((v, None))
            else:
                parts.append(repr(v))

        def build(texts, parts=parts):
            it = iter(texts)
            return "(" + " ".join(next(it) if p is None else p for p in parts) + ")"
        return build, children
    if isinstance(e, tuple):
        return (lambda texts: "[" + ",".join(texts) + "]"), [(x, None) for x in e]
    return repr(e), None


def _substitute(node, subst: Mapping[str, A.Expr]):
    """Replace names (point-port aliases, signal inputs) everywhere in a statement (iteratively)."""
    return _rebuild(node, subst, _substitute_step)


def _substitute_step(node, subst):
    if isinstance(node, A.Name):
        return subst.get(node.id, node), None
    if isinstance(node, tuple):
        return (lambda new, old=node: old if all(a is b for a, b in zip(new, old)) else tuple(new)), [(x, subst) for x in node]
    if isinstance(node, A.Expr | A.Stmt | A.Decl | A.KwArg | A.Range | A.Loop | A.Attribute):
        names = [f.name for f in fields(node)
                 if isinstance(getattr(node, f.name), A.Expr | tuple | A.Decl | A.KwArg | A.Range | A.Loop | A.Attribute)]

        def build(new, node=node, names=names):
            changes = {n: v for n, v in zip(names, new) if v is not getattr(node, n)}
            return replace(node, **changes) if changes else node
        return build, [(getattr(node, n), subst) for n in names]
    return node, None


def _builder(node, names):
    """Rebuild ``node`` with new values of the fields ``names`` (in order)."""
    return lambda values: replace(node, **dict(zip(names, values)))


def _rebuild(root, ctx, step):
    """A bottom-up rebuild of a tree without recursion (a long sum is a left chain thousands of nodes deep).

    ``step(node, ctx)`` returns ``(value, None)`` for a finished node, or ``(build, children)`` with
    ``children`` a list of ``(child, ctx)``: the children are rebuilt in order, then ``build(values)``."""
    results: list = []
    stack: list = [(False, root, ctx)]
    while stack:
        built, a, b = stack.pop()
        if built:  # a: the build function, b: how many results are its children
            k = len(results) - b
            values = results[k:]
            del results[k:]
            results.append(a(values))
            continue
        value, children = step(a, b)
        if children is None:
            results.append(value)
            continue
        stack.append((True, value, len(children)))
        stack.extend((False, child, c) for child, c in reversed(children))
    return results[0]


def _drop_decl(stmt: A.Stmt, name: str) -> A.Stmt:
    if isinstance(stmt, A.DeclStmt) and any(d.name == name for d in stmt.decls):
        return replace(stmt, decls=tuple(d for d in stmt.decls if d.name != name))
    return stmt

