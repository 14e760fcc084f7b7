"""Frobenius test: which of a set of velocity constraints a(q)·q̇ = 0 are holonomic in disguise?

LANGUAGE.md §5: a ``constraint`` linear in ``der(...)`` is a velocity constraint; if it is
integrable it is reported as such, otherwise it is nonholonomic (BENCHMARKS D1, Def. 2.1).

Each constraint row k is a one-form ω_k = Σ_j a_kj(q) dq_j; together they define the
distribution of allowed velocities D = {v : a(q)·v = 0} = ∩ ker ω_k. The question is asked of
the **whole** distribution, not of one row at a time:

* D̄, the *involutive closure* of D, is spanned by a basis of D (vector fields from the null
  space of a(q), built symbolically) and their iterated Lie brackets [X, Y] = J_Y X − J_X Y,
  kept while they raise the rank (evaluated at random points: coordinates and parameters
  drawn at random, seeded, which decides "generic rank" with probability one).
* By Frobenius' theorem the one-forms that annihilate D̄ are exactly the combinations
  Σ c_k(q) ω_k of the constraints that are differentials of holonomic constraints (up to a
  factor): there are s = n − dim D̄ independent functions h_i(q) with dh_i ∈ span{ω_k}, and D is
  involutive (all constraints holonomic) iff D̄ = D.
* A single constraint is holonomic in disguise iff ω_k itself annihilates D̄. Checking only that
  dω_k vanishes on D (the first step of the derived flag) is not enough: on a differential-drive
  robot each wheel's rolling constraint passes that test, yet neither integrates — only their
  difference does (θ − r(φ_R − φ_L)/(2b) = const). Such a combination is reported as a
  combination (``note[IntegrableCombination]``), never as one of the constraints.

For the combinations that no single constraint accounts for, the coefficients c(q) (c·a·G = 0 for
the closure's generators G) are computed symbolically, normalised (one coefficient 1), and the
form is integrated to h(q) when it is exact (then ``… = 0 integrates to h = const`` is printed).

Per constraint a second verdict, *alone* (the classical ω ∧ dω = 0), is also computed; the
reason says when the two differ, e.g. ``dz = y·dx`` is nonholonomic alone but holonomic together
with ``dy = 0``.

Affine constraints a(q, t)·q̇ + b(q, t) = 0 are one-forms on (q, t): t is appended as a
coordinate with coefficient b (a rheonomic constraint is integrable iff that form is).

Constraints that share no coordinate are tested in independent groups (the closure of a product
is the product of the closures); a group larger than ``_MAX_ROWS`` rows or ``_MAX_COORDS``
coordinates is not tested symbolically (the reason says so).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np
import sympy as sp

from .. import symbols as S

__all__ = ["classify_velocity_constraints", "velocity_rows", "classify_model_constraints",
           "analyze_velocity_constraints", "Integrability", "Combination", "velocity_notes"]

_SAMPLES = 8
_RANK_TOL = 1e-10  # relative singular-value threshold for the rank of a(q)
_TOL = 1e-9  # relative size of dω on D (ω on D̄) that counts as zero
_MAX_ROWS = 8  # a coupled group of constraints larger than this is not tested (symbolic elimination)
_MAX_COORDS = 16
_MAX_NORMALISATIONS = 4  # coefficients tried as the one normalised to 1 when naming a combination


@dataclass(frozen=True)
class Combination:
    """An integrable combination Σ c_k ω_k of the constraint rows, normalised so that one coefficient of the form is 1.

    ``coefficients``: (k, c_k) for the rows that take part; ``form``: (j, coefficient of dq_j), nonzero ones;
    ``integral`` is h(q) with dh = form, or None when the form is not exact (an integrating factor other than the
    normalisation would be needed) or sympy found no antiderivative."""

    coefficients: tuple  # ((row, c_row), ...) for the rows that take part
    form: tuple  # ((coordinate index, coefficient), ...) for the nonzero coefficients
    integral: sp.Expr | None

    @property
    def rows(self) -> tuple[int, ...]:
        return tuple(k for k, _ in self.coefficients)


@dataclass
class Integrability:
    """The Frobenius analysis of a set of velocity constraints (see the module docstring).

    ``integrable[k]``: row k annihilates the involutive closure (holonomic together with the others); ``alone[k]``:
    ω_k ∧ dω_k = 0; ``singles[k]``: the normalised row with its integral, for integrable rows; ``combinations``:
    further integrable combinations of several rows (a basis of the integrable forms beyond the single rows);
    ``dims[k]`` = (dim D, dim D̄, n) of row k's group; ``untested[k]``: why row k was not tested (or None)."""

    integrable: list[bool]
    alone: list[bool]
    singles: dict = field(default_factory=dict)
    combinations: list = field(default_factory=list)
    dims: list = field(default_factory=list)
    witness: list = field(default_factory=list)
    alone_worst: list = field(default_factory=list)
    untested: list = field(default_factory=list)
    samples: int = _SAMPLES


def analyze_velocity_constraints(
    A_rows: Sequence[Sequence[sp.Expr]] | sp.MatrixBase,
    q: Sequence[sp.Symbol],
    *,
    samples: int = _SAMPLES,
    seed: int = 0,
    tol: float = _TOL,
    scale: float = 2.0,
    name: bool = True,
) -> Integrability:
    """The Frobenius analysis of the constraints a(q)·q̇ = 0 (``A_rows[k][j]``: the coefficient of q̇_j in row k).

    Symbols other than ``q`` (parameters, time) are drawn at random in [0.5, 2] at each sample point, coordinates
    uniformly in [−scale, scale]. ``name=False`` skips the symbolic naming of combinations and integrals."""
    A = sp.Matrix(A_rows)
    q = list(q)
    m, n = A.shape
    if n != len(q):
        raise ValueError(f"a(q) has {n} columns but {len(q)} coordinates were given")
    out = Integrability(integrable=[False] * m, alone=[False] * m, dims=[None] * m, witness=[None] * m,
                        alone_worst=[0.0] * m, untested=[None] * m, samples=samples)
    if m == 0:
        return out
    rng = np.random.default_rng(seed)
    others = sorted(A.free_symbols - set(q), key=lambda s: s.name)
    qv = rng.uniform(-scale, scale, size=(samples, n))
    pv = rng.uniform(0.5, 2.0, size=(samples, len(others)))
    values = {s: qv[:, j] for j, s in enumerate(q)} | {s: pv[:, j] for j, s in enumerate(others)}
    for rows, cols in _groups(A, q):
        sub = A.extract(rows, cols)
        if len(rows) > _MAX_ROWS or len(cols) > _MAX_COORDS:
            for k in rows:
                out.untested[k] = (f"not tested: it is coupled to {len(rows)} velocity constraints over {len(cols)} "
                                   f"coordinates (the symbolic test handles at most {_MAX_ROWS} and {_MAX_COORDS})")
            continue
        _Group(sub, [q[j] for j in cols], rows, cols, values, samples, tol, name).run(out, n)
    return out


def _groups(A: sp.Matrix, q: list) -> list[tuple[list[int], list[int]]]:
    """Rows that share a coordinate (as a rate or inside a coefficient), with the coordinates they involve."""
    m, n = A.shape
    index = {s: j for j, s in enumerate(q)}
    support = []
    for k in range(m):
        cols = {j for j in range(n) if A[k, j] != 0}
        for j in range(n):
            if A[k, j] != 0:
                cols |= {index[s] for s in A[k, j].free_symbols if s in index}
        support.append(cols)
    parent = list(range(m))

    def find(i):
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    owner: dict[int, int] = {}
    for k, cols in enumerate(support):
        for j in cols:
            if j in owner:
                parent[find(k)] = find(owner[j])
            else:
                owner[j] = k
    groups: dict[int, list[int]] = {}
    for k in range(m):
        groups.setdefault(find(k), []).append(k)
    return [(rows, sorted(set().union(*(support[k] for k in rows)))) for rows in groups.values()]


def _numeric(exprs: list, values: dict, samples: int) -> np.ndarray:
    """``exprs`` (a flat list) at every sample point: an array (samples, len(exprs))."""
    out = np.empty((samples, len(exprs)))
    if not exprs:
        return out
    syms = sorted(set().union(*(S.as_expr(e).free_symbols for e in exprs)), key=lambda s: s.name)
    f = sp.lambdify(syms, list(exprs), "numpy")
    with np.errstate(all="ignore"):
        vals = f(*[values[s] for s in syms])
    for i, v in enumerate(vals):
        out[:, i] = np.broadcast_to(np.asarray(v, dtype=float), (samples,))
    return out


def _rank(M: np.ndarray) -> int:
    """Numerical rank of M with its columns scaled to unit length (generators of very different sizes)."""
    if M.size == 0:
        return 0
    norms = np.linalg.norm(M, axis=0)
    keep = norms > 0
    if not keep.any():
        return 0
    s = np.linalg.svd(M[:, keep] / norms[keep], compute_uv=False)
    return int(np.sum(s > _RANK_TOL * 1e2 * max(1.0, s.max())))


def _null_basis(M: sp.Matrix, Mn: np.ndarray) -> list[sp.Matrix]:
    """A basis of ker M (symbolic columns) by Gauss–Jordan elimination whose pivots are chosen at the numeric point
    Mn (the value of M there), so that no pivot is an expression that vanishes identically."""
    M = sp.Matrix(M)
    Mn = np.array(Mn, dtype=float)
    rows, cols = M.shape
    scale = max(np.abs(Mn).max() if Mn.size else 0.0, 1e-300)
    pivots = []
    r = 0
    for c in range(cols):
        if r == rows:
            break
        p = r + int(np.argmax(np.abs(Mn[r:, c])))
        if abs(Mn[p, c]) <= 1e-9 * scale:
            continue
        if p != r:
            M.row_swap(p, r)
            Mn[[p, r]] = Mn[[r, p]]
        piv, pivn = M[r, c], Mn[r, c]
        M[r, :] = (M[r, :] / piv).applyfunc(sp.cancel)
        Mn[r] = Mn[r] / pivn
        for i in range(rows):
            if i != r and M[i, c] != 0:
                factor, fn = M[i, c], Mn[i, c]
                M[i, :] = (M[i, :] - factor * M[r, :]).applyfunc(sp.cancel)
                Mn[i] = Mn[i] - fn * Mn[r]
        pivots.append(c)
        r += 1
    basis = []
    for f in (c for c in range(cols) if c not in pivots):
        v = sp.zeros(cols, 1)
        v[f] = 1
        for i, c in enumerate(pivots):
            v[c] = -M[i, f]
        basis.append(v)
    return basis


class _Group:
    """One coupled group of constraints: rows ``rows`` of the whole matrix over coordinates ``q``."""

    def __init__(self, A, q, rows, cols, values, samples, tol, name):
        self.A, self.q, self.rows, self.cols = A, q, rows, cols
        self.values, self.samples, self.tol, self.name = values, samples, tol, name
        self.m, self.n = A.shape

    def num(self, exprs) -> np.ndarray:
        return _numeric(list(exprs), self.values, self.samples)

    def run(self, out: Integrability, n_all: int) -> None:
        A, q, m, n = self.A, self.q, self.m, self.n
        an = self.num(list(A)).reshape(self.samples, m, n)
        ranks = [np.linalg.matrix_rank(an[s], tol=_RANK_TOL * max(1.0, np.abs(an[s]).max())) for s in range(self.samples)]
        top = max(ranks)
        at = ranks.index(top)  # the sample point where pivots are chosen (generic rank)
        indep = _independent_rows(an[at], top)
        AR = A.extract(indep, list(range(n)))
        # the alone verdict: ω_k ∧ dω_k = 0, i.e. dω_k vanishes on ker ω_k
        dA = [[[sp.diff(A[k, j], q[i]) for j in range(n)] for i in range(n)] for k in range(m)]
        dav = self.num([e for k in dA for row in k for e in row]).reshape(self.samples, m, n, n)
        for k in range(m):
            worst = 0.0
            for s in range(self.samples):
                F = dav[s, k] - dav[s, k].T
                size = max(np.abs(F).max(), np.abs(an[s, k]).max(), 1e-300)
                Nk = _null_space(an[s, k: k + 1])
                block = Nk.T @ F @ Nk
                if block.size:
                    worst = max(worst, float(np.abs(block).max()) / size)
            out.alone[self.rows[k]] = bool(worst <= self.tol)
            out.alone_worst[self.rows[k]] = worst
        # D: a symbolic basis of ker a(q); D̄: iterated brackets while they raise the generic rank
        gens = _null_basis(AR, an[at][indep])
        G = self.num([e for g in gens for e in g]).reshape(self.samples, len(gens), n) if gens else np.zeros((self.samples, 0, n))
        dim_D = len(gens)
        rank = max(_rank(G[s].T) for s in range(self.samples)) if gens else 0
        jac = {}
        new = list(range(len(gens)))
        while new and rank < n:
            found = []
            for i in range(len(gens)):
                for j in range(i + 1, len(gens)):
                    if i not in new and j not in new:
                        continue
                    for g in (i, j):
                        if g not in jac:
                            jac[g] = gens[g].jacobian(q)
                    br = jac[j] * gens[i] - jac[i] * gens[j]
                    bn = self.num(list(br)).reshape(self.samples, 1, n)
                    trial = np.concatenate([G, bn], axis=1)
                    r2 = max(_rank(trial[s].T) for s in range(self.samples))
                    if r2 > rank:
                        gens.append(br)
                        G, rank = trial, r2
                        found.append(len(gens) - 1)
                    if rank == n:
                        break
                if rank == n:
                    break
            new = found
        for k in range(m):
            out.dims[self.rows[k]] = (dim_D, rank, n)
        # a row integrates iff it annihilates D̄ at every sample point
        for k in range(m):
            worst, witness = 0.0, None
            for s in range(self.samples):
                Gs = G[s].T  # n × g
                norms = np.linalg.norm(Gs, axis=0)
                ok = norms > 0
                if not ok.any():
                    continue
                vals = an[s, k] @ (Gs[:, ok] / norms[ok])
                size = max(np.abs(an[s, k]).max(), 1e-300)
                v = float(np.abs(vals).max()) / size
                if v > worst:
                    g = int(np.argmax(np.abs(vals)))
                    worst, witness = v, (s, (Gs[:, ok] / norms[ok])[:, g], float(vals[g]))
            out.integrable[self.rows[k]] = bool(worst <= self.tol * 1e2)
            if witness is not None and worst > self.tol * 1e2:
                s, X, val = witness
                point = {sym: float(self.values[sym][s]) for sym in q}
                out.witness[self.rows[k]] = (point, X, val, [self.cols[j] for j in range(n)])
        if not self.name:
            return
        s_all = n - rank  # independent integrable forms of the group
        singles = [k for k in range(m) if out.integrable[self.rows[k]]]
        for k in singles:
            out.singles[self.rows[k]] = self._combination([sp.Integer(1) if i == k else sp.Integer(0) for i in range(m)])
        s1 = max(_rank(an[s][singles].T) for s in range(self.samples)) if singles else 0
        if s1 >= s_all or rank == 0:
            return
        # c·a_R·G = 0: the integrable forms are the combinations c·a_R that annihilate the closure's generators
        Gsym = sp.Matrix.hstack(*gens)
        M = (AR * Gsym).T  # g × m'
        Mn = (an[at][indep] @ G[at].T).T
        chosen = [an[s][singles] for s in range(self.samples)]
        for c in _null_basis(M, Mn):
            if _stacked_rank(chosen) >= s_all:
                break
            full = [sp.Integer(0)] * m
            for i, k in enumerate(indep):
                full[k] = c[i]
            cn = self.num(full)  # samples × m
            wn = np.einsum("sk,skj->sj", cn, an)
            trial = [np.vstack([chosen[s], wn[s:s + 1]]) for s in range(self.samples)]
            if _stacked_rank(trial) > _stacked_rank(chosen):
                chosen = trial
                out.combinations.append(self._combination(full))

    def _combination(self, c: list) -> Combination:
        """Σ c_k ω_k normalised (a coefficient 1, others simplified), with its integral where one is found."""
        A, q, n = self.A, self.q, self.n
        form = [sp.together(sum((c[k] * A[k, j] for k in range(self.m)), sp.Integer(0))) for j in range(n)]
        nonzero = [j for j in range(n) if _nonzero(form[j], self.num)]
        best = None
        for j in nonzero[:_MAX_NORMALISATIONS]:  # prefer coefficients constant in q, then an exact form
            normal = [sp.simplify(sp.cancel(f / form[j])) for f in form]
            constant = not any(set(e.free_symbols) & set(q) for e in normal)
            h = _potential(normal, q)
            key = (h is None, not constant, j)
            if best is None or key < best[0]:
                best = (key, normal, h, j)
            if h is not None and constant:
                break
        if best is None:
            normal, h, j = form, None, 0
        else:
            _, normal, h, j = best
        if h is None and best is not None and n <= 6:  # an integrating factor 1/q_i or 1/q_i² (y dx − x dy = y² d(x/y))
            found = []
            for qi in [s for s in q if any(s in e.free_symbols for e in normal)]:
                for mu in (1 / qi, 1 / qi**2, qi):
                    hi = _potential([sp.simplify(mu * e) for e in normal], q)
                    if hi is not None:
                        found.append(sp.simplify(hi))
                        break
                if found and not found[-1].has(sp.log):  # x/y rather than log(x) − log(y)
                    break
            h = min(found, key=lambda e: (e.has(sp.log), sp.count_ops(e))) if found else None
        coeffs = [sp.simplify(sp.cancel(ck / form[j])) if nonzero else ck for ck in c]
        return Combination(coefficients=tuple((self.rows[k], coeffs[k]) for k in range(self.m) if coeffs[k] != 0),
                           form=tuple((self.cols[i], normal[i]) for i in range(n) if normal[i] != 0), integral=h)


def _stacked_rank(rows: list) -> int:
    """Generic rank of a list (one per sample point) of stacked one-forms (rows)."""
    return max(_rank(r.T) for r in rows) if rows[0].size else 0


def _nonzero(e: sp.Expr, num) -> bool:
    if e == 0:
        return False
    return bool(np.abs(num([e])).max() > 1e-12)


def _independent_rows(a: np.ndarray, rank: int) -> list[int]:
    rows: list[int] = []
    for k in range(a.shape[0]):
        trial = rows + [k]
        if np.linalg.matrix_rank(a[trial], tol=_RANK_TOL * max(1.0, np.abs(a).max())) == len(trial):
            rows = trial
        if len(rows) == rank:
            break
    return rows


def _potential(form: list, q: list) -> sp.Expr | None:
    """h with dh = Σ form_j dq_j when the form is exact (checked symbolically), else None."""
    n = len(q)
    for i in range(n):
        for j in range(i + 1, n):
            if sp.simplify(sp.diff(form[j], q[i]) - sp.diff(form[i], q[j])) != 0:
                return None
    h = sp.Integer(0)
    try:
        for i in range(n):
            rest = sp.simplify(form[i] - sp.diff(h, q[i]))
            if rest == 0:
                continue
            part = sp.integrate(rest, q[i])
            if part.has(sp.Integral):
                return None
            h = h + part
        if any(sp.simplify(sp.diff(h, q[i]) - form[i]) != 0 for i in range(n)):
            return None
    except (NotImplementedError, ValueError, TypeError):
        return None
    return sp.simplify(h)


def _null_space(a: np.ndarray) -> np.ndarray:
    _, s, Vt = np.linalg.svd(a)
    rank = int(np.sum(s > _RANK_TOL * max(1.0, s.max() if s.size else 0.0)))
    return Vt[rank:].T


def classify_velocity_constraints(
    A_rows: Sequence[Sequence[sp.Expr]] | sp.MatrixBase,
    q: Sequence[sp.Symbol],
    *,
    samples: int = _SAMPLES,
    seed: int = 0,
    tol: float = _TOL,
    scale: float = 2.0,
    label: Callable[[int], str] | None = None,
) -> list[tuple[bool, str]]:
    """For each row of a(q) (constraint a(q)·q̇ = 0): ``(is_integrable, reason)``.

    ``is_integrable`` is True only when the row itself, together with the others, is the time derivative of a
    holonomic constraint (it annihilates the involutive closure of the distribution); a row that only takes part in
    an integrable combination is False, and its reason names the combination. ``label(k)`` names row k in reasons
    (default ``row k+1``)."""
    info = analyze_velocity_constraints(A_rows, q, samples=samples, seed=seed, tol=tol, scale=scale)
    return _reasons(info, list(q), label or (lambda k: f"row {k + 1}"))


def _reasons(info: Integrability, q: list, label: Callable[[int], str]) -> list[tuple[bool, str]]:
    out = []
    for k in range(len(info.integrable)):
        if info.untested[k]:
            out.append((False, info.untested[k]))
            continue
        dim_D, dim_closure, n = info.dims[k]
        single = info.singles.get(k)
        h = f": it integrates to {integral_text(single, q)} = const" if single is not None and single.integral is not None else ""
        if info.integrable[k] and info.alone[k]:
            reason = ("integrable (holonomic in disguise): ω ∧ dω = 0, and ω annihilates the involutive closure of the "
                      f"constraint distribution (checked at {info.samples} random points), so the constraint is "
                      f"d h(q) = 0 up to a factor{h}")
        elif info.integrable[k]:
            reason = ("integrable together with the other constraints (holonomic in disguise): ω annihilates the "
                      "involutive closure of their common distribution, though alone it would be nonholonomic "
                      f"(ω ∧ dω ≠ 0, |dω| on ker ω up to {info.alone_worst[k]:.3g}){h}")
        else:
            reason = (f"nonholonomic: the constraint distribution (dimension {dim_D} of {n}) is not involutive and its "
                      f"closure under Lie brackets (dimension {dim_closure}) leaves the constraint: "
                      + _witness_text(info.witness[k], q))
            partners = [c for c in info.combinations if k in c.rows]
            for c in partners:
                others = [label(j) for j in c.rows if j != k]
                reason += (f"; only a combination with {_and(others)} integrates: {combination_text(c, q)} = 0"
                           + (f" integrates to {integral_text(c, q)} = const" if c.integral is not None else
                              " is integrable (Frobenius), though no closed form of its integral was found"))
        out.append((bool(info.integrable[k]), reason))
    return out


def _witness_text(witness, q) -> str:
    if witness is None:
        return "at a random point"
    point, X, val, cols = witness
    at = ", ".join(f"{s.name} = {v:.3g}" for s, v in point.items())
    names = ", ".join(f"{q[j].name}: {x:.3g}" for j, x in zip(cols, X) if abs(x) > 1e-12)
    return (f"a Lie bracket of allowed velocities violates it (at {at}, the closure's direction {names} "
            f"gives ω = {val:.3g} ≠ 0)")


def _and(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _rate(s: sp.Symbol) -> sp.Expr:
    from .. import symbols as S

    return sp.Integer(1) if s == S.TIME else S.der(s)


def combination_text(c: Combination, q: list) -> str:
    """The combination as a velocity expression: ``der(th) - r*(der(phR) - der(phL))/(2*b)`` (it equals zero)."""
    (j0, lead), rest = c.form[0], c.form[1:]
    return _head_and_rest(lead * _rate(q[j0]), sum((v * _rate(q[j]) for j, v in rest), sp.Integer(0)))


def integral_text(c: Combination, q: list) -> str:
    """h of ``h = const``, led by the coordinate whose coefficient was normalised to 1: ``th - r*(phR - phL)/(2*b)``."""
    from ..printing import to_text

    h = c.integral
    head = q[c.form[0][0]]
    rest = sp.expand(h - head)
    if h.has(head) and not rest.has(head):
        return _head_and_rest(head, rest)
    return to_text(h)


def _head_and_rest(head: sp.Expr, rest: sp.Expr) -> str:
    """``head - k*(a - b)/d`` with the common factor k/d of ``rest`` taken out and positive terms written first."""
    from ..printing import to_text

    if rest == 0:
        return to_text(head)
    x = sp.factor_terms(-rest)  # head − x
    coeff, inner = _split(x)
    if isinstance(inner, sp.Add) and sum(t.could_extract_minus_sign() for t in inner.args) * 2 > len(inner.args):
        coeff, inner = -coeff, -inner
    elif not isinstance(inner, sp.Add) and inner.could_extract_minus_sign():
        coeff, inner = -coeff, -inner
    op = "-"
    if coeff.could_extract_minus_sign():
        op, coeff = "+", -coeff
    body = _sum_text(inner) if isinstance(inner, sp.Add) else to_text(inner)
    num, den = sp.fraction(sp.together(coeff))
    if isinstance(inner, sp.Add):
        body = f"({body})"
    if num != 1:
        body = f"{to_text(num)}*{body}"
    if den != 1:
        body = f"{body}/{to_text(den) if den.is_Symbol or den.is_Integer else '(' + to_text(den) + ')'}"
    return f"{to_text(head)} {op} {body}"


def _split(x: sp.Expr) -> tuple[sp.Expr, sp.Expr]:
    """x = coeff·inner with inner the one Add factor of a product (or x itself), coeff the rest."""
    if isinstance(x, sp.Mul):
        adds = [a for a in x.args if isinstance(a, sp.Add)]
        if len(adds) == 1:
            return sp.Mul(*[a for a in x.args if a is not adds[0]]), adds[0]
        if not adds:
            rates = [a for a in x.args if a.free_symbols and any(s.name.startswith("der(") for s in a.free_symbols)]
            if len(rates) == 1:
                return sp.Mul(*[a for a in x.args if a is not rates[0]]), rates[0]
    return sp.Integer(1), x


def _sum_text(e: sp.Add) -> str:
    """A sum with its positive terms first: ``der(phR) - der(phL)``."""
    from ..printing import to_text

    terms = sorted(sp.Add.make_args(e), key=lambda t: t.could_extract_minus_sign())
    out = ""
    for i, t in enumerate(terms):
        neg = t.could_extract_minus_sign()
        text = to_text(-t if neg else t)
        out += (("-" if neg else "") + text) if i == 0 else (f" - {text}" if neg else f" + {text}")
    return out


def coefficients_text(c: Combination, label: Callable[[int], str]) -> str:
    """``((line 8) - (line 7))/(2*b)``: how the combination is made of the constraints (each as lhs − rhs)."""
    from ..printing import to_text

    terms = sorted(c.coefficients, key=lambda kc: kc[1].could_extract_minus_sign())  # positive terms first
    mags = {(-ck if ck.could_extract_minus_sign() else ck) for _, ck in terms}
    if len(mags) == 1:  # one common factor: (line 8 − line 7)/(2*b)
        (mag,) = mags
        inner = _signed([(ck.could_extract_minus_sign(), f"({label(k)})") for k, ck in terms])
        if mag == 1:
            return inner
        inv = sp.simplify(1 / mag)
        if not isinstance(inv, sp.Pow) and not (isinstance(inv, sp.Mul) and any(
                isinstance(a, sp.Pow) and a.exp.is_negative for a in inv.args)):
            den = to_text(inv)
            return f"({inner})/{den if inv.is_Symbol or inv.is_Integer else '(' + den + ')'}"
        return f"{to_text(mag)}*({inner})"
    parts = []
    for k, ck in terms:
        negative = ck.could_extract_minus_sign()
        mag = -ck if negative else ck
        parts.append((negative, f"({label(k)})" if mag == 1 else f"{to_text(mag)}*({label(k)})"))
    return _signed(parts)


def _signed(parts: list[tuple[bool, str]]) -> str:
    text = ""
    for i, (negative, term) in enumerate(parts):
        if i == 0:
            text = f"-{term}" if negative else term
        else:
            text += f" - {term}" if negative else f" + {term}"
    return text


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


def _model_analysis(model, **kwargs):
    """(constraints, coords, known rows, nets per row, Integrability of the known rows or None)."""
    rows, coords, cons = velocity_rows(model)
    nets = [_networks_in(row) for row in rows]
    known = [k for k, names in enumerate(nets) if not names]
    info = analyze_velocity_constraints([rows[k] for k in known], coords, **kwargs) if known else None
    return cons, coords, known, nets, info


def _line(c) -> str:
    return f"line {c.span.line}"


def classify_model_constraints(model, **kwargs) -> list[tuple[object, bool, str]]:
    """``(constraint, is_integrable, reason)`` for each velocity constraint of a resolved model.

    A constraint whose coefficients call a neural component is not tested: whether it is integrable depends on
    weights that a fit has not chosen yet (the reason says so; ``is_integrable`` is False). The others are
    tested together."""
    cons, coords, known, nets, info = _model_analysis(model, **kwargs)
    if not cons:
        return []
    verdicts = dict(zip(known, _reasons(info, coords, lambda i: _line(cons[known[i]])))) if known else {}
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


def velocity_notes(model) -> list:
    """The notes `pdsl check` prints on a model's velocity constraints: ``note[HolonomicInDisguise]`` on a constraint
    that integrates (with its integral when one is found), ``note[IntegrableCombination]`` on a combination of
    several constraints that integrates although none of them does (located at the first of them)."""
    from ..diagnostics import Diagnostic

    if not any(c.kind == "velocity" for c in model.constraints):
        return []
    cons, coords, known, nets, info = _model_analysis(model)
    if info is None:
        return []
    label = lambda i: _line(cons[known[i]])  # noqa: E731
    notes = []
    for i, (ok, why) in enumerate(_reasons(info, coords, label)):
        if ok:
            notes.append(Diagnostic(
                "HolonomicInDisguise", f"velocity constraint {why}", cons[known[i]].span,
                hint="it is the time derivative of a holonomic constraint; writing that constraint instead "
                     "removes a degree of freedom and the drift of the integrated quantity",
                severity="note"))
    for c in info.combinations:
        members = [cons[known[i]] for i in c.rows]
        lines = "lines " + _and([str(x.span.line) for x in members])
        first = min(members, key=lambda x: (x.span.line, x.span.col))
        what = (f"{combination_text(c, coords)} = 0 integrates to {integral_text(c, coords)} = const"
                if c.integral is not None else
                f"{combination_text(c, coords)} = 0 is integrable (Frobenius), though no closed form of its integral "
                "was found")
        notes.append(Diagnostic(
            "IntegrableCombination",
            f"none of the velocity constraints at {lines} is integrable, but their combination "
            f"{coefficients_text(c, label)} is: {what}",
            first.span,
            hint="keep the constraints: each is a real (nonholonomic) constraint. The combination is a conserved "
                 "holonomic relation; it may replace one (not more) of the constraints at " + lines
                 + " as a holonomic constraint with its start value",
            severity="note"))
    return sorted(notes, key=lambda d: d.sort_key())
