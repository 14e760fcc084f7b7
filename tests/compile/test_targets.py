"""`pdsl compile`: every target agrees with the in-process Functions; output is deterministic."""

import importlib.util
import json
import shutil
import subprocess

import casadi as ca
import numpy as np
import pytest

from pdsl.cli.main import main
from pdsl.compile.targets import compile_to
from pdsl.pipeline import compile_model

HAMILTONIAN = """
model Osc "non-separable oscillator"
  param alpha = 0.5
  coord q = 1
  momentum p = 0.2
  hamiltonian p^2/2 + q^2/2 + alpha*p*q
end
"""

# implicit (mass-matrix) form with a holonomic constraint and a feedback input
LAGRANGIAN = """
model Bead "pendulum in x, y with a constraint, driven"
  param m = 1.3, l = 0.9, g = 9.81, c = 0.1
  coord x = 0.9, y = 0
  input F = -c*der(x)
  lagrangian m/2*(der(x)^2 + der(y)^2) - m*g*y
  constraint x^2 + y^2 = l^2
  force F on x
end
"""

PLAIN = """
model Decay
  param k = 0.7
  input u
  var x = 1, v = 0
  der(x) = v
  der(v) = -k*x - 0.1*v + u
end
"""


CARTESIAN = """
model Chain "two point masses on links (Cartesian, projection form)"
  space 2
  param m1 = 1.3, m2 = 0.7, g = 9.81
  body b1 = point(mass = m1)
  body b2 = point(mass = m2)
  link ground, b1, length = 1.0
  link b1, b2, length = 1.2
  gravity g
end
"""

PORT_HAMILTONIAN = """
model MSD "p-H network, force input"
  param m = 1.0, k = 4.0, d = 0.3
  input F
  flow_store mass(p) energy p^2/(2*m)
  effort_store spring(q) energy k*q^2/2
  resistive damper: f = d*e
  flow_source push = F
  junction common_effort(mass, spring, damper, -push)
end
"""

ALL = [HAMILTONIAN, LAGRANGIAN, PLAIN, CARTESIAN, PORT_HAMILTONIAN]
IDS = ["hamiltonian", "lagrangian", "plain", "cartesian", "port-hamiltonian"]


def _compiled(tmp_path, text, name):
    path = tmp_path / f"{name}.phm"
    path.write_text(text)
    return compile_model(path)


def _points(num, rng, n=20):
    for _ in range(n):
        yield (
            rng.uniform(0, 2),
            rng.normal(size=num.nx),
            num.p_default * (1 + 0.1 * rng.normal(size=len(num.p_default))),
            rng.normal(size=len(num.u_names)),
        )


@pytest.mark.parametrize("text", ALL, ids=IDS)
def test_casadi_target_roundtrip(tmp_path, text):
    c = _compiled(tmp_path, text, "m")
    compile_to(c.numeric, "casadi", tmp_path / "out")
    rhs = ca.Function.load(str(tmp_path / "out" / "rhs.casadi"))
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["states"] == list(c.numeric.x_names)
    rng = np.random.default_rng(0)
    for t, x, p, u in _points(c.numeric, rng):
        a = np.array(rhs(t, x, p, u)).ravel()
        b = np.array(c.numeric.rhs(t, x, p, u)).ravel()
        assert np.max(np.abs(a - b)) <= 1e-12 * max(1, np.max(np.abs(b)))


@pytest.mark.parametrize("text", ALL, ids=IDS)
def test_python_target_matches(tmp_path, text):
    c = _compiled(tmp_path, text, "m")
    files = compile_to(c.numeric, "python", tmp_path / "py")
    module_file = next(f for f in files if f.suffix == ".py")
    assert "casadi" not in module_file.read_text() and "pdsl" not in module_file.read_text().split('"""')[2]
    spec = importlib.util.spec_from_file_location("generated_model", module_file)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    rng = np.random.default_rng(1)
    for t, x, p, u in _points(c.numeric, rng):
        a = mod.rhs(t, x, p, u)
        b = np.array(c.numeric.rhs(t, x, p, u)).ravel()
        assert np.max(np.abs(a - b)) <= 1e-12 * max(1, np.max(np.abs(b)))
        if c.numeric.energy is not None:
            assert abs(mod.energy(t, x, p, u) - float(c.numeric.energy(t, x, p, u))) <= 1e-12 * max(1, abs(mod.energy(t, x, p, u)))


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler")
@pytest.mark.parametrize("text", ALL, ids=IDS)
def test_c_target_compiles_runs_and_matches(tmp_path, text):
    c = _compiled(tmp_path, text, "m")
    compile_to(c.numeric, "c", tmp_path / "c")
    lib = ca.external("rhs", str(tmp_path / "c" / "libmodel.so"))
    rng = np.random.default_rng(2)
    for t, x, p, u in _points(c.numeric, rng):
        a = np.array(lib(t, x, p, u)).ravel()
        b = np.array(c.numeric.rhs(t, x, p, u)).ravel()
        assert np.max(np.abs(a - b)) <= 1e-12 * max(1, np.max(np.abs(b)))
    run = subprocess.run([str(tmp_path / "c" / "example")], capture_output=True, text=True, check=True)
    rows = [list(map(float, line.split(","))) for line in run.stdout.strip().splitlines()]
    assert len(rows) == 101 and len(rows[0]) == 1 + c.numeric.nx
    assert np.allclose(rows[0][1:], c.numeric.x_start)


def test_compile_is_deterministic(tmp_path):
    path = tmp_path / "osc.phm"
    path.write_text(HAMILTONIAN)
    for k in (1, 2):
        assert main(["compile", str(path), "--target", "python", "-o", str(tmp_path / f"py{k}")]) == 0
        assert main(["compile", str(path), "--target", "casadi", "-o", str(tmp_path / f"ca{k}")]) == 0
    for kind in ("py", "ca"):
        a = sorted((tmp_path / f"{kind}1").iterdir())
        b = sorted((tmp_path / f"{kind}2").iterdir())
        assert [f.name for f in a] == [f.name for f in b]
        for fa, fb in zip(a, b):
            assert fa.read_bytes() == fb.read_bytes(), fa.name


def test_bad_target_is_a_user_error(tmp_path, capsys):
    path = tmp_path / "osc.phm"
    path.write_text(HAMILTONIAN)
    assert main(["compile", str(path), "--target", "fortran", "-o", str(tmp_path / "x")]) == 2
    assert "error[BadOption]" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()
