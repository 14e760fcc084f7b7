"""The words that several stages share: one home for each vocabulary, importable without any numeric backend.

This module imports the standard library only (``pdsl check`` and the CLI's argument parser read it without
CasADi, sympy or torch). A stage that accepts one of these words validates it against the tuple here for its
context; it never keeps its own list. ``tests/test_vocab.py`` checks that the stages agree with it (the Butcher
tableaus of :mod:`pdsl.numerics.fixed_step`, DOP853's order, the CLI's choices).

* :class:`Stabilize`: drift control of constraints, with where each value is valid (:data:`STABILIZE_LOWER`,
  :data:`STABILIZE_SIMULATE`).
* :class:`Integrator`: one record per integration method (family, order, implicit, tableau, where it can be used);
  :data:`INTEGRATORS` is the table, and the per-stage tuples (:data:`SIMULATE_INTEGRATORS`,
  :data:`FIT_INTEGRATORS`, :data:`TORCH_INTEGRATORS`, ...) are read off it.
* fit backends, losses, formulations, compile targets.

To add an integrator: give it a record in :data:`INTEGRATORS` (and, for a fixed-step scheme, its tableau in
``pdsl.numerics.fixed_step``); the CLI's choices, the validation and the hints of every stage follow.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

__all__ = [
    "Stabilize", "STABILIZE_LOWER", "STABILIZE_SIMULATE",
    "Family", "Engine", "Integrator", "INTEGRATORS", "AUTO", "integrator", "integrators",
    "SIMULATE_INTEGRATORS", "SUNDIALS", "NATIVE", "FIXED_STEP", "FIT_INTEGRATORS", "TORCH_INTEGRATORS",
    "TORCH_EVALUATE_INTEGRATORS", "IMPLICIT_FIXED_STEP", "COMPILE_STEP",
    "FitBackend", "FIT_BACKENDS", "FitLoss", "FIT_LOSSES", "TRAJECTORY_LOSSES", "SENSITIVITY_LOSSES",
    "Formulation", "FORMULATIONS", "Target", "TARGETS", "ACTIVATIONS",
]


def _values(members) -> tuple[str, ...]:
    """Plain strings (argparse shows and compares choices with repr/str: no enum reprs in messages)."""
    return tuple(str(m.value) if isinstance(m, StrEnum) else str(m) for m in members)


# ------------------------------------------------------------------------------------------------ stabilize
class Stabilize(StrEnum):
    """Drift control of holonomic constraints (Cartesian mechanics)."""

    NONE = "none"
    PROJECT = "project"  # simulate: project onto Φ = 0, Φ̇ = 0 after every output interval
    BAUMGARTE = "baumgarte"  # lower: Φ̈ + 2αΦ̇ + β²Φ = 0 built into the constraint rows (simulate then sets α, β)


# Where each value is valid: lowering builds only what goes into the equations (a projection is a step of the
# run, not a row); simulate accepts all three (``baumgarte`` only for a system lowered with it).
STABILIZE_LOWER: tuple[str, ...] = _values((Stabilize.NONE, Stabilize.BAUMGARTE))
STABILIZE_SIMULATE: tuple[str, ...] = _values((Stabilize.NONE, Stabilize.PROJECT, Stabilize.BAUMGARTE))


# ------------------------------------------------------------------------------------------------ integrators
class Family(StrEnum):
    EXPLICIT_RK = "explicit-RK"  # fixed step, stages in order
    IMPLICIT_RK = "implicit-RK"  # fixed step, stage equations solved (Gauss–Legendre collocation)
    ADAPTIVE_RK = "adaptive-RK"  # embedded pair with step-size control
    MULTISTEP = "multistep"  # variable order and step (SUNDIALS)


class Engine(StrEnum):
    """Who runs the method in ``simulate``."""

    FIXED_STEP = "fixed-step"  # pdsl.numerics.fixed_step: unrolled CasADi graphs (and pdsl.numerics.torch_steps)
    NATIVE = "native"  # pdsl.sim.native: compiled C around the generated right-hand side
    SUNDIALS = "sundials"  # CasADi's CVODES/IDAS plugins


@dataclass(frozen=True, slots=True)
class Integrator:
    """One integration method and where it can be used."""

    name: str
    family: Family
    order: int  # of the solution; for the multistep methods the highest order they use
    implicit: bool
    engine: Engine
    tableau: str | None = None  # key of its Butcher tableau: pdsl.numerics.fixed_step.tableau, or "dop853" (pdsl.numerics.dop853)
    symplectic: bool = False
    dae: bool = False  # integrates algebraic variables (semi-explicit index 1)
    # ``pdsl simulate --integrator``; every one of them also runs models with events and located switching surfaces
    # (pdsl.sim.hybrid: SUNDIALS root finding, a fixed-step or DOP853 step bracketing the crossing)
    simulate: bool = True
    fit: bool = False  # the fit's trajectory loss (pdsl.fit.loss: CasADi rollouts)
    torch: bool = False  # the torch backend steps it (pdsl.numerics.torch_steps), in fits
    torch_evaluate: bool = False  # ``pdsl evaluate --backend torch`` (explicit: no stage solves, no gradient)
    compile_step: bool = False  # the ``step(t, x, p, u, h)`` that ``pdsl compile`` writes (casadi and python targets)
    plugin: str = ""  # SUNDIALS: the CasADi plugin
    plugin_options: tuple[tuple[str, str], ...] = ()  # SUNDIALS: its options
    doc: str = ""


AUTO = "auto"  # simulate's default: pdsl.sim.auto picks one of the records below (not an integrator itself)

INTEGRATORS: tuple[Integrator, ...] = (
    Integrator("cvodes", Family.MULTISTEP, 12, True, Engine.SUNDIALS, plugin="cvodes",
               plugin_options=(("linear_multistep_method", "adams"),), doc="CVODES Adams–Moulton: non-stiff"),
    Integrator("cvodes-bdf", Family.MULTISTEP, 5, True, Engine.SUNDIALS, plugin="cvodes",
               plugin_options=(("linear_multistep_method", "bdf"),), doc="CVODES BDF: stiff"),
    Integrator("idas", Family.MULTISTEP, 5, True, Engine.SUNDIALS, dae=True, plugin="idas", doc="IDAS BDF: DAEs"),
    Integrator("dop853", Family.ADAPTIVE_RK, 8, False, Engine.NATIVE, tableau="dop853",
               doc="Dormand–Prince 8(5,3), compiled C: small non-stiff ODEs"),
    Integrator("euler", Family.EXPLICIT_RK, 1, False, Engine.FIXED_STEP, tableau="euler", fit=True, torch=True,
               torch_evaluate=True, doc="explicit Euler"),
    Integrator("rk4", Family.EXPLICIT_RK, 4, False, Engine.FIXED_STEP, tableau="rk4", fit=True, torch=True,
               torch_evaluate=True, compile_step=True, doc="classical Runge–Kutta"),
    Integrator("midpoint", Family.IMPLICIT_RK, 2, True, Engine.FIXED_STEP, tableau="midpoint", symplectic=True,
               fit=True, torch=True, doc="implicit midpoint (1-stage Gauss–Legendre)"),
    Integrator("gauss2", Family.IMPLICIT_RK, 4, True, Engine.FIXED_STEP, tableau="gauss2", symplectic=True,
               fit=True, torch=True, doc="2-stage Gauss–Legendre"),
    Integrator("rk2", Family.EXPLICIT_RK, 2, False, Engine.FIXED_STEP, tableau="rk2", fit=True,
               torch=True, torch_evaluate=True, doc="explicit midpoint (torchdiffeq's fixed-grid 'midpoint')"),
)

_BY_NAME = {m.name: m for m in INTEGRATORS}


def integrator(name: str) -> Integrator | None:
    """The record of ``name``; None for an unknown one (the caller words the error for its option)."""
    return _BY_NAME.get(name)


def integrators(**where) -> tuple[str, ...]:
    """Names of the integrators whose fields equal ``where`` (``integrators(fit=True)``), in table order."""
    return tuple(m.name for m in INTEGRATORS if all(getattr(m, k) == v for k, v in where.items()))


SIMULATE_INTEGRATORS: tuple[str, ...] = integrators(simulate=True)
SUNDIALS: tuple[str, ...] = integrators(simulate=True, engine=Engine.SUNDIALS)
NATIVE: tuple[str, ...] = integrators(simulate=True, engine=Engine.NATIVE)
FIXED_STEP: tuple[str, ...] = integrators(simulate=True, engine=Engine.FIXED_STEP)  # simulate's fixed-step schemes
FIT_INTEGRATORS: tuple[str, ...] = integrators(fit=True)
TORCH_INTEGRATORS: tuple[str, ...] = integrators(torch=True)
TORCH_EVALUATE_INTEGRATORS: tuple[str, ...] = integrators(torch_evaluate=True)
IMPLICIT_FIXED_STEP: tuple[str, ...] = integrators(engine=Engine.FIXED_STEP, implicit=True)  # stage equations
COMPILE_STEP: str = integrators(compile_step=True)[0]


# ------------------------------------------------------------------------------------------------ fit
class FitBackend(StrEnum):
    AUTO = "auto"  # pdsl.fit.backends.choose_backend
    CASADI = "casadi"
    TORCH = "torch"


FIT_BACKENDS: tuple[str, ...] = _values(FitBackend)


class FitLoss(StrEnum):
    MSE = "mse"
    L1 = "l1"
    HUBER = "huber"
    SOFT_L1 = "soft-l1"
    SSE = "sse"


# where each loss is valid: ``pdsl fit --loss`` (robust ones by IRLS weights on mse), the trajectory losses
# themselves (pdsl.fit.loss), the sensitivities of pdsl.numerics.sensitivity
FIT_LOSSES: tuple[str, ...] = _values((FitLoss.MSE, FitLoss.L1, FitLoss.HUBER, FitLoss.SOFT_L1))
TRAJECTORY_LOSSES: tuple[str, ...] = _values((FitLoss.L1, FitLoss.MSE))
SENSITIVITY_LOSSES: tuple[str, ...] = _values((FitLoss.SSE, FitLoss.MSE, FitLoss.L1))


# ------------------------------------------------------------------------------------------------ lowering, compile
class Formulation(StrEnum):
    HAMILTONIAN = "hamiltonian"
    LAGRANGIAN = "lagrangian"


FORMULATIONS: tuple[str, ...] = _values(Formulation)


class Target(StrEnum):
    CASADI = "casadi"
    C = "c"
    PYTHON = "python"
    FMU = "fmu"


TARGETS: tuple[str, ...] = _values(Target)


# ------------------------------------------------------------------------------------------------ networks
# The activations `mlp(act = …)` accepts. Each backend implements every one of them, value and derivative
# (pdsl.backend.neural for CasADi, pdsl.backend.torch_backend and pdsl.fit.torch_bridge for torch,
# pdsl.compile.targets for generated numpy); tests/test_vocab.py checks that their tables cover exactly this list.
ACTIVATIONS: tuple[str, ...] = ("tanh", "relu", "softplus", "sin", "elu", "gelu", "sigmoid", "identity")
