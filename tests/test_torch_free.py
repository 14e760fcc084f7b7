"""Without the `[nn]` extra: check, show, simulate, compile (with fitted params) and a Gauss–Newton fit
work, and none of them imports torch; `check` imports no numeric backend at all.

A clean venv without torch is what users of the core package have; here a child process refuses
every ``import torch`` (a meta-path finder raising ImportError, what a missing package does), so
the test fails if any of these commands reaches torch, directly or through another module.
"""

from __future__ import annotations

import json
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


def test_core_commands_run_without_torch(tmp_path):
    model = MODELS / "spring_pendulum.phm"
    rc, out = _run("check", str(model), cwd=tmp_path)
    assert rc == 0, out
    assert "MODULES sympy" in out and "casadi" not in out.split("MODULES")[1]  # check needs no numeric backend
    rc, out = _run("show", str(MODELS / "double_pendulum.phm"), cwd=tmp_path)
    assert rc == 0, out
    data = tmp_path / "data.csv"
    rc, out = _run("simulate", str(model), "--t-end", "0.6", "--dt", "0.03", "--random-init", "3", "--seed", "1",
                   "--param", "m1=1.3", "-o", str(data), cwd=tmp_path)
    assert rc == 0, out
    rc, out = _run("fit", str(model), "--data", str(data), "--free", "m1", "--method", "gauss-newton", "--epochs", "5",
                   "-o", str(tmp_path / "fit"), "--quiet", cwd=tmp_path)
    assert rc == 0, out
    values = json.loads((tmp_path / "fit" / "params.json").read_text())["values"]
    assert abs(values["m1"] - 1.3) < 1e-3
    rc, out = _run("compile", str(model), "--params", str(tmp_path / "fit" / "params.json"), "-o", str(tmp_path / "c"),
                   cwd=tmp_path)
    assert rc == 0, out
    for line in out.splitlines():
        if line.startswith("MODULES"):
            assert "torch" not in line.split(), out


# issue 17's commands: FMU export, tables in other formats, a sweep
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
