"""The bundled component library (std:): every component checks on its own with its power balance, and
assemblies of std parts equal the hand-written bundled models."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pdsl.compose import std_dir
from pdsl.lower.structural import power_balance
from pdsl.pipeline import CompileOptions, compile_model, load_models

REPO = Path(__file__).resolve().parents[2]
STD_FILES = sorted(std_dir().glob("*.phm"))
COMPONENTS = [(f, m.name) for f in STD_FILES for m in load_models(f)]


def test_the_library_has_what_the_language_promises():
    names = {n for _, n in COMPONENTS}
    for want in ("Resistor", "Capacitor", "Inductor", "VoltageSource", "CurrentSource", "Ground", "Mass", "Inertia",
                 "Spring", "Damper", "Force", "Torque", "Fixed", "DCMotor", "PID", "Gain", "SmoothStep", "Sine", "Link",
                 # LANGUAGE.md "Port domains": thermal, hydraulic and the gear/clutch parts
                 "HeatCapacitor", "ThermalConductor", "FixedTemperature", "PrescribedHeatFlow", "Convection",
                 "HeatingResistor", "Tank", "Orifice", "Pipe", "PressureSource", "FlowSource", "Gearbox", "GearLoss",
                 "Clutch"):
        assert want in names, want


@pytest.mark.parametrize("path, name", COMPONENTS, ids=[f"{p.stem}.{n}" for p, n in COMPONENTS])
def test_every_component_checks_on_its_own_and_conserves_power(path, name):
    system = compile_model(path, CompileOptions(model=name, numeric=False)).system
    if not (system.ports or system.power_terms):
        return  # signal blocks and multibody parts exchange no port power
    pb = power_balance(system)
    assert pb.residual == 0, (name, pb.residual)
    # thermal parts: the heat balance dU/dt = Σ Q̇ in; a part with power and heat ports: Σ P_in = Σ Q̇_out + dE/dt
    assert pb.holds, (name, pb.heat, pb.components)
    assert (pb.heat is not None) == any(p.domain == "thermal" for p in system.ports), name
    # the open ports appear as sources whose power is what flows in through them
    assert any(t.role == "source" for t in system.power_terms)


def _rhs(c, x, u):
    n = c.numeric
    return np.asarray(n.rhs(0.0, x, n.p_default, u), dtype=float).ravel()


@pytest.mark.parametrize("model, flat, mapping", [
    ("SeriesRLC", "rlc.phm", {"ind.phi": "phi", "cap.q": "q"}),
    ("Oscillator", "mass_spring_damper.phm", {"mass.p": "p", "spring.x": "q"}),
])
def test_std_assemblies_equal_the_hand_written_models(model, flat, mapping):
    a = compile_model(REPO / "models/composition/std_circuits.phm", CompileOptions(model=model))
    b = compile_model(REPO / "models" / flat)
    perm = [b.numeric.x_names.index(mapping[n]) for n in a.numeric.x_names]
    rng = np.random.default_rng(3)
    for _ in range(5):
        x = rng.normal(size=len(perm))
        u = rng.normal(size=1)
        xb = np.empty_like(x)
        xb[perm] = x
        np.testing.assert_allclose(_rhs(a, x, u), _rhs(b, xb, u)[perm], rtol=0, atol=1e-12)


def test_motor_driving_a_load_through_std_parts_conserves_power():
    system = compile_model(REPO / "models/composition/std_circuits.phm", CompileOptions(model="MotorLoad", numeric=False)).system
    assert power_balance(system).residual == 0


def test_ports_of_models_with_different_analogies_connect():
    """A mobility-analogy flywheel (torque = flow) on the bond-graph DC motor equals the std Inertia (torque = effort)."""
    path = REPO / "models/composition/analogies.phm"
    a = compile_model(path, CompileOptions(model="Mixed"))
    b = compile_model(path, CompileOptions(model="Same"))
    assert a.numeric.x_names == b.numeric.x_names
    rng = np.random.default_rng(7)
    for _ in range(5):
        x, u = rng.normal(size=a.numeric.nx), rng.normal(size=1)
        np.testing.assert_allclose(_rhs(a, x, u), _rhs(b, x, u), rtol=0, atol=1e-12)
    assert power_balance(a.system).residual == 0
