"""Regularisers of ``pdsl fit``: an equilibrium penalty and link-flow sparsity (BENCHMARKS C4, C5.2).

Two terms, both functions of θ alone, added to the batch loss J(θ) of :mod:`pdsl.fit.loss`
(the mean over compared entries of the chunk rollouts):

* **equilibrium** (BENCHMARKS C5.2): E(θ) = λ_eq ‖f(t*, x*, p(θ), u*)‖², the squared norm of the model's
  right-hand side at a chosen point — by default every shown state column and every input zero.
  It forces an equilibrium there (for the cart–pole surrogate, with F(0) = 0, it penalises
  h(0, 0)). The point is given in the columns of the data (shown states, inputs); the state is
  recovered with the same map the chunk loss uses (p = M v for Cartesian momenta).
* **constraints** (constraint discovery, BENCHMARKS D3): C(θ) = mean_k ‖r(t_k, x_k; p(θ))‖², the model's
  invariants (velocity constraints, Φ and Φ̇) at the *measured* states of the training trajectories. A learned
  velocity constraint (``constraint learn``, ``distribution learn``) is then fitted to the velocities the data
  show — a rollout alone cannot see a violation at a chunk's start, which the constraint's acceleration-level
  row only carries along.
* **momentum** (the teacher-forced one-step loss of the rolling-disk paper, Eq. 18, BENCHMARKS D3): for the
  relations d/dt Q = R the lowering derived (``SymbolicSystem.balances``: the paper's full-frame momenta of a
  model with a group and a learned connection), M(θ) = mean over the data intervals of
  ‖Q(x_{k+1}) − Q(x_k) − ½ h (R(x_k) + R(x_{k+1}))‖²: the momentum integrated along the data's q(t) from the
  measured one, for one step (trapezoid rule).
* **sparsity** (BENCHMARKS C4, Eq. 8): R(θ) = Σ_j mean_k |f_j(t_k, x_k, u_k; p(θ))|, the L1 norm of chosen
  link flows, averaged over every sample of the *training trajectories*. A flow is named by

  - a p-H element or two-port port of a network (``damper``, ``tr.a``; ``NAME.f`` is the same,
    ``NAME.e`` its effort): its port variable expressed in states, inputs and parameters by the
    p-H lowering's elimination (the expressions ``show --power`` multiplies), or
  - a declared ``output`` of the model (any expression: a learned coupling, a link force).

  The flows are evaluated at the *measured* states x_k (the samples every rollout starts from
  and is fitted to), not at the predicted ones: the term is then independent of the chunk
  graph, exact and cheap, and the two coincide as the fit converges.

How they enter the objective (``mode``):

* ``penalty``: minimise  J + E + w·R;
* ``primal-dual`` (BENCHMARKS C4, Eqs. 12–20): minimise R subject to J + E ≤ ε by the primal–dual iteration
  min_θ R + λ_k (J + E − ε) (one AdamW epoch per k), then λ_{k+1} = max(0, λ_k + α (J + E − ε)),
  with J evaluated on all training chunks after the epoch. λ is kept in the checkpoint, so a
  resumed run continues the same iteration.

Gradients are exact: CasADi reverse mode through the same expressions (|f| has the subgradient
sign(f) at f = 0). The terms wrap a :class:`~pdsl.fit.loss.ChunkLoss` without changing it:
:class:`RegularizedLoss` forwards everything and replaces ``value_grad_function`` (what AdamW
trains on) by the regularised objective; ``value`` (validation losses) stays the plain data loss.
Gauss–Newton is not offered with regularisers (an L1 term is not a least-squares residual).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Mapping

import casadi as ca
import numpy as np

from ..diagnostics import PdslError

__all__ = [
    "EquilibriumSpec", "SparsitySpec", "specs_from_config", "check_table", "flow_expressions", "port_variables",
    "Regularizer", "RegularizedLoss", "wrap_loss", "epoch_callback", "TABLE_KEYS",
]

MODES = ("penalty", "primal-dual")

# TOML tables: key -> (python type, description)
TABLE_KEYS = {
    "constraints": {"weight": (float, "a number ≥ 0")},
    "momentum": {"weight": (float, "a number ≥ 0")},
    "equilibrium": {"weight": (float, "a number ≥ 0"), "at": (dict, "a table of numbers, e.g. at = { x = 0.0 }")},
    "sparsity": {
        "flows": (list, "a list of names"), "weight": (float, "a number ≥ 0"), "mode": (str, "penalty or primal-dual"),
        "epsilon": (float, "a number > 0"), "alpha": (float, "a number > 0"), "lambda0": (float, "a number ≥ 0"),
    },
}


# ====================================================================== settings
@dataclass(frozen=True)
class EquilibriumSpec:
    weight: float
    at: tuple[tuple[str, float], ...] = ()  # columns (shown states, inputs) -> value; the others are 0


@dataclass(frozen=True)
class SparsitySpec:
    flows: tuple[str, ...]
    weight: float = 1e-3  # penalty mode: J + E + weight·R
    mode: str = "penalty"
    epsilon: float | None = None  # primal-dual: J + E ≤ epsilon
    alpha: float | None = None  # primal-dual: dual step (default 1/epsilon)
    lambda0: float = 1.0  # primal-dual: starting multiplier


def check_table(key: str, value) -> dict:
    """A TOML table ``[equilibrium]`` or ``[sparsity]`` checked key by key; ``ValueError`` names the culprit."""
    if not isinstance(value, dict):
        raise ValueError(f"`{key}` must be a table, e.g. [{key}] weight = 1.0")
    out = {}
    for k, v in value.items():
        if k not in TABLE_KEYS[key]:
            raise ValueError(f"unknown setting `{key}.{k}` (settings: {', '.join(TABLE_KEYS[key])})", k)
        typ, want = TABLE_KEYS[key][k]
        if typ is float:
            if not isinstance(v, (int, float)) or isinstance(v, bool):
                raise ValueError(f"`{key}.{k}` must be {want}, got {v!r}", k)
            v = float(v)
        elif typ is list:
            if not (isinstance(v, list) and all(isinstance(s, str) for s in v)):
                raise ValueError(f"`{key}.{k}` must be {want}, got {v!r}", k)
        elif typ is dict:
            if not (isinstance(v, dict) and all(isinstance(s, (int, float)) and not isinstance(s, bool) for s in v.values())):
                raise ValueError(f"`{key}.{k}` must be {want}, got {v!r}", k)
            v = {n: float(s) for n, s in v.items()}
        elif not isinstance(v, str):
            raise ValueError(f"`{key}.{k}` must be {want}, got {v!r}", k)
        out[k] = v
    return out


def _bad(message: str, hint: str | None = None) -> PdslError:
    return PdslError.at("BadOption", message, hint=hint)


def term_weight(table: Mapping | None, key: str) -> float:
    """The weight of a one-setting term (``constraints``, ``momentum``; 0: off), checked."""
    if not table:
        return 0.0
    w = check_table(key, dict(table)).get("weight", 1.0)
    if not (w >= 0 and np.isfinite(w)):
        raise _bad(f"{key} weight must be a finite number ≥ 0, got {w}")
    return w


def specs_from_config(equilibrium: Mapping | None, sparsity: Mapping | None) -> tuple[EquilibriumSpec | None, SparsitySpec | None]:
    """The checked specifications of the ``equilibrium`` and ``sparsity`` settings (None: off)."""
    eq = sp = None
    if equilibrium:
        d = check_table("equilibrium", dict(equilibrium))
        w = d.get("weight", 1.0)
        if not (w >= 0 and np.isfinite(w)):
            raise _bad(f"equilibrium weight must be a finite number ≥ 0, got {w}")
        eq = EquilibriumSpec(weight=w, at=tuple(sorted(d.get("at", {}).items())))
    if sparsity:
        d = check_table("sparsity", dict(sparsity))
        flows = tuple(d.get("flows", ()))
        if not flows:
            raise _bad("sparsity: no flows named", hint="e.g. --sparsity damper2, or flows = [\"damper2\"] in [sparsity]")
        mode = d.get("mode", "primal-dual" if "epsilon" in d else "penalty")
        if mode not in MODES:
            raise _bad(f"sparsity mode {mode!r}: unknown", hint="penalty or primal-dual")
        w = d.get("weight", 1e-3 if mode == "penalty" else 1.0)
        if not (w >= 0 and np.isfinite(w)):
            raise _bad(f"sparsity weight must be a finite number ≥ 0, got {w}")
        eps, alpha, lam0 = d.get("epsilon"), d.get("alpha"), d.get("lambda0", 1.0)
        if mode == "primal-dual":
            if eps is None or not eps > 0:
                raise _bad("primal-dual sparsity needs the tolerance epsilon > 0 of the constraint J ≤ epsilon",
                           hint="--sparsity-epsilon EPS (e.g. about the noise variance for the mse loss)")
            alpha = 1.0 / eps if alpha is None else alpha
            if not (alpha > 0 and lam0 >= 0):
                raise _bad("primal-dual sparsity needs alpha > 0 and lambda0 ≥ 0")
        sp = SparsitySpec(flows=flows, weight=w, mode=mode, epsilon=eps, alpha=alpha, lambda0=lam0)
    return eq, sp


# ====================================================================== flow expressions
def port_variables(system) -> dict[str, tuple]:
    """(effort, flow) of every element port of the lowered system, in terms of states, inputs and
    parameters (the formalism's elimination, carried by the IR as ``system.ports``)."""
    return {p.name: (p.effort, p.flow) for p in system.ports}


def flow_expressions(model, system, names) -> list:
    """``Output`` objects (name, sympy expression) for the named flows (module docstring)."""
    from ..resolve.model import Output

    outputs = {o.name: o for o in system.outputs}
    ports = None
    found = []
    for name in names:
        if name in outputs:
            found.append(outputs[name])
            continue
        if ports is None:
            ports = port_variables(system)
        base, which = name, "f"
        if name not in ports and name.rsplit(".", 1)[-1] in ("e", "f") and name.rsplit(".", 1)[0] in ports:
            base, which = name.rsplit(".", 1)
        if base not in ports:
            known = [*outputs, *ports]
            raise _bad(f"sparsity: `{name}` is neither a declared output nor a p-H element port of {system.name}",
                       hint=("flows: " + ", ".join(known)) if known else
                       "declare the link flow as an `output` of the model, or write the model as a p-H network")
        e, f = ports[base]
        found.append(Output(name=f"{base}.{which}", expr=f if which == "f" else e, span=system.span))
    return found


# ====================================================================== the regulariser
class Regularizer:
    """E(θ) and R(θ) with exact gradients, and the coefficients of the objective (module docstring)."""

    def __init__(self, num, layout, eq: EquilibriumSpec | None, sp: SparsitySpec | None, *, model=None, train=None,
                 w_con: float = 0.0, w_mom: float = 0.0):
        from .loss import state_from_shown

        self.num, self.layout, self.eq, self.sp, self.w_con, self.w_mom = num, layout, eq, sp, w_con, w_mom
        self.lam = sp.lambda0 if sp is not None and sp.mode == "primal-dual" else None
        theta = ca.MX.sym("theta", layout.n_theta)
        p = layout.casadi_p(theta)
        g = state_from_shown(num)
        E = ca.MX(0)
        if eq is not None:
            E = ca.sumsqr(self._rhs_at_point(num, g, p))
        R = ca.MX(0)
        self.flow_names: tuple[str, ...] = ()
        if sp is not None:
            if train is None or model is None:
                raise ValueError("the sparsity term needs the model and the training trajectories")
            R = self._sparsity(num, g, p, model, train)
        C = ca.MX(0)
        if w_con:
            C = self._constraint_residuals(num, g, p, train)
        Mo = ca.MX(0)
        self.momentum_names: tuple[str, ...] = ()
        if w_mom:
            Mo = self._momentum(num, g, p, train)
        self.terms = ca.Function("regularizer", [theta], [E, ca.gradient(E, theta), R, ca.gradient(R, theta),
                                                          C, ca.gradient(C, theta), Mo, ca.gradient(Mo, theta)],
                                 ["theta"], ["E", "dE", "R", "dR", "C", "dC", "M", "dM"])

    # ---- the two terms
    def _rhs_at_point(self, num, g, p):
        if num.rhs is None:
            raise PdslError.at("NotYetSupported", f"{num.system.name} is a DAE; the equilibrium penalty needs an ODE model",
                               num.system.span)
        at = dict(self.eq.at)
        known = set(num.report_names) | set(num.u_names)
        for name in at:
            if name not in known:
                raise _bad(f"equilibrium point: `{name}` is not a shown state or input of {num.system.name}",
                           hint="columns: " + ", ".join([*num.report_names, *num.u_names]))
        s = ca.DM([at.get(n, 0.0) for n in num.report_names])
        u = ca.DM([at.get(n, 0.0) for n in num.u_names])
        x = g(0.0, s, p)
        return num.rhs(0.0, x, p, u)

    def _constraint_residuals(self, num, g, p, train):
        n_r = num.invariants.size1_out(0)
        if n_r == 0:
            raise _bad(f"--constraint-weight: {num.system.name} has no constraints to fit to the data")
        if train is None:
            raise ValueError("the constraint term needs the training trajectories")
        sym = ca.SX.sym if num.kind == "SX" else ca.MX.sym
        t, s, pp = sym("t"), sym("s", len(num.report_names)), sym("p", len(num.p_names))
        r = ca.Function("residuals", [t, s, pp], [ca.sumsqr(num.invariants(t, g(t, s, pp), pp))])
        T = np.concatenate([tr.t for tr in train.trajectories])
        S = np.vstack([tr.S for tr in train.trajectories])
        if len(T) == 0:
            raise _bad("constraints: no training samples to evaluate the residuals on")
        return ca.sum2(r.map(len(T))(ca.DM(T[None, :]), ca.DM(S.T), p)) / len(T)

    def _momentum(self, num, g, p, train):
        from ..backend.functions import to_casadi
        from ..resolve.model import Output

        system = num.system
        if not system.balances:
            raise _bad(f"--momentum-weight: {system.name} has no momentum relations",
                       hint="the teacher-forced momentum loss (Eq. 18) needs a model with a `group` and a learned "
                            "connection (`distribution learn`)")
        outs = [Output(name=f"Q{k}", expr=b.quantity, span=b.origin) for k, b in enumerate(system.balances)]
        outs += [Output(name=f"R{k}", expr=b.rate, span=b.origin) for k, b in enumerate(system.balances)]
        fnum = to_casadi(replace(system, outputs=tuple(outs)), kind=num.kind)
        nb = len(system.balances)
        sym = ca.SX.sym if num.kind == "SX" else ca.MX.sym
        t, s, pp = sym("t"), sym("s", len(num.report_names)), sym("p", len(num.p_names))
        z, u = sym("z", 0), sym("u", len(num.u_names))
        y = fnum.outputs(t, g(t, s, pp), z, pp, u)
        qr = ca.Function("momentum", [t, s, pp, u], [y])
        terms, count = [], 0
        for tr in train.trajectories:
            n = len(tr.t)
            if n < 2:
                continue
            U = tr.U.T if num.u_names else np.zeros((0, n))
            Y = qr.map(n)(ca.DM(tr.t[None, :]), ca.DM(tr.S.T), p, ca.DM(U))
            Q, R = Y[:nb, :], Y[nb:, :]
            h = ca.DM(np.diff(tr.t)[None, :])
            step = Q[:, 1:] - Q[:, :-1] - 0.5 * (R[:, 1:] + R[:, :-1]) * ca.repmat(h, nb, 1)
            terms.append(ca.sum1(ca.sum2(step * step)))
            count += n - 1
        if not count:
            raise _bad("momentum: no training intervals to evaluate the loss on")
        self.momentum_names = tuple(b.name for b in system.balances)
        return sum(terms[1:], terms[0]) / count

    def _sparsity(self, num, g, p, model, train):
        from ..backend.functions import to_casadi

        system = num.system
        outs = flow_expressions(model, system, self.sp.flows)
        self.flow_names = tuple(o.name for o in outs)
        flows_num = to_casadi(replace(system, outputs=tuple(outs)), kind=num.kind)
        if flows_num.p_names != num.p_names or flows_num.x_names != num.x_names or flows_num.u_names != num.u_names:
            raise RuntimeError("flow functions do not share the model's layout")  # pragma: no cover
        sym = ca.SX.sym if num.kind == "SX" else ca.MX.sym
        t, s, pp, u = sym("t"), sym("s", len(num.report_names)), sym("p", len(num.p_names)), sym("u", len(num.u_names))
        x = g(t, s, pp)
        z = sym("z", 0)
        flow = ca.Function("flows", [t, s, pp, u], [ca.fabs(flows_num.outputs(t, x, z, pp, u))])
        T = np.concatenate([tr.t for tr in train.trajectories])
        S = np.vstack([tr.S for tr in train.trajectories])
        U = np.vstack([tr.U for tr in train.trajectories]) if num.u_names else np.zeros((len(T), 0))
        if len(T) == 0:
            raise _bad("sparsity: no training samples to evaluate the flows on")
        absf = flow.map(len(T))(ca.DM(T[None, :]), ca.DM(S.T), p, ca.DM(U.T))
        self.n_samples = len(T)
        return ca.sum1(ca.sum2(absf)) / len(T)

    # ---- numbers
    @property
    def w_eq(self) -> float:
        return self.eq.weight if self.eq is not None else 0.0

    @property
    def w_sp(self) -> float:
        return self.sp.weight if self.sp is not None else 0.0

    def values(self, theta) -> dict:
        """The unweighted terms: ‖f(z*, u*)‖², Σ_j mean_k |f_j|, mean_k ‖r_k‖² and the momentum loss."""
        E, _, R, _, C, _, Mo, _ = self.terms(np.asarray(theta, dtype=float))
        return {"equilibrium": float(E), "sparsity": float(R), "constraints": float(C), "momentum": float(Mo)}

    def key(self):
        return self.lam

    def objective(self, J, dJ, theta):
        """The objective and its gradient from the data term (J, dJ) — symbolic or numeric.

        penalty: J + w_eq·E + w_sp·R;  primal–dual: λ (J + w_eq·E − ε) + w_sp·R."""
        E, dE, R, dR, C, dC, Mo, dMo = self.terms(theta)
        fit = J + self.w_eq * E + self.w_con * C + self.w_mom * Mo
        dfit = dJ + self.w_eq * dE + self.w_con * dC + self.w_mom * dMo
        if self.lam is None:
            return fit + self.w_sp * R, dfit + self.w_sp * dR
        return self.lam * (fit - self.sp.epsilon) + self.w_sp * R, self.lam * dfit + self.w_sp * dR

    def dual_update(self, fit: float) -> float:
        """λ ← max(0, λ + α (J + E − ε)); returns the new λ."""
        self.lam = max(0.0, self.lam + self.sp.alpha * (fit - self.sp.epsilon))
        return self.lam

    def describe(self) -> list[str]:
        lines = []
        if self.w_mom:
            lines.append(f"teacher-forced momentum loss (the paper's Eq. 18) {self.w_mom:g}·mean‖ΔQ − ∫R dt‖² over the data "
                         f"intervals, Q = {', '.join(self.momentum_names)}")
        if self.w_con:
            lines.append(f"constraint residual penalty {self.w_con:g}·mean‖r(x_k)‖² at the measured states (training samples)")
        if self.eq is not None:
            at = ", ".join(f"{n} = {v:g}" for n, v in self.eq.at) or "all shown states and inputs 0"
            lines.append(f"equilibrium penalty {self.eq.weight:g}·‖f(z*, u*)‖² at {at}")
        if self.sp is not None:
            what = ", ".join(f"`{n}`" for n in self.flow_names)
            if self.sp.mode == "penalty":
                lines.append(f"sparsity penalty {self.sp.weight:g}·Σ mean|f| over {what} (training samples)")
            else:
                lines.append(f"sparsity by primal–dual: min Σ mean|f| over {what} s.t. fit ≤ {self.sp.epsilon:g} "
                             f"(α = {self.sp.alpha:g}, λ0 = {self.sp.lambda0:g})")
        return lines


class RegularizedLoss:
    """A :class:`~pdsl.fit.loss.ChunkLoss` whose training objective carries the regulariser."""

    def __init__(self, base, reg: Regularizer):
        self.base, self.reg = base, reg
        self._fns: dict = {}

    def __getattr__(self, name):  # everything else is the chunk loss's
        return getattr(self.base, name)

    def value_grad_function(self, B: int) -> ca.Function:
        """``(theta, S0, Y, U, T) -> (objective, gradient)``: the batch data loss of the chunk loss
        combined with the regulariser's terms (rebuilt when the dual multiplier changes)."""
        key = self.reg.key()
        cached = self._fns.get(B)
        if cached is not None and cached[0] == key:
            return cached[1]
        base = self.base.value_grad_function(B)
        ins = [ca.MX.sym(base.name_in(i), base.sparsity_in(i)) for i in range(base.n_in())]
        J, dJ = base(*ins)
        L, g = self.reg.objective(J, dJ, ins[0])
        fn = ca.Function("batch_objective_grad", ins, [L, g], [base.name_in(i) for i in range(base.n_in())], ["L", "g"])
        self._fns[B] = (key, fn)
        return fn

    def value_grad(self, theta, chunks):
        L, g = self.value_grad_function(len(chunks))(theta, *self.base.batch_args(chunks))
        return float(L), np.asarray(g).ravel()

    # ---- per epoch
    def begin(self, state) -> None:
        """Restore the dual multiplier of a resumed run."""
        if self.reg.lam is not None and "dual_lambda" in state.extra:
            self.reg.lam = float(state.extra["dual_lambda"])

    def after_epoch(self, state, train_chunks) -> None:
        """Record the terms (and the data loss and λ in primal–dual mode); take the dual step."""
        theta = np.asarray(state.theta, dtype=float)
        v = self.reg.values(theta)
        rec = state.extra.setdefault("regularizer", {"equilibrium": [], "sparsity": [], "fit": [], "lambda": []})
        rec.setdefault("constraints", []).append(v["constraints"])
        rec.setdefault("momentum", []).append(v["momentum"])
        rec["equilibrium"].append(v["equilibrium"])
        rec["sparsity"].append(v["sparsity"])
        if self.reg.lam is not None:
            fit = self.base.value(theta, train_chunks) + self.reg.w_eq * v["equilibrium"]
            rec["fit"].append(fit)
            rec["lambda"].append(self.reg.lam)  # the multiplier this epoch was trained with
            state.extra["dual_lambda"] = self.reg.dual_update(fit)


def wrap_loss(loss, cfg, model, num, layout, train):
    """``loss`` itself without regularisers, else a :class:`RegularizedLoss` (settings of ``cfg``)."""
    eq, sp = specs_from_config(cfg.equilibrium, cfg.sparsity)
    w_con = term_weight(cfg.constraints, "constraints")
    w_mom = term_weight(cfg.momentum, "momentum")
    if eq is None and sp is None and not w_con and not w_mom:
        return loss
    return RegularizedLoss(loss, Regularizer(num, layout, eq, sp, model=model, train=train, w_con=w_con, w_mom=w_mom))


def epoch_callback(loss, state, train_chunks, save: Callable) -> Callable:
    """The per-epoch callback of a fit: the regulariser's bookkeeping (dual step), then ``save``."""
    if not isinstance(loss, RegularizedLoss):
        return save
    loss.begin(state)

    def on_epoch(s):
        loss.after_epoch(s, train_chunks)
        save(s)

    return on_epoch
