"""The compiled right-hand side's cache key is cheap (the oracle's graph once, never the derived Jacobian), a
library too large to build in reasonable time is not built (the VM runs, and says why), and the block-triangular
solve (pdsl.backend.linsolve) keeps a kinematic tie's 3×3 block from QR-factorising the whole system (issue 30)."""

from __future__ import annotations

from pathlib import Path

import casadi as ca
import numpy as np
import pytest

from pdsl.backend import linsolve
from pdsl.pipeline import compile_model
from pdsl.sim import compiled, dispatch
from pdsl.sim.simulate import simulate as _simulate


def simulate(num, *args, **kw):
    """These tests are about CVODES' (IDAS') compiled right-hand side: that integrator unless a test names another."""
    return _simulate(num, *args, **{"integrator": "idas" if num.nz else "cvodes", **kw})

MODELS = Path(__file__).resolve().parents[2] / "models"


@pytest.fixture(autouse=True)
def fresh(monkeypatch):
    monkeypatch.setattr(compiled, "_LOADED", {})
    monkeypatch.setattr(compiled, "_GRID", {})
    monkeypatch.setattr(dispatch, "_INTEGRATORS", {})


def _integrator(n_links: int = 1):
    x = ca.SX.sym("x", 2)
    p = ca.SX.sym("p")
    ode = ca.vertcat(x[1], -p * ca.sin(x[0]))
    opts = {"abstol": 1e-10, "reltol": 1e-8, "linear_multistep_method": "adams"}
    return ca.integrator("F", "cvodes", {"x": x, "p": p, "ode": ode}, 0.0, [0.0, 1.0], opts), opts


def test_key_hashes_the_oracle_never_the_derived_functions(monkeypatch):
    F, opts = _integrator()
    funcs = compiled._library_functions(F, opts)
    key = compiled._key(funcs, "cc", F.oracle(), {**opts, "plugin": "cvodes"})
    seen = []
    real = ca.Function.serialize

    def spy(f, *a):
        seen.append(f.name())
        return real(f, *a)

    monkeypatch.setattr(ca.Function, "serialize", spy)
    assert compiled._key(funcs, "cc", F.oracle(), {**opts, "plugin": "cvodes"}) == key  # deterministic
    assert seen == [F.oracle().name()]  # one graph serialised: the oracle, not daeF nor jacF
    # tolerances share a library; the compiler, the plugin and the shaping options do not
    assert compiled._key(funcs, "cc", F.oracle(), {**opts, "reltol": 1e-3, "plugin": "cvodes"}) == key
    assert compiled._key(funcs, "gcc", F.oracle(), {**opts, "plugin": "cvodes"}) != key
    assert compiled._key(funcs, "cc", F.oracle(), {**opts, "plugin": "idas"}) != key
    assert compiled._key(funcs, "cc", F.oracle(), {**opts, "plugin": "cvodes",
                                                   "nonlinear_solver_iteration": "functional"}) != key


@pytest.mark.skipif(compiled.find_compiler() is None, reason="no C compiler")
def test_too_large_to_build_falls_back_to_the_vm_and_says_why(monkeypatch):
    num = compile_model(MODELS / "double_pendulum.phm", cache=False).numeric
    monkeypatch.setattr(compiled, "BUILD_S_MAX", 0.01)  # every library is "too large"
    res = simulate(num, np.linspace(0.0, 0.1, 11), compile="yes")
    assert res.info["rhs"].startswith("CasADi VM (not compiled: ")
    assert "would take a C build of" in res.info["rhs"]


@pytest.mark.skipif(compiled.find_compiler() is None, reason="no C compiler")
def test_a_long_build_says_so_on_stderr(monkeypatch, capsys, tmp_path):
    num = compile_model(MODELS / "double_pendulum.phm", cache=False).numeric
    monkeypatch.setattr(compiled, "PROGRESS_S", 0.0)
    simulate(num, np.linspace(0.0, 0.1, 11), compile="yes")
    assert "pdsl: compiling the right-hand side to C:" in capsys.readouterr().err


def _tied_block(n: int = 60, seed: int = 0):
    """A lower-triangular sparse n×n matrix whose last three unknowns are coupled (a 3×3 block), stored dense
    with explicit zeros as the lowering's A is."""
    rng = np.random.default_rng(seed)
    M = np.tril(rng.normal(size=(n, n)) * (rng.random((n, n)) < 0.08))
    np.fill_diagonal(M, 2.0 + rng.random(n))
    M[n - 3:, n - 3:] = rng.normal(size=(3, 3)) + 3 * np.eye(3)
    return M


def test_block_solve_matches_and_stays_small():
    M = _tied_block()
    n = M.shape[0]
    A = ca.SX.sym("a", n, n)
    b = ca.SX.sym("b", n)
    A_sx = ca.SX(n, n)
    for i, j in zip(*np.nonzero(M)):
        A_sx[i, j] = A[i, j]
    A_dense = ca.densify(A_sx)  # explicit zeros, as to_casadi gives it
    ours = ca.Function("ours", [A, b], [linsolve.solve(A_dense, b)])
    theirs = ca.Function("theirs", [A, b], [ca.solve(A_dense, b)])
    rhs = np.arange(1.0, n + 1)
    expected = np.linalg.solve(M, rhs)
    assert np.allclose(np.asarray(ours(M, rhs)).ravel(), expected, rtol=1e-12, atol=1e-12)
    assert np.allclose(np.asarray(theirs(M, rhs)).ravel(), expected, rtol=1e-9, atol=1e-9)
    assert linsolve.largest_block(ca.sparsify(A_sx).sparsity()) == 3
    assert ours.n_instructions() * 20 < theirs.n_instructions()  # CasADi QR-factorises all n columns


def test_triangular_systems_keep_casadis_graph():
    n = 8
    A = ca.SX.sym("a", n, n)
    L = ca.tril(A)
    b = ca.SX.sym("b", n)
    ours = ca.Function("ours", [A, b], [linsolve.solve(L, b)])
    theirs = ca.Function("theirs", [A, b], [ca.solve(L, b)])
    assert ours.n_instructions() == theirs.n_instructions()
    M = np.tril(np.random.default_rng(1).normal(size=(n, n))) + 4 * np.eye(n)
    assert np.array_equal(np.asarray(ours(M, np.ones(n))), np.asarray(theirs(M, np.ones(n))))
