"""The built wheel carries the grammar: install it apart from the checkout and run `pdsl check`."""

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "-w", str(out), "-q"],
        capture_output=True, text=True,
    )
    if proc.returncode != 0:
        pytest.fail("building the wheel failed:\n" + proc.stdout[-2000:] + proc.stderr[-2000:])
    (whl,) = out.glob("pdsl-*.whl")
    return whl


def test_wheel_contains_grammar(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    assert "pdsl/grammars/phm.lark" in names
    assert "pdsl/cli/main.py" in names


def test_installed_wheel_checks_a_model(wheel, tmp_path):
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(wheel)],
        check=True, capture_output=True,
    )
    model = tmp_path / "m.phm"
    model.write_text("model Osc\n  coord q = 1\n  momentum p\n  hamiltonian p^2/2 + q^2/2\nend\n")
    env = {**os.environ, "PYTHONPATH": str(target)}
    code = "import pdsl, pdsl.parse.parser as P; print(pdsl.__file__); print(P.grammar_path())"
    where = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, check=True)
    assert str(target) in where.stdout.splitlines()[0]
    assert str(target) in where.stdout.splitlines()[1]  # the grammar comes from the wheel, not the checkout
    proc = subprocess.run([sys.executable, "-m", "pdsl", "check", str(model)], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "Osc" in proc.stdout


def test_wheel_metadata_license_and_typing(wheel):
    """LICENSE and py.typed ship; the version has one source (pdsl/__init__.py); [nn] is a range, not a pin."""
    import pdsl

    zf = zipfile.ZipFile(wheel)
    names = zf.namelist()
    assert "pdsl/py.typed" in names
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    (meta_name,) = [n for n in names if n.endswith(".dist-info/METADATA")]
    meta = zf.read(meta_name).decode()
    assert f"Version: {pdsl.__version__}\n" in meta
    assert "License-Expression: MIT" in meta
    assert "Requires-Dist: torch>=2.2; extra == 'nn'" in meta
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert 'dynamic = ["version"]' in pyproject and "\nversion =" not in pyproject
    assert 'nn = ["torch>=2.2"]' in pyproject
    assert 'torch==2.13.0' in (ROOT / "run").read_text()  # the set-up pins the CPU build
