"""Without the `[nn]` extra, issue 17's commands work and import no torch: FMU export, a sweep, Parquet/.mat out."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
MODELS = REPO / "models"

_CHILD = r"""
import importlib.abc, sys

class _NoTorch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ImportError(f"No module named {name!r} (torch-free test)")
        return None

sys.meta_path.insert(0, _NoTorch())
from pdsl.cli.main import main

code = main(sys.argv[2:])
print("MODULES", " ".join(m for m in ("torch", "casadi", "sympy") if m in sys.modules))
sys.exit(code)
"""


def _run(*argv: str, cwd: Path) -> tuple[int, str]:
    p = subprocess.run([sys.executable, "-c", _CHILD, "--", *argv], cwd=cwd, capture_output=True, text=True, timeout=300)
    return p.returncode, p.stdout + p.stderr


def _no_torch(out: str) -> None:
    for line in out.splitlines():
        if line.startswith("MODULES"):
            assert "torch" not in line.split(), out


def test_interop_commands_run_without_torch(tmp_path):
    model = str(MODELS / "double_pendulum.phm")
    if shutil.which("cc") or shutil.which("gcc"):
        rc, out = _run("compile", model, "--target", "fmu", "-o", str(tmp_path / "dp.fmu"), cwd=tmp_path)
        assert rc == 0, out
        _no_torch(out)
    else:
        pytest.skip("no C compiler for the FMU")
    for name in ("dp.mat", "dp.parquet"):
        rc, out = _run("simulate", model, "--t-end", "0.2", "--dt", "0.1", "-o", str(tmp_path / name), cwd=tmp_path)
        assert rc == 0, out
        _no_torch(out)
    rc, out = _run("sweep", model, "--grid", "m1=1,2", "--t-end", "0.2", "--dt", "0.1", "-o", str(tmp_path / "sw"),
                   cwd=tmp_path)
    assert rc == 0, out
    _no_torch(out)
    assert (tmp_path / "sw" / "summary.csv").exists()
