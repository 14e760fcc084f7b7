"""LANGUAGE.md §8 (acceptance cases) passes `pdsl check`; §9 (composition) is refused cleanly.

The examples are read from ``../shared/LANGUAGE.md`` when the checkout has it beside
it (as CI does), so a change to the language document is tested at once. A copy kept
next to this file (``language_section8.phm``, ``language_section9.phm``) is always
tested too, so these tests never skip silently.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pdsl.cli.main import main
from pdsl.diagnostics import PdslError
from pdsl.pipeline import load_models

REPO = Path(__file__).resolve().parents[2]
SHARED_LANGUAGE = REPO.parent / "shared" / "LANGUAGE.md"

HERE = Path(__file__).resolve().parent
EMBEDDED_SECTION_8 = (HERE / "language_section8.phm").read_text(encoding="utf-8")
EMBEDDED_SECTION_9 = (HERE / "language_section9.phm").read_text(encoding="utf-8")


def _fenced_blocks(markdown: str, section: int) -> list[str]:
    """The ``` blocks of one numbered section (``## 8. ...``) of a markdown file."""
    parts = re.split(r"^## (\d+)\.", markdown, flags=re.M)
    for number, body in zip(parts[1::2], parts[2::2]):
        if int(number) == section:
            return re.findall(r"^```[^\n]*\n(.*?)^```", body, flags=re.M | re.S)
    return []


def _models(text: str) -> dict[str, str]:
    """Split a block of ``model ... end`` definitions into one text per model."""
    found = re.findall(r"^(model (\w+).*?^end\s*$)", text, flags=re.M | re.S)
    return {name: body + "\n" for body, name in found}


def _sources() -> dict[str, str]:
    sources = {"embedded": EMBEDDED_SECTION_8}
    if SHARED_LANGUAGE.is_file():
        blocks = _fenced_blocks(SHARED_LANGUAGE.read_text(encoding="utf-8"), 8)
        sources["shared"] = "\n".join(blocks)
    return sources


CASES = [(origin, name, body) for origin, text in _sources().items() for name, body in _models(text).items()]


def test_embedded_copy_has_every_example():
    assert list(_models(EMBEDDED_SECTION_8)) == [
        "DoublePendulum", "Chain", "Gyroscope", "RigidRotor", "HenonHeiles",
        "MassSpringDamper", "RLC", "RollingDisk", "LearnedPendulum",
    ]


def test_shared_copy_is_found_when_present():
    if SHARED_LANGUAGE.is_file():
        assert _models(_sources()["shared"]), "LANGUAGE.md §8 has no model blocks"


@pytest.mark.parametrize("origin, name, body", CASES, ids=[f"{o}-{n}" for o, n, _ in CASES])
def test_example_passes_check(tmp_path, capsys, origin, name, body):
    path = tmp_path / f"{name}.phm"
    path.write_text(body, encoding="utf-8")
    assert main(["check", str(path)]) == 0, capsys.readouterr().err
    assert f"ok  {name}" in capsys.readouterr().out


@pytest.mark.parametrize("origin", sorted(_sources()))
def test_all_examples_in_one_file(tmp_path, capsys, origin):
    path = tmp_path / "section8.phm"
    path.write_text(_sources()[origin], encoding="utf-8")
    assert main(["check", str(path)]) == 0, capsys.readouterr().err


def _section_9() -> str:
    if SHARED_LANGUAGE.is_file():
        blocks = _fenced_blocks(SHARED_LANGUAGE.read_text(encoding="utf-8"), 9)
        if blocks:
            return blocks[0]
    return EMBEDDED_SECTION_9


@pytest.mark.parametrize("text", [EMBEDDED_SECTION_9, _section_9()], ids=["embedded", "shared"])
def test_composition_checks(tmp_path, capsys, text):
    path = tmp_path / "links.phm"
    path.write_text(text, encoding="utf-8")
    assert main(["check", str(path)]) == 0, capsys.readouterr().err
    models = {m.name: m for m in load_models(path)}
    names = {b.name for b in models["TwoLinks"].bodies}
    assert names == {"upper.bob", "lower.bob"}
    assert {p.name for p in models["TwoLinks"].params} == {"upper.m", "upper.l", "lower.m", "lower.l"}


def test_a_missing_import_is_located(tmp_path, capsys):
    path = tmp_path / "a.phm"
    path.write_text('import "links.phm"\n' + EMBEDDED_SECTION_9, encoding="utf-8")
    assert main(["check", str(path)]) == 2
    err = capsys.readouterr().err
    assert "error[ImportNotFound]" in err and "a.phm:1:1" in err
    assert "Traceback" not in err and "internal error" not in err
