"""Start-up, the compiled-model cache, and how the front end scales (issue 18).

    python benchmarks/bench_startup_scale.py            # full run, writes benchmarks/results_startup_scale.md
    python benchmarks/bench_startup_scale.py --quick    # smaller sizes, fewer repeats (a smoke run)

1. Whole process: ``pdsl --version``; ``pdsl simulate models/double_pendulum.phm --t-end 10`` with a warm
   compiled-model cache and with ``--no-cache``; against a plain scipy script (numpy + ``solve_ivp(DOP853)`` on
   the closed-form right-hand side, writing the same CSV with ``np.savetxt``) at equal accuracy. Every command is
   a fresh process (``sys.executable``), timed wall-clock in interleaved rounds; ratios come from the same rounds.
2. In process: ``simulate()`` (CVODES) against ``solve_ivp(DOP853)`` at equal accuracy on the double pendulum
   (closed-form rhs) and the 5-link Cartesian chain (pdsl's generated numpy module, ``compile_to(num, "python")``,
   the fastest plain-numpy rhs at hand); pdsl with the right-hand side in CasADi's VM (``compile="no"``) and
   compiled to C (``compile="yes"``, the library built before the timing; pdsl.sim.compiled).
3. Scaling: whole-process time and peak memory (``ru_maxrss`` of the child) of ``pdsl check`` and ``pdsl simulate``
   (``--no-cache``) against N for Cucker–Smale, the p-H RLC ladder and the Cartesian pendulum chain, with growth
   exponents (least squares on log t against log N over the largest sizes).

Every ratio is measured in one run on one machine; the environment (and the load average, this is a shared
2-core machine) is recorded with the results.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import importlib.util
import math
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchutil, also when loaded by path
from benchutil import git, loadavg, log, table  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
MODELS = ROOT / "models"
DOUBLE_PENDULUM = MODELS / "double_pendulum.phm"
RESULTS = ROOT / "benchmarks" / "results_startup_scale.md"


def fmt_s(samples: list[float]) -> str:
    return f"{statistics.median(samples):.3f} s (min {min(samples):.3f}, n={len(samples)})"


TIME = shutil.which("time") or ("/usr/bin/time" if os.path.exists("/usr/bin/time") else None)


def run_child(argv: list[str], env: dict | None = None, timeout: float = 900) -> tuple[float, float, int]:
    """(wall seconds, peak RSS in MiB, exit code) of one fresh process. The peak RSS is GNU time's %M of the
    command (a child forked from this process would count this process's memory until its exec)."""
    mem_file = None
    if TIME:
        fd, mem_file = tempfile.mkstemp(prefix="pdsl-bench-rss-")
        os.close(fd)
        argv = [TIME, "-f", "%M", "-o", mem_file, *argv]
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = t0 + timeout
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        if time.perf_counter() > deadline:
            proc.kill()
            os.wait4(proc.pid, 0)
            return math.inf, math.nan, -9
        time.sleep(0.002)
    wall = time.perf_counter() - t0
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
        raise RuntimeError(f"{' '.join(argv[:6])} … failed ({code}): {err[-1500:]}")
    if proc.stderr:
        proc.stderr.close()
    proc.returncode = code
    rss = usage.ru_maxrss / 1024.0
    if mem_file:
        try:
            rss = float(Path(mem_file).read_text().split()[-1]) / 1024.0
        finally:
            os.unlink(mem_file)
    return wall, rss, code


def pdsl_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "pdsl", *args]


def child_env(**extra: str) -> dict:
    """The children's environment: bytecode caching on (an installed package has its .pyc files; a
    PYTHONDONTWRITEBYTECODE=1 inherited from a sandbox would make every run recompile pdsl's sources)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "PDSL_NO_CACHE")}
    env.update(extra)
    return env


def interleaved(cmds: dict[str, tuple[list[str], dict]], rounds: int) -> dict[str, list[float]]:
    """Wall times of fresh processes in interleaved rounds (A B C, B C A, ...), after one discarded warm-up round."""
    names = list(cmds)
    for n in names:
        run_child(*cmds[n])
    out = {n: [] for n in names}
    for r in range(rounds):
        for n in names[r % len(names):] + names[: r % len(names)]:
            argv, env = cmds[n]
            out[n].append(run_child(argv, env)[0])
    return out


def bench_numerics_module():
    """benchmarks/bench_numerics.py (its closed-form double-pendulum rhs and its interleaved timer)."""
    if "bench_numerics" in sys.modules:
        return sys.modules["bench_numerics"]
    spec = importlib.util.spec_from_file_location("bench_numerics", ROOT / "benchmarks" / "bench_numerics.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["bench_numerics"] = mod
    spec.loader.exec_module(mod)
    return mod


# ----------------------------------------------------------------------------- equal accuracy
def equal_accuracy_rtol(run_scipy, err, target: float, lo: float = 6.0, hi: float = 13.0, step: float = 0.25):
    """The loosest scipy rtol on a 10^-step grid whose error, and that of every tighter rtol scanned, is ≤ target."""
    scan = []
    for e in np.arange(lo, hi + 1e-9, step):
        rt = 10.0 ** -e
        scan.append((rt, err(run_scipy(rt))))
    for i, (rt, _) in enumerate(scan):
        if all(e2 <= target for _, e2 in scan[i:]):
            return rt, scan[i][1]
    raise RuntimeError("scipy DOP853 does not reach pdsl's accuracy in the scanned range")


def in_process(quick: bool) -> tuple[str, list]:
    import casadi as ca  # noqa: F401 - loaded by pdsl anyway
    from scipy.integrate import solve_ivp

    from pdsl.compile.targets import compile_to
    from pdsl.pipeline import compile_model
    from pdsl.sim.simulate import simulate

    bn = bench_numerics_module()
    repeats = 5 if quick else 9
    rows, summary = [], []
    rtol = 1e-10
    # --- double pendulum, closed-form rhs
    num = compile_model(DOUBLE_PENDULUM).numeric
    grid = np.linspace(0.0, 10.0, 1001)
    x0, p = num.x_start, num.p_default
    f_np = bn.double_pendulum_rhs(p)

    def scipy_dp(rt, fun=f_np, y0=x0, g=grid):
        sol = solve_ivp(fun, (0.0, float(g[-1])), y0, method="DOP853", t_eval=g, rtol=rt, atol=rt * 1e-2)
        assert sol.success, sol.message
        return sol.y.T

    ref = scipy_dp(1e-13)
    vm, cc = simulate(num, grid, rtol=rtol, compile="no"), simulate(num, grid, rtol=rtol, compile="yes")
    assert np.array_equal(vm.x, cc.x), "the compiled rhs must give the VM's trajectory"
    err_pdsl = float(np.max(np.abs(vm.x - ref)))
    rt_eq, err_eq = equal_accuracy_rtol(scipy_dp, lambda X: float(np.max(np.abs(X - ref))), err_pdsl,
                                        step=0.5 if quick else 0.25)
    d8 = simulate(num, grid, rtol=rtol, integrator="dop853")
    err_d8 = float(np.max(np.abs(d8.x - ref)))
    rt_d8, err_d8s = equal_accuracy_rtol(scipy_dp, lambda X: float(np.max(np.abs(X - ref))), err_d8,
                                         step=0.5 if quick else 0.25)
    t = bn.measure_many({"vm": lambda: simulate(num, grid, rtol=rtol, compile="no"),
                         "c": lambda: simulate(num, grid, rtol=rtol, compile="yes"),
                         "d8": lambda: simulate(num, grid, rtol=rtol, integrator="dop853"),
                         "scipy": lambda: scipy_dp(rt_eq), "scipy_d8": lambda: scipy_dp(rt_d8)}, repeats)
    _rows(rows, summary, "double pendulum (4 states), t = 0…10, 1001 outputs", "double pendulum", 8, t, rtol,
          {"c": err_pdsl, "d8": err_d8}, {"c": f"DOP853 rtol {rt_eq:.3g}, closed-form rhs: error {err_eq:.2e}",
                                         "d8": f"DOP853 rtol {rt_d8:.3g}, closed-form rhs: error {err_d8s:.2e}"}, cc.info)
    # --- 5-link Cartesian chain, generated numpy rhs
    num5 = compile_model(MODELS / "pendulum5.phm").numeric
    grid5 = np.linspace(0.0, 3.0, 301)
    start = simulate(num5, grid5[:2], x0={"b[1].x": 0.5}, rtol=rtol)  # the projected (consistent) start
    y0 = start.x[0]
    with tempfile.TemporaryDirectory() as tmp:
        files = compile_to(num5, "python", Path(tmp) / "py")
        mod_path = next(f for f in files if f.suffix == ".py")
        spec = importlib.util.spec_from_file_location("pdsl_generated_chain5", mod_path)
        gen = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(gen)
    fun5 = gen.rhs
    assert np.allclose(fun5(0.0, y0), np.asarray(num5.rhs(0.0, y0, num5.p_default, [])).ravel(), rtol=1e-10, atol=1e-10)
    x5 = dict(zip(num5.x_names, y0.tolist()))

    def pdsl5(compile):
        return simulate(num5, grid5, x0=x5, rtol=rtol, project=False, compile=compile)

    ref5 = scipy_dp(1e-13, fun5, y0, grid5)
    vm5, cc5 = pdsl5("no"), pdsl5("yes")
    assert np.array_equal(vm5.x, cc5.x), "the compiled rhs must give the VM's trajectory"
    err5 = float(np.max(np.abs(vm5.x - ref5)))
    rt5, err5s = equal_accuracy_rtol(lambda rt: scipy_dp(rt, fun5, y0, grid5), lambda X: float(np.max(np.abs(X - ref5))),
                                     err5, step=0.5 if quick else 0.25)
    d85 = simulate(num5, grid5, x0=x5, rtol=rtol, project=False, integrator="dop853")
    err85 = float(np.max(np.abs(d85.x - ref5)))
    rt85, err85s = equal_accuracy_rtol(lambda rt: scipy_dp(rt, fun5, y0, grid5),
                                       lambda X: float(np.max(np.abs(X - ref5))), err85, step=0.5 if quick else 0.25)
    t5 = bn.measure_many({"vm": lambda: pdsl5("no"), "c": lambda: pdsl5("yes"),
                          "d8": lambda: simulate(num5, grid5, x0=x5, rtol=rtol, project=False, integrator="dop853"),
                          "scipy": lambda: scipy_dp(rt5, fun5, y0, grid5),
                          "scipy_d8": lambda: scipy_dp(rt85, fun5, y0, grid5)}, 5 if quick else 9)
    _rows(rows, summary, "5-link Cartesian chain (20 states), t = 0…3, 301 outputs", "5-link chain", 20, t5, rtol,
          {"c": err5, "d8": err85}, {"c": f"DOP853 rtol {rt5:.3g}, generated numpy rhs: error {err5s:.2e}",
                                     "d8": f"DOP853 rtol {rt85:.3g}, generated numpy rhs: error {err85s:.2e}"}, cc5.info)
    text = (
        "Errors are max |x − x_ref| over outputs and states, x_ref = DOP853 at rtol 1e-13 (atol 1e-15); scipy's rtol is the "
        "loosest on a 10^-¼ grid whose error (and every tighter one's) is ≤ pdsl's. The chain starts from pdsl's projected "
        "state for `b[1].x = 0.5` (both integrators get the same start; pdsl does not project again). pdsl runs twice: "
        "`compile=\"no\"` (CasADi's SX virtual machine evaluates the right-hand side) and `compile=\"yes\"` (the C library, "
        "built once before the timing, as `--compile auto` uses it once it exists); both give the same trajectory to the "
        "last bit. A third run uses `integrator=\"dop853\"` (`pdsl simulate --integrator dop853`): scipy's own method and "
        "step control compiled to C around the generated right-hand side (pdsl.sim.native), matched to scipy at its own "
        "error. The acceptance ratio is the faster of the compiled CVODES and the dop853 run, each against scipy at that "
        "run's accuracy. Interleaved rounds, medians.\n\n"
        + table(["system", "pdsl", "pdsl time", "scipy", "scipy time", "scipy / pdsl", "target", "met?"], rows)
    )
    return text, summary


def _rows(rows, summary, title, short, target, t, rtol, err, scipy_text, info) -> None:
    """Table rows for one system: pdsl (CVODES with the VM and with the compiled rhs, and dop853) against scipy."""
    ratio = {"vm": t["scipy"].median / t["vm"].median, "c": t["scipy"].median / t["c"].median,
             "d8": t["scipy_d8"].median / t["d8"].median}
    extra = f", {info.get('iteration')} iteration" if info.get("iteration") else ""
    for key, how in (("vm", f"CVODES rtol {rtol:g}{extra}, VM rhs: error {err['c']:.2e}"),
                     ("c", f"CVODES rtol {rtol:g}{extra}, compiled rhs: error {err['c']:.2e}"),
                     ("d8", f"dop853 (compiled C) rtol {rtol:g}: error {err['d8']:.2e}")):
        sk = "scipy_d8" if key == "d8" else "scipy"
        rows.append([title if key == "vm" else "″", how, t[key].fmt(), scipy_text["c"] if key == "vm" else
                     (scipy_text["d8"] if key == "d8" else "″"), t[sk].fmt(), f"**{ratio[key]:.2f}×**", f"≥ {target}×",
                     "" if key == "vm" else ("met" if ratio[key] >= target else "not met")])
    best = max(("c", "d8"), key=ratio.get)
    name = {"c": "CVODES, compiled rhs", "d8": "--integrator dop853"}[best]
    summary.append([f"in-process simulate, {short}, equal accuracy ({name}; CVODES compiled {ratio['c']:.2f}×, "
                    f"VM {ratio['vm']:.2f}×, dop853 {ratio['d8']:.2f}×)", f"{ratio[best]:.2f}×",
                    f"≥ {target}×", "met" if ratio[best] >= target else "not met"])


# ----------------------------------------------------------------------------- whole process
SCIPY_SCRIPT = '''\
import sys
import numpy as np
from math import sin, cos
from scipy.integrate import solve_ivp

m1, m2, l1, l2, g = 1.1722, 1.0391, 1.0359, 1.0822, 9.81
a, d, k = (m1 + m2) * l1 * l1, m2 * l2 * l2, m2 * l1 * l2
ga, gb = (m1 + m2) * g * l1, m2 * g * l2


def f(t, x):
    q1, q2, w1, w2 = x
    s, c = sin(q1 - q2), cos(q1 - q2)
    b = k * c
    r1 = -k * s * w2 * w2 - ga * sin(q1)
    r2 = k * s * w1 * w1 - gb * sin(q2)
    det = a * d - b * b
    return [w1, w2, (d * r1 - b * r2) / det, (a * r2 - b * r1) / det]


grid = np.linspace(0.0, 10.0, 1001)
rtol = float(sys.argv[1])
sol = solve_ivp(f, (0.0, 10.0), [1.0, -0.5, 0.0, 0.0], method="DOP853", t_eval=grid, rtol=rtol, atol=rtol * 1e-2)
np.savetxt(sys.argv[2], np.column_stack([sol.t, sol.y.T]), delimiter=",", header="t,q1,q2,der(q1),der(q2)", comments="")
'''


def whole_process(quick: bool, tmp: Path) -> tuple[str, list]:
    from scipy.integrate import solve_ivp

    from pdsl.pipeline import compile_model
    from pdsl.sim.simulate import simulate

    rounds = 5 if quick else 9
    rtol = 1e-10
    # equal accuracy, decided in process (the same integrations the processes run)
    num = compile_model(DOUBLE_PENDULUM).numeric
    grid = np.linspace(0.0, 10.0, 1001)
    bn = bench_numerics_module()
    f_np = bn.double_pendulum_rhs(num.p_default)

    def scipy_dp(rt):
        return solve_ivp(f_np, (0.0, 10.0), num.x_start, method="DOP853", t_eval=grid, rtol=rt, atol=rt * 1e-2).y.T

    ref = scipy_dp(1e-13)
    err_pdsl = float(np.max(np.abs(simulate(num, grid, rtol=rtol).x - ref)))
    rt_eq, err_eq = equal_accuracy_rtol(scipy_dp, lambda X: float(np.max(np.abs(X - ref))), err_pdsl,
                                        step=0.5 if quick else 0.25)
    script = tmp / "scipy_double_pendulum.py"
    script.write_text(SCIPY_SCRIPT, encoding="utf-8")
    cache = tmp / "cache"
    env_cached = child_env(PDSL_CACHE_DIR=str(cache))
    sim = ["simulate", str(DOUBLE_PENDULUM), "--t-end", "10", "--dt", "0.01", "--rtol", f"{rtol:g}"]
    run_child(pdsl_argv(*sim, "-o", str(tmp / "warm.csv")), env_cached)  # fills the cache (and lark's tables)
    cmds = {
        "version": (pdsl_argv("--version"), env_cached),
        "help": (pdsl_argv("--help"), env_cached),
        "cached": (pdsl_argv(*sim, "-o", str(tmp / "a.csv")), env_cached),
        "uncached": (pdsl_argv(*sim, "--no-cache", "-o", str(tmp / "b.csv")), env_cached),
        "scipy": ([sys.executable, str(script), repr(float(rt_eq)), str(tmp / "c.csv")], child_env()),
        "python": ([sys.executable, "-c", "pass"], child_env()),
    }
    t = interleaved(cmds, rounds)
    med = {k: statistics.median(v) for k, v in t.items()}
    a = np.loadtxt(tmp / "a.csv", delimiter=",", skiprows=1)[:, 1:5]
    c = np.loadtxt(tmp / "c.csv", delimiter=",", skiprows=1)[:, 1:5]
    same = (tmp / "a.csv").read_bytes() == (tmp / "b.csv").read_bytes()
    r_cached, r_uncached = med["scipy"] / med["cached"], med["scipy"] / med["uncached"]
    rows = [
        ["`python -c pass` (interpreter floor)", fmt_s(t["python"]), "", ""],
        ["`pdsl --version`", fmt_s(t["version"]), "< 0.15 s", "met" if med["version"] < 0.15 else "**not met**"],
        ["`pdsl --help`", fmt_s(t["help"]), "", ""],
        [f"`pdsl simulate` double pendulum, cached (rtol {rtol:g}; error {err_pdsl:.2e})", fmt_s(t["cached"]), "< 0.5 s",
         "met" if med["cached"] < 0.5 else "**not met**"],
        ["`pdsl simulate` double pendulum, `--no-cache`", fmt_s(t["uncached"]), "", ""],
        [f"plain scipy script, DOP853 rtol {rt_eq:.3g} (error {err_eq:.2e}), `np.savetxt`", fmt_s(t["scipy"]), "", ""],
        ["**scipy / pdsl cached**", f"**{r_cached:.2f}×**", "≥ 2×", "met" if r_cached >= 2 else "**not met**"],
        ["**scipy / pdsl uncached**", f"**{r_uncached:.2f}×**", "≥ 1× (no slower)", "met" if r_uncached >= 1 else "**not met**"],
    ]
    text = (
        f"Fresh processes (`{Path(sys.executable).name}`, bytecode caching on), wall-clock, one warm-up round, then {rounds} "
        f"interleaved rounds, medians. Both CSVs hold the "
        f"same trajectory to {float(np.max(np.abs(a - c))):.1e} (max difference of the states); the cached and the uncached "
        f"pdsl CSV are {'byte-identical' if same else '**not** byte-identical'}.\n\n"
        + table(["command", "time", "target", "met?"], rows)
    )
    summary = [
        ["`pdsl --version`", f"{med['version']:.3f} s", "< 0.15 s", "met" if med["version"] < 0.15 else "not met"],
        ["cached `pdsl simulate` (small model)", f"{med['cached']:.3f} s", "< 0.5 s", "met" if med["cached"] < 0.5 else "not met"],
        ["whole process, scipy / cached pdsl", f"{r_cached:.2f}×", "≥ 2×", "met" if r_cached >= 2 else "not met"],
        ["whole process, scipy / uncached pdsl", f"{r_uncached:.2f}×", "≥ 1×", "met" if r_uncached >= 1 else "not met"],
    ]
    return text, summary


# ----------------------------------------------------------------------------- scaling
def cucker_smale_text(n: int) -> str:
    src = (MODELS / "cucker_smale.phm").read_text(encoding="utf-8")
    rng = np.random.default_rng(2024)
    x, v = np.round(rng.uniform(-10, 10, n), 4), np.round(rng.uniform(-10, 10, n), 4)

    def fmt(a):
        return "[" + ", ".join(f"{t:.4f}" for t in a) + "]"

    src = src.replace("const N = 30", f"const N = {n}")
    src = re.sub(r"var x\[1\.\.N\] = \[[^\]]*\]", "var x[1..N] = " + fmt(x), src)
    return re.sub(r"var v\[1\.\.N\] = \[[^\]]*\]", "var v[1..N] = " + fmt(v), src)


def exponent(ns, ts) -> str:
    pts = [(n, t) for n, t in zip(ns, ts) if math.isfinite(t) and t > 0]
    pts = pts[-3:] if len(pts) >= 3 else pts
    if len(pts) < 2:
        return "n/a"
    k = np.polyfit(np.log([n for n, _ in pts]), np.log([t for _, t in pts]), 1)[0]
    return f"{k:.2f}"


def scaling(quick: bool, tmp: Path) -> tuple[str, list]:
    env = child_env(PDSL_NO_CACHE="1")
    sections, summary = [], []
    studies = [
        ("Cucker–Smale (plain `der` equations, N² pair terms)", "cs",
         [10, 20, 40] if quick else [10, 20, 40, 70, 100],
         lambda n: (["check"], ["simulate", "--t-end", "1", "--dt", "0.1"])),
        ("RLC ladder (port-Hamiltonian network, 2N states)", "rlc",
         [50, 100, 200] if quick else [100, 250, 500, 1000],
         lambda n: (["check", "--const", f"N={n}"],
                    ["simulate", "--const", f"N={n}", "--input", "V=1", "--t-end", "10", "--dt", "0.05"])),
        ("pendulum chain (Cartesian bodies and links, 4N states)", "chain",
         [2, 4, 8] if quick else [2, 4, 8, 12, 16],
         lambda n: (["check", "--const", f"N={n}"],
                    ["simulate", "--const", f"N={n}", "--init", "b[1].x=0.5", "--t-end", "1", "--dt", "0.01"])),
    ]
    for title, tag, ns, args in studies:
        rows, tc, ts = [], [], []
        for n in ns:
            if tag == "cs":
                model = tmp / f"cs{n}.phm"
                model.write_text(cucker_smale_text(n), encoding="utf-8")
            else:
                model = MODELS / ("rlc_ladder.phm" if tag == "rlc" else "pendulum_chain.phm")
            check_args, sim_args = args(n)
            t_check, m_check, _ = run_child(pdsl_argv(check_args[0], str(model), *check_args[1:]), env)
            t_sim, m_sim, _ = run_child(pdsl_argv(sim_args[0], str(model), *sim_args[1:], "-o", str(tmp / f"{tag}{n}.csv")), env)
            tc.append(t_check)
            ts.append(t_sim)
            rows.append([n, f"{t_check:.2f} s", f"{m_check:.0f} MiB", f"{t_sim:.2f} s", f"{m_sim:.0f} MiB"])
            log(f"  {tag} N={n}: check {t_check:.2f} s ({m_check:.0f} MiB), simulate {t_sim:.2f} s ({m_sim:.0f} MiB)")
        horizon = " ".join(args(ns[-1])[1][-4:])
        sections.append(f"### {title}\n\n`pdsl simulate … {horizon}` (and the model's own options), `--no-cache`.\n\n"
                        + table(["N", "`pdsl check`", "peak RSS", "`pdsl simulate`", "peak RSS"], rows)
                        + f"\n\nGrowth exponent (log t against log N, largest three sizes): check **{exponent(ns, tc)}**, "
                          f"simulate **{exponent(ns, ts)}**.")
        if tag == "cs" and 100 in ns:
            summary.append(["`pdsl check` Cucker–Smale N = 100", f"{tc[ns.index(100)]:.2f} s", "< 5 s",
                            "met" if tc[ns.index(100)] < 5 else "not met"])
        if tag == "rlc" and 1000 in ns:
            summary.append(["`pdsl simulate` RLC ladder N = 1000 (t = 0…10)", f"{ts[ns.index(1000)]:.2f} s", "< 10 s",
                            "met" if ts[ns.index(1000)] < 10 else "not met"])
    if not quick:  # the acceptance run: Cucker–Smale N = 100 over 10 s (stopped after 300 s)
        model = tmp / "cs100.phm"
        t_sim, m_sim, code = run_child(pdsl_argv("simulate", str(model), "--t-end", "10", "--dt", "0.1", "-o",
                                                 str(tmp / "cs100.csv")), env, timeout=300)
        shown = f"{t_sim:.1f} s ({m_sim:.0f} MiB)" if code == 0 else "stopped after 300 s"
        sections.append(f"Cucker–Smale N = 100 over t = 0…10 (`--dt 0.1`, CVODES Adams rtol 1e-8, functional iteration "
                        f"(200 states), `--compile auto` without a cache: the VM): {shown}.")
        summary.append(["`pdsl simulate` Cucker–Smale N = 100, t = 0…10", shown, "< 30 s",
                        "met" if code == 0 and t_sim < 30 else "not met"])
    return "\n\n".join(sections), summary


# ----------------------------------------------------------------------------- main
def environment(quick: bool) -> str:
    import casadi as ca
    import scipy
    import sympy

    import pdsl


    dirty = " (working tree has uncommitted changes)" if git("status", "--porcelain", "--untracked-files=no") else ""
    rows = [
        ["date", _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC")],
        ["mode", "quick (`--quick`)" if quick else "full"],
        ["machine", f"`{platform.platform()}`, {os.cpu_count()} CPUs (shared with other work: see the load)"],
        ["load average at start (1/5/15 min)", loadavg()],
        ["python", platform.python_version()],
        ["pdsl", f"{pdsl.__version__} @ {git('rev-parse', '--short', 'HEAD') or 'n/a'}{dirty}"],
        ["casadi / sympy / numpy / scipy", f"{ca.__version__} / {sympy.__version__} / {np.__version__} / {scipy.__version__}"],
    ]
    return table(["", ""], rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("-o", "--output", default=str(RESULTS))
    args = ap.parse_args()
    t0 = time.perf_counter()
    tmp = Path(tempfile.mkdtemp(prefix="pdsl-bench-"))
    try:
        env_text = environment(args.quick)
        log("whole process …")
        wp_text, wp_sum = whole_process(args.quick, tmp)
        log(wp_text)
        log("in process …")
        ip_text, ip_sum = in_process(args.quick)
        log(ip_text)
        log("scaling …")
        sc_text, sc_sum = scaling(args.quick, tmp)
        load_end = loadavg()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    summary = wp_sum + ip_sum + sc_sum
    doc = "\n\n".join([
        "# Start-up, compiled-model cache, front-end scaling (issue 18)",
        f"Generated by `python benchmarks/bench_startup_scale.py{' --quick' if args.quick else ''}` in "
        f"{time.perf_counter() - t0:.0f} s. Load average at the end: {load_end}. See [docs/benchmarks.md](../docs/benchmarks.md).",
        env_text,
        "## Summary (acceptance of issue 18)",
        table(["measure", "value", "target", "met?"], summary),
        "## 1. Whole process: pdsl against a plain scipy script",
        wp_text,
        "## 2. In process: simulate at equal accuracy",
        ip_text,
        "## 3. Scaling with model size (whole process, time and peak memory)",
        sc_text,
    ]) + "\n"
    out = Path(args.output)
    tmp_out = out.with_suffix(".md.tmp")
    tmp_out.write_text(doc, encoding="utf-8")
    os.replace(tmp_out, out)
    log(f"-> {out}")


if __name__ == "__main__":
    main()
