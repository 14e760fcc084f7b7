"""Checkpoints: one ``.npz`` file per fit, replaced atomically after every epoch.

It holds θ, the optimiser's arrays (AdamW moments; none for Gauss–Newton) and a JSON header
(epoch, history, damping, the fingerprint of the setup). A killed run leaves either the previous
or the new checkpoint — never a torn one (:func:`pdsl.data.csvio.atomic_path`).
"""

from __future__ import annotations

import json
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..data.csvio import atomic_path
from ..diagnostics import PdslError

__all__ = ["State", "save_checkpoint", "load_checkpoint", "remove_stale_temporaries", "writing"]

NAME = "checkpoint.npz"


@dataclass
class State:
    """Everything a fit needs to continue: θ, optimiser arrays, and a JSON-able header."""

    theta: np.ndarray
    epoch: int = 0  # epochs completed
    history: dict = field(default_factory=lambda: {"train": [], "val": [], "lr": [], "seconds": []})
    arrays: dict = field(default_factory=dict)  # optimiser state
    extra: dict = field(default_factory=dict)  # damping, convergence flag, ...


@contextmanager
def writing(path: str | Path):
    """Turn an ``OSError`` (disk full, no permission, ...) while writing ``path`` into ``CannotWrite``."""
    try:
        yield
    except OSError as exc:
        raise PdslError.at("CannotWrite", f"cannot write {path}: {exc.strerror or exc}",
                           hint="check the free disk space and the permissions of the output directory") from None


def save_checkpoint(path: str | Path, state: State, fingerprint: dict) -> None:
    header = {"epoch": state.epoch, "history": state.history, "extra": state.extra, "fingerprint": fingerprint}
    payload = {"theta": state.theta, "header": np.array(json.dumps(header))}
    payload.update({f"opt/{k}": v for k, v in state.arrays.items()})
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as fh:
            np.savez(fh, **payload)


def load_checkpoint(path: str | Path) -> tuple[State, dict]:
    try:
        with np.load(path, allow_pickle=False) as z:
            header = json.loads(str(z["header"]))
            arrays = {k[4:]: z[k] for k in z.files if k.startswith("opt/")}
            theta = z["theta"]
    except FileNotFoundError:
        raise PdslError.at("NoCheckpoint", f"no checkpoint to resume from: {path}", hint="run without --resume first") from None
    except (OSError, ValueError, KeyError) as exc:
        raise PdslError.at("BadCheckpoint", f"cannot read checkpoint {path}: {exc}") from None
    state = State(theta=theta, epoch=header["epoch"], history=header["history"], arrays=arrays, extra=header["extra"])
    return state, header["fingerprint"]


def remove_stale_temporaries(directory: str | Path, names) -> None:
    """Temporaries a killed run left behind for ``names`` (``.NAME.xxxx`` next to NAME; see ``atomic_path``)."""
    d = Path(directory)
    if d.is_dir():
        for tmp in d.glob(".*.*"):
            if tmp.is_file() and any(tmp.name.startswith(f".{n}.") for n in names):
                tmp.unlink(missing_ok=True)
