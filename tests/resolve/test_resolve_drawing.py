"""`draw point` / `draw line` (LANGUAGE.md §13): parsed, resolved to sympy positions, located errors; composition
prefixes them; they change neither the equations nor what `show` prints."""

from __future__ import annotations

from pathlib import Path

import pytest
import sympy as sp

from pdsl.diagnostics import PdslError
from pdsl.parse import ast as A
from pdsl.parse.parser import parse_text
from pdsl.pipeline import compile_model, load_models, select_model

MODELS = Path(__file__).resolve().parents[2] / "models"

PENDULUM = """model P
  param l = 1.5
  coord theta = 0.3
  lagrangian l^2/2*der(theta)^2 + 9.81*l*cos(theta)
  draw point bob = [l*sin(theta), -l*cos(theta)]
  draw point tick[i] = [i*l/4*sin(theta), -i*l/4*cos(theta)] for i in 1..3
  draw line ground, bob
  draw line tick[i-1], tick[i] for i in 2..3
  draw line [-1, 0], [1, 0]
end
"""


def _codes(text: str) -> list[tuple[str, int, int]]:
    with pytest.raises(PdslError) as e:
        load_models("m.phm", text=text)
    return [(d.code, d.span.line, d.span.col) for d in e.value.diagnostics]


def test_parse_draw_statements_and_draw_stays_a_name():
    f = parse_text(PENDULUM)
    body = f.models[0].body
    points = [s for s in body if isinstance(s, A.DrawPointStmt)]
    lines = [s for s in body if isinstance(s, A.DrawLineStmt)]
    assert [p.name for p in points] == ["bob", "tick"] and len(points[1].index) == 1 and points[1].loops
    assert [len(ln.points) for ln in lines] == [2, 2, 2]
    assert (points[0].name_span.line, points[0].name_span.col) == (5, 14)
    # `draw` and the word after it are one token: a variable may still be called draw, drawline, point, line
    m = load_models("m.phm", text="model D\n  var draw = 1, point = 2\n  draw = point\n  der(point) = -draw\nend\n")[0]
    assert [v.name for v in m.variables] == ["draw", "point"]


def test_bad_draw_word_is_a_located_syntax_error():
    with pytest.raises(PdslError) as e:
        parse_text("model D\n  draw circle c\nend\n")
    d = e.value.diagnostics[0]
    assert d.code == "Syntax" and (d.span.line, d.span.col) == (2, 8) and "`point` or `line`" in d.message


def test_resolved_positions():
    m = load_models("m.phm", text=PENDULUM)[0]
    l, theta = sp.Symbol("l", real=True), sp.Symbol("theta", real=True)
    by_name = {p.name: p.position for p in m.drawn_points}
    assert list(by_name) == ["bob", "tick[1]", "tick[2]", "tick[3]"]
    subs = {s: v for s in by_name["bob"].free_symbols for v in [{"l": 1.5, "theta": 0.3}[s.name]]}
    assert [float(c.subs(subs)) for c in by_name["bob"]] == pytest.approx([1.5 * 0.29552020666, -1.5 * 0.95533648913])
    assert sp.simplify(by_name["tick[2]"][0] - by_name["bob"][0] / 2) == 0
    labels = [[lbl for lbl, _ in ln.points] for ln in m.drawn_lines]
    assert labels == [["ground", "bob"], ["tick[1]", "tick[2]"], ["tick[2]", "tick[3]"], ["[-1, 0]", "[1, 0]"]]
    assert list(m.drawn_lines[0].points[0][1]) == [0, 0]  # ground in the picture's dimension
    assert {s.name for s in by_name["bob"].free_symbols} == {"l", "theta"} and l.name == "l" and theta


def test_body_points_in_a_line():
    m = load_models("m.phm", text="""model B
  space 2
  body arm = rigid(dim = 2, mass = 1, moments = [0.1, 0.02])
  joint ground, arm.at([-0.3, 0])
  gravity 9.81
  draw point tip = arm.at([0.3, 0])
  draw line arm.at([-0.3, 0]), arm, tip
end
""")[0]
    (ln,) = m.drawn_lines
    assert [lbl for lbl, _ in ln.points][1] == "arm"
    assert ln.points[1][1] == sp.ImmutableMatrix(m.bodies[0].nodes[0])
    assert m.drawn_points[0].position == ln.points[2][1]


def test_errors_are_collected_and_located():
    text = """model P
  param l = 1
  coord theta = 0.3
  var z
  lagrangian der(theta)^2/2 + cos(theta)
  der(z) = bob
  draw point bob = [l*sin(theta), -l*cos(theta)]
  draw point theta = [1, 2]
  draw point s = l
  draw point v = [der(theta), 0]
  draw line ground, bob, nope
  draw line ground
  draw line bob, [1, 2], color = 3
  draw point q[i] = [i, 0, 0] for i in 1..2
  draw line q, q[1]
  draw point w = [1, 2] for i in 1..2
  draw line q[1], q[3]
end
"""
    assert _codes(text) == [
        ("NotAllowedHere", 6, 12),  # a drawn point is not a value of the equations
        ("DuplicateDefinition", 8, 14),
        ("TypeMismatch", 9, 18),
        ("NotAllowedHere", 10, 19),  # der(...): a picture shows positions
        ("UnknownName", 11, 26),
        ("WrongArity", 12, 3),
        ("UnknownArgument", 13, 26),
        ("TypeMismatch", 14, 3),  # a 3-D point in a 2-D picture
        ("TypeMismatch", 15, 13),  # an array named without its index
        ("DuplicateDefinition", 16, 14),
        ("UnknownName", 17, 19),
    ]


def test_drawing_changes_neither_equations_nor_show():
    from pdsl.pipeline import CompileOptions
    from pdsl.show import render_system

    bare = "\n".join(ln for ln in PENDULUM.splitlines() if not ln.strip().startswith("draw")) + "\n"
    a = compile_model("m.phm", CompileOptions(numeric=False), text=PENDULUM).system
    b = compile_model("m.phm", CompileOptions(numeric=False), text=bare).system
    assert a.differential == b.differential and a.energy == b.energy
    for fmt in ("text", "markdown", "latex"):
        assert render_system(a, fmt) == render_system(b, fmt)
    assert len(a.drawn_points) == 4 and len(a.drawn_lines) == 4 and not b.drawn_points


def test_composition_prefixes_drawn_points(tmp_path):
    src = tmp_path / "c.phm"
    src.write_text("""model Arm
  param l = 1, g = 9.81
  coord theta = 0.5
  lagrangian l^2/2*der(theta)^2 + g*l*cos(theta)
  draw point bob = [l*sin(theta), -l*cos(theta)]
  draw point tick[i] = [i*l/4*sin(theta), -i*l/4*cos(theta)] for i in 1..2
  draw line ground, bob
end

model One
  use a = Arm(l = 2.0)
  draw point top = [0, 1]
  draw line top, a.bob, a.tick[2]
end
""")
    m = select_model(load_models(src), "One")
    assert [p.name for p in m.drawn_points] == ["a.bob", "a.tick[1]", "a.tick[2]", "top"]
    assert [[lbl for lbl, _ in ln.points] for ln in m.drawn_lines] == [["ground", "a.bob"], ["top", "a.bob", "a.tick[2]"]]
    assert {s.name for s in m.drawn_points[0].position.free_symbols} == {"a.l", "a.theta"}


@pytest.mark.parametrize("name", ["double_pendulum", "cart_pole", "rolling_disk", "chaplygin_sleigh", "henon_heiles",
                                  "mass_spring_damper", "slider_crank_stop", "cucker_smale"])
def test_bundled_models_draw_themselves(name):
    """The generalized-coordinate, p-H and plain bundled models carry `draw` statements (LANGUAGE.md §13)."""
    m = load_models(MODELS / f"{name}.phm")[0]
    assert m.drawn_points and not m.bodies
