"""Issue 16: the notebook-first Python API (pdsl.load / Model), plots that leave the backend alone."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from measured_helpers import PENDULUM, TAU

import pdsl


def test_import_pdsl_is_cheap_and_lists_the_verbs():
    code = ("import sys, pdsl; heavy = [m for m in ('sympy', 'casadi', 'torch', 'matplotlib', 'lark') if m in sys.modules];"
            "print(heavy); print(pdsl.__doc__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.splitlines()[0] == "[]"
    for verb in ("pdsl.load", "m.show()", "m.simulate", "m.fit", "m.evaluate", "m.torch_module"):
        assert verb in out
    assert "load" in dir(pdsl) and "Model" in dir(pdsl)


def test_public_api_has_docstrings():
    from pdsl import api

    for name in api.__all__:
        obj = getattr(api, name)
        assert obj.__doc__, name
        for attr, member in vars(obj).items() if isinstance(obj, type) else ():
            if not attr.startswith("_") and callable(member):
                assert member.__doc__, f"{name}.{attr}"


@pytest.fixture(scope="module")
def model():
    return pdsl.load(PENDULUM)


def test_load_show_and_reprs(model):
    assert model.name == "DrivenPendulum"
    assert model.states == ("x", "theta", "der(x)", "der(theta)") and model.inputs == ("tau",)
    assert model.params["k"] == 8.0
    eq = model.show()
    assert "DrivenPendulum" in str(eq) and eq._repr_latex_().strip() and eq._repr_markdown_().strip()
    assert model._repr_latex_() == eq.latex and model._repr_markdown_() == eq.markdown
    assert model.show("text") == eq.text
    m2 = pdsl.Model.from_text(PENDULUM.read_text(), name="pendulum.phm")
    assert m2.name == model.name and "from text" in repr(m2)


def test_load_errors_are_located(tmp_path):
    bad = tmp_path / "bad.phm"
    bad.write_text("model Bad\n  coord theta\n  lagrangian thetaa^2\nend\n")
    with pytest.raises(pdsl.PdslError) as e:
        pdsl.load(bad)
    assert e.value.diagnostics[0].span.line == 3
    with pytest.raises(pdsl.PdslError):
        pdsl.load(tmp_path / "missing.phm")


def test_simulate_expression_callable_and_number_inputs(model):
    run = model.simulate(4, 0.05, init={"theta": 0.5}, params={"k": 6.0}, inputs={"tau": TAU})
    assert run.columns == ["t", "x", "theta", "der(x)", "der(theta)", "tau"]
    arr = run.to_numpy()
    assert arr.shape == (81, 6) and arr[0, 2] == 0.5
    np.testing.assert_allclose(run["tau"], 0.8 * np.sin(1.7 * run.t) + 0.3 * np.cos(0.6 * run.t), atol=1e-12)
    by_fn = model.simulate(4, 0.05, init={"theta": 0.5}, params={"k": 6.0},
                           inputs={"tau": lambda t: 0.8 * np.sin(1.7 * t) + 0.3 * np.cos(0.6 * t)})
    assert np.max(np.abs(by_fn.to_numpy() - arr)) < 1e-4  # linear interpolation of 10 samples per dt
    const = model.simulate(1, 0.1, inputs={"tau": 0.0})
    assert np.all(const["tau"] == 0)
    with pytest.raises(pdsl.PdslError):
        model.simulate(1, 0.1, inputs={"torque": "sin(t)"})
    with pytest.raises(pdsl.PdslError):
        model.simulate(1, 0.1)  # the input is missing


def test_to_pandas_and_fit_from_arrays(model, tmp_path):
    pd = pytest.importorskip("pandas")
    run = model.simulate(6, 0.05, params={"k": 7.0, "c": 0.4}, inputs={"tau": TAU}, rtol=1e-10)
    df = run.to_pandas()
    assert isinstance(df, pd.DataFrame) and list(df.columns) == run.columns
    cols = {"t": run.t, "x": run["x"], "theta": run["theta"], "tau": run["tau"]}  # velocities not measured
    fit = model.fit(cols, free=["k", "c"], val_fraction=0, out=tmp_path / "fit")
    assert fit.params["k"] == pytest.approx(7.0, rel=1e-3) and fit.params["c"] == pytest.approx(0.4, rel=1e-3)
    assert (tmp_path / "fit" / "params.json").is_file()
    scores = model.evaluate(df, params=fit)
    assert scores["relative error (geometric mean over t>0)"]["mean"] < 1e-3
    with pytest.raises(pdsl.PdslError):
        model.fit(cols, free=["k"], chunks=3)  # a misspelt setting
    with pytest.raises(pdsl.PdslError) as e:
        model.fit({"t": run.t, "x": run["x"] * np.nan}, free=["k"])
    assert e.value.diagnostics[0].code == "BadCsv"


def test_plots_return_figures_and_keep_the_backend(model, tmp_path):
    import matplotlib
    from matplotlib.figure import Figure

    before = matplotlib.get_backend()
    matplotlib.use("svg")  # a user's choice
    try:
        run = model.simulate(3, 0.05, inputs={"tau": TAU})
        fig = run.plot()
        assert isinstance(fig, Figure)
        labels = [ax.get_ylabel() for ax in fig.axes]
        assert labels[:2] == ["x", "theta"] and "energy" in labels and "inputs" in labels
        assert fig._repr_png_()[:4] == b"\x89PNG"
        p2 = pdsl.load(PENDULUM.parent / "pendulum2.phm").simulate(1, 0.05, init={"b[1].x": 0.5})
        snaps = p2.snapshots(3)
        assert isinstance(snaps, Figure) and len(snaps.axes) == 3
        p2.animate(tmp_path / "p2.gif", frames=5)
        assert (tmp_path / "p2.gif").read_bytes()[:3] == b"GIF"
        assert len(run.snapshots(2).axes) == 2  # the cart and pendulum of its `draw` statements
        with pytest.raises(pdsl.PdslError) as e:
            pdsl.Model.from_text("model D\n  var x = 1\n  der(x) = -x\nend\n").simulate(1, 0.5).snapshots()
        assert e.value.diagnostics[0].code == "NothingToDraw"
        assert matplotlib.get_backend() == "svg"
    finally:
        matplotlib.use(before)


def test_torch_module_matches_the_casadi_rhs(model):
    torch = pytest.importorskip("torch")
    rhs = model.torch_module(params={"k": 6.0})
    assert isinstance(rhs, torch.nn.Module) and rhs.p.requires_grad
    x = torch.tensor([[0.1, 0.4, 0.2, -0.3], [0.0, -0.2, 0.1, 0.5]], dtype=torch.float64)
    u = torch.tensor([[0.2], [-0.1]], dtype=torch.float64)
    out = rhs(0.0, x, u)
    num = model.numeric
    p = num.param_vector({"k": 6.0})
    for i in range(2):
        ref = np.asarray(num.rhs(0.0, x[i].numpy(), p, u[i].numpy())).ravel()
        np.testing.assert_allclose(out[i].detach().numpy(), ref, rtol=1e-12, atol=1e-12)
    out.sum().backward()
    assert rhs.p.grad is not None and torch.all(torch.isfinite(rhs.p.grad))


def test_symbolic_systems_render_in_notebooks():
    from pdsl.pipeline import CompileOptions, compile_model

    from pathlib import Path

    system = compile_model(Path(__file__).resolve().parents[2] / "models/rlc.phm", CompileOptions(numeric=False)).system
    md, tex = system._repr_markdown_(), system._repr_latex_()
    assert md.startswith("# model RLC") and "$$\\dot{q} = " in md  # math, not code (issue 34)
    assert "\\begin{equation}" in tex


def test_fit_of_a_text_model_writes_no_model_file(tmp_path, monkeypatch):
    """The API fits a model given as text from the text itself (issue 27): no temporary model file anywhere."""
    import tempfile

    import numpy as np

    import pdsl

    text = "model Decay\n  param k = 0.5 {lower = 0}\n  var x = 1\n  der(x) = -k*x\nend\n"
    m = pdsl.Model.from_text(text)
    t = np.linspace(0, 4, 41)
    data = {"t": t, "x": np.exp(-0.8 * t)}
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    result = m.fit(data, free=["k"], out=tmp_path / "fit")
    assert abs(result.params["k"] - 0.8) < 1e-6
    assert not list((tmp_path / "tmp").iterdir())  # nothing written to the temporary directory
    assert (tmp_path / "fit" / "model.fitted.phm").read_text().count("k = 0.8") == 1
