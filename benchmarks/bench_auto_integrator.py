"""The default integrator (``--integrator auto``, issue 36.1) against scipy at equal accuracy.

    python benchmarks/bench_auto_integrator.py            # writes benchmarks/results_auto_integrator.md
    python benchmarks/bench_auto_integrator.py --quick    # fewer rounds (a smoke run)

1. Double pendulum, t = 0…10 s, 1001 outputs: ``simulate(num, grid, rtol=1e-10)`` with the default integrator (the
   compiled DOP853 once its library is at hand: a repeated run builds it; the same trajectory from Python over the VM
   on a first run without a cache, timed too), the previous default (CVODES Adams) and explicit ``dop853``, against
   ``solve_ivp(method="DOP853")`` on the closed-form right-hand side (benchmarks/bench_numerics.py) at the loosest
   rtol whose error is ≤ pdsl's (errors against DOP853 at rtol 1e-13).
2. Robertson (stiff), t = 0…4e10: auto (DOP853 until the stiffness test fires, then CVODES BDF) against CVODES BDF
   alone and against scipy's LSODA and BDF at rtol 1e-8, errors against CVODES BDF at rtol 1e-13.
Every timing: interleaved rounds (A B C, B C A, …) after a warm-up, medians; ratios from the same rounds.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import importlib.util
import platform
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchutil import git, loadavg, log, table  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
RESULTS = ROOT / "benchmarks" / "results_auto_integrator.md"
ROBERTSON = """model Robertson "stiff chemical kinetics"
  var y1 = 1.0, y2 = 0.0, y3 = 0.0
  der(y1) = -0.04*y1 + 1e4*y2*y3
  der(y2) = 0.04*y1 - 1e4*y2*y3 - 3e7*y2^2
  der(y3) = 3e7*y2^2
end
"""


def _module(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def _fmt(t) -> str:
    return t.fmt()


def double_pendulum(repeats: int) -> tuple[str, list]:
    from scipy.integrate import solve_ivp

    from pdsl.pipeline import compile_model
    from pdsl.sim.simulate import simulate

    bn = _module("bench_numerics")
    num = compile_model(ROOT / "models" / "double_pendulum.phm", cache=False).numeric
    grid = np.linspace(0.0, 10.0, 1001)
    rtol = 1e-10
    f_np = bn.double_pendulum_rhs(num.p_default)

    def scipy_dp(rt):
        sol = solve_ivp(f_np, (0.0, 10.0), num.x_start, method="DOP853", t_eval=grid, rtol=rt, atol=rt * 1e-2)
        assert sol.success
        return sol.y.T

    ref = scipy_dp(1e-13)

    def err(X):
        return float(np.max(np.abs(X - ref)))

    first = simulate(num, grid, rtol=rtol)  # a first run without a cache: DOP853 stepped from Python (the VM)
    warm = simulate(num, grid, rtol=rtol)  # a repeated run: the compiled driver, built now
    assert np.array_equal(first.x, warm.x), "the VM-stepped and the compiled DOP853 must give the same bits"
    cv = simulate(num, grid, rtol=rtol, integrator="cvodes")
    e_auto, e_cv = err(warm.x), err(cv.x)
    rt_auto, e_sc_auto = _equal(scipy_dp, err, e_auto)
    rt_cv, e_sc_cv = _equal(scipy_dp, err, e_cv)

    def vm_run():  # the first-run path again (--compile no: never the library), the same steps
        return simulate(num, grid, rtol=rtol, compile="no")

    assert np.array_equal(vm_run().x, warm.x)
    fns = {
        "auto": lambda: simulate(num, grid, rtol=rtol),
        "auto_vm": vm_run,
        "cvodes": lambda: simulate(num, grid, rtol=rtol, integrator="cvodes"),
        "scipy_auto": lambda: scipy_dp(rt_auto),
        "scipy_cv": lambda: scipy_dp(rt_cv),
    }
    t = bn.measure_many(fns, repeats)
    r_auto = t["scipy_auto"].median / t["auto"].median
    r_vm = t["scipy_auto"].median / t["auto_vm"].median
    r_cv = t["scipy_cv"].median / t["cvodes"].median
    rows = [
        [f"pdsl `simulate` default (auto: {warm.info['integrator']}, {warm.info['rhs']})", f"{rtol:g}", f"{e_auto:.2e}",
         _fmt(t["auto"]), f"**{r_auto:.2f}×**"],
        ["pdsl `simulate` default, first run without a cache (auto: DOP853 stepped from Python over the VM; the same "
         "bits)", f"{rtol:g}", f"{e_auto:.2e}", _fmt(t["auto_vm"]), f"**{r_vm:.2f}×**"],
        [f"scipy DOP853 at auto's accuracy (closed-form rhs)", f"{rt_auto:.3g}", f"{e_sc_auto:.2e}", _fmt(t["scipy_auto"]),
         "1.00×"],
        ["pdsl `simulate --integrator cvodes` (the previous default, Adams)", f"{rtol:g}", f"{e_cv:.2e}", _fmt(t["cvodes"]),
         f"**{r_cv:.2f}×**"],
        [f"scipy DOP853 at CVODES' accuracy", f"{rt_cv:.3g}", f"{e_sc_cv:.2e}", _fmt(t["scipy_cv"]), "1.00×"],
    ]
    text = ("Model `models/double_pendulum.phm` (4 states), t = 0…10 s, 1001 outputs, in process. The ratio is scipy's "
            "median time at equal accuracy over pdsl's, from the same interleaved rounds. "
            f"DOP853 counts: {warm.info['counts']}.\n\n"
            + table(["run", "rtol", "max error vs reference", "time: median (min–max, n)", "scipy / pdsl"], rows))
    summary = [["double pendulum, default integrator vs scipy DOP853, equal accuracy (library at hand)",
                f"{r_auto:.2f}×", "≥ 15×", "met" if r_auto >= 15 else "**not met**"],
               ["double pendulum, default integrator, first run without a cache (VM-stepped)", f"{r_vm:.2f}×", "", ""]]
    return text, summary


def _equal(run, err, target):
    """The loosest scipy rtol on a 10^-¼ grid whose error, and that of every tighter one scanned, is ≤ target."""
    scan = [(10.0 ** -e, err(run(10.0 ** -e))) for e in np.arange(6.0, 13.01, 0.25)]
    for i, (rt, e) in enumerate(scan):
        if all(e2 <= target for _, e2 in scan[i:]):
            return rt, e
    raise RuntimeError("scipy does not reach pdsl's accuracy")


def robertson(repeats: int) -> tuple[str, list]:
    from scipy.integrate import solve_ivp

    from pdsl.pipeline import compile_model
    from pdsl.sim.simulate import simulate

    bn = _module("bench_numerics")
    num = compile_model("robertson.phm", text=ROBERTSON).numeric
    grid = np.concatenate([[0.0], np.logspace(-6, 10, 81)])
    rtol = 1e-8
    ref = simulate(num, grid, rtol=1e-13, atol=1e-18, integrator="cvodes-bdf").x
    scale = rtol * np.abs(ref) + rtol * 1e-2

    def rob(t, y):
        return [-0.04 * y[0] + 1e4 * y[1] * y[2], 0.04 * y[0] - 1e4 * y[1] * y[2] - 3e7 * y[1] ** 2, 3e7 * y[1] ** 2]

    def jac(t, y):
        return [[-0.04, 1e4 * y[2], 1e4 * y[1]], [0.04, -1e4 * y[2] - 6e7 * y[1], -1e4 * y[1]], [0.0, 6e7 * y[1], 0.0]]

    def scipy_run(method):
        sol = solve_ivp(rob, (0.0, grid[-1]), [1.0, 0.0, 0.0], method=method, t_eval=grid, rtol=rtol, atol=rtol * 1e-2,
                        jac=jac)
        assert sol.success
        return sol.y.T

    a = simulate(num, grid, rtol=rtol)
    runs = {"auto": a.x, "bdf": simulate(num, grid, rtol=rtol, integrator="cvodes-bdf").x,
            "lsoda": scipy_run("LSODA"), "scipy_bdf": scipy_run("BDF")}
    fns = {"auto": lambda: simulate(num, grid, rtol=rtol),
           "bdf": lambda: simulate(num, grid, rtol=rtol, integrator="cvodes-bdf"),
           "lsoda": lambda: scipy_run("LSODA"), "scipy_bdf": lambda: scipy_run("BDF")}
    t = bn.measure_many(fns, repeats)
    sw = a.info["stiff_switch"][0]
    names = {"auto": f"pdsl default (auto: DOP853, {sw['why']}, then {sw['to']})", "bdf": "pdsl `--integrator cvodes-bdf`",
             "lsoda": "scipy LSODA (analytic Jacobian)", "scipy_bdf": "scipy BDF (analytic Jacobian)"}
    rows = [[names[k], f"{float(np.max(np.abs(runs[k] - ref) / scale)):.3g}", _fmt(t[k]),
             f"{t[k].median / t['auto'].median:.2f}×"] for k in fns]
    text = ("Robertson's kinetics, 81 outputs log-spaced over t = 1e-6…1e10, rtol 1e-8 (atol 1e-10) for all. Error: max "
            "over outputs and states of |x − x_ref| / (rtol·|x_ref| + atol), x_ref CVODES BDF at rtol 1e-13 (atol 1e-18); "
            "below ~100 is the contract a global error meets.\n\n"
            + table(["run", "error / tolerance", "time: median (min–max, n)", "time / auto"], rows))
    return text, [["Robertson: auto keeps the accuracy (error / tolerance)",
                   f"{float(np.max(np.abs(a.x - ref) / scale)):.3g}", "≤ 100", "met" if np.max(np.abs(a.x - ref) / scale)
                   <= 100 else "**not met**"]]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    repeats = 5 if args.quick else 15
    started = time.perf_counter()
    load0 = loadavg()
    import casadi
    import scipy

    t1, s1 = double_pendulum(repeats)
    log(t1)
    t2, s2 = robertson(max(3, repeats // 3))
    log(t2)
    env = table(["", ""], [
        ["date", _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")],
        ["mode", "quick" if args.quick else "full"],
        ["machine", f"`{platform.platform()}`, 2 CPUs shared with other work (see the load)"],
        ["load average at start / end", f"{load0} / {loadavg()}"],
        ["python / casadi / numpy / scipy", f"{platform.python_version()} / {casadi.__version__} / {np.__version__} / "
         f"{scipy.__version__}"],
        ["pdsl", f"@ {git('rev-parse', '--short', 'HEAD')}"],
    ])
    text = (f"# The default integrator (`--integrator auto`, issue 36.1) against scipy\n\nGenerated by "
            f"`python benchmarks/bench_auto_integrator.py{' --quick' if args.quick else ''}` in "
            f"{time.perf_counter() - started:.0f} s.\n\n{env}\n\n## Summary\n\n"
            + table(["measure", "value", "target", "met?"], s1 + s2)
            + "\n\n## 1. Double pendulum at equal accuracy\n\n" + t1 + "\n\n## 2. Robertson (stiff)\n\n" + t2 + "\n")
    RESULTS.write_text(text, encoding="utf-8")
    log(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
