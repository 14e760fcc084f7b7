"""AST -> :class:`Model`: bind names, substitute constants, expand arrays and loops.

Two passes over a model's statements: declarations first (order in the file
does not matter), then everything that uses them. Errors are collected per
statement and raised together.
"""

from __future__ import annotations

import gc
import itertools
from collections import ChainMap
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator, Mapping

import sympy as sp

from .. import symbols as S
from ..diagnostics import Collector, PdslError, Span
from ..parse import ast as A
from ..parse.queries import RESERVED as _RESERVED
from ..parse.queries import composition_names as _composition_names
from ..parse.queries import declared_names as _declared_names
from ..parse.queries import names_in as _names_in
from . import model as M
from . import templates as _templates  # noqa: F401 - installs the index templates of long sums
from .mechanics import MechanicsStatements
from .neural import NeuralStatements
from .ph_statements import PortHamiltonianStatements
from .plain import PlainStatements
from .common import (
    MAX_ARRAY,
    _ConstView,
    _DRAW,
    _Decl,
    _NOT_YET_SUPPORTED,
    _NOT_YET_SUPPORTED_NAMES,
    _NotConstantView,
    _PendingOutput,
    _shape_text,
)
from .expressions import (
    ArrayRef,
    BodyRef,
    Evaluator,
    Scope,
    Unusable,
    as_number,
    float_value,
    int_value,
)

__all__ = ["resolve", "resolve_models"]

# The resolver's one dispatch table, by domain: statement type -> the method that resolves it in pass 2 (after every
# declaration is known). The methods live in the domain modules that _Resolver mixes in, as lowering is split by
# formalism. A new statement: a row here, a method in its domain's module (a declaration also a row in DECLARATIONS).
STATEMENTS: Mapping[type, str] = {
    # plain (pdsl.resolve.plain)
    A.EquationStmt: "_equation",
    A.ConstraintStmt: "_constraint",
    A.WhenStmt: "_when",
    A.LagrangianStmt: "_single",
    A.HamiltonianStmt: "_single",
    # mechanics (pdsl.resolve.mechanics)
    A.ConnectorStmt: "_connector",
    A.GravityStmt: "_gravity",
    A.PotentialStmt: "_potential",
    A.ForceStmt: "_force",
    A.InterfaceStmt: "_interface",
    A.KinematicTieStmt: "_tie",
    A.TerminalStmt: "_terminal",
    A.GroupStmt: "_group",
    # port-Hamiltonian (pdsl.resolve.ph_statements)
    A.StoreStmt: "_ph_element",
    A.ResistiveStmt: "_ph_element",
    A.SourceStmt: "_ph_element",
    A.TwoPortStmt: "_ph_element",
    A.JunctionStmt: "_ph_element",
    A.StructureStmt: "_ph_element",
    A.PowerPortStmt: "_declared_in_pass_1",  # _declare_power_ports
    # neural (pdsl.resolve.neural)
    A.ConstraintLearnStmt: "_learned_constraint",
    A.DistributionStmt: "_pending_distribution",
}
# pass 1: the statements that declare names usable anywhere in the model (order in the file is free)
DECLARATIONS: Mapping[type, str] = {
    A.DeclStmt: "_declare",
    A.NNStmt: "_declare_nn",
    A.ConstraintLearnStmt: "_declare_learned_constraint",
    A.DistributionStmt: "_declare_distribution",
    A.BodyStmt: "_declare_body",
}


def resolve_models(file: A.File, const_overrides: Mapping[str, int] | None = None) -> tuple[M.Model, ...]:
    """Resolve every model of a composed file (errors of all models are collected); ``const_overrides``
    (``--const``) must each name a const that some model of the file declares."""
    diags = Collector()
    seen: dict[str, A.ModelDef] = {}
    models = []
    for m in file.models:
        if m.name in seen:
            diags.error(
                "DuplicateDefinition",
                f"model `{m.name}` is defined twice (first at line {seen[m.name].span.line})",
                m.name_span,
            )
            continue
        seen[m.name] = m
        try:
            models.append(resolve(m, const_overrides or {}))
        except PdslError as err:
            diags.extend(err)
    if const_overrides:
        known = {n for m in file.models for s in m.body if isinstance(s, A.DeclStmt) and s.kind == "const" for n in (d.name for d in s.decls)}
        hint = "consts of this file: " + ", ".join(sorted(known)) if known else "this file declares no `const`"
        for name in const_overrides:
            if name not in known:
                diags.error("UnknownName", f"--const {name}: no model in {file.path} declares a const `{name}`", hint=hint)
    diags.raise_if_any()
    return tuple(models)


def resolve(m: A.ModelDef, const_overrides: Mapping[str, int] | None = None) -> M.Model:
    from .units import check_units  # units of measure: checked on the AST, attached to the model

    from .expressions import sum_budget

    with gc_paused(), sum_budget():
        return check_units(m, _Resolver(m, dict(const_overrides or {})).run())


@contextmanager
def gc_paused():
    """No cyclic garbage collection while a model is resolved. Resolving builds ~10^6 sympy objects for a large
    model (Cucker–Smale N = 200), nearly all of them kept: each full collection walks all of them, and at N = 200
    these collections were 75 % of the resolve time (7.6 s against 1.7 s). Resolving makes next to no cyclic
    garbage; the collector runs as usual afterwards."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
            if gc.get_count()[0] > _GC_YOUNG_MAX:
                # one full collection now moves the new objects to the oldest generation; left in the youngest,
                # the next three collections (young, middle, full) would each walk all of them
                gc.collect()


_GC_YOUNG_MAX = 200_000  # objects made while resolving above which the collection runs at once (large models only)


@dataclass
class _Resolver(PlainStatements, MechanicsStatements, PortHamiltonianStatements, NeuralStatements):
    """One model's resolution: the state every domain shares, the two passes, scopes, loops, consts and
    declarations; each domain's statements are methods of its mixin (see STATEMENTS)."""

    ast: A.ModelDef
    const_overrides: dict[str, int]
    diags: Collector = field(default_factory=Collector)
    names: dict[str, _Decl] = field(default_factory=dict)
    consts: dict[str, int] = field(default_factory=dict)
    nn_inputs: dict[str, tuple[int, Span]] = field(default_factory=dict)
    space: int = 3
    _pending: list = field(default_factory=list)  # (kind, Decl) whose values are resolved last
    _nn_specs: dict = field(default_factory=dict)
    _distributions: list = field(default_factory=list)  # `distribution learn` statements, built after pass 2
    _bodies_pending: list = field(default_factory=list)
    declared: dict[str, str] = field(default_factory=dict)  # every name the model declares -> its kind
    composition: set[str] = field(default_factory=set)  # names made by `port` and `use` (not lowered yet)
    _targets: set | None = None  # cache of _der_targets()
    _failed_params: set = field(default_factory=set)  # symbols of params whose value was an error
    _scope_cache: dict = field(default_factory=dict)  # allow_der -> (key, Scope) of _scope()

    # ================================================================== driver
    def run(self) -> M.Model:
        body = self.ast.body
        self.declared = _declared_names(body)
        self.composition = _composition_names(body)
        self._resolve_consts(body)
        self._resolve_space(body)
        out: dict[str, list] = {k: [] for k in (
            "params", "inputs", "outputs", "variables", "neural", "equations", "constraints",
            "bodies", "connectors", "gravity", "potentials", "forces", "generalized_forces", "elements", "unsupported",
            "interfaces", "ties", "groups", "events", "drawn_points", "drawn_lines",
        )}
        single: dict[str, M.Located | None] = {"lagrangian": None, "hamiltonian": None}
        # pass 1: declarations (names usable anywhere in the model)
        decl_handlers = {kind: getattr(self, method) for kind, method in DECLARATIONS.items()}
        for stmt in body:
            h = decl_handlers.get(type(stmt))
            if h is None:
                continue
            if isinstance(stmt, A.DeclStmt) and stmt.kind == "const":
                continue
            self._guard(h, stmt, out)
        self._declare_elements(body)
        self._guard(self._declare_power_ports, body, out)
        for stmt in body:  # named joints, then kinematic ports (their velocities may use the joints)
            if isinstance(stmt, A.ConnectorStmt) and stmt.name:
                self._guard(self._declare_joint, stmt)
        for stmt in body:
            if isinstance(stmt, A.KinematicPortStmt):
                self._guard(self._declare_kinematic_port, stmt)
        # pass 2: everything that uses names
        for stmt in body:
            declared_only = type(stmt) in decl_handlers and not isinstance(stmt, A.ConstraintLearnStmt | A.DistributionStmt)
            if declared_only or isinstance(stmt, A.SpaceStmt | A.KinematicPortStmt | _DRAW) or self._uses_composition(stmt):
                continue
            self._guard(self._statement, stmt, out, single)
        for stmt in self._distributions:  # after the group is known
            self._guard(self._distribution, stmt, out)
        draws = [s for s in body if isinstance(s, _DRAW) and not self._uses_composition(s)]
        if draws:  # the picture (LANGUAGE.md §13): points, then the lines through them
            from .drawing import resolve_drawing

            resolve_drawing(self, draws, out)
        # deferred: values of params/inputs/outputs (they may use any name)
        self._guard(self._finish_decls, None, out)
        self._check_neural_used(out)
        self.diags.raise_if_any()
        return M.Model(
            name=self.ast.name,
            doc=self.ast.doc,
            path=self.ast.span.path,
            span=self.ast.span,
            consts=dict(self.consts),
            space=self.space,
            lagrangian=single["lagrangian"],
            hamiltonian=single["hamiltonian"],
            **{k: tuple(v) for k, v in out.items()},
        )

    def _uses_composition(self, stmt: A.Stmt) -> bool:
        """A statement about a `port` or `use` instance waits for composition (already reported)."""
        return not isinstance(stmt, _NOT_YET_SUPPORTED) and bool(_names_in(stmt) & self.composition)

    def _guard(self, fn, stmt, *args):
        try:
            fn(stmt, *args)
        except PdslError as err:
            self.diags.extend(err)

    # ================================================================== scope
    def _scope(self, *, allow_der: bool = True) -> Scope:
        """The names of the model, built once and shared until a name, const or the space changes
        (a fresh one per statement made resolving quadratic in the number of declarations)."""
        key = (len(self.names), len(self.consts), self.space)
        cached = self._scope_cache.get(allow_der)
        if cached is None or cached[0] != key:
            cached = self._scope_cache[allow_der] = (key, self._build_scope(allow_der))
        return cached[1]

    def _build_scope(self, allow_der: bool) -> Scope:
        names = {n: d.value for n, d in self.names.items() if d.kind != "output"}
        names.update({k: sp.Integer(v) for k, v in self.consts.items()})
        names["t"] = S.TIME
        names["ground"] = BodyRef(None, (), (), self.space)
        known = {
            n: Unusable(
                "NotAllowedHere",
                f"`{n}` is an output: it is computed from the model and cannot be used inside it",
                "use the expression itself, or make it a `var` with an equation",
            )
            for n, d in self.names.items()
            if d.kind == "output"
        }
        known.update({n: Unusable("NotAllowedHere", f"`{n}` is a drawn point: only `draw line` uses it",
                                  "use the position's expression itself, or declare a `var` for it")
                      for n, kind in self.declared.items() if kind == "drawn point"})
        return Scope(ChainMap(names), der_of=self._der_of if allow_der else None, known=ChainMap(known))

    def _const_scope(self, extra: Mapping[str, object] | None = None) -> Scope:
        """Only numbers, consts and loop variables (array bounds, defaults).

        Read-only views of the consts and of the declared names, made in O(1): a scope is made per
        default value and array bound, and copying every name each time was quadratic.
        """
        names = ChainMap(dict(extra or {}), _ConstView(self.consts))
        return Scope(names, der_of=None, known=_NotConstantView(self.declared))

    def _ev(self, bindings: Mapping[str, object] | None = None, *, allow_der: bool = True) -> Evaluator:
        ev = Evaluator(self._scope(allow_der=allow_der), self.nn_inputs)
        return ev.with_names(dict(bindings)) if bindings else ev

    def _der_of(self, value, span: Span):
        """``der(v)``: the derivative symbol of a variable or body coordinate (or vector of them)."""
        if isinstance(value, BodyRef | ArrayRef):
            value = value.as_value()
        if isinstance(value, sp.MatrixBase):
            return value.applyfunc(lambda x: self._der_of(x, span))
        if isinstance(value, sp.Symbol) and value in self._der_targets():
            return S.der(value)
        if isinstance(value, sp.Expr) and not isinstance(value, sp.Symbol) and value.free_symbols & self._der_targets():
            return self._chain_rule(value, span)
        if isinstance(value, sp.Symbol) and S.is_der(value):
            raise PdslError.at(
                "BadDerivative",
                f"`der(der(...))`: second derivatives are not written directly",
                span,
                "introduce a velocity variable (var v; der(x) = v) or use `coord` with a `lagrangian`",
            )
        raise PdslError.at(
            "BadDerivative",
            f"`der(...)` takes a state variable (var, coord, momentum or a body coordinate), not `{value}`",
            span,
        )

    def _chain_rule(self, value: sp.Expr, span: Span) -> sp.Expr:
        """``der(norm(b2 - b1))``: Σ ∂v/∂x·der(x) over the states in v (+ ∂v/∂t); parameters are constant."""
        targets = value.free_symbols & self._der_targets()
        params = {d.value for d in self.names.values() if d.kind == "param" and isinstance(d.value, sp.Symbol)}
        params |= {x for d in self.names.values() if d.kind == "param" and isinstance(d.value, ArrayRef) for x in d.value.items}
        other = value.free_symbols - targets - params - {S.TIME}
        if other:
            names = ", ".join(sorted(f"`{x}`" for x in other))
            raise PdslError.at("BadDerivative", f"`der(...)` of an expression of {names}, whose derivative is not known "
                               "(inputs, der(...) terms)", span, "der(...) of an expression may use states, parameters and t")
        out = sp.diff(value, S.TIME) if S.TIME in value.free_symbols else sp.Integer(0)
        for x in sorted(targets, key=lambda s: s.name):
            out += sp.diff(value, x) * S.der(x)
        return out

    def _der_targets(self) -> set:
        """Every symbol ``der`` applies to (cached: it is asked once per ``der`` in the model)."""
        if self._targets is None:
            self._targets = self._collect_der_targets()
        return self._targets

    def _collect_der_targets(self) -> set:
        out = set()
        for d in self.names.values():
            if d.kind in ("var", "coord", "momentum"):
                v = d.value
                out.update(v.items if isinstance(v, ArrayRef) else [v])
            elif d.kind == "body":
                refs = d.value.items if isinstance(d.value, ArrayRef) else [d.value]
                for r in refs:
                    out.update(c for node in r.nodes for c in node)
        return out

    def _bind(self, name: str, kind: str, span: Span, value) -> None:
        if name in _RESERVED:
            raise PdslError.at("ReservedName", f"`{name}` is a built-in name and cannot be redeclared", span)
        prev = self.names.get(name)
        if prev is not None or name in self.consts:
            where = f"on line {prev.span.line}" if prev else "as a `const`"
            raise PdslError.at(
                "DuplicateDefinition",
                f"`{name}` is already declared {where}",
                span,
                "every name in a model is declared once",
            )
        self.names[name] = _Decl(kind, span, value)
        self._targets = None

    # ================================================================== loops
    def _expand(self, loops: tuple[A.Loop, ...]) -> list[dict]:
        """The loop bindings of a statement, refusing an expansion too large to be meant."""
        bindings = list(itertools.islice(self._bindings(loops), MAX_ARRAY + 1))
        if len(bindings) > MAX_ARRAY:
            raise PdslError.at(
                "BadArrayBounds", f"this `for` clause repeats the statement more than {MAX_ARRAY} times", loops[0].span
            )
        return bindings

    def _bindings(self, loops: tuple[A.Loop, ...], base: Mapping[str, object] | None = None) -> Iterator[dict]:
        """All combinations of loop variables; later bounds may use earlier variables."""
        base = dict(base or {})
        if not loops:
            yield base
            return
        head, rest = loops[0], loops[1:]
        scope = self._const_scope(base)
        if head.var in base:
            raise PdslError.at("DuplicateDefinition", f"the loop variable `{head.var}` appears twice in this `for` clause", head.span)
        if head.var in self.declared or head.var in self.consts or head.var in _RESERVED:
            raise PdslError.at(
                "DuplicateDefinition", f"the loop variable `{head.var}` is already a name in this model", head.span,
                "choose an index name that the model does not use, such as `i` or `j`",
            )
        lo = int_value(Evaluator(scope).eval(head.lo), head.lo.span, "a loop bound")
        hi = int_value(Evaluator(scope).eval(head.hi), head.hi.span, "a loop bound")
        if hi - lo + 1 > MAX_ARRAY:
            raise PdslError.at("BadArrayBounds", f"the loop {lo}..{hi} is too long", head.span)
        for i in range(lo, hi + 1):
            yield from self._bindings(rest, {**base, head.var: sp.Integer(i)})

    def _range(self, rng: A.Range, what: str) -> tuple[int, int]:
        ev = Evaluator(self._const_scope())
        lo = int_value(ev.eval(rng.lo), rng.lo.span, "an array bound")
        hi = int_value(ev.eval(rng.hi), rng.hi.span, "an array bound")
        if hi < lo:
            raise PdslError.at(
                "BadArrayBounds", f"{what} has bounds {lo}..{hi}: the upper bound is below the lower one", rng.span
            )
        if hi - lo + 1 > MAX_ARRAY:
            raise PdslError.at("BadArrayBounds", f"{what} has {hi - lo + 1} elements (limit {MAX_ARRAY})", rng.span)
        return lo, hi

    # ================================================================== consts, space
    def _resolve_consts(self, body) -> None:
        decls = self._const_decls(body)
        cyclic: set[str] = set()
        for name in decls:
            if name in cyclic:
                continue
            try:
                self._const_value(name, decls, (), cyclic)
            except PdslError as err:
                self.diags.extend(err)

    def _const_decls(self, body) -> dict[str, A.Decl]:
        decls: dict[str, A.Decl] = {}
        for stmt in body:
            if not (isinstance(stmt, A.DeclStmt) and stmt.kind == "const"):
                continue
            if stmt.loops:
                self.diags.error("BadLoop", "`const` declarations cannot have a `for` clause", stmt.loops[0].span)
            for d in stmt.decls:
                if d.name in _RESERVED:
                    self.diags.error("ReservedName", f"`{d.name}` is a built-in name and cannot be redeclared", d.span)
                elif d.name in decls:
                    self.diags.error(
                        "DuplicateDefinition", f"const `{d.name}` is already declared on line {decls[d.name].span.line}", d.span
                    )
                elif d.range or d.attrs or d.value is None:
                    self.diags.error(
                        "BadDeclaration", f"const `{d.name}` needs a single integer value: `const {d.name} = 3`", d.span
                    )
                else:
                    decls[d.name] = d
        return decls

    def _const_value(self, name: str, decls: Mapping[str, A.Decl], chain: tuple[str, ...], cyclic: set[str]) -> int:
        """The value of a const (an override wins), evaluating the consts it uses first."""
        if name in self.consts:
            return self.consts[name]
        if name in self.const_overrides:
            self.consts[name] = int(self.const_overrides[name])
            return self.consts[name]
        d = decls[name]
        if name in chain:
            loop = chain[chain.index(name):] + (name,)
            cyclic.update(loop)
            raise PdslError.at(
                "CyclicDefinition",
                f"const `{name}` is defined in terms of itself ({' -> '.join(loop)})",
                d.span,
                "a const is a number or an expression of other consts, without cycles",
            )
        deps = {n: sp.Integer(self._const_value(n, decls, chain + (name,), cyclic)) for n in sorted(_names_in(d.value)) if n in decls}
        value = int_value(Evaluator(self._const_scope(deps)).eval(d.value), d.value.span, f"const `{name}`")
        self.consts[name] = value
        return value

    def _resolve_space(self, body) -> None:
        spaces = [s for s in body if isinstance(s, A.SpaceStmt)]
        for extra in spaces[1:]:
            self.diags.error("DuplicateDefinition", "`space` is given twice", extra.span)
        if spaces:
            s = spaces[0]
            try:
                dim = int_value(Evaluator(self._const_scope()).eval(s.dim), s.dim.span, "the space dimension")
            except PdslError as err:
                self.diags.extend(err)
                return
            if dim not in (1, 2, 3):
                self.diags.error("BadDimension", f"`space {dim}`: the ambient dimension must be 1, 2 or 3", s.dim.span)
                return
            self.space = dim

    # ================================================================== declarations
    def _declare(self, stmt: A.DeclStmt, out) -> None:
        if stmt.loops:
            raise PdslError.at(
                "BadLoop", f"`{stmt.kind}` declarations cannot have a `for` clause", stmt.loops[0].span,
                "declare an array instead: `param m[1..N] = 1.0`",
            )
        for d in stmt.decls:
            try:
                self._declare_one(stmt.kind, d)
            except PdslError as err:
                self.diags.extend(err)

    def _declare_one(self, kind: str, d: A.Decl) -> None:
        allowed_attrs = {"param": {"free", "fixed", "lower", "upper", "unit"}}.get(kind, {"unit"})
        for a in d.attrs:
            if a.name not in allowed_attrs:
                raise PdslError.at(
                    "UnknownAttribute",
                    f"`{a.name}` is not an attribute of a {kind}",
                    a.span,
                    'params accept {free, fixed, lower = ..., upper = ..., unit = "..."}' if kind == "param"
                    else f'a {kind} accepts {{unit = "..."}}',
                )
        if kind in ("output",) and d.value is None:
            raise PdslError.at("BadDeclaration", f"output `{d.name}` needs a value: `output {d.name} = expr`", d.span)
        if kind == "param" and d.value is None:
            raise PdslError.at("BadDeclaration", f"param `{d.name}` needs a default value: `param {d.name} = 1.0`", d.span)
        if d.range is None:
            value = S.sym(d.name)
        else:
            lo, hi = self._range(d.range, f"`{d.name}`")
            value = ArrayRef(d.name, lo, tuple(S.sym(f"{d.name}[{i}]") for i in range(lo, hi + 1)))
        if kind == "output":
            value = _PendingOutput(d.name)
        self._bind(d.name, kind, d.span, value)
        self._pending.append((kind, d))

    def _element_index(self, expr: A.Expr, bind) -> int:
        return int_value(Evaluator(self._const_scope(bind)).eval(expr), expr.span, "an element index")

    def _element_name(self, name: str, index: tuple, bind) -> str:
        """The name of the element a statement declares in one iteration of its loop: ``cap`` or ``cap[3]``."""
        return f"{name}[{self._element_index(index[0], bind)}]" if index else name

    # ================================================================== deferred values
    def _finish_decls(self, _stmt, out) -> None:
        for kind, d in self._pending:
            try:
                self._finish_decl(kind, d, out)
            except PdslError as err:
                self.diags.extend(err)
                if kind == "param":  # reported once: a mass `m` is not then also "not constant"
                    self._failed_params.update(symbol for _, symbol, _ in self._elements_of(d))
        for stmt, indices, refs in self._bodies_pending:
            try:
                self._finish_body(stmt, indices, refs, out)
            except PdslError as err:
                self.diags.extend(err)
        for name, (stmt, hidden, act, n_out, fn, acts, dropout, init) in self._nn_specs.items():
            n_in = self.nn_inputs.get(name, (None,))[0]
            out["neural"].append(
                M.Neural(name=name, arch=stmt.arch, hidden=hidden, act=act, n_out=n_out, n_in=n_in, fn=fn, span=stmt.span,
                         acts=acts, dropout=dropout, init=init)
            )

    def _elements_of(self, d: A.Decl):
        v = self.names[d.name].value
        if isinstance(v, ArrayRef):
            return [(f"{d.name}[{v.lo + k}]", s, {"i": sp.Integer(v.lo + k)}) for k, s in enumerate(v.items)]
        return [(d.name, v, {})]

    def _finish_decl(self, kind: str, d: A.Decl, out) -> None:
        if kind == "param":
            free = any(a.name == "free" for a in d.attrs)
            bounds = {"lower": None, "upper": None}
            for a in d.attrs:
                if a.name in bounds:
                    if a.value is None:
                        raise PdslError.at("BadAttribute", f"`{a.name}` needs a value: `{a.name} = 0`", a.span)
                    bounds[a.name] = float_value(Evaluator(self._const_scope()).eval(a.value), a.value.span, f"`{a.name}`")
                elif a.value is not None and a.name != "unit":  # the unit: pdsl.resolve.units
                    raise PdslError.at("BadAttribute", f"`{a.name}` is a flag and takes no value", a.span)
            if bounds["lower"] is not None and bounds["upper"] is not None and bounds["lower"] > bounds["upper"]:
                raise PdslError.at("BadBounds", f"param `{d.name}` has lower > upper", d.span)
            defaults = self._defaults(d)
            for (name, symbol, _), default in zip(self._elements_of(d), defaults):
                lo, hi = bounds["lower"], bounds["upper"]
                if (lo is not None and default < lo) or (hi is not None and default > hi):
                    raise PdslError.at("BadBounds", f"the default {default} of `{name}` is outside its bounds", d.value.span)
                out["params"].append(
                    M.Param(name=name, symbol=symbol, default=default, lower=lo, upper=hi, free=free, span=d.span)
                )
        elif kind in ("var", "coord", "momentum"):
            starts = self._defaults(d) if d.value is not None else [None] * len(self._elements_of(d))
            for (name, symbol, _), start in zip(self._elements_of(d), starts):
                out["variables"].append(M.Variable(name=name, kind=kind, symbol=symbol, start=start, span=d.span))
        elif kind == "input":
            for name, symbol, bind in self._elements_of(d):
                law = None
                if d.value is not None:
                    law = self._ev(bind).scalar(d.value, f"the law of input `{name}`")
                    if symbol in law.free_symbols:
                        raise PdslError.at("CyclicDefinition", f"input `{name}` is defined in terms of itself", d.value.span)
                out["inputs"].append(M.Input(name=name, symbol=symbol, law=law, span=d.span))
        elif kind == "output":
            expr = self._output_value(d.name, set())
            if isinstance(expr, sp.MatrixBase):
                for k, e in enumerate(expr):
                    out["outputs"].append(M.Output(name=f"{d.name}[{k + 1}]", expr=e, span=d.span))
            else:
                out["outputs"].append(M.Output(name=d.name, expr=expr, span=d.span))

    def _output_value(self, name: str, visiting: set):
        d = next(dd for k, dd in self._pending if k == "output" and dd.name == name)
        if name in visiting:
            raise PdslError.at("CyclicDefinition", f"output `{name}` is defined in terms of itself", d.span)
        visiting.add(name)
        ev = self._ev()
        deps = {n: self._output_value(n, visiting) for n in _names_in(d.value) if n in self.names and self.names[n].kind == "output"}
        value = ev.with_names(deps).number(d.value) if deps else ev.number(d.value)
        visiting.discard(name)
        return value

    def _defaults(self, d: A.Decl) -> list[float]:
        n = len(self._elements_of(d))
        ev = Evaluator(self._const_scope())
        v = ev.eval(d.value)
        v = as_number(v, d.value.span)
        if isinstance(v, sp.MatrixBase):
            if d.range is None:
                raise PdslError.at("TypeMismatch", f"`{d.name}` is a scalar but its value is an array", d.value.span)
            if v.shape[1] != 1:
                raise PdslError.at("TypeMismatch", f"`{d.name}` is a 1-D array but its value is a {_shape_text(v)} matrix", d.value.span)
            if v.shape[0] != n:
                raise PdslError.at(
                    "WrongArity", f"`{d.name}` has {n} elements but {v.shape[0]} values are given", d.value.span,
                    "give one value per element, or a single value for all",
                )
            return [float_value(x, d.value.span, f"the value of `{d.name}`") for x in v]
        x = float_value(v, d.value.span, f"the value of `{d.name}`")
        return [x] * n

    # ================================================================== statements
    def _statement(self, stmt: A.Stmt, out, single) -> None:
        method = STATEMENTS.get(type(stmt))
        handler = None if method is None else getattr(self, method)
        if handler is None:
            self._unsupported(stmt, out)
            return
        if isinstance(stmt, A.LagrangianStmt | A.HamiltonianStmt):
            handler(stmt, out, single)
            return
        for bind in self._expand(stmt.loops):
            handler(stmt, bind, out)

    def _declared_in_pass_1(self, stmt, bind, out) -> None:
        """Nothing left to do in pass 2 (the statement was resolved with the declarations)."""

    def _unsupported(self, stmt: A.Stmt, out) -> None:
        what = _NOT_YET_SUPPORTED_NAMES[type(stmt)]
        raise PdslError.at(
            "NotYetSupported",
            f"{what} is part of the language but not implemented yet",
            stmt.span,
            "see docs/language.md for what this release lowers",
        )
