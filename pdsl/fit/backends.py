"""Which backend evaluates a fit's chunk losses: a torch-free choice.

Kept apart from :mod:`pdsl.fit.torch_loss` so that ``import pdsl.fit`` (Gauss–Newton, IPOPT,
``compile --params``) never imports torch; the torch loss is imported only when chosen.
"""

from __future__ import annotations

from ..backend.functions import NumericSystem
from ..diagnostics import PdslError
from ..vocab import FIT_BACKENDS
from ..vocab import TORCH_INTEGRATORS as _TORCH_INTEGRATORS
from .loss import LossSpec
from .params import ParamLayout
from .torch_support import torch_unsupported

__all__ = ["TORCH_INTEGRATORS", "BACKENDS", "torch_unsupported", "choose_backend", "make_loss"]

TORCH_INTEGRATORS = _TORCH_INTEGRATORS  # pdsl.vocab: the integrators with torch=True
BACKENDS = FIT_BACKENDS


def _has_events(num: NumericSystem) -> bool:
    return getattr(num, "hybrid", None) is not None and bool(num.hybrid.conditions)


def choose_backend(cfg, num: NumericSystem, layout: ParamLayout, spec: LossSpec) -> str:
    """``cfg.backend``, with ``auto`` resolved: torch for models with networks trained by AdamW
    (matrix–matrix products over the batch), CasADi otherwise (Gauss–Newton's Jacobians, implicit
    projections, regularisers, DAE models, and models with events: both backends locate them in their steps, but
    ``auto`` keeps the CasADi fit, whose Gauss–Newton gives standard errors). ``--dtype float32`` and ``--device cuda`` need torch."""
    want = getattr(cfg, "backend", "auto") or "auto"
    if want not in BACKENDS:
        raise PdslError.at("BadOption", f"--backend {want}: unknown", hint="one of: " + ", ".join(BACKENDS))
    why = torch_unsupported(num, spec)
    if spec.dtype != "float64" or spec.device != "cpu" or spec.dropout:
        if want == "casadi":
            what = (f"--dtype {spec.dtype} --device {spec.device}" if not spec.dropout else f"--dropout {spec.dropout:g}"
                    if isinstance(spec.dropout, float) else "mlp(dropout = …)")
            raise PdslError.at("BadOption", f"{what}: the CasADi backend runs in float64 on the CPU, without dropout",
                               hint="use --backend torch (or auto)")
        want = "torch"
    if cfg.equilibrium or cfg.sparsity or cfg.constraints or cfg.momentum:
        why = why or "regularisers (equilibrium, sparsity, constraints, momentum) are evaluated by the CasADi backend"
    if cfg.method != "adamw":
        why = why or f"{cfg.method} uses CasADi Jacobians"
    if want == "torch":
        if why:
            raise PdslError.at("BadOption", f"--backend torch: {why}", hint="use --backend casadi (or auto)")
        return "torch"
    if want == "casadi" or why or not layout.networks or _has_events(num):
        return "casadi"
    return "torch"


def make_loss(num: NumericSystem, layout: ParamLayout, spec: LossSpec, observed: tuple[str, ...], cfg):
    """The chunk loss of a fit on the backend :func:`choose_backend` picks."""
    from .loss import ChunkLoss

    if choose_backend(cfg, num, layout, spec) == "torch":
        if spec.switches == "locate":
            raise PdslError.at("BadOption", "--switches locate runs on the CasADi backend; the torch backend steps "
                               "through switching surfaces", hint="drop --backend torch (or --switches locate)")
        from .torch_loss import TorchChunkLoss  # torch only here

        return TorchChunkLoss(num, layout, spec, observed)
    return ChunkLoss(num, layout, spec, observed)
