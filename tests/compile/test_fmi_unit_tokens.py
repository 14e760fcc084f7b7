"""One unit tokenizer (pdsl.resolve.units.tokens) read by the unit checker and by the FMI unit writer."""

import pdsl.compile.fmi_units as fmi_units
from pdsl.compile.fmi_units import modelica_unit
from pdsl.resolve import units


def test_tokens_products_spaces_superscripts():
    assert units.tokens("kg·m²/s²") == ["kg", "·", "m", "2", "/", "s", "2"]
    assert units.tokens("N m") == ["N", "*", "m"]
    assert units.tokens("kg.m⋅s") == ["kg", "·", "m", "·", "s"]
    assert units.tokens("s⁻¹") == ["s", "-1"]


def test_fraction_exponents_only_when_asked():
    assert units.tokens("m^2/3") == ["m", "^", "2", "/", "3"]
    assert units.tokens("m^2/3", fraction_exponents=True) == ["m", "^", "2/3"]
    assert units.tokens("m/3", fraction_exponents=True) == ["m", "/", "3"]  # only right after `^`


def test_the_fmi_reader_has_no_tokenizer_of_its_own():
    assert not hasattr(fmi_units, "_tokens")
    assert modelica_unit("kg·m²/s²").name == "kg.m2/s2"
    assert modelica_unit("N⋅m").exponents == modelica_unit("N*m").exponents == modelica_unit("N m").exponents
    assert modelica_unit("Hz^(1/2)") is None and modelica_unit("m^2/3") is None  # Modelica spells no fractional power
