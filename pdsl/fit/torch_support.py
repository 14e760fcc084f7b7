"""What the torch backend can fit: a torch-free check, read by the backend choice (:mod:`pdsl.fit.backends`)
and by the torch loss itself (:mod:`pdsl.fit.torch_loss`), which refuses what it cannot integrate."""

from __future__ import annotations

from ..backend.functions import NumericSystem
from ..vocab import TORCH_INTEGRATORS
from .loss import LossSpec

__all__ = ["torch_unsupported"]


def torch_unsupported(num: NumericSystem, spec: LossSpec) -> str | None:
    """Why the torch backend cannot run this fit (None when it can)."""
    if spec.method not in TORCH_INTEGRATORS:
        return f"the torch backend integrates with {' or '.join(TORCH_INTEGRATORS)}, not {spec.method}"
    if spec.project:
        return "the torch backend does not project chunk starts onto the constraints (--project)"
    if getattr(spec, "variable_step", False):
        return "the torch backend integrates uniformly sampled data (these samples are irregular)"
    if num.system.algebraics:
        return f"{num.system.name} is a DAE"
    if num.rhs is None:
        return f"{num.system.name} has no explicit right-hand side"
    return None
