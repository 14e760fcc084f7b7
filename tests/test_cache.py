"""The compiled-model cache (pdsl.cache): hits are bit-identical, keyed by every source and option, safe to share."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from pdsl.cache import Deferred, ModelCache
from pdsl.cli.main import main
from pdsl.pipeline import CompileOptions, compile_model
from pdsl.sim.simulate import simulate, time_grid

ROOT = Path(__file__).resolve().parents[1]
MODELS = ROOT / "models"

PENDULUM = """model P
  param g = 9.81, l = 1.3
  coord q = 0.4
  lagrangian der(q)^2/2*l^2 + g*l*cos(q)
end
"""


def _arrays(res):
    return [res.t, res.x, res.z, res.y, res.shown] + [a for a in (res.energy, res.power, res.constraint_rms) if a is not None]


@pytest.mark.parametrize("model, opts", [
    ("double_pendulum.phm", {}),
    ("pendulum2.phm", {}),  # Cartesian: constraints, projection, report columns
    ("rlc_ladder.phm", {"consts": {"N": 3}}),  # port-Hamiltonian, an exogenous input
    ("pendulum2.phm", {"formulation": "lagrangian"}),
])
def test_a_hit_simulates_bit_identically(tmp_path, model, opts):
    store = ModelCache(tmp_path / "c")
    options = CompileOptions(**opts)
    cold = compile_model(MODELS / model, options, cache=store)
    assert store.last == "stored"
    hot = compile_model(MODELS / model, options, cache=store)
    assert store.last == "hit"
    assert isinstance(hot.system, Deferred) and not hot.system.loaded  # nothing symbolic unpickled yet
    grid = time_grid(2.0, 0.05)
    inputs = {}
    if cold.numeric.u_names:
        import casadi as ca

        from pdsl.sim.simulate import InputSignal

        t = ca.SX.sym("t")
        sig = InputSignal("V", ca.Function("V", [t, ca.SX.sym("x", cold.numeric.nx), ca.SX.sym("p", len(cold.numeric.p_names))],
                                           [ca.sin(t)]), "sin(t)")
        inputs = {"V": sig}
    a = simulate(cold.numeric, grid, inputs=inputs)
    b = simulate(hot.numeric, grid, inputs=inputs)
    for u, v in zip(_arrays(a), _arrays(b)):
        assert u.dtype == v.dtype and np.array_equal(u, v)  # bit for bit
    assert a.columns()[0] == b.columns()[0]
    assert hot.model.name == cold.model.name and hot.system.name == cold.system.name
    # the symbolic parts are there when asked for (unpickled on first use)
    assert [s.name for s in hot.system.states] == [s.name for s in cold.system.states]
    assert hot.system.energy == cold.system.energy


def test_keys_cover_text_options_and_imports(tmp_path):
    store = ModelCache(tmp_path / "c")
    lib = tmp_path / "lib.phm"
    lib.write_text("model Osc\n  param k = 1.0\n  var x = 1.0, v = 0.0\n  der(x) = v\n  der(v) = -k*x\nend\n")
    top = tmp_path / "top.phm"
    top.write_text('import "lib.phm"\nmodel Top\n  use a = Osc(k = 2.0)\nend\n')
    first = compile_model(top, cache=store)
    assert store.last == "stored"
    compile_model(top, cache=store)
    assert store.last == "hit"
    compile_model(top, CompileOptions(seed=1), cache=store)  # another option: another entry
    assert store.last == "stored"
    lib.write_text(lib.read_text().replace("-k*x", "-k*x - 0.1*v"))  # an import changed: stale
    second = compile_model(top, cache=store)
    assert store.last == "stored"
    x = np.array([1.0, 1.0])
    f1 = np.asarray(first.numeric.rhs(0, x, first.numeric.p_default, [])).ravel()
    f2 = np.asarray(second.numeric.rhs(0, x, second.numeric.p_default, [])).ravel()
    assert not np.array_equal(f1, f2)
    top.write_text(top.read_text() + "\n")  # the text itself
    compile_model(top, cache=store)
    assert store.last == "stored"


def test_consts_are_part_of_the_key(tmp_path):
    store = ModelCache(tmp_path / "c")
    a = compile_model(MODELS / "rlc_ladder.phm", CompileOptions(consts={"N": 2}), cache=store)
    b = compile_model(MODELS / "rlc_ladder.phm", CompileOptions(consts={"N": 3}), cache=store)
    assert store.last == "stored" and (a.numeric.nx, b.numeric.nx) == (4, 6)


def test_damaged_entries_are_misses_and_removed(tmp_path):
    store = ModelCache(tmp_path / "c")
    src = tmp_path / "p.phm"
    src.write_text(PENDULUM)
    compile_model(src, cache=store)
    (entry,) = list((tmp_path / "c").glob("*.pdslc"))
    entry.write_bytes(entry.read_bytes()[:100])
    again = compile_model(src, cache=store)
    assert store.last == "stored; 1 damaged or unauthenticated entry removed" and again.numeric.nx == 2
    assert store.rejected == 1
    compile_model(src, cache=store)
    assert store.last.startswith("hit")
    fresh = ModelCache(tmp_path / "c")  # a new process: no notes
    compile_model(src, cache=fresh)
    assert fresh.last == "hit"


def test_size_bound_drops_least_recently_used(tmp_path):
    store = ModelCache(tmp_path / "c")
    paths = []
    for k in range(4):
        p = tmp_path / f"m{k}.phm"
        p.write_text(PENDULUM.replace("l = 1.3", f"l = 1.{k + 4}"))
        paths.append(p)
        compile_model(p, cache=store)
    sizes = [f.stat().st_size for f in (tmp_path / "c").glob("*.pdslc")]
    assert len(sizes) == 4
    small = ModelCache(tmp_path / "c", max_bytes=int(max(sizes) * 2.5))
    os.utime(next(iter((tmp_path / "c").glob("*.pdslc"))), (1, 1))  # one entry much older than the rest
    small.prune()
    left = list((tmp_path / "c").glob("*.pdslc"))
    assert len(left) == 2 and sum(f.stat().st_size for f in left) <= small.max_bytes


def test_concurrent_writers_and_readers(tmp_path):
    """Many threads filling and reading one entry: every read is a whole entry or a miss, never an error."""
    src = tmp_path / "p.phm"
    src.write_text(PENDULUM)
    compiled = compile_model(src, cache=False)
    root = tmp_path / "c"
    errors, results = [], []
    store0 = ModelCache(root)
    key = store0.key(src, src.read_text(), compiled.options)
    from pdsl.pipeline import _deferred

    entry = _deferred(compiled)

    def work():
        store = ModelCache(root)
        try:
            for _ in range(15):
                store.store(key, entry, {str(src): __import__("hashlib").sha256(PENDULUM.encode()).hexdigest()})
                hit = store.load(key)
                results.append(hit is not None and hit.numeric.nx == 2)
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and all(results) and len(results) == 90
    assert not list(root.glob(".tmp-*"))  # no temporary file left behind


def _cli(args, env_extra, cwd=ROOT):
    env = {**os.environ, **env_extra}
    env.pop("PDSL_NO_CACHE", None)
    return subprocess.run([sys.executable, "-c", "import sys; from pdsl.cli.main import main; code = main(sys.argv[1:]); "
                           "print('SYMPY' if 'sympy' in sys.modules else 'NOSYMPY', file=sys.stderr); sys.exit(code)", *args],
                          capture_output=True, text=True, env=env, cwd=cwd, timeout=300)


@pytest.mark.parametrize("base", [
    ["simulate", "models/double_pendulum.phm", "--t-end", "2", "--dt", "0.01"],
    ["simulate", "models/pendulum2.phm", "--init", "b[1].x=0.5", "--t-end", "1", "--dt", "0.01"],  # projection
])
def test_cli_second_run_imports_no_sympy_and_writes_the_same_bytes(tmp_path, base):
    env = {"PDSL_CACHE_DIR": str(tmp_path / "c")}
    out1, out2, out3 = tmp_path / "a.csv", tmp_path / "b.csv", tmp_path / "c.csv"
    r1 = _cli(["-v", *base, "-o", str(out1)], env)
    assert r1.returncode == 0, r1.stderr
    assert "cache: stored" in r1.stderr and "SYMPY" in r1.stderr.split()
    r2 = _cli(["-v", *base, "-o", str(out2)], env)
    assert r2.returncode == 0, r2.stderr
    assert "cache: hit" in r2.stderr and "NOSYMPY" in r2.stderr.split()
    assert out1.read_bytes() == out2.read_bytes()
    r3 = _cli(["-v", *base, "--no-cache", "-o", str(out3)], env)
    assert r3.returncode == 0 and "cache:" not in r3.stderr
    assert out3.read_bytes() == out1.read_bytes()


def test_no_cache_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("PDSL_CACHE_DIR", str(tmp_path / "c"))
    monkeypatch.delenv("PDSL_NO_CACHE", raising=False)
    src = tmp_path / "p.phm"
    src.write_text(PENDULUM)
    assert main(["simulate", str(src), "--t-end", "1", "--dt", "0.1", "--no-cache", "-o", str(tmp_path / "o.csv")]) == 0
    assert not list((tmp_path / "c").glob("*.pdslc"))
    assert main(["simulate", str(src), "--t-end", "1", "--dt", "0.1", "-o", str(tmp_path / "o.csv")]) == 0
    assert len(list((tmp_path / "c").glob("*.pdslc"))) == 1
    monkeypatch.setenv("PDSL_NO_CACHE", "1")
    src.write_text(PENDULUM + "\n")
    assert main(["simulate", str(src), "--t-end", "1", "--dt", "0.1", "-o", str(tmp_path / "o.csv")]) == 0
    assert len(list((tmp_path / "c").glob("*.pdslc"))) == 1


def test_errors_after_a_hit_are_still_located(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PDSL_CACHE_DIR", str(tmp_path / "c"))
    monkeypatch.delenv("PDSL_NO_CACHE", raising=False)
    src = tmp_path / "p.phm"
    src.write_text(PENDULUM)
    args = ["simulate", str(src), "--t-end", "1", "--dt", "0.1", "-o", str(tmp_path / "o.csv")]
    assert main(args) == 0
    assert main([*args, "--param", "nope=1"]) == 2  # a hit, then a user error
    assert "not a parameter of P" in capsys.readouterr().err
