"""``--integrator auto`` (pdsl.sim.auto), the default: DOP853 with Hairer's stiffness test, handing over to CVODES BDF.

Checked against independent routes: every bundled model against a tight reference run of CVODES/IDAS (the
accuracy contract), Robertson against CVODES BDF at rtol 1e-12 and its conservation law, a linear stiff system
against its closed form, the compiled driver against the VM-stepped one (the same bits), explicit integrators
unchanged, and the choice and the switch in the report."""

from __future__ import annotations

from pathlib import Path

import casadi as ca
import numpy as np
import pytest

from pdsl.cli.main import main
from pdsl.pipeline import compile_model, load_models
from pdsl.backend import native_lib
from pdsl.sim import auto, compiled, native
from pdsl.sim.simulate import input_from_expression, simulate, simulate_batch, time_grid

MODELS = Path(__file__).resolve().parents[2] / "models"
ROBERTSON = """model Robertson "stiff chemical kinetics"
  var y1 = 1.0, y2 = 0.0, y3 = 0.0
  der(y1) = -0.04*y1 + 1e4*y2*y3
  der(y2) = 0.04*y1 - 1e4*y2*y3 - 3e7*y2^2
  der(y3) = 3e7*y2^2
end
"""
# x' = −λ(x − cos t) − sin t: x = cos t + (x0 − 1)e^(−λt); stiff for λ = 1e4 once the transient has died
STIFF = """model Stiff "a fast transient onto a slow solution"
  param lam = 10000.0
  var x = 2.0
  der(x) = -lam*(x - cos(t)) - sin(t)
end
"""
BUNDLED = sorted(MODELS.glob("*.phm")) + sorted((MODELS / "composition").glob("*.phm"))
# slow to compile (its own test file), or failing from its default state with every integrator (a NaN at t = 0)
SKIP = {"cucker_smale", "a4_spring_damper_bodies"}


def _inputs(num):
    return {u: input_from_expression(num, u, "sin(t)") for u in num.u_names}


@pytest.mark.parametrize("path", [p for p in BUNDLED if p.stem not in SKIP], ids=lambda p: p.stem)
def test_every_bundled_model_meets_the_contract_against_a_tight_reference(path):
    """auto at rtol 1e-8 (atol 1e-10) against CVODES/IDAS at rtol 1e-12, over 2 s: every state within 300 times
    its tolerance rtol·max|x| + atol (measured: at most 34 where auto runs DOP853, 143 for the slider-crank
    with a stop, where auto runs CVODES itself)."""
    name = load_models(path)[0].name
    num = compile_model(path, name, cache=False).numeric
    grid = time_grid(2.0, 0.05)
    res = simulate(num, grid, inputs=_inputs(num), rtol=1e-8)
    ref = simulate(num, grid, inputs=_inputs(num), rtol=1e-12, integrator="idas" if num.nz else "cvodes")
    assert res.x.shape == ref.x.shape
    tol = 1e-8 * np.abs(ref.x).max(axis=0) + 1e-10
    assert np.all(np.abs(res.x - ref.x) <= 300 * tol), float(np.max(np.abs(res.x - ref.x) / tol))
    assert res.info["auto"]
    large = num.dae.n_instructions() > auto.DOP853_MAX_INSTRUCTIONS  # e.g. a network summed over 900 pairs
    expected = ("idas" if num.nz else "cvodes" if (num.hybrid is not None or num.switches is not None or large)
                else "dop853")
    assert res.info["integrator"] == expected


@pytest.fixture(scope="module")
def robertson():
    return compile_model("robertson.phm", text=ROBERTSON).numeric


def test_robertson_switches_to_bdf_and_keeps_the_accuracy(robertson):
    grid = np.concatenate([[0.0], np.logspace(-5, 10, 31)])
    res = simulate(robertson, grid, rtol=1e-8)
    ref = simulate(robertson, grid, rtol=1e-12, atol=1e-16, integrator="cvodes-bdf")
    sw = res.info["stiff_switch"]
    assert len(sw) == 1 and sw[0]["to"] == "cvodes-bdf" and 1e-4 < sw[0]["t"] < 1.0 and "stiff at t =" in sw[0]["why"]
    assert res.info["integrator"] == "dop853"
    assert np.all(np.abs(res.x - ref.x) <= 100 * (1e-8 * np.abs(ref.x) + 1e-10))
    assert np.max(np.abs(res.x.sum(axis=1) - 1.0)) < 1e-9  # y1 + y2 + y3 is conserved
    assert res.info["counts"]["nsteps"] < 200  # DOP853 stopped early, not after 10⁵ steps at the stability limit


def test_a_stiff_linear_system_matches_its_closed_form():
    num = compile_model("stiff.phm", text=STIFF).numeric
    grid = time_grid(10.0, 0.1)
    res = simulate(num, grid, rtol=1e-8)
    exact = np.cos(grid) + np.exp(-1e4 * grid)
    assert res.info["stiff_switch"][0]["t"] < 0.05  # the transient has died by t = 0.002
    assert np.max(np.abs(res.x[:, 0] - exact)) < 1e-6


def test_a_non_stiff_run_never_switches():
    """The harmonic oscillator over 100 periods at a loose and a tight tolerance: DOP853 all the way."""
    num = compile_model("ho.phm", text="model HO\n  var x = 1.0, v = 0.0\n  der(x) = v\n  der(v) = -x\nend\n").numeric
    grid = time_grid(200 * np.pi, 0.1 * np.pi)
    for rtol in (1e-2, 1e-4, 1e-11):
        res = simulate(num, grid, rtol=rtol)
        assert "stiff_switch" not in res.info
        assert np.max(np.abs(res.x[:, 0] - np.cos(grid))) < 1e3 * rtol


@pytest.mark.skipif(compiled.find_compiler() is None, reason="no C compiler")
@pytest.mark.parametrize("model, mx", [("double_pendulum", False), ("double_pendulum", True), ("pendulum_chain", False),
                                       ("cart_pole_ph", True), ("rlc_ladder", False)])
def test_vm_stepped_and_compiled_dop853_are_the_same_bits(model, mx, monkeypatch):
    """VmDop853 against the C driver (SX graphs with f inlined, MX graphs calling f): the same steps, counts,
    stiffness counters and trajectory, to the last bit; with the ∫ power quadrature riding along too."""
    if mx:
        monkeypatch.setattr(native.VmDop853, "SX_INSTRUCTIONS_MAX", 0)
    num = compile_model(MODELS / f"{model}.phm", cache=False).numeric
    T = ca.SX if num.kind == "SX" else ca.MX
    t, x, p = T.sym("t"), T.sym("x", num.nx), T.sym("p", len(num.p_names))
    u = ca.vertcat(*[ca.sin(t) for _ in num.u_names]) if num.u_names else T(0, 1)
    xdot = num.dae(t, x, T(0, 1), p, u)[0]
    q = T.sym("q")
    f_quad = ca.Function("f", [t, ca.vertcat(x, q), p], [ca.vertcat(xdot, num.power(t, x, T(0, 1), p, u))]) \
        if num.power is not None else None
    grid = np.linspace(0.0, 3.0, 301)
    start = simulate(num, grid[:2], inputs={u: input_from_expression(num, u, "sin(t)") for u in num.u_names}).x[0]
    for f, nerr, x0 in [(ca.Function("f", [t, x, p], [xdot]), num.nx, start),
                        *([(f_quad, num.nx, np.append(start, 0.0))] if f_quad is not None else [])]:
        for rtol in (1e-5, 1e-10):
            c1, c2 = native.new_ctl(len(x0), stiff_after=15), native.new_ctl(len(x0), stiff_after=15)
            a = native.native_integrator(f, None, nerr=nerr).run_ctl(x0, num.p_default, grid, rtol, rtol / 100, c1)
            b = native.VmDop853(f, nerr).run_ctl(x0, num.p_default, grid, rtol, rtol / 100, c2)
            assert a.rc == b.rc == 0 and a.counts == b.counts
            assert np.array_equal(a.X, b.X) and np.array_equal(c1, c2)


@pytest.mark.skipif(compiled.find_compiler() is None, reason="no C compiler")
def test_a_stiff_stop_and_a_handover_are_the_same_bits(robertson, monkeypatch):
    """Robertson stops at the same step in C and from Python; a VM run handed over to C mid-run (the build
    predicted to pay) ends with the bits of a run that was all VM."""
    t, x, p = ca.SX.sym("t"), ca.SX.sym("x", 3), ca.SX.sym("p", 0)
    f = ca.Function("f", [t, x, p], [robertson.dae(t, x, ca.SX(0, 1), p, ca.SX(0, 1))[0]])
    grid = np.concatenate([[0.0], np.logspace(-5, 2, 15)])
    c1, c2 = native.new_ctl(3, stiff_after=15), native.new_ctl(3, stiff_after=15)
    a = native.native_integrator(f, None).run_ctl(robertson.x_start, np.zeros(0), grid, 1e-8, 1e-10, c1)
    b = native.VmDop853(f).run_ctl(robertson.x_start, np.zeros(0), grid, 1e-8, 1e-10, c2)
    assert a.rc == b.rc == 5 and a.t == b.t and a.rows == b.rows and np.array_equal(a.y, b.y)
    assert np.array_equal(a.X[:a.rows], b.X[:b.rows]) and np.array_equal(c1, c2)
    # a long non-stiff run: the pendulum over 200 s, handed over after the first 128 steps
    num = compile_model(MODELS / "double_pendulum.phm", cache=False).numeric
    grid = time_grid(200.0, 0.1)
    monkeypatch.setattr(auto, "_VM", {})
    monkeypatch.setattr(auto, "_SEEN", {})
    monkeypatch.setattr(native, "_MADE", {})
    monkeypatch.setattr(native, "_LIBS", {})
    monkeypatch.setattr(compiled, "_LOADED", {})
    all_vm = simulate(num, grid, rtol=1e-9, compile="no")
    assert all_vm.info["rhs"].startswith("CasADi VM (DOP853 stepped from Python: --compile no")
    monkeypatch.setattr(compiled, "BUILD_S_FIXED", 0.0)  # any run is worth a build
    monkeypatch.setattr(compiled, "BUILD_S_PER_INSTRUCTION", 0.0)
    monkeypatch.setattr(auto, "_SEEN", {})
    handed = simulate(num, grid, rtol=1e-9)
    assert "compiled C from t = " in handed.info["rhs"]
    assert np.array_equal(handed.x, all_vm.x)
    assert handed.info["counts"]["nsteps"] == all_vm.info["counts"]["nsteps"]


def test_the_choice_is_reported_and_explicit_integrators_are_unchanged():
    pend = compile_model(MODELS / "double_pendulum.phm", cache=False).numeric
    grid = time_grid(1.0, 0.1)
    res = simulate(pend, grid)
    assert res.info["integrator"] == "dop853" and res.info["auto"].startswith("DOP853 with a stiffness test")
    assert simulate(pend, grid, integrator="auto").info["auto"] == res.info["auto"]
    for integ in ("cvodes", "cvodes-bdf", "dop853", "rk4"):
        other = simulate(pend, grid, integrator=integ)
        assert other.info["integrator"] == integ and "auto" not in other.info
    ball = compile_model(MODELS / "bouncing_ball.phm", cache=False).numeric
    res = simulate(ball, time_grid(2.0, 0.1))
    assert res.info["integrator"] == "cvodes" and "root finding" in res.info["auto"] and res.info["events"].times
    step = compile_model(MODELS / "step_pendulum.phm", cache=False).numeric
    assert simulate(step, time_grid(2.0, 0.1)).info["integrator"] == "cvodes"
    assert simulate(pend, grid, rtol=1e-15).info["integrator"] == "cvodes"  # below DOP853's floor


def test_no_compiler_runs_the_same_steps_from_python(monkeypatch):
    num = compile_model(MODELS / "double_pendulum.phm", cache=False).numeric
    grid = time_grid(5.0, 0.05)
    with_c = simulate(num, grid, compile="yes")
    monkeypatch.setattr(native_lib, "_COMPILER", [None])
    monkeypatch.setattr(native, "_MADE", {})
    monkeypatch.setattr(native, "_LIBS", {})
    without = simulate(num, grid)
    assert "no C compiler found" in without.info["rhs"]
    assert np.array_equal(with_c.x, without.x)


@pytest.mark.parametrize("compile", ["auto", "no"])  # the compiled driver in threads; VmDop853 one run after another
def test_batch_runs_switch_one_by_one(robertson, compile):
    grid = np.concatenate([[0.0], np.logspace(-4, 4, 9)])
    X0 = np.array([[1.0, 0.0, 0.0], [0.9, 0.0, 0.1], [0.8, 1e-5, 0.2], [0.95, 0.0, 0.05]])
    runs = simulate_batch(robertson, grid, X0, rtol=1e-8, compile=compile, threads=2)
    for x0, r in zip(X0, runs):
        one = simulate(robertson, grid, x0=dict(zip(robertson.x_names, x0)), rtol=1e-8, compile=compile)
        assert np.allclose(r.x, one.x, rtol=1e-6, atol=1e-12)
        assert r.info["stiff_switch"][0]["to"] == "cvodes-bdf"


def test_cli_prints_the_choice_and_the_switch(tmp_path, capsys):
    model = tmp_path / "rob.phm"
    model.write_text(ROBERTSON)
    assert main(["simulate", str(model), "--t-end", "100", "--dt", "10", "--no-cache", "-o", str(tmp_path / "r.csv")]) == 0
    out = capsys.readouterr().out
    assert "dop853 rtol 1e-08" in out and "integrator: auto: DOP853 with a stiffness test" in out
    assert "integrator: DOP853 stiff at t = " in out and ": cvodes-bdf from there" in out
    assert main(["simulate", str(model), "--t-end", "100", "--dt", "10", "--no-cache", "--integrator", "cvodes-bdf",
                 "-o", str(tmp_path / "b.csv")]) == 0
    assert "integrator:" not in capsys.readouterr().out


def test_power_quadrature_on_a_cse_rhs_is_bit_identical(monkeypatch):
    """The ∫ power dt state rides on ``casadi.cse([ẋ; dE/dt])`` (issue 36.2): the same operations on the same values,
    so states and integral are the bits of the plain graph; the states are those of a run without the integral (it
    is outside the error test). The damped pendulum on a spring (its torque input at 0): the integral is the
    dissipated energy, E(t) − E(0) to the tolerance."""
    num = compile_model(MODELS / "driven_pendulum.phm", cache=False).numeric
    assert not num.system.conservative
    grid = time_grid(2.0, 0.01)

    def run(**kw):
        auto._SEEN.clear()
        auto._VM.clear()
        return simulate(num, grid, rtol=1e-9, compile="no", inputs={"tau": input_from_expression(num, "tau", "0")}, **kw)

    with_cse = run(power_integral=True)
    without_quad = run(power_integral=False)
    monkeypatch.setattr(ca, "cse", lambda e: e)
    plain = run(power_integral=True)
    assert with_cse.info["integrator"] == "dop853" and with_cse.power_integral is not None
    assert np.array_equal(with_cse.x, plain.x) and np.array_equal(with_cse.power_integral, plain.power_integral)
    assert np.array_equal(with_cse.x, without_quad.x)
    E, Q = with_cse.energy, with_cse.power_integral
    assert Q[-1] < -1e-3 * np.max(np.abs(E))  # energy left through the damper
    assert np.max(np.abs(E - E[0] - Q)) < 1e-6 * np.max(np.abs(E))


def test_vm_step_graph_sums_in_the_drivers_order():
    """VmDop853 builds each stage sum with one ``casadi.mac`` over the nonzero weights: the graph is the loop's
    ((0 + K_a·w_a) + K_b·w_b) + …, term by term (checked on the printed expression)."""
    k = [ca.SX.sym(f"k{j}", 2) for j in range(3)]
    w, zero = ca.SX.sym("w", 3), ca.SX.sym("zero")
    acc = zero
    for j in range(3):
        acc = acc + k[j] * w[j]
    assert str(ca.mac(ca.horzcat(*k), w, ca.repmat(zero, 2, 1))) == str(acc)
    v = ca.SX.sym("v", 3)
    sq = zero
    for i in range(3):
        sq = sq + v[i] * v[i]
    assert str(ca.mac(v.T, v, zero)) == str(sq)
