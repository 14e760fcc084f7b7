"""The chunk rollout loss of BENCHMARKS A5 as CasADi graphs, batched with ``Function.map``.

For a chunk (z_0, t_0), ..., (z_n, t_n) the model is rolled out from the data sample z_0 with
a fixed-step scheme of :mod:`pdsl.numerics` (``rk4`` by default, ``midpoint``, ``gauss2``,
``euler``), one step per data interval or ``substeps`` steps, and compared with the observed
columns at t_1..t_n:

    L_chunk = Σ_k Σ_j w_j·|ŷ_kj − y_kj|     (``l1``, BENCHMARKS A5: mean |.| over all entries, as the CHNN authors' code)
    L_chunk = Σ_k Σ_j (w_j·(ŷ_kj − y_kj))²  (``mse``; what Gauss–Newton minimises)

and a batch loss is the mean over all entries of all chunks. Three pieces connect data
columns to the model:

* the *initial-state map* x = g(t, shown, p): the data shows Cartesian velocities while the
  Hamiltonian state holds momenta p = M v (BENCHMARKS A1.4 "convert x_dot -> p = M x_dot with the learned
  M"). It is built from ``NumericSystem.report``: when the shown columns are affine in the state
  (Jacobian independent of x, as for p = M v) it is one linear solve, exact; otherwise a Newton
  rootfinder. It depends on the parameters, so learned masses enter it.
* the *interval map*: ``substeps`` steps over one data interval, inputs linear in time between
  samples (rk4's mid-stages see the interpolated input).
* the *observation map*: the observed shown columns (``report``) and declared outputs.

Batches are ONE graph: the single-chunk loss and its reverse-mode gradient are mapped over the
chunks with θ passed once (a column the map broadcasts; a repmat'd θ would evaluate the whole
batch B times, the N² trap noted in :func:`pdsl.numerics.make_batched_loss_grad`). For large θ
(networks) the map reduces the gradient in place instead of forming an nθ × B matrix.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import casadi as ca
import numpy as np

from ..backend.functions import NumericSystem
from ..diagnostics import PdslError
from ..numerics import make_step
from ..vocab import FIT_INTEGRATORS, IMPLICIT_FIXED_STEP, TRAJECTORY_LOSSES
from .data import Chunks, Trajectory
from .params import ParamLayout

__all__ = ["LossSpec", "ChunkLoss", "state_from_shown", "make_interval", "observation_function", "INTEGRATORS", "LOSSES"]

INTEGRATORS = FIT_INTEGRATORS  # pdsl.vocab: the integrators with fit=True
LOSSES = TRAJECTORY_LOSSES
_IMPLICIT_TOL = 1e-12  # stage-equation tolerance of midpoint/gauss2 (1e-14 fails on O(10) slopes)
_REDUCE_ABOVE = 2000  # θ sizes above which batch gradients are summed inside the map


@dataclass(frozen=True)
class LossSpec:
    steps: int  # n: intervals per chunk
    dt: float  # data sampling interval
    method: str = "rk4"
    substeps: int = 1
    loss: str = "l1"
    weights: tuple[float, ...] | None = None  # per observed column (default 1)
    threads: int = 1
    project: int = 0  # Newton steps projecting each chunk's first state onto the constraints (0: none)
    step_options: dict = field(default_factory=dict)  # implicit schemes: solver, n_iter, tol, gradient
    variable_step: bool = False  # irregular sampling: each interval's length comes from the sample times
    dtype: str = "float64"  # torch backend: float64 | float32
    device: str = "cpu"  # torch backend: cpu | cuda[:k]
    # torch backend, training only: dropout after every hidden layer — one rate for every network, or
    # (network name, rate) pairs (the networks' own mlp(dropout = …)); 0 / (): none
    dropout: float | tuple = 0.0
    # inputs known as expressions of t (--input NAME=EXPR): (input index, CasADi Function (t, x, p) -> u), evaluated
    # at every integration stage's time instead of interpolated linearly between the samples (CasADi backend)
    exact_inputs: tuple = ()
    switches: str = "step-through"  # switching surfaces on the state: step-through | locate (pdsl.numerics.events)


# ---------------------------------------------------------------- model pieces
def _sym(num: NumericSystem):
    return ca.SX.sym if num.kind == "SX" else ca.MX.sym


def state_from_shown(num: NumericSystem) -> ca.Function:
    """``g(t, s, p) -> x``: the state whose shown columns (``num.report``) equal s."""
    sym = _sym(num)
    t, x, p = sym("t"), sym("x", num.nx), sym("p", len(num.p_names))
    s = sym("s", len(num.report_names))
    if num.report_names == num.x_names:
        return ca.Function("state_from_shown", [t, s, p], [s])
    if len(num.report_names) != num.nx:
        raise PdslError.at("NotYetSupported", f"{num.system.name} shows {len(num.report_names)} columns for {num.nx} states",
                           num.system.span, "fitting needs a one-to-one map from shown columns to states")
    y = num.report(t, x, p)
    J = ca.jacobian(y, x)
    if not ca.depends_on(J, x):
        zero = ca.Function("at_zero", [t, x, p], [y, J])(t, ca.DM.zeros(num.nx), p)
        x_of_s = ca.solve(zero[1], s - zero[0]) if num.kind == "SX" else ca.solve(zero[1], s - zero[0], "qr")
        return ca.Function("state_from_shown", [t, s, p], [x_of_s])
    return _shown_rootfinder(num)


def _shown_rootfinder(num: NumericSystem) -> ca.Function:
    """Newton on report(t, x, p) = s, started from the start values with shown states copied in."""
    sym = _sym(num)
    x = sym("x", num.nx)
    q = sym("q", 1 + len(num.report_names) + len(num.p_names))
    ns = len(num.report_names)
    g = ca.Function("shown_residual", [x, q], [num.report(q[0], x, q[1 + ns :]) - q[1 : 1 + ns]])
    solve = ca.rootfinder("shown_solve", "newton", g, {"abstol": 1e-12})
    t, s, p = ca.MX.sym("t"), ca.MX.sym("s", ns), ca.MX.sym("p", len(num.p_names))
    guess = [ca.MX(v) for v in num.x_start]
    for i, name in enumerate(num.x_names):
        if name in num.report_names:
            guess[i] = s[num.report_names.index(name)]
    return ca.Function("state_from_shown", [t, s, p], [solve(ca.vertcat(*guess), ca.vertcat(t, s, p))])


def projection_function(num: NumericSystem, steps: int) -> ca.Function:
    """``proj(t, x, p) -> x``: ``steps`` minimum-norm Newton steps x -= Jᵀ(JJᵀ)⁻¹ r on the invariants
    r = (Φ, Φ̇) (the BENCHMARKS A3.1 projection, unclamped), so a noisy sample starts on the constraint manifold."""
    sym = _sym(num)
    t, x, p = sym("t"), sym("x", num.nx), sym("p", len(num.p_names))
    if not num.invariants.size1_out(0):
        return ca.Function("project", [t, x, p], [x])
    r = num.invariants(t, x, p)
    J = ca.jacobian(r, x)
    newton = ca.Function("project_step", [t, x, p], [x - ca.mtimes(J.T, ca.solve(ca.mtimes(J, J.T), r))])
    xk = x
    for _ in range(steps):
        xk = newton(t, xk, p)
    return ca.Function("project", [t, x, p], [xk])


def observation_function(num: NumericSystem, observed: tuple[str, ...]) -> ca.Function:
    """``obs(t, x, p, u) -> y``: the observed columns, shown states and declared outputs."""
    sym = _sym(num)
    t, x, p, u = sym("t"), sym("x", num.nx), sym("p", len(num.p_names)), sym("u", len(num.u_names))
    shown = num.report(t, x, p)
    outputs = num.outputs(t, x, sym("z", 0), p, u) if num.y_names else None
    rows = [shown[num.report_names.index(n)] if n in num.report_names else outputs[num.y_names.index(n)] for n in observed]
    return ca.Function("observe", [t, x, p, u], [ca.vertcat(*rows)])


def make_interval(num: NumericSystem, method: str, dt: float, substeps: int = 1, exact_inputs=(), switches: str = "step-through",
                  **step_options) -> ca.Function:
    """``interval(x, p, u0, u1, tk) -> x(tk + dt)``: ``substeps`` steps, u linear from u0 to u1 (the
    ``exact_inputs``, functions of t, evaluated at each stage's time instead)."""
    return _interval(num, method, substeps, dt, exact_inputs, switches, **step_options)


def make_variable_interval(num: NumericSystem, method: str, substeps: int = 1, exact_inputs=(), switches: str = "step-through",
                           **step_options) -> ca.Function:
    """``interval(x, p, u0, u1, tk, h) -> x(tk + h)`` for intervals of any length h (irregular samples).

    Time is rescaled to τ ∈ [0, 1] (dx/dτ = h·f(tk + τh, x, p, u0 + τ(u1 − u0))), so the same
    fixed-step schemes take ``substeps`` steps of 1/substeps in τ, whatever h is."""
    return _interval(num, method, substeps, None, exact_inputs, switches, **step_options)


def _interval(num: NumericSystem, method: str, substeps: int, dt: float | None, exact_inputs=(), switches: str = "step-through",
              **step_options) -> ca.Function:
    """The interval map of a fixed ``dt``, or (``dt`` None) of a length ``h`` given as its last argument."""
    if num.rhs is None:
        raise PdslError.at("NotYetSupported", f"{num.system.name} is a DAE; fitting needs an ODE model", num.system.span)
    if method not in INTEGRATORS:
        raise PdslError.at("BadOption", f"--integrator {method}: unknown for fitting", hint="one of: " + ", ".join(INTEGRATORS))
    variable = dt is None
    sym = _sym(num)
    nu, n_p = len(num.u_names), len(num.p_names)
    tau, x, q = sym("tau"), sym("x", num.nx), sym("q", n_p + 2 * nu + 1 + variable)
    p, u0, u1, tk = q[:n_p], q[n_p : n_p + nu], q[n_p + nu : n_p + 2 * nu], q[n_p + 2 * nu]
    if variable:
        hk = q[n_p + 2 * nu + 1]
        t_abs, u = tk + tau * hk, u0 + tau * (u1 - u0)
    else:
        t_abs, u = tk + tau, u0 + tau / dt * (u1 - u0)
    if exact_inputs:  # known functions of t: their value at the stage time, not the interpolation
        rows = [u[i] for i in range(nu)]
        for i, fn in exact_inputs:
            rows[i] = fn(t_abs, x, p)
        u = ca.vertcat(*rows)
    scale = hk if variable else 1.0
    h = 1.0 / substeps if variable else dt / substeps
    f = ca.Function("f_interval", [tau, x, q], [scale * num.rhs(t_abs, x, p, u)])
    events = interval_events(num, tau, x, q, t_abs, p, u)
    located = interval_switches(num, tau, x, q, t_abs, p, u, scale) if switches == "locate" and events is None else None
    if events is not None:  # `when`: each step locates the events in it (pdsl.numerics.events)
        from ..numerics.events import make_event_step

        step = make_event_step(f, method, h, events, **step_options)
    elif located is not None:  # --switches locate: each step locates the first switching surface it crosses
        from ..numerics.events import make_switch_step

        step = make_switch_step(located, method, h, **step_options)
    else:
        step = make_step(f, method, h, **step_options)
    sym = ca.SX.sym if step.is_a("SXFunction") else ca.MX.sym
    names = ["x", "p", "u0", "u1", "tk"] + (["h"] if variable else [])
    sizes = [num.nx, n_p, nu, nu, 1, 1]
    args = [sym(n, k) for n, k in zip(names, sizes)]
    qq = ca.vertcat(*args[1:])
    xk = args[0]
    for j in range(substeps):
        xk = step(j * h, xk, qq)
    return ca.Function("interval", args, [xk], names, ["x_next"])


def interval_events(num: NumericSystem, tau, x, q, t_abs, p, u):
    """The model's events (``when``) in the interval's time variable τ (:class:`pdsl.numerics.events.StepEvents`),
    None for a model without them. Resets of states only; the impulse of a constrained part is not fitted yet."""
    hy = num.hybrid
    if hy is None or not hy.conditions:
        return None
    from ..numerics.events import StepEvents

    def refuse(what: str):
        line = hy.lines[0]
        raise PdslError.at("NotYetSupported", f"fitting through the event `{hy.labels[0]}`: {what}", num.system.span,
                           f"simulate it with pdsl simulate (line {line}); fitting through events takes models whose "
                           "resets set states directly")

    if num.nz:
        refuse(f"{num.system.name} has algebraic variables")
    if num.invariants.size1_out(0) or hy.velocity_rows is not None:
        refuse("a reset of a constrained part is an impulse, which the fit's integrators do not apply yet")
    sym = type(x).sym
    z = sym("z", 0)
    atoms = ca.Function("atoms_interval", [tau, x, q], [hy.atoms(t_abs, x, z, p, u)])
    resets = []
    for j, fn in enumerate(hy.resets):
        if fn is None:
            resets.append(None)
            continue
        missing = [n for n in hy.targets[j] if n not in num.x_names]
        if missing:
            refuse(f"`reinit({missing[0]}, …)` sets a column that is not a state")
        idx = tuple(num.x_names.index(n) for n in hy.targets[j])
        resets.append((idx, ca.Function(f"reset{j}_interval", [tau, x, q], [fn(t_abs, x, z, p, u)])))
    return StepEvents(atoms, tuple(hy.strict), tuple(hy.conditions), tuple(resets), tuple(hy.terminate))


def interval_switches(num: NumericSystem, tau, x, q, t_abs, p, u, scale):
    """The switching surfaces of the dynamics (pdsl.backend.switching) in the interval's time variable τ
    (:class:`pdsl.numerics.events.StepSwitches`), None for a model without them."""
    hy = num.hybrid
    sw = hy.switches if hy is not None else None
    if sw is None or not sw.n:
        return None
    from ..numerics.events import StepSwitches

    if num.nz:
        raise PdslError.at("NotYetSupported", f"--switches locate: {num.system.name} has algebraic variables",
                           num.system.span, "fitting with located switches takes ODE models; use --switches step-through")
    sym = type(x).sym
    z, m = sym("z", 0), sym("m", sw.n)
    io = [tau, x, q, m]
    f_modes = ca.Function("f_modes", io, [scale * sw.dae(t_abs, x, z, p, u, m)[0]])
    slide = tuple(None if fn is None else ca.Function(f"slide{k}", io, [scale * fn(t_abs, x, z, p, u, m)[0]])
                  for k, fn in enumerate(sw.slide))
    return StepSwitches(
        f_modes=f_modes, indicators=ca.Function("switches", [tau, x, q], [sw.indicators(t_abs, x, z, p, u)]),
        kinds=sw.kinds, strict=sw.strict, slide=slide,
        rate=ca.Function("switch_rates", io, [scale * sw.rate(t_abs, x, z, p, u, m)]),
    )


def trajectory_pieces(num: NumericSystem):
    """(f(t, x, p), StepEvents | None, StepSwitches | None) of a model without inputs, in its own time: what
    :func:`pdsl.numerics.sensitivity.loss_and_grad` and :func:`pdsl.numerics.event_sensitivity.event_sensitivities`
    take (q = p)."""
    if num.u_names:
        raise PdslError.at("NotYetSupported", f"{num.system.name} has inputs: give them as functions of t in f",
                           num.system.span)
    sym = _sym(num)
    t, x, p, u = sym("t"), sym("x", num.nx), sym("p", len(num.p_names)), sym("u", 0)
    f = ca.Function("f", [t, x, p], [num.rhs(t, x, p, u)], ["t", "x", "p"], ["xdot"])
    return f, interval_events(num, t, x, p, t, p, u), interval_switches(num, t, x, p, t, p, u, 1.0)


def casadi_step_options(spec: LossSpec) -> dict:
    """``make_step`` options of the CasADi backend from ``spec.step_options``: a Newton rootfinder
    (gradient by the implicit-function theorem: the discrete adjoint) by default, or ``fpi`` sweeps
    differentiated by unrolling (CasADi AD through the graph)."""
    o = dict(spec.step_options or {})
    if spec.method not in IMPLICIT_FIXED_STEP:
        return {}
    solver = o.get("solver", "newton")
    gradient = o.get("gradient", "adjoint" if solver == "newton" else "unrolled")
    if (solver, gradient) not in (("newton", "adjoint"), ("fpi", "unrolled")):
        raise PdslError.at("BadOption", f"--implicit-solver {solver} --gradient {gradient}: not on the CasADi backend",
                           hint="the CasADi backend differentiates Newton by its adjoint and fixed-point sweeps by "
                                "unrolling; the discrete adjoint of FPI runs on --backend torch")
    if solver == "fpi":
        return {"solver": "fpi", "n_iter": int(o.get("n_iter", 6))}
    return {"solver": "newton", "tol": o.get("tol") or _IMPLICIT_TOL}


def _call(fn: ca.Function, *args):
    """Evaluate ``fn``; a failed implicit stage solve becomes a located user error."""
    from .. import quiet

    try:
        # a rootfinder that fails (a Gauss–Newton trial step far from the data, which the line search then
        # rejects) prints its inputs, hundreds of lines that no option turns off; the failure itself arrives as
        # the exception. pdsl.quiet keeps them off the terminal (counted in the CLI's note).
        with quiet.capture():
            return fn(*args)
    except RuntimeError as exc:
        if "rootfinder" not in str(exc):
            raise
        raise PdslError.at(
            "IntegratorFailure", "the implicit integrator's stage equations did not converge on a chunk",
            hint="use more --substeps, or --integrator rk4",
        ) from None


# ---------------------------------------------------------------- the chunk loss
class ChunkLoss:
    """Losses, gradients and Gauss–Newton residuals over batches of chunks (module docstring)."""

    def __init__(self, num: NumericSystem, layout: ParamLayout, spec: LossSpec, observed: tuple[str, ...]):
        if spec.loss not in LOSSES:
            raise PdslError.at("BadOption", f"loss {spec.loss!r}: unknown", hint="one of: " + ", ".join(LOSSES))
        self.num, self.layout, self.spec, self.observed = num, layout, spec, observed
        self.g = state_from_shown(num)
        self.project = projection_function(num, spec.project) if spec.project else None
        self.obs = observation_function(num, observed)
        options = casadi_step_options(spec)
        if spec.variable_step:
            self.interval = make_variable_interval(num, spec.method, spec.substeps, spec.exact_inputs, spec.switches, **options)
        else:
            self.interval = make_interval(num, spec.method, spec.dt, spec.substeps, spec.exact_inputs, spec.switches,
                                          **options)
        w = np.ones(len(observed)) if spec.weights is None else np.asarray(spec.weights, dtype=float)
        self.weights = ca.DM(w)
        self._cache: dict = {}
        self._single = self._build_single(spec.steps)

    # ---- graphs
    def _rollout(self, n: int) -> ca.Function:
        key = ("rollout", n)
        if key not in self._cache:
            self._cache[key] = self.interval.mapaccum("rollout", n, [0], [0], {})
        return self._cache[key]

    def _predict_graph(self, n: int, theta: ca.MX):
        """MX symbols (s0, U, T), the predicted states X and observations Ŷ (n columns each)."""
        num = self.num
        s0 = ca.MX.sym("s0", len(num.report_names))
        U = ca.MX.sym("U", len(num.u_names), n + 1)
        T = ca.MX.sym("T", 1, n + 1)
        p = self.layout.casadi_p(theta)
        X, Yhat = self.rollout_observed(n, self._x0(T[0], s0, p), p, U, T)
        return s0, U, T, X, Yhat

    def rollout_observed(self, n: int, x0, p, U, T):
        """States X and observations Ŷ at t_1..t_n of an n-step rollout from the state x0 (graph pieces)."""
        if self.spec.variable_step:
            X = self._rollout(n)(x0, p, U[:, :-1], U[:, 1:], T[:, :-1], T[:, 1:] - T[:, :-1])
        else:
            X = self._rollout(n)(x0, p, U[:, :-1], U[:, 1:], T[:, :-1])
        return X, self.obs.map(n)(T[:, 1:], X, p, U[:, 1:])

    def weighted(self, Yhat, Y):
        """The weighted residuals (Ŷ − Y)·w, column by column."""
        return (Yhat - Y) * ca.repmat(self.weights, 1, Y.shape[1])

    def _x0(self, t0, s0, p):
        x0 = self.g(t0, s0, p)
        return self.project(t0, x0, p) if self.project is not None else x0

    def _build_single(self, n: int) -> dict:
        """The single-chunk graph: θ, data symbols, weighted residuals R and the loss L."""
        theta = ca.MX.sym("theta", self.layout.n_theta)
        s0, U, T, _, Yhat = self._predict_graph(n, theta)
        Y = ca.MX.sym("Y", len(self.observed), n)
        R = self.weighted(Yhat, Y)
        L = ca.sum1(ca.sum2(ca.fabs(R))) if self.spec.loss == "l1" else ca.sumsqr(R)
        return {"ins": [theta, s0, Y, U, T], "L": L, "R": R}

    def _single_function(self, kind: str) -> ca.Function:
        """Built on first use: the Jacobian (Gauss–Newton only) is costly to form for networks."""
        key = ("single", kind)
        if key not in self._cache:
            g = self._single
            ins, names, theta = g["ins"], ["theta", "s0", "Y", "U", "T"], g["ins"][0]
            if kind == "value":
                fn = ca.Function("chunk_loss", ins, [g["L"]], names, ["L"])
            elif kind == "value_grad":
                fn = ca.Function("chunk_loss_grad", ins, [g["L"], ca.gradient(g["L"], theta)], names, ["L", "g"])
            else:
                r = ca.vec(g["R"])
                fn = ca.Function("chunk_res_jac", ins, [r, ca.jacobian(r, theta)], names, ["r", "J"])
            self._cache[key] = fn
        return self._cache[key]

    def _mapped(self, kind: str, B: int) -> ca.Function:
        key = (kind, B)
        if key not in self._cache:
            single = self._single_function(kind)
            if kind == "value_grad" and self.layout.n_theta > _REDUCE_ABOVE:
                mapped = single.map(f"{kind}_{B}", "serial", B, [0], [0, 1], {})
            else:
                mapped = single.map(B, "thread", max(1, self.spec.threads))
            self._cache[key] = mapped
        return self._cache[key]

    # ---- numeric entry points
    @staticmethod
    def batch_args(chunks: Chunks) -> list[np.ndarray]:
        """(S0, Y, U, T) of a batch, side by side as the mapped functions take them."""
        B, n = len(chunks), chunks.steps
        Y = chunks.Y.transpose(1, 0, 2).reshape(chunks.Y.shape[1], B * n)
        U = chunks.U.transpose(1, 0, 2).reshape(chunks.U.shape[1], B * (n + 1))
        return [chunks.S0.T, Y, U, chunks.T.reshape(1, -1)]

    def entry_scale(self, B: int) -> float:
        """1 / (number of compared entries) of a batch of B chunks: loss sums become means."""
        return 1.0 / (B * self.spec.steps * max(len(self.observed), 1))

    def value_grad_function(self, B: int) -> ca.Function:
        """``(theta, S0, Y, U, T) -> (L, dL/dθ)``: the batch mean loss and its gradient (one graph)."""
        key = ("batch_vg", B)
        if key not in self._cache:
            mapped = self._mapped("value_grad", B)
            ins = [ca.MX.sym(n, *s.shape) for n, s in zip(["theta", "S0", "Y", "U", "T"], self._batch_shapes(B))]
            L, G = mapped(*ins)
            c = self.entry_scale(B)
            self._cache[key] = ca.Function("batch_loss_grad", ins, [c * ca.sum2(L), c * ca.sum2(G)],
                                           ["theta", "S0", "Y", "U", "T"], ["L", "g"])
        return self._cache[key]

    def _batch_shapes(self, B: int):
        n, nobs, nu, ns = self.spec.steps, len(self.observed), len(self.num.u_names), len(self.num.report_names)
        return [ca.Sparsity.dense(self.layout.n_theta, 1), ca.Sparsity.dense(ns, B), ca.Sparsity.dense(nobs, B * n),
                ca.Sparsity.dense(nu, B * (n + 1)), ca.Sparsity.dense(1, B * (n + 1))]

    def value(self, theta: np.ndarray, chunks: Chunks, batch: int = 256) -> float:
        """The mean loss over all chunks (no gradient), evaluated in batches."""
        if len(chunks) == 0:
            return float("nan")
        total = 0.0
        for start in range(0, len(chunks), batch):
            part = chunks.take(slice(start, start + batch))
            L = _call(self._mapped("value", len(part)), theta, *self.batch_args(part))
            total += float(ca.sum2(L))
        return total * self.entry_scale(len(chunks))

    def value_grad(self, theta: np.ndarray, chunks: Chunks) -> tuple[float, np.ndarray]:
        L, g = _call(self.value_grad_function(len(chunks)), theta, *self.batch_args(chunks))
        return float(L), np.asarray(g).ravel()

    def residuals(self, theta: np.ndarray, chunks: Chunks) -> tuple[np.ndarray, np.ndarray]:
        """Stacked weighted residuals r (all chunks) and dr/dθ (rows match r), for Gauss–Newton."""
        r, J = _call(self._mapped("res_jac", len(chunks)), theta, *self.batch_args(chunks))
        r = np.asarray(r).T.ravel()  # chunk after chunk
        J = np.asarray(J)  # (m, nθ·B): chunk b's block in columns b·nθ ...
        m, nt = J.shape[0], self.layout.n_theta
        J = J.reshape(m, -1, nt).transpose(1, 0, 2).reshape(-1, nt)
        return r, J

    # ---- whole trajectories
    def predict(self, p: np.ndarray, traj: Trajectory) -> np.ndarray:
        """Observed columns along a whole trajectory, rolled out from its first sample with parameters
        ``p`` ((n, n_obs); row 0 is the data's first row)."""
        n = len(traj) - 1
        key = ("predict", n)
        if key not in self._cache:
            num = self.num
            P = ca.MX.sym("p", len(num.p_names))
            s0, U, T = ca.MX.sym("s0", len(num.report_names)), ca.MX.sym("U", len(num.u_names), n + 1), ca.MX.sym("T", 1, n + 1)
            _, Yhat = self.rollout_observed(n, self._x0(T[0], s0, P), P, U, T)
            self._cache[key] = ca.Function("predict", [P, s0, U, T], [Yhat])
        Yhat = np.asarray(_call(self._cache[key], p, traj.S[0], traj.U.T, traj.t[None, :])).T
        return np.vstack([traj.Y[:1], Yhat])
