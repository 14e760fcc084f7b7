"""Plots of simulated trajectories (matplotlib, written atomically)."""

from __future__ import annotations

import numpy as np

from ..data.csvio import atomic_path

_MAX_PANELS = 8


def plot_states(result, path, *, title: str = "") -> None:
    """Every state against time: one panel per state, or shared panels for large models."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(result.x_names) + list(result.z_names)
    data = np.column_stack([result.x, result.z]) if result.z.size else result.x
    n = len(names)
    if n <= _MAX_PANELS:
        fig, axes = plt.subplots(n, 1, sharex=True, figsize=(8, 1.6 + 1.5 * n), squeeze=False)
        for k, ax in enumerate(axes[:, 0]):
            ax.plot(result.t, data[:, k], lw=1.2)
            ax.set_ylabel(names[k], rotation=0, ha="right", va="center")
            ax.grid(alpha=0.3)
    else:
        half = result.x.shape[1] // 2 if not result.z.size else n
        groups = [(names[:half], data[:, :half]), (names[half:], data[:, half:])] if half < n else [(names, data)]
        fig, axes = plt.subplots(len(groups), 1, sharex=True, figsize=(8, 3.5 * len(groups)), squeeze=False)
        for ax, (gnames, gdata) in zip(axes[:, 0], groups):
            ax.plot(result.t, gdata, lw=0.8)
            ax.set_ylabel(f"{gnames[0]} … {gnames[-1]}\n({len(gnames)} states)")
            ax.grid(alpha=0.3)
    axes[-1, 0].set_xlabel("t")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110)
    plt.close(fig)
