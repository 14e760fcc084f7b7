"""`pdsl show` of every bundled model is unchanged by the one-IR refactoring (formalism plugins, the
registry, structural passes in one module).

The texts in tests/models/show_golden/ were recorded with the pre-plugin pipeline (commit 9d2779c):
``NAME.raw.txt`` is ``pdsl show models/NAME.phm --raw`` — the IR exactly as derived, for every bundled
model (a ``std:`` part's path relative to the checkout); ``NAME.txt`` is the simplified display, kept for the models whose display simplification
finishes far inside its time budget (a budget-limited simplification could differ on a slower machine).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pdsl.cli.main import main

REPO = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).resolve().parent / "show_golden"
RAW = sorted(p.name[: -len(".raw.txt")] for p in GOLDEN.glob("*.raw.txt"))
SIMPLIFIED = sorted(p.stem for p in GOLDEN.glob("*.txt") if not p.name.endswith(".raw.txt"))


def test_every_bundled_model_has_a_golden_text():
    assert RAW == sorted(p.stem for p in (REPO / "models").glob("*.phm"))
    assert len(SIMPLIFIED) >= 10


def _show(capsys, monkeypatch, *argv) -> str:
    monkeypatch.chdir(REPO)
    assert main(["show", *argv]) == 0
    # a `std:` part's line is cited with the library's absolute path: the texts hold it relative to the checkout
    # (recorded as `pdsl show models/NAME.phm --raw | sed "s#$PWD/##g"`)
    return capsys.readouterr().out.replace(f"{REPO}{os.sep}", "")


@pytest.mark.parametrize("name", RAW)
def test_raw_show_text_is_unchanged(name, capsys, monkeypatch):
    assert _show(capsys, monkeypatch, f"models/{name}.phm", "--raw") == (GOLDEN / f"{name}.raw.txt").read_text(encoding="utf-8")


@pytest.mark.parametrize("name", SIMPLIFIED)
def test_show_text_is_unchanged(name, capsys, monkeypatch):
    assert _show(capsys, monkeypatch, f"models/{name}.phm") == (GOLDEN / f"{name}.txt").read_text(encoding="utf-8")
