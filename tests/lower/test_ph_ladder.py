"""Arrays of port-Hamiltonian elements: the bundled RLC ladder (models/rlc_ladder.phm, issue 6).

The ladder has N sections: a series branch (res[k], ind[k], current i_k = phi[k]/L[k]) from node k−1 to node k and a
shunt capacitor cap[k] at node k (v_k = q[k]/C[k]); node 0 is the source V, node N also feeds R_load. Its state-space
form, written here by hand from Kirchhoff's laws (not from the model text):

    phi[k]' = v_{k−1} − v_k − R[k] i_k        (v_0 = V)
    q[k]'   = i_k − i_{k+1}                   (i_{N+1} = v_N / R_load)

Checks: one state per storage (2N, no algebraic variables), the compiled right-hand side equals A x + B V at random
points and parameters, the trajectory equals the exact solution e^{At} x0 + A⁻¹(e^{At} − I) B V of a voltage step to
1e-8, `--const N=3`, and `show --power` on the bundled model.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest
import scipy.linalg

from pdsl.cli.main import main
from pdsl.lower.structural import power_balance
from pdsl.pipeline import compile_model
from pdsl.sim.simulate import input_from_expression, simulate, time_grid

REPO_MODELS = Path(__file__).resolve().parents[2] / "models"

LADDER = Path(__file__).resolve().parents[2] / "models" / "rlc_ladder.phm"

_cache: dict = {}


def ladder(n=None):
    if n not in _cache:
        _cache[n] = compile_model(LADDER, consts={"N": n} if n is not None else None)
    return _cache[n]


def hand_matrices(R, L, C, R_load):
    """A, B of x = (phi[1..N], q[1..N]), input V."""
    N = len(R)
    A = np.zeros((2 * N, 2 * N))
    B = np.zeros(2 * N)
    for k in range(N):  # phi[k]' = v_{k-1} - v_k - R_k i_k
        A[k, k] = -R[k] / L[k]
        A[k, N + k] = -1.0 / C[k]
        if k > 0:
            A[k, N + k - 1] = 1.0 / C[k - 1]
    B[0] = 1.0
    for k in range(N):  # q[k]' = i_k - i_{k+1}
        A[N + k, k] = 1.0 / L[k]
        if k < N - 1:
            A[N + k, k + 1] = -1.0 / L[k + 1]
    A[2 * N - 1, 2 * N - 1] = -1.0 / (C[N - 1] * R_load)
    return A, B


def hand_order(N):
    return [f"phi[{k}]" for k in range(1, N + 1)] + [f"q[{k}]" for k in range(1, N + 1)]


def random_params(rng, N):
    return {"R": rng.uniform(0.1, 1.0, N), "L": rng.uniform(0.2, 1.0, N), "C": rng.uniform(0.05, 0.3, N),
            "R_load": rng.uniform(1.0, 10.0)}


def param_dict(P):
    out = {"R_load": P["R_load"]}
    for name in ("R", "L", "C"):
        out.update({f"{name}[{k + 1}]": v for k, v in enumerate(P[name])})
    return out


@pytest.mark.parametrize("n", [None, 3])
def test_one_state_per_storage(n):
    c = ladder(n)
    N = 10 if n is None else n
    s = c.system
    assert s.formalism == "port-hamiltonian"
    assert len(s.states) == 2 * N and not s.algebraics and not s.constraints
    assert sorted(st.name for st in s.states) == sorted(hand_order(N))
    assert s.is_explicit()
    stores = [e for e in c.model.elements if e.kind == "store"]
    assert len(stores) == 2 * N
    assert {e.name for e in stores} == {f"ind[{k}]" for k in range(1, N + 1)} | {f"cap[{k}]" for k in range(1, N + 1)}


@pytest.mark.parametrize("n", [None, 3])
def test_rhs_equals_hand_written_state_space(n):
    num = ladder(n).numeric
    N = 10 if n is None else n
    rng = np.random.default_rng(6)
    order = [num.x_names.index(name) for name in hand_order(N)]
    worst = 0.0
    for _ in range(20):
        P = random_params(rng, N)
        A, B = hand_matrices(P["R"], P["L"], P["C"], P["R_load"])
        p = num.param_vector(param_dict(P))
        x = rng.normal(size=2 * N)
        V = rng.normal()
        x_model = np.empty(2 * N)
        x_model[order] = x
        got = np.asarray(num.rhs(0.0, x_model, p, [V])).ravel()[order]
        want = A @ x + B * V
        worst = max(worst, np.max(np.abs(got - want)))
    assert worst <= 1e-12, worst


@pytest.mark.parametrize("n", [None, 3])
def test_trajectory_matches_exact_step_response(n):
    """A 1 V step from a random start: pdsl (CVODES, rtol 1e-12) against the matrix exponential of the hand A, B."""
    num = ladder(n).numeric
    N = 10 if n is None else n
    rng = np.random.default_rng(60 + N)
    P = random_params(rng, N)
    A, B = hand_matrices(P["R"], P["L"], P["C"], P["R_load"])
    x0 = rng.uniform(-0.2, 0.2, 2 * N)
    names = hand_order(N)
    res = simulate(num, time_grid(5.0, 0.05), x0=dict(zip(names, x0)), params=param_dict(P),
                   inputs={"V": input_from_expression(num, "V", "1")}, rtol=1e-12)
    Ainv_B = np.linalg.solve(A, B)
    ref = np.array([(E := scipy.linalg.expm(A * t)) @ x0 + (E - np.eye(2 * N)) @ Ainv_B for t in res.t])
    got = res.x[:, [num.x_names.index(name) for name in names]]
    err = np.abs(got - ref).max()
    assert err <= 1e-8, err
    assert np.abs(ref).max() > 0.1  # the comparison is not between two near-zero signals


def test_trajectory_matches_scipy_under_a_sinusoidal_source():
    """V = sin(3t): pdsl against scipy's DOP853 on the hand-written A x + B V (both at tight tolerances)."""
    import scipy.integrate

    num = ladder().numeric
    N = 10
    rng = np.random.default_rng(7)
    P = random_params(rng, N)
    A, B = hand_matrices(P["R"], P["L"], P["C"], P["R_load"])
    x0 = rng.uniform(-0.2, 0.2, 2 * N)
    names = hand_order(N)
    grid = time_grid(4.0, 0.05)
    ref = scipy.integrate.solve_ivp(lambda t, x: A @ x + B * np.sin(3 * t), (0, 4), x0, method="DOP853", t_eval=grid,
                                    rtol=1e-13, atol=1e-15).y.T
    res = simulate(num, grid, x0=dict(zip(names, x0)), params=param_dict(P),
                   inputs={"V": input_from_expression(num, "V", "sin(3*t)")}, rtol=1e-12)
    got = res.x[:, [num.x_names.index(name) for name in names]]
    err = np.abs(got - ref).max()
    assert err <= 1e-8, err


def test_power_balance_holds_identically():
    c = ladder(3)
    pb = power_balance(c.system)
    assert pb.residual == 0 and not pb.modulo
    dissipated = {port for role, port, _ in pb.terms if role == "resistive"}
    assert dissipated == {"res[1]", "res[2]", "res[3]", "load"}


def test_show_power_of_bundled_ladder(capsys):
    t0 = time.process_time()  # CPU seconds of this process: other load on the machine does not count
    assert main(["show", str(LADDER), "--power"]) == 0
    elapsed = time.process_time() - t0
    out = capsys.readouterr().out
    assert "20 states, 0 algebraic" in out
    assert "der(phi[1]) = V - R[1]*phi[1]/L[1] - q[1]/C[1]" in out
    assert "dissipated in res[10]" in out and "dissipated in load" in out
    assert "balance: holds identically" in out
    assert elapsed < 30, elapsed  # a few CPU seconds; a loose guard against quadratic blow-ups


def test_const_override_on_the_command_line(capsys):
    assert main(["show", str(LADDER), "--const", "N=3", "--raw"]) == 0
    out = capsys.readouterr().out
    assert "6 states, 0 algebraic" in out and "q[3]" in out and "q[4]" not in out


FLAT_BONDED = """model LadderBonded "one named 1-junction per section, bonded to the node before it and the node after it"
  const N = 3
  param R[1..N] = 0.2, L[1..N] = 0.5, C[1..N] = 0.1
  param R_load = 5.0
  input V
  effort_source src = V
  resistive res[k]: e = R[k]*f for k in 1..N
  effort_store ind[k](phi[k]) energy phi[k]^2/(2*L[k]) for k in 1..N
  flow_store cap[k](q[k]) energy q[k]^2/(2*C[k]) for k in 1..N
  resistive load: e = R_load*f
  junction sec[1]: common_flow(-src, res[1], ind[1], node[1])
  junction sec[k]: common_flow(-node[k-1], res[k], ind[k], node[k]) for k in 2..N
  junction node[k]: common_effort(cap[k]) for k in 1..N-1
  junction node[N]: common_effort(cap[N], load)
end
"""


def test_a_named_junction_bonds_to_the_junctions_before_and_after_it(tmp_path):
    """LANGUAGE.md §6: each appearance of a named junction in another's list is one bond, so node[k] (listed by
    sec[k] and sec[k+1]) has two bonds; the ladder equals the bundled one (N = 3) to round-off."""
    import numpy as np

    from pdsl.pipeline import CompileOptions, compile_model

    path = tmp_path / "bonded.phm"
    path.write_text(FLAT_BONDED)
    a = compile_model(path)
    b = compile_model(REPO_MODELS / "rlc_ladder.phm", CompileOptions(consts={"N": 3}))
    perm = [b.numeric.x_names.index(n) for n in a.numeric.x_names]
    rng = np.random.default_rng(5)
    for _ in range(5):
        x, u = rng.normal(size=len(perm)), rng.normal(size=1)
        xb = np.empty_like(x)
        xb[perm] = x
        fa = np.asarray(a.numeric.rhs(0.0, x, a.numeric.p_default, u), dtype=float).ravel()
        fb = np.asarray(b.numeric.rhs(0.0, xb, b.numeric.p_default, u), dtype=float).ravel()[perm]
        np.testing.assert_allclose(fa, fb, rtol=0, atol=1e-13)
    bonds = sorted(p.name for p in a.system.ports if p.role == "bond")
    assert bonds == ["node[1]", "node[1]@sec[2]", "node[2]", "node[2]@sec[3]", "node[3]"]
