"""AST -> :class:`Model`: bind names, substitute constants, expand arrays and loops.

Two passes over a model's statements: declarations first (order in the file
does not matter), then everything that uses them. Errors are collected per
statement and raised together.
"""

from __future__ import annotations

import dataclasses
import difflib
import gc
import itertools
import sys
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
from .port_hamiltonian import JUNCTION_KINDS, port_symbols, resolve_ph
from .expressions import (
    ArrayRef,
    IndexedArray,
    BodyRef,
    ElementRef,
    Evaluator,
    JointRef,
    NeuralRef,
    SliderRef,
    PortRef,
    Scope,
    Unusable,
    as_number,
    float_value,
    int_value,
)

__all__ = ["resolve", "resolve_file", "resolve_models"]

MAX_ARRAY = 100_000
_ACTIVATIONS = ("tanh", "relu", "softplus", "sin", "elu", "gelu", "sigmoid", "identity")
_PH_KINDS = ("flow_store", "effort_store", "resistive", "flow_source", "effort_source", "transformer", "gyrator")

# Keyword options of each connector: name -> required?
_CONNECTOR_OPTIONS: Mapping[str, Mapping[str, bool]] = {
    "link": {"length": False},
    "joint": {},
    "hinge": {"axis": True},
    "slider": {"axis": True},
    "spring": {"k": True, "rest": False},
    "damper": {"c": True},
}


def resolve_file(file: A.File, const_overrides: Mapping[str, int] | None = None) -> tuple[M.Model, ...]:
    """Compose, then resolve, every model of a file: the two stages in one call, for callers that start from a
    parsed file (the pipeline names them apart: :func:`pdsl.pipeline.load_models`)."""
    from ..compose import compose  # an earlier stage: resolve may call it, compose never imports resolve

    return resolve_models(compose(file, const_overrides), const_overrides)


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
class _Decl:
    kind: str
    span: Span
    value: object  # what the name denotes in expressions


@dataclass
class _Resolver:
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
        decl_handlers = {
            A.DeclStmt: self._declare,
            A.NNStmt: self._declare_nn,
            A.ConstraintLearnStmt: self._declare_learned_constraint,
            A.DistributionStmt: self._declare_distribution,
            A.BodyStmt: self._declare_body,
        }
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

    def _declare_nn(self, stmt: A.NNStmt, out) -> None:
        if stmt.loops:
            raise PdslError.at("BadLoop", "`nn` declarations cannot have a `for` clause", stmt.loops[0].span)
        if stmt.arch != "mlp":
            raise PdslError.at("UnknownArchitecture", f"unknown network architecture `{stmt.arch}`", stmt.span, "available: mlp")
        if stmt.args:
            raise PdslError.at("WrongArity", "`mlp` takes only keyword arguments", stmt.args[0].span)
        opts = {"hidden": None, "act": None, "out": None, "out_act": None, "dropout": None, "init": None}
        for kw in stmt.kwargs:
            if kw.name not in opts:
                raise PdslError.at("UnknownArgument", f"`mlp` has no argument `{kw.name}`", kw.span,
                                   "mlp(hidden = [64, 64], act = tanh, out = 1, dropout = 0.2, init = orthogonal); "
                                   "act may list one activation per hidden layer")
            if opts[kw.name] is not None:  # reported; the first one is used and the network still declared
                self.diags.extend(PdslError.at("DuplicateDefinition", f"`{kw.name}` is given twice", kw.span))
                continue
            opts[kw.name] = kw
        hidden: tuple[int, ...] = (64, 64)
        if opts["hidden"] is not None:
            v = opts["hidden"].value
            items = v.items if isinstance(v, A.Vector) else (v,)
            ev = Evaluator(self._const_scope())
            hidden = tuple(int_value(ev.eval(i), i.span, "a hidden layer width") for i in items)
            if any(h < 1 or h > 100_000 for h in hidden):
                raise PdslError.at("BadArgument", "hidden layer widths must be between 1 and 100000", v.span)

        def activation(v) -> str:
            if not isinstance(v, A.Name) or v.id not in _ACTIVATIONS:
                raise PdslError.at("BadArgument", "unknown activation", v.span, "one of: " + ", ".join(_ACTIVATIONS))
            return v.id

        act, acts = "tanh", ()
        if opts["act"] is not None:
            v = opts["act"].value
            if isinstance(v, A.Vector):  # one per hidden layer; one more sets the output layer's
                names = [activation(i) for i in v.items]
                if len(names) not in (len(hidden), len(hidden) + 1):
                    raise PdslError.at("BadArgument", f"{len(names)} activations for {len(hidden)} hidden layers", v.span,
                                       f"give {len(hidden)} (one per hidden layer) or {len(hidden) + 1} (the last for the output layer)")
                acts = (*names, "identity") if len(names) == len(hidden) else tuple(names)
            else:
                act = activation(v)
        if opts["out_act"] is not None:
            if len(acts) == len(hidden) + 1 and opts["act"] is not None and len(opts["act"].value.items) == len(hidden) + 1:
                raise PdslError.at("DuplicateDefinition", "the output activation is given twice (last entry of `act` and `out_act`)",
                                   opts["out_act"].span)
            out_act = activation(opts["out_act"].value)
            acts = (*(acts[:-1] if acts else [act] * len(hidden)), out_act)
        if acts and len(set(acts[:-1])) == 1 and acts[-1] == "identity":
            act, acts = acts[0], ()  # the uniform case keeps its simple form
        elif acts:
            act = "[" + ", ".join(acts) + "]"
        n_out = 1
        if opts["out"] is not None:
            v = opts["out"].value
            n_out = int_value(Evaluator(self._const_scope()).eval(v), v.span, "the output size")
            if not 1 <= n_out <= 100_000:
                raise PdslError.at("BadArgument", "the output size must be at least 1", v.span)
        # Training-only settings: an error in one is reported and its default used, so the network is still
        # declared and its calls do not add "unknown function" errors.
        dropout = 0.0  # the rate after every hidden layer (pdsl fit, torch backend)
        init = "uniform"  # the weights' initial draw (pdsl.backend.neural.init_weights)
        try:
            if opts["dropout"] is not None:
                v = opts["dropout"].value
                rate = float_value(Evaluator(self._const_scope()).eval(v), v.span, "the dropout rate")
                if not 0 <= rate < 1:
                    raise PdslError.at("BadArgument", f"the dropout rate must be in [0, 1), got {rate:g}", v.span)
                dropout = rate
        except PdslError as err:
            self.diags.extend(err)
        if opts["init"] is not None:
            v = opts["init"].value
            if isinstance(v, A.Name) and v.id in M.WEIGHT_INITS:
                init = v.id
            else:
                self.diags.extend(PdslError.at("BadArgument", "unknown weight initialisation", v.span,
                                               "one of: " + ", ".join(M.WEIGHT_INITS)))
        fn = sp.Function(f"nn_{stmt.name}")
        self._bind(stmt.name, "nn", stmt.name_span, NeuralRef(stmt.name, fn, n_out))
        self._nn_specs[stmt.name] = (stmt, hidden, act, n_out, fn, acts, dropout, init)

    def _declare_body(self, stmt: A.BodyStmt, out) -> None:
        if stmt.loops:
            raise PdslError.at("BadLoop", "write an array of bodies as `body b[1..N] = ...`", stmt.loops[0].span)
        if stmt.kind not in ("point", "rigid"):
            raise PdslError.at("UnknownBodyKind", f"unknown body kind `{stmt.kind}`", stmt.kind_span, "point(mass = m) or rigid(dim = ..., mass = m, moments = [...])")
        indices: list[int | None]
        if stmt.range is None:
            indices = [None]
        else:
            lo, hi = self._range(stmt.range, f"body array `{stmt.name}`")
            indices = list(range(lo, hi + 1))
        refs = []
        for i in indices:
            name = stmt.name if i is None else f"{stmt.name}[{i}]"
            dim = 0
            if stmt.kind == "rigid":
                dim_kw = next((k for k in stmt.kwargs if k.name == "dim"), None)
                if dim_kw is None:
                    raise PdslError.at("MissingArgument", f"rigid body `{stmt.name}` needs `dim = 1|2|3`", stmt.kind_span)
                bind = {"i": sp.Integer(i)} if i is not None else {}
                dim = int_value(Evaluator(self._const_scope(bind)).eval(dim_kw.value), dim_kw.value.span, "`dim`")
                if not 1 <= dim <= self.space:
                    raise PdslError.at(
                        "BadDimension",
                        f"rigid body `{name}` has dim = {dim}, but the model's space is {self.space}-dimensional",
                        dim_kw.value.span,
                        f"dim must be between 1 and {self.space} (`space {self.space}`)",
                    )
            node_names = ("",) + tuple(f"a{k}" for k in range(1, dim + 1))
            nodes = tuple(
                tuple(S.sym(f"{name}{'.' + nn if nn else ''}.{ax}") for ax in "xyz"[: self.space]) for nn in node_names
            )
            refs.append(BodyRef(name, nodes, node_names, self.space))
        value = refs[0] if stmt.range is None else ArrayRef(stmt.name, indices[0], tuple(refs))
        self._bind(stmt.name, "body", stmt.name_span, value)
        self._bodies_pending.append((stmt, indices, refs))

    def _declare_elements(self, body) -> None:
        """Bind p-H element names (and store states) before any expression is evaluated.

        An indexed name (``cap[i]``, ``q[i]``) is expanded over the statement's ``for`` clause; every statement that
        declares ``cap[...]`` contributes to the one array ``cap`` (so a first or last section may be written apart).
        """
        arrays: dict[str, dict] = {}
        for stmt in body:
            if isinstance(stmt, A.StoreStmt | A.ResistiveStmt | A.SourceStmt | A.TwoPortStmt):
                ports = (stmt.port_a, stmt.port_b) if isinstance(stmt, A.TwoPortStmt) else ()
                kind = _element_kind(stmt)
                self._guard(self._declare_ph_name, stmt, stmt.name, stmt.index, stmt.name_span, "element",
                            lambda n, kind=kind, ports=ports: ElementRef(n, kind, ports), arrays)
            elif isinstance(stmt, A.JunctionStmt) and stmt.name:
                self._guard(self._declare_ph_name, stmt, stmt.name, stmt.index, stmt.name_span, "element",
                            lambda n: ElementRef(n, "junction"), arrays)
            elif isinstance(stmt, A.TerminalStmt):  # a port of a component written in equations (pdsl.compose)
                self._guard(lambda _s, stmt=stmt: self._bind(stmt.name, "element", stmt.span, ElementRef(stmt.name, "terminal")), None)
            elif isinstance(stmt, A.InterfaceStmt):  # the p-H side of an interface is a source named after the port
                self._guard(lambda _s, stmt=stmt: self._bind(stmt.port, "element", stmt.span, ElementRef(stmt.port, "source")), None)
            if isinstance(stmt, A.JunctionStmt) and stmt.name:
                for alias in stmt.aliases:  # a node of connected power ports: each port is one of its bonds
                    self._guard(lambda _s, alias=alias: self._bind(alias, "element", stmt.span, ElementRef(alias, "junction")), None)
            if isinstance(stmt, A.StoreStmt):
                self._guard(self._declare_ph_name, stmt, stmt.state, stmt.state_index, stmt.state_span, "var", S.sym, arrays)
        for name, a in arrays.items():
            indices = tuple(a["items"])
            items = tuple(v for v, _ in a["items"].values())
            what = "element" if a["kind"] == "element" else "store state"
            value = IndexedArray(name, min(indices, default=0), items, indices=indices, what=what)
            self._guard(lambda _s, name=name, a=a, value=value: self._bind(name, a["kind"], a["span"], value), None)

    def _declare_power_ports(self, body, out) -> None:
        """Each power port's values (``p.across``, ``p.T``; LANGUAGE.md §9), attached to its name: the port's bond
        variables ``p.e``, ``p.f`` (pdsl.compose says which is the across value and the port's sign in its junction;
        the through value is what flows into the port's model)."""
        found = out.setdefault("power_ports", [])
        for stmt in body:
            if not isinstance(stmt, A.PowerPortStmt):
                continue
            decl = self.names.get(stmt.name)
            if decl is None or not isinstance(decl.value, ElementRef):
                continue  # not part of a network: its connection failed (already reported)
            e, f = port_symbols(stmt.name)
            across, other = (e, f) if stmt.across_is_effort else (f, e)
            port = M.PowerPort(name=stmt.name, domain=stmt.domain, across=across, through=-stmt.sign * other,
                               owner=stmt.owner, terminal=f"{stmt.name}.terminal" in self.names, span=stmt.span)
            decl.value = dataclasses.replace(decl.value, port=port)
            found.append(port)
        self._scope_cache.clear()

    def _declare_ph_name(self, stmt, name: str, index: tuple, span: Span | None, kind: str, make, arrays: dict) -> None:
        """One element (or store state) name: a scalar, or the entries ``name[i]`` its ``for`` clause declares."""
        span = span or stmt.span
        if not index:
            if stmt.loops:
                n = len(self._expand(stmt.loops))
                if n != 1:
                    what = "a store state" if kind == "var" else "an element"
                    raise PdslError.at(
                        "DuplicateDefinition",
                        f"this `for` clause declares {what} `{name}` {n} times", span,
                        f"index the name, as `{name}[{stmt.loops[0].var}]`, to make an array",
                    )
            self._bind(name, kind, span, make(name))
            return
        if len(index) != 1:
            raise PdslError.at("WrongArity", f"`{name}` takes one index, got {len(index)}", span)
        entry = arrays.setdefault(name, {"kind": kind, "span": span, "items": {}})
        if entry["kind"] != kind:
            raise PdslError.at(
                "DuplicateDefinition", f"`{name}` is already declared on line {entry['span'].line}", span,
                "an array holds either elements or store states",
            )
        for bind in self._expand(stmt.loops):
            i = self._element_index(index[0], bind)
            if i in entry["items"]:
                first = entry["items"][i][1]
                raise PdslError.at(
                    "DuplicateDefinition", f"`{name}[{i}]` is declared twice (first on line {first.line})", span,
                    "each index of an element array is declared once",
                )
            entry["items"][i] = (make(f"{name}[{i}]"), span)

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

    def _finish_body(self, stmt: A.BodyStmt, indices, refs, out) -> None:
        kw = self._body_arguments(stmt)
        defaults = {p.symbol: sp.Float(p.default) for p in out["params"]}  # params are finished first
        defaults.update({s: s for s in self._failed_params})  # already reported: constant, value unknown
        for i, ref in zip(indices, refs):
            ev = self._ev({"i": sp.Integer(i)} if i is not None else {}, allow_der=False)
            mass = ev.scalar(kw["mass"].value, "the mass")
            _check_constant(mass, defaults, f"the mass of `{ref.name}`", kw["mass"].value.span)
            _check_positive(mass, defaults, f"the mass of `{ref.name}`", kw["mass"].value.span)
            moments: tuple = ()
            if stmt.kind == "rigid":
                moments = self._moments(kw, ev, mass, len(ref.nodes) - 1)
                key = "moments" if "moments" in kw else "inertia"
                for k, m in enumerate(moments, start=1):
                    what = f"the principal moment λ{k} of `{ref.name}`"
                    _check_constant(m, defaults, what, kw[key].value.span)
                    _check_positive(m, defaults, what, kw[key].value.span, _MOMENT_HINTS[key])
            out["bodies"].append(
                M.Body(
                    name=ref.name, kind=stmt.kind, dim=len(ref.nodes) - 1, mass=mass, moments=moments, nodes=ref.nodes,
                    node_names=ref.node_names, span=stmt.span,
                )
            )

    def _body_arguments(self, stmt: A.BodyStmt) -> dict[str, A.KwArg]:
        """The keyword arguments of ``point(...)`` / ``rigid(...)``, checked for names and completeness."""
        allowed = {"point": {"mass"}, "rigid": {"dim", "mass", "moments", "inertia"}}[stmt.kind]
        kw: dict[str, A.KwArg] = {}
        for k in stmt.kwargs:
            if k.name not in allowed:
                raise PdslError.at("UnknownArgument", f"`{stmt.kind}` has no argument `{k.name}`", k.span, "arguments: " + ", ".join(sorted(allowed)))
            if k.name in kw:
                raise PdslError.at("DuplicateDefinition", f"`{k.name}` is given twice", k.span)
            kw[k.name] = k
        if stmt.args:
            raise PdslError.at("WrongArity", f"`{stmt.kind}` takes keyword arguments only (mass = ...)", stmt.args[0].span)
        if "mass" not in kw:
            raise PdslError.at("MissingArgument", f"body `{stmt.name}` needs a `mass`", stmt.kind_span)
        if stmt.kind == "rigid" and ("moments" in kw) == ("inertia" in kw):
            raise PdslError.at(
                "MissingArgument", f"rigid body `{stmt.name}` needs exactly one of `moments` or `inertia`", stmt.kind_span
            )
        return kw

    def _moments(self, kw: Mapping[str, A.KwArg], ev: Evaluator, mass, dim: int) -> tuple:
        """λ_i, the eigenvalues of the mass covariance, from `moments` or from principal `inertia`."""
        key = "moments" if "moments" in kw else "inertia"
        vec = ev.number(kw[key].value)
        vals = list(vec) if isinstance(vec, sp.MatrixBase) else [vec]
        if len(vals) != dim:
            raise PdslError.at("WrongArity", f"`{key}` of a dim = {dim} body needs {dim} values, got {len(vals)}", kw[key].value.span)
        if key == "moments":
            return tuple(vals)
        if dim != 3:
            raise PdslError.at("BadArgument", "`inertia` is defined for dim = 3 bodies; give `moments` otherwise", kw[key].span)
        # lambda_i = (I_j + I_k - I_i) / (2 m)   (BENCHMARKS A2.1)
        I1, I2, I3 = vals
        return ((I2 + I3 - I1) / (2 * mass), (I1 + I3 - I2) / (2 * mass), (I1 + I2 - I3) / (2 * mass))

    def _check_neural_used(self, out) -> None:
        pass  # an unused network is legal (it simply has no inputs yet); lowering reports it if needed

    # ================================================================== statements
    def _statement(self, stmt: A.Stmt, out, single) -> None:
        handler = {
            A.EquationStmt: self._equation,
            A.ConstraintStmt: self._constraint,
            A.LagrangianStmt: self._single,
            A.HamiltonianStmt: self._single,
            A.ConnectorStmt: self._connector,
            A.GravityStmt: self._gravity,
            A.PotentialStmt: self._potential,
            A.ForceStmt: self._force,
            A.StoreStmt: self._ph_element,
            A.ResistiveStmt: self._ph_element,
            A.SourceStmt: self._ph_element,
            A.TwoPortStmt: self._ph_element,
            A.JunctionStmt: self._ph_element,
            A.StructureStmt: self._ph_element,
            A.InterfaceStmt: self._interface,
            A.KinematicTieStmt: self._tie,
            A.TerminalStmt: self._terminal,
            A.PowerPortStmt: lambda stmt, bind, out: None,  # pass 1 (_declare_power_ports)
            A.GroupStmt: self._group,
            A.ConstraintLearnStmt: self._learned_constraint,
            A.DistributionStmt: self._pending_distribution,
            A.WhenStmt: self._when,
        }.get(type(stmt))
        if handler is None:
            self._unsupported(stmt, out)
            return
        if isinstance(stmt, A.LagrangianStmt | A.HamiltonianStmt):
            handler(stmt, out, single)
            return
        for bind in self._expand(stmt.loops):
            handler(stmt, bind, out)

    def _unsupported(self, stmt: A.Stmt, out) -> None:
        what = _NOT_YET_SUPPORTED_NAMES[type(stmt)]
        raise PdslError.at(
            "NotYetSupported",
            f"{what} is part of the language but not implemented yet",
            stmt.span,
            "see docs/language.md for what this release lowers",
        )

    def _equation(self, stmt: A.EquationStmt, bind, out) -> None:
        ev = self._ev(bind)
        lhs, rhs = ev.number(stmt.lhs), ev.number(stmt.rhs)
        for a, b in _pairs(lhs, rhs, stmt.span):
            out["equations"].append(M.Equation(lhs=a, rhs=b, span=stmt.span))

    # ------------------------------------------------------------------ constraint learn
    def _learned_rates(self, stmt: A.ConstraintLearnStmt) -> tuple[list[str], list[str]]:
        """The coordinate names of the `on` (dependent) and `given` (independent) rates, checked."""
        names = []
        for part, exprs in (("on", stmt.on), ("given", stmt.given)):
            got = []
            for e in exprs:
                ok = (isinstance(e, A.Call) and isinstance(e.func, A.Name) and e.func.id == "der" and len(e.args) == 1
                      and not e.kwargs and isinstance(e.args[0], A.Name))
                decl = self.names.get(e.args[0].id) if ok else None
                if decl is None or decl.kind != "coord":
                    raise PdslError.at("BadConstraint", f"`constraint learn ... {part}` lists rates `der(q)` of coordinates",
                                       e.span, "e.g. `constraint learn a: mlp(hidden = [20]) on der(x), der(y) given der(theta)`")
                got.append(e.args[0].id)
            if len(set(got)) != len(got):
                raise PdslError.at("DuplicateDefinition", f"a rate is listed twice after `{part}`", stmt.span)
            names.append(got)
        on, given = names
        if set(on) & set(given):
            raise PdslError.at("BadConstraint", "a rate cannot be both constrained (`on`) and independent (`given`)", stmt.span)
        return on, given

    def _declare_learned_constraint(self, stmt: A.ConstraintLearnStmt, out) -> None:
        """Declare the network of ``constraint learn a: mlp(...) on ... given ...`` (one output per pair)."""
        if stmt.loops:
            raise PdslError.at("BadLoop", "`constraint learn` cannot have a `for` clause", stmt.loops[0].span)
        for kw in stmt.kwargs:
            if kw.name == "out":
                raise PdslError.at("BadArgument", "the output size of a learned constraint follows from `on` and `given`",
                                   kw.span, "remove `out = ...`")
        n_out = len(stmt.on) * len(stmt.given)
        size = A.KwArg(span=stmt.span, name="out", value=A.Num(span=stmt.span, value=float(n_out), text=str(n_out)))
        self._declare_nn(A.NNStmt(span=stmt.span, name=stmt.name, name_span=stmt.name_span, arch=stmt.arch,
                                  args=stmt.args, kwargs=stmt.kwargs + (size,)), out)

    def _learned_constraint(self, stmt: A.ConstraintLearnStmt, bind, out) -> None:
        """der(on_k) = Σ_j a[k·G + j](q) der(given_j), with q every coordinate in declaration order; the entries of
        a(q) are outputs ``a[1]``, ``a[2]``, … (row by row: the first dependent rate's coefficients first)."""
        on, given = self._learned_rates(stmt)
        coords = self._coordinate_names()
        sp_ = stmt.span
        call = A.Call(span=sp_, func=A.Name(span=sp_, id=stmt.name), args=tuple(A.Name(span=sp_, id=c) for c in coords), kwargs=())
        G = len(given)
        for k, dep in enumerate(on):
            terms = None
            for j, ind in enumerate(given):
                idx = k * G + j + 1
                entry = A.Index(span=sp_, base=call, indices=(A.Num(span=sp_, value=float(idx), text=str(idx)),))
                rate = A.Call(span=sp_, func=A.Name(span=sp_, id="der"), args=(A.Name(span=sp_, id=ind),), kwargs=())
                term = A.BinOp(span=sp_, op="*", left=entry, right=rate)
                terms = term if terms is None else A.BinOp(span=sp_, op="+", left=terms, right=term)
            lhs = A.Call(span=sp_, func=A.Name(span=sp_, id="der"), args=(A.Name(span=sp_, id=dep),), kwargs=())
            self._constraint(A.ConstraintStmt(span=sp_, lhs=lhs, rhs=terms), bind, out)
        ev = self._ev(bind)
        values = [ev.number(A.Index(span=sp_, base=call, indices=(A.Num(span=sp_, value=float(i), text=str(i)),)))
                  for i in range(1, len(on) * G + 1)]
        for i, value in enumerate(values, start=1):
            out["outputs"].append(M.Output(name=f"{stmt.name}[{i}]", expr=value, span=sp_))

    # ------------------------------------------------------------------ distribution learn
    def _coordinate_names(self) -> list[str]:
        names = []
        for st in self.ast.body:
            if isinstance(st, A.DeclStmt) and st.kind == "coord":
                for d in st.decls:
                    if d.range is not None:
                        raise PdslError.at("NotYetSupported", "`distribution learn` with arrays of coordinates", d.span,
                                           "declare the coordinates one by one")
                    names.append(d.name)
        return names

    def _declare_distribution(self, stmt: A.DistributionStmt, out) -> None:
        """The network of ``distribution learn A: mlp(...)``: the connection 𝒜^a_α(q), one entry per group generator
        for each shape coordinate (shape-major: A[α·G + a]); its input is every coordinate."""
        if stmt.loops:
            raise PdslError.at("BadLoop", "`distribution learn` cannot have a `for` clause", stmt.loops[0].span)
        groups = [st for st in self.ast.body if isinstance(st, A.GroupStmt)]
        if not groups:
            raise PdslError.at("MissingDeclaration", "`distribution learn` learns the connection of a symmetry group, and "
                               "this model has no `group`", stmt.span,
                               "add e.g. `group R(x, y)`; without a group write `constraint learn a: mlp(...) on der(x) given der(theta)`")
        for kw in stmt.kwargs:
            if kw.name == "out":
                raise PdslError.at("BadArgument", "the output size of a learned connection follows from the group and "
                                   "the shape coordinates", kw.span, "remove `out = ...`")
        coords = self._coordinate_names()
        G = len(groups[0].coords)
        sigma = len(coords) - G
        if sigma < 1:
            raise PdslError.at("BadConstraint", "every coordinate belongs to the group: there is no shape velocity for a "
                               "connection to lift", stmt.span, "a connection needs shape coordinates outside the group")
        n_out = G * sigma
        size = A.KwArg(span=stmt.span, name="out", value=A.Num(span=stmt.span, value=float(n_out), text=str(n_out)))
        name_span = Span(stmt.span.path, stmt.span.line, stmt.span.col, stmt.span.line, stmt.span.col + 1, stmt.span.via)
        self._declare_nn(A.NNStmt(span=stmt.span, name=stmt.name, name_span=name_span, arch=stmt.arch, args=stmt.args,
                                  kwargs=stmt.kwargs + (size,)), out)
        self.nn_inputs[stmt.name] = (len(coords), stmt.span)

    def _pending_distribution(self, stmt: A.DistributionStmt, bind, out) -> None:
        self._distributions.append(stmt)

    def _distribution(self, stmt: A.DistributionStmt, out) -> None:
        """The velocity constraints of a learned principal connection: ξ^a + Σ_α 𝒜^a_α ṙ^α = 0 for every generator
        a (ξ = U(g)⁻¹ ġ, pdsl.groups): the allowed velocities are the horizontal lifts ũ_α = ∂_α − 𝒜^a_α u_a."""
        from ..groups import GROUPS

        if not out["groups"]:
            return  # the group statement failed and was reported
        for c in out["constraints"]:
            if c.kind == "velocity":
                raise PdslError.at("BadConstraint", "`distribution learn` replaces the velocity constraints, and this "
                                   "model also states one", c.span, "remove the known constraints, or the `distribution learn`")
        group = out["groups"][0]
        coords = [self.names[n].value for n in self._coordinate_names()]
        shapes = [q for q in coords if q not in group.coords]
        G = len(group.coords)
        fn = self._nn_specs[stmt.name][4]
        U_inv = GROUPS[group.kind].coframe(group.coords)  # ξ = U⁻¹ ġ
        gdot = [S.der(g) for g in group.coords]
        for a in range(G):
            xi = sp.Add(*(U_inv[a, j] * gdot[j] for j in range(G)))
            lift = sp.Add(*(fn(alpha * G + a, *coords) * S.der(r) for alpha, r in enumerate(shapes)))
            out["constraints"].append(M.Constraint(residual=xi + lift, kind="velocity", span=stmt.span))
        for k in range(G * len(shapes)):
            out["outputs"].append(M.Output(name=f"{stmt.name}[{k + 1}]", expr=fn(k, *coords), span=stmt.span))

    def _group(self, stmt: A.GroupStmt, bind, out) -> None:
        from ..groups import GROUPS

        kind = GROUPS.get(stmt.name)
        if kind is None:
            raise PdslError.at("UnknownGroup", f"unknown group `{stmt.name}`", stmt.span,
                               "one of: " + ", ".join(f"{k.name}({'…' if k.arity is None else k.arity})" for k in GROUPS.values()))
        if kind.arity is not None and len(stmt.coords) != kind.arity:
            raise PdslError.at("WrongArity", f"`{stmt.name}` acts on {kind.arity} coordinate{'s' if kind.arity > 1 else ''}, "
                               f"not {len(stmt.coords)}", stmt.span, "e.g. `group SE2(phi, x, y)`: heading, then position")
        if out["groups"]:
            raise PdslError.at("DuplicateDefinition", "a model has at most one `group`", stmt.span,
                               f"the first is on line {out['groups'][0].span.line}; a product of groups is one `R(...)`/`SE2(...)` per model for now")
        symbols = []
        for name in stmt.coords:
            decl = self.names.get(name)
            if decl is None or decl.kind != "coord":
                raise PdslError.at("NotACoordinate", f"`{name}` is not a `coord` of this model", stmt.span,
                                   "a group acts on generalized coordinates declared with `coord`")
            if decl.value in symbols:
                raise PdslError.at("DuplicateDefinition", f"`{name}` is named twice", stmt.span)
            symbols.append(decl.value)
        out["groups"].append(M.Group(kind=kind.name, coords=tuple(symbols), span=stmt.span))

    def _constraint(self, stmt: A.ConstraintStmt, bind, out) -> None:
        ev = self._ev(bind)
        lhs, rhs = ev.number(stmt.lhs), ev.number(stmt.rhs)
        for a, b in _pairs(lhs, rhs, stmt.span):
            residual = a - b
            out["constraints"].append(M.Constraint(residual=residual, kind=classify_constraint(residual, stmt.span), span=stmt.span))

    # ------------------------------------------------------------------ events (LANGUAGE.md §11)
    def _when(self, stmt: A.WhenStmt, bind, out) -> None:
        from .events import resolve_when

        out["events"].append(resolve_when(stmt, self._ev(bind)))

    def _single(self, stmt, out, single) -> None:
        key = "lagrangian" if isinstance(stmt, A.LagrangianStmt) else "hamiltonian"
        if stmt.loops:
            raise PdslError.at("BadLoop", f"`{key}` cannot have a `for` clause; use sum(... for i in 1..N)", stmt.loops[0].span)
        if single[key] is not None:
            raise PdslError.at("DuplicateDefinition", f"the model has two `{key}` statements (first at line {single[key].span.line})", stmt.span, f"add the terms into one `{key}`")
        expr = self._ev().scalar(stmt.expr, f"the {key}")
        single[key] = M.Located(expr=expr, span=stmt.span)

    def _point(self, value, span: Span):
        if isinstance(value, BodyRef):
            return value.point(span)
        if isinstance(value, M.PointRef):
            return value
        raise PdslError.at("TypeMismatch", "expected a body, `ground`, or a point such as `body.at([...])`", span)

    def _connector(self, stmt: A.ConnectorStmt, bind, out) -> None:
        spec = _CONNECTOR_OPTIONS[stmt.kind]
        if len(stmt.args) != 2:
            raise PdslError.at("WrongArity", f"`{stmt.kind}` connects two points, got {len(stmt.args)}", stmt.span, f"{stmt.kind} A, B" + "".join(f", {k} = ..." for k in spec))
        ev = self._ev(bind, allow_der=False)
        a = self._point(ev.eval(stmt.args[0]), stmt.args[0].span)
        b = self._point(ev.eval(stmt.args[1]), stmt.args[1].span)
        if a.body is not None and a.body == b.body and (a.local == b.local):
            raise PdslError.at("SelfConnection", f"`{stmt.kind}` from `{a.text}` to itself", stmt.span, "a connector needs two different points")
        if a.body is None and b.body is None:
            raise PdslError.at("SelfConnection", f"`{stmt.kind}` between two fixed points constrains nothing", stmt.span)
        if stmt.kind == "slider":
            self._check_slider_ends(stmt, a, b)
        if stmt.kind == "hinge":
            for p in (a, b):
                if p.body is not None and self._body_dim(p.body) == 0:
                    raise PdslError.at("NotARigidBody", f"a hinge on point mass `{p.body}`: a point has no orientation", stmt.span, "use `joint` for a point mass, or make it `rigid(...)`")
        options = {}
        for kw in stmt.kwargs:
            if kw.name not in spec:
                raise PdslError.at("UnknownArgument", f"`{stmt.kind}` has no option `{kw.name}`", kw.span, "options: " + (", ".join(spec) or "none"))
            if kw.name in options:
                raise PdslError.at("DuplicateDefinition", f"`{kw.name}` is given twice", kw.span)
            v = ev.number(kw.value)
            if kw.name == "axis":
                if not (isinstance(v, sp.MatrixBase) and v.shape == (self.space, 1)):
                    raise PdslError.at("TypeMismatch", f"`axis` must be a vector of length {self.space}", kw.value.span)
            else:
                v = ev.scalar(kw.value, f"`{kw.name}`")
                _check_option_sign(stmt.kind, kw, v)
            options[kw.name] = v
        for name, required in spec.items():
            if required and name not in options:
                raise PdslError.at("MissingArgument", f"`{stmt.kind}` needs `{name} = ...`", stmt.span)
        out["connectors"].append(M.Connector(kind=stmt.kind, a=a, b=b, span=stmt.span, name=stmt.name, **options))

    def _check_slider_ends(self, stmt: A.ConnectorStmt, a, b) -> None:
        """A slider's axis is fixed in A's frame: A is ground, a ground point, or a point of a rigid body that
        embeds every direction of the space (dim = space); B is any point of another body."""
        if a.body is not None and a.body == b.body:
            raise PdslError.at("SelfConnection", f"a slider between two points of `{a.body}` constrains nothing",
                               stmt.span, "slider A, B: B slides along a line fixed in A's body (or in the ground)")
        if b.body is None:
            raise PdslError.at("BadSlider", "the sliding point B of `slider A, B` is a fixed point", stmt.args[1].span,
                               "write the rail first: slider ground, block, axis = [1, 0]")
        if a.body is not None and self._body_dim(a.body) != self.space:
            dim = self._body_dim(a.body)
            what = "a point mass" if dim == 0 else f"rigid with dim {dim}"
            raise PdslError.at("BadSlider", f"the rail of a slider is fixed in A's frame, but `{a.body}` is {what}: "
                               f"its orientation in space {self.space} is not embedded", stmt.args[0].span,
                               f"put the rail on ground or on a rigid(dim = {self.space}, ...) body, "
                               "or write the rail as a `constraint`")

    def _slider_axis(self, stmt: A.ConnectorStmt, ev: Evaluator):
        """The slider's unit axis û (a constant vector of length space, normalised), in A's frame."""
        kws = [kw for kw in stmt.kwargs if kw.name == "axis"]
        if not kws:
            raise PdslError.at("MissingArgument", "`slider` needs `axis = ...`", stmt.span, "slider A, B, axis = [1, 0]")
        u = ev.number(kws[0].value)
        if not (isinstance(u, sp.MatrixBase) and u.shape == (self.space, 1)):
            raise PdslError.at("TypeMismatch", f"`axis` must be a vector of length {self.space}", kws[0].value.span)
        if any(e.free_symbols for e in u):  # entries of a sympy matrix: sympy objects already
            raise PdslError.at("NotConstant", "the slider axis must be a constant vector (it fixes which constraint "
                               "rows are independent)", kws[0].value.span, "write the axis with numbers, e.g. axis = [1, 0]")
        norm = sp.sqrt(sum((e**2 for e in u), sp.Integer(0)))
        if norm == 0:
            raise PdslError.at("BadSlider", "the slider axis is the zero vector", kws[0].value.span,
                               "give the direction of the rail, e.g. axis = [1, 0]")
        return [e / norm for e in u]

    def _body_nodes(self, name: str):
        for d in self.names.values():
            if d.kind != "body":
                continue
            for r in (d.value.items if isinstance(d.value, ArrayRef) else [d.value]):
                if r.name == name:
                    return r.nodes
        return None

    def _declare_slider(self, stmt: A.ConnectorStmt) -> None:
        """``slider s: A, B, axis = u``: ``s.position`` = (B − A)·û (û rotated with A's body) and ``s.rate``."""
        if len(stmt.args) != 2:
            raise PdslError.at("WrongArity", f"`slider` connects two points, got {len(stmt.args)}", stmt.span)
        ev = self._ev(allow_der=False)
        a = self._point(ev.eval(stmt.args[0]), stmt.args[0].span)
        b = self._point(ev.eval(stmt.args[1]), stmt.args[1].span)
        self._check_slider_ends(stmt, a, b)
        u = self._slider_axis(stmt, ev)
        if a.body is None:
            direction = u
        else:
            nodes = self._body_nodes(a.body)
            direction = [sp.Add(*(u[i] * (nodes[i + 1][k] - nodes[0][k]) for i in range(len(u)))) for k in range(self.space)]
        position = sp.expand(sp.Add(*(direction[k] * (b.position[k] - a.position[k]) for k in range(self.space))))
        rate = self._chain_rule(position, stmt.span)
        self._bind(stmt.name, "slider", stmt.name_span or stmt.span, SliderRef(stmt.name, position, rate))

    def _body_dim(self, name: str) -> int:
        for d in self.names.values():
            if d.kind != "body":
                continue
            refs = d.value.items if isinstance(d.value, ArrayRef) else [d.value]
            for r in refs:
                if r.name == name:
                    return len(r.nodes) - 1
        return 0

    def _gravity(self, stmt: A.GravityStmt, bind, out) -> None:
        ev = self._ev(bind, allow_der=False)
        g = ev.scalar(stmt.g, "the gravity constant")
        if stmt.along is None:
            direction = sp.ImmutableMatrix([0] * (self.space - 1) + [-1])
        else:
            direction = ev.number(stmt.along)
            if not (isinstance(direction, sp.MatrixBase) and direction.shape == (self.space, 1)):
                raise PdslError.at("TypeMismatch", f"`along` must be a vector of length {self.space}", stmt.along.span)
        out["gravity"].append(M.Gravity(g=g, direction=direction, span=stmt.span))

    def _potential(self, stmt: A.PotentialStmt, bind, out) -> None:
        out["potentials"].append(M.Located(expr=self._ev(bind, allow_der=False).scalar(stmt.expr, "a potential"), span=stmt.span))

    def _force(self, stmt: A.ForceStmt, bind, out) -> None:
        ev = self._ev(bind)
        target = ev.eval(stmt.target)
        if isinstance(target, sp.Symbol) and target in self._coordinates():
            q = ev.scalar(stmt.force, "a generalized force")
            out["generalized_forces"].append(M.GeneralizedForce(coord=target, force=q, span=stmt.span))
            return
        if isinstance(target, PortRef):
            q = ev.scalar(stmt.force, f"the through value of `{target.name}`")
            out["generalized_forces"].extend(M.port_forces(target.across, q, stmt.span))
            return
        if not isinstance(target, BodyRef | M.PointRef):
            raise PdslError.at(
                "TypeMismatch",
                "a force acts on a coordinate (`force Q on q`) or on a point (a body, `ground.at(...)`, `body.at(...)`)",
                stmt.target.span,
            )
        f = ev.number(stmt.force)
        if not (isinstance(f, sp.MatrixBase) and f.shape == (self.space, 1)):
            raise PdslError.at("TypeMismatch", f"a force on a point is a vector of length {self.space}", stmt.force.span)
        out["forces"].append(M.Force(force=f, at=self._point(target, stmt.target.span), span=stmt.span))

    def _declare_joint(self, stmt: A.ConnectorStmt) -> None:
        """``joint pivot: A, B``: ``pivot.angle`` (planar: B's first principal axis against A's; ground's is the
        world x axis) and ``pivot.rate`` = der(pivot.angle)."""
        if stmt.kind == "slider":
            return self._declare_slider(stmt)
        if stmt.kind not in ("joint", "hinge"):
            raise PdslError.at("BadConnector", f"only a joint, hinge or slider can be named, not a `{stmt.kind}`",
                               stmt.name_span or stmt.span)
        if len(stmt.args) != 2:
            raise PdslError.at("WrongArity", f"`{stmt.kind}` connects two points, got {len(stmt.args)}", stmt.span)
        ev = self._ev(allow_der=False)
        a = self._point(ev.eval(stmt.args[0]), stmt.args[0].span)
        b = self._point(ev.eval(stmt.args[1]), stmt.args[1].span)
        angle, rate, why = None, None, ""
        if self.space != 2:
            why = "a joint angle is defined in the plane (space 2); in 3-D use body points"
        else:
            axes = [self._first_axis(p.body) for p in (a, b)]
            if b.body is None or axes[1] is None or (a.body is not None and axes[0] is None):
                why = "the joint angle needs rigid bodies (a point mass has no orientation)"
            else:
                angle = sp.atan2(axes[1][1], axes[1][0])
                if a.body is not None:
                    angle -= sp.atan2(axes[0][1], axes[0][0])
                rate = self._chain_rule(angle, stmt.span)
        self._bind(stmt.name, "joint", stmt.name_span or stmt.span, JointRef(stmt.name, angle, rate, why))

    def _first_axis(self, body: str | None):
        """The world direction of a rigid body's first principal axis, a1 − centre (None: ground or point mass)."""
        if body is None:
            return None
        for d in self.names.values():
            if d.kind != "body":
                continue
            for r in (d.value.items if isinstance(d.value, ArrayRef) else [d.value]):
                if r.name == body:
                    if len(r.nodes) < 2:
                        return None
                    return [r.nodes[1][k] - r.nodes[0][k] for k in range(self.space)]
        return None

    def _declare_kinematic_port(self, stmt: A.KinematicPortStmt) -> None:
        across = self._ev().scalar(stmt.across, f"the velocity of port `{stmt.name}`")
        ders = {x for x in across.free_symbols if S.is_der(x)}
        if not ders:
            raise PdslError.at("BadPort", f"the across value of kinematic port `{stmt.name}` is not a velocity of the model",
                               stmt.across.span, "write der(x), der(norm(b2 - b1)) or NAME.rate of a named joint")
        for x in ders:
            if sp.diff(across, x).free_symbols & ders:
                raise PdslError.at("BadPort", f"the velocity of port `{stmt.name}` must be linear in the rates der(...)",
                                   stmt.across.span)
        self._bind(stmt.name, "port", stmt.span, PortRef(stmt.name, across))

    def _interface(self, stmt: A.InterfaceStmt, bind, out) -> None:
        ref = self.names.get(stmt.kinematic)
        if ref is None or not isinstance(ref.value, PortRef):
            return  # the port's declaration failed (already reported)
        across = ref.value.across
        placeholder = S.sym(f"{stmt.port}.across")
        out["interfaces"].append(M.Interface(port=stmt.port, kinematic=stmt.kinematic, across=across,
                                             across_is=stmt.across_is, placeholder=placeholder, span=stmt.span))
        kind = "flow" if stmt.across_is == "flow" else "effort"
        out["elements"].append(M.Source(name=stmt.port, imposes=kind, value=placeholder, interface=True, span=stmt.span))

    def _terminal(self, stmt: A.TerminalStmt, bind, out) -> None:
        out["elements"].append(M.Terminal(name=stmt.name, domain=stmt.domain, owner=stmt.owner, span=stmt.span))

    def _tie(self, stmt: A.KinematicTieStmt, bind, out) -> None:
        a, b = self.names.get(stmt.a), self.names.get(stmt.b)
        if a is None or b is None or not isinstance(a.value, PortRef) or not isinstance(b.value, PortRef):
            return  # a port's declaration failed (already reported)
        out["ties"].append(M.KinematicTie(a=stmt.a, b=stmt.b, across_a=a.value.across, across_b=b.value.across, span=stmt.span))

    def _coordinates(self) -> set:
        coords = {d.value for d in self.names.values() if d.kind == "coord" and isinstance(d.value, sp.Symbol)}
        coords |= {x for d in self.names.values() if d.kind == "coord" and isinstance(d.value, ArrayRef) for x in d.value.items}
        return coords

    def _ph_element(self, stmt, bind, out) -> None:
        """A p-H statement -> an Element (pdsl.resolve.port_hamiltonian); junction members are checked here."""
        ev = self._ev(bind)
        names = {}
        if getattr(stmt, "name", None):
            names["name"] = self._element_name(stmt.name, stmt.index, bind)
        if isinstance(stmt, A.StoreStmt):
            names["state"] = self._element_name(stmt.state, stmt.state_index, bind)
        if isinstance(stmt, A.JunctionStmt):
            names["members"] = self._junction_members(stmt, ev, bind)
            self._check_junction(stmt, names["members"], names.get("name"))
        out["elements"].append(resolve_ph(stmt, ev, **names))

    def _junction_members(self, stmt: A.JunctionStmt, ev: Evaluator, bind) -> list:
        """The members of a junction, each with the evaluator it is read in: ``cap[i] for i in 1..N`` gives N."""
        out = []
        for m in stmt.members:
            if not isinstance(m, A.MemberLoop):
                out.append((m, ev))
                continue
            if m.var in bind or m.var in self.declared or m.var in self.consts or m.var in _RESERVED:
                raise PdslError.at("DuplicateDefinition", f"the loop variable `{m.var}` is already a name here", m.span,
                                   "choose an index name that the model and the statement's `for` clause do not use")
            scope = Evaluator(self._const_scope(bind))
            lo = int_value(scope.eval(m.lo), m.lo.span, "a loop bound")
            hi = int_value(scope.eval(m.hi), m.hi.span, "a loop bound")
            if hi - lo + 1 > MAX_ARRAY:
                raise PdslError.at("BadArrayBounds", f"the loop {lo}..{hi} is too long", m.span)
            out += [(m.body, ev.with_names({m.var: sp.Integer(i)})) for i in range(lo, hi + 1)]
        return out

    def _check_junction(self, stmt: A.JunctionStmt, members: list, name: str | None) -> None:
        if stmt.kind not in JUNCTION_KINDS:
            close = difflib.get_close_matches(stmt.kind, JUNCTION_KINDS, n=1)
            hint = f"did you mean `{close[0]}`?" if close else "common_effort (0-junction) or common_flow (1-junction)"
            raise PdslError.at("UnknownJunctionKind", f"unknown junction kind `{stmt.kind}`", stmt.kind_span, hint)
        for member, ev in members:
            port = member.operand if isinstance(member, A.Neg) else member
            base = port.base if isinstance(port, A.Attr) else port
            if isinstance(base, A.Index) and isinstance(base.base, A.Name):
                array = ev.eval(base.base)
                if isinstance(array, ElementRef):
                    raise PdslError.at("TypeMismatch", f"`{array.name}` is a single element, not an array", base.span,
                                       f"write `{array.name}` without an index")
            target = ev.eval(base) if isinstance(base, A.Name | A.Index) else None
            if isinstance(target, IndexedArray) and target.what == "element":
                first = min(target.indices, default=1)
                raise PdslError.at("TypeMismatch", f"`{target.name}` is an array of elements: a junction takes one of them",
                                   member.span, f"index it, as `{target.name}[{first}]`")
            if isinstance(target, ElementRef) and name is not None and target.name == name:
                raise PdslError.at("TypeMismatch", f"junction `{name}` lists itself", member.span, "a bond joins two different junctions")
            if not isinstance(target, ElementRef):
                raise PdslError.at(
                    "TypeMismatch",
                    "a junction joins elements, other junctions or two-port ports (`tr.a`), optionally with a `-` sign",
                    member.span,
                )
            if isinstance(port, A.Attr) and port.name not in target.ports:
                ports = ", ".join(f"`{target.name}.{p}`" for p in target.ports) or "none"
                raise PdslError.at("UnknownName", f"`{target.name}` has no port `{port.name}`", port.span, f"its ports: {ports}")
            if target.ports and not isinstance(port, A.Attr):
                raise PdslError.at(
                    "TypeMismatch", f"`{target.name}` is a two-port: name the port, as `{target.name}.{target.ports[0]}`", member.span
                )


_MOMENT_HINTS = {
    "moments": "moments are the eigenvalues of the body's mass covariance: positive numbers",
    "inertia": "principal moments of inertia obey the triangle inequality: I1 < I2 + I3, I2 < I1 + I3, I3 < I1 + I2",
}


def _check_option_sign(kind: str, kw: A.KwArg, value: sp.Expr) -> None:
    """A numeric link length must be positive, a rest length, stiffness or damping not negative."""
    if not value.is_number:
        return
    if kw.name == "length" and value.is_extended_positive is False:
        raise PdslError.at(
            "BadArgument", f"a link length must be positive, but it is {value}", kw.value.span, "for coincident points use `joint A, B`"
        )
    if kw.name in ("rest", "k", "c") and value.is_extended_negative:
        raise PdslError.at("BadArgument", f"`{kw.name}` of a {kind} must not be negative, but it is {value}", kw.value.span)


def _shape_text(v: sp.MatrixBase) -> str:
    return f"{v.shape[0]}x{v.shape[1]}"


def _check_constant(value: sp.Expr, params: Mapping, what: str, span: Span) -> None:
    """Masses and moments are constants of the model: numbers and parameters, not t, states or inputs."""
    others = sorted(str(x) for x in value.free_symbols if x not in params)
    if others:
        names = ", ".join(f"`{n}`" for n in others)
        raise PdslError.at(
            "NotAllowedHere", f"{what} must be constant in time, but it depends on {names}", span, "use numbers and `param`s only"
        )


def _check_positive(value: sp.Expr, defaults: Mapping, what: str, span: Span, hint: str | None = None) -> None:
    """A mass or moment that is a number (possibly after default parameter values) must be > 0."""
    v = value.xreplace(defaults)
    if v.is_number and v.is_extended_positive is False:
        at_defaults = " with the default parameter values" if value.free_symbols else ""
        raise PdslError.at("BadArgument", f"{what} must be positive, but it is {sp.nsimplify(v)}{at_defaults}", span, hint)
    if v.is_number and v.is_extended_positive:
        f = float(v)  # 0.0 below the doubles, inf above: M⁻¹ = 1/m would not be finite
        if not sys.float_info.min <= f <= sys.float_info.max:
            at_defaults = " with the default parameter values" if value.free_symbols else ""
            raise PdslError.at("BadArgument", f"{what} is {sp.Float(v, 4)}{at_defaults}, outside the range of normal "
                               "floating-point numbers (about 2.2e-308 to 1.8e308)", span,
                               "choose units in which masses and moments are moderate numbers")


def _element_kind(stmt) -> str:
    return "resistive" if isinstance(stmt, A.ResistiveStmt) else stmt.kind


_NOT_YET_SUPPORTED_NAMES = {
    A.ImportStmt: "`import`",
    A.PortStmt: "`port`",
    A.UseStmt: "`use` (model instances)",
    A.ConnectStmt: "`connect`",
}
_NOT_YET_SUPPORTED = tuple(_NOT_YET_SUPPORTED_NAMES)
_DRAW = A.DrawPointStmt | A.DrawLineStmt  # resolved after everything else (pdsl.resolve.drawing)


class _PendingOutput:
    """Placeholder bound to an output's name until its value is known."""

    def __init__(self, name: str):
        self.name = name


def classify_constraint(residual: sp.Expr, span: Span) -> str:
    """holonomic (no der), velocity (affine in der(...)), or an error explaining why not."""
    ders = sorted((s for s in residual.free_symbols if S.is_der(s)), key=lambda s: s.name)
    if not ders:
        return "holonomic"
    for a, b in itertools.combinations_with_replacement(ders, 2):
        if sp.simplify(sp.diff(residual, a, b)) != 0:
            raise PdslError.at(
                "BadConstraint",
                f"this constraint is not linear in the velocities (it is nonlinear in `{a}`"
                + (f" and `{b}`" if a != b else "") + ")",
                span,
                "constraints are holonomic Φ(q) = 0 or linear velocity constraints a(q)·der(q) = 0",
            )
    affine = residual.xreplace({d: sp.Integer(0) for d in ders})  # ders are symbols: subs without its search
    if sp.simplify(affine) != 0:
        raise PdslError.at(
            "BadConstraint",
            "this velocity constraint has a term without any der(...): it is affine, not linear, in the velocities",
            span,
            "write it as a(q)·der(q) = 0 (a rheonomic constraint is not supported)",
        )
    return "velocity"


def _pairs(lhs, rhs, span: Span):
    lv, rv = isinstance(lhs, sp.MatrixBase), isinstance(rhs, sp.MatrixBase)
    if lv and rv:
        if lhs.shape != rhs.shape:
            raise PdslError.at("TypeMismatch", f"the two sides have shapes {lhs.shape} and {rhs.shape}", span)
        return list(zip(lhs, rhs))
    if lv or rv:
        if (lv and rhs == 0) or (rv and lhs == 0):
            return [(a, sp.Integer(0)) for a in (lhs if lv else rhs)]
        raise PdslError.at("TypeMismatch", "one side is an array and the other a scalar", span)
    return [(lhs, rhs)]


class _ConstView(Mapping):
    """The consts as sympy integers, read through (not copied)."""

    def __init__(self, consts: Mapping[str, int]):
        self._consts = consts

    def __getitem__(self, name: str):
        return sp.Integer(self._consts[name])

    def __contains__(self, name) -> bool:
        return name in self._consts

    def __iter__(self):
        return iter(self._consts)

    def __len__(self) -> int:
        return len(self._consts)


class _NotConstantView(Mapping):
    """Why each declared name (and t, ground) is unusable where only constants are allowed; made on lookup."""

    _SPECIAL = {"t": "the time", "ground": "the fixed frame"}

    def __init__(self, declared: Mapping[str, str]):
        self._declared = declared

    def __getitem__(self, name: str) -> Unusable:
        if name in self._SPECIAL:
            return _not_constant(name, self._SPECIAL[name])
        return _not_constant(name, self._declared[name])

    def __contains__(self, name) -> bool:
        return name in self._SPECIAL or name in self._declared

    def __iter__(self):
        yield from self._SPECIAL
        yield from (n for n in self._declared if n not in self._SPECIAL)

    def __len__(self) -> int:
        return len(self._SPECIAL) + sum(1 for n in self._declared if n not in self._SPECIAL)


def _not_constant(name: str, kind: str) -> Unusable:
    """Why ``name`` cannot appear in an array bound, loop bound, const or default value."""
    article = "" if kind.startswith("the ") else ("an " if kind[0] in "aeio" else "a ")
    return Unusable(
        "NotConstant",
        f"`{name}` is {article}{kind}, but array bounds, loop bounds, consts and default values "
        "must be numbers known when the model is compiled",
        f"declare it `const {name} = ...` (a `param` is a run-time value)" if kind == "param" else "use numbers and `const`s only",
    )
