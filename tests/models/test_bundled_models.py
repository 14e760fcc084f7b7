"""Every bundled model documents itself, checks, and compiles to the expected formalism."""

from __future__ import annotations

from pathlib import Path

import pytest

from pdsl.cli.main import main
from pdsl.pipeline import compile_model, load_models

MODELS = Path(__file__).resolve().parents[2] / "models"
EXPECTED = {
    "henon_heiles": ("HenonHeiles", "hamiltonian", 4),
    "double_well": ("DoubleWell", "hamiltonian", 2),
    "coupled_oscillator": ("CoupledOscillator", "hamiltonian", 2),
    "double_pendulum": ("DoublePendulum", "lagrangian", 4),
    "cart_pole": ("CartPole", "lagrangian", 4),
    "cucker_smale": ("CuckerSmale", "plain", 60),
}


def test_the_bundled_set():
    assert set(EXPECTED) <= {p.stem for p in MODELS.glob("*.phm")}


@pytest.mark.parametrize("stem", sorted(EXPECTED))
def test_header_comment(stem):
    lines = (MODELS / f"{stem}.phm").read_text(encoding="utf-8").splitlines()
    header = []
    for line in lines:
        if not line.startswith("#"):
            break
        header.append(line)
    text = "\n".join(header)
    assert len(header) >= 3, f"{stem}: the file starts with a comment header"
    assert "BENCHMARKS.md" in text, f"{stem}: the header names its BENCHMARKS section"
    assert "Demonstrates" in text, f"{stem}: the header says what the model demonstrates"


@pytest.mark.parametrize("stem", sorted(EXPECTED))
def test_check_command(stem, capsys):
    assert main(["check", str(MODELS / f"{stem}.phm")]) == 0
    out = capsys.readouterr().out
    name, formalism, _ = EXPECTED[stem]
    assert out.startswith("ok") and name in out and formalism in out


@pytest.mark.parametrize("stem", sorted(s for s in EXPECTED if s != "cucker_smale"))
def test_compiles_to_expected_system(stem):
    name, formalism, nx = EXPECTED[stem]
    c = compile_model(MODELS / f"{stem}.phm")
    assert c.model.name == name and c.system.formalism == formalism and c.numeric.nx == nx
    assert c.numeric.rhs is not None and c.numeric.energy is not None
    assert all(s.start is not None for s in c.system.states if not s.name.startswith("der("))


def test_cucker_smale_const_override_is_checked():
    """--const N=... with the file's 30-entry start arrays must fail with a located diagnostic, not crash."""
    from pdsl.diagnostics import PdslError

    with pytest.raises(PdslError):
        load_models(MODELS / "cucker_smale.phm", consts={"N": 5})
