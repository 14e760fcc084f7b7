"""Compare a model's outputs with a reference model's along measured states (``pdsl evaluate --data D --reference M``).

Both models read the same data: each one's state vector is rebuilt from the data's shown columns
(:func:`pdsl.fit.data.state_from_shown`), and every output the two models share by name is evaluated at every
sample — e.g. the entries ``a[1]``, ``a[2]`` of a learned velocity constraint against the known connection of a
reference model (issue 14, BENCHMARKS D4). No rollout: the comparison is along the data, as the paper's Fig. 1.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..diagnostics import PdslError

__all__ = ["OutputComparison", "outputs_along", "compare_outputs"]


@dataclass(frozen=True)
class OutputComparison:
    name: str
    rmse: float  # over every sample of every trajectory
    max_abs: float
    ref_range: float  # max − min of the reference output along the data (a scale for the RMSE)

    def to_dict(self) -> dict:
        return {"rmse": self.rmse, "max_abs": self.max_abs, "reference_range": self.ref_range}


def outputs_along(num, traj, p=None, shown=None) -> np.ndarray:
    """(n_samples, n_outputs): the outputs of ``num`` at the data's states (inputs from the data's input columns)."""
    from .loss import state_from_shown

    p = num.p_default if p is None else p
    n = len(traj.t)
    S = traj.S if shown is None else shown
    from ..quiet import capture

    with capture():  # a rootfinder when the shown coordinates are not the states: its failures print
        X = np.asarray(state_from_shown(num).map(n)(traj.t[None, :], S.T, p))
    U = traj.U.T if traj.U.size else np.zeros((len(num.u_names), n))
    Z = np.zeros((len(num.z_names), n))
    return np.asarray(num.outputs.map(n)(traj.t[None, :], X, Z, p, U)).T


def compare_outputs(num, ref, data, ref_data) -> tuple[OutputComparison, ...]:
    """Every output that ``num`` and ``ref`` share by name, compared along the same trajectories (``data`` and
    ``ref_data``: the same CSV read for each model)."""
    common = [n for n in num.y_names if n in ref.y_names]
    if not common:
        raise PdslError.at("BadOption", f"{num.system.name} and {ref.system.name} share no output name",
                           hint=f"the model's outputs: {', '.join(num.y_names) or 'none'}; the reference's: "
                                f"{', '.join(ref.y_names) or 'none'}")
    mine, theirs = [], []
    for tr, tr_ref in zip(data.trajectories, ref_data.trajectories):
        mine.append(outputs_along(num, tr)[:, [num.y_names.index(n) for n in common]])
        theirs.append(outputs_along(ref, tr_ref)[:, [ref.y_names.index(n) for n in common]])
    A, B = np.concatenate(mine), np.concatenate(theirs)
    err = A - B
    return tuple(OutputComparison(name=n, rmse=float(np.sqrt(np.mean(err[:, k] ** 2))), max_abs=float(np.max(np.abs(err[:, k]))),
                                  ref_range=float(np.ptp(B[:, k]))) for k, n in enumerate(common))
