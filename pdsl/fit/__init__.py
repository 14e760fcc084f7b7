"""Fitting physical parameters and neural components to trajectory data (``pdsl fit``, ``pdsl evaluate``).

The stages, one module each (BENCHMARKS A4–A6 give the protocol):

* :mod:`~pdsl.fit.data` — trajectory CSVs in the format ``pdsl simulate`` writes, checked cell by
  cell; validation split by trajectory; chunks of n steps (BENCHMARKS A4);
* :mod:`~pdsl.fit.params` — free parameters and their unconstrained coordinates (log space for
  ``lower = 0``, BENCHMARKS A1.4), network weights;
* :mod:`~pdsl.fit.loss` — the chunk rollout loss (BENCHMARKS A5) as one batched CasADi graph, with its
  reverse-mode gradient and Gauss–Newton residual Jacobians;
* :mod:`~pdsl.fit.train` — Levenberg–Marquardt and torch AdamW (cosine annealing), checkpointed;
* :mod:`~pdsl.fit.torch_bridge` — CasADi functions as torch autograd operations; networks as
  ``torch.nn.Sequential``;
* :mod:`~pdsl.fit.latent` — chunk fits whose start states are estimated (measured data: noisy
  samples, unmeasured states);
* :mod:`~pdsl.fit.identify` — standard errors and what the data cannot determine, in words;
* :mod:`~pdsl.fit.metrics`, :mod:`~pdsl.fit.evaluate` — BENCHMARKS A6 metrics and rollouts;
* :mod:`~pdsl.fit.run`, :mod:`~pdsl.fit.outputs`, :mod:`~pdsl.fit.report` — the ``fit`` command's
  work and what it writes.

torch is needed only for AdamW and the bridge (the ``[nn]`` extra); Gauss–Newton runs without it.
"""

from .config import FitConfig
from .run import apply_fitted, prepare, run_fit

__all__ = ["FitConfig", "run_fit", "prepare", "apply_fitted"]
