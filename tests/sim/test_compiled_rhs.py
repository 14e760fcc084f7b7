"""The compiled right-hand side (pdsl.sim.compiled): same trajectory as CasADi's VM, cached, chosen and reported;
a machine without a C compiler falls back to the VM (simulated here by hiding the compiler)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pdsl.cache import ModelCache, using
from pdsl.cli.main import main
from pdsl.diagnostics import PdslError
from pdsl.pipeline import compile_model
from pdsl.backend import native_lib
from pdsl.sim import compiled, dispatch
from pdsl.sim import simulate as sim
from pdsl.sim.simulate import cumulative_simpson, simulate as _simulate


def simulate(num, *args, **kw):
    """These tests are about CVODES' (IDAS') compiled right-hand side: that integrator unless a test names another."""
    return _simulate(num, *args, **{"integrator": "idas" if num.nz else "cvodes", **kw})

MODELS = Path(__file__).resolve().parents[2] / "models"
needs_cc = pytest.mark.skipif(compiled.find_compiler() is None, reason="no C compiler on this machine")


@pytest.fixture(autouse=True)
def fresh_process_state(monkeypatch):
    """Each test sees no library loaded in this process and no memoized integrator."""
    monkeypatch.setattr(compiled, "_LOADED", {})
    monkeypatch.setattr(compiled, "_GRID", {})
    monkeypatch.setattr(dispatch, "_INTEGRATORS", {})
    yield


@pytest.fixture(scope="module")
def pendulum():
    return compile_model(MODELS / "double_pendulum.phm", cache=False).numeric


GRID = np.linspace(0.0, 2.0, 201)


@needs_cc
def test_compiled_rhs_gives_the_vm_trajectory_to_the_last_bit(pendulum):
    vm = simulate(pendulum, GRID, rtol=1e-10, compile="no")
    cc = simulate(pendulum, GRID, rtol=1e-10, compile="yes")
    assert vm.info["rhs"].startswith("CasADi VM (--compile no")
    assert cc.info["rhs"].startswith("compiled C (")
    assert np.array_equal(vm.x, cc.x)
    assert np.array_equal(vm.energy, cc.energy) and np.array_equal(vm.power, cc.power)  # grid functions compiled too


@needs_cc
def test_chain_functional_iteration_and_constraints_match(tmp_path, monkeypatch):
    import pdsl.sim.runs as sim_module

    monkeypatch.setattr(sim_module, "FUNCTIONAL_FROM", 16)  # the chain's 20 states: functional iteration
    num = compile_model(MODELS / "pendulum5.phm", cache=False).numeric
    grid = np.linspace(0.0, 0.5, 51)
    vm = simulate(num, grid, x0={"b[1].x": 0.5}, compile="no")
    cc = simulate(num, grid, x0={"b[1].x": 0.5}, compile="yes")
    assert vm.info["iteration"] == "functional"  # 20 states ≥ the patched FUNCTIONAL_FROM
    assert np.array_equal(vm.x, cc.x) and np.array_equal(vm.constraint_rms, cc.constraint_rms)
    assert np.array_equal(vm.shown, cc.shown)


def test_no_compiler_falls_back_to_the_vm(pendulum, monkeypatch):
    monkeypatch.setattr(native_lib, "_COMPILER", [None])
    res = simulate(pendulum, GRID, compile="yes")
    assert res.info["rhs"] == "CasADi VM (no C compiler found ($CC, cc, gcc, clang))"
    ref = simulate(pendulum, GRID, compile="no")
    assert np.array_equal(res.x, ref.x)


def test_a_failing_compiler_falls_back_to_the_vm(pendulum, monkeypatch, tmp_path):
    bad = tmp_path / "cc"
    bad.write_text("#!/bin/sh\necho 'cc: internal error' >&2\nexit 3\n")
    bad.chmod(0o755)
    monkeypatch.setattr(native_lib, "_COMPILER", [str(bad)])
    res = simulate(pendulum, GRID, compile="yes")
    assert res.info["rhs"].startswith("CasADi VM (the C build failed, cc exited with 3: cc: internal error")
    assert np.array_equal(res.x, simulate(pendulum, GRID, compile="no").x)


def test_compiler_from_the_environment(monkeypatch):
    monkeypatch.setattr(native_lib, "_COMPILER", [])
    monkeypatch.setenv("CC", "no-such-compiler-pdsl")
    assert compiled.find_compiler() is None
    monkeypatch.setattr(native_lib, "_COMPILER", [])


def test_auto_keeps_the_vm_for_a_short_run_and_says_why(pendulum):
    res = simulate(pendulum, GRID, compile="auto")
    rhs = res.info["rhs"]
    if compiled.find_compiler() is None:
        assert rhs.startswith("CasADi VM (no C compiler found")
    else:  # ~500 evaluations: the saving is microseconds, the build a fraction of a second
        assert rhs.startswith("CasADi VM (~") and "rhs evaluations predicted" in rhs and "--compile yes" in rhs


@needs_cc
def test_library_is_cached_and_reused_by_auto(pendulum, tmp_path, monkeypatch):
    cache = ModelCache(tmp_path / "cache")
    with using(cache):
        first = simulate(pendulum, GRID, compile="yes")
        libs = sorted(p.name for p in (tmp_path / "cache").iterdir() if p.suffix == ".so")
        assert len(libs) == 2 and all(n.startswith("rhs-") for n in libs)  # the rhs and the grid functions
        assert "cached" in first.info["rhs"] and "not cached" not in first.info["rhs"]
        monkeypatch.setattr(compiled, "_LOADED", {})  # a new process: only the directory knows the library
        monkeypatch.setattr(compiled, "_GRID", {})
        monkeypatch.setattr(dispatch, "_INTEGRATORS", {})
        again = simulate(pendulum, GRID, compile="auto")
    assert again.info["rhs"] == "compiled C (library from the cache)"
    assert np.array_equal(first.x, again.x)
    assert not [p for p in (tmp_path / "cache").iterdir() if p.name.startswith(".tmp")]
    cache.clear()
    assert not list((tmp_path / "cache").iterdir()) or all(
        not p.name.startswith("rhs-") for p in (tmp_path / "cache").iterdir())


@needs_cc
def test_without_a_cache_nothing_is_written(pendulum, tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    res = simulate(pendulum, GRID, compile="yes")
    assert "not cached" in res.info["rhs"]
    assert list(tmp_path.iterdir()) == []  # the temporary build directory is gone (the library stays loaded)
    assert np.array_equal(res.x, simulate(pendulum, GRID, compile="yes").x)  # reused in this process


def test_bad_compile_option(pendulum, tmp_path, capsys):
    with pytest.raises(PdslError) as err:
        simulate(pendulum, GRID, compile="maybe")
    assert err.value.diagnostics[0].code == "BadOption"
    code = main(["simulate", str(MODELS / "double_pendulum.phm"), "--t-end", "1", "--dt", "0.1", "--compile", "maybe",
                 "-o", str(tmp_path / "o.csv")])
    assert code == 2
    assert "error[BadOption]" in capsys.readouterr().err


def test_cli_reports_the_choice(tmp_path, capsys):
    assert main(["simulate", str(MODELS / "double_pendulum.phm"), "--t-end", "1", "--dt", "0.1", "--compile", "no",
                 "--integrator", "cvodes", "-o", str(tmp_path / "o.csv")]) == 0
    assert "  right-hand side: CasADi VM (--compile no)" in capsys.readouterr().out.splitlines()


@pytest.mark.parametrize("n", [2, 3, 4, 7, 10, 101])
def test_cumulative_simpson_is_scipys_to_the_last_bit(n):
    from scipy.integrate import cumulative_simpson as scipy_simpson
    from scipy.integrate import cumulative_trapezoid

    rng = np.random.default_rng(n)
    for x in (np.linspace(0.0, 3.0, n), np.cumsum(rng.uniform(0.1, 1.0, n))):
        y = rng.normal(size=n)
        ref = scipy_simpson(y, x=x, initial=0.0) if n >= 3 else cumulative_trapezoid(y, x=x, initial=0.0)
        assert np.array_equal(cumulative_simpson(y, x), ref)


def test_csv_input_is_interpolated_on_the_whole_grid(tmp_path):
    num = compile_model(MODELS / "mass_spring_damper.phm", cache=False).numeric
    data = tmp_path / "u.csv"
    data.write_text("t,F\n0,0\n1,2\n2,0\n")
    inputs = sim.inputs_from_csv(data, num.u_names)
    grid = np.linspace(0.0, 2.0, 21)
    res = simulate(num, grid, inputs=inputs, compile="no")
    assert np.allclose(res.u[:, 0], np.interp(grid, [0, 1, 2], [0, 2, 0]), atol=1e-15)


@needs_cc
def test_idas_dae_compiled_matches_the_vm():
    decay = 'model Decay "x\' = -y with the algebraic y = x"\n  var x = 1, y\n  der(x) = -y\n  0 = y - x\nend\n'
    num = compile_model("decay.phm", text=decay, cache=False).numeric
    grid = np.linspace(0.0, 2.0, 21)
    vm, cc = simulate(num, grid, rtol=1e-10, compile="no"), simulate(num, grid, rtol=1e-10, compile="yes")
    assert cc.info["integrator"] == "idas" and cc.info["rhs"].startswith("compiled C (")
    assert np.array_equal(vm.x, cc.x) and np.array_equal(vm.z, cc.z)


@needs_cc
def test_placeholders_for_functions_the_integrator_never_calls(monkeypatch):
    """Large models: the oracle (and, under functional iteration, jacF) go in as NaN placeholders; never called."""
    import pdsl.sim.runs as sim_module

    monkeypatch.setattr(compiled, "JAC_PLACEHOLDER_ABOVE", 0)
    monkeypatch.setattr(sim_module, "FUNCTIONAL_FROM", 16)
    num = compile_model(MODELS / "pendulum5.phm", cache=False).numeric
    grid = np.linspace(0.0, 0.3, 31)
    vm = simulate(num, grid, x0={"b[1].x": 0.5}, compile="no")
    cc = simulate(num, grid, x0={"b[1].x": 0.5}, compile="yes")
    assert cc.info["iteration"] == "functional" and cc.info["rhs"].startswith("compiled C (")
    assert np.array_equal(vm.x, cc.x)
