"""What the C-generating targets share (``compile --target c`` in :mod:`pdsl.compile.targets`, the FMU in
:mod:`pdsl.compile.fmu`): the refusal of events they do not implement, the CasADi functions of the events'
resets and conditions, and CasADi's C code generation into a directory. Neither target module is imported here.
"""

from __future__ import annotations

import os
from pathlib import Path

import casadi as ca

from ..backend.functions import NumericSystem
from ..diagnostics import PdslError

__all__ = ["event_support", "reset_function", "event_conditions", "generate_c"]


# ---------------------------------------------------------------- events (`when`, LANGUAGE.md §11)
def event_support(num: NumericSystem, target: str) -> None:
    """Refuse, located at the reset, what the compiled targets do not implement: a reset that is not a plain
    assignment of states (the impulse rule of a constrained mechanical part, a shown column as target, the
    projection onto the invariants that follows a reset in a constrained model)."""
    hy = num.hybrid
    if hy is None:
        return
    states = set(num.x_names)
    constrained = num.invariants.size1_out(0) > 0
    for j, ev in enumerate(num.system.events):
        for r in ev.resets:
            why = None
            if r.target not in states:
                why = (f"`{r.target}` is a shown column, not a state: its reset is an impulse (the velocities "
                       "minimising the kinetic energy change), which the compiled targets do not implement yet")
            elif hy.velocity_rows is not None or constrained:
                why = (f"the model has constraints: its reset of `{r.target}` needs the impulse rule and a "
                       "projection onto the constraints, which the compiled targets do not implement yet")
            if why:
                raise PdslError.at("NotYetSupported", f"--target {target}: {hy.labels[j]}: {why}", r.span,
                                   "`pdsl simulate` handles this event; the compiled targets handle direct resets of "
                                   "states in unconstrained models")


def _sym(num: NumericSystem):
    T = ca.SX if num.kind == "SX" else ca.MX
    return T, (T.sym("t"), T.sym("x", num.nx), T.sym("z", num.nz), T.sym("p", len(num.p_names)),
               T.sym("u", len(num.u_names)))


def reset_function(num: NumericSystem, j: int, name: str, *, with_z: bool = True) -> ca.Function:
    """``name(t, x, z, p, u) -> x_next``: the state after event ``j``'s resets, all read before the event (``z``
    left out when not ``with_z``: the FMU's ODEs)."""
    hy = num.hybrid
    T, (t, x, z, p, u) = _sym(num)
    if not with_z:
        z = T(0, 1)
    vals = hy.resets[j](t, x, z, p, u)
    where = {n: i for i, n in enumerate(num.x_names)}
    xn = [x[i] for i in range(num.nx)]
    for k, target in enumerate(hy.targets[j]):
        xn[where[target]] = vals[k]
    ins, names = ([t, x, z, p, u], ["t", "x", "z", "p", "u"]) if with_z else ([t, x, p, u], ["t", "x", "p", "u"])
    return ca.Function(name, ins, [ca.vertcat(*xn) if xn else T(0, 1)], names, ["x_next"])


def event_conditions(num: NumericSystem) -> ca.Function:
    """``event_conditions(t, x, z, p, u) -> c``: 1 where event j's condition holds, else 0."""
    hy = num.hybrid
    T, (t, x, z, p, u) = _sym(num)
    g = hy.atoms(t, x, z, p, u)

    def value(tree):
        kind, arg = tree
        if kind == "atom":
            return g[arg] < 0 if hy.strict[arg] else g[arg] <= 0
        subs = [value(s) for s in arg]
        out = subs[0]
        for s in subs[1:]:
            out = ca.logic_and(out, s) if kind == "and" else ca.logic_or(out, s)
        return out

    c = ca.vertcat(*[value(tree) for tree in hy.conditions]) if hy.conditions else T(0, 1)
    return ca.Function("event_conditions", [t, x, z, p, u], [c], ["t", "x", "z", "p", "u"], ["c"])


def generate_c(functions, directory: Path, prefix: str | None = None) -> None:
    """``model.c`` and ``model.h`` for ``functions`` in ``directory`` (CasADi's code generator writes into the
    current directory: it is changed and restored here). ``prefix`` goes before every global C symbol."""
    options = {"with_header": True, "casadi_int": "long long int"}
    if prefix:
        options["prefix"] = prefix
    gen = ca.CodeGenerator("model.c", options)
    for f in functions:
        gen.add(f)
    cwd = os.getcwd()
    try:
        os.chdir(directory)
        gen.generate()
    finally:
        os.chdir(cwd)
