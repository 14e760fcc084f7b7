"""modelDescription.xml is XML 1.0 whatever the model's description holds (issue 26)."""

from __future__ import annotations

import shutil
import zipfile
from xml.etree import ElementTree as ET

import pytest

from pdsl.cli.main import main
from pdsl.compile.fmu import layout, model_description, xml_text
from pdsl.pipeline import compile_model

CONTROL = "bad \x01 \x1b[31m desc \x0c\x7f é \ud800 end"
MODEL = 'model Ctl "bad \x01 \x1b[31m desc \x0c\x7f é end"\n  param k = 1.0\n  var x = 1.0\n  der(x) = -k*x\nend\n'


def test_xml_text_replaces_what_xml_1_0_forbids():
    assert xml_text("tab\tnewline\ncr\r ok é ∑ \U0001f600") == "tab\tnewline\ncr\r ok é ∑ \U0001f600"
    assert xml_text(CONTROL) == "bad \ufffd \ufffd[31m desc \ufffd\x7f é \ufffd end"
    assert xml_text("\ufffe\uffff") == "\ufffd\ufffd"


def test_model_description_with_control_characters_parses(tmp_path):
    path = tmp_path / "ctl.phm"
    path.write_text(MODEL, encoding="utf-8")
    num = compile_model(str(path)).numeric
    xml = model_description(num, layout(num), "Ctl", "{00000000-0000-0000-0000-000000000000}", {}, ["fmu.c"])
    root = ET.fromstring(xml)  # not well-formed before: a raw U+0001 in an attribute
    assert root.get("description") == "bad \ufffd \ufffd[31m desc \ufffd\x7f é end"


@pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None, reason="an FMU needs a C compiler")
def test_fmu_of_a_model_with_control_characters_is_xml(tmp_path, capsys):
    path = tmp_path / "ctl.phm"
    path.write_text(MODEL, encoding="utf-8")
    out = tmp_path / "ctl.fmu"
    assert main(["compile", str(path), "--target", "fmu", "-o", str(out)]) == 0, capsys.readouterr().err
    with zipfile.ZipFile(out) as z:
        root = ET.fromstring(z.read("modelDescription.xml"))
    assert root.get("modelName") == "Ctl" and "\x01" not in root.get("description")
