"""Values of CLI options with ``choices``, importable without CasADi (``pdsl check`` loads no numeric backend).

Each tuple mirrors the module that interprets it; tests/cli/test_cli_interop.py checks that they agree.
"""

from __future__ import annotations

TARGETS = ("casadi", "c", "python", "fmu")  # pdsl.compile.targets.TARGETS
INTEGRATORS = ("auto", "cvodes", "cvodes-bdf", "idas", "dop853", "euler", "rk4", "midpoint", "gauss2")  # pdsl.sim.simulate: AUTO, INTEGRATORS, NATIVE, FIXED_STEP
STABILIZERS = ("none", "project", "baumgarte")  # pdsl.sim.simulate.STABILIZERS
FORMULATIONS = ("hamiltonian", "lagrangian")
