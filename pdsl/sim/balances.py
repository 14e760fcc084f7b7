"""Relations d/dt Q = R that a formalism says every solution satisfies (SymbolicSystem.balances), checked along a
computed trajectory with the exact flow: the residual at each sample is ∂Q/∂x·ẋ + ∂Q/∂t − R."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["BalanceCheck", "check_balances"]


@dataclass(frozen=True)
class BalanceCheck:
    name: str
    label: str
    max_residual: float  # max over the samples of |d/dt Q − R|


def check_balances(num, t, X, p, U=None) -> tuple[BalanceCheck, ...]:
    if num.balances is None or not len(t):
        return ()
    n, nu = len(t), len(num.u_names)
    U = np.asarray(U, dtype=float).T if U is not None and nu else np.zeros((nu, n))
    res = np.asarray(num.balances.map(n)(np.asarray(t)[None, :], np.asarray(X).T, p, U)).T  # one call for the grid
    return tuple(BalanceCheck(name=b.name, label=b.label, max_residual=float(np.max(np.abs(res[:, i]))))
                 for i, b in enumerate(num.system.balances))
