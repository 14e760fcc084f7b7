"""Human-readable views of a SymbolicSystem: text, Markdown, LaTeX."""

from __future__ import annotations

import re
import sys

import sympy as sp

from . import symbols as S
from .lower.common import rate_name
from .lower.ir import SymbolicSystem, set_notebook_renderer
from .printing import to_text

__all__ = ["render_system", "FORMATS"]

FORMATS = ("text", "markdown", "latex")
_DISPLAY_OPS_LIMIT = 400  # simplify an equation for display only when it is small


def _display_names(system: SymbolicSystem) -> dict[sp.Symbol, sp.Symbol]:
    """Rates dt(x) are shown as der(x)."""
    return {s.rate: S.sym(rate_name(s.rate)) for s in system.states}


def _latex_name(name: str) -> str:
    m = re.fullmatch(r"der\((.*)\)", name)
    if m:
        inner = m.group(1)
        m2 = re.fullmatch(r"der\((.*)\)", inner)
        if m2:
            return r"\ddot{" + _latex_name(m2.group(1)) + "}"
        return r"\dot{" + _latex_name(inner) + "}"
    m = re.fullmatch(r"(\w+)\[(\d+)\]", name)
    if m:
        return f"{_latex_base(m.group(1))}_{{{m.group(2)}}}"
    if name == "lambda":
        return r"\lambda"
    return _latex_base(name).replace(".", r".")


_GREEK = {"alpha", "beta", "gamma", "delta", "epsilon", "theta", "phi", "psi", "omega", "lambda", "mu", "nu", "rho", "sigma", "tau", "eta", "xi", "kappa", "zeta", "chi"}


def _latex_base(name: str) -> str:
    if name in _GREEK:
        return "\\" + name
    if name.lower() in _GREEK and name[0].isupper():
        return "\\" + name.capitalize()
    if "_" in name:
        head, tail = name.split("_", 1)
        return f"{_latex_base(head)}_{{{tail}}}"
    return name if len(name) == 1 else r"\mathrm{" + name + "}"


# Bounds of sp.simplify for display, in operations (Python function calls, C calls included, counted by a profile
# hook while it runs), never in seconds: the same model shows the same way on a calm and on a busy machine.
# ~2e6 operations a second here: 4e6 each (the old 2 s deadline), 2e7 per render (the old 10 s total).
_SIMPLIFY_OPS_EACH = 4_000_000
_SIMPLIFY_OPS_TOTAL = 20_000_000
_HEAVY_OPS = 60  # above this size, radicals of sums (‖r‖⁵ of dipole fields) make simplify crawl
_NON_SMOOTH = (sp.Abs, sp.sign, sp.Piecewise, sp.Min, sp.Max, sp.Heaviside)
_HUGE_BITS = 100  # integers and rational parts beyond ~1e30 are not simplified (display only)


class _OverBudget(BaseException):
    """Raised by the operation counter. A BaseException, so that no ``except Exception`` inside sympy
    swallows it (a swallowed stop would let one simplify run on, uncounted)."""


class _Budget:
    """Operations left for ``sp.simplify`` in one render (``show`` must finish in bounded time, whatever the model).

    ``sp.simplify`` has no cost bound of its own: on a magnetic-pendulum force (≈250 operations with
    ‖x − r_i‖⁻⁵ terms) a single call ran for minutes. Each call may spend ``each`` operations, all of them
    together ``total``; an operation is a function call (Python or C) made inside the call, counted by a
    ``sys.setprofile`` hook. The count depends only on the expression, sympy's version and what sympy has
    cached in the process, not on the machine's load (a wall-clock deadline made two renders of one model
    differ on a busy machine). Single C calls that run long (big-integer gcds) cannot be interrupted by any
    counter: :func:`_slow_kind` keeps those expressions away from simplify altogether.
    """

    def __init__(self, total: int | None = None, each: int | None = None):
        self.left = _SIMPLIFY_OPS_TOTAL if total is None else total
        self.each = _SIMPLIFY_OPS_EACH if each is None else each
        self.timeouts = 0  # calls stopped by the budget

    def simplify(self, e: sp.Expr) -> sp.Expr:
        return self.call(lambda: sp.simplify(e), lambda: _light(e), e)

    def call(self, fn, fallback, *exprs):
        """``fn()`` within the budget, else ``fallback()`` (also when an expression is of a slow
        kind, or when ``fn`` fails: display only)."""
        if self.left <= 0:
            return fallback()
        if any(_slow_kind(e) for e in exprs):
            # sympy's big-integer gcd inside simplify is one C call that no counter can interrupt (a full-suite
            # run hung > 10 min on the magnet pendulum's dipole forces)
            return fallback()
        counter = _Counter(min(self.each, self.left))
        try:
            with counter:
                return fn()
        except _OverBudget:
            self.timeouts += 1
            return fallback()
        except Exception:  # noqa: BLE001 - display only; fall back to the derived form
            return fallback()
        finally:
            self.left -= counter.count


_BUDGET = _Budget()


class _Counter:
    """Count the calls made in the block (this thread) and raise :class:`_OverBudget` past ``limit``."""

    __slots__ = ("limit", "count", "_old")

    def __init__(self, limit: int):
        self.limit = limit
        self.count = 0

    def _hook(self, frame, event, arg):
        if event == "call" or event == "c_call":
            self.count += 1
            if self.count > self.limit:
                sys.setprofile(None)  # no further events while the stop unwinds
                raise _OverBudget

    def __enter__(self):
        self._old = sys.getprofile()
        sys.setprofile(self._hook)
        return self

    def __exit__(self, *exc):
        sys.setprofile(self._old)
        return False


def _slow_kind(e: sp.Expr) -> bool:
    """Non-smooth functions, huge numbers (big-integer gcds inside simplify are single C calls that no
    deadline interrupts: a 1e200 hinge axis hung a full-suite run), or a big expression with radicals of
    sums: where simplify may crawl."""
    if e.has(*_NON_SMOOTH):
        return True
    for n in e.atoms(sp.Number):
        if n.is_Rational and max(abs(n.p).bit_length(), n.q.bit_length()) > _HUGE_BITS:
            return True
        if n.is_Float and n != 0 and (not 1e-30 < abs(float(n)) < 1e30 or float(f"{float(n):.10g}") != float(n)):
            return True  # and full-precision floats (an SVD's basis): simplify turns them into huge rationals
    return sp.count_ops(e) > _HEAVY_OPS and any(
        p.base.is_Add and not p.exp.is_Integer for p in e.atoms(sp.Pow))


def _light(e: sp.Expr) -> sp.Expr:
    """What an expression sp.simplify could not finish on shows as: as derived."""
    return e


def _small(e: sp.Expr, limit: int = _DISPLAY_OPS_LIMIT) -> bool:
    """count_ops(e) ≤ limit, without walking all of a huge expression (count_ops alone took seconds
    per row on the gyroscope's elimination rows): more than 8·limit tree nodes is too big."""
    for k, _ in enumerate(sp.preorder_traversal(e)):
        if k > 8 * limit:
            return False
    return sp.count_ops(e) <= limit


def _tidy(e: sp.Expr) -> sp.Expr:
    if _small(e):
        return _BUDGET.simplify(e)
    return e


def _tidy_rational(e: sp.Expr) -> sp.Expr:
    """``display = "expand-rational"`` (networks): the lowering has tidied the rates already; a rational expression (a
    linear network, quadratic energies) is shown expanded — sympy's simplify needs ~0.1 s per term to find the same
    form (seconds on a ladder)."""
    from .lower.structural import is_rational

    if not is_rational(e):
        return _tidy(e)
    return _tidy(e) if any(p.exp.is_negative and p.base.is_Add for p in e.atoms(sp.Pow)) else sp.expand(e)


class _Printer:
    def __init__(self, system: SymbolicSystem, fmt: str):
        self.fmt = fmt
        self.rename = _display_names(system)
        syms = set()
        for eq in system.differential + system.algebraic:
            syms |= eq.lhs.free_symbols | eq.rhs.free_symbols
        if system.energy is not None:
            syms |= system.energy.free_symbols
        self.latex_names = {s: _latex_name(rate_name(s) if s in self.rename else s.name) for s in syms}

    def expr(self, e: sp.Expr) -> str:
        if self.fmt in ("latex", "markdown"):  # markdown carries LaTeX math ($…$, $$…$$): Jupyter renders it
            return sp.latex(e, symbol_names=self.latex_names)
        return to_text(e.xreplace(self.rename))  # sstr, with `if c then a else b` for conditionals

    def inline(self, e) -> str:
        """An expression inside a line of text: ``$…$`` math in markdown."""
        return f"${self.expr(e)}$" if self.fmt == "markdown" else self.expr(e)

    def name(self, text: str) -> str:
        """A quantity's name in a line of text: code in markdown (``tau_smooth``, ``b[1].x`` stay as written)."""
        return f"`{text}`" if self.fmt == "markdown" else text

    def eq(self, lhs, rhs) -> str:
        return f"{self.expr(lhs)} = {self.expr(rhs)}"


_RENDERED: dict[tuple[int, str, bool], tuple[SymbolicSystem, str]] = {}  # the last few renders (see below)


def render_system(system: SymbolicSystem, fmt: str = "text", *, simplify: bool = True) -> str:
    """The system as text, Markdown or LaTeX. The same system renders the same way every time: simplify's budget
    is counted in operations (see :class:`_Budget`), sympy's cache is cleared first so that what ran before in the
    process does not change the count, and a repeated render (Jupyter's display of one model) is the first one's
    text (sympy keeps facts on the symbols themselves, which would make a second render cheaper, so different)."""
    memo = (id(system), fmt, simplify)
    if memo in _RENDERED and _RENDERED[memo][0] is system:
        return _RENDERED[memo][1]
    text = _render(system, fmt, simplify)
    if len(_RENDERED) >= 8:
        _RENDERED.pop(next(iter(_RENDERED)))
    _RENDERED[memo] = (system, text)
    return text


set_notebook_renderer(render_system)  # Jupyter's view of a SymbolicSystem (the IR does not import this module)


def _render(system: SymbolicSystem, fmt: str, simplify: bool) -> str:
    global _BUDGET
    _BUDGET = _Budget()
    if simplify:
        from sympy.core.cache import clear_cache

        clear_cache()
    pr = _Printer(system, fmt)
    tidy = _tidy if simplify else (lambda e: e)
    if simplify and system.display == "expand-rational":
        tidy = _tidy_rational
    md = fmt == "markdown"
    tex = fmt == "latex"
    out: list[str] = []

    def h(title: str):
        if md:
            out.append(f"\n## {title}\n")
        elif tex:
            out.append(f"\n% --- {title}")
        else:
            out.append(f"\n{title}:")

    def item(text: str):
        out.append(f"- {text}" if md else (f"% {text}" if tex else f"  {text}"))

    def u(name: str) -> str:  # ` [kg]` after a quantity with a unit (nothing for a model without units)
        unit = system.unit_of(name) if system.units else None
        if not unit:
            return ""
        return f" [`{unit}`]" if md else f" [{unit}]"  # `N*m*s` is no emphasis in markdown

    title = f"model {system.name}" + (f" — {system.doc}" if system.doc else "")
    out.append(f"# {_md_text(title)}" if md else (f"% {title}" if tex else title))
    item(f"formalism: {system.formalism}; {len(system.states)} states, {len(system.algebraics)} algebraic, "
         f"{len(system.multipliers)} multipliers, {len(system.params)} parameters")
    if system.bodies:
        _bodies(system, pr, h, item)
    h("States")
    for s in system.states:
        item(f"{pr.name(s.name)}{u(s.name)}" + (f" (start {s.start:g})" if s.start is not None else "") + f"    [{s.span}{s.span.chain}]")
    if system.algebraics:
        h("Algebraic variables")
        for a in system.algebraics:
            item(f"{pr.name(a.name)}{u(a.name)}    [{a.span}{a.span.chain}]")
    if system.params:
        h("Parameters")
        for p in system.params:
            bounds = []
            if p.lower is not None:
                bounds.append(f"≥ {p.lower:g}")
            if p.upper is not None:
                bounds.append(f"≤ {p.upper:g}")
            flag = " free" if p.free else ""
            item(f"{pr.name(p.name)} = {p.default:g}{u(p.name)}{flag}{(' ' + ', '.join(bounds)) if bounds else ''}")
    if system.inputs:
        h("Inputs")
        for v in system.inputs:
            if v.law is None:
                item(f"{pr.name(v.name)}{u(v.name)}  (exogenous)")
            else:
                item(f"{pr.name(v.name)}{u(v.name)}: ${_latex_name(v.name)} = {pr.expr(v.law)}$  (feedback law)" if md
                     else f"{v.name}{u(v.name)} = {pr.expr(v.law)}  (feedback law)")
    if system.outputs:
        h("Outputs")
        for o in system.outputs:
            item(f"{o.name}{u(o.name)} = {pr.expr(o.expr)}" if not md else
                 f"{pr.name(o.name)}{u(o.name)}: ${_latex_name(o.name)} = {pr.expr(o.expr)}$")
    if system.neural:
        h("Neural components")
        for n in system.neural:
            item(f"{pr.name(n.name)}: {n.arch} {n.n_in if n.n_in is not None else '?'} -> {' -> '.join(map(str, n.hidden))} -> {n.n_out}, act {n.act}"
                 + (f", init {n.init}" if n.init != "uniform" else ""))
    if system.energy is not None:
        h("Energy")
        out.append(_block(pr.expr(tidy(system.energy)), fmt, f"E = ", system.energy_origin))
    h("Equations" + (" (linear in the derivatives and multipliers; solved numerically)" if not system.is_explicit() else ""))
    trivial = [eq for eq in system.differential if _is_rate_identity(eq)]
    if trivial:
        item(f"kinematics: the rates {', '.join(pr.name(eq.rhs.name) for eq in trivial)} are states themselves")
    for eq in system.differential:
        if eq in trivial:
            continue
        lhs, rhs = _cancel_common(tidy(eq.lhs), tidy(eq.rhs)) if simplify else (eq.lhs, eq.rhs)
        out.append(_block(pr.eq(lhs, rhs), fmt, "", eq.origin, eq.label))
    for eq in system.algebraic:
        out.append(_block(pr.eq(sp.Integer(0), tidy(eq.lhs - eq.rhs)), fmt, "", eq.origin, eq.label))
    if system.constraints:
        h(system.constraints_title)
        for c in system.constraints:
            out.append(_block(pr.eq(tidy(c.residual), sp.Integer(0)), fmt, "", c.origin, c.label))
    if system.events:  # state events (LANGUAGE.md §11): fire when the condition goes from false to true
        h("Events (fire when the condition becomes true; values read before the event)")
        for ev in system.events:
            if md:  # v ← −e·v: the value read before the event
                acts = [f"${_latex_name(r.target)} \\leftarrow {pr.expr(r.value)}$" for r in ev.resets]
            else:
                acts = [f"reinit({r.target}, {pr.expr(r.value)})" for r in ev.resets]
            acts += ["terminate"] if ev.terminate else []
            item(f"when {pr.inline(ev.condition)} then {', '.join(acts)}    [{ev.span}{ev.span.chain}]")
        if system.kinetic and any(k.residual.free_symbols & {s.symbol for s in system.states if s.name in system.kinetic}
                                  for k in system.invariants):
            item("a reset of a velocity or momentum is an impulse through the velocity constraints")
    for section in system.derivation:  # what the formalism derived on the way (display only)
        h(section.title)
        for it in section.items:
            value = it.value if isinstance(it.value, sp.MatrixBase) else tidy(it.value)
            item(f"{it.label} = {pr.inline(value)}" if not md else f"{_md_text(it.label)}: {pr.inline(value)}")
        if section.note:
            item(f"({_md_text(section.note) if md else section.note})")
    return "\n".join(out).lstrip("\n") + "\n"


def _cancel_common(lhs, rhs):
    """Divide both sides by a common factor (for display): l·(…) = l·(…) -> … = …; within the time budget."""
    if rhs == 0 or not (_small(lhs) and _small(rhs)) or sp.count_ops(lhs) + sp.count_ops(rhs) > _DISPLAY_OPS_LIMIT:
        return lhs, rhs
    return _BUDGET.call(lambda: _divide_common(lhs, rhs), lambda: (lhs, rhs), lhs, rhs)


def _divide_common(lhs, rhs):
    try:
        g = sp.gcd(sp.factor_terms(lhs), sp.factor_terms(rhs))
    except (sp.PolynomialError, sp.polys.polyerrors.PolificationFailed, TypeError):
        return lhs, rhs
    if g in (0, 1, -1) or not g.free_symbols:
        return lhs, rhs
    return sp.simplify(lhs / g), sp.simplify(rhs / g)


def _is_rate_identity(eq) -> bool:
    """``der(q) = der(q)``: the rate of q is the state named der(q) (Lagrangian kinematics)."""
    return isinstance(eq.rhs, sp.Symbol) and isinstance(eq.lhs, sp.Symbol) and eq.lhs.name.startswith("dt(") \
        and rate_name(eq.lhs) == eq.rhs.name


def _block(body: str, fmt: str, prefix: str, origin, label: str = "") -> str:
    where = f"{origin.path}:{origin.line}{origin.chain}" if origin else ""
    note = f"{label}, " if label else ""
    if fmt == "latex":
        return f"\\begin{{equation}} {prefix.replace('E = ', 'E = ')}{body} \\end{{equation}} % {note}{where}"
    if fmt == "markdown":  # display math, then where it came from (Jupyter and nbconvert render $$…$$)
        return f"\n$${prefix}{body}$$\n({_md_text(note)}line {origin.line})" if origin else f"\n$${prefix}{body}$$"
    return f"  {prefix}{body}\n      ({note}{where})"


def _md_text(text: str) -> str:
    """Prose for markdown: ``*`` and ``_`` kept as characters, not emphasis."""
    return text.replace("\\", "\\\\").replace("*", "\\*").replace("_", "\\_")


def _bodies(system, pr, h, item) -> None:
    """Bodies, their node layout and mass-matrix blocks (Eq. 9), and the degrees of freedom."""
    h("Bodies")
    for b in system.bodies:
        kind = b.kind if b.kind == "point mass" else f"{b.kind}, moments {', '.join(pr.inline(m) for m in b.moments)}"
        item(f"{pr.name(b.name)}: {kind}, mass {pr.inline(b.mass)}; nodes {', '.join(map(pr.name, b.nodes))}    "
             f"[{b.span}{b.span.chain}]")
        if b.node_mass_matrix is not None:
            M = b.node_mass_matrix
            if pr.fmt == "markdown":
                item(f"  mass matrix on the nodes (Eq. 9, $\\otimes I_{system.space}$): {pr.inline(M.applyfunc(sp.simplify))}")
            else:
                rows = "; ".join(", ".join(pr.expr(sp.simplify(M[i, j])) for j in range(M.shape[1])) for i in range(M.shape[0]))
                item(f"  mass matrix on the nodes (Eq. 9, ⊗ I_{system.space}): [{rows}]")
    n_coords = sum(b.coordinates for b in system.bodies)
    n_constraints = len(system.constraints)
    h("Degrees of freedom")
    item(f"n·d − C = {n_coords} − {n_constraints} = {n_coords - n_constraints}")


# ====================================================================== show --power
def power_report(system: SymbolicSystem) -> str:
    """What ``show --power`` prints: the interfaces, the power balance dH/dt = supplied − dissipated and, for a model
    with thermal ports, the heat balance dU/dt = Σ Q̇ in of its thermal part and the first law Σ P_in = Σ Q̇_out +
    dE/dt of every component with power ports and a thermal port (LANGUAGE.md "Port domains")."""
    from .lower.structural import interface_balance, power_balance

    out: list[str] = []
    interfaces = interface_balance(system)
    if interfaces:
        out.append("\nInterfaces (power into each side; they cancel):")
        for a, b, total in interfaces:
            out.append(f"  {a.name}: {a.power}")
            out.append(f"  {b.name}: {b.power}")
            out.append(f"  sum: {total}" + ("  (cancel identically)" if total == 0 else "  (DO NOT CANCEL)"))
    if not system.is_explicit():
        out.append("\nPower balance: the system is linear-implicit (multipliers or a mass matrix), so dE/dt is not a "
                   "closed expression here; `pdsl simulate` audits E(t) − E(0) − ∫ dE/dt along the motion")
        out += [f"  {_term(t.role, t.name, t.power, t.kind)}" for t in system.power_terms]
        return "\n".join(out)
    pb = power_balance(system)
    if pb.terms or pb.heat is None or pb.dHdt != 0:
        out.append("\nPower balance (dH/dt = supplied − dissipated):")
        out.append(f"  dH/dt = {pb.dHdt}")
        out += [f"  {_term(role, port, power)}" for role, port, power in pb.terms]
        verdict = "holds identically" if pb.residual == 0 else f"FAILS: residual {pb.residual}"
        if pb.residual == 0 and pb.modulo:
            verdict = "holds on the constraints between stores (" + ", ".join(f"{g} = 0" for g in pb.modulo) + ")"
        out.append(f"  balance: {verdict}")
    if pb.heat is not None:
        heat = pb.heat
        out.append("\nHeat balance (first law of the thermal part, in W: dU/dt = Σ Q̇ in; temperature × heat flow is "
                   "not a power):")
        out.append(f"  U = {heat.U}    (the heat the thermal stores took in since the start)")
        out.append(f"  dU/dt = {heat.dUdt}")
        out += [f"  {_term(role, port, q, 'heat')}" for role, port, q in heat.terms]
        out.append("  balance: " + ("holds identically" if heat.residual == 0 else f"FAILS: residual {heat.residual}"))
    if pb.components:
        out.append("\nComponents with power and heat ports (Σ P_in = Σ Q̇_out + dE/dt):")
        for c in pb.components:
            name = c.name or system.name
            out.append(f"  {name}: P_in = {c.power_in}, Q̇_out = {c.heat_out}, "
                       + ("dE/dt: not known (it has states of plain equations)" if c.dEdt is None else f"dE/dt = {c.dEdt}"))
            if c.residual is not None:
                out.append("    first law: " + ("holds identically" if c.residual == 0
                                                else f"FAILS: P_in − Q̇_out − dE/dt = {c.residual}"))
    return "\n".join(out)


def _term(role: str, name: str, value, kind: str = "power") -> str:
    """One term of a balance: supplied (+), dissipated, or taken in by a component written in equations (−)."""
    if role == "source":
        return f"{'heat from' if kind == 'heat' else 'supplied by'} {name}: {value}"
    if role == "terminal":
        port = name[: -len(".terminal")] if name.endswith(".terminal") else name
        return f"{'heat into' if kind == 'heat' else 'taken in by'} {port} (equations): {-value}"
    return f"dissipated in {name}: {-value}"
