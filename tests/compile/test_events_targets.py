"""`pdsl compile` of models with events (`when`, LANGUAGE.md §11 "Targets"): the numpy module's and the C
library's event functions agree with pdsl.backend.hybrid, and an FMU of the bouncing ball simulated by fmpy
(Model Exchange: CVode with its own root finding; Co-Simulation: the FMU's RK4 with bisection) bounces when and
as high as `pdsl simulate` says."""

from __future__ import annotations

import importlib.util
import json
import shutil

import casadi as ca
import numpy as np
import pytest

from pdsl.compile.targets import compile_to
from pdsl.diagnostics import PdslError
from pdsl.pipeline import compile_model
from pdsl.sim.simulate import simulate

HAS_CC = shutil.which("cc") is not None or shutil.which("gcc") is not None
needs_cc = pytest.mark.skipif(not HAS_CC, reason="needs a C compiler")

BOUNCING_BALL = """
model BouncingBall
  param g = 9.81, e = 0.8 {free, lower = 0, upper = 1}
  var h = 1.0, v = 0.0
  der(h) = v
  der(v) = -g
  when h < 0 then reinit(v, -e*v)
end
"""

# and/or trees, a non-strict atom, a condition on t, a counter reset in the same event, a second event that the
# first one's reset makes true (a second round at the same instant), and a terminating event
COUNTER = """
model Counter
  param g = 9.81, e = 0.8, top = 5
  var h = 1.0, v = 0.0, n = 0, k = 0
  der(h) = v
  der(v) = -g
  der(n) = 0
  der(k) = 0
  when h < 0 and v <= 0 then reinit(v, -e*v), reinit(n, n + 1)
  when n > 1.5 then reinit(k, k + 10*n)
  when h > top or t >= 1.905 then terminate
end
"""

# a velocity reset of a constrained part: an impulse, not implemented by the compiled targets
CONSTRAINED = """
model Bead
  param m = 1.3, l = 0.9, g = 9.81
  coord x = 0.9, y = 0
  lagrangian m/2*(der(x)^2 + der(y)^2) - m*g*y
  constraint x^2 + y^2 = l^2
  when x < 0 then reinit(der(x), -der(x))
end
"""


def _num(tmp_path, text: str, name: str):
    path = tmp_path / f"{name}.phm"
    path.write_text(text, encoding="utf-8")
    return compile_model(str(path)).numeric


def _load(path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _points(num, n=20, seed=3):
    rng = np.random.default_rng(seed)
    return [(float(rng.uniform(0, 3)), rng.normal(size=num.nx) * 2, num.p_default * rng.uniform(0.5, 1.5,
                                                                                                    len(num.p_default)))
            for _ in range(n)]


# ------------------------------------------------------------------------------------------------ numpy module
@pytest.mark.parametrize("text, name", [(BOUNCING_BALL, "bb"), (COUNTER, "counter")])
def test_python_events_match_hybrid(tmp_path, text, name):
    num = _num(tmp_path, text, name)
    hy = num.hybrid
    compile_to(num, "python", tmp_path / "py")
    mod = _load(next((tmp_path / "py").glob("*.py")))
    assert [e["condition"] for e in mod.EVENTS] == list(hy.conditions)
    assert mod.STRICT == list(hy.strict)
    assert [e["terminate"] for e in mod.EVENTS] == list(hy.terminate)
    assert [e["line"] for e in mod.EVENTS] == list(hy.lines)
    assert [e["target_names"] for e in mod.EVENTS] == [list(t) for t in hy.targets]
    where = {n: i for i, n in enumerate(num.x_names)}
    for t, x, p in _points(num):
        g = np.asarray(hy.atoms(t, x, [], p, [])).ravel()
        np.testing.assert_allclose(mod.event_indicators(t, x, p), g, rtol=1e-13, atol=1e-13)
        for j in range(len(hy.conditions)):
            new = mod.reset(j, t, x, p)
            want = np.array(x, dtype=float)
            if hy.resets[j] is not None:
                vals = np.asarray(hy.resets[j](t, x, [], p, [])).ravel()
                for target, val in zip(hy.targets[j], vals):
                    want[where[target]] = val
            np.testing.assert_allclose(new, want, rtol=1e-13, atol=1e-13)
    manifest = json.loads((tmp_path / "py" / "manifest.json").read_text())
    assert len(manifest["events"]["events"]) == len(hy.conditions)


def test_python_event_update_rounds(tmp_path):
    num = _num(tmp_path, COUNTER, "counter")
    compile_to(num, "python", tmp_path / "py")
    mod = _load(tmp_path / "py" / "counter.py")
    p = mod.DEFAULTS
    # a second impact: the counter goes 1 -> 2, which makes `n > 1.5` true in a second round at the same instant
    x_pre = np.array([1e-3, -3.0, 1.0, 0.0])
    before = mod.conditions(0.5, x_pre, p)
    assert before == [False, False, False]
    x_at = np.array([-1e-12, -3.0, 1.0, 0.0])  # just past the crossing
    x, fired, terminate, after = mod.event_update(0.5, x_at, before, p)
    assert fired == [0, 1] and not terminate
    np.testing.assert_allclose(x, [-1e-12, 2.4, 2.0, 20.0])  # the counter's reset read n after round one
    assert after == [False, True, False]  # v > 0 now: the first condition is false again (re-armed)
    # the terminating event
    x, fired, terminate, _ = mod.event_update(1.95, np.array([0.5, 1.0, 2.0, 20.0]), [False, True, False], p)
    assert fired == [2] and terminate


def test_refused_impulse_is_located(tmp_path):
    num = _num(tmp_path, CONSTRAINED, "bead")
    for target in ("c", "python", "casadi", "fmu"):
        with pytest.raises(PdslError) as exc:
            compile_to(num, target, tmp_path / ("out.fmu" if target == "fmu" else f"out_{target}"))
        d = exc.value.diagnostics[0]
        assert d.code == "NotYetSupported"
        assert d.span is not None and d.span.line == 7
        assert "when x < 0 (line 7)" in d.message and "impulse" in d.message
        assert not (tmp_path / f"out_{target}").exists()


# ------------------------------------------------------------------------------------------------ C / CasADi
@needs_cc
def test_c_event_functions_match_casadi(tmp_path):
    num = _num(tmp_path, COUNTER, "counter")
    hy = num.hybrid
    compile_to(num, "c", tmp_path / "c")
    lib = str(tmp_path / "c" / "libmodel.so")
    manifest = json.loads((tmp_path / "c" / "manifest.json").read_text())
    events = manifest["events"]["events"]
    assert [e["reset"] for e in events] == ["reset_0", "reset_1", None]
    assert [e["target_states"] for e in events] == [[1, 2], [3], []]
    assert events[0]["condition"] == ["and", [["atom", 0], ["atom", 1]]]
    assert manifest["functions"]["event_indicators"]["inputs"] == ["t", "x", "z", "p", "u"]
    ind = ca.external("event_indicators", lib)
    cond = ca.external("event_conditions", lib)
    resets = {j: ca.external(f"reset_{j}", lib) for j in (0, 1)}
    from pdsl.backend.hybrid import condition_value

    for t, x, p in _points(num):
        g = np.asarray(hy.atoms(t, x, [], p, [])).ravel()
        np.testing.assert_allclose(np.asarray(ind(t, x, [], p, [])).ravel(), g, rtol=1e-13, atol=1e-13)
        truth = [(g[k] < 0) if hy.strict[k] else (g[k] <= 0) for k in range(len(g))]
        want = [float(condition_value(c, truth)) for c in hy.conditions]
        assert list(np.asarray(cond(t, x, [], p, [])).ravel()) == want
        for j, fn in resets.items():
            vals = np.asarray(hy.resets[j](t, x, [], p, [])).ravel()
            new = np.asarray(fn(t, x, [], p, [])).ravel()
            rows = events[j]["target_states"]
            np.testing.assert_allclose(new[rows], vals, rtol=1e-13, atol=1e-13)
            keep = [i for i in range(num.nx) if i not in rows]
            np.testing.assert_array_equal(new[keep], np.asarray(x)[keep])
    # the casadi target saves the same Functions
    compile_to(num, "casadi", tmp_path / "cas")
    f = ca.Function.load(str(tmp_path / "cas" / "reset_0.casadi"))
    assert f.name_out() == ["x_next"]


# ------------------------------------------------------------------------------------------------ FMU
fmpy = pytest.importorskip("fmpy") if HAS_CC else None

# measured (fmpy 0.3.32, CVode at relative_tolerance 1e-10): bounce times 2.3e-10, post-bounce velocities and the
# trajectory on the output grid 3e-9 (ME); 1e-11 for Co-Simulation (RK4, 1e-3 internal steps). Asserted with margin.
ME_TIME_TOL, ME_STATE_TOL, CS_STATE_TOL = 2e-9, 2e-8, 1e-9


def _fmu(tmp_path, text, name):
    num = _num(tmp_path, text, name)
    out = tmp_path / f"{name}.fmu"
    compile_to(num, "fmu", out)
    return num, out


def _bounces(r, name="v"):
    """(time, value after) of the state jumps in an fmpy result recorded with its events (two rows per event)."""
    t, v = r["time"], r[name]
    return [(t[i], v[i]) for i in range(1, len(t)) if t[i] == t[i - 1] and abs(v[i] - v[i - 1]) > 1e-6]


@needs_cc
def test_fmu_bouncing_ball_matches_simulate(tmp_path):
    from fmpy import read_model_description, simulate_fmu
    from fmpy.validation import validate_fmu

    num, fmu = _fmu(tmp_path, BOUNCING_BALL, "bb")
    assert validate_fmu(str(fmu)) == []
    assert read_model_description(str(fmu)).numberOfEventIndicators == 1
    grid = np.linspace(0.0, 2.0, 201)
    ref = simulate(num, grid, rtol=1e-10)
    times = np.array(ref.info["events"].times)
    assert len(times) == 3  # 0.4515, 1.174, 1.752
    np.testing.assert_allclose(times[0], np.sqrt(2 / 9.81), rtol=1e-12)
    # the velocity after each bounce, from pdsl: -e·v⁻ with v⁻ = -g·(time since the apex)
    after = simulate(num, grid, rtol=1e-10, event_rows="after")
    v_after = [after.x[i, 1] for i in range(len(after.t)) if after.t[i] in set(times)]

    me = simulate_fmu(str(fmu), fmi_type="ModelExchange", stop_time=2.0, output_interval=0.01,
                      relative_tolerance=1e-10)
    bounces = _bounces(me)
    assert len(bounces) == 3
    assert np.abs(np.array([b[0] for b in bounces]) - times).max() <= ME_TIME_TOL
    assert np.abs(np.array([b[1] for b in bounces]) - v_after).max() <= ME_STATE_TOL
    # apex heights v⁺²/(2g) follow; and the whole trajectory on the grid
    plain = simulate_fmu(str(fmu), fmi_type="ModelExchange", stop_time=2.0, output_interval=0.01,
                         relative_tolerance=1e-10, record_events=False)
    assert np.array_equal(plain["time"], grid)
    assert np.abs(plain["h"] - ref.x[:, 0]).max() <= ME_STATE_TOL
    assert np.abs(plain["v"] - ref.x[:, 1]).max() <= ME_STATE_TOL
    assert plain["h"].min() > -1e-8  # never through the floor

    cs = simulate_fmu(str(fmu), fmi_type="CoSimulation", stop_time=2.0, output_interval=0.01,
                      start_values={"pdsl:cs_max_step": 1e-3})
    assert np.abs(cs["h"] - ref.x[:, 0]).max() <= CS_STATE_TOL
    assert np.abs(cs["v"] - ref.x[:, 1]).max() <= CS_STATE_TOL


@needs_cc
def test_fmu_rounds_and_terminate_match_simulate(tmp_path):
    from fmpy import simulate_fmu

    num, fmu = _fmu(tmp_path, COUNTER, "counter")
    grid = np.linspace(0.0, 2.0, 201)
    ref = simulate(num, grid, rtol=1e-10)
    assert ref.info["events"].terminated is not None and ref.t[-1] == pytest.approx(1.905)
    n_ref, k_ref = ref.x[-1, 2], ref.x[-1, 3]
    # k: +20 at the second bounce (round two); `n > 1.5` stays true after, so the third bounce does not re-fire it
    assert (n_ref, k_ref) == (3.0, 20.0)
    for ft, kw in (("ModelExchange", {"relative_tolerance": 1e-10}),
                   ("CoSimulation", {"start_values": {"pdsl:cs_max_step": 1e-3}})):
        r = simulate_fmu(str(fmu), fmi_type=ft, stop_time=2.0, output_interval=0.01, **kw)
        assert r["time"][-1] == pytest.approx(1.905, abs=1e-9), ft  # the terminating event ends the run
        assert (r["n"][-1], r["k"][-1]) == (n_ref, k_ref), ft
        on_grid = [i for i in range(len(r)) if i == 0 or r["time"][i] != r["time"][i - 1]]
        t = r["time"][on_grid]
        h_ref = np.interp(t, ref.t, ref.x[:, 0])
        mask = np.isin(np.round(t, 9), np.round(ref.t, 9))
        assert mask.sum() > 180
        assert np.abs(r["h"][on_grid][mask] - h_ref[mask]).max() <= ME_STATE_TOL, ft
