"""The model's picture along a run (pdsl.sim.drawing) against positions computed independently from the CSV columns;
animations (GIF, HTML), snapshots, the structure plot; `simulate --animate` refuses a model with nothing to draw before
it integrates."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("matplotlib")

from pdsl.cli.main import main  # noqa: E402
from pdsl.pipeline import compile_model  # noqa: E402
from pdsl.sim.drawing import has_picture, scene_of_run  # noqa: E402
from pdsl.sim.simulate import simulate, time_grid  # noqa: E402

MODELS = Path(__file__).resolve().parents[2] / "models"


def _run(model, t_end=2.0, dt=0.05, **kw):
    c = compile_model(MODELS / model)
    return c, simulate(c.numeric, time_grid(t_end, dt), **kw)


def test_double_pendulum_picture_matches_its_angles():
    c, res = _run("double_pendulum.phm")
    scene = scene_of_run(res, c.system)
    q1, q2 = res.x[:, 0], res.x[:, 1]
    l1, l2 = 1.0359, 1.0822
    bob1 = np.column_stack([l1 * np.sin(q1), -l1 * np.cos(q1)])
    bob2 = bob1 + np.column_stack([l2 * np.sin(q2), -l2 * np.cos(q2)])
    marks = {label: P for label, _kind, P in scene.marks}
    np.testing.assert_allclose(marks["bob1"], bob1, atol=1e-13)
    np.testing.assert_allclose(marks["bob2"], bob2, atol=1e-13)
    (kind, pts), = scene.lines
    assert kind == "line" and len(pts) == 3 and np.all(pts[0] == 0.0)
    assert scene.axes == ("x", "y")
    # the run's parameters, not the defaults, place the picture
    _, res2 = _run("double_pendulum.phm", params={"l1": 2.0})
    marks2 = {label: P for label, _kind, P in scene_of_run(res2, c.system).marks}
    np.testing.assert_allclose(marks2["bob1"][:, 0], 2.0 * np.sin(res2.x[:, 0]), atol=1e-13)


def test_cartesian_bodies_draw_themselves():
    c, res = _run("pendulum2.phm", x0={"b[1].x": 0.5})
    scene = scene_of_run(res, c.system)
    cols = dict(zip(res.shown_names, res.shown.T))
    marks = {label: P for label, kind, P in scene.marks if kind == "body"}
    np.testing.assert_allclose(marks["b[1]"], np.column_stack([cols["b[1].x"], cols["b[1].y"]]), atol=1e-15)
    links = [pts for kind, pts in scene.lines if kind == "link"]
    assert len(links) == 2 and np.all(links[0][0] == 0.0)  # ground, b[1]
    lengths = np.linalg.norm(links[1][1] - links[1][0], axis=1)  # b[1] – b[2]: the rod's length, kept
    np.testing.assert_allclose(lengths, 1.0822, rtol=1e-6)


def test_inputs_and_feedback_laws_are_evaluated(tmp_path):
    text = """model In
  param k = 2
  input u
  input w = k*x
  var x = 1
  der(x) = -x + u
  draw point p = [u, w]
end
"""
    from pdsl.sim.simulate import input_from_expression

    c = compile_model("in.phm", text=text)
    res = simulate(c.numeric, time_grid(1.0, 0.1), inputs={"u": input_from_expression(c.numeric, "u", "sin(t)")})
    (label, _k, P), = scene_of_run(res, c.system).marks
    np.testing.assert_allclose(P[:, 0], np.sin(res.t), atol=1e-14)
    np.testing.assert_allclose(P[:, 1], 2 * res.x[:, 0], atol=1e-14)


def test_three_d_pictures_use_the_plane_of_most_motion():
    text = """model Z
  coord q = 0.5
  lagrangian der(q)^2/2 - q^2/2
  draw point p = [0.001*q, 0, q]
end
"""
    c = compile_model("z.phm", text=text)
    res = simulate(c.numeric, time_grid(3.0, 0.1))
    scene = scene_of_run(res, c.system)
    assert scene.axes == ("x", "z")
    np.testing.assert_allclose(scene.marks[0][2][:, 1], res.x[:, 0], atol=1e-15)


def test_animation_gif_and_html(tmp_path):
    from pdsl.sim.plot import animate_bodies

    c, res = _run("rolling_disk.phm", 1.0, 0.1, x0={"der(theta)": 1.7, "der(phi)": 0.6})
    anim = animate_bodies(res, c.system, tmp_path / "d.gif", frames=4)
    assert (tmp_path / "d.gif").read_bytes()[:6] in (b"GIF89a", b"GIF87a")
    from PIL import Image

    assert Image.open(tmp_path / "d.gif").n_frames == 4
    animate_bodies(res, c.system, tmp_path / "d.html", frames=3)
    page = (tmp_path / "d.html").read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>") and page.count("data:image/png;base64") == 3
    assert "<title>d</title>" in page
    assert "data:image/png;base64" in anim._repr_html_()  # a player in Jupyter
    from pdsl.diagnostics import PdslError

    with pytest.raises(PdslError) as e:
        animate_bodies(res, c.system, tmp_path / "d.mp4")
    assert e.value.diagnostics[0].code == "BadOption"


def test_snapshots_in_panels_or_one_axes():
    from pdsl.sim.plot import mechanism_figure, new_figure

    c, res = _run("cart_pole.phm", 1.0, 0.1)
    fig = mechanism_figure(res, c.system, n=3)
    assert len(fig.axes) == 3 and [a.get_title() for a in fig.axes] == ["t = 0", "t = 0.5", "t = 1"]
    ax = new_figure().subplots()
    mechanism_figure(res, c.system, n=3, ax=ax)
    cart = [ln for ln in ax.get_lines() if ln.get_marker() == "o"]
    assert len(cart) == 6  # two drawn points at three instants
    np.testing.assert_allclose(cart[0].get_xdata(), [res.x[0, 0]])


def test_simulate_animate_refuses_before_integrating(tmp_path, capsys):
    model = tmp_path / "decay.phm"
    model.write_text("model Decay\n  var x = 1\n  der(x) = -x\nend\n")
    csv = tmp_path / "out.csv"
    assert main(["simulate", str(model), "--t-end", "1", "-o", str(csv), "--animate", str(tmp_path / "a.gif")]) == 2
    err = capsys.readouterr().err
    assert "error[NothingToDraw]" in err and f"{model}:1:1" in err and "draw point" in err
    assert not csv.exists()  # refused before the run: no table written
    assert main(["simulate", str(MODELS / "double_pendulum.phm"), "--t-end", "1", "-o", str(csv),
                 "--animate", str(tmp_path / "a.avi")]) == 2
    assert "error[BadOption]" in capsys.readouterr().err and not csv.exists()


def test_simulate_animate_and_plot_structure_of_a_drawn_model(tmp_path, capsys):
    out = tmp_path / "dp.html"
    assert main(["simulate", str(MODELS / "double_pendulum.phm"), "--t-end", "0.5", "--dt", "0.1",
                 "-o", str(tmp_path / "dp.csv"), "--animate", str(out)]) == 0
    assert out.read_text(encoding="utf-8").count("data:image/png;base64") == 6
    png = tmp_path / "s.png"
    assert main(["show", str(MODELS / "slider_crank_stop.phm"), "--plot-structure", str(png)]) == 0
    assert png.read_bytes()[:4] == b"\x89PNG"
    assert main(["show", str(MODELS / "dc_motor.phm"), "--plot-structure", str(png)]) == 2
    assert "NothingToDraw" in capsys.readouterr().err


def test_which_bundled_models_have_a_picture():
    """Body models and models with `draw` statements have a picture; a circuit or a neuron model has none."""
    from pdsl.pipeline import CompileOptions

    names = ("double_pendulum", "rolling_disk", "pendulum1", "spring_pendulum", "rlc", "fitzhugh_nagumo")
    have = {n: has_picture(compile_model(MODELS / f"{n}.phm", CompileOptions(numeric=False)).system) for n in names}
    assert have == {"double_pendulum": True, "rolling_disk": True, "pendulum1": True, "spring_pendulum": True,
                    "rlc": False, "fitzhugh_nagumo": False}
