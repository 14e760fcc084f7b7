"""What the data determine: standard errors, near-null directions and correlations, in words.

After a least-squares fit the Gauss–Newton information matrix H = JᵀJ (with chunk starts profiled
out when they are estimated, :mod:`pdsl.fit.latent`) and the residual variance s² = |r|²/dof give
the covariance s²H⁻¹ of the free parameters. The analysis works in *relative* coordinates
(d log|p| for every parameter), where a direction v changes the parameters by the factors
exp(ε v_i): a near-null direction of H (a relative standard deviation along it above 50 %, or an
eigenvalue ratio below 1e-9) is a combination the data cannot determine. With exactly two
parameters in it, v ∝ (a, b), the quantity p1^b / p2^a is unchanged along v and is what the data
determine — for a double pendulum under gravity, v ∝ (1, 1): "only m1/m2 is determined". Pairs of
parameters whose correlation exceeds 0.99 in magnitude are named too.

:func:`residual_growth` is the consistency check of a fit whose chunks start from data samples: the
mean squared residual should not grow along a chunk when the residuals are measurement noise;
when it does, noisy chunk starts (or model error) dominate and the estimate is biased.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

__all__ = ["Identifiability", "analyse", "residual_growth"]

_UNDETERMINED_REL_SD = 0.5  # relative standard deviation along a direction above which it is undetermined
_UNDETERMINED_EIG = 1e-9  # eigenvalue ratio below which a direction is undetermined whatever the noise
_CORRELATED = 0.99


@dataclass
class Identifiability:
    """The result of :func:`analyse`: standard errors, correlations and sentences."""

    names: list[str]
    values: np.ndarray
    stderr: np.ndarray | None
    correlation: np.ndarray | None
    undetermined: list[dict] = field(default_factory=list)  # {"direction": {name: v_i}, "determined": text, "value": x, "rel_se": y}
    correlated: list[tuple[str, str, float]] = field(default_factory=list)
    sentences: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        def f(v):
            return None if v is None or not np.isfinite(v) else float(v)

        return {
            "undetermined": [{"direction": {k: f(v) for k, v in u["direction"].items()}, "determined": u.get("determined"),
                              "value": f(u.get("value")), "rel_se": f(u.get("rel_se"))} for u in self.undetermined],
            "correlated": [{"a": a, "b": b, "rho": f(r)} for a, b, r in self.correlated],
            "sentences": list(self.sentences),
        }


def _simple(x: float) -> Fraction | None:
    """x as a small fraction (denominator ≤ 4) when it is one within 5 %, else None."""
    fr = Fraction(x).limit_denominator(4)
    return fr if fr != 0 and abs(float(fr) - x) <= 0.05 * abs(x) else None


def _power(name: str, e: Fraction) -> str:
    if e == 1:
        return name
    return f"{name}^{e.numerator}" if e.denominator == 1 else f"{name}^({e})"


def _combination(names: list[str], w: np.ndarray) -> str | None:
    """Π p_i^{w_i} written as a ratio/product of simple powers (None when the exponents are not simple)."""
    big = np.abs(w) > 0.05 * np.max(np.abs(w))
    k = int(np.argmax(big))  # the first parameter involved goes into the numerator
    w = w / w[k]
    num, den = [], []
    for name, e in zip(names, w):
        if abs(e) < 0.05:
            continue
        fr = _simple(abs(float(e)))
        if fr is None:
            return None
        (num if e > 0 else den).append(_power(name, fr))
    if not num:
        return None
    text = "·".join(num)
    return text + ("/" + ("·".join(den) if len(den) == 1 else "(" + "·".join(den) + ")") if den else "")


def analyse(names, values, H, cost: float, dof: int, dlog_dtheta=None, *, by: str = "these data") -> Identifiability:
    """Identifiability of the free parameters ``names`` at ``values`` from the information matrix ``H``
    of the fit coordinates θ (``dlog_dtheta[i]`` = d log|p_i|/dθ_i; default 1/p_i, i.e. θ = p). ``by`` names
    what does not determine a parameter: "these data" when the fit used all of them (whole trajectories), else
    the fit itself ("this fit (windows of 4 steps, each with its own start)"), which may be the cause.
    A parameter in an undetermined direction has no standard error (NaN: "not determined", never ± 0)."""
    names = list(names)
    values = np.asarray(values, dtype=float)
    n = len(names)
    out = Identifiability(names, values, None, None)
    if n == 0 or H is None:
        return out
    H = np.asarray(H, dtype=float)
    if dlog_dtheta is None:
        dlog_dtheta = np.array([1.0 / v if v != 0 else 1.0 for v in values])
    T = np.asarray(dlog_dtheta, dtype=float)  # d log p = T dθ  ->  H_rel = T⁻¹ H T⁻¹
    Tinv = np.where(T != 0, 1.0 / np.where(T != 0, T, 1.0), 1.0)
    Hr = H * Tinv[:, None] * Tinv[None, :]
    s2 = cost / dof if dof > 0 else np.nan
    lam, V = np.linalg.eigh(0.5 * (Hr + Hr.T))
    top = max(float(lam[-1]), 1e-300)
    cov_rel = np.zeros((n, n))
    for j in range(n):
        if lam[j] > 1e-300:
            cov_rel += np.outer(V[:, j], V[:, j]) / lam[j]
    if np.isfinite(s2):
        cov_rel *= s2
    bad = []
    for j in range(n):
        rel_sd = np.sqrt(s2 / lam[j]) if lam[j] > 0 and np.isfinite(s2) else np.inf
        if lam[j] / top < _UNDETERMINED_EIG or rel_sd > _UNDETERMINED_REL_SD:
            bad.append(j)
    # standard errors in the parameters' own units (s² H⁻¹ where it exists)
    try:
        with np.errstate(all="ignore"):
            cov = np.linalg.inv(H) * s2
            D = values * T  # dp = p·T dθ
            cov_p = cov * D[:, None] * D[None, :]
            var = np.diag(cov_p)
            out.stderr = np.where(var > 0, np.sqrt(np.abs(var)), np.nan)  # a negative variance: H is singular
            d = np.sqrt(np.maximum(np.diag(cov_p), 1e-300))
            out.correlation = cov_p / np.outer(d, d)
    except np.linalg.LinAlgError:
        pass
    if out.stderr is not None and bad:  # no error bar for a parameter in an undetermined direction
        involved_any = {i for j in bad for i in range(n) if abs(V[i, j]) > 0.1 * np.max(np.abs(V[:, j]))}
        out.stderr = np.array([np.nan if i in involved_any else se for i, se in enumerate(out.stderr)])
    for j in bad:
        v = V[:, j]
        direction = {nm: float(x) for nm, x in zip(names, v)}
        involved = [i for i in range(n) if abs(v[i]) > 0.1 * np.max(np.abs(v))]
        entry: dict = {"direction": direction}
        if len(involved) == 1:
            i = involved[0]
            entry["determined"] = None
            out.sentences.append(f"{names[i]} is not determined by {by} (its value only follows the start guess)")
        else:
            sub = [names[i] for i in involved]
            # the combination orthogonal to v inside the involved pair(s), determined when the rest are
            if len(involved) == 2:
                a, b = v[involved[0]], v[involved[1]]
                w = np.zeros(n)
                w[involved[0]], w[involved[1]] = b, -a
                text = _combination(names, w)
                wn = w / w[involved[0]]
                value = float(np.exp(np.sum(wn[involved] * np.log(np.abs(values[involved])))))
                rel_se = float(np.sqrt(max(wn @ cov_rel @ wn, 0.0)))
                entry.update(determined=text, value=value, rel_se=rel_se)
                if text:
                    rest = [nm for nm in names if nm not in sub]
                    also = f" (and {', '.join(rest)})" if rest and len(bad) == 1 else ""
                    out.sentences.append(
                        f"only {text} is determined by {by}{also}: {sub[0]} and {sub[1]} separately are not "
                        f"({text} = {value:.6g} ± {100 * rel_se:.2g} %)")
                else:
                    out.sentences.append(f"{sub[0]} and {sub[1]} are not determined separately: changing them along "
                                         f"d log p = ({v[involved[0]]:.3g}, {v[involved[1]]:.3g}) leaves the fit unchanged")
            else:
                combos = determined_combinations(names, values, V[:, bad], involved, cov_rel)
                if combos and all(text for text, _, _ in combos):
                    listed = " and ".join(text for text, _, _ in combos)
                    numbers = ", ".join(f"{text} = {value:.6g} ± {100 * rel:.2g} %" for text, value, rel in combos)
                    entry.update(determined=listed)
                    sentence = (f"only {listed} {'is' if len(combos) == 1 else 'are'} determined by {by}: "
                                f"{', '.join(sub[:-1])} and {sub[-1]} separately are not ({numbers})")
                else:
                    dirn = ", ".join(f"{names[i]}: {v[i]:+.2f}" for i in involved)
                    sentence = (f"{', '.join(sub)} are not determined separately by {by}: the relative change ({dirn}) "
                                "leaves the fit (nearly) unchanged")
                if sentence not in out.sentences:  # one sentence for several directions among the same parameters
                    out.sentences.append(sentence)
        out.undetermined.append(entry)
    if out.correlation is not None:
        flagged = {i for u in out.undetermined for i, nm in enumerate(names) if abs(u["direction"][nm]) > 0.1}
        for i in range(n):
            for j in range(i + 1, n):
                rho = float(out.correlation[i, j])
                if abs(rho) > _CORRELATED and not (i in flagged and j in flagged):
                    out.correlated.append((names[i], names[j], rho))
                    out.sentences.append(f"{names[i]} and {names[j]} are strongly correlated (ρ = {rho:+.3f}): "
                                         "the data determine a combination of them better than either")
    return out


def determined_combinations(names, values, Vbad: np.ndarray, involved: list[int], cov_rel: np.ndarray):
    """The products of powers of the ``involved`` parameters that the undetermined directions ``Vbad`` (columns,
    in d log p) leave unchanged — a basis of their orthogonal complement in reduced row-echelon form, so that each
    combination has its own leading parameter — as (text such as "K/J", value, relative standard error); the text
    is None when the exponents are not simple fractions."""
    idx = [i for i in involved]
    B = Vbad[idx, :]  # (m, k)
    u, sv, _ = np.linalg.svd(B, full_matrices=True)
    rank = int(np.sum(sv > 1e-8 * max(float(sv[0]) if sv.size else 1.0, 1e-300)))
    C = u[:, rank:].T  # rows: the complement, w·v = 0 for every undetermined v
    if C.shape[0] == 0:
        return []
    R = C.copy()  # reduced row-echelon form, by Gauss–Jordan with partial pivoting
    row = 0
    for col in range(R.shape[1]):
        if row >= R.shape[0]:
            break
        piv = row + int(np.argmax(np.abs(R[row:, col])))
        if abs(R[piv, col]) < 1e-9:
            continue
        R[[row, piv]] = R[[piv, row]]
        R[row] /= R[row, col]
        for r2 in range(R.shape[0]):
            if r2 != row:
                R[r2] -= R[r2, col] * R[row]
        row += 1
    out = []
    logs = np.log(np.abs(np.asarray(values, dtype=float)[idx]))
    for w_sub in R[:row]:
        w = np.zeros(len(names))
        w[idx] = w_sub
        text = _combination(list(names), w)
        value = float(np.exp(w_sub @ logs))
        rel = float(np.sqrt(max(w @ cov_rel @ w, 0.0)))
        out.append((text, value, rel))
    return out


def residual_growth(r: np.ndarray, chunks: int, steps: int, n_obs: int) -> float | None:
    """Mean squared residual at the last chunk step over that at the first (chunks from data samples)."""
    if chunks == 0 or steps < 2 or r.size != chunks * steps * n_obs:
        return None
    ms = np.mean(r.reshape(chunks, n_obs, steps) ** 2, axis=(0, 1))  # ChunkLoss.residuals: column after column
    if ms[0] <= 0:
        return None
    return float(ms[-1] / ms[0])
