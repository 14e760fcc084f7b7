"""Frobenius test: is a set of velocity constraints a(q)·q̇ = 0 holonomic in disguise?

LANGUAGE.md §5: a ``constraint`` linear in ``der(...)`` is a velocity constraint; if it is
integrable it is reported as such, otherwise it is nonholonomic (BENCHMARKS D1, Def. 2.1).

Each constraint row k is a one-form ω_k = Σ_j a_kj(q) dq_j. The constraints define the
distribution D = {v : a(q)·v = 0}. By Frobenius' theorem the constraints are equivalent to
holonomic ones h(q) = const (integrable) iff D is involutive, i.e. iff every dω_k vanishes on
D: dω_k(X, Y) = 0 for all X, Y ∈ D (because ω_k([X, Y]) = −dω_k(X, Y) when ω_k(X) = ω_k(Y) = 0).
For a single constraint this is the classical ω ∧ dω = 0. With

    F_k = (∂a_kj/∂q_i − ∂a_ki/∂q_j)_ij      (the matrix of dω_k, from a symbolic Jacobian)

and N(q) a basis of D (the null space of a(q)), the test is Nᵀ F_k N = 0. It is evaluated
numerically at random points (coordinates and parameters drawn at random, seeded), which
decides "identically zero" for analytic coefficients with probability one.

Per constraint two verdicts are computed: *alone* (D_k = ker ω_k, the ω ∧ dω test) and
*together with the others* (D = ∩ ker ω_j). The reported verdict is the joint one (it is the
one that matters for the model), and the reason says when they differ, e.g.
``dz = y·dx`` is nonholonomic alone but holonomic together with ``dy = 0``.

Affine constraints a(q, t)·q̇ + b(q, t) = 0 are one-forms on (q, t): t is appended as a
coordinate with coefficient b (a rheonomic constraint is integrable iff that form is).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import sympy as sp

__all__ = ["classify_velocity_constraints", "velocity_rows", "classify_model_constraints"]

_SAMPLES = 8
_RANK_TOL = 1e-10  # relative singular-value threshold for the rank of a(q)
_TOL = 1e-9  # relative size of dω on D that counts as zero


def classify_velocity_constraints(
    A_rows: Sequence[Sequence[sp.Expr]] | sp.MatrixBase,
    q: Sequence[sp.Symbol],
    *,
    samples: int = _SAMPLES,
    seed: int = 0,
    tol: float = _TOL,
    scale: float = 2.0,
) -> list[tuple[bool, str]]:
    """For each row of a(q) (constraint a(q)·q̇ = 0): ``(is_integrable, reason)``.

    ``A_rows[k][j]`` is the coefficient of q̇_j in constraint k. Symbols other than ``q``
    (parameters, time) are drawn at random in [0.5, 2] at each sample point; coordinates
    uniformly in [−scale, scale].
    """
    A = sp.Matrix(A_rows)
    q = list(q)
    m, n = A.shape
    if n != len(q):
        raise ValueError(f"a(q) has {n} columns but {len(q)} coordinates were given")
    if m == 0:
        return []
    others = sorted(A.free_symbols - set(q), key=lambda s: s.name)
    args = q + others
    f_A = sp.lambdify(args, A, "numpy")
    # F_k[i, j] = ∂a_kj/∂q_i − ∂a_ki/∂q_j
    dA = [[[sp.diff(A[k, j], q[i]) for j in range(n)] for i in range(n)] for k in range(m)]
    f_dA = sp.lambdify(args, dA, "numpy")
    rng = np.random.default_rng(seed)
    alone = [_Verdict() for _ in range(m)]
    joint = [_Verdict() for _ in range(m)]
    dims = set()
    for _ in range(samples):
        qv = rng.uniform(-scale, scale, size=n)
        pv = rng.uniform(0.5, 2.0, size=len(others))
        point = np.concatenate([qv, pv])
        a = np.array(f_A(*point), dtype=float).reshape(m, n)
        dav = np.array(f_dA(*point), dtype=float).reshape(m, n, n)
        N = _null_space(a)
        dims.add(N.shape[1])
        for k in range(m):
            F = dav[k] - dav[k].T
            size = max(np.abs(F).max(), np.abs(a[k]).max(), 1e-300)  # dω scales with ω
            joint[k].add(N.T @ F @ N, size, qv, N, q)
            alone[k].add(_null_space(a[k : k + 1]).T @ F @ _null_space(a[k : k + 1]), size, qv, None, q)
    out = []
    for k in range(m):
        ok_joint, ok_alone = joint[k].zero(tol), alone[k].zero(tol)
        if ok_joint and ok_alone:
            reason = ("integrable (holonomic in disguise): ω ∧ dω = 0, and dω vanishes on the constraint "
                      f"distribution at {samples} random points, so the constraint is d h(q) = 0 up to a factor")
        elif ok_joint:
            reason = ("integrable together with the other constraints (holonomic in disguise): dω vanishes on "
                      "their common distribution, though alone it would be nonholonomic "
                      f"(ω ∧ dω ≠ 0, |dω| on ker ω up to {alone[k].worst:.3g})")
        else:
            reason = ("nonholonomic: the constraint distribution is not involutive, "
                      + joint[k].witness_text())
        out.append((bool(ok_joint), reason))
    return out


class _Verdict:
    """The largest |Nᵀ F N| (relative) seen over the sample points, with a witness."""

    def __init__(self):
        self.worst = 0.0
        self.witness = None

    def add(self, block: np.ndarray, size: float, qv, N, q):
        if block.size == 0:
            return
        value = float(np.abs(block).max()) / size
        if value > self.worst:
            self.worst = value
            self.witness = (qv, N, block, q)

    def zero(self, tol: float) -> bool:
        return bool(self.worst <= tol)

    def witness_text(self) -> str:
        qv, N, block, q = self.witness
        a, b = np.unravel_index(np.argmax(np.abs(block)), block.shape)
        at = ", ".join(f"{s.name} = {v:.3g}" for s, v in zip(q, qv))
        X = ", ".join(f"{v:.3g}" for v in N[:, a])
        Y = ", ".join(f"{v:.3g}" for v in N[:, b])
        return (f"dω(X, Y) = {block[a, b]:.3g} ≠ 0 at ({at}) for X = ({X}), Y = ({Y}) in the distribution: "
                "their Lie bracket leaves it")


def _null_space(a: np.ndarray) -> np.ndarray:
    _, s, Vt = np.linalg.svd(a)
    rank = int(np.sum(s > _RANK_TOL * max(1.0, s.max() if s.size else 0.0)))
    return Vt[rank:].T


# ----------------------------------------------------------------------------- models
def velocity_rows(model) -> tuple[list, list[sp.Symbol], list]:
    """a(q, t) of a resolved model's velocity constraints, as rows over (q, t).

    Returns ``(rows, coords, constraints)``; ``coords`` ends with the time symbol when some
    constraint has a term without der(...) (affine / rheonomic), whose coefficient is that term.
    """
    from .. import symbols as S

    q = [v.symbol for v in model.variables_of("coord")]
    rates = [S.der(s) for s in q]
    cons = [c for c in model.constraints if c.kind == "velocity"]
    rows, affine = [], []
    for c in cons:
        rows.append([sp.diff(c.residual, r) for r in rates])
        affine.append(sp.expand(c.residual.xreplace({r: 0 for r in rates})))
    coords = list(q)
    if any(b != 0 for b in affine):
        coords.append(S.TIME)
        rows = [row + [b] for row, b in zip(rows, affine)]
    return rows, coords, cons


def _networks_in(row) -> list[str]:
    """Names of the neural components a row of coefficients calls (``nn_A(k, ...)`` -> ``A``)."""
    from sympy.core.function import AppliedUndef

    from .. import symbols as S

    names = set()
    for e in row:
        e = S.as_expr(e)  # internal values only: never parses text
        names |= {f.func.__name__.removeprefix("nn_") for f in e.atoms(AppliedUndef)}
        names |= {d.expr.func.__name__.removeprefix("nn_") for d in e.atoms(sp.Derivative) if isinstance(d.expr, AppliedUndef)}
    return sorted(names)


def classify_model_constraints(model, **kwargs) -> list[tuple[object, bool, str]]:
    """``(constraint, is_integrable, reason)`` for each velocity constraint of a resolved model.

    A constraint whose coefficients call a neural component is not tested: whether it is integrable depends on
    weights that a fit has not chosen yet (the reason says so; ``is_integrable`` is False). The others are
    tested together."""
    rows, coords, cons = velocity_rows(model)
    if not cons:
        return []
    nets = [_networks_in(row) for row in rows]
    known = [k for k, names in enumerate(nets) if not names]
    verdicts = dict(zip(known, classify_velocity_constraints([rows[k] for k in known], coords, **kwargs))) if known else {}
    out = []
    for k, c in enumerate(cons):
        if nets[k]:
            names = ", ".join(f"`{n}`" for n in nets[k])
            out.append((c, False, f"not tested: its coefficients call the network {names}, so whether it is integrable "
                                  "depends on weights a fit has not chosen (the Frobenius test needs known coefficients)"))
        else:
            ok, why = verdicts[k]
            if len(known) < len(cons):
                why += " (tested with the constraints that have known coefficients)"
            out.append((c, ok, why))
    return out
