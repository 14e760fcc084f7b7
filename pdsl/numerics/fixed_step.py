"""Fixed-step one-step methods on a CasADi right-hand side ``f(t, x, p) -> xdot``.

Every method is a Runge–Kutta scheme given by its Butcher tableau. Explicit schemes
(``euler``, ``rk4``) evaluate the stages in order. Implicit schemes (``midpoint``,
BENCHMARKS B3.1; ``gauss2``, 2-stage Gauss–Legendre) solve the stage equations

    K_i = f(t + c_i h, x + h sum_j a_ij K_j, p),     x_next = x + h sum_i b_i K_i

either with a CasADi rootfinder (Newton or KINSOL, differentiable through the implicit
function theorem) or with the predictor–corrector of BENCHMARKS B3.2: an explicit predictor
followed by ``n_iter`` unrolled fixed-point sweeps, a plain graph that can be code-generated.

For ``midpoint`` the stage form is the paper's iteration: with y^(k) = x + h K^(k),
``K^(k) = f(x + h/2 K^(k-1))`` is ``y^(k) = y_n + h f((y_n + y^(k-1))/2)`` (Alg. 2), and the
predictor ``K^(0) = f(x + h/2 f(x))`` is the explicit-midpoint RK2 step.

An SX right-hand side gives SX steps wherever the scheme allows it; an MX one (e.g. with a
neural network inside) stays MX and is never expanded. An MX right-hand side is inlined into
the step (``inline_call``: its graph, and that of every MX Function it calls, substituted in),
so that reverse mode through a step differentiates one flat graph instead of re-running the
forward pass of every nested Function it calls; common subexpressions (e.g. the weight
matrices that every stage slices out of p) are merged with ``casadi.cse``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import casadi as ca

__all__ = [
    "METHODS",
    "SOLVERS",
    "Tableau",
    "explicit_rk_step",
    "inline_call",
    "make_fpi_residuals",
    "make_rollout",
    "make_step",
    "rhs_dims",
    "tableau",
    "unrolled_blocks",
]


@dataclass(frozen=True, slots=True)
class Tableau:
    """Butcher tableau ``(a, b, c)`` of an s-stage Runge–Kutta method."""

    a: tuple[tuple[float, ...], ...]
    b: tuple[float, ...]
    c: tuple[float, ...]

    @property
    def stages(self) -> int:
        return len(self.b)

    @property
    def implicit(self) -> bool:
        """True when some stage depends on itself or on a later stage (a_ij != 0, j >= i)."""
        return any(self.a[i][j] != 0.0 for i in range(self.stages) for j in range(i, self.stages))


_G = math.sqrt(3.0) / 6.0

_TABLEAUS: dict[str, Tableau] = {
    "euler": Tableau(a=((0.0,),), b=(1.0,), c=(0.0,)),
    "rk4": Tableau(
        a=((0.0, 0.0, 0.0, 0.0), (0.5, 0.0, 0.0, 0.0), (0.0, 0.5, 0.0, 0.0), (0.0, 0.0, 1.0, 0.0)),
        b=(1 / 6, 1 / 3, 1 / 3, 1 / 6),
        c=(0.0, 0.5, 0.5, 1.0),
    ),
    # BENCHMARKS B3.1: Gauss–Legendre collocation with s = 1.
    "midpoint": Tableau(a=((0.5,),), b=(1.0,), c=(0.5,)),
    # Explicit midpoint (RK2): x + h f(x + h/2 f(x)); torchdiffeq's fixed-grid "midpoint" (BENCHMARKS C5.2).
    "rk2": Tableau(a=((0.0, 0.0), (0.5, 0.0)), b=(0.0, 1.0), c=(0.0, 0.5)),
    # 2-stage Gauss–Legendre: order 4, symmetric, symplectic.
    "gauss2": Tableau(
        a=((0.25, 0.25 - _G), (0.25 + _G, 0.25)),
        b=(0.5, 0.5),
        c=(0.5 - _G, 0.5 + _G),
    ),
}

METHODS: tuple[str, ...] = tuple(_TABLEAUS)
SOLVERS: tuple[str, ...] = ("newton", "kinsol", "fpi")


def tableau(method: str) -> Tableau:
    """The Butcher tableau of ``method``; ``ValueError`` for an unknown name."""
    try:
        return _TABLEAUS[method]
    except KeyError:
        raise ValueError(f"unknown integration method {method!r}; expected one of {', '.join(METHODS)}") from None


def _axpy(y, c, k):
    return y + c * k


def explicit_rk_step(f, method: str, t, x, h, axpy=_axpy):
    """``x_next`` of one step of the explicit ``method`` from its tableau, ``f(t, x) -> slope``: on anything that
    adds and scales (CasADi SX/MX with a symbolic h, numpy, torch batches with h a (B, 1) column of per-row steps).
    Zero coefficients are skipped. :func:`pdsl.numerics.torch_steps.rk_step`, the compile targets' step and
    ``pdsl evaluate --backend torch`` step with it; :func:`make_step` forms the same sums as one matrix product.
    ``axpy(y, c, k)`` forms y + c·k (torch with a number c: one fused operation, ``torch.add(y, k, alpha=c)``).
    """
    tab = tableau(method)
    if tab.implicit:
        raise ValueError(f"method {method!r} is implicit: its stages need a solve (make_step, torch_steps.rk_step)")
    K: list = []
    for i in range(tab.stages):
        y = x
        for j in range(i):
            if tab.a[i][j] != 0.0:
                y = axpy(y, h * tab.a[i][j], K[j])
        K.append(f(t + tab.c[i] * h, y))
    out = x
    for bi, k in zip(tab.b, K):
        if bi != 0.0:
            out = axpy(out, h * bi, k)
    return out


def rhs_dims(f: ca.Function) -> tuple[int, int]:
    """Check that ``f`` is ``(t, x, p) -> xdot`` with column x, p and scalar t; return ``(nx, np)``."""
    if f.n_in() != 3 or f.n_out() != 1:
        raise ValueError(f"right-hand side {f.name()!r} must map (t, x, p) to xdot; it has {f.n_in()} inputs and {f.n_out()} outputs")
    t_sp, x_sp, p_sp, xdot_sp = f.sparsity_in(0), f.sparsity_in(1), f.sparsity_in(2), f.sparsity_out(0)
    if t_sp.numel() != 1:
        raise ValueError(f"right-hand side {f.name()!r}: t must be scalar, got {t_sp.dim()}")
    p_ok = p_sp.is_column() or p_sp.numel() == 0
    if not (x_sp.is_column() and p_ok and xdot_sp.is_column()) or xdot_sp.numel() != x_sp.numel():
        raise ValueError(
            f"right-hand side {f.name()!r}: x, p and xdot must be columns with xdot the size of x; "
            f"got x {x_sp.dim()}, p {p_sp.dim()}, xdot {xdot_sp.dim()}"
        )
    return x_sp.numel(), p_sp.numel()


def inline_call(f: ca.Function, args: list) -> list:
    """``f(*args)`` as expressions: for an MX Function its graph, with every MX Function it calls
    inlined as well (recursively), so that no call node is left; other Functions (SX, rootfinders,
    integrators, externals) are called as usual.

    A call node is differentiated by calling the derivative Function of the callee, which
    re-evaluates the callee's forward pass: one extra forward pass per level of nesting (e.g. a
    user's ``f(t, x, p)`` that wraps a model's ``rhs(t, x, p, u)``). Inlining avoids that.
    """
    if not f.is_a("MXFunction"):
        return f.call(list(args))
    try:
        out = f.call(list(args), True, False)
    except RuntimeError:  # a Function built with never_inline stays a call
        return f.call(list(args))
    old, new = [], []
    arguments = {a.__hash__() for a in args if isinstance(a, ca.MX)}
    for call, outputs in _mx_calls(out, arguments):  # dependencies first: their arguments hold no inlined call
        deps = [call.dep(i) for i in range(call.n_dep())]
        if old:
            deps = ca.graph_substitute(deps, old, new)
        res = inline_call(call.which_function(), deps)
        for node in outputs:
            old.append(node)
            new.append(res[node.which_output()])
    return ca.graph_substitute(out, old, new) if old else out


def _mx_calls(exprs: list, stop: set[int]) -> list:
    """``(call node, [its output nodes])`` for every call of an MX Function in ``exprs``, in topological
    order, not looking behind the nodes in ``stop`` (the arguments: what they are made of is the caller's)."""
    calls: dict[int, tuple] = {}  # keyed by node identity (MX == is symbolic, not identity)
    seen: set[int] = set(stop)
    stack = [(e, False) for e in reversed(exprs)]
    while stack:
        node, finished = stack.pop()
        if finished:  # post-order: every dependency of node has been visited
            call = node.dep(0) if node.is_output() else None
            if call is not None and call.is_call() and call.which_function().is_a("MXFunction"):
                calls.setdefault(call.__hash__(), (call, []))[1].append(node)
            continue
        if node.__hash__() in seen:
            continue
        seen.add(node.__hash__())
        stack.append((node, True))
        stack.extend((node.dep(i), False) for i in range(node.n_dep() - 1, -1, -1))
    return list(calls.values())


def _rhs_caller(f: ca.Function):
    """``f`` as a callable on (t, x, p) that inlines an MX Function (``inline_call``)."""
    if not f.is_a("MXFunction"):
        return f
    return lambda t, x, p: inline_call(f, [t, x, p])[0]


def _check_solver(solver: str) -> None:
    if solver not in SOLVERS:
        raise ValueError(f"unknown implicit solver {solver!r}; expected one of {', '.join(SOLVERS)}")


def _symbols(f: ca.Function, mx: bool = False):
    """Fresh (t, x, p) symbols: SX for an SX right-hand side unless ``mx``, else MX."""
    nx, np_ = rhs_dims(f)
    sym = ca.SX.sym if f.is_a("SXFunction") and not mx else ca.MX.sym
    return sym("t"), sym("x", nx), sym("p", np_)


def _stage_slopes(f, tab: Tableau, h: float, t, x, p, K):
    """F(K): the columns f(t + c_i h, x + h sum_j a_ij K_j, p) for every stage i."""
    return ca.horzcat(*[
        f(t + tab.c[i] * h, x + h * sum(tab.a[i][j] * K[:, j] for j in range(tab.stages)), p)
        for i in range(tab.stages)
    ])


def _explicit_slopes(f, tab: Tableau, h: float, t, x, p):
    """Stages of an explicit scheme, evaluated in order."""
    K = []
    for i in range(tab.stages):
        K.append(f(t + tab.c[i] * h, x + h * sum(tab.a[i][j] * K[j] for j in range(i)), p))
    return ca.horzcat(*K)


def _predictor(f, tab: Tableau, h: float, t, x, p):
    """Explicit guess K_i^(0) = f(t + c_i h, x + c_i h f(t, x, p)); for midpoint the RK2 step of B3.2."""
    f0 = f(t, x, p)
    return ca.horzcat(*[f(t + c * h, x + c * h * f0, p) for c in tab.c])


def _fpi_iterates(f, tab: Tableau, h: float, t, x, p, n_iter: int) -> list:
    """Predictor and ``n_iter`` fixed-point sweeps K^(k) = F(K^(k-1)) (BENCHMARKS B3.2, Alg. 2)."""
    iterates = [_predictor(f, tab, h, t, x, p)]
    for _ in range(n_iter):
        iterates.append(_stage_slopes(f, tab, h, t, x, p, iterates[-1]))
    return iterates


def _rootfinder_slopes(f, rhs, tab: Tableau, h: float, t, x, p, plugin: str, tol: float):
    """Stages from a CasADi rootfinder on the MX residual K - F(K), seeded with the predictor."""
    nx, _ = rhs_dims(f)
    t_s, x_s, p_s = _symbols(f, mx=True)
    k = ca.MX.sym("k", nx * tab.stages)
    K = ca.reshape(k, nx, tab.stages)
    # Scale-aware: the residual is measured relative to the size of the state and its slope,
    # so ``tol`` is a relative accuracy for large states and an absolute one near zero. The
    # root (and, by the implicit function theorem, its derivatives) is unchanged by the scale.
    scale = 1.0 + ca.fmax(ca.norm_inf(x_s), h * ca.norm_inf(ca.vec(_stage_slopes(rhs, tab, h, t_s, x_s, p_s, ca.MX.zeros(nx, tab.stages)))))
    residual = ca.cse((k - ca.vec(_stage_slopes(rhs, tab, h, t_s, x_s, p_s, K))) / scale)
    g = ca.Function("stage_residual", [k, t_s, x_s, p_s], [residual])
    # Sparse LU: CasADi's default Householder QR loses entries of ~1e-160 to underflow in its
    # column norms and returns NaN derivatives (issue 12, defect 12).
    opts = {"abstol": tol, "linear_solver": "csparse"}
    if plugin == "newton":
        opts["abstolStep"] = tol
    solve = ca.rootfinder("stage_solve", plugin, g, opts)
    k_root = solve(ca.vec(_predictor(rhs, tab, h, t, x, p)), t, x, p)
    return ca.reshape(k_root, nx, tab.stages)


def make_step(f: ca.Function, method: str, h: float, *, solver: str = "newton", n_iter: int = 6, tol: float = 1e-14) -> ca.Function:
    """One step ``step(t, x, p) -> x_next`` of ``method`` with step size ``h``.

    ``solver`` applies to the implicit methods only: ``"newton"`` or ``"kinsol"`` solve the
    stage equations with a CasADi rootfinder to absolute tolerance ``tol``; ``"fpi"`` is the
    predictor–corrector of BENCHMARKS B3.2 with ``n_iter`` unrolled fixed-point sweeps.
    """
    tab = tableau(method)
    _check_solver(solver)
    use_rootfinder = tab.implicit and solver != "fpi"
    t, x, p = _symbols(f, mx=use_rootfinder)
    rhs = _rhs_caller(f)
    if not tab.implicit:
        K = _explicit_slopes(rhs, tab, h, t, x, p)
    elif use_rootfinder:
        K = _rootfinder_slopes(f, rhs, tab, h, t, x, p, solver, tol)
    else:
        K = _fpi_iterates(rhs, tab, h, t, x, p, n_iter)[-1]
    x_next = x + h * ca.mtimes(K, ca.DM(tab.b))
    if isinstance(x_next, ca.MX):
        x_next = ca.cse(x_next)
    return ca.Function(f"{method}_step", [t, x, p], [x_next], ["t", "x", "p"], ["x_next"])


def make_rollout(f: ca.Function, method: str, h: float, n_steps: int, **step_options) -> ca.Function:
    """``rollout(t0, x0, p) -> X``: ``n_steps`` steps of ``make_step``; column k of X is x(t0 + (k+1) h).

    An unrolled MX graph with one call node of the step Function per step, every call fed the
    same p. (``Function.mapaccum`` takes each non-accumulated input once per step: p passed once
    is repmat'd to np x n_steps and split into n_steps copies, O(n_steps np) memory and time.)
    The graph stays small for long horizons (a call node per step) and is code-generatable for
    explicit schemes and ``fpi``. It is assembled from blocks of about sqrt(n_steps) steps
    (``unrolled_blocks``), so that building it takes O(sqrt(n_steps)) Python-level operations.
    """
    if n_steps < 1:
        raise ValueError(f"a rollout needs at least one step, got n_steps = {n_steps}")
    step = make_step(f, method, h, **step_options)
    nx, np_ = rhs_dims(f)

    def block(k: int) -> ca.Function:  # (t, x, p) -> the k states after x, from time t
        t, x_in, p = ca.MX.sym("t"), ca.MX.sym("x", nx), ca.MX.sym("p", np_)
        x, columns = x_in, []
        for j in range(k):
            x = step(t + j * h, x, p)
            columns.append(x)
        return ca.Function(f"{method}_block{k}", [t, x_in, p], [ca.horzcat(*columns)])

    t0, x0, p = ca.MX.sym("t0"), ca.MX.sym("x0", nx), ca.MX.sym("p", np_)
    x, parts = x0, []
    for start, stop, blk in unrolled_blocks(n_steps, block):
        X = blk.call([t0 + start * h, x, p], True, False)[0]
        parts.append(X)
        x = X[:, -1]
    return ca.Function(f"{method}_rollout", [t0, x0, p], [ca.horzcat(*parts)], ["t0", "x0", "p"], ["X"])


def unrolled_blocks(n: int, build) -> list:
    """``[(start, stop, block Function)]`` covering steps 0 ... n-1 in blocks of about sqrt(n).

    ``build(k)`` makes the Function of a block of k steps (built once per distinct size: at most
    two). Calling a block with ``always_inline`` puts its k call nodes into the caller's graph in
    one C++ operation; each MX operation issued from Python costs tens of microseconds, so a
    plain Python loop over 1e5 steps would take seconds to build.
    """
    k = max(1, math.isqrt(n))
    cache: dict[int, ca.Function] = {}
    out = []
    for start in range(0, n, k):
        stop = min(start + k, n)
        if stop - start not in cache:
            cache[stop - start] = build(stop - start)
        out.append((start, stop, cache[stop - start]))
    return out


def make_fpi_residuals(f: ca.Function, method: str, h: float, n_iter: int) -> ca.Function:
    """``residuals(t, x, p) -> r`` (1 x (n_iter+1)): fixed-point residual of every FPI iterate.

    r_k = || h (K^(k) - F(K^(k))) ||_inf, the defect of the implicit equation at iterate k in
    state units; for ``midpoint`` it is |y^(k) - y_n - h f((y_n + y^(k))/2)| (B3.2). Column 0
    is the predictor, so the number of sweeps to reach ``tol`` is the first k with r_k <= tol.
    """
    tab = tableau(method)
    if not tab.implicit:
        raise ValueError(f"method {method!r} is explicit; fixed-point residuals exist for implicit methods only")
    t, x, p = _symbols(f)
    rhs = _rhs_caller(f)
    r = [
        h * ca.mmax(ca.fabs(K - _stage_slopes(rhs, tab, h, t, x, p, K)))
        for K in _fpi_iterates(rhs, tab, h, t, x, p, n_iter)
    ]
    return ca.Function(f"{method}_fpi_residuals", [t, x, p], [ca.horzcat(*r)], ["t", "x", "p"], ["r"])
