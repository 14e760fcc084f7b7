"""Numbers that overflow (or underflow) a double in the constraint check of the Cartesian lowering.

Before: ``pdsl show``/``simulate`` of ``link ground, b, length = 1e308`` ended in
``internal error: LinAlgError: SVD did not converge`` (exit 1), and a mass of ``1e-320``
(a subnormal double) in ``internal error: LinAlgError: Eigenvalues did not converge``.
Now each is a located user error (exit 2) at the statement that holds the number.
"""

from __future__ import annotations

import ast
import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

from pdsl.cli.main import main as cli_main
from pdsl.diagnostics import PdslError
from pdsl.lower import lower
from pdsl.pipeline import load_models

ROOT = Path(__file__).resolve().parents[2]
PENDULUM3 = (ROOT / "models" / "pendulum3.phm").read_text(encoding="utf-8")


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def _run(capsys, *argv: str) -> tuple[int, str]:
    code = cli_main(list(argv))
    return code, capsys.readouterr().err


def _located(err: str, path: Path, line: int, code: str) -> None:
    assert "internal error" not in err and "Traceback" not in err, err
    assert f"{path}:{line}:" in err and f"error[{code}]" in err, err
    assert "^" in err and "hint:" in err, err


HUGE_LINK = """model Huge
  space 2
  param L = 1e308
  body b = point(mass = 1)
  link ground, b, length = L
  gravity 9.81
end
"""

FAR_ANCHOR = """model Far
  space 2
  body b = point(mass = 1)
  link ground.at([1e200, 0]), b, length = 1
  gravity 9.81
end
"""


@pytest.mark.parametrize("command", ["show", "simulate"])
def test_link_length_whose_square_overflows_is_located(tmp_path, capsys, command):
    path = _write(tmp_path, "huge.phm", HUGE_LINK)
    out = tmp_path / "out.csv"
    extra = ["--init", "b.x=1", "--t-end", "0.1", "--dt", "0.05", "-o", str(out)] if command == "simulate" else []
    code, err = _run(capsys, command, str(path), *extra)
    assert code == 2
    _located(err, path, 5, "NumericOverflow")


def test_literal_link_length_1e308_is_located(tmp_path, capsys):
    """An exact literal (10**308, squared 10**616: an int no double holds) takes the same path."""
    path = _write(tmp_path, "p3.phm", PENDULUM3.replace("link ground, b[1], length = l[1]", "link ground, b[1], length = 1e308"))
    code, err = _run(capsys, "show", str(path))
    assert code == 2
    line = next(i for i, s in enumerate(path.read_text().splitlines(), 1) if "1e308" in s)
    _located(err, path, line, "NumericOverflow")


def test_anchor_far_from_origin_is_located(tmp_path, capsys):
    path = _write(tmp_path, "far.phm", FAR_ANCHOR)
    code, err = _run(capsys, "show", str(path))
    assert code == 2
    _located(err, path, 4, "NumericOverflow")


def test_subnormal_mass_literal_is_refused_by_check(tmp_path, capsys):
    """``1e-320`` is a subnormal double: refused where it is written, already by `pdsl check`."""
    path = _write(tmp_path, "p3.phm", PENDULUM3.replace("param m[1..N] = [1.0822,", "param m[1..N] = [1e-320,"))
    for command in ("check", "show"):
        code, err = _run(capsys, command, str(path))
        assert code == 2, command
        _located(err, path, 14, "BadNumber")
        assert err.count("error[") == 1, err  # no cascade ("the mass ... depends on m[1]")


def test_mass_expression_below_the_doubles_is_refused_by_check(tmp_path, capsys):
    path = _write(tmp_path, "p3.phm", PENDULUM3.replace("point(mass = m[i])", "point(mass = m[i]*1e-200*1e-200)"))
    code, err = _run(capsys, "check", str(path))
    assert code == 2
    _located(err, path, 15, "BadArgument")
    assert "normal floating-point" in err


def test_subnormal_mass_default_reaching_the_lowering_is_located(tmp_path):
    """A default set past the resolver (as --param or a fit would): the inverse mass overflows."""
    path = _write(tmp_path, "p3.phm", PENDULUM3)
    (model,) = load_models(path)
    params = tuple(dataclasses.replace(p, default=1e-320) if p.name == "m[1]" else p for p in model.params)
    model = dataclasses.replace(model, params=params)
    for formulation in ("hamiltonian", "lagrangian"):
        with pytest.raises(PdslError) as info:
            lower(model, formulation)
        (d,) = info.value.diagnostics
        assert d.code == "NumericOverflow" and "inverse mass of `b[1]`" in d.message
        assert d.span.line == 15  # the body statement


def test_huge_hinge_axis_is_only_a_direction(tmp_path, capsys):
    """axis = [1e200, 1e200, 0] is the direction [1, 1, 0]: it lowers, no overflow."""
    text = """model Axis
  space 3
  body r = rigid(dim = 3, mass = 1, moments = [1, 1, 1])
  hinge ground, r, axis = [1e200, 1e200, 0]
  gravity 9.81
end
"""
    path = _write(tmp_path, "axis.phm", text)
    code, err = _run(capsys, "show", str(path))
    assert code == 0, err


def test_lowering_imports_no_numeric_backend():
    """The rank check of the Cartesian lowering is numpy: lowering a model imports no CasADi."""
    for path in (ROOT / "pdsl" / "lower").glob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                assert not any(a.name.split(".")[0] == "casadi" for a in node.names), path
            if isinstance(node, ast.ImportFrom):
                assert not (node.module or "").startswith(("casadi", "backend")), (path, node.module)
    script = (
        "import sys\n"
        "from pdsl.pipeline import load_models\n"
        "from pdsl.lower import lower\n"
        f"(m,) = load_models({str(ROOT / 'models' / 'pendulum3.phm')!r})\n"
        "lower(m, 'hamiltonian'); lower(m, 'lagrangian')\n"
        "assert 'casadi' not in sys.modules, 'casadi imported'\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True, cwd=ROOT)
