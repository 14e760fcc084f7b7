"""Neural components: `nn` declarations, learned constraints and learned distributions (LANGUAGE.md §7).

A mixin of :class:`pdsl.resolve.resolver._Resolver` (state and core methods through ``self``; see its STATEMENTS table)."""

from __future__ import annotations

import sympy as sp

from .. import symbols as S
from ..diagnostics import PdslError, Span
from ..parse import ast as A
from . import model as M
from .expressions import (
    Evaluator,
    NeuralRef,
    float_value,
    int_value,
)
from .common import (
    _ACTIVATIONS,
)


class NeuralStatements:
    """`nn` declarations, learned constraints and learned distributions."""

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

    def _check_neural_used(self, out) -> None:
        pass  # an unused network is legal (it simply has no inputs yet); lowering reports it if needed

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
