"""sympy -> CasADi translation on every bundled model: the symbolic IR and the CasADi
Functions evaluate the same right-hand side and energy at random points.

The sympy side is evaluated with ``lambdify`` (numpy); for implicit (Lagrangian) systems the
IR's A(x) w = b(x) is solved with numpy. The CasADi side is ``NumericSystem.rhs`` / ``energy``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from pdsl.lower import formalism_of
import pytest
import sympy as sp

from pdsl import symbols as S
from pdsl.pipeline import compile_model

MODELS = Path(__file__).resolve().parents[2] / "models"
BUNDLED = sorted(p.stem for p in MODELS.glob("*.phm"))
N_POINTS = 100
# half-width of the random box per model (states), chosen to stay in the physically meaningful range
BOX = {"cucker_smale": 10.0, "henon_heiles": 0.5}


@pytest.fixture(scope="module", params=BUNDLED)
def compiled(request):
    c = compile_model(MODELS / f"{request.param}.phm")
    if c.system.neural:
        # a neural component has no sympy expression to evaluate independently; its MX graph is
        # checked against torch in tests/numerics/test_neural_graph.py
        pytest.skip("model has neural components")
    return request.param, c


_NUMPY = {
    sp.sin: np.sin, sp.cos: np.cos, sp.tan: np.tan, sp.exp: np.exp, sp.log: np.log, sp.sqrt: np.sqrt,
    sp.Abs: np.abs, sp.sign: np.sign, sp.tanh: np.tanh, sp.sinh: np.sinh, sp.cosh: np.cosh, sp.atan2: np.arctan2,
}


_RELATIONS = {
    sp.StrictLessThan: np.less, sp.LessThan: np.less_equal, sp.StrictGreaterThan: np.greater,
    sp.GreaterThan: np.greater_equal, sp.Equality: np.equal, sp.Unequality: np.not_equal,
}


def evaluate(expr, env, memo):
    """Evaluate a sympy expression tree with numpy, vectorized over points (``env``: symbol -> array).

    An evaluator of its own, independent of the CasADi translation under test (``lambdify`` is too
    slow on the 60 long Cucker–Smale rows: it rebuilds every expression to rename symbols).
    """
    hit = memo.get(expr)
    if hit is not None:
        return hit
    if expr.is_Symbol:
        v = env[expr]
    elif expr.is_number:  # numbers and constants such as pi
        v = float(expr)
    elif expr.is_Add:
        v = sum(evaluate(a, env, memo) for a in expr.args)
    elif expr.is_Mul:
        v = 1.0
        for a in expr.args:
            v = v * evaluate(a, env, memo)
    elif expr.is_Pow:
        v = np.power(evaluate(expr.base, env, memo), evaluate(expr.exp, env, memo))
    elif isinstance(expr, sp.Piecewise):
        parts = np.broadcast_arrays(*[evaluate(c, env, memo) for _, c in expr.args],
                                    *[evaluate(e, env, memo) for e, _ in expr.args])
        k = len(expr.args)
        v = np.select([c.astype(bool) for c in parts[:k]], parts[k:], default=np.nan)
    elif isinstance(expr, sp.logic.boolalg.BooleanAtom):
        v = bool(expr)
    elif isinstance(expr, sp.core.relational.Relational):
        v = _RELATIONS[type(expr)](evaluate(expr.lhs, env, memo), evaluate(expr.rhs, env, memo))
    else:
        v = _NUMPY[expr.func](*(evaluate(a, env, memo) for a in expr.args))
    memo[expr] = v
    return v


def sympy_side(system, T, X, P, U):
    """rhs (points x nx) and energy (points) of the IR; implicit systems: numpy solve of A w = b."""
    laws = system.input_laws()
    n = len(T)
    env = {S.TIME: T}
    env.update({s.symbol: X[:, k] for k, s in enumerate(system.states)})
    env.update({q.symbol: np.full(n, P[k]) for k, q in enumerate(system.params)})
    env.update({u.symbol: U[:, k] for k, u in enumerate(system.exogenous_inputs)})
    memo: dict = {}

    def ev(e):
        return np.broadcast_to(evaluate(sp.sympify(e).xreplace(laws), env, memo), (n,))

    nx = len(system.states)
    if system.is_explicit():
        rhs = np.column_stack([ev(e.rhs) for e in system.differential])
    else:
        A, b = system.linear_system()
        Am = np.stack([np.column_stack([ev(A[i, j]) for j in range(A.shape[1])]) for i in range(A.shape[0])], axis=1)
        bm = np.column_stack([ev(b[i]) for i in range(b.shape[0])])
        rhs = np.linalg.solve(Am, bm[:, :, None])[:, :nx, 0]
        sympy_side.cond = np.linalg.cond(Am)
    energy = ev(system.energy) if system.energy is not None else None
    return rhs, energy


def _tolerance(system, n):
    """1e-12, times cond(A) for implicit systems: two correct solvers differ by about cond(A)·eps."""
    if system.is_explicit():
        return np.full(n, 1e-12)
    return np.maximum(1e-12, 1e-15 * sympy_side.cond)


def casadi_side(num, T, X, P, U):
    n = len(T)
    Pm, Um = np.tile(P[:, None], n), U.T
    rhs = np.asarray(num.rhs.map(n)(T[None, :], X.T, Pm, Um)).T
    energy = np.asarray(num.energy.map(n)(T[None, :], X.T, Pm, Um)).ravel() if num.energy is not None else None
    return rhs, energy


def random_points(num, name, n, seed):
    rng = np.random.default_rng(seed)
    box = BOX.get(name, 2.0)
    return rng.uniform(0, 10, n), rng.uniform(-box, box, (n, num.nx)), rng.uniform(-1, 1, (n, len(num.u_names)))


def _relerr(a, b):
    return np.abs(a - b).max() / max(np.abs(b).max(), 1e-300)


def test_every_bundled_model_is_tested():
    assert {"henon_heiles", "double_well", "coupled_oscillator", "double_pendulum", "cart_pole", "cucker_smale"} <= set(BUNDLED)


def test_rhs_and_energy_agree(compiled):
    name, c = compiled
    system, num = c.system, c.numeric
    assert num.rhs is not None
    T, X, U = random_points(num, name, N_POINTS, seed=11)
    rhs_sym, e_sym = sympy_side(system, T, X, num.p_default, U)
    rhs_ca, e_ca = casadi_side(num, T, X, num.p_default, U)
    tol = _tolerance(system, N_POINTS)
    errs = np.array([_relerr(a, b) for a, b in zip(rhs_ca, rhs_sym)])
    assert np.all(errs <= tol), (name, errs.max(), tol[np.argmax(errs / tol)])
    if formalism_of(c.model) == "plain":
        assert e_ca is None and e_sym is None  # plain equations carry no energy
        return
    err_e = max(abs(a - b) / max(abs(b), 1e-300) for a, b in zip(e_ca, e_sym))
    assert err_e <= 1e-12, (name, err_e)


def test_random_parameters_agree(compiled):
    """The parameters are kept symbolic: the agreement holds away from the defaults too."""
    name, c = compiled
    system, num = c.system, c.numeric
    rng = np.random.default_rng(12)
    for k in range(5):
        P = num.p_default * rng.uniform(0.7, 1.3, len(num.p_default))
        T, X, U = random_points(num, name, 20, seed=100 + k)
        rhs_sym, _ = sympy_side(system, T, X, P, U)
        rhs_ca, _ = casadi_side(num, T, X, P, U)
        tol = _tolerance(system, 20)
        assert np.all(np.array([_relerr(a, b) for a, b in zip(rhs_ca, rhs_sym)]) <= tol)
