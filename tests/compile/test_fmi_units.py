"""Units in Modelica form with FMI base units (pdsl.compile.fmi_units): spellings, and exponents and factors against
the resolver's unit reader and, where installed, pint."""

from __future__ import annotations

import math

import pytest

from pdsl.compile.fmi_units import BASE_UNITS, modelica_unit
from pdsl.resolve.units import parse_unit

SPELLINGS = {
    "N*m": "N.m", "m/s^2": "m/s2", "kg*m^2": "kg.m2", "N*m*s": "N.m.s", "1/s": "1/s", "s^-1": "1/s",
    "rad/s": "rad/s", "W/(m^2*K)": "W/(m2.K)", "kg·m²": "kg.m2", "N m": "N.m", "m/s/s": "m/s2", "1": "1",
    "Ω": "Ohm", "µF": "uF", "kg*m^2/s^2": "kg.m2/s2", "L/min": "l/min", "rpm": "rev/min", "N*m/rpm": "N.m.min/rev",
    "mm": "mm", "V/A": "V/A", "m2": "m2", "N.m": "N.m",
}


@pytest.mark.parametrize("text, name", sorted(SPELLINGS.items()))
def test_modelica_spelling(text, name):
    assert modelica_unit(text).name == name


def test_what_modelica_cannot_spell():
    assert modelica_unit(None) is None and modelica_unit("  ") is None
    assert modelica_unit("Hz^(1/2)") is None and modelica_unit("furlong") is None


@pytest.mark.parametrize("text", ["N*m", "m/s^2", "W/(m^2*K)", "kg·m²", "µF", "Ohm", "J/K", "mol/L", "kN*m/s", "1/s"])
def test_base_exponents_agree_with_the_resolver(text):
    """The FMI exponents of kg … cd are the dimension pdsl checks models with (pdsl.resolve.units)."""
    u = modelica_unit(text)
    assert list(u.exponents[:7]) == [int(k) for k in parse_unit(text).e]


@pytest.mark.parametrize("text, pint_text", [("mm", "mm"), ("kN*m/s", "kN*m/s"), ("µF", "uF"), ("L/min", "L/min"),
                                              ("deg", "deg"), ("rpm", "rpm"), ("g/cm^3", "g/cm**3"), ("h", "h"),
                                              ("N*m/rpm", "N*m/rpm")])
def test_factors_agree_with_pint(text, pint_text):
    pint = pytest.importorskip("pint")
    ureg = pint.UnitRegistry()
    q = (1 * ureg(pint_text)).to_base_units()
    u = modelica_unit(text)
    assert u.factor == pytest.approx(q.magnitude, rel=1e-12)
    dims = dict(q.dimensionality)
    pint_names = {"kg": "[mass]", "m": "[length]", "s": "[time]", "A": "[current]", "K": "[temperature]",
                  "mol": "[substance]", "cd": "[luminosity]"}
    assert [int(dims.get(pint_names[b], 0)) for b in BASE_UNITS[:7]] == list(u.exponents[:7])


def test_angles_count_radians():
    assert modelica_unit("rad/s").exponents[BASE_UNITS.index("rad")] == 1
    assert modelica_unit("deg").factor == pytest.approx(math.pi / 180)
