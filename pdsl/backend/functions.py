"""SymbolicSystem -> named CasADi Functions (rhs / DAE, energy, outputs, constraints).

Signatures (column vectors): ``t`` scalar, ``x`` states, ``z`` algebraic
variables, ``p`` parameters (physical parameters, then network weights), ``u``
exogenous inputs.

* ``rhs(t, x, p, u) -> xdot``           (ODE systems)
* ``dae(t, x, z, p, u) -> (xdot, g)``   (every system; g empty for an ODE)
* ``energy(t, x, p, u) -> E``           (when the model has an energy)
* ``power(t, x, z, p, u) -> dE/dt``     (along the flow: supplied − dissipated power; with ``energy``)
* ``outputs(t, x, z, p, u) -> y``
* ``constraints(t, x, p) -> Φ``         (holonomic constraints, for drift monitoring)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import casadi as ca
import numpy as np

from ..diagnostics import PdslError  # noqa: F401 (historical import site)
from ..records import record

if TYPE_CHECKING:  # sympy and the lowering are imported by to_casadi only: a cached NumericSystem needs neither
    from ..lower.ir import SymbolicSystem

__all__ = ["NumericSystem", "to_casadi"]


@record(kw_only=False, slots=False)
class NumericSystem:
    system: SymbolicSystem
    kind: str  # "SX" or "MX"
    x_names: tuple[str, ...]
    z_names: tuple[str, ...]
    p_names: tuple[str, ...]
    u_names: tuple[str, ...]
    y_names: tuple[str, ...]
    p_default: np.ndarray
    dae: ca.Function
    rhs: ca.Function | None
    energy: ca.Function | None
    outputs: ca.Function
    constraints: ca.Function
    x_start: np.ndarray
    z_start: np.ndarray
    invariants: ca.Function  # (t, x, p) -> r, zero on the constraint manifold (Φ, Φ̇, velocity constraints)
    report: ca.Function  # (t, x, p) -> the columns a trajectory CSV shows
    report_names: tuple[str, ...]
    # (t, x, p) -> B (nx × k): directions of projection onto the invariants (None: minimum norm)
    projection: ca.Function | None = None
    # (t, x, z, p, u) -> dE/dt along the flow: the net power supplied (inputs, forces) minus dissipated
    power: ca.Function | None = None
    # (t, x, p, u) -> d/dt quantity − rate for each SymbolicSystem.balances record, along the flow
    balances: ca.Function | None = None
    # conditions on t alone (``if t < 1 ...``; pdsl.backend.events): (t, t_mode, x, z, p, u) -> (xdot, g) with
    # those conditions evaluated at t_mode, and (t, p) -> g_k, whose sign changes are the switching times
    dae_modes: ca.Function | None = None
    switches: ca.Function | None = None
    # how many conditions (``if``) of the dynamics read the state: stepped through, not located as events
    state_conditions: int = 0
    # per state: declared with a start value (projection moves the others first; read without the symbolic system)
    x_declared: tuple[bool, ...] | None = None
    # the model's events (`when`): indicators, conditions, resets, the impulse's metric (pdsl.backend.hybrid)
    hybrid: object = None
    # the switching functions of the dynamics on the state (lhs − rhs of a comparison in an `if`, the argument of
    # sign/abs/min/max differences): (t, x, z, p, u) -> s, with their texts; what an integrator failure's
    # diagnosis reads (a solution chattering on s = 0)
    switching: ca.Function | None = None
    switching_names: tuple[str, ...] = ()
    # dE/dt ≡ 0 by the formalism (SymbolicSystem.conservative): ``power`` is the constant 0, ∫ power dt is 0 (read
    # without the symbolic system, which a cached run never loads)
    conservative: bool = False

    @property
    def nx(self) -> int:
        return len(self.x_names)

    @property
    def nz(self) -> int:
        return len(self.z_names)

    def param_vector(self, overrides: dict[str, float] | None = None) -> np.ndarray:
        p = self.p_default.copy()
        for name, value in (overrides or {}).items():
            p[self.p_names.index(name)] = value
        return p


# explicit right-hand sides of more nodes than this get casadi.cse (large pairwise models; measured: Cucker–Smale
# N = 100, 208k -> 119k instructions in ~1 s). Not smaller or implicit ones: merging changes the symbolic
# Jacobian CVODES derives, which moved a tight energy-drift check (rigid rotor, rtol 1e-11) by 2x.
_CSE_FROM = 20_000


def _found_switches(system, laws, time_only: set) -> list:
    """pdsl.backend.switching.find_switches on the dynamics (input laws substituted); conditions on t and parameters
    alone are not among them: they keep their pre-located switching times (pdsl.backend.events)."""
    from .switching import find_switches

    rows = [e.lhs - e.rhs for e in system.differential + system.algebraic]
    if laws:
        rows = [r.xreplace(laws) for r in rows]
    states = {st.symbol for st in system.states} | {a.symbol for a in system.algebraics}
    return find_switches(rows, states, time_only)


def _solve_rows(system, conv, kind, T, linear):
    """(ẋ, {multiplier: its value}) of the differential rows: read off an explicit system, else solved from A·w = b
    (``linear``: system.linear_system(), computed once by the caller) block by block (pdsl.backend.linsolve: CasADi's
    SX solve QR-factorises the whole matrix as soon as one diagonal block of its block-triangular form is larger
    than 1x1 — a tied port: 1,383 -> 481,358 instructions). ``conv``: sympy -> CasADi for these rows."""
    from .linsolve import solve as block_solve

    nx = len(system.states)
    if linear is None:
        return (ca.vertcat(*[conv(e.rhs) for e in system.differential]) if nx else T(0, 1)), {}
    A, b = conv(linear[0]), conv(linear[1])
    w = block_solve(A, b) if kind == "SX" else ca.solve(A, b, "qr")
    # outputs may read the multipliers (an interface's force, `simulate --power`): they are w's tail
    return w[:nx], {m: w[nx + k] for k, m in enumerate(system.multipliers)}


def _switches(system, laws, conv, neural, kind, T, c, args, found, linear):
    """The switching surfaces of the dynamics (pdsl.backend.switching), None when there are none, or more than
    MAX_SWITCHES (then the integrators step through them, as before)."""
    from .switching import MAX_SWITCHES, switch_functions
    from .sympy_to_casadi import Converter

    t, x, z, p, u = args
    if not found or len(found) > MAX_SWITCHES:
        return None
    multipliers = set(system.multipliers)

    def dynamics(subs, extra):
        base = {k: v for k, v in conv.symbols.items() if k not in multipliers}
        base.update(extra)
        cv = Converter(base, neural)

        def cs(expr):
            e = expr.xreplace(laws) if laws else expr
            return cv(e.xreplace(subs))

        xd, mult = _solve_rows(system, cs, kind, T, linear)
        cv.symbols.update(mult)
        gg = ca.vertcat(*[cs(e.lhs - e.rhs) for e in system.algebraic]) if system.algebraic else T(0, 1)
        return xd, gg

    return switch_functions(found, dynamics, c, T, args)


def _switching(found, c, args):
    """The switching functions on the state of the dynamics (pdsl.backend.switching.find_switches: a comparison's
    lhs − rhs, not those on t alone, which are located before integrating; the argument of sign and abs; the
    difference of min/max's arguments) as one Function, with their texts: what an integrator failure's diagnosis
    reads. Not built for more than MAX_SWITCHES (a swarm's pairwise terms: the texts only)."""
    from .switching import MAX_SWITCHES

    if not found:
        return None, ()
    texts = tuple(sw[2] for sw in found)
    if len(found) > MAX_SWITCHES:
        return None, texts
    fn = ca.Function("switching", list(args), [ca.vertcat(*[c(sw[1]) for sw in found])], ["t", "x", "z", "p", "u"], ["s"])
    return fn, texts


def to_casadi(system: SymbolicSystem, *, seed: int = 0, kind: str | None = None) -> NumericSystem:
    """Translate a symbolic system into CasADi Functions (SX, or MX when it holds networks)."""
    import sympy as sp

    from .. import symbols as S
    from .events import MODE_TIME, mode_substitution, relationals, switch_functions, time_conditions
    from .neural import MLPGraph, init_weights, n_weights
    from .sympy_to_casadi import Converter

    if kind is None:
        kind = "MX" if system.neural else "SX"
    T = ca.SX if kind == "SX" else ca.MX
    nn_list = [n for n in system.neural if n.n_in is not None]
    n_w = sum(n_weights(n) for n in nn_list)
    t = T.sym("t")
    x = T.sym("x", len(system.states))
    z = T.sym("z", len(system.algebraics))
    p = T.sym("p", len(system.params) + n_w)
    u_list = system.exogenous_inputs
    u = T.sym("u", len(u_list))

    def split(v, n):
        return ca.vertsplit(v) if n else []

    xs, zs, ps, us = split(x, x.shape[0]), split(z, z.shape[0]), split(p, p.shape[0]), split(u, u.shape[0])
    symbols: dict[sp.Symbol, object] = {S.TIME: t}
    symbols.update({s.symbol: xs[i] for i, s in enumerate(system.states)})
    symbols.update({a.symbol: zs[i] for i, a in enumerate(system.algebraics)})
    symbols.update({q.symbol: ps[i] for i, q in enumerate(system.params)})
    symbols.update({v.symbol: us[i] for i, v in enumerate(u_list)})

    neural = {}
    weights = []
    offset = len(system.params)
    for k, nn in enumerate(nn_list):
        nw = n_weights(nn)
        neural[nn.fn.__name__] = MLPGraph(nn, p[offset : offset + nw])
        weights.append(init_weights(nn, seed + k))
        offset += nw
    laws = system.input_laws()
    t_mode = T.sym("t_mode")
    symbols[MODE_TIME] = t_mode
    conv = Converter(symbols, neural)

    def c(expr):
        return conv(expr.xreplace(laws) if laws else expr)

    nx = len(system.states)
    dynamics = [e.lhs - e.rhs for e in system.differential + system.algebraic]
    conditions = time_conditions([e.xreplace(laws) if laws else e for e in dynamics], {q.symbol for q in system.params})
    modes = mode_substitution(conditions)

    def cm(expr):  # the dynamics, with conditions on t alone read at t_mode
        return conv(expr.xreplace(laws).xreplace(modes) if laws else expr.xreplace(modes)) if modes else c(expr)

    linear = None if system.is_explicit() else system.linear_system()
    xdot, mult = _solve_rows(system, cm, kind, T, linear)
    conv.symbols.update(mult)
    g = ca.vertcat(*[cm(e.lhs - e.rhs) for e in system.algebraic]) if system.algebraic else T(0, 1)
    if (kind == "SX" and system.is_explicit()
            and ca.Function("size", [t, t_mode, x, z, p, u], [xdot]).n_instructions() > _CSE_FROM):
        xdot = ca.cse(xdot)  # one node per distinct subexpression (a pair force and its mirror image: once)
    dae_modes = switches = None
    if modes:
        dae_modes = ca.Function("dae_modes", [t, t_mode, x, z, p, u], [xdot, g], ["t", "t_mode", "x", "z", "p", "u"], ["xdot", "g"])
        xdot, g = dae_modes(t, t, x, z, p, u)
        switches = ca.Function("switches", [t, p], [ca.vertcat(*[c(s) for s in switch_functions(conditions)])], ["t", "p"], ["g"])
    x_names = tuple(s.name for s in system.states)
    z_names = tuple(a.name for a in system.algebraics)
    p_names = tuple(q.name for q in system.params) + tuple(
        f"{nn.name}.w[{i}]" for nn in nn_list for i in range(n_weights(nn))
    )
    u_names = tuple(v.name for v in u_list)
    y_names = tuple(o.name for o in system.outputs)
    io = dict(input_names=["t", "x", "z", "p", "u"])
    dae = ca.Function("dae", [t, x, z, p, u], [xdot, g], io["input_names"], ["xdot", "g"])
    rhs = None if system.algebraics else ca.Function("rhs", [t, x, p, u], [xdot], ["t", "x", "p", "u"], ["xdot"])
    energy = power = None
    if system.energy is not None:
        E = c(system.energy)
        energy = ca.Function("energy", [t, x, p, u], [E], ["t", "x", "p", "u"], ["E"])
        if system.conservative:  # dE/dt ≡ 0 by the formalism (Noether), not ∇E·ẋ evaluated to roundoff
            dE = T.zeros(1, 1)
        else:
            dE = ca.jtimes(E, x, xdot) + ca.jacobian(E, t) if nx else ca.jacobian(E, t)
        power = ca.Function("power", [t, x, z, p, u], [dE], io["input_names"], ["dEdt"])
    y = ca.vertcat(*[c(o.expr) for o in system.outputs]) if system.outputs else T(0, 1)
    outputs = ca.Function("outputs", [t, x, z, p, u], [y], io["input_names"], ["y"])
    phi = ca.vertcat(*[c(k.residual) for k in system.constraints]) if system.constraints else T(0, 1)
    constraints = ca.Function("constraints", [t, x, p], [phi], ["t", "x", "p"], ["phi"])
    r = ca.vertcat(*[c(k.residual) for k in system.invariants]) if system.invariants else T(0, 1)
    invariants = ca.Function("invariants", [t, x, p], [r], ["t", "x", "p"], ["r"])
    projection = None
    if system.projection:
        B = ca.horzcat(*[ca.vertcat(*[c(e) for e in col]) for col in system.projection])
        projection = ca.Function("projection_directions", [t, x, p], [B], ["t", "x", "p"], ["B"])
    columns = system.report_columns()
    report = ca.Function("report", [t, x, p], [ca.vertcat(*[c(e) for _, e in columns]) if columns else T(0, 1)],
                         ["t", "x", "p"], ["y"])
    balances = None
    if system.balances and rhs is not None:
        Q = ca.vertcat(*[c(bal.quantity) for bal in system.balances])
        R = ca.vertcat(*[c(bal.rate) for bal in system.balances])
        balances = ca.Function("balances", [t, x, p, u], [ca.jtimes(Q, x, xdot) + ca.jacobian(Q, t) - R],
                               ["t", "x", "p", "u"], ["residual"])
    p_default = np.concatenate([[q.default for q in system.params], *weights]) if weights else np.array(
        [q.default for q in system.params], dtype=float
    )
    rels = relationals([e.lhs - e.rhs for e in system.differential + system.algebraic] + list(laws.values()))
    n_time = len(time_conditions(list(rels), {q.symbol for q in system.params})) if rels else 0
    found = _found_switches(system, laws, set(conditions))
    switching, switching_names = _switching(found, c, (t, x, z, p, u))
    state_switches = _switches(system, laws, conv, neural, kind, T, c, (t, x, z, p, u), found, linear)
    hybrid = None
    if system.events or state_switches is not None:
        from .hybrid import hybrid_functions

        hybrid = hybrid_functions(system, c, T, (t, x, z, p, u), state_switches)
    return NumericSystem(
        switching=switching,
        switching_names=switching_names,
        hybrid=hybrid,
        state_conditions=len(rels) - n_time,
        x_declared=tuple(s.start is not None for s in system.states),
        system=system,
        kind=kind,
        x_names=x_names,
        z_names=z_names,
        p_names=p_names,
        u_names=u_names,
        y_names=y_names,
        p_default=np.asarray(p_default, dtype=float),
        dae=dae,
        rhs=rhs,
        energy=energy,
        outputs=outputs,
        constraints=constraints,
        x_start=np.array([s.start if s.start is not None else 0.0 for s in system.states], dtype=float),
        z_start=np.array([a.start if a.start is not None else 0.0 for a in system.algebraics], dtype=float),
        invariants=invariants,
        report=report,
        report_names=tuple(name for name, _ in columns),
        projection=projection,
        power=power,
        dae_modes=dae_modes,
        switches=switches,
        balances=balances,
        conservative=bool(system.conservative),
    )
