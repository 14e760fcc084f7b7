"""Where a switching surface the operating point sits on was written: the model line of its `if` or `sign`."""

from __future__ import annotations

from ..diagnostics import Diagnostic, PdslError

__all__ = ["surface_error"]


def surface_error(num, texts: list[str], values: list[float]) -> PdslError:
    """OnSwitchingSurface, one diagnostic per surface, each at the feedback law or equation that holds it."""
    from ..backend.switching import find_switches

    system = num.system
    laws = system.input_laws()
    states = {s.symbol for s in system.states} | {a.symbol for a in system.algebraics}
    places = [(u.law, u.span) for u in system.inputs if u.law is not None]
    places += [((e.lhs - e.rhs).xreplace(laws) if laws else e.lhs - e.rhs, e.origin)
               for e in system.differential + system.algebraic]
    found: dict[str, object] = {}
    for expr, span in places:
        for sw in find_switches([expr.xreplace(laws) if laws else expr], states, set()):
            found.setdefault(sw[2], (span, sw[0]))
    diags = []
    for text, value in zip(texts, values):
        span, kind = found.get(text, (system.span, ""))
        what = "the kink of" if kind == "kink" else "the switching surface of"
        diags.append(Diagnostic(
            "OnSwitchingSurface",
            f"the operating point lies on {what} `{text}` (its switching function is {value:.3g} there): the vector "
            "field is not differentiable there, so it has no linearization",
            span,
            "linearize on either side of the surface (--at), e.g. with a small non-zero velocity for Coulomb "
            "friction; each side has its own linearization"))
    return PdslError(diags)
