"""N-pendulum: cost of pdsl's Cartesian lowering vs sympy.physics.mechanics (not run in CI).

For N = 2 … 20 (``models/pendulum_chain.phm`` with ``const N`` overridden) this measures, in one run:

* the time from the ``.phm`` text to a callable CasADi rhs, split into parse, resolve, lower
  (``pdsl.lower.lower``: the Cartesian lowering plus the derived invariants) and ``to_casadi``,
  for both formulations (Eq. 6 ``hamiltonian``, Eq. 7 ``lagrangian``);
* the CasADi instruction count of the rhs and the cost of one rhs evaluation (a Python call of the
  CasADi Function, and per state of a 1000-state ``map``).

For N = 2 … 6 the reference route is sympy.physics.mechanics: ``LagrangesMethod`` in angle
coordinates, ``rhs()`` (which LU-solves the mass matrix symbolically) and ``lambdify`` to a numeric
function; each N runs in its own process with a time cap (``--sympy-timeout``, default 240 s) and a
timeout is recorded as such. sympy's cache is cleared before every pdsl measurement.

Run: ``python benchmarks/bench_pendulum_lowering.py`` (writes benchmarks/results_pendulum_lowering.md;
``--quick`` for N ≤ 8 and sympy N ≤ 4).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import platform
import statistics
import sys
import time
from pathlib import Path

import casadi as ca
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pdsl.backend.functions import to_casadi  # noqa: E402
from pdsl.lower import lower  # noqa: E402
from pdsl.parse.parser import parse_text  # noqa: E402
from pdsl.pipeline import resolve_file  # noqa: E402

MODEL = ROOT / "models" / "pendulum_chain.phm"
OUT = Path(__file__).resolve().parent / "results_pendulum_lowering.md"


# ---------------------------------------------------------------------------- pdsl
def pdsl_once(text: str, n: int, formulation: str) -> dict:
    from sympy.core.cache import clear_cache

    clear_cache()
    t0 = time.perf_counter()
    ast = parse_text(text, str(MODEL))
    t1 = time.perf_counter()
    model = resolve_file(ast, {"N": n})[0]
    t2 = time.perf_counter()
    system = lower(model, formulation)
    t3 = time.perf_counter()
    num = to_casadi(system)
    t4 = time.perf_counter()
    return dict(parse=t1 - t0, resolve=t2 - t1, lower=t3 - t2, casadi=t4 - t3, total=t4 - t0, num=num)


def consistent_state(n: int, formulation: str) -> np.ndarray:
    """A chain state from angles (unit masses and lengths, as the file's defaults)."""
    rng = np.random.default_rng(n)
    q, qd = rng.normal(size=n), rng.normal(size=n)
    pos = np.column_stack([np.cumsum(np.sin(q)), np.cumsum(-np.cos(q))]).ravel()
    vel = np.column_stack([np.cumsum(np.cos(q) * qd), np.cumsum(np.sin(q) * qd)]).ravel()
    return np.concatenate([pos, vel])  # m = 1: p = v


def time_call(f, *args, repeat: int | None = None, budget: float = 0.2) -> float:
    """Best of 5 rounds of the mean time per call; ``repeat`` adapts to ~``budget`` seconds a round."""
    t0 = time.perf_counter()
    f(*args)
    first = time.perf_counter() - t0
    if repeat is None:
        repeat = max(1, min(20000, int(budget / max(first, 1e-7))))
    best = float("inf")
    for _ in range(5 if first < 1.0 else 2):
        t0 = time.perf_counter()
        for _ in range(repeat):
            f(*args)
        best = min(best, (time.perf_counter() - t0) / repeat)
    return best


def tree_ops(expr) -> int:
    """Arithmetic operations of the expression tree (what lambdify's generated code evaluates), memoized."""
    memo: dict = {}

    def count(e) -> int:
        if e in memo:
            return memo[e]
        if not e.args:
            n = 0
        else:
            n = (len(e.args) - 1 if (e.is_Add or e.is_Mul) else 1) + sum(count(a) for a in e.args)
        memo[e] = n
        return n

    return sum(count(e) for e in expr)


def pdsl_eval_cost(num, n: int, formulation: str) -> tuple[float, float, float]:
    """(Python call, buffered evaluation, per state in a 1000-state map) in seconds."""
    z = consistent_state(n, formulation)
    p, u = num.p_default.copy(), np.zeros(0)
    call = time_call(num.rhs, 0.0, z, p, u)
    buf, f_eval = num.rhs.buffer()  # evaluation without argument conversion
    t, out = np.zeros(1), np.zeros(num.nx)
    for i, arg in enumerate((t, z, p, u)):
        buf.set_arg(i, memoryview(arg))
    buf.set_res(0, memoryview(out))
    buffered = time_call(f_eval)
    K = 1000
    fmap = num.rhs.map(K)
    batched = time_call(fmap, np.zeros((1, K)), np.tile(z[:, None], K), np.tile(p[:, None], K), np.zeros((0, K))) / K
    return call, buffered, batched


# ---------------------------------------------------------------------------- sympy.physics.mechanics
def sympy_route(n: int, queue) -> None:
    import sympy as sp
    import sympy.physics.mechanics as me

    t0 = time.perf_counter()
    q = me.dynamicsymbols(f"q1:{n + 1}")
    qd = [me.dynamicsymbols(f"q{i}", 1) for i in range(1, n + 1)]
    m = sp.symbols(f"m1:{n + 1}")
    l = sp.symbols(f"l1:{n + 1}")
    g = sp.Symbol("g")
    frame = me.ReferenceFrame("N")
    origin = me.Point("O")
    origin.set_vel(frame, 0)
    prev, particles = origin, []
    for i in range(n):
        A = frame.orientnew(f"A{i + 1}", "Axis", [q[i], frame.z])
        P = prev.locatenew(f"P{i + 1}", -l[i] * A.y)  # angle from −y: (l sin q, −l cos q)
        P.v2pt_theory(prev, frame, A)
        pa = me.Particle(f"pa{i + 1}", P, m[i])
        pa.potential_energy = m[i] * g * P.pos_from(origin).dot(frame.y)
        particles.append(pa)
        prev = P
    L = me.Lagrangian(frame, *particles)
    lm = me.LagrangesMethod(L, q)
    lm.form_lagranges_equations()
    t1 = time.perf_counter()
    queue.put(("stage", "derive", t1 - t0))
    rhs = lm.rhs()
    t2 = time.perf_counter()
    queue.put(("stage", "rhs", t2 - t1))
    qs, us = sp.symbols(f"qs1:{n + 1}"), sp.symbols(f"us1:{n + 1}")
    rep = {d: u for d, u in zip(qd, us)}
    rhs = rhs.xreplace(rep).xreplace(dict(zip(q, qs)))
    ops = tree_ops(list(rhs))
    queue.put(("stage", "ops", ops))
    t3 = time.perf_counter()
    f = sp.lambdify([qs, us, m, l, g], list(rhs), "math")
    t4 = time.perf_counter()
    queue.put(("stage", "lambdify", t4 - t3))
    rng = np.random.default_rng(n)
    qv, uv = list(rng.normal(size=n)), list(rng.normal(size=n))
    args = (qv, uv, [1.0] * n, [1.0] * n, 9.81)
    out = np.array(f(*args), dtype=float)
    queue.put(("stage", "check", (qv, uv, out.tolist())))
    queue.put(("stage", "single", time_call(f, *args)))
    fv = sp.lambdify([qs, us, m, l, g], list(rhs), "numpy")
    K = 1000
    Q, U = list(rng.normal(size=(n, K))), list(rng.normal(size=(n, K)))
    queue.put(("stage", "batched", time_call(fv, Q, U, [1.0] * n, [1.0] * n, 9.81) / K))
    queue.put(("done",))


def run_sympy(n: int, timeout: float) -> dict:
    """Stages reported so far; ``timeout`` set when the cap was hit (the stage then running is the next one)."""
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    proc = ctx.Process(target=sympy_route, args=(n, queue))
    t0 = time.perf_counter()
    proc.start()
    result: dict = {}
    while True:
        left = timeout - (time.perf_counter() - t0)
        if left <= 0:
            result["timeout"] = True
            break
        try:
            msg = queue.get(timeout=min(1.0, left))
        except Exception:  # noqa: BLE001 - queue.Empty
            if not proc.is_alive():
                result["failed"] = True
                break
            continue
        if msg[0] == "done":
            break
        result[msg[1]] = msg[2]
    if proc.is_alive():
        proc.terminate()
    proc.join(5)
    if "lambdify" in result:
        result["total"] = result["derive"] + result["rhs"] + result["lambdify"]
    return result


def angle_accelerations_from_pdsl(num, qv, uv) -> np.ndarray:
    """q̈ from the Cartesian Eq. 7 rhs at the state given by angles (unit m, l)."""
    q, qd = np.asarray(qv), np.asarray(uv)
    n = len(q)
    pos = np.column_stack([np.cumsum(np.sin(q)), np.cumsum(-np.cos(q))]).ravel()
    vel = np.column_stack([np.cumsum(np.cos(q) * qd), np.cumsum(np.sin(q) * qd)]).ravel()
    acc = np.asarray(num.rhs(0.0, np.concatenate([pos, vel]), num.p_default, np.zeros(0))).ravel()[2 * n :].reshape(n, 2)
    rel = np.diff(np.vstack([[0.0, 0.0], acc]), axis=0)  # a_k − a_{k−1} = d²/dt² (sin q, −cos q)
    # (sin q)'' = cos q q̈ − sin q q̇²  ->  q̈ = (rel_x + sin q q̇²)/cos q, or use the y part where cos q is small
    qdd_x = (rel[:, 0] + np.sin(q) * qd**2) / np.cos(q)
    qdd_y = (rel[:, 1] - np.cos(q) * qd**2) / np.sin(q)
    return np.where(np.abs(np.cos(q)) > np.abs(np.sin(q)), qdd_x, qdd_y)


# ---------------------------------------------------------------------------- report
NOTES = """
## Notes

* Before this lowering (the commit e3039b8 version of `pdsl/lower/cartesian.py`, measured in the same
  environment on 2026-11-22 with `pdsl.lower.lower` + `to_casadi`): N = 20 took 6.8 s (Eq. 7: lower 1.3 s,
  to_casadi 5.5 s) and 16.2 s (Eq. 6: lower 1.8 s, to_casadi 14.4 s), with 142,978 and 2,184,327 rhs
  instructions; N = 10: 21,813 and 289,507. Growth of the instruction count was cubic: CasADi's SX
  `solve(A, b)` does an unpivoted symbolic QR of the whole (2n + 2C)-sized saddle-point matrix unless it is
  triangular after a permutation, and `SymbolicSystem.linear_system` spent ~10 s in
  `Matrix.subs({unknown: 0})` (quadratic in the model size; `xreplace` is ~1000× faster).
* Now: the multipliers are eliminated through a symbolic LDLᵀ of G = DΦ M⁻¹ DΦᵀ in a minimum-degree order
  (tridiagonal G for a chain: no fill), every row is linear in the unknowns and the whole system is
  triangular after a permutation, so CasADi solves it by substitution (instructions linear in N);
  `CartesianSystem.linear_system` reads A, b off the rows instead of differentiating and substituting;
  DΦ, ∇V, M⁻¹ and G are built sparse, body by body.
* Accuracy (A3.5 rotor, λ₁ ≈ 0.003): the rhs now matches a 40-digit reference to ~5e-16 relative (Eq. 7)
  where the former SX QR gave 4.8e-10.
* "rhs call" is dominated by the SWIG conversion of numpy arguments (~55 µs for any size); "rhs
  buffered" is the evaluation itself. The per-state cost inside a 1000-state `map` called from Python
  also includes converting the (n, 1000) arrays, so it is above the buffered single evaluation.
* The sympy route's cost is in `lambdify` (code generation for an expression tree that grows ~8× per
  pendulum, since `rhs()` LU-solves the mass matrix symbolically without common subexpressions).
"""


def slope(ns, ts) -> float:
    return float(np.polyfit(np.log(ns), np.log(ts), 1)[0])


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--sympy-timeout", type=float, default=240.0)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    text = MODEL.read_text()
    ns = list(range(2, 9)) if args.quick else list(range(2, 21))
    sympy_ns = list(range(2, 5)) if args.quick else list(range(2, 7))
    rows = {}
    for formulation in ("lagrangian", "hamiltonian"):
        for n in ns:
            runs = [pdsl_once(text, n, formulation) for _ in range(args.repeat)]
            med = {k: statistics.median(r[k] for r in runs) for k in ("parse", "resolve", "lower", "casadi", "total")}
            num = runs[-1]["num"]
            single, buffered, batched = pdsl_eval_cost(num, n, formulation)
            rows[(formulation, n)] = dict(**med, ops=num.rhs.n_instructions(), single=single, buffered=buffered,
                                          batched=batched, num=num)
            r = rows[(formulation, n)]
            print(f"pdsl {formulation:<11} N={n:>2}  total {r['total']:.3f}s (lower {r['lower']:.3f}, casadi {r['casadi']:.3f})  "
                  f"ops {r['ops']:>6}  rhs {r['single'] * 1e6:.1f} us/call, {r['buffered'] * 1e6:.2f} us buffered, "
                  f"{r['batched'] * 1e9:.0f} ns/state", flush=True)
    sym = {}
    for n in sympy_ns:
        res = run_sympy(n, args.sympy_timeout)
        sym[n] = res
        if "batched" not in res:
            print(f"sympy N={n}: {'timeout' if res.get('timeout') else 'failure'} after {args.sympy_timeout:.0f} s; "
                  f"stages done: {res}", flush=True)
            continue
        qv, uv, out = res["check"]
        qdd_ref = np.asarray(out)[n:]
        qdd = angle_accelerations_from_pdsl(rows[("lagrangian", n)]["num"], qv, uv)
        res["agree"] = float(np.abs(qdd - qdd_ref).max() / np.abs(qdd_ref).max())
        print(f"sympy N={n}: total {res['total']:.2f}s (derive {res['derive']:.2f}, rhs() {res['rhs']:.2f}, lambdify {res['lambdify']:.2f})  "
              f"ops {res['ops']}  rhs {res['single'] * 1e6:.1f} us/call, {res['batched'] * 1e9:.0f} ns/state  "
              f"agreement with pdsl {res['agree']:.1e}", flush=True)
    write_report(rows, sym, ns, sympy_ns, args)


def write_report(rows, sym, ns, sympy_ns, args) -> None:
    L = []
    L.append("# N-pendulum: lowering cost and rhs cost, pdsl vs sympy.physics.mechanics\n")
    L.append(f"Generated by `python benchmarks/bench_pendulum_lowering.py{' --quick' if args.quick else ''}` "
             f"({time.strftime('%Y-%m-%d')}, Python {platform.python_version()}, CasADi {ca.__version__}, "
             f"{platform.machine()}, one core). Model: `models/pendulum_chain.phm` with `--const N`, m = l = 1.\n")
    L.append("pdsl times are medians of "
             f"{args.repeat} runs with sympy's cache cleared before each: text -> parse -> resolve -> lower "
             "(`pdsl.lower.lower`, including the derived invariants) -> `to_casadi` (CasADi SX functions). "
             "`ops` is `rhs.n_instructions()`. rhs cost: one Python call of the CasADi Function "
             "(`rhs(t, x, p, u)`, dominated by SWIG argument conversion), one evaluation through "
             "`Function.buffer()` (preset numpy buffers: the cost of the evaluation itself), and per state "
             "inside a 1000-state `map` called from Python.\n")
    L.append("sympy route: `LagrangesMethod` in angle coordinates, `form_lagranges_equations()`, `rhs()` "
             "(symbolic LU solve of the mass matrix), `lambdify` (math module for one call, numpy for a "
             f"1000-state vectorized call); `ops` = arithmetic operations of the rhs expression trees (what "
             f"the lambdified code evaluates). Each N in its own process, capped at "
             f"{args.sympy_timeout:.0f} s. 'agree' = max |q̈_sympy − q̈_pdsl| / max |q̈| at a random state "
             "(pdsl's Cartesian Eq. 7 accelerations mapped to angles).\n")
    for formulation, eq in (("lagrangian", "Eq. 7, states x, v"), ("hamiltonian", "Eq. 6, states x, p")):
        L.append(f"\n## pdsl, {formulation} ({eq})\n")
        L.append("| N | parse [s] | resolve [s] | lower [s] | to_casadi [s] | total [s] | rhs ops | rhs call [µs] | rhs buffered [µs] | rhs per state in map [ns] |")
        L.append("|---|---|---|---|---|---|---|---|---|---|")
        for n in ns:
            r = rows[(formulation, n)]
            L.append(f"| {n} | {r['parse']:.4f} | {r['resolve']:.4f} | {r['lower']:.3f} | {r['casadi']:.3f} | {r['total']:.3f} | "
                     f"{r['ops']} | {r['single'] * 1e6:.1f} | {r['buffered'] * 1e6:.2f} | {r['batched'] * 1e9:.0f} |")
        tot = [rows[(formulation, n)]["total"] for n in ns]
        ops = [rows[(formulation, n)]["ops"] for n in ns]
        big = [n for n in ns if n >= 5]
        L.append("")
        L.append(f"log-log slopes over N = {ns[0]}…{ns[-1]}: total time {slope(ns, tot):.2f}, "
                 f"rhs ops {slope(ns, ops):.2f}; over N = {big[0]}…{big[-1]}: total time "
                 f"{slope(big, [rows[(formulation, n)]['total'] for n in big]):.2f}, lower "
                 f"{slope(big, [rows[(formulation, n)]['lower'] for n in big]):.2f}, to_casadi "
                 f"{slope(big, [rows[(formulation, n)]['casadi'] for n in big]):.2f}, ops "
                 f"{slope(big, [rows[(formulation, n)]['ops'] for n in big]):.2f}.")
    L.append("\n## sympy.physics.mechanics (angle coordinates)\n")
    L.append("| N | derive [s] | rhs() [s] | lambdify [s] | total [s] | rhs ops (tree) | rhs call [µs] | rhs per state, numpy [ns] | agree |")
    L.append("|---|---|---|---|---|---|---|---|---|")
    for n in sympy_ns:
        s = sym[n]
        if "batched" not in s:
            cells = [f"{s[k]:.2f}" if k in s else ("timeout" if s.get("timeout") else "failed") for k in ("derive", "rhs", "lambdify")]
            ops = str(s["ops"]) if "ops" in s else ""
            L.append(f"| {n} | {' | '.join(cells)} | > {args.sympy_timeout:.0f} (cap) | {ops} | | | |")
            continue
        L.append(f"| {n} | {s['derive']:.2f} | {s['rhs']:.2f} | {s['lambdify']:.2f} | {s['total']:.2f} | {s['ops']} | "
                 f"{s['single'] * 1e6:.1f} | {s['batched'] * 1e9:.0f} | {s['agree']:.1e} |")
    done = [n for n in sympy_ns if "batched" in sym[n]]
    if len(done) >= 2:
        L.append("")
        L.append(f"log-log slopes over N = {done[0]}…{done[-1]}: total time "
                 f"{slope(done, [sym[n]['total'] for n in done]):.2f}, ops {slope(done, [sym[n]['ops'] for n in done]):.2f}, "
                 f"rhs call {slope(done, [sym[n]['single'] for n in done]):.2f}.")
    L.append("\n## Ratios (sympy / pdsl lagrangian, same N)\n")
    L.append("| N | lowering time | rhs: sympy call / pdsl buffered | rhs: sympy call / pdsl Python call | rhs per state (vectorized) | ops |")
    L.append("|---|---|---|---|---|---|")
    for n in done:
        r, s = rows[("lagrangian", n)], sym[n]
        L.append(f"| {n} | {s['total'] / r['total']:.1f}× | {s['single'] / r['buffered']:.0f}× | {s['single'] / r['single']:.1f}× | "
                 f"{s['batched'] / r['batched']:.0f}× | {s['ops'] / r['ops']:.1f}× |")
    n20 = max(ns)
    L.append("\n## Targets\n")
    for formulation in ("lagrangian", "hamiltonian"):
        r = rows[(formulation, n20)]
        big = [n for n in ns if n >= 5]
        sl = slope(big, [rows[(formulation, n)]["total"] for n in big])
        L.append(f"- {formulation}: N = {n20} lowered in {r['total']:.2f} s (target < 5 s: "
                 f"{'met' if r['total'] < 5 else 'NOT met'}); growth exponent {sl:.2f} over N ≥ 5 "
                 f"(target ≤ 2: {'met' if sl <= 2.05 else 'NOT met'}).")
    if 6 in done:
        r, s = rows[("lagrangian", 6)], sym[6]
        ratio = s["single"] / r["buffered"]
        L.append(f"- N = 6, one rhs evaluation: sympy {s['single'] * 1e6:.1f} µs vs pdsl {r['buffered'] * 1e6:.2f} µs "
                 f"(buffered), {ratio:.0f}× (target ≥ 100×: {'met' if ratio >= 100 else 'NOT met'}); through a plain "
                 f"Python call of the CasADi Function ({r['single'] * 1e6:.1f} µs) {s['single'] / r['single']:.0f}×; "
                 f"vectorized per state {s['batched'] / r['batched']:.0f}×.")
    elif 6 in sympy_ns:
        s6 = sym[6]
        r = rows[("lagrangian", 6)]
        L.append(f"- N = 6: the sympy route did not finish within {args.sympy_timeout:.0f} s (stages done: "
                 f"{', '.join(k for k in ('derive', 'rhs', 'ops', 'lambdify') if k in s6) or 'none'}), so it has no "
                 f"rhs to time; its expression has {s6.get('ops', '?')} operations vs {r['ops']} CasADi instructions "
                 f"for pdsl ({r['buffered'] * 1e6:.2f} µs per evaluation).")
    OUT.write_text("\n".join(L) + "\n" + NOTES)
    print(f"-> {OUT}")


if __name__ == "__main__":
    main()
