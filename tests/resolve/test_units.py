"""Units of measure (issue 11, LANGUAGE.md §2): the SI unit parser, dimension checks at the term,
derived units of states, and units in `show`, CSV headers and plot axes."""

from __future__ import annotations

import textwrap
from fractions import Fraction

import numpy as np
import pytest

from pdsl.cli.main import main
from pdsl.data.csvio import header_with_unit, read_table, split_header, write_table
from pdsl.diagnostics import PdslError
from pdsl.pipeline import compile_model, load_models
from pdsl.resolve.units import DIMENSIONLESS, Dim, UnitSyntax, format_dim, parse_unit
from pdsl.show import render_system
from pdsl.sim.simulate import simulate, time_grid


def _model(body: str, name: str = "A") -> str:
    return f"model {name}\n" + textwrap.indent(textwrap.dedent(body).strip("\n"), "  ") + "\nend\n"


def _dim(kg=0, m=0, s=0, A=0, K=0, mol=0, cd=0) -> Dim:
    return Dim(tuple(Fraction(v) for v in (kg, m, s, A, K, mol, cd)))


# ---------------------------------------------------------------- the parser
@pytest.mark.parametrize("text, dim", [
    ("kg", _dim(kg=1)), ("g", _dim(kg=1)), ("mm", _dim(m=1)), ("km/h", _dim(m=1, s=-1)),
    ("m/s^2", _dim(m=1, s=-2)), ("m/s/s", _dim(m=1, s=-2)), ("m*s^-2", _dim(m=1, s=-2)),
    ("kg*m^2/s^2", _dim(kg=1, m=2, s=-2)), ("kg·m²/s²", _dim(kg=1, m=2, s=-2)), ("J", _dim(kg=1, m=2, s=-2)),
    ("N*m", _dim(kg=1, m=2, s=-2)), ("N m", _dim(kg=1, m=2, s=-2)), ("N*s/m", _dim(kg=1, s=-1)),
    ("kg/(m*s)", _dim(kg=1, m=-1, s=-1)), ("1/s", _dim(s=-1)), ("Hz", _dim(s=-1)), ("1", DIMENSIONLESS),
    ("rad", DIMENSIONLESS), ("deg", DIMENSIONLESS), ("rad/s", _dim(s=-1)), ("µs", _dim(s=1)),
    ("V", _dim(kg=1, m=2, s=-3, A=-1)), ("Ohm", _dim(kg=1, m=2, s=-3, A=-2)), ("Ω", _dim(kg=1, m=2, s=-3, A=-2)),
    ("F", _dim(kg=-1, m=-2, s=4, A=2)), ("H", _dim(kg=1, m=2, s=-2, A=-2)), ("mA", _dim(A=1)),
    ("W", _dim(kg=1, m=2, s=-3)), ("Pa", _dim(kg=1, m=-1, s=-2)), ("m^-1", _dim(m=-1)), ("s⁻¹", _dim(s=-1)),
])
def test_parse_unit(text, dim):
    assert parse_unit(text) == dim


@pytest.mark.parametrize("text, fragment", [
    ("furlong", "unknown unit `furlong`"), ("", "empty"), ("m^", "missing"), ("m^x", "not a number"),
    ("(m", "not closed"), ("m)", "unexpected"), ("m$", "unexpected character"), ("kkg", "unknown unit"),
])
def test_parse_unit_errors(text, fragment):
    with pytest.raises(UnitSyntax, match=None) as exc:
        parse_unit(text)
    assert fragment in str(exc.value)


def test_format_dim():
    assert format_dim(_dim(kg=1, m=2, s=-2)) == "kg·m²/s²"
    assert format_dim(_dim(kg=1, m=2, s=-1)) == "kg·m²/s"
    assert format_dim(_dim(s=-1)) == "1/s"
    assert format_dim(_dim(kg=1, m=-1, s=-2)) == "kg/(m·s²)"
    assert format_dim(DIMENSIONLESS) == "1"


# ---------------------------------------------------------------- the acceptance pendulum
PENDULUM = _model("""
    param m = 1.0 {unit = "kg"}, l = 0.5 {unit = "m"}, g = 9.81 {unit = "m/s^2"}, c = 0.1 {unit = "N*m*s"}
    coord theta = 0.5 {unit = "rad"}
    input tau = if t < 1 then 0 else 0.2 {unit = "N*m"}
    lagrangian m*l^2*der(theta)^2/2 + m*g*l*cos(theta)
    force tau - c*der(theta) on theta
    output x = l*sin(theta) {unit = "m"}
""", "Pendulum")


def _first(text: str):
    with pytest.raises(PdslError) as exc:
        load_models("<test>", text=text)
    return exc.value.diagnostics[0]


def test_pendulum_with_units_checks():
    c = compile_model("<test>", text=PENDULUM)
    units = dict(c.system.units)
    assert units["theta"] == "rad" and units["der(theta)"] == "rad/s" and units["g"] == "m/s^2"
    assert units["momentum(theta)"] == "kg·m²/s"  # ∂L/∂(der theta), L in kg·m²/s²


def test_wrong_g_is_a_mismatch_at_the_lagrangian_term():
    d = _first(PENDULUM.replace('g = 9.81 {unit = "m/s^2"}', 'g = 9.81 {unit = "m/s"}'))
    assert d.code == "UnitMismatch"
    assert (d.span.line, d.span.col, d.span.end_col) == (5, 37, 53)  # `m*g*l*cos(theta)`
    assert "kg·m²/s" in d.message and "kg·m²/s²" in d.message


def test_cli_renders_the_mismatch(tmp_path, capsys):
    path = tmp_path / "pendulum.phm"
    path.write_text(PENDULUM.replace('g = 9.81 {unit = "m/s^2"}', 'g = 9.81 {unit = "m/s"}'))
    assert main(["check", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{path}:5:37: error[UnitMismatch]" in err and "m*g*l*cos(theta)" in err and "^" in err


@pytest.mark.parametrize("body, line, col, fragments", [
    # the two sides of an equation
    ('param k = 1 {unit = "1/s"}\nvar x {unit = "m"}\nder(x) = k', 4, 3, ["m/s", "1/s"]),
    # an output against its declared unit
    ('param a = 1 {unit = "m"}\nvar x {unit = "m"}\nder(x) = 0\noutput y = a*x {unit = "m"}', 5, 14, ["m²", "declared"]),
    # the argument of a transcendental function
    ('param a = 1 {unit = "m"}, w = 1 {unit = "1/s"}\nvar x {unit = "1"}\nder(x) = w*sin(a)', 4, 18, ["dimensionless", "m"]),
    # the branches of an if
    ('param a = 1 {unit = "m"}, b = 1 {unit = "s"}\nvar x {unit = "m"}\nder(x) = 0\noutput y = if t < 1 then a else b',
     5, 35, ["branches", "m", "s"]),
    # the sides of a comparison
    ('param a = 1 {unit = "m"}\nvar x {unit = "m"}\nder(x) = if t < a then 0 else 1', 4, 15, ["`<`", "s", "m"]),
    # a generalized force against energy / coordinate
    ('param m = 1 {unit = "kg"}, F = 1 {unit = "N"}\ncoord th {unit = "rad"}\nlagrangian m*der(th)^2/2\nforce F on th', 5, 9,
     ["generalized force", "kg·m/s²"]),
])
def test_mismatches_are_located(body, line, col, fragments):
    d = _first(_model(body))
    assert d.code == "UnitMismatch", d
    assert (d.span.line, d.span.col) == (line, col), d
    for f in fragments:
        assert f in d.message, (f, d.message)


def test_bad_unit_is_located_at_the_text():
    d = _first(_model('param m = 1 {unit = "furlong"}\nvar x\nder(x) = -m*x'))
    assert (d.code, d.span.line, d.span.col) == ("BadUnit", 2, 23)  # the quoted text
    assert "furlong" in d.message


def test_unit_must_be_text():
    d = _first(_model('param m = 1 {unit = 3}\nvar x\nder(x) = -m*x'))
    assert d.code == "BadAttribute" and "quotes" in d.message


def test_no_check_where_a_unit_is_missing():
    """`b` has no unit, so the sum `a + b` is not checked; literals adopt their partner's dimension."""
    text = _model('param a = 1 {unit = "m"}, b = 2\nvar x {unit = "m"}\nder(x) = (a + b + x)/(1 + t) + 0*x')
    compile_model("<test>", text=text)  # no error
    ok = _model('param a = 1 {unit = "m"}, w = 2 {unit = "1/s"}\nvar x {unit = "m"}\nder(x) = w*(a - x + 1)')
    compile_model("<test>", text=ok)


def test_model_without_units_has_none():
    c = compile_model("<test>", text=_model("param k = 2\nvar x = 1\nder(x) = -k*x"))
    assert c.model.units == () and c.system.units == ()


# ---------------------------------------------------------------- derived units
def test_hamiltonian_momentum_unit_is_derived():
    c = compile_model("<test>", text=_model("""
        param m = 1.0 {unit = "kg"}, k = 4.0 {unit = "N/m"}
        coord q = 1 {unit = "m"}
        momentum p
        hamiltonian p^2/(2*m) + k*q^2/2
    """))
    assert c.system.unit_of("p") == "kg·m/s"


def test_port_hamiltonian_states_and_ports():
    c = compile_model("<test>", text=_model("""
        param m = 1.0 {unit = "kg"}, k = 4.0 {unit = "N/m"}, d = 0.3 {unit = "N*s/m"}
        input F {unit = "N"}
        flow_store mass(p) energy p^2/(2*m)
        effort_store spring(q) energy k*q^2/2
        resistive damper: f = d*e
        flow_source push = F
        junction common_effort(mass, spring, damper, -push)
    """))
    u = dict(c.system.units)
    assert u["p"] == "kg·m/s" and u["q"] == "m"
    assert u["flow(mass)"] == "kg·m/s²" and u["effort(mass)"] == "m/s"  # force = flow, velocity = effort
    assert u["effort(spring)"] == "m/s" and u["flow(spring)"] == "kg·m/s²"


# ---------------------------------------------------------------- show, CSV, plots
def test_show_prints_units():
    text = render_system(compile_model("<test>", text=PENDULUM).system)
    assert "theta [rad] (start 0.5)" in text and "der(theta) [rad/s]" in text
    assert "g = 9.81 [m/s^2]" in text and "x [m] = l*sin(theta)" in text
    assert "tau [N*m] = (if t < 1 then 0 else 1/5)" in text


def test_csv_units_are_metadata_and_read_back(tmp_path):
    """Columns are named as `show` names the states; the units go to the sidecar p.units.csv (issue 34)."""
    c = compile_model("<test>", text=PENDULUM)
    r = simulate(c.numeric, time_grid(2.0, 0.5))
    header, data = r.columns()
    assert header == ["t", "theta", "der(theta)", "x"]
    assert r.column_units() == {"t": "s", "theta": "rad", "der(theta)": "rad/s", "x": "m"}
    write_table(tmp_path / "p.csv", header, data, r.column_units())
    assert (tmp_path / "p.csv").read_text().splitlines()[0] == "t,theta,der(theta),x"
    table = read_table(tmp_path / "p.csv")
    assert table.columns == ("t", "theta", "der(theta)", "x")
    assert table.units == ("s", "rad", "rad/s", "m")
    np.testing.assert_array_equal(table.data, data)


def test_old_headers_with_units_are_still_read(tmp_path):
    """A CSV that an earlier pdsl wrote (`theta [rad]` in the header) reads as the column `theta` in rad."""
    (tmp_path / "old.csv").write_text("t [s],theta [rad],der(theta) [rad/s]\n0,0.1,0\n0.5,0.2,0.1\n")
    table = read_table(tmp_path / "old.csv")
    assert table.columns == ("t", "theta", "der(theta)") and table.units == ("s", "rad", "rad/s")


def test_header_parser():
    assert split_header("theta [rad]") == ("theta", "rad")
    assert split_header("b[1].x") == ("b[1].x", None)
    assert split_header("b[1].x [m]") == ("b[1].x", "m")
    assert split_header(" v  [m/s] ") == ("v", "m/s")
    assert header_with_unit("x", None) == "x" and header_with_unit("x", "m") == "x [m]"


def test_plot_axes_carry_units():
    pytest.importorskip("matplotlib")
    from pdsl.sim.plot import trajectory_figure

    c = compile_model("<test>", text=PENDULUM)
    fig = trajectory_figure(simulate(c.numeric, time_grid(1.0, 0.5)))
    labels = [ax.get_ylabel() for ax in fig.axes]
    assert "theta [rad]" in labels and fig.axes[-1].get_xlabel() == "t [s]"


def test_model_without_units_keeps_plain_headers():
    c = compile_model("<test>", text=_model("param k = 2\nvar x = 1\nder(x) = -k*x"))
    header, _ = simulate(c.numeric, time_grid(1.0, 0.5)).columns()
    assert header == ["t", "x"]


def test_fit_reads_a_csv_with_units(tmp_path):
    """The trajectory CSV that `simulate` writes for a model with units is data for `fit` as it is."""
    from pdsl.fit.data import load_dataset

    c = compile_model("<test>", text=PENDULUM)
    r = simulate(c.numeric, time_grid(2.0, 0.1))
    header, data = r.columns()
    write_table(tmp_path / "run.csv", header, data, r.column_units())
    ds = load_dataset(tmp_path / "run.csv", c.numeric)
    assert "x" in ds.observed
    (traj,) = ds.trajectories
    np.testing.assert_array_equal(traj.t, data[:, 0])


@pytest.mark.parametrize("rhs, ok", [
    ("a^2*w", False), ("a^-1*b*w", True), ("(a*a)^0.5*w", True), ("sqrt(a*a)*w", True),
    ("a^(1/2)*w", True),  # a non-literal exponent of a length: no known dimension, so not checked
])
def test_powers(rhs, ok):
    """`a` is a length, `b` an area, `w` a rate; the right side must be a velocity (m/s)."""
    text = _model(f'param a = 1 {{unit = "m"}}, b = 2 {{unit = "m^2"}}, w = 1 {{unit = "1/s"}}\nvar x {{unit = "m"}}\nder(x) = {rhs}')
    if ok:
        compile_model("<test>", text=text)
    else:
        assert _first(text).code == "UnitMismatch"


_PORT_MODEL = """model Cone
  param m = 0.02 {unit = "kg"}, k = 800.0 {unit = "N/m"}
  coord x {unit = "m"}
  lagrangian m/2*der(x)^2 - k/2*x^2
  port drive: DOMAIN = der(x) {unit = "UNIT"}
end
"""


@pytest.mark.parametrize("domain, unit, code, col", [
    ("translational", "m/s", None, None),
    ("rotational", "rad/s", "UnitMismatch", 28),  # the domain accepts rad/s, the velocity der(x) is m/s
    ("translational", "V", "UnitMismatch", 46),  # a translational across value is a velocity
    ("translational", "furlong", "BadUnit", 46),
])
def test_units_on_ports(domain, unit, code, col):
    from pdsl.diagnostics import PdslError
    from pdsl.pipeline import compile_model

    text = _PORT_MODEL.replace("DOMAIN", domain).replace("UNIT", unit)
    if code is None:
        assert compile_model("port.phm", text=text).system.states
        return
    with pytest.raises(PdslError) as err:
        compile_model("port.phm", text=text)
    d = err.value.diagnostics[0]
    assert (d.code, d.span.line, d.span.col) == (code, 5, col)


def test_csv_columns_in_other_dimensions_are_refused(tmp_path, monkeypatch):
    """`theta [m]` for a model in rad: refused at the header cell, pint or not; `theta [deg]` without pint is refused
    too (pdsl never takes degrees as radians; with pint it converts them: tests/data/test_units_metadata.py)."""
    from pdsl.cli.main import main
    from pdsl.data import units as U

    model = tmp_path / "p.phm"
    model.write_text('model P\n  param g = 9.81 {unit = "m/s^2", free}, l = 1.0 {unit = "m"}\n'
                     '  coord theta = 0.3 {unit = "rad"}\n  lagrangian l^2/2*der(theta)^2 + g*l*cos(theta)\nend\n')
    data = tmp_path / "p.csv"
    assert main(["simulate", str(model), "--t-end", "1", "--dt", "0.1", "-o", str(data)]) == 0
    (tmp_path / "p.units.csv").unlink()  # the units go into the old-style header below
    header, *rest = data.read_text().splitlines()
    assert header.startswith("t,theta,")
    monkeypatch.setattr(U, "_pint", lambda: None)  # as without pint
    for unit, what in (("deg", "same dimension"), ("m", "different dimension")):
        bad = tmp_path / f"{unit}.csv"
        bad.write_text("\n".join([header.replace("t,theta,", f"t,theta [{unit}],"), *rest]) + "\n")
        from pdsl.diagnostics import PdslError
        from pdsl.fit.data import load_dataset
        from pdsl.pipeline import compile_model

        with pytest.raises(PdslError) as err:
            load_dataset(bad, compile_model(model).numeric)
        d = err.value.diagnostics[0]
        assert (d.span.line, d.span.col) == (1, 3) and what in d.message
