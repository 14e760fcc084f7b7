"""The IR's notebook display without the IR importing its display (issue 35): pdsl.show registers the renderer,
and pdsl.api's ``Model.system`` imports pdsl.show, so ``m.system`` renders as math in a fresh kernel."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT / "models" / "driven_pendulum.phm"


def _run(code: str) -> str:
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_a_fresh_process_renders_the_system_of_a_loaded_model():
    out = _run(f"import sys, pdsl\nm = pdsl.load({str(MODEL)!r})\nmd = m.system._repr_markdown_()\n"
               "print('pdsl.show' in sys.modules, md.startswith('# model DrivenPendulum'), r'\\ddot{\\theta}' in md)")
    assert out.split() == ["True", "True", "True"]


def test_the_ir_renders_through_what_pdsl_show_registers():
    out = _run("import sys\nfrom pdsl.pipeline import CompileOptions, compile_model\n"
               f"s = compile_model({str(MODEL)!r}, CompileOptions(numeric=False), cache=False).system\n"
               "print('pdsl.show' in sys.modules, s._repr_markdown_() is None)\n"
               "from pdsl.show import render_system\n"
               "print(s._repr_markdown_() == render_system(s, 'markdown'), s._repr_latex_() == render_system(s, 'latex'))")
    assert out.split() == ["False", "True", "True", "True"]  # no rich form until the display is loaded, then show's
