"""Switching surfaces of the dynamics (LANGUAGE.md §11, "Discontinuous right-hand sides"): the numeric side.

A comparison on the state inside an ``if`` (``if v > 0 then … else …``) and the argument of ``sign`` are *switches*:
the right-hand side jumps where the switching function s crosses zero. Each is replaced by a *mode* parameter m_k
(a comparison by ``m_k > 1/2``, ``sign(s)`` by m_k ∈ {−1, +1}), so that during an integration the mode is frozen
and the dynamics are smooth; the simulator (pdsl.sim.hybrid) watches s_k, stops where it crosses, and either
changes the mode (a transversal crossing) or slides along the surface with Filippov's convex combination

    f_s = α f⁺ + (1 − α) f⁻,   α = ṡ⁻ / (ṡ⁻ − ṡ⁺),   ṡ^± = ∇s·f^± + ∂s/∂t,

which keeps ṡ = 0; sliding ends where α leaves [0, 1]. ``abs``, ``min`` and ``max`` are continuous: their kinks
are watched for accuracy (the integration restarts there), with no mode.
"""

from __future__ import annotations

import casadi as ca

from ..records import record

# sympy is imported where a model is lowered (find_switches, switch_functions): the simulator reads MAX_SWITCHES
# from here for a cached model, which imports no sympy

__all__ = ["SwitchFunctions", "find_switches", "switch_functions", "MAX_SWITCHES"]

# more surfaces than this (pairwise sign() of a swarm): a note, and the integrators step through them
MAX_SWITCHES = 64


@record(kw_only=False, slots=False)
class SwitchFunctions:
    """The switches of a system: ``kinds[k]`` is "if" (mode 1 where s_k < 0, else 0), "sign" (mode sign(s_k)) or
    "kink" (no mode: located only); ``dae(t, x, z, p, u, m) -> (xdot, g)`` with the modes frozen at m;
    ``indicators(t, x, z, p, u) -> s``; ``slide[k](t, x, z, p, u, m) -> (xdot, alpha)`` the Filippov field on
    surface k (the other modes at m); ``rate(t, x, z, p, u, m) -> ṡ`` with the modes at m."""

    kinds: tuple[str, ...]
    texts: tuple[str, ...]
    strict: tuple[bool, ...]  # "if": the comparison is strict (<, >): s = 0 reads false
    dae: ca.Function
    indicators: ca.Function
    rate: ca.Function
    slide: tuple

    @property
    def n(self) -> int:
        return len(self.kinds)

    def mode_below(self, k: int) -> float:
        """The mode on the side s < 0."""
        return {"if": 1.0, "sign": -1.0}.get(self.kinds[k], 0.0)

    def mode_above(self, k: int) -> float:
        return {"if": 0.0, "sign": 1.0}.get(self.kinds[k], 0.0)


def find_switches(rows, states: set, time_only: set):
    """[(kind, s, text, strict, node)] for the switches in the sympy expressions ``rows`` (each subexpression once):
    ``node`` is what the mode replaces (the comparison, or the sign(...) call; None for a kink)."""
    import sympy as sp

    _REL = sp.core.relational.Relational
    found: dict = {}
    seen: set = set()
    stack = list(rows)
    while stack:
        e = stack.pop()
        if not isinstance(e, sp.Basic) or e in seen or e.is_Atom:
            continue
        seen.add(e)
        stack.extend(e.args)
        if not isinstance(e, _REL | sp.sign | sp.Abs | sp.Min | sp.Max):  # free_symbols only of candidates: cheap
            continue
        if e in time_only or not (e.free_symbols & states):
            continue
        if isinstance(e, _REL) and not isinstance(e, sp.Eq | sp.Ne):
            less = isinstance(e, sp.StrictLessThan | sp.LessThan)
            s = e.lhs - e.rhs if less else e.rhs - e.lhs  # the comparison holds where s < 0
            found.setdefault(e, ("if", s, str(e), isinstance(e, sp.StrictLessThan | sp.StrictGreaterThan), e))
        elif isinstance(e, sp.sign):
            found.setdefault(e, ("sign", e.args[0], str(e), True, e))
        elif isinstance(e, sp.Abs):
            found.setdefault(e, ("kink", e.args[0], str(e), True, None))
        elif isinstance(e, sp.Min | sp.Max) and len(e.args) == 2:
            found.setdefault(e, ("kink", e.args[0] - e.args[1], str(e), True, None))
    return sorted(found.values(), key=lambda v: (v[0], v[2]))


def switch_functions(switches, dynamics, c, T, args) -> SwitchFunctions:
    """``switches`` from :func:`find_switches`; ``dynamics(subs, extra_symbols) -> (xdot, g)`` rebuilds the
    system's dynamics (CasADi) with the sympy substitution ``subs`` applied first; ``c`` converts a sympy
    expression; ``args`` = (t, x, z, p, u)."""
    import sympy as sp

    t, x, z, p, u = args
    n = len(switches)
    m = T.sym("m", n)
    mode_syms = [sp.Symbol(f"m·{k}", real=True) for k in range(n)]  # names no model can spell
    subs = {}
    for k, (kind, _s, _text, _strict, node) in enumerate(switches):
        if kind == "if":
            subs[node] = sp.StrictGreaterThan(mode_syms[k], sp.Rational(1, 2))
        elif kind == "sign":
            subs[node] = mode_syms[k]
    xdot, g = dynamics(subs, {ms: m[k] for k, ms in enumerate(mode_syms)})
    io = ["t", "x", "z", "p", "u", "m"]
    dae = ca.Function("dae_switched", [t, x, z, p, u, m], [xdot, g], io, ["xdot", "g"])
    s = ca.vertcat(*[c(sw[1]) for sw in switches])
    indicators = ca.Function("switch_indicators", [t, x, z, p, u], [s], io[:5], ["s"])
    sdot = ca.jtimes(s, x, xdot) + ca.jacobian(s, t)
    rate = ca.Function("switch_rates", [t, x, z, p, u, m], [sdot], io, ["sdot"])
    slides = []
    for k, (kind, *_rest) in enumerate(switches):
        if kind == "kink":
            slides.append(None)
            continue
        below, above = ({"if": 1.0, "sign": -1.0}[kind], {"if": 0.0, "sign": 1.0}[kind])
        m_minus = ca.vertcat(*[below if j == k else m[j] for j in range(n)])
        m_plus = ca.vertcat(*[above if j == k else m[j] for j in range(n)])
        f_minus, g_minus = dae(t, x, z, p, u, m_minus)
        f_plus, _ = dae(t, x, z, p, u, m_plus)
        d_minus = ca.dot(ca.gradient(s[k], x), f_minus) + ca.jacobian(s[k], t)
        d_plus = ca.dot(ca.gradient(s[k], x), f_plus) + ca.jacobian(s[k], t)
        alpha = d_minus / (d_minus - d_plus)  # weight of f⁺: ṡ = α ṡ⁺ + (1 − α) ṡ⁻ = 0
        slides.append(ca.Function(f"slide_{k}", [t, x, z, p, u, m], [alpha * f_plus + (1 - alpha) * f_minus, alpha,
                                                                      g_minus], io, ["xdot", "alpha", "g"]))
    return SwitchFunctions(kinds=tuple(sw[0] for sw in switches), texts=tuple(sw[2] for sw in switches),
                           strict=tuple(sw[3] for sw in switches), dae=dae, indicators=indicators, rate=rate,
                           slide=tuple(slides))
