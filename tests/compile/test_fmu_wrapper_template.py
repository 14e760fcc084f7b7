"""The FMU's C wrapper is package data (pdsl/compile/fmu_wrapper.c, read with importlib.resources), and the
source written into an FMU is that file with every placeholder filled (issue 35)."""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path

import pytest

from pdsl.compile import fmu
from pdsl.pipeline import compile_model

MODELS = Path(__file__).resolve().parents[2] / "models"
PLACEHOLDER = re.compile(r"@[A-Z]+@")


def test_the_template_is_package_data_with_the_placeholders_the_builder_fills():
    text = (resources.files("pdsl.compile") / "fmu_wrapper.c").read_text(encoding="utf-8")
    assert text == fmu._wrapper_template()
    assert text.startswith("/* FMI 2.0 wrapper")
    assert set(PLACEHOLDER.findall(text)) == {"@HEAD@", "@TABLES@", "@EVENTS@", "@EVAL@", "@FWD@", "@MODES@",
                                              "@SWITCHES@"}
    assert "fmi2DoStep" in text and "fmi2GetDerivatives" in text


@pytest.mark.parametrize("model,events", [("pendulum1", 0), ("bouncing_ball", 1), ("friction_oscillator", 1)])
def test_the_written_source_has_no_placeholder_left(model, events):
    num = compile_model(str(MODELS / f"{model}.phm")).numeric
    prefix = "pdsl_test_"
    lay = fmu.layout(num)
    ev, fwd = fmu._functions(num, lay, prefix)
    source = fmu.wrapper_source(num, lay, ev, fwd, prefix, "{guid}", fmu._time_events(num, prefix),
                                fmu._event_functions(num, prefix))
    assert not PLACEHOLDER.findall(source)
    assert f"#define NX {num.nx}\n" in source and f"{prefix}eval" in source
    assert f"#define HAS_EVENTS {events}\n" in source  # switching surfaces count as events here (friction)
