"""pdsl.cli.startup: the stand-in for sympy.tensor.tensor saves its import (and sympy.combinatorics') in a CLI
process, and gives way to the real module as soon as anything but the Add.flatten test asks for it."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = r'''
import sys
from pdsl.cli.startup import defer_sympy_tensor
defer_sympy_tensor()
import sympy as sp
x, y = sp.symbols("x y")
assert str(sp.Add(x, y, 2 * x)) == "3*x + y" and str(sp.expand((x + y) ** 2)) == "x**2 + 2*x*y + y**2"
assert "sympy.combinatorics" not in sys.modules
from sympy.tensor.tensor import TensorIndexType, TensorHead, TensExpr, TensAdd, tensor_indices
L = TensorIndexType("L")
i = tensor_indices("i", L)
A, B = TensorHead("A", [L]), TensorHead("B", [L])
e = sp.Add(A(i), B(i))  # Add.flatten now meets the real TensExpr and builds a tensor sum
assert isinstance(e, TensAdd) and isinstance(e, TensExpr) and str(e) == "A(i) + B(i)"
assert sys.modules["sympy.tensor.tensor"].TensExpr is TensExpr
print("ok")
'''


def test_stand_in_defers_the_import_and_gives_way_to_the_real_module():
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


def test_a_cli_simulate_never_imports_sympy_combinatorics(tmp_path):
    code = ("import sys; from pdsl.cli.main import main; rc = main(sys.argv[1:]); "
            "print('COMB' if 'sympy.combinatorics' in sys.modules else 'NOCOMB'); sys.exit(rc)")
    out = subprocess.run([sys.executable, "-c", code, "simulate", "models/double_pendulum.phm", "--t-end", "1", "--no-cache",
                          "-o", str(tmp_path / "o.csv")], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().endswith("NOCOMB")
