"""Profile-likelihood intervals (``pdsl fit --profile NAME,…``), as Data2Dynamics and pyPESTO compute them.

The linear error bar s·√(H⁻¹)ᵢᵢ assumes the cost is quadratic near the optimum. A profile does not: parameter
p_i is held at values stepped away from its estimate, every other parameter and every trajectory's start state is
refitted (Levenberg–Marquardt warm-started from the neighbouring point, :func:`pdsl.fit.latent.latent_gauss_newton`
with θ_i held), and the interval is where the refitted cost rises by less than the threshold

    Δχ²(p_i) = (χ²(p_i) − χ²_min) / s² ≤ 1      (68 %; s² = 1 when the noise is stated, else χ²_min/dof)

found by linear interpolation between grid points. Steps are one linear standard error (a tenth of |p_i| when
there is none), at most :data:`MAX_STEPS` on each side; a side that never reaches the threshold — or meets a
declared bound first — is open ("the data bound it only from below"). Works on the fit with estimated starts
(the default for physical parameters) and its final windows.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..diagnostics import PdslError

__all__ = ["profile_intervals", "check_profile_names", "MAX_STEPS", "THRESHOLD"]

MAX_STEPS = 8
THRESHOLD = 1.0  # Δχ² of a 68 % interval for one parameter
_EPOCHS = 30


def check_profile_names(names, free: tuple[str, ...], where=None) -> tuple[str, ...]:
    """--profile names must be free parameters of the fit (located error otherwise)."""
    import difflib

    for name in names:
        if name not in free:
            close = difflib.get_close_matches(name, list(free), n=1)
            raise PdslError.at("BadOption", f"--profile {name}: `{name}` is not a free parameter of this fit",
                               where, (f"did you mean `{close[0]}`? " if close else "")
                               + "free parameters: " + (", ".join(free) or "none"))
    return tuple(names)


def profile_intervals(run, result, loss, chunks, names, robust=None, log=print) -> dict:
    """{name: {"lower", "upper", "estimate", "linear": [lo, hi], "points": [[p, Δχ²], …], "open": [...]}}."""
    from ..fit.train import TrainOptions
    from .latent import latent_gauss_newton

    lay = run.layout
    theta_hat = np.asarray(result.state.theta, dtype=float)
    S_hat = result.state.arrays.get("starts")
    extra = result.state.extra
    chi2_min, dof = float(extra["residual_cost"]), int(extra["residual_dof"])
    known = bool(run.cfg.noise) and all(n in run.cfg.noise for n in run.data.observed)
    s2 = 1.0 if known else chi2_min / max(dof, 1)
    p_hat = lay.p_from_theta(theta_hat)
    out = {}
    for name in names:
        k = lay.free_names.index(name)
        i = lay.free_index[k]
        tr = lay.transforms[k]
        value = float(p_hat[i])
        se = run._stderr.get(name)
        step = float(se) if se is not None and np.isfinite(se) and se > 0 else 0.1 * max(abs(value), 1e-12)
        points = [(value, 0.0)]
        bounds, open_sides = {}, []
        for side in (-1, +1):
            theta, S = theta_hat.copy(), None if S_hat is None else np.array(S_hat)
            prev = (value, 0.0)
            found = None
            for m in range(1, MAX_STEPS + 1):
                p_new = value + side * m * step
                limit = tr.lower if side < 0 else tr.upper
                if limit is not None and (p_new - limit) * side >= 0:
                    break  # a declared bound comes first
                theta = theta.copy()
                theta[k] = tr.inverse(p_new)
                from .checkpoint import State

                state = State(theta=theta, arrays={} if S is None else {"starts": S})
                opts = TrainOptions(epochs=_EPOCHS, progress=False, tol=run.cfg.tol)
                try:
                    res = latent_gauss_newton(loss, run.train, chunks, chunks.take(slice(0, 0)), state, opts,
                                              robust=robust, fixed=[k])
                except PdslError:
                    break  # the rollout fails this far out: the side stays open
                theta, S = np.asarray(res.state.theta, dtype=float), res.state.arrays.get("starts")
                delta = (float(res.state.extra["residual_cost"]) - chi2_min) / s2
                points.append((p_new, delta))
                if delta >= THRESHOLD:
                    (p0, d0), (p1, d1) = prev, (p_new, delta)
                    found = p0 + (THRESHOLD - d0) * (p1 - p0) / (d1 - d0) if d1 != d0 else p1
                    break
                prev = (p_new, delta)
            if found is None:
                open_sides.append("lower" if side < 0 else "upper")
            bounds["lower" if side < 0 else "upper"] = found
        points.sort()
        out[name] = {"estimate": value, "lower": bounds["lower"], "upper": bounds["upper"],
                     "linear": [value - step, value + step] if se is not None else None,
                     "points": [[float(p), float(d)] for p, d in points], "open": open_sides,
                     "threshold": THRESHOLD}
        log(f"  profile {name}: {len(points) - 1} refits")
    return out


def describe(name: str, prof: dict) -> str:
    """One line: the profile interval next to the linear one."""
    lo, hi = prof["lower"], prof["upper"]
    span = (f"[{'open' if lo is None else f'{lo:.6g}'}, {'open' if hi is None else f'{hi:.6g}'}]")
    lin = prof["linear"]
    text = f"{name} ∈ {span} (profile likelihood, 68 %)"
    if lin is not None:
        text += f"; linear ± gives [{lin[0]:.6g}, {lin[1]:.6g}]"
    if prof["open"]:
        text += f"; open on the {' and '.join(prof['open'])} side: the data do not bound it there within {MAX_STEPS} steps"
    elif lin is not None and lo is not None and hi is not None:
        est, se = prof["estimate"], (lin[1] - lin[0]) / 2
        if se > 0 and max(abs((est - lo) / se - 1), abs((hi - est) / se - 1)) > 0.2:
            text += "; not symmetric: the linear error bar misstates it"
    return text
