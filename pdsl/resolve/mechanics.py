"""Bodies, joints, links, sliders, springs and dampers, gravity, potentials and forces, kinematic
ports and ties, and the Lie group of a model's coordinates (LANGUAGE.md §3, §6).

A mixin of :class:`pdsl.resolve.resolver._Resolver` (state and core methods through ``self``; see its STATEMENTS table)."""

from __future__ import annotations

from typing import Mapping

import sympy as sp

from .. import symbols as S
from ..diagnostics import PdslError, Span
from ..parse import ast as A
from . import model as M
from .expressions import (
    ArrayRef,
    BodyRef,
    Evaluator,
    JointRef,
    SliderRef,
    PortRef,
    int_value,
)
from .common import (
    _CONNECTOR_OPTIONS,
    _MOMENT_HINTS,
    _check_constant,
    _check_option_sign,
    _check_positive,
)


class MechanicsStatements:
    """Bodies, joints, connectors, gravity, potentials, forces, kinematic ports, groups."""

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
