"""Units of measure: a small SI unit parser, dimensions propagated through expressions, checks.

A declaration may carry ``{unit = "kg"}`` (``param``, ``var``, ``coord``, ``momentum``, ``input``,
``output``). A unit string is a product of SI symbols with optional prefixes and integer (or
rational) powers: ``kg*m^2/s^2``, ``kg·m²/s²``, ``N*m``, ``m/s^2``, ``1/s``, ``rad``, ``1``.
Only the dimension is used: values are never converted (``mm`` and ``m`` are both a length).

Dimensions are checked on the model's expressions (the AST, so an error points at the term):
the terms of a sum, the two sides of an equation or comparison, the branches of an ``if``, a
declared output/input against its law, a generalized force against its coordinate, and the
arguments of ``sin``/``exp``/... (dimensionless). A check happens only where every quantity
involved has a unit: an expression with a name that has none is not checked ("unknown"). A
numeric literal is dimensionless as a factor (``2*x``), and takes the dimension of what it is
added to or compared with (``x + 1``, ``t < 1``, ``0 = ...``), so that constants need no unit.

Derived units: the rate ``der(q)`` of a coordinate has unit(q)/s; in a Lagrangian model the
conjugate momentum has unit(L)·s/unit(q); in a Hamiltonian model an undeclared momentum has
unit(H)·s/unit(q) of its coordinate.
"""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction

from ..diagnostics import Diagnostic, PdslError, Span
from ..parse import ast as A
from ..records import record

__all__ = ["Dim", "parse_unit", "check_units", "format_dim", "DIMENSIONLESS"]

_BASE = ("kg", "m", "s", "A", "K", "mol", "cd")


@record(kw_only=False, slots=False)
class Dim:
    """Exponents of the SI base units kg, m, s, A, K, mol, cd."""

    e: tuple[Fraction, ...] = (Fraction(0),) * 7

    def __mul__(self, o: "Dim") -> "Dim":
        return Dim(tuple(a + b for a, b in zip(self.e, o.e)))

    def __truediv__(self, o: "Dim") -> "Dim":
        return Dim(tuple(a - b for a, b in zip(self.e, o.e)))

    def __pow__(self, k) -> "Dim":
        return Dim(tuple(a * Fraction(k) for a in self.e))

    @property
    def dimensionless(self) -> bool:
        return all(a == 0 for a in self.e)

    def __str__(self) -> str:
        return format_dim(self)


DIMENSIONLESS = Dim()


def _base(i: int) -> Dim:
    return Dim(tuple(Fraction(1 if k == i else 0) for k in range(7)))


KG, M, S, AMP, KELVIN, MOL, CD = (_base(i) for i in range(7))
_UNITS: dict[str, Dim] = {
    "g": KG, "m": M, "s": S, "A": AMP, "K": KELVIN, "mol": MOL, "cd": CD,
    "N": KG * M / S**2, "J": KG * M**2 / S**2, "W": KG * M**2 / S**3, "Pa": KG / M / S**2, "Hz": S**-1,
    "C": AMP * S, "V": KG * M**2 / S**3 / AMP, "Ohm": KG * M**2 / S**3 / AMP**2, "Ω": KG * M**2 / S**3 / AMP**2,
    "F": AMP**2 * S**4 / KG / M**2, "H": KG * M**2 / S**2 / AMP**2, "Wb": KG * M**2 / S**2 / AMP,
    "T": KG / S**2 / AMP, "S": AMP**2 * S**3 / KG / M**2,
    "rad": DIMENSIONLESS, "sr": DIMENSIONLESS, "deg": DIMENSIONLESS, "rpm": S**-1,
    "min": S, "h": S, "L": M**3,
}
_NO_PREFIX = {"kg", "rad", "sr", "deg", "rpm", "min", "h", "Ohm", "Ω", "mol", "cd"}
_PREFIXES = {"p": -12, "n": -9, "u": -6, "µ": -6, "μ": -6, "m": -3, "c": -2, "d": -1, "k": 3, "M": 6, "G": 9}
_SUPERSCRIPTS = str.maketrans("⁰¹²³⁴⁵⁶⁷⁸⁹⁻", "0123456789-")


def _symbol(name: str) -> Dim | None:
    if name == "kg":
        return KG
    if name in _UNITS:
        return _UNITS[name]
    for p in sorted(_PREFIXES, key=len, reverse=True):
        rest = name[len(p):]
        if name.startswith(p) and rest in _UNITS and rest not in _NO_PREFIX:
            return _UNITS[rest]
    return None


class UnitSyntax(ValueError):
    pass


def parse_unit(text: str) -> Dim:
    """The dimension of a unit string (raises :class:`UnitSyntax` with a reason)."""
    toks = _tokens(text)
    if not toks:
        raise UnitSyntax("the unit is empty (write \"1\" for a dimensionless quantity)")
    pos = 0

    def product() -> Dim:
        nonlocal pos
        d = factor()
        while pos < len(toks) and toks[pos] in ("*", "/", "·"):
            op = toks[pos]
            pos += 1
            d = d / factor() if op == "/" else d * factor()
        return d

    def factor() -> Dim:
        nonlocal pos
        if pos >= len(toks):
            raise UnitSyntax("a unit symbol is missing at the end")
        tok = toks[pos]
        pos += 1
        if tok == "(":
            d = product()
            if pos >= len(toks) or toks[pos] != ")":
                raise UnitSyntax("a `(` is not closed")
            pos += 1
        elif tok == "1":
            d = DIMENSIONLESS
        elif tok[0].isalpha() or tok[0] in "Ωµμ":
            d = _symbol(tok)
            if d is None:
                raise UnitSyntax(f"unknown unit `{tok}`")
        else:
            raise UnitSyntax(f"unexpected `{tok}`")
        if pos < len(toks) and toks[pos] == "^":
            pos += 1
            if pos >= len(toks):
                raise UnitSyntax("a power is missing after `^`")
            d = d ** _exponent(toks[pos])
            pos += 1
        elif pos < len(toks) and _is_number(toks[pos]) and tok != "1":
            d = d ** _exponent(toks[pos])  # m² (superscripts) or m2
            pos += 1
        return d

    d = product()
    if pos != len(toks):
        raise UnitSyntax(f"unexpected `{toks[pos]}`")
    return d


def _is_number(tok: str) -> bool:
    return tok.lstrip("-").replace("/", "", 1).isdigit()


def _exponent(tok: str) -> Fraction:
    if not _is_number(tok):
        raise UnitSyntax(f"the power `{tok}` is not a number")
    return Fraction(tok)


def tokens(text: str, *, fraction_exponents: bool = False) -> list[str]:
    """The tokens of a unit as a model writes it — symbols, integers, ``*``, ``/``, ``^``, ``(``, ``)`` and ``·``
    (for ``·``, ``⋅`` and ``.``) —, superscripts read as digits, a space between two symbols a product. With
    ``fraction_exponents`` an exponent ``^2/3`` is one token ``2/3`` (the FMI unit reader: Modelica spells no
    fractional power, so it refuses those); otherwise ``/`` always divides. The one unit tokenizer: the unit checker
    and :mod:`pdsl.compile.fmi_units` both read units through it."""
    text = text.translate(_SUPERSCRIPTS)
    out, i = [], 0
    while i < len(text):
        c = text[i]
        if c.isspace():
            i += 1
            # a space between two symbols multiplies (`N m`)
            if out and i < len(text) and out[-1] not in "*/·^(" and (text[i].isalpha() or text[i] in "(Ωµμ"):
                out.append("*")
        elif c in "*/·^()." or c == "⋅":
            out.append({"⋅": "·", ".": "·"}.get(c, c))
            i += 1
        elif c.isdigit() or (c == "-" and i + 1 < len(text) and text[i + 1].isdigit()):
            j = i + 1
            while j < len(text) and (text[j].isdigit() or (
                    fraction_exponents and text[j] == "/" and j + 1 < len(text) and text[j + 1].isdigit()
                    and out and out[-1] == "^")):
                j += 1
            out.append(text[i:j])
            i = j
        elif c.isalpha() or c in "Ωµμ":
            j = i + 1
            while j < len(text) and (text[j].isalpha() or text[j] in "Ωµμ"):
                j += 1
            out.append(text[i:j])
            i = j
        else:
            raise UnitSyntax(f"unexpected character `{c}`")
    return out


_tokens = tokens  # the checker's own name for it


_SUP = str.maketrans("0123456789-", "⁰¹²³⁴⁵⁶⁷⁸⁹⁻")


def format_dim(d: Dim) -> str:
    """``kg·m²/s²``; ``1`` for a dimensionless quantity."""
    def part(i, k):
        k = abs(k)
        if k == 1:
            return _BASE[i]
        if k.denominator == 1:
            return _BASE[i] + str(k.numerator).translate(_SUP)
        return f"{_BASE[i]}^({k})"

    num = [part(i, k) for i, k in enumerate(d.e) if k > 0]
    den = [part(i, k) for i, k in enumerate(d.e) if k < 0]
    top = "·".join(num) or "1"
    if not den:
        return top
    return f"{top}/{den[0]}" if len(den) == 1 else f"{top}/({'·'.join(den)})"


# ---------------------------------------------------------------- the check
_ANY = "any"  # a bare literal: takes the dimension of its partner in a sum or comparison

_DIMENSIONLESS_FUNCS = {"sin", "cos", "tan", "asin", "acos", "atan", "exp", "log", "tanh", "sinh", "cosh"}


class _Checker:
    """Dimensions of AST expressions given the units of names; collects UnitMismatch diagnostics."""

    def __init__(self, units: dict[str, Dim]):
        self.units = units
        self.diags: list[Diagnostic] = []
        self.loop_vars: set[str] = set()
        self.energy: Dim | None = None  # of the Lagrangian or Hamiltonian, when known

    def mismatch(self, span: Span, message: str, hint: str | None = None):
        self.diags.append(Diagnostic("UnitMismatch", message, span, hint))

    # returns Dim, _ANY, or None (unknown)
    def dim(self, e: A.Expr):
        method = getattr(self, "_" + type(e).__name__, None)
        return method(e) if method else None

    def _Num(self, e):
        return _ANY

    def _Name(self, e):
        if e.id == "t":
            return S
        if e.id == "pi" or e.id in self.loop_vars:
            return DIMENSIONLESS
        return self.units.get(e.id)

    def _Index(self, e):
        return self.dim(e.base) if isinstance(e.base, A.Name) else None

    def _Neg(self, e):
        return self.dim(e.operand)

    def _BinOp(self, e):
        if e.op in "+-":
            return self.sum_of(_terms(e))
        a, b = self.dim(e.left), self.dim(e.right)
        if e.op == "^":
            k = _literal(e.right)
            if k is not None:  # x^2, x^-1, x^0.5
                return a if a is None or a == _ANY else a ** k
            if isinstance(b, Dim) and not b.dimensionless:
                self.mismatch(e.right.span, f"an exponent must be dimensionless, this one is {b}")
            return DIMENSIONLESS if isinstance(a, Dim) and a.dimensionless else (a if a == _ANY else None)
        a = DIMENSIONLESS if a == _ANY else a
        b = DIMENSIONLESS if b == _ANY else b
        if a is None or b is None:
            return None
        return a * b if e.op == "*" else a / b

    def sum_of(self, terms):
        """Terms (expr, sign): all known dimensions must agree; the first known one is the reference."""
        dims = [(t, self.dim(t)) for t in terms]
        known = [(t, d) for t, d in dims if isinstance(d, Dim)]
        if any(d is None for _, d in dims):
            return None
        if not known:
            return _ANY
        ref_t, ref = known[0]
        for t, d in known[1:]:
            if d != ref:
                self.mismatch(t.span, f"this term has dimension {d}, but the sum's first term has {ref}",
                              f"units must agree across `+` and `-` (the first term is line {ref_t.span.line}, column {ref_t.span.col})")
                return None
        return ref

    def agree(self, a_expr, b_expr, what: str, span: Span | None = None):
        a, b = self.dim(a_expr), self.dim(b_expr)
        if isinstance(a, Dim) and isinstance(b, Dim) and a != b:
            self.mismatch(span or b_expr.span, f"{what}: {a} on the left, {b} on the right")
            return None
        if a is None or b is None:
            return None
        return a if isinstance(a, Dim) else b

    def _Compare(self, e):
        self.agree(e.left, e.right, f"the sides of `{e.op}` differ in dimension", e.span)
        return DIMENSIONLESS

    def _BoolOp(self, e):
        self.dim(e.left), self.dim(e.right)
        return DIMENSIONLESS

    def _Not(self, e):
        self.dim(e.operand)
        return DIMENSIONLESS

    def _IfExpr(self, e):
        self.dim(e.cond)
        a, b = self.dim(e.then), self.dim(e.orelse)
        if isinstance(a, Dim) and isinstance(b, Dim) and a != b:
            self.mismatch(e.orelse.span, f"the branches of this `if` differ in dimension: {a} after `then`, {b} after `else`")
            return None
        if a is None or b is None:
            return None
        return a if isinstance(a, Dim) else b

    def _Vector(self, e):
        dims = [self.dim(i) for i in e.items]
        known = {d for d in dims if isinstance(d, Dim)}
        if any(d is None for d in dims) or len(known) > 1:
            return None
        return known.pop() if known else _ANY

    def _Generator(self, e):
        self.loop_vars.add(e.var)
        try:
            return self.dim(e.body)
        finally:
            self.loop_vars.discard(e.var)

    def _Call(self, e):
        if not isinstance(e.func, A.Name):
            return None
        name = e.func.id
        args = [self.dim(a) for a in e.args]
        if name == "der" and len(args) == 1:
            return args[0] / S if isinstance(args[0], Dim) else None
        if name in _DIMENSIONLESS_FUNCS:
            for a, d in zip(e.args, args):
                if isinstance(d, Dim) and not d.dimensionless:
                    self.mismatch(a.span, f"the argument of `{name}` must be dimensionless, but it is {d}")
            return DIMENSIONLESS
        if name in ("abs", "norm", "sum"):
            return args[0] if args else None
        if name == "sign":
            return DIMENSIONLESS
        if name == "sqrt":
            return args[0] ** Fraction(1, 2) if args and isinstance(args[0], Dim) else (args[0] if args else None)
        if name in ("min", "max", "atan2", "smoothstep") and len(e.args) == 2:
            d = self.agree(e.args[0], e.args[1], f"the arguments of `{name}` differ in dimension", e.span)
            return d if name in ("min", "max") else DIMENSIONLESS
        if name in ("dot", "cross") and len(args) == 2:
            a, b = (DIMENSIONLESS if d == _ANY else d for d in args)
            return a * b if isinstance(a, Dim) and isinstance(b, Dim) else None
        return None


def _literal(e: A.Expr) -> Fraction | None:
    """The value of a numeric literal exponent (``2``, ``-1``, ``0.5``), or None."""
    if isinstance(e, A.Neg):
        k = _literal(e.operand)
        return -k if k is not None else None
    if isinstance(e, A.Num):
        try:
            return Fraction(e.text)
        except (ValueError, ZeroDivisionError):
            return None
    return None


def _terms(e: A.Expr) -> list[A.Expr]:
    """The terms of a chain ``a + b - c`` (without recursion per operator)."""
    out, stack = [], [e]
    while stack:
        x = stack.pop()
        if isinstance(x, A.BinOp) and x.op in "+-":
            stack.append(x.right)
            stack.append(x.left)
        else:
            out.append(x)
    return out


_UNIT_KINDS = ("param", "var", "coord", "momentum", "input", "output")


def declared_units(m: A.ModelDef) -> tuple[dict[str, tuple[str, Dim]], list[Diagnostic]]:
    """name -> (unit text, dimension) of every declaration with ``{unit = "..."}``; bad units as diagnostics."""
    out, diags = {}, []
    for stmt in m.body:
        if not isinstance(stmt, A.DeclStmt) or stmt.kind not in _UNIT_KINDS:
            continue
        for d in stmt.decls:
            for a in d.attrs:
                if a.name != "unit":
                    continue
                if not isinstance(a.value, A.Text):
                    diags.append(Diagnostic("BadAttribute", "a unit is text in quotes: `{unit = \"kg\"}`",
                                            a.value.span if a.value is not None else a.span))
                    continue
                try:
                    out[d.name] = (a.value.value, parse_unit(a.value.value))
                except UnitSyntax as err:
                    diags.append(Diagnostic("BadUnit", f"`{a.value.value}`: {err}", a.value.span,
                                            "units are SI symbols with prefixes and powers: kg, m/s^2, N*m, kg·m²/s², rad, 1"))
    return out, diags


def check_units(m: A.ModelDef, model):
    """Check the dimensions of ``m``'s expressions; return ``model`` with its units attached.

    Raises :class:`PdslError` with every ``UnitMismatch``/``BadUnit`` found. A model without units is
    returned unchanged (no check, nothing attached)."""
    declared, diags = declared_units(m)
    port_units = any(isinstance(s, A.KinematicPortStmt) and s.unit is not None for s in m.body)
    if not declared and not diags and not port_units:
        return model
    dims = {n: d for n, (_, d) in declared.items()}
    ck = _Checker(dims)
    kinds: dict[str, str] = {}
    for stmt in m.body:
        if isinstance(stmt, A.DeclStmt):
            for d in stmt.decls:
                kinds[d.name] = stmt.kind
                if d.value is not None and d.name in dims and stmt.kind in ("input", "output", "param"):
                    got = ck.dim(d.value)
                    if isinstance(got, Dim) and got != dims[d.name]:
                        ck.mismatch(d.value.span, f"`{d.name}` is declared in {declared[d.name][0]} ({dims[d.name]}), "
                                    f"but its value has dimension {got}")
                elif d.value is not None:
                    ck.dim(d.value)
    energy_stmts = [s for s in m.body if isinstance(s, (A.LagrangianStmt, A.HamiltonianStmt))]
    for stmt in energy_stmts:  # first: a generalized force is checked against energy / coordinate
        d = ck.dim(stmt.expr)
        ck.energy = d if isinstance(d, Dim) else None
    for stmt in m.body:
        if stmt in energy_stmts:
            continue
        for loop in stmt.loops:
            ck.loop_vars.add(loop.var)
        _check_stmt(ck, stmt, dims, kinds)
        for loop in stmt.loops:
            ck.loop_vars.discard(loop.var)
    diags.extend(ck.diags)
    if diags:
        raise PdslError(diags)
    units = dict((n, t) for n, (t, _) in declared.items())
    units.update(_derived(m, ck, dims, kinds, declared))
    return replace(model, units=tuple(sorted(units.items()))) if hasattr(model, "units") else model


def _check_stmt(ck: _Checker, stmt, dims, kinds) -> None:
    if isinstance(stmt, A.KinematicPortStmt) and stmt.unit is not None:
        got = ck.dim(stmt.across)
        want = parse_unit(stmt.unit.value)
        if isinstance(got, Dim) and got != want:
            ck.mismatch(stmt.across.span, f"port `{stmt.name}` is declared in {stmt.unit.value} ({want}), but its "
                        f"velocity has dimension {got}")
    elif isinstance(stmt, (A.EquationStmt, A.ConstraintStmt)):
        ck.agree(stmt.lhs, stmt.rhs, "the two sides of this equation differ in dimension", stmt.span)
    elif isinstance(stmt, (A.LagrangianStmt, A.HamiltonianStmt, A.PotentialStmt)):
        ck.dim(stmt.expr)
    elif isinstance(stmt, A.ForceStmt):
        f = ck.dim(stmt.force)
        if isinstance(stmt.target, A.Name) and kinds.get(stmt.target.id) == "coord":
            energy = _energy_dim(ck, stmt)
            q = dims.get(stmt.target.id)
            if isinstance(f, Dim) and energy is not None and q is not None and f != energy / q:
                ck.mismatch(stmt.force.span, f"a generalized force on `{stmt.target.id}` has dimension {energy / q} "
                            f"(energy / coordinate), this one has {f}")
    elif isinstance(stmt, A.GravityStmt):
        ck.dim(stmt.g)
    elif isinstance(stmt, (A.StoreStmt,)):
        ck.dim(stmt.energy)
    elif isinstance(stmt, (A.ResistiveStmt, A.TwoPortStmt)):
        ck.dim(stmt.lhs), ck.dim(stmt.rhs)
    elif isinstance(stmt, A.SourceStmt):
        ck.dim(stmt.value)


def _energy_dim(ck: _Checker, stmt) -> Dim | None:
    return ck.energy


def _derived(m: A.ModelDef, ck: _Checker, dims, kinds, declared) -> dict[str, str]:
    """Units of states that are not declared: der(q) of a coordinate, the momenta of L or H."""
    out: dict[str, str] = {}
    energy = ck.energy
    coords = [d.name for s in m.body if isinstance(s, A.DeclStmt) and s.kind == "coord" for d in s.decls]
    momenta = [d.name for s in m.body if isinstance(s, A.DeclStmt) and s.kind == "momentum" for d in s.decls]
    for q in coords:
        if q in dims:  # rad -> rad/s, m -> m/s; a compound unit by its dimension
            text = declared[q][0]
            out[f"der({q})"] = f"{text}/s" if all(c.isalnum() for c in text) and text != "1" else format_dim(dims[q] / S)
    lagrangian = any(isinstance(s, A.LagrangianStmt) for s in m.body)
    if lagrangian and energy is not None:  # the conjugate momentum ∂L/∂(der q) of each coordinate
        for q in coords:
            if q in dims:
                out[f"momentum({q})"] = format_dim(energy * S / dims[q])
    hamiltonians = [s.expr for s in m.body if isinstance(s, A.HamiltonianStmt)]
    pairs = [(q, p) for q, p in zip(coords, momenta) if p not in dims and q in dims]
    if energy is not None:
        for q, p in pairs:
            out[p] = format_dim(energy * S / dims[q])
    elif hamiltonians and pairs:  # momenta without a unit: conjugate to the coordinates, if H then is an energy
        cand = {p: JOULE * S / dims[q] for q, p in pairs}
        trial = _Checker({**ck.units, **cand})
        if trial.dim(hamiltonians[0]) == JOULE and not trial.diags:
            out.update({p: format_dim(d) for p, d in cand.items()})
    out.update(_store_units(m, ck))
    return out


JOULE = KG * M**2 / S**2


def _store_units(m: A.ModelDef, ck: _Checker) -> dict[str, str]:
    """Port-Hamiltonian stores: the stored energy is in joules, so its state x has the dimension that makes
    H(x) an energy; then the port's flow/effort is dx/dt (x/s) and the other one dH/dx (J/x)."""
    out: dict[str, str] = {}
    for stmt in m.body:
        if not isinstance(stmt, A.StoreStmt) or stmt.index or stmt.state_index or stmt.state in ck.units:
            continue
        x = _solve_state(ck, stmt.state, stmt.energy)
        if x is None:
            continue
        rate, conj = x / S, JOULE / x
        effort, flow = (conj, rate) if stmt.kind == "flow_store" else (rate, conj)
        out[stmt.state] = format_dim(x)
        out[f"effort({stmt.name})"] = format_dim(effort)
        out[f"flow({stmt.name})"] = format_dim(flow)
    return out


def _solve_state(ck: _Checker, state: str, energy: A.Expr) -> Dim | None:
    """dim(x) with dim(H(x)) = J, from H's dimension at two trial dimensions of x (it is affine in dim(x))."""
    def trial(d: Dim):
        sub = _Checker({**ck.units, state: d})
        out = sub.dim(energy)
        return out if isinstance(out, Dim) and not sub.diags else None

    d0, d1 = trial(DIMENSIONLESS), trial(KG)
    if d0 is None or d1 is None:
        return None
    n = d1.e[0] - d0.e[0]  # H ∝ x^n
    if n == 0:
        return None
    x = (JOULE / d0) ** (1 / n)
    return x if trial(x) == JOULE else None
