"""Values of CLI options with ``choices``, importable without CasADi (``pdsl check`` loads no numeric backend).

Read off :mod:`pdsl.vocab`, the one home of these words; tests/cli/test_cli_interop.py checks that they agree
with the modules that interpret them.
"""

from __future__ import annotations

from ..vocab import AUTO, FORMULATIONS, SIMULATE_INTEGRATORS, STABILIZE_SIMULATE, TARGETS

__all__ = ["TARGETS", "INTEGRATORS", "STABILIZERS", "FORMULATIONS"]

INTEGRATORS = (AUTO, *SIMULATE_INTEGRATORS)  # pdsl simulate / sweep --integrator
STABILIZERS = STABILIZE_SIMULATE  # pdsl simulate --stabilize
