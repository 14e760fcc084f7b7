"""Math in every rich output (issue 34): JupyterLab and nbconvert prefer text/markdown over text/latex, so the
markdown of a model, its equations and its system carries the equations as LaTeX math ($$…$$, $…$), never as
code (`der(der(theta))*l*m*cos(theta)`). Checked on the markdown itself, and by executing a notebook and
converting it with nbconvert (HTML and markdown), where those packages are installed."""

from __future__ import annotations

import html
import re
from pathlib import Path

import pytest

import pdsl
from pdsl.pipeline import CompileOptions, compile_model
from pdsl.show import render_system

MODELS = Path(__file__).resolve().parents[1] / "models"
# units and an input law and outputs; bodies, constraints and multipliers; events; a Hamel reduction (derivation
# sections); a p-H network with a network; Lagrangian mechanics with an exogenous input
SHOWN = ["step_pendulum", "pendulum1", "bouncing_ball", "rolling_disk_se2", "cart_pole_ph", "driven_pendulum"]
CODE = re.compile(r"der\(|\*\*|\b(?:sin|cos|tan|exp|log|sqrt|tanh|Piecewise|atan2|reinit)\(|\w\*\w")


def _prose(md: str) -> str:
    """The markdown without its math and code spans, and without the title (a model's own description)."""
    md = md.split("\n", 1)[1] if md.startswith("# ") else md
    md = re.sub(r"\$\$.*?\$\$", " ", md, flags=re.S)
    md = re.sub(r"\$[^$\n]*\$", " ", md)
    return re.sub(r"`[^`\n]*`", " ", md)


@pytest.mark.parametrize("name", SHOWN)
def test_markdown_has_math_not_code(name):
    system = compile_model(MODELS / f"{name}.phm", CompileOptions(numeric=False)).system
    md = render_system(system, "markdown")
    assert md.count("$$") >= 2 and md.count("$$") % 2 == 0
    code = [line for line in _prose(md).splitlines() if CODE.search(line)]
    assert not code, f"equations as code in the markdown of {name}: {code[:3]}"
    for block in re.findall(r"\$\$(.*?)\$\$", md, flags=re.S):
        assert block.count("{") == block.count("}") and "\n" not in block
    latex = render_system(system, "latex")
    for block in re.findall(r"\$\$(.*?)\$\$", md, flags=re.S):  # the same LaTeX as `show --format latex`
        assert block.split(" = ", 1)[-1] in latex


def test_every_rich_output_of_a_model_is_math():
    m = pdsl.load(MODELS / "driven_pendulum.phm")
    eq = m.show()
    for md in (m._repr_markdown_(), eq._repr_markdown_(), m.system._repr_markdown_()):
        assert md.startswith("# model DrivenPendulum")
        assert r"\ddot{\theta}" in md and "der(der(theta))" not in md
    assert "\\begin{equation}" in m._repr_latex_()
    assert "der(der(theta))" in str(eq)  # text stays text (print, the terminal)


def test_fit_notes_keep_their_stars():
    from pdsl.api import _md_text

    assert _md_text("only m1*l1^2 and k_x*c are determined") == "only m1\\*l1^2 and k\\_x\\*c are determined"


def test_a_notebook_renders_math_through_nbconvert(tmp_path):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    nbconvert = pytest.importorskip("nbconvert")
    pytest.importorskip("ipykernel")
    model = MODELS / "step_pendulum.phm"
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(src) for src in (
        f"import pdsl\nm = pdsl.load({str(model)!r})\nm",
        "m.show()",
        "m.system",
        "run = m.simulate(1.0, 0.25)\nrun",
    )]
    nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = [o for c in nb.cells for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    markdown = [o.data["text/markdown"] for o in outputs if "text/markdown" in o.get("data", {})]
    assert len(markdown) == 4  # the model, its equations, its system, the run
    page, _ = nbconvert.HTMLExporter().from_notebook_node(nb)
    text = html.unescape(page)
    assert "der(der(theta))" not in text and "der(theta)*" not in text
    blocks = [b for md in markdown[:3] for b in re.findall(r"\$\$.*?\$\$", md, flags=re.S)]
    assert blocks and all(b in text for b in blocks)  # the math reaches MathJax as written, not as code
    assert r"\ddot{\theta}" in text and 'data-mime-type="text/markdown"' in page
    md_page, _ = nbconvert.MarkdownExporter().from_notebook_node(nb)
    assert all(b in md_page for b in blocks) and "der(der(theta))" not in md_page
